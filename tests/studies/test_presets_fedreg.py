"""fedreg-table3 (CIFAR-100: ResNet-9 and a pre-trained transformer) and fedreg-table3-ct
(COVID-19 CT images): the paper's settings at paper scale, what is left out and why, and a
ci run of each on files the tests write."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
from PIL import Image

from fedretain.recipe.config import load_config
from fedretain.studies.presets import PRESETS, Data
from fedretain.studies.presets import fedreg_emnist as preset_em
from fedretain.studies.presets import fedreg_table3 as preset3
from fedretain.studies.reproduce import as_args, reproduce, resolve_data
from tests.data.test_data_cifar import write_cifar100

VERDICTS = ("**held**", "**did not hold**", "**undecided**")


def plan_of(name: str, scale: str, data: Data, seeds: int = 3):
    return PRESETS.get(name).factory(scale, list(range(seeds)), data)


def run_keys(plan, spec) -> dict:
    """The flat config keys of one run: the plan's base, then the run's own."""
    return {**plan.base, **spec.overrides}


def cifar100(folder: Path, weights: bool) -> Data:
    folder.mkdir(parents=True, exist_ok=True)
    if weights:
        (folder / preset3.VIT_WEIGHTS[0]).write_bytes(b"")  # only looked for, not read here
    return Data("cifar100", str(folder), "cifar100")


def write_ct(root: Path, groups: int = 4) -> Path:
    """A tiny COVID-CT-shaped image folder: two classes in train/ and test/, groups.csv."""
    rows = []
    for split, n in (("train", 4), ("test", 2)):
        for c, (name, shade) in enumerate((("CT_COVID", 40), ("CT_NonCOVID", 200))):
            (root / split / name).mkdir(parents=True)
            for i in range(n):
                Image.new("RGB", (40, 30), (shade, shade + i, shade)).save(
                    root / split / name / f"{i}.png"
                )
                if split == "train":
                    rows.append((f"{name}/{i}.png", str((i + c) % groups)))
    with open(root / preset3.CT_GROUPS, "w", newline="") as f:
        csv.writer(f).writerows([("path", "group"), *rows])
    return root


# ---------------------------------------------------------------------------- paper scale


def test_table3_paper_scale_runs_app_b2_settings_of_both_cifar100_columns(tmp_path):
    plan = plan_of("fedreg-table3", "paper", cifar100(tmp_path, weights=True))
    assert plan.settings() == [preset3.RESNET9_SETTING, preset3.VIT_SETTING]
    for setting in plan.settings():
        assert plan.methods(setting) == ["SGD", "FedAvg", "FedProx", "FedCurv", "FedReg"]
        for spec in (r for r in plan.runs if r.setting == setting):
            keys = run_keys(plan, spec)
            # §4.1: 50,000 clients of one image each (a random split); App. B.2: the rest
            assert keys["partition"] == "iid" and keys["clients"] == 50000
            for key, value in preset3.TABLE3_PAPER[setting].items():
                assert keys[key] == value, (setting, spec.method, key)
            for key, value in preset3.TABLE3_METHODS[setting][spec.method].items():
                assert keys[key] == value, (setting, spec.method, key)
            cfg = load_config(None, as_args({**keys, "name": spec.method}))
            assert cfg.dataset == "cifar100" and cfg.data_dir == str(tmp_path)
    vit = next(r for r in plan.runs if r.setting == preset3.VIT_SETTING)
    assert vit.overrides["model.weights"] == str(tmp_path / preset3.VIT_WEIGHTS[0])
    assert {r.seed for r in plan.runs} == {0, 1, 2} and len(plan.runs) == 2 * 5 * 3
    # the paper's numbers, once, from Table 3; SCAFFOLD's '-' cells are explained, not run
    for (setting, method), row in plan.paper.items():
        assert tuple(row.values()) == preset3.TABLE3[setting][method]
    assert "SCAFFOLD" not in {r.method for r in plan.runs}
    assert "too memory-consuming" in plan.left_out
    assert plan.reference == "SGD" and plan.chance == 0.01 and not plan.reasons
    assert len(plan.claims) == 5 and all(c.why_not for c in plan.claims)


def test_table3_without_the_vit_weights_runs_resnet9_and_says_what_to_provide(tmp_path):
    plan = plan_of("fedreg-table3", "paper", cifar100(tmp_path, weights=False))
    assert plan.settings() == [preset3.RESNET9_SETTING]
    assert {s for s, _ in plan.paper} == {preset3.RESNET9_SETTING}
    assert not any(preset3.VIT_SETTING in c.text for c in plan.claims)
    (reason,) = plan.reasons
    assert f"'{preset3.VIT_SETTING}' not run" in reason and preset3.VIT_WEIGHTS[0] in reason
    # a torch file of the other name counts too
    (tmp_path / preset3.VIT_WEIGHTS[1]).write_bytes(b"")
    assert preset3.vit_weights(Data("cifar100", str(tmp_path), "cifar100")) == (
        tmp_path / preset3.VIT_WEIGHTS[1]
    )
    assert preset3.vit_weights(Data("cifar100", "", "cifar100", missing="no files")) is None


def test_table3_small_trains_lenet5_on_the_papers_clients_and_leaves_the_vit_to_a_gpu(tmp_path):
    plan = plan_of("fedreg-table3", "small", cifar100(tmp_path, weights=True))
    assert plan.settings() == [preset3.RESNET9_SETTING] and len(plan.runs) == 5 * 3
    keys = run_keys(plan, plan.runs[0])
    assert keys["model"] == "lenet5" and keys["clients_per_round"] == 20
    assert keys["rounds"] == 100 and keys["clients"] == 50000
    assert keys["local_epochs"] == 10 and keys["batch_size"] == 1
    assert any("a GPU's work" in r for r in plan.reasons)
    assert all(c.why_not for c in plan.claims)


def test_table3_ct_paper_scale_runs_app_b2_settings(tmp_path):
    data = Data("imagefolder", str(tmp_path), "imagefolder")
    plan = plan_of("fedreg-table3-ct", "paper", data)
    assert plan.settings() == [preset3.CT_SETTING]
    assert plan.methods(preset3.CT_SETTING) == list(preset3.CT_METHODS)  # SCAFFOLD too
    for spec in plan.runs:
        keys = run_keys(plan, spec)
        assert keys["partition"] == "natural" and keys["dataset.groups_file"] == "groups.csv"
        for key, value in {**preset3.CT_PAPER, **preset3.CT_METHODS[spec.method]}.items():
            assert keys[key] == value, (spec.method, key)
        cfg = load_config(None, as_args({**keys, "name": spec.method}))
        assert cfg.model_params == {"norm": "group", "groups": 4, "pool": "flatten"}
        assert cfg.dataset_params == {"size": 224, "groups_file": "groups.csv"}
    assert {m: tuple(row.values()) for (_, m), row in plan.paper.items()} == preset3.TABLE3_CT
    assert plan.chance == 0.5 and plan.metrics == ["R_1", "final", "top"]
    small = plan_of("fedreg-table3-ct", "small", data)
    assert run_keys(small, small.runs[0])["dataset.size"] == 32
    assert run_keys(small, small.runs[0])["local_epochs"] == 2


# ------------------------------------------------------------------------------- ci scale


def check_report(out: Path, name: str, data_dirs: list[str]) -> str:
    text = (out / "report.md").read_text()
    entry = PRESETS.get(name)
    data = resolve_data(entry.meta["dataset"], entry.meta.get("standin"), data_dirs)
    plan = entry.factory("ci", [0], data)
    assert not data.missing
    assert f"Runs: {len(plan.runs)} of {len(plan.runs)} finished" in text
    assert "Runs that failed" not in text
    for claim in plan.claims:
        row = next(line for line in text.splitlines() if f"| {claim.text} |" in line)
        assert any(v in row for v in VERDICTS), row
    for image in re.findall(r"\]\(([^)]+\.png)\)", text):
        assert (out / image).is_file(), image
    return text


def test_table3_runs_at_ci_on_tiny_cifar100_files(tmp_path):
    write_cifar100(tmp_path / "cifar100")
    dirs = [f"cifar100={tmp_path / 'cifar100'}"]
    reproduce(["fedreg-table3"], tmp_path / "out", scale="ci", data_dirs=dirs, echo=lambda s: 0)
    text = check_report(tmp_path / "out", "fedreg-table3", dirs)
    assert f"### {preset3.VIT_SETTING}" in text and "SCAFFOLD" in text  # named as left out


def test_table3_ct_runs_at_ci_on_a_tiny_image_folder(tmp_path):
    dirs = [f"imagefolder={write_ct(tmp_path / 'ct')}"]
    reproduce(["fedreg-table3-ct"], tmp_path / "out", scale="ci", data_dirs=dirs, echo=lambda s: 0)
    check_report(tmp_path / "out", "fedreg-table3-ct", dirs)


@pytest.mark.parametrize("name", ["fedreg-table3", "fedreg-table3-ct"])
def test_without_files_the_table3_presets_read_the_digits_at_ci(name):
    paper = PRESETS.get(name).meta["dataset"]
    plan = plan_of(name, "ci", Data(paper, "", paper, missing="no files here"), seeds=1)
    for spec in plan.runs:
        cfg = load_config(None, as_args({**run_keys(plan, spec), "name": spec.method}))
        assert cfg.dataset == "digits" and not cfg.dataset_params and cfg.partition == "iid"
    assert "scikit-learn's 8x8 digits" in plan.reasons[0]


@pytest.mark.parametrize("name", ["fedreg-table3", "fedreg-table3-ct"])
def test_without_files_the_table3_presets_say_what_to_provide(tmp_path, name, monkeypatch):
    monkeypatch.setenv("FEDRETAIN_DATA_HOME", str(tmp_path / "home"))  # nothing fetched
    reproduce([name], tmp_path / "out", scale="small", echo=lambda s: 0)
    text = (tmp_path / "out" / "report.md").read_text()
    assert "Not run: the data are missing" in text and "not run (data missing)" in text
    if name == "fedreg-table3-ct":
        assert "train/CT_COVID/" in text and "groups.csv" in text
    else:
        assert "cifar-100-python" in text
    assert not list((tmp_path / "out").glob("**/summary.json"))


# ------------------------------------------------------------------- Table 1, EMNIST columns


def test_table1_emnist_paper_scale_runs_app_b2_settings():
    plan = plan_of("fedreg-table1-emnist", "paper", Data("emnist", "", "emnist"))
    assert plan.methods(preset_em.EMNIST_SETTING) == list(preset_em.EMNIST_METHODS)
    for spec in plan.runs:
        keys = run_keys(plan, spec)
        for key, value in {
            **preset_em.EMNIST_PAPER,
            **preset_em.EMNIST_METHODS[spec.method],
        }.items():
            assert keys[key] == value, (spec.method, key)
        cfg = load_config(None, as_args({**keys, "name": spec.method}))
        assert cfg.dataset_params == {"split": "digits"} and cfg.clients == 10000
    assert {m: tuple(row.values()) for (_, m), row in plan.paper.items()} == preset_em.TABLE1_EMNIST
    assert not plan.reasons and len(plan.claims) == 4


def test_table1_emnist_with_fashion_mnist_standing_in_keeps_24_images_per_client():
    data = Data("fashion-mnist", "", "emnist", note="missing", samples=60000)
    plan = plan_of("fedreg-table1-emnist", "small", data)
    keys = run_keys(plan, plan.runs[0])
    assert keys["clients"] == 2500 and keys["partition.per_client"] == 24
    assert "dataset.split" not in keys and keys["model"] == "mlp" and keys["rounds"] == 100
    assert keys["local_epochs"] == 20 and keys["batch_size"] == 24
    assert any("fashion-mnist stands in for emnist: 2,500 clients" in r for r in plan.reasons)
