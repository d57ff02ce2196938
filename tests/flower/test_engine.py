"""The Flower engine's protocol and failures, on an in-process Grid (no Ray, no processes).

The ClientApp is the real one; only the transport is replaced, so these tests pin the
messages, the records, the client-state commit rule and what a lost reply costs, exactly
(differences of 0.0 against the sequential engine).
"""

import dataclasses

import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")
import torch

from fedretain.errors import ConfigError, DivergenceError, FedRetainError
from fedretain.experiments.checkpoint import load_checkpoint
from fedretain.experiments.run import run_experiment
from fedretain.files import read_jsonl
from fedretain.flower import check_options
from fedretain.flower.federation import FederationError, connected
from fedretain.flower.strategy import AlgorithmStrategy
from tests.flower.helpers import (
    build,
    client_states,
    config,
    inline_federation,
    max_diff,
    run_rounds,
)

K = 3  # a client sampled in rounds 0 and 1 (seed 1 samples {0, 1, 3}, then {0, 2, 3})


@pytest.mark.parametrize("name", ["fedavg", "scaffold", "gradma"])
def test_flower_rounds_equal_the_sequential_engine(name):
    ref, seq = run_rounds(config(algorithm=name), rounds=3)
    federation, grid = inline_federation(4)
    state, fl = run_rounds(config(algorithm=name, engine="flower"), 3, federation)
    assert max_diff(ref, state) == 0.0
    ref_clients, clients = dict(seq.store.items()), client_states(fl)
    assert set(ref_clients) == set(clients)
    for cid in clients:
        assert max_diff(ref_clients[cid], clients[cid]) == 0.0
    assert fl.ledger.summary()["lost_replies"] == 0
    assert {k: v for k, v in seq.ledger.state().items() if k != "lost"} == {
        k: v for k, v in fl.ledger.state().items() if k != "lost"
    }
    # one partition query per node, then one train message per sampled client and round
    assert [t for t, _ in grid.sent].count("query.partition") == 4


@pytest.mark.parametrize(
    "server",
    [
        {"algorithm": "fedavg", "server_opt": "adam", "aggregator": "median"},
        {"algorithm": "fedreg", "server_opt": "adam"},
        {"algorithm": "fedcurv", "server_opt": "yogi", "aggregator": "trimmed_mean"},
        {"algorithm": "fedavgm", "aggregator": "krum"},
    ],
)
def test_composed_server_sides_on_flower_equal_the_sequential_engine(server):
    ref, seq = run_rounds(config(**server), rounds=3)
    federation, _ = inline_federation(4)
    state, fl = run_rounds(config(**server, engine="flower"), 3, federation)
    assert max_diff(ref, state) == 0.0
    assert {k: v for k, v in seq.ledger.state().items() if k != "lost"} == {
        k: v for k, v in fl.ledger.state().items() if k != "lost"
    }


@pytest.mark.parametrize("name", ["mifa", "gradma", "scaffold"])
def test_a_failing_client_costs_only_its_reply(name):
    """Client K's ClientApp raises in round 1: the round completes with the others, exactly
    as if K had not been sampled; server memories (MIFA's G, GradMA's D) keep K's round-0 row
    and K's own state stays that of round 0."""
    ref, seq = run_rounds(config(algorithm=name), rounds=3, drop={1: {K}})
    federation, grid = inline_federation(4)
    grid.fail.add((1, K))
    state, fl = run_rounds(config(algorithm=name, engine="flower"), 3, federation)
    assert max_diff(ref, state) == 0.0
    ref_clients, clients = dict(seq.store.items()), client_states(fl)
    assert set(ref_clients) == set(clients)
    for cid in clients:
        assert max_diff(ref_clients[cid], clients[cid]) == 0.0
    assert fl.ledger.summary()["lost_replies"] == 1
    assert fl.ledger.summary()["lost_replies_by_client"] == {str(K): 1}
    if name == "mifa":  # K's row is its round-0 update, not zero, not round 1's
        assert all(g[K].abs().sum() > 0 for g in state["G"].values())


def test_a_reply_lost_on_the_way_times_out_and_the_client_rolls_back():
    """SCAFFOLD client K trains in round 0 but its reply never arrives: after the timeout the
    round goes on without it, and in round 1 K starts again from the c_i the server knows."""
    ref, seq = run_rounds(config(algorithm="scaffold"), rounds=2, drop={0: {K}})
    federation, grid = inline_federation(4)
    grid.drop.add((0, K))
    cfg = config(algorithm="scaffold", engine="flower", engine__reply_timeout=0.3)
    state, fl = run_rounds(cfg, 2, federation)
    assert fl.last_metrics["lost_replies"] == 0.0 and fl.ledger.lost_replies == 1
    assert max_diff(ref, state) == 0.0
    ref_clients, clients = dict(seq.store.items()), client_states(fl)
    for cid in clients:
        assert max_diff(ref_clients[cid], clients[cid]) == 0.0


def test_a_node_that_left_is_a_lost_reply_and_a_missing_partition_is_a_clear_error():
    federation, grid = inline_federation(4)
    cfg = config(algorithm="fedavg", engine="flower")
    fed, rounds = build(cfg, federation)
    grid.offline.add(K)
    state = fed.algorithm.server_init(*fed.task.init())
    _, metrics = rounds.run_round(state, 0, 0.1, clients=[0, 1, K])
    assert metrics["lost_replies"] == 1.0 and metrics["participants"] == 2.0

    federation, grid = inline_federation(4)
    grid.offline.add(2)
    with (
        connected(federation),
        pytest.raises(FederationError, match=r"no SuperNode holds partition\(s\) 2 after 1 s"),
    ):
        build(config(engine="flower", engine__reply_timeout=1.0))


