"""The demo preset (`fedretain reproduce demo`, scripts/main.sh): its plan and the paragraph
written from its numbers, ranking only beyond the seeds' spread."""

from __future__ import annotations

from fedretain.experiments import presets
from fedretain.experiments.presets import PRESETS, Data, demo_paragraph

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


def test_the_demo_ships_each_methods_tuned_value_from_its_grid():
    plan = PRESETS.get("demo").factory("small", [0], DATA)
    for method, (key, grid) in presets.DEMO_GRIDS.items():
        run = next(r for r in plan.runs if r.method == method)
        assert run.overrides[key] == presets.DEMO_TUNED[method] and run.overrides[key] in grid
    assert any("demo-tune" in note for note in plan.notes)


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


def test_the_paragraph_says_within_noise_for_methods_within_the_seeds_spread():
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
    assert text.startswith("**GradMA** led with a final accuracy of 0.7400")
    assert "14.00 points above FedAvg's 0.6000" in text
    top3 = "FedCurv (0.6033), FedAvg (0.6000), FedProx (0.6000), within noise of FedCurv"
    assert f"Then came {top3}; then SGD (0.3000)." in text
    assert "**GradMA** (2.1000) forgot least (FedAvg: 3.3000)" in text  # lower on every seed
    assert "FedAvg (3.3000), FedProx (3.3333) forgot most, within noise of each other" in text
    assert "Means over 3 seed(s)" in text


def test_one_seed_ranks_nothing():
    one = Seeds(
        {m: {"final": [x], "loss_increase": [x]} for m, x in (("FedAvg", 0.7), ("FedProx", 0.6))}
    )
    text = demo_paragraph(one, PLAN)
    assert "All 2 methods ended within noise of each other" in text and "led" not in text
    assert "every method with local training within noise" in text


def test_the_paragraph_names_no_leader_at_chance_accuracy():
    values = rows({"GradMA": [0.13, 0.14, 0.15], "FedAvg": [0.10, 0.10, 0.11]}, {})
    text = demo_paragraph(values, PLAN)
    assert text.startswith("No method learned beyond chance") and "led" not in text
