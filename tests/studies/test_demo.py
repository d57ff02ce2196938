"""The demo preset (`fedretain reproduce demo`, scripts/main.sh): its plan, its tuning and the
paragraph written from its numbers, ranking only beyond the seeds' spread and a practical
threshold."""

from __future__ import annotations

from fedretain.studies import presets
from fedretain.studies.presets import PRESETS, Data, demo_paragraph

DATA = Data("fashion-mnist", "", "fashion-mnist")
SETTING = presets.DEMO_SETTING


def test_the_demo_runs_every_method_on_three_seeds_at_small_scale():
    entry = PRESETS.get("demo")
    assert entry.meta["seeds"]["small"] >= 3
    plan = entry.factory("small", list(range(entry.meta["seeds"]["small"])), DATA)
    seeds = {m: {r.seed for r in plan.runs if r.method == m} for m in presets.DEMO_METHODS}
    assert all(s == {0, 1, 2} for s in seeds.values()), seeds


def test_the_demo_makes_no_claim_its_setting_cannot_decide():
    plan = PRESETS.get("demo").factory("small", [0, 1, 2], DATA)
    # every method reaches half of SGD's final accuracy in round 1: R_0.5 decides nothing
    assert "R_0.5" not in plan.metrics
    assert not any("R_0.5" in c.text for c in plan.claims)


def test_the_demo_ships_each_methods_tuned_values_from_its_grid():
    plan = PRESETS.get("demo").factory("small", [0], DATA)
    tuned = {t.method: t for t in plan.tuning}
    assert set(tuned) == set(presets.DEMO_METHODS)  # every method's learning rate is tuned
    for method, t in tuned.items():
        run = next(r for r in plan.runs if r.method == method)
        assert t.grid["lr"] == list(presets.DEMO_LRS)
        for key, value in t.chosen.items():
            assert run.overrides[key] == value and value in t.grid[key]
        own = presets.DEMO_GRIDS.get(method)
        assert set(t.grid) == {"lr", *([own[0]] if own else [])}
    assert "demo-tune" in plan.tuning_note and "tuning seed 100" in plan.tuning_note


def test_the_tuning_runs_on_a_seed_no_evaluation_uses():
    tune = PRESETS.get("demo-tune").factory("small", [0], DATA)
    demo = PRESETS.get("demo").factory("small", [0, 1, 2], DATA)
    assert {r.seed for r in tune.runs} == {100}
    assert not {r.seed for r in tune.runs} & {r.seed for r in demo.runs}
    points = {r.method for r in tune.runs}
    # every method gets the same learning rates, and each hyper-parameter four values
    assert len(points) == len(presets.DEMO_LRS) * (4 + 4 * len(presets.DEMO_GRIDS))


class Seeds:
    """Hand-made values of one setting: method -> metric -> each seed's value; ``get`` gives
    the mean, as the report's view does."""

    def __init__(self, rows: dict[str, dict[str, list[float]]]) -> None:
        self.rows = rows

    def per_seed(self, setting: str, method: str, metric: str) -> list[float | None]:
        return list(self.rows.get(method, {}).get(metric, []))

    def get(self, setting: str, method: str, metric: str) -> float | None:
        values = self.rows.get(method, {}).get(metric)
        return sum(values) / len(values) if values else None


def rows(final: dict[str, list[float]], forgetting: dict[str, list[float]]) -> Seeds:
    mb = {"MB_up": [10.0] * 3, "MB_down": [10.0] * 3}
    return Seeds(
        {
            m: {
                "final": f,
                "top": f,
                **mb,
                **({"loss_increase": forgetting[m]} if m in forgetting else {}),
            }
            for m, f in final.items()
        }
    )


PLAN = PRESETS.get("demo").factory("ci", [0, 1, 2], DATA)


def test_the_paragraph_ranks_only_pairs_beyond_the_spread_and_the_threshold():
    values = rows(
        {
            "GradMA": [0.74, 0.73, 0.75],  # above every other method on every seed
            "FedAvg": [0.600, 0.620, 0.580],  # these three swap places from seed to seed
            "FedProx": [0.610, 0.600, 0.590],
            "FedCurv": [0.595, 0.615, 0.600],
            "SGD": [0.30, 0.31, 0.29],
        },
        {"GradMA": [2.0, 2.1, 2.2], "FedAvg": [3.3, 3.4, 3.2], "FedProx": [3.2, 3.5, 3.3]},
    )
    text = demo_paragraph(values, PLAN)
    assert text.startswith("Final accuracy (the mean over the last 10 % of the evaluations): ")
    assert "GradMA 0.7400, FedCurv 0.6033, FedAvg 0.6000, FedProx 0.6000, SGD 0.3000" in text
    assert "No method ranks above GradMA." in text
    assert "GradMA ranks above FedCurv, FedAvg, FedProx and SGD" in text
    assert "GradMA is 14.00 points above FedAvg's 0.6000" in text
    ties = text.split("Indistinguishable: ")[1].split(".")[0]
    assert ties == "FedCurv and FedAvg; FedCurv and FedProx; FedAvg and FedProx"
    assert "no method forgot less than GradMA" in text  # lower on every seed
    assert "GradMA forgot less than FedAvg and FedProx" in text
    assert "Means over 3 seed(s)" in text and "1 point of accuracy" in text


def test_a_gap_on_every_seed_below_the_threshold_ranks_nothing():
    # FedProx (mu = 0.001) above FedAvg on every seed, by 0.0003 to 0.0026
    values = rows({"FedProx": [0.5649, 0.5508, 0.5918], "FedAvg": [0.5623, 0.5505, 0.5909]}, {})
    text = demo_paragraph(values, PLAN)
    said = text.split("Means over")[0]  # the rule's own statement aside
    assert "every pair is indistinguishable" in said and "ranks above" not in said


def test_one_seed_ranks_nothing():
    one = Seeds(
        {m: {"final": [x], "loss_increase": [x]} for m, x in (("FedAvg", 0.7), ("FedProx", 0.6))}
    )
    text = demo_paragraph(one, PLAN)
    said = text.split("Means over")[0]
    assert said.count("every pair is indistinguishable") == 2 and "ranks above" not in said


def test_the_paragraph_names_no_leader_at_chance_accuracy():
    values = rows({"GradMA": [0.13, 0.14, 0.15], "FedAvg": [0.10, 0.10, 0.11]}, {})
    text = demo_paragraph(values, PLAN)
    said = text.split("Means over")[0]
    assert text.startswith("No method learned beyond chance") and "ranks above" not in said
