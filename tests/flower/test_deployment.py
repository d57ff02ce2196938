"""Real processes on 127.0.0.1: SuperLinks, SuperNodes, runs submitted with ``flwr run``.

The module's fixture starts two federations of 3 SuperNodes and submits all three runs at
once (their waiting overlaps): FedAvg and SCAFFOLD share the first federation; the second
runs MIFA and loses a SuperNode, killed (SIGKILL, with its processes) as round 1 starts. Each
test then checks one run. Once the federations are closed, every process they started
(SuperLink, SuperNodes, Flower's SuperExec, ServerApp and ClientApp processes) must be gone.

Those SuperNodes are warm (one ClientApp process each, serving every message); the slow test
runs FedAvg on cold ones (Flower's process per message, ``LocalFederation(warm=False)``).
"""

import json
import os
import re
import signal
import threading
import time

import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")

from fedretain.engines.schedule import sample_clients
from fedretain.experiments.checkpoint import load_checkpoint
from fedretain.experiments.run import run_experiment
from fedretain.flower.deployment import LocalFederation
from fedretain.flower.processes import alive, descendants
from tests.flower.helpers import config, max_diff, run_rounds

NODES = 3
SEED = 1  # with 2 of 3 clients per round, seed 1 samples {0, 1} then {0, 2}
FIRST, SECOND = (set(sample_clients(NODES, 2, SEED, r).tolist()) for r in (0, 1))
KILLED = min(FIRST - SECOND)  # sampled in round 1 only: only round 1 waits for it


def real(name: str, **overrides: object):
    settings = dict(clients=NODES, clients_per_round=NODES, rounds=2, checkpoint_every=2)
    return config(algorithm=name, **{**settings, **overrides})


def killed_config(**overrides: object):
    return real("mifa", clients_per_round=2, seed=SEED, **overrides)


def kill_when_round_1_starts(fed: LocalFederation, out, process, record: dict) -> None:
    """metrics.jsonl appears with round 0's evaluation, just before round 1 is sent."""
    metrics = out / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not metrics.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if metrics.exists():
        fed.kill_node(KILLED, signal.SIGKILL)
        record["records_at_kill"] = len(metrics.read_text().splitlines())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("flower-real")
    before = set(descendants(os.getpid()))  # e.g. multiprocessing's resource tracker
    shared, lossy = LocalFederation(NODES), LocalFederation(NODES)
    try:
        lossy.start()
        shared.start()
        # the run that waits for a dead node starts first: its wait overlaps the others' work
        killed_cfg = killed_config(engine="flower", engine__reply_timeout=60.0)
        process = lossy.submit(killed_cfg, out / "killed")
        flower = dict(engine="flower", engine__reply_timeout=150.0)
        submitted = {
            name: (shared, shared.submit(real(name, **flower), out / name))
            for name in ("fedavg", "scaffold")
        }
        submitted["killed"] = (lossy, process)
        record: dict = {}
        watcher = threading.Thread(
            target=kill_when_round_1_starts, args=(lossy, out / "killed", process, record)
        )
        watcher.start()
        yield out, submitted, record, watcher
    finally:
        started = [p for p in descendants(os.getpid()) if p not in before]
        shared.close()
        lossy.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(alive(p) for p in started):
            time.sleep(0.2)
        left = [p for p in started if alive(p)]
        assert not left, f"processes left after the federations closed: {left}"


@pytest.mark.parametrize("name", ["fedavg", "scaffold"])
def test_three_real_clients_equal_the_sequential_engine(runs, name, tmp_path):
    out, submitted, _, _ = runs
    fed, process = submitted[name]
    summary = fed.wait(process, out / name, timeout=300)
    assert summary["rounds"] == 2 and summary["lost_replies"] == 0
    ref_summary = run_experiment(real(name), tmp_path / "seq", progress=False)
    for key in ("bytes_up", "bytes_down", "clients_with_state"):
        assert summary[key] == ref_summary[key]
    ref, got = load_checkpoint(tmp_path / "seq"), load_checkpoint(out / name)
    assert max_diff(ref.server, got.server) < 1e-5
    assert set(ref.clients) == set(got.clients)  # SCAFFOLD's c_i, read from the SuperNodes
    for cid in ref.clients:
        assert max_diff(ref.clients[cid], got.clients[cid]) < 1e-5
    for k in range(NODES):  # one warm process per node served every message of both runs
        log = fed.log_text(f"supernode-{k}.log")
        assert len(re.findall(r"warm ClientApp process \d+ serving", log)) == 1
        assert len(re.findall(r"task \d+ \(train\)", log)) >= 2  # this run's 2 rounds


def test_a_client_killed_during_round_1_costs_its_reply_and_the_run_finishes(runs):
    """The round waits engine.reply_timeout for the dead node, then completes with the other
    client; the result equals the sequential engine's with that client left out of round 1."""
    out, submitted, record, watcher = runs
    fed, process = submitted["killed"]
    summary = fed.wait(process, out / "killed", timeout=300)
    watcher.join()
    assert record["records_at_kill"] == 1  # only round 0's evaluation: killed in round 1
    assert summary["rounds"] == 2
    assert summary["lost_replies"] == 1 and summary["lost_replies_by_client"] == {str(KILLED): 1}
    metrics = [json.loads(line) for line in (out / "killed" / "metrics.jsonl").open()]
    assert [m["participants"] for m in metrics] == [0, 1, 2]
    ref, _ = run_rounds(killed_config(), rounds=2, drop={0: {KILLED}})
    assert max_diff(ref, load_checkpoint(out / "killed").server) < 1e-5


@pytest.mark.slow
def test_cold_supernodes_start_a_clientapp_per_message_and_give_the_same_run(tmp_path):
    cfg = real("fedavg")
    with LocalFederation(NODES, warm=False) as fed:
        flower = real("fedavg", engine="flower", engine__reply_timeout=150.0)
        summary = fed.run(flower, tmp_path / "cold")
        logs = [fed.log_text(f"supernode-{k}.log") for k in range(NODES)]
    assert summary["rounds"] == 2 and summary["lost_replies"] == 0
    assert not any("warm ClientApp process" in log for log in logs)
    run_experiment(cfg, tmp_path / "seq", progress=False)
    ref, got = load_checkpoint(tmp_path / "seq"), load_checkpoint(tmp_path / "cold")
    assert max_diff(ref.server, got.server) < 1e-5


@pytest.mark.slow
def test_a_warm_clientapp_process_that_dies_is_replaced(tmp_path):
    cfg = config(clients=1, clients_per_round=1, rounds=1, engine="flower")
    with LocalFederation(1) as fed:
        assert fed.run(cfg, tmp_path / "a")["lost_replies"] == 0
        node = fed.nodes[0]
        assert node is not None
        workers = [p for p in descendants(node.pid) if b"worker" in cmdline(p)]
        assert len(workers) == 1
        os.kill(workers[0], signal.SIGKILL)  # as the out-of-memory killer would
        assert fed.run(cfg, tmp_path / "b")["lost_replies"] == 0
        log = fed.log_text("supernode-0.log")
    assert "the warm ClientApp process died (-9); restarting" in log
    assert len(re.findall(r"warm ClientApp process \d+ serving", log)) == 2


def cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""
