"""MIFA and MIFAM against numbers computed by hand on the one-weight model of tests/tiny.py.

Local gradients at weight ``w``: client 0 ``w − 2``; client 1 ``4w``. ``lr = 0.1``, one epoch,
so from ``w = 1`` the clients return ``y0 = 1.1`` and ``y1 = 0.6``. Tests of partial
participation call ``aggregate`` directly with hand-made uplinks and a ``RoundInfo``.
"""

import pytest
import torch

from fedretain.algorithms.fedavg import fedavg
from fedretain.algorithms.mifa import mifa, mifam
from fedretain.core.algorithm import RoundInfo
from fedretain.core.tree import flatten
from fedretain.engines.schedule import sample_clients
from fedretain.experiments.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from tests.tiny import run_rounds, tiny_engine, w


def scalar_state(algo, x: float) -> dict:
    return algo.server_init({"weight": torch.tensor([[x]])}, {})


def uplinks(ys: list[float], buffers: list[float] | None = None) -> dict:
    up = {"y": {"weight": torch.tensor(ys).reshape(-1, 1, 1)}, "buffers": {}}
    if buffers is not None:
        up["buffers"] = {"running_mean": torch.tensor(buffers)}
    return up


def aggregate(algo, state, ys, clients, num_clients, lr=0.1, buffers=None, rnd=0):
    info = RoundInfo(round=rnd, num_clients=num_clients, clients=clients, lr=lr, seed=0)
    new, _ = algo.aggregate(state, uplinks(ys, buffers), torch.ones(len(ys)), info)
    return new


def rows(state: dict, key: str) -> list[float]:
    return [round(v, 6) for v in state[key]["weight"].reshape(-1).tolist()]


def test_mifa_with_every_client_is_the_unweighted_fedavg_mean():
    # G0 = (1.1 − 1)/0.1 = 1, G1 = (0.6 − 1)/0.1 = −4; x = 1 + 0.1·(1 − 4)/2 = 0.85
    # = (1.1 + 0.6)/2, the unweighted mean (the weighted one is 0.766667)
    state = run_rounds(tiny_engine(mifa()), 1)
    assert w(state) == pytest.approx(0.85, abs=1e-6)
    assert rows(state, "G") == pytest.approx([1.0, -4.0], abs=1e-5)
    assert state["seen"].tolist() == [True, True]
    a = run_rounds(tiny_engine(mifa()), 3)
    b = run_rounds(tiny_engine(fedavg(weighted=False)), 3)
    assert w(a) == pytest.approx(w(b), abs=1e-6)


def test_mifa_divides_by_all_clients_not_the_active_ones():
    # N = 4, clients 1 and 3 active from x = 0: G1 = 0.2/0.1 = 2, G3 = 0.6/0.1 = 6
    # x = 0 + 0.1·(2 + 6)/4 = 0.2 (biased FedAvg, dividing by 2: 0.4 = mean y)
    # buffers: mean over the active clients, (1 + 3)/2 = 2
    algo = mifa()
    new = aggregate(algo, scalar_state(algo, 0.0), [0.2, 0.6], (1, 3), 4, buffers=[1.0, 3.0])
    assert w(new) == pytest.approx(0.2, abs=1e-6)
    assert rows(new, "G") == pytest.approx([0.0, 2.0, 0.0, 6.0], abs=1e-6)
    assert new["seen"].tolist() == [False, True, False, True]
    assert float(new["buffers"]["running_mean"]) == pytest.approx(2.0)


def test_mifa_reuses_an_absent_clients_stale_entry():
    # round 0, N = 2, both active from x = 0, lr 0.1, y = (0.1, −0.4): G = (1, −4),
    #   x = 0.1·(1 − 4)/2 = −0.15
    # round 1, only client 0, lr 0.05, y0 = −0.05: G0 = (−0.05 + 0.15)/0.05 = 2, G1 = −4 (stale)
    #   x = −0.15 + 0.05·(2 − 4)/2 = −0.2 (without client 1's entry: −0.15 + 0.05·2/2 = −0.1)
    algo = mifa()
    state = aggregate(algo, scalar_state(algo, 0.0), [0.1, -0.4], (0, 1), 2)
    assert w(state) == pytest.approx(-0.15, abs=1e-6)
    state = aggregate(algo, state, [-0.05], (0,), 2, lr=0.05, rnd=1)
    assert rows(state, "G") == pytest.approx([2.0, -4.0], abs=1e-5)
    assert w(state) == pytest.approx(-0.2, abs=1e-6)


