"""forgetting-bench: its ladder, its tuning alike, and the leaderboard that names ties."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fedretain.studies.presets import PRESETS, Data, bench
from fedretain.studies.presets.bench import (
    BENCH_LADDER,
    BENCH_METHODS,
    BENCH_TUNED_ON,
    bench_paragraph,
    bench_tuned,
)

DATA = Data("fashion-mnist", "", "fashion-mnist")


def test_every_method_runs_on_every_rung_at_both_participations_but_tce_on_one_class():
    plan = PRESETS.get("forgetting-bench").factory("paper", [0, 1, 2], DATA)
    assert len(plan.runs) == (9 * 10 - 2) * 3  # FedAvg+TCE not on the two 1-shard settings
    assert len(plan.settings()) == 10
    tce = {s.setting for s in plan.runs if s.method == "FedAvg+TCE"}
    assert tce == set(plan.settings()) - {"1 shard, 10 %", "1 shard, full"}
    assert any("FedAvg+TCE is not run on the 1-shard rungs" in n for n in plan.notes)
    for spec in plan.runs:
        cfg = {**plan.base, **spec.overrides}
        rung, share = spec.setting.split(", ")
        assert cfg["clients"] == 100
        assert cfg["clients_per_round"] == {"10 %": 10, "full": 100}[share]
        assert {k: cfg[k] for k in BENCH_LADDER[rung]} == BENCH_LADDER[rung]
        assert {k: cfg[k] for k in BENCH_METHODS[spec.method]} == BENCH_METHODS[spec.method]
        assert cfg["diagnostics"] == ["forgetting"]  # every run measures its forgetting
    assert {r.seed for r in plan.runs} == {0, 1, 2}


def test_every_method_is_tuned_on_the_same_grid_budget_and_a_seed_no_evaluation_uses():
    tune = PRESETS.get("forgetting-bench-tune").factory("small", [0], DATA)
    bench = PRESETS.get("forgetting-bench").factory("small", [0, 1, 2], DATA)
    assert {r.seed for r in tune.runs} == {100}
    assert not {r.seed for r in tune.runs} & {r.seed for r in bench.runs}
    assert {r.setting for r in tune.runs} == {BENCH_TUNED_ON}
    lrs = {m: {r.overrides["lr"] for r in tune.runs if r.method == m} for m in BENCH_METHODS}
    assert len({frozenset(x) for x in lrs.values()}) == 1  # the same learning rates for all
    for key in ("rounds", "clients", "local_steps", "batch_size", "model"):
        assert tune.base[key] == bench.base[key]  # the bench's own budget
    rung = next(r for r in bench.runs if r.setting == BENCH_TUNED_ON).overrides
    assert tune.base["clients_per_round"] == rung["clients_per_round"] == 2
    assert tune.base["partition.alpha"] == rung["partition.alpha"] == 0.1
    assert tune.base["val_fraction"] > 0


def test_the_committed_choices_reach_every_run_and_their_absence_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    chosen = {"FedProx": {"lr": 0.1, "algo.mu": 0.01}, "FedAvg": {"lr": 0.3}}
    entry = {m: {"chosen": c, "grid": {}, "points": 4, "edge": []} for m, c in chosen.items()}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps({"forgetting-bench": {"settings": {BENCH_TUNED_ON: entry}}}))
    assert {t.method: t.chosen for t in bench_tuned(path)} == chosen
    assert bench_tuned(tmp_path / "none.json") == []
    shipped = {t.method: t.chosen for t in bench_tuned()}  # the package's tuned.json
    assert set(shipped) == set(BENCH_METHODS)
    plan = PRESETS.get("forgetting-bench").factory("small", [0], DATA)
    for run in plan.runs:
        assert {k: run.overrides[k] for k in shipped[run.method]} == shipped[run.method]
    assert plan.tuning_note.startswith("Each method's learning rate and own hyper-parameter")
    monkeypatch.setattr(bench, "bench_tuned", lambda path=None: [])  # no study shipped
    plan = PRESETS.get("forgetting-bench").factory("small", [0], DATA)
    assert plan.tuning_note.startswith("Not tuned yet")
    assert plan.tuning_note in plan.notes


class Seeds:
    """Hand-made values: setting -> method -> metric -> each seed's value; ``get`` is the
    mean, as the report's view is."""

    def __init__(self, rows: dict[str, dict[str, dict[str, list[float]]]]) -> None:
        self.rows = rows

    def per_seed(self, setting: str, method: str, metric: str) -> list[float | None]:
        return list(self.rows.get(setting, {}).get(method, {}).get(metric, []))

    def get(self, setting: str, method: str, metric: str) -> float | None:
        values = self.per_seed(setting, method, metric)
        if not values or None in values:  # a seed without a result: no mean, as the report's
            return None
        return sum(values) / len(values)  # type: ignore[arg-type]


