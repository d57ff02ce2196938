import numpy as np
import pytest
import torch

from fedretain.algorithms import build_algorithm
from fedretain.core.client import batch_plan
from fedretain.engines.ledger import Ledger
from fedretain.engines.schedule import sample_clients
from tests.tiny import run_rounds, tiny_engine


def test_sampling_is_seeded_and_without_replacement():
    a = sample_clients(100, 10, seed=3, rnd=7)
    assert len(set(a.tolist())) == 10 and a.min() >= 0 and a.max() < 100
    assert np.array_equal(a, sample_clients(100, 10, seed=3, rnd=7))
    assert not np.array_equal(a, sample_clients(100, 10, seed=3, rnd=8))
    assert not np.array_equal(a, sample_clients(100, 10, seed=4, rnd=7))


def test_epoch_plan_visits_every_sample_once_per_epoch():
    plan = batch_plan(23, 5, seed=0, rnd=0, client=1, epochs=3)
    assert len(plan) == 3 * 5  # ceil(23 / 5) batches per epoch
    per_epoch = [np.concatenate(plan[i * 5 : (i + 1) * 5]) for i in range(3)]
    for order in per_epoch:
        assert sorted(order.tolist()) == list(range(23))
    assert not np.array_equal(per_epoch[0], per_epoch[1])


def test_step_plan_gives_exact_steps_of_full_batches():
    plan = batch_plan(12, 5, seed=0, rnd=0, client=0, steps=7)
    assert len(plan) == 7 and all(len(b) == 5 for b in plan)
    assert all(len(set(b.tolist())) == 5 for b in plan)


def test_batch_larger_than_client_uses_all_samples():
    plan = batch_plan(3, 10, seed=0, rnd=0, client=0, epochs=1)
    assert len(plan) == 1 and sorted(plan[0].tolist()) == [0, 1, 2]


def test_ledger_counts_every_key():
    ledger = Ledger()
    payload = {"x": {"w": torch.zeros(10)}, "c": {"w": torch.zeros(10)}, "buffers": {}}
    assert ledger.record(3, "down", payload) == 80
    ledger.record(3, "up", {"dy": {"w": torch.zeros(5, dtype=torch.float64)}})
    assert ledger.bytes_down == 80 and ledger.bytes_up == 40
    assert ledger.by_key["down"]["c"] == 40 and ledger.per_client[3] == {"down": 80, "up": 40}
    with pytest.raises(ValueError):
        ledger.record(0, "sideways", payload)


def test_scaffold_sends_twice_fedavgs_bytes():
    fedavg = tiny_engine(build_algorithm("fedavg"))
    scaffold = tiny_engine(build_algorithm("scaffold"))
    run_rounds(fedavg, 2)
    run_rounds(scaffold, 2)
    assert fedavg.ledger.bytes_up == 2 * 2 * 4  # 2 rounds x 2 clients x one float32
    assert scaffold.ledger.bytes_up == 2 * fedavg.ledger.bytes_up
    assert scaffold.ledger.bytes_down == 2 * fedavg.ledger.bytes_down


def test_client_state_kept_only_for_participants():
    engine = tiny_engine(build_algorithm("scaffold"))
    params, buffers = engine.task.init()
    state = engine.algorithm.server_init(params, buffers)
    engine.run_round(state, 0, 0.1, per_round=1)
    assert len(engine.store) == 1
    fedavg = tiny_engine(build_algorithm("fedavg"))
    run_rounds(fedavg, 1)
    assert fedavg.store == {}  # FedAvg keeps no client state


def test_divergence_is_reported_with_round_and_hint():
    from fedretain.errors import DivergenceError

    with pytest.raises(DivergenceError, match=r"round 1.*lower lr"):
        run_rounds(tiny_engine(build_algorithm("fedavg"), w0=1e30), 1, lr=1e30)
