"""The arithmetic of a preset at paper scale (fedretain.studies.reproduce.cost): FLOPs
and local steps counted on the real code, checked by hand on a model whose products are known."""

from __future__ import annotations

import json

import pytest

from fedretain.studies.presets import PRESETS
from fedretain.studies.reproduce.cost import (
    COST_FILE,
    H100_FP32,
    STEP_S,
    SUSTAINED,
    cost_key,
    preset_cost,
    read_costs,
    run_cost,
)

# logistic regression on MNIST's shape: one 784 x 10 product a sample forward (2 FLOPs a
# multiply-add), the same again backward for the weights' gradient (the inputs need none); the
# server's weighted mean of the clients' 7,850 parameters is one (1 x S) @ (S x 7,850) product
FORWARD = 2 * 784 * 10
MEAN = 2 * 7_850
LOGISTIC = {
    "dataset": "mnist",
    "model": "mlp",
    "model.hidden": [],
    "algorithm": "fedavg",
    "clients": 4,
    "clients_per_round": 2,
    "rounds": 3,
    "batch_size": 8,
    "eval_every": 1,
}


def test_a_fixed_number_of_local_steps_costs_batches_of_forward_and_backward() -> None:
    cost = run_cost({**LOGISTIC, "local_steps": 2})
    train = 3 * 2 * (2 * 8 * 2 * FORWARD + MEAN)  # rounds x clients x (steps x batch x ...)
    evals = 4 * 10_000 * FORWARD  # after rounds 0..3 (eval_every=1), MNIST's 10,000 tests
    assert cost.eval_flops == pytest.approx(evals)
    assert cost.flops == pytest.approx(train + evals)
    assert cost.steps == 3 * 2 * 2


def test_local_epochs_pass_over_each_clients_samples() -> None:
    # 4 clients of MNIST's 60,000 (iid): 15,000 samples, 1,875 batches of 8 an epoch
    cost = run_cost({**LOGISTIC, "local_epochs": 2, "eval_every": 3})
    train = 3 * 2 * (2 * 15_000 * 2 * FORWARD + MEAN)
    assert cost.eval_flops == pytest.approx(2 * 10_000 * FORWARD)  # rounds 0 and 3
    assert cost.flops - cost.eval_flops == pytest.approx(train)
    assert cost.steps == 3 * 2 * 2 * 1_875


def test_the_cost_key_ignores_what_changes_no_product() -> None:
    base = {**LOGISTIC, "local_steps": 2}
    assert cost_key({**base, "lr": 0.1, "seed": 1, "algo.mu": 0.01}) == cost_key(base)
    assert cost_key({**base, "model.hidden": [200]}) != cost_key(base)
    assert cost_key({**base, "algorithm": "fedreg"}) != cost_key(base)


def test_every_preset_has_its_committed_paper_scale_cost() -> None:
    costs = read_costs()
    assert list(costs) == list(PRESETS), f"run benchmarks/paper_cost.py to fill {COST_FILE}"
    written = json.loads(COST_FILE.read_text())
    assert written["rates"] == {
        "h100_fp32_flops": H100_FP32,
        "sustained_flops": SUSTAINED,
        "step_s": STEP_S,
    }
    for name, cost in costs.items():
        assert cost.runs > 0, name
        if not cost.counted:
            assert "not counted" in cost.text(), name
            continue
        assert cost.pflop > 0 and cost.steps > 0, name
        assert cost.hours_expected >= 3 * cost.hours_peak * (1 - 1e-12), name
        # the table's hours follow the rates it states (rewritten when they change)
        assert written["presets"][name]["hours_expected"] == pytest.approx(cost.hours_expected)


@pytest.mark.slow
def test_a_committed_cost_is_counted_again_the_same() -> None:
    committed = read_costs()["gradma-table2"]
    assert preset_cost("gradma-table2") == committed
