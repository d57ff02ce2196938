"""FedCIL's other presets: Table 1's EMNIST-Letters, EMNIST-Balanced and CIFAR-10 columns and
Table 2's ablation on EMNIST-Letters (fedretain/studies/presets/fedcil.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fedretain.recipe.config import COMPONENTS, Config, load_config
from fedretain.registry import kind
from fedretain.studies.presets import PRESETS, Data
from fedretain.studies.presets.fedcil import (
    FEDCIL_ABLATIONS,
    FEDCIL_COLUMNS,
    FEDCIL_PAPER,
    FEDCIL_PLAIN,
    FEDCIL_REPLAYS,
    FEDCIL_TABLE1_METHODS,
    TABLE2_MODULES,
)
from fedretain.studies.reproduce import as_args, reproduce

COLUMNS = {f"fedcil-{c}": c for c in FEDCIL_COLUMNS}
NEW = [*COLUMNS, "fedcil-table2"]


def plan_at(name: str, scale: str, seeds: int = 1):
    dataset = PRESETS.get(name).meta["dataset"]
    return PRESETS.get(name).factory(scale, list(range(seeds)), Data(dataset, "", dataset))


def configs(plan) -> list[tuple[Any, Config]]:
    return [
        (spec, load_config(None, as_args({**plan.base, **spec.overrides, "name": spec.method})))
        for spec in plan.runs
    ]


def read(cfg: Config, key: str) -> Any:
    """A flat config key (``scenario.tasks``, ``lr``) as the config holds it."""
    if "." not in key:
        return getattr(cfg, key)
    prefix, rest = key.split(".", 1)
    return getattr(cfg, COMPONENTS[prefix].params_field)[rest]


@pytest.mark.parametrize("name", NEW)
def test_paper_scale_runs_carry_the_papers_setting(name):
    plan = plan_at(name, "paper", seeds=3)
    assert len(plan.runs) == 3 * len(plan.methods(plan.settings()[0]))
    for spec, cfg in configs(plan):
        for key, (value, where) in FEDCIL_PAPER.items():
            assert read(cfg, key) == value, (spec.method, key, where)
        assert cfg.scenario == "class_incremental" and "order" not in cfg.scenario_params
        # FedCIL's consolidation and DGR's GAN at the implementation's defaults (100 steps of
        # 32, width 64: the reference's)
        assert "consolidation_steps" not in cfg.algo or cfg.algo["consolidation_steps"] == 0
        assert "width" not in cfg.replay_params and "width" not in cfg.model_params
    assert not [r for r in plan.reasons if r.startswith("scale=")]


def test_every_paper_value_says_where_it_comes_from():
    for key, (_, where) in FEDCIL_PAPER.items():
        assert where.startswith(("§", "lost from")), key
    assert FEDCIL_PAPER["rounds"][0] == (
        FEDCIL_PAPER["scenario.tasks"][0] * FEDCIL_PAPER["scenario.rounds_per_task"][0]
    )


@pytest.mark.parametrize("name", list(COLUMNS))
def test_a_column_runs_table1s_eight_methods_on_its_dataset(name):
    column, plan = COLUMNS[name], plan_at(name, "small", seeds=3)
    (setting,) = plan.settings()
    label, keys, classes = FEDCIL_COLUMNS[column]
    assert setting.startswith(label) and setting.endswith("drawn per client")
    assert plan.methods(setting) == list(FEDCIL_TABLE1_METHODS) and len(plan.runs) == 24
    assert plan.chance == pytest.approx(1 / classes)
    for spec, cfg in configs(plan):
        assert cfg.dataset == PRESETS.get(name).meta["dataset"]
        assert cfg.dataset_params.get("split") == keys.get("dataset.split")
        assert cfg.algorithm == FEDCIL_TABLE1_METHODS[spec.method]["algorithm"]
        assert cfg.replay == FEDCIL_TABLE1_METHODS[spec.method].get("replay", "")
        assert cfg.rounds == 15 and cfg.local_steps == 30 and cfg.lr == 1e-3
    # no stand-in: Fashion-MNIST cannot hold the EMNIST splits, and for CIFAR-10 it would
    # rerun fedcil-table1
    assert "standin" not in PRESETS.get(name).meta
    cifar = plan_at("fedcil-cifar10", "paper")
    assert any("CIFAR-10 a mini-batch size of its own" in r for r in cifar.reasons)
    assert not any("mini-batch" in r for r in plan_at("fedcil-emnist-letters", "paper").reasons)


class Means:
    """A claim's values: ``avg_acc`` of each method from ``acc``."""

    def __init__(self, acc: dict[str, float]):
        self.acc = acc

    def get(self, setting: str, method: str, metric: str) -> float | None:
        return self.acc.get(method) if metric == "avg_acc" else None