def test_mifa_stale_entry_through_the_engine():
    # round 0, both clients: x = 0.85, G = (1, −4)
    # round 1, one client (seed 0 samples client 1): y1 = 0.85 − 0.1·3.4 = 0.51,
    #   G1 = (0.51 − 0.85)/0.1 = −3.4, G0 = 1 kept; x = 0.85 + 0.1·(1 − 3.4)/2 = 0.73
    assert sample_clients(2, 1, 0, 1).tolist() == [1]
    engine = tiny_engine(mifa())
    state = run_rounds(engine, 1)
    state, _ = engine.run_round(state, 1, 0.1, per_round=1)
    assert rows(state, "G") == pytest.approx([1.0, -3.4], abs=1e-5)
    assert w(state) == pytest.approx(0.73, abs=1e-6)


def test_mifa_wait_all_holds_x_until_every_client_was_seen():
    # direct: N = 2, x = 0. round 0, client 0 only, y0 = 0.1: G = (1, 0), x stays 0
    #   (without wait_all: x = 0.1·1/2 = 0.05)
    # round 1, client 1 only, y1 = −0.4: G = (1, −4), all seen, x = 0.1·(1 − 4)/2 = −0.15
    algo = mifa(wait_all=True)
    state = aggregate(algo, scalar_state(algo, 0.0), [0.1], (0,), 2)
    assert w(state) == 0.0
    assert rows(state, "G") == pytest.approx([1.0, 0.0], abs=1e-6)
    assert state["seen"].tolist() == [True, False]
    no_wait = aggregate(mifa(), scalar_state(algo, 0.0), [0.1], (0,), 2)
    assert w(no_wait) == pytest.approx(0.05, abs=1e-6)
    state = aggregate(algo, state, [-0.4], (1,), 2, rnd=1)
    assert w(state) == pytest.approx(-0.15, abs=1e-6)


def test_mifa_wait_all_through_the_engine():
    # round 0 samples client 1 alone: y1 = 0.6, G = (0, −4), x stays 1
    #   (without wait_all: x = 1 + 0.1·(−4)/2 = 0.8)
    # round 1 with both: G = (1, −4), x = 1 + 0.1·(1 − 4)/2 = 0.85
    engine = tiny_engine(mifa(wait_all=True))
    state = engine.algorithm.server_init(*engine.task.init())
    state, _ = engine.run_round(state, 0, 0.1, per_round=1)
    assert state["seen"].tolist() == [False, True]
    assert w(state) == 1.0
    assert rows(state, "G") == pytest.approx([0.0, -4.0], abs=1e-5)
    state, _ = engine.run_round(state, 1, 0.1, per_round=2)
    assert w(state) == pytest.approx(0.85, abs=1e-6)
    engine = tiny_engine(mifa())
    state = engine.algorithm.server_init(*engine.task.init())
    state, _ = engine.run_round(state, 0, 0.1, per_round=1)
    assert w(state) == pytest.approx(0.8, abs=1e-6)


def test_mifam_two_rounds_of_momentum():
    # round 1: d0 = 1 − 1.1 = −0.1, d1 = 1 − 0.6 = 0.4, d = 0.15 = m, x = 0.85
    # round 2 from 0.85: y0 = 0.965, y1 = 0.51; d0 = −0.115, d1 = 0.34, d = 0.1125,
    #   m = 0.9·0.15 + 0.1125 = 0.2475, x = 0.85 − 0.2475 = 0.6025
    engine = tiny_engine(mifam(beta=0.9))
    state = run_rounds(engine, 1)
    assert w(state) == pytest.approx(0.85, abs=1e-6)
    assert w(state, "server_opt/b") == pytest.approx(0.15, abs=1e-6)
    state, _ = engine.run_round(state, 1, 0.1, per_round=2)
    assert rows(state, "D") == pytest.approx([-0.115, 0.34], abs=1e-5)
    assert w(state, "server_opt/b") == pytest.approx(0.2475, abs=1e-5)
    assert w(state) == pytest.approx(0.6025, abs=1e-5)


