"""MimeLite against numbers computed by hand on the one-weight model of tests/tiny.py.

Gradients at weight ``w``: client 0 ``w − 2``; client 1 ``4w`` (whole data and every batch:
``batch_size = 2`` makes each epoch one full-batch step). ``lr = 0.1``, ``β = 0.9``; the
local direction is ``0.1 g + 0.9 m``.
"""

import pytest
import torch

from fedretain.algorithms import build_algorithm
from fedretain.core.algorithm import RoundInfo
from fedretain.core.optim import sgd
from fedretain.errors import ConfigError
from tests.tiny import run_rounds, tiny_engine, train_one, w


def test_two_rounds_by_hand():
    # round 1 (x = 1, m = 0), two steps:
    #   client 0: g = −1 -> 1.01; g = −0.99 -> 1.0199
    #   client 1: g = 4 -> 0.96; g = 3.84 -> 0.9216
    #   x = (1.0199 + 0.9216)/2 = 0.97075; full gradients at x = 1: −1, 4: m = 0.1·1.5 = 0.15
    engine = tiny_engine(build_algorithm("mimelite"), epochs=2)
    state = run_rounds(engine, 1)
    assert w(state) == pytest.approx(0.97075, abs=1e-6)
    assert w(state, "m") == pytest.approx(0.15, abs=1e-6)
    # round 2 (x = 0.97075, m = 0.15 frozen during both steps):
    #   client 0: g = −1.02925, d = 0.032075 -> 0.9675425;
    #             g = −1.0324575, d = 0.03175425 -> 0.964367075
    #   client 1: g = 3.883, d = 0.5233 -> 0.91842; g = 3.67368, d = 0.502368 -> 0.8681832
    #   x = (0.964367075 + 0.8681832)/2 = 0.9162751375
    #   full gradients at 0.97075: −1.02925, 3.883: m = 0.1·1.426875 + 0.9·0.15 = 0.2776875
    state, _ = engine.run_round(state, 1, 0.1, per_round=2)
    assert w(state) == pytest.approx(0.9162751375, abs=1e-6)
    assert w(state, "m") == pytest.approx(0.2776875, abs=1e-6)


def test_weighted_means_by_sample_counts():
    # one step each: 1.01 and 0.96; x = (1.01 + 2·0.96)/3; m = 0.1·(−1 + 2·4)/3
    state = run_rounds(tiny_engine(build_algorithm("mimelite", weighted=True)), 1)
    assert w(state) == pytest.approx((1.01 + 2 * 0.96) / 3, abs=1e-6)
    assert w(state, "m") == pytest.approx(0.1 * 7 / 3, abs=1e-6)


def test_uploads_the_full_gradient_at_the_received_model():
    algo = build_algorithm("mimelite")
    engine = tiny_engine(algo, epochs=3)
    params, buffers = engine.task.init()
    state = algo.server_init(params, buffers)
    info = RoundInfo(round=0, num_clients=2, clients=(1,), lr=0.1, seed=0)
    uplink, _ = train_one(engine, 1, algo.broadcast(state, info), info)
    assert float(uplink["grad"]["weight"].reshape(())) == pytest.approx(4.0)  # 4·1, not at y
    assert set(uplink) == {"y", "grad", "buffers"}


def test_twice_fedavg_bytes_each_way():
    mime = tiny_engine(build_algorithm("mimelite"))
    fedavg = tiny_engine(build_algorithm("fedavg"))
    run_rounds(mime, 2)
    run_rounds(fedavg, 2)
    assert mime.ledger.bytes_up == 2 * fedavg.ledger.bytes_up
    assert mime.ledger.bytes_down == 2 * fedavg.ledger.bytes_down


def test_zero_beta_is_fedavg():
    a = run_rounds(tiny_engine(build_algorithm("mimelite", beta=0.0), epochs=2), 2)
    b = run_rounds(tiny_engine(build_algorithm("fedavg", weighted=False), epochs=2), 2)
    assert w(a) == pytest.approx(w(b), abs=1e-6)


def test_server_update_by_hand():
    algo = build_algorithm("mimelite", beta=0.5)
    state = algo.server_init({"p": torch.zeros(2)}, {})
    state["m"] = {"p": torch.tensor([2.0, -2.0])}
    uplinks = {
        "y": {"p": torch.tensor([[1.0, 2.0], [3.0, 4.0]])},
        "grad": {"p": torch.tensor([[1.0, 0.0], [3.0, 2.0]])},
        "buffers": {},
    }
    info = RoundInfo(round=0, num_clients=5, clients=(0, 3), lr=0.1, seed=0)
    new, _ = algo.aggregate(state, uplinks, torch.tensor([1.0, 9.0]), info)
    assert new["x"]["p"].tolist() == pytest.approx([2.0, 3.0])
    assert new["m"]["p"].tolist() == pytest.approx([0.5 * 2 + 0.5 * 2, 0.5 * 1 - 0.5 * 2])


def test_bad_settings_are_named():
    with pytest.raises(ConfigError, match=r"algo\.beta must be in \[0, 1\)"):
        build_algorithm("mimelite", beta=1.0)
    with pytest.raises(ConfigError, match="plain local SGD"):
        build_algorithm("mimelite", opt=sgd(momentum=0.9))
