"""GradMA against numbers computed by hand, a scripted mem_red sequence, and FedAvgM at m = 0."""

import pytest
import torch

from fedretain.algorithms import build_algorithm
from fedretain.algorithms.gradma import gradma, mem_red, remember
from fedretain.core.algorithm import RoundInfo
from tests.tiny import run_rounds, tiny_engine, w


def test_mem_red_scripted_sequence():
    buf, count = [-1, -1], [0, 0]
    steps = [
        # sampled, expected buf, expected counters, new slots, evicted
        ([0, 1], [0, 1], [1, 1], {0, 1}, []),
        ([1, 2], [2, 1], [1, 2], {0}, [0]),  # 1 counts again; 2 evicts 0 (not in the round)
        ([0, 3], [0, 3], [1, 1], {0, 1}, [2, 1]),  # 0 evicts 2 (count 1 < 2), 3 evicts 1
        ([3], [0, 3], [1, 2], set(), []),
        ([4, 5], [4, 5], [1, 1], {0, 1}, [0, 3]),  # 4 evicts the smallest counter (0: 1 < 2)
        ([4, 5, 6], [4, 5], [2, 2], set(), []),  # 6 finds nothing to evict: not memorised
    ]
    for sampled, want_buf, want_count, want_new, want_evicted in steps:
        buf, count, new, evicted = mem_red(buf, count, sampled, memory=2)
        assert (buf, count, new, evicted) == (want_buf, want_count, want_new, want_evicted)


def test_mem_red_breaks_ties_by_lowest_slot_and_leaves_inputs_alone():
    buf, count = [0, 1, 2], [1, 1, 1]
    out = mem_red(buf, count, [3], memory=3)
    assert out == ([3, 1, 2], [1, 1, 1], {0}, [0])
    assert buf == [0, 1, 2] and count == [1, 1, 1]


def test_worker_qp_stops_steps_that_turn_against_the_constraints():
    # GradMA-W, 2 epochs (one full-batch step each), lr 0.1, unweighted FedAvg server.
    # client 0, step 1 at w = 1: g = −1, columns [−1, −1, 0] agree: w = 1.1;
    #   step 2 at w = 1.1: g = −0.9, drift 0.1 > 0 demands p̃ >= 0: p̃ = 0, w stays 1.1.
    # client 1, step 1: g = 4, columns [4, 4, 0]: w = 0.6;
    #   step 2: g = 2.4, columns [4, 4, −0.4] demand p̃ >= 0 and p̃ <= 0: p̃ = 0, w = 0.6.
    # server: mean(1.1, 0.6) = 0.85 (FedAvg would give (1.19 + 0.36)/2 = 0.775)
    engine = tiny_engine(build_algorithm("gradma-w"), epochs=2)
    state = run_rounds(engine, 1)
    assert w(state) == pytest.approx(0.85, abs=1e-6)
    assert float(engine.store[0]["x_prev"]["weight"].reshape(())) == pytest.approx(1.1)


def _aggregate(algo, state, d_rows, clients, n):
    uplinks = {"d": {"w": torch.tensor(d_rows)}, "buffers": {}}
    info = RoundInfo(round=0, num_clients=n, clients=tuple(clients), lr=0.1, seed=0)
    return algo.aggregate(state, uplinks, torch.ones(len(clients)), info)[0]