def leaderboard_rows(text: str, setting: str) -> dict[str, list[str]]:
    """The table under ``setting``'s heading line: method -> its cells."""
    lines = text.splitlines()
    start = next(i for i, x in enumerate(lines) if x.startswith(f"**{setting}**"))
    rows = {}
    for line in lines[start + 4 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[1]] = cells
    return rows


def test_each_settings_leaderboard_ranks_only_gaps_beyond_the_spread_and_names_ties():
    plan = PRESETS.get("forgetting-bench").factory("ci", [0, 1, 2], DATA)
    (setting,) = plan.settings()
    values = Seeds(
        {
            setting: {
                "GradMA": {"final": [0.74, 0.73, 0.75], "loss_increase": [0.5, 0.6, 0.55]},
                "FedAvg": {"final": [0.60, 0.62, 0.58], "loss_increase": [1.0, 1.1, 1.2]},
                "FedProx": {"final": [0.61, 0.60, 0.59], "loss_increase": [1.1, 1.0, 1.2]},
                "MOON": {"final": [0.70, None, 0.72]},  # a seed diverged: no mean
            }
        }
    )
    text = bench_paragraph(values, plan)
    assert f"**{setting}**: leading: GradMA. Forgot least: GradMA." in text
    rows = leaderboard_rows(text, setting)
    assert rows["GradMA"][:5] == ["1", "GradMA", "0.7400", "FedAvg and FedProx", "-"]
    # FedAvg and FedProx swap places by seed: a shared place, each named beside the other
    assert rows["FedAvg"][0] == rows["FedProx"][0] == "2="  # GradMA alone ranks above them
    assert rows["FedAvg"][4] == "FedProx" and rows["FedProx"][4] == "FedAvg"
    assert rows["FedAvg"][6] == "-" and rows["GradMA"][6] == "FedAvg and FedProx"
    assert rows["MOON"][:2] == ["-", "MOON"]
    assert rows["MOON"][2].startswith("no mean: 1 of 3 seeds without a result")


def test_a_place_below_another_needs_a_gap_beyond_the_spread_not_only_a_lower_mean():
    from fedretain.studies.presets.plan import Ranking

    # a ranks above c; b is indistinguishable from both: a and b share the first place, and
    # c is second (one method ranks above it)
    apart = {(x, y): (x, y) == ("a", "c") for x in "abc" for y in "abc"}
    order = Ranking("final", {"a": 0.8, "b": 0.75, "c": 0.7}, apart)
    assert order.places() == {"a": 1, "b": 1, "c": 2}
    assert order.tied_with("b") == ["a", "c"] and order.tied_with("a") == ["b"]


def test_a_setting_at_chance_or_on_one_seed_ranks_nothing():
    plan = PRESETS.get("forgetting-bench").factory("ci", [0], DATA)
    (setting,) = plan.settings()
    chance = Seeds({setting: {"FedAvg": {"final": [0.11]}, "MOON": {"final": [0.12]}}})
    assert "no method learned beyond chance; nothing is ranked" in bench_paragraph(chance, plan)
    one = Seeds({setting: {"FedAvg": {"final": [0.5]}, "MOON": {"final": [0.8]}}})
    text = bench_paragraph(one, plan)
    assert f"**{setting}**: leading: MOON and FedAvg." in text
    rows = leaderboard_rows(text, setting)
    assert rows["MOON"][0] == rows["FedAvg"][0] == "1="


def test_a_blown_up_loss_is_written_as_its_magnitude_not_as_twenty_digits():
    from fedretain.studies.reproduce.markdown import fmt

    assert fmt(1456581492992774656.0, "loss_increase") == "1.46e+18"
    assert fmt(0.25, "loss_increase") == "0.2500"