def test_mifam_stale_entries_divided_by_all_clients():
    # β = 0.5, η_g = 2, N = 3. round 0, clients 0 and 1 from x = 0, y = (−0.3, 0.6):
    #   D = (0.3, −0.6, 0), d = −0.3/3 = −0.1 = m, x = 0 − 2·(−0.1) = 0.2
    # round 1, client 2 alone from 0.2, y2 = −0.4: D = (0.3, −0.6, 0.6) (two stale rows),
    #   d = 0.3/3 = 0.1, m = 0.5·(−0.1) + 0.1 = 0.05, x = 0.2 − 2·0.05 = 0.1
    algo = mifam(beta=0.5, server_lr=2.0)
    state = aggregate(algo, scalar_state(algo, 0.0), [-0.3, 0.6], (0, 1), 3, buffers=[1.0, 3.0])
    assert w(state) == pytest.approx(0.2, abs=1e-6)
    assert float(state["buffers"]["running_mean"]) == pytest.approx(2.0)
    state = aggregate(algo, state, [-0.4], (2,), 3, rnd=1)
    assert rows(state, "D") == pytest.approx([0.3, -0.6, 0.6], abs=1e-6)
    assert w(state, "server_opt/b") == pytest.approx(0.05, abs=1e-6)
    assert w(state) == pytest.approx(0.1, abs=1e-6)


def test_mifam_without_momentum_and_every_client_is_unweighted_fedavg():
    # one round: x = 1 − (−0.1 + 0.4)/2 = 0.85 = (1.1 + 0.6)/2
    assert w(run_rounds(tiny_engine(mifam(beta=0.0)), 1)) == pytest.approx(0.85, abs=1e-6)
    a = run_rounds(tiny_engine(mifam(beta=0.0)), 3)
    b = run_rounds(tiny_engine(fedavg(weighted=False)), 3)
    assert w(a) == pytest.approx(w(b), abs=1e-6)


def test_aggregate_leaves_its_inputs_unchanged():
    for algo, key in ((mifa(), "G"), (mifam(), "D")):
        state = aggregate(algo, scalar_state(algo, 0.0), [0.1, -0.4], (0, 1), 2)
        before = state[key]["weight"].clone()
        up = uplinks([0.3])
        y_before = up["y"]["weight"].clone()
        info = RoundInfo(round=1, num_clients=2, clients=(1,), lr=0.1, seed=0)
        new, _ = algo.aggregate(state, up, torch.ones(1), info)
        assert torch.equal(state[key]["weight"], before)
        assert torch.equal(up["y"]["weight"], y_before)
        assert not torch.equal(new[key]["weight"], before)


def test_table_is_created_at_the_first_round_and_checkpoints_round_trip(tmp_path):
    # server_init does not know N: the table has 0 rows until the first aggregate
    for algo, key in ((mifa(), "G"), (mifam(), "D")):
        engine = tiny_engine(algo)
        state = algo.server_init(*engine.task.init())
        assert state[key]["weight"].shape == (0, 1, 1)
        for rnd in range(2):
            ckpt = Checkpoint(rnd, state, {}, {}, [], 0.0, torch.get_rng_state(), [], {})
            save_checkpoint(tmp_path / algo.name, ckpt)
            loaded = load_checkpoint(tmp_path / algo.name).server
            assert loaded.keys() == state.keys()
            flat_a, flat_b = flatten(loaded), flatten(state)
            assert flat_a.keys() == flat_b.keys()
            assert all(torch.equal(flat_a[k], flat_b[k]) for k in flat_a)
            state, _ = engine.run_round(loaded, rnd, 0.1, per_round=2)
        assert state[key]["weight"].shape == (2, 1, 1)


def test_table_size_must_match_the_federation():
    algo = mifa()
    state = aggregate(algo, scalar_state(algo, 0.0), [0.1], (0,), 2)
    with pytest.raises(ValueError, match="2 rows but the round has num_clients=3"):
        aggregate(algo, state, [0.1], (0,), 3)


def test_names_payloads_and_hyperparameters():
    a, b = mifa(wait_all=True), mifam(beta=0.5, server_lr=2.0)
    assert (a.name, a.hparams) == ("mifa", {"wait_all": True})
    assert (b.name, b.hparams) == ("mifam", {"beta": 0.5, "server_lr": 2.0})
    for algo in (a, b):
        assert algo.downlink_keys == ("x", "buffers")
        assert algo.uplink_keys == ("y", "buffers")
    with pytest.raises(ValueError, match=r"beta must be in \[0, 1\)"):
        mifam(beta=1.0)
