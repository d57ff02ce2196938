"""Every registered algorithm on Flower's simulation engine (Ray), against the sequential engine.

One simulation (Ray and 4 virtual SuperNodes, 1 CPU per client) serves the whole module:
starting Ray takes seconds, a 2-round run of the tiny federation a fraction of one. The
registry is read at collection time, so algorithms added later are covered.
"""

import json
import time

import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")

from fedretain.algorithms import ALGORITHMS, continual_only
from fedretain.experiments.checkpoint import load_checkpoint
from fedretain.experiments.run import run_experiment
from fedretain.files import read_jsonl
from fedretain.flower.federation import connected
from fedretain.flower.processes import alive, descendants
from fedretain.flower.simulation import FlowerSimulation
from tests.flower.helpers import BASE, client_states, config, max_diff, run_rounds


@pytest.fixture(scope="module")
def simulation():
    pid = __import__("os").getpid()
    before = set(descendants(pid))  # processes of earlier tests (multiprocessing's tracker)
    sim = FlowerSimulation(num_supernodes=BASE["clients"], client_cpus=1)
    sim.start()
    yield sim
    started = [p for p in descendants(pid) if p not in before]  # Ray's, actors included
    sim.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(alive(p) for p in started):
        time.sleep(0.2)
    left = [p for p in started if alive(p)]
    assert not left, f"processes left after the simulation closed: {left}"


# settings an algorithm requires (MOON: a projection head)
REQUIRED = {"moon": {"model__projection": 8}}


# continual-only methods (fedcil) refuse this non-continual setting with a one-line ConfigError;
# their conformance (resume, ledger) runs in a class-incremental scenario in tests/continual/
@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n not in continual_only()])
def test_every_algorithm_runs_two_rounds_on_the_simulation_engine(simulation, name):
    extra = REQUIRED.get(name, {})
    ref, seq = run_rounds(config(algorithm=name, **extra), rounds=2)
    fl_cfg = config(algorithm=name, engine="flower", **extra)
    state, fl = run_rounds(fl_cfg, 2, simulation.federation)
    assert fl.last_metrics["participants"] == 3.0 and fl.last_metrics["lost_replies"] == 0.0
    assert max_diff(ref, state) < 1e-5
    ref_clients, clients = dict(seq.store.items()), client_states(fl)
    assert set(ref_clients) == set(clients)
    for cid in clients:
        assert max_diff(ref_clients[cid], clients[cid]) < 1e-5
    assert {k: v for k, v in seq.ledger.state().items() if k != "lost"} == {
        k: v for k, v in fl.ledger.state().items() if k != "lost"
    }


def test_a_run_writes_the_results_folder_of_the_other_engines(simulation, tmp_path):
    cfg = dict(algorithm="scaffold", rounds=2, checkpoint_every=2)
    run_experiment(config(**cfg), tmp_path / "seq", progress=False)
    with connected(simulation.federation):
        run_experiment(config(**cfg, engine="flower"), tmp_path / "fl", progress=False)
    for name in ("config.toml", "metrics.jsonl", "summary.json", "accuracy.png"):
        assert (tmp_path / "fl" / name).is_file()
    seq = read_jsonl(tmp_path / "seq" / "metrics.jsonl")
    fl = read_jsonl(tmp_path / "fl" / "metrics.jsonl")
    for a, b in zip(seq, fl, strict=True):
        assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=1e-6)
        assert (a["bytes_up"], a["bytes_down"]) == (b["bytes_up"], b["bytes_down"])
    ref_summary = json.loads((tmp_path / "seq" / "summary.json").read_text())
    summary = json.loads((tmp_path / "fl" / "summary.json").read_text())
    assert summary["lost_replies"] == 0
    assert summary["clients_with_state"] == ref_summary["clients_with_state"] == 4
    ref, got = load_checkpoint(tmp_path / "seq"), load_checkpoint(tmp_path / "fl")
    assert max_diff(ref.server, got.server) < 1e-5
    assert set(ref.clients) == set(got.clients)
