"""fedcil-table1's two settings: the paper's per-client class draws and one class order."""

from fedretain.recipe.config import load_config
from fedretain.studies.presets import PRESETS, Data
from fedretain.studies.reproduce import as_args

ORDER = [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]


def plan_at(scale: str):
    return PRESETS.get("fedcil-table1").factory(scale, [0], Data("mnist", "", "mnist"))


def test_fedcil_table1_runs_the_papers_draws_and_one_class_order():
    plan = plan_at("small")
    drawn, fixed = plan.settings()
    assert drawn.endswith("drawn per client") and fixed.endswith("one class order")
    assert plan.methods(drawn) == plan.methods(fixed) and len(plan.methods(fixed)) == 7
    assert len(plan_at("medium").methods(fixed)) == 5  # FedLwF-2T and FedProx left out
    for spec in plan.runs:
        cfg = load_config(None, as_args({**plan.base, **spec.overrides, "name": spec.method}))
        assert cfg.scenario_params.get("order") == (ORDER if spec.setting == fixed else None)


def test_fedcil_forgetting_claim_reads_the_disjoint_tasks_only():
    plan = plan_at("ci")
    fixed = plan.settings()[1]
    (claim,) = [c for c in plan.claims if "forgets" in c.text]
    assert claim.text.endswith("one class order")

    class Values:  # FedAvg forgets most on the fixed order, least on the per-client draws
        def get(self, setting, method, metric):
            most = (setting == fixed) == (method == "FedAvg")
            return 0.8 if most else 0.1

    assert claim.check(Values()) is True
    assert "understated and can be negative" in " ".join(plan.notes)
    assert {c.text.rsplit(", ", 1)[1] for c in plan.claims} == {
        "classes drawn per client",
        "one class order",
    }