@pytest.mark.parametrize("name", list(COLUMNS))
def test_column_claims_are_the_prose_ordering(name):
    plan = plan_at(name, "ci")
    best, replay_claim = plan.claims
    ordered = {m: 0.2 for m in FEDCIL_PLAIN} | {m: 0.5 for m in FEDCIL_REPLAYS} | {"FedCIL": 0.7}
    assert best.check(Means(ordered)) is True and replay_claim.check(Means(ordered)) is True
    lwf_ahead = ordered | {"FedLwF-2T": 0.6}  # one plain baseline above the replays
    assert best.check(Means(lwf_ahead)) is True and replay_claim.check(Means(lwf_ahead)) is False
    assert best.check(Means(ordered | {"FedProx+DGR": 0.8})) is False
    assert best.check(Means({"FedCIL": 0.7})) is None  # a baseline's value missing


def test_table2_switches_each_module_off_through_fedcils_options():
    plan = plan_at("fedcil-table2", "small")
    (setting,) = plan.settings()
    assert setting.startswith("EMNIST-Letters")
    assert plan.methods(setting) == list(FEDCIL_ABLATIONS)
    # ci's smoke test: the four rows the claims read
    assert plan_at("fedcil-table2", "ci").methods(setting) == TABLE2_MODULES
    built = {}
    for spec, cfg in configs(plan):
        assert cfg.algorithm == "fedcil" and cfg.dataset_params["split"] == "letters"
        algo = kind("algorithm").build("fedcil", cfg.algo, prefix="algo")
        built[spec.method] = algo.hparams
    terms = ("kl_real", "kl_generators", "ce_global")
    assert built["FedCIL"]["consolidation_steps"] > 0
    assert all(built["FedCIL"][t] == 1 for t in terms)
    assert built["FedCIL w/o model consolidation"]["consolidation_steps"] == 0
    assert all(built["FedCIL w/o model consolidation"][t] == 1 for t in terms)
    assert built["FedCIL w/o consistency enforcement"]["consolidation_steps"] > 0
    assert all(built["FedCIL w/o consistency enforcement"][t] == 0 for t in terms)
    assert built["FedCIL w/o both"]["consolidation_steps"] == 0
    assert all(built["FedCIL w/o both"][t] == 0 for t in terms)
    for t in terms:  # each consistency term alone
        alone = built[f"FedCIL w/o {t}"]
        assert alone[t] == 0 and all(alone[o] == 1 for o in terms if o != t)
        assert alone["consolidation_steps"] == built["FedCIL"]["consolidation_steps"]


def test_table2_claims_read_each_module_both_ways():
    plan = plan_at("fedcil-table2", "ci")
    assert len(plan.claims) == 4  # the per-term rows are shown, not claimed
    full = {
        "FedCIL": 0.7,
        "FedCIL w/o model consolidation": 0.6,
        "FedCIL w/o consistency enforcement": 0.55,
        "FedCIL w/o both": 0.5,
    }
    assert all(c.check(Means(full)) is True for c in plan.claims)
    useless = full | {"FedCIL w/o model consolidation": 0.75}  # consolidation hurts
    assert [c.check(Means(useless)) for c in plan.claims] == [False, True, True, True]
    assert "missing from our copy" in " ".join(plan.notes) + plan.source


def test_presets_without_their_files_say_the_data_are_missing(tmp_path: Path):
    empty = tmp_path / "empty"
    empty.mkdir()
    dirs = [f"emnist={empty}", f"cifar10={empty}"]
    for name in NEW:
        reproduce([name], tmp_path / name, scale="ci", data_dirs=dirs, echo=lambda s: None)
        text = (tmp_path / name / "report.md").read_text()
        assert "Not run: the data are missing" in text and "not run (data missing)" in text
        assert not list((tmp_path / name).glob("**/summary.json"))