def test_nodes_that_stopped_end_the_round_without_waiting_out_the_deadline():
    """A simulation whose runtime stopped mid-round (Ray crashed) says so through the
    federation's ``check``: the round raises its error instead of waiting 600 s for K's reply."""
    federation, grid = inline_federation(4)
    grid.drop.add((0, K))  # K's reply never comes: without the check the round would wait

    def check() -> None:
        if any(kind == "train" for kind, _ in grid.sent):
            raise FedRetainError("Flower's simulation engine stopped: the runtime crashed")

    federation = dataclasses.replace(federation, check=check)
    cfg = config(algorithm="fedavg", engine="flower", engine__reply_timeout=600.0)
    fed, rounds = build(cfg, federation)  # start-up asks for partitions only: no train yet
    state = fed.algorithm.server_init(*fed.task.init())
    with pytest.raises(FedRetainError, match="simulation engine stopped: the runtime crashed"):
        rounds.run_round(state, 0, 0.1, clients=[0, 1, K])


def test_nodes_of_another_federation_size_are_refused():
    federation, _ = inline_federation(5)  # num-partitions=5, the run has 4 clients
    with connected(federation), pytest.raises(FederationError, match="num-partitions=5"):
        build(config(engine="flower"))


@pytest.mark.parametrize("policy", ["stop", "skip"])
def test_divergence_follows_on_divergence_like_the_sequential_engine(policy):
    cfg = dict(algorithm="fedavg", lr=1e30, on_divergence=policy)
    federation, _ = inline_federation(4)
    if policy == "stop":
        with pytest.raises(DivergenceError) as seq_err:
            run_rounds(config(**cfg), rounds=1)
        with pytest.raises(DivergenceError) as fl_err:
            run_rounds(config(**cfg, engine="flower"), 1, federation)
        assert str(fl_err.value) == str(seq_err.value)
    else:
        ref, seq = run_rounds(config(**cfg), rounds=1)
        state, fl = run_rounds(config(**cfg, engine="flower"), 1, federation)
        assert fl.last_metrics["skipped_clients"] == seq.last_metrics["skipped_clients"] == 3
        assert fl.last_metrics["lost_replies"] == 0.0
        assert max_diff(ref, state) == 0.0


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"device": "cuda"}, "engine=flower trains clients on the CPU"),
        ({"engine__client_cpus": 0.0}, "engine.client_cpus must be > 0"),
        ({"engine__reply_timeout": -1.0}, "engine.reply_timeout must be > 0"),
        ({"precision": "fp64"}, "precision=fp64 .* runs on engine=sequential, vmap or auto"),
        ({"store": "disk"}, "store=disk is not supported"),
        ({"store__dtype": "float16"}, "store.dtype=float16 is not supported"),
        ({"diagnostics": ["forgetting"]}, "engine=flower cannot run diagnostics"),
    ],
)
def test_unsupported_settings_are_one_line_errors(overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        check_options(config(engine="flower", **overrides))
    assert "\n" not in str(err.value)


def test_settings_are_checked_when_the_engine_is_built():
    with pytest.raises(ConfigError, match=r"engine\.client_cpus must be > 0"):
        build(config(engine="flower", engine__client_cpus=0.0))


def test_checkpoint_and_resume_carry_the_client_states(tmp_path):
    """A flower run checkpointed after 2 rounds and resumed on fresh nodes (client states
    pushed back from the checkpoint) ends where an uninterrupted sequential run ends."""
    cfg = dict(algorithm="scaffold", checkpoint_every=1)
    run_experiment(config(**cfg, rounds=3), tmp_path / "seq", progress=False)
    federation, _ = inline_federation(4)
    with connected(federation):
        run_experiment(config(**cfg, rounds=2, engine="flower"), tmp_path / "fl", progress=False)
    federation, _ = inline_federation(4)  # new nodes: empty context.state
    with connected(federation):
        summary = run_experiment(
            config(**cfg, rounds=3, engine="flower"), tmp_path / "fl", progress=False, resume=True
        )
    ref, got = load_checkpoint(tmp_path / "seq"), load_checkpoint(tmp_path / "fl")
    assert max_diff(ref.server, got.server) == 0.0
    assert set(ref.clients) == set(got.clients)
    for cid in ref.clients:
        assert max_diff(ref.clients[cid], got.clients[cid]) == 0.0
    seq_acc = [r["test_accuracy"] for r in read_jsonl(tmp_path / "seq" / "metrics.jsonl")]
    fl_acc = [r["test_accuracy"] for r in read_jsonl(tmp_path / "fl" / "metrics.jsonl")]
    assert fl_acc == seq_acc
    assert summary["lost_replies"] == 0 and summary["clients_with_state"] == len(ref.clients)


def test_the_strategy_runs_flowers_own_loop():
    """AlgorithmStrategy.start (Flower's loop) gives the sequential engine's model."""
    ref, _ = run_rounds(config(algorithm="scaffold"), rounds=2)
    _, grid = inline_federation(4)
    strategy = AlgorithmStrategy.from_config(config(algorithm="scaffold"))
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=2)
    assert max_diff(ref, strategy.server_state) == 0.0
    assert len(strategy.history) == 2 and strategy.history[-1]["participants"] == 3.0
    final = result.arrays.to_torch_state_dict()
    assert all(torch.equal(final[k], ref["x"][k]) for k in ref["x"])
