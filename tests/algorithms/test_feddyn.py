"""FedDyn against numbers computed by hand on the one-weight model of tests/tiny.py.

Local gradients of the task loss at weight ``w``: client 0 ``w − 2``; client 1 ``4w``.
``lr = 0.1``; with ``batch_size = 2`` every epoch is one full-batch step.
"""

from dataclasses import replace

import pytest
import torch

from fedretain.algorithms import build_algorithm
from fedretain.algorithms.feddyn import dyn_penalty
from fedretain.core.algorithm import RoundInfo
from fedretain.core.client import LocalSpec
from fedretain.errors import ConfigError
from tests.tiny import run_rounds, tiny_engine, w


def _value(tree, key):
    return float(tree[key]["weight"].reshape(()))


def test_penalty_linear_and_quadratic_terms_by_hand():
    theta = torch.tensor([1.0, 2.0], requires_grad=True)
    state = {
        "down": {"x": {"w": torch.tensor([0.0, 1.0])}},
        "client": {"g_i": {"w": torch.tensor([0.5, -1.0])}},
    }
    value = dyn_penalty(0.1)({"w": theta}, state)
    # −⟨g, θ⟩ + α/2 ‖θ − x‖² = −(0.5 − 2) + 0.05 · 2
    assert float(value.detach()) == pytest.approx(1.6, abs=1e-6)
    (g,) = torch.autograd.grad(value, theta)
    # −g + α (θ − x)
    torch.testing.assert_close(g, torch.tensor([-0.4, 1.1]))


def test_two_rounds_by_hand():
    engine = tiny_engine(build_algorithm("feddyn", alpha=0.1), epochs=2)
    state = run_rounds(engine, 1)
    # round 1 (g_i = 0, x = 1): step 1 as FedAvg: 1.1 and 0.6; step 2 adds α(θ − 1):
    #   client 0: 1.1 − 0.1·(−0.9 + 0.01) = 1.189; client 1: 0.6 − 0.1·(2.4 − 0.04) = 0.364
    #   g_0 = −0.1·0.189 = −0.0189, g_1 = −0.1·(−0.636) = 0.0636
    #   h = −(0.1/2)(0.189 − 0.636) = 0.02235; x = (1.189 + 0.364)/2 − h/0.1 = 0.553
    assert _value(engine.store[0], "g_i") == pytest.approx(-0.0189, abs=1e-6)
    assert _value(engine.store[1], "g_i") == pytest.approx(0.0636, abs=1e-6)
    assert w(state, "h") == pytest.approx(0.02235, abs=1e-6)
    assert w(state) == pytest.approx(0.553, abs=1e-6)
    # round 2, one step from x = 0.553: the linear term −⟨g_i, θ⟩ adds −g_i to the gradient
    #   client 0: 0.553 − 0.1·(−1.447 + 0.0189) = 0.69581
    #   client 1: 0.553 − 0.1·(2.212 − 0.0636) = 0.33816
    #   h = 0.02235 − 0.05·(0.14281 − 0.21484) = 0.0259515
    #   x = (0.69581 + 0.33816)/2 − 0.259515 = 0.25747
    engine.clients = replace(engine.clients, local=LocalSpec(batch_size=2, epochs=1))
    state, _ = engine.run_round(state, 1, 0.1, per_round=2)
    assert w(state, "h") == pytest.approx(0.0259515, abs=1e-6)
    assert w(state) == pytest.approx(0.25747, abs=1e-6)
    assert _value(engine.store[0], "g_i") == pytest.approx(-0.0189 - 0.014281, abs=1e-6)
    assert _value(engine.store[1], "g_i") == pytest.approx(0.0636 + 0.021484, abs=1e-6)


def test_server_divides_by_all_clients_and_averages_the_round():
    algo = build_algorithm("feddyn", alpha=0.5)
    state = algo.server_init({"weight": torch.ones(1)}, {})
    uplinks = {"y": {"weight": torch.tensor([[2.0], [4.0]])}, "buffers": {}}
    info = RoundInfo(round=0, num_clients=4, clients=(0, 1), lr=0.1, seed=0)
    new, _ = algo.aggregate(state, uplinks, torch.tensor([1.0, 9.0]), info)
    # h = −(0.5/4)·((2 − 1) + (4 − 1)) = −0.5; x = mean(2, 4) − h/0.5 = 3 + 1 (sample counts unused)
    assert float(new["h"]["weight"]) == pytest.approx(-0.5)
    assert float(new["x"]["weight"]) == pytest.approx(4.0)


def test_payloads_are_fedavgs():
    dyn = tiny_engine(build_algorithm("feddyn"))
    avg = tiny_engine(build_algorithm("fedavg"))
    run_rounds(dyn, 2)
    run_rounds(avg, 2)
    assert dyn.ledger.state() == avg.ledger.state()


def test_bad_alpha():
    with pytest.raises(ConfigError, match=r"algo\.alpha must be > 0"):
        build_algorithm("feddyn", alpha=0.0)