def test_server_qp_by_hand():
    algo = gradma(variant="server", beta1=0.5, beta2=0.5, memory=2)
    state = algo.server_init({"w": torch.zeros(2)}, {})
    # round 1: d = mean([1, 0], [0, 1]) = [0.5, 0.5] = m; D rows agree with m: x = −[0.5, 0.5]
    state = _aggregate(algo, state, [[1.0, 0.0], [0.0, 1.0]], [0, 1], 2)
    assert torch.allclose(state["x"]["w"], torch.tensor([-0.5, -0.5]))
    # round 2, client 0 alone sends [0.2, −1]: m = 0.5·[0.5, 0.5] + [0.2, −1] = [0.45, −0.75]
    # D0 = 0.5·[1, 0] + [0.2, −1] = [0.7, −1], D1 = 0.5·[0, 1] = [0, 0.5]
    # ⟨m, D1⟩ < 0: project onto p̃₂ >= 0 -> [0.45, 0], and ⟨[0.45, 0], D0⟩ = 0.315 >= 0
    state = _aggregate(algo, state, [[0.2, -1.0]], [0], 2)
    assert torch.allclose(state["D"]["w"], torch.tensor([[0.7, -1.0], [0.0, 0.5]]))
    assert torch.allclose(state["m"]["w"], torch.tensor([0.45, 0.0]), atol=1e-6)
    assert torch.allclose(state["x"]["w"], torch.tensor([-0.95, -0.5]), atol=1e-6)
    assert state["buf"].tolist() == [0, 1] and state["count"].tolist() == [2, 1]


def test_server_rows_follow_evictions():
    algo = gradma(variant="server", beta1=0.0, beta2=0.5, memory=1)
    state = algo.server_init({"w": torch.zeros(1)}, {})
    state = _aggregate(algo, state, [[2.0]], [7], 10)
    assert state["buf"].tolist() == [7] and state["D"]["w"].tolist() == [[2.0]]
    state = _aggregate(algo, state, [[4.0]], [3], 10)  # 3 evicts 7: its row starts afresh
    assert state["buf"].tolist() == [3] and state["D"]["w"].tolist() == [[4.0]]


def test_the_memory_update_alone_decays_adds_and_refills_rows():
    """Slots hold clients 5, 6 and 8 (counts 1, 3, 2); the round's clients are 6 and 9: 6's
    row decays and adds its update, 9 evicts 5 (the smallest count not in the round) and its
    row is its update alone, 8's row only decays."""
    state = {
        "D": {"w": torch.tensor([[1.0, 1.0], [2.0, 0.0], [0.0, 4.0]])},
        "buf": torch.tensor([5, 6, 8]),
        "count": torch.tensor([1, 3, 2]),
    }
    rows = {"w": torch.tensor([[10.0, 20.0], [30.0, 40.0]])}  # clients 6 and 9, in that order
    memorised, filled = remember(state, rows, [6, 9], beta2=0.5)
    assert memorised["buf"].tolist() == [9, 6, 8] and memorised["count"].tolist() == [1, 4, 2]
    assert memorised["D"]["w"].tolist() == [[30.0, 40.0], [11.0, 20.0], [0.0, 2.0]]
    assert filled == [0, 1, 2]
    assert state["buf"].tolist() == [5, 6, 8]  # the input is left alone


def test_memory_zero_is_fedavgm():
    a = run_rounds(tiny_engine(build_algorithm("gradma-s", memory=0, beta1=0.9), epochs=2), 3)
    b = run_rounds(tiny_engine(build_algorithm("fedavgm", beta=0.9, weighted=False), epochs=2), 3)
    assert w(a) == pytest.approx(w(b), abs=1e-6)
    assert w(a, "m") == pytest.approx(w(b, "server_opt/b"), abs=1e-6)


def test_gradma_runs_both_sides_and_keeps_rows_compact():
    engine = tiny_engine(build_algorithm("gradma", memory=1))
    state = run_rounds(engine, 2)
    assert state["D"]["weight"].shape == (1, 1, 1)  # memory rows x parameter shape
    assert state["buf"].tolist()[0] in (0, 1)
    assert set(engine.store) == {0, 1}


@pytest.mark.parametrize("bad", [{"variant": "left"}, {"beta1": 1.0}, {"memory": -1}])
def test_bad_hyperparameters(bad):
    from fedretain.errors import ConfigError

    with pytest.raises(ConfigError):
        build_algorithm("gradma", **bad)
