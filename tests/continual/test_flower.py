"""The continual methods on Flower (in-process Grid) give the sequential engine's numbers across
task boundaries: global model, client states (the generators of the last task, the class
masks) and ledger.

The ClientApp takes each round's clients from its own federation
(``fed.clients_for_round(info.round)``), so it switches tasks as the server's run does.
"""

import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")

import fedretain.core.client as client_module
from fedretain.flower import client as flower_client
from fedretain.recipe.config import make_config
from tests.flower.helpers import build, client_states, inline_federation, max_diff

CI = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [16],
    "scenario": "class_incremental",
    "scenario.tasks": 2,
    "scenario.classes_per_task": 2,
    "scenario.rounds_per_task": 2,
    "rounds": 4,
    "clients": 3,
    "clients_per_round": 3,
    "batch_size": 8,
    "local_steps": 2,
    "lr": 0.1,
    "threads": 1,
    "checkpoint_every": 0,
    "engine": "sequential",
}
ACGAN = {"model": "acgan", "model.width": 4, "model.z_dim": 16, "optimizer": "adam", "lr": 1e-3}
METHODS = {
    "fedavg": {},
    "fedlwf2t": {"algorithm": "fedlwf2t"},
    "fedavg+acgan": {**ACGAN, "replay": "acgan"},
    "fedprox+dgr": {"algorithm": "fedprox", "replay": "dgr", "replay.width": 4, "replay.z_dim": 16},
    "fedcil": {
        **ACGAN,
        "algorithm": "fedcil",
        "algo.consolidation_steps": 2,
        "algo.consolidation_batch": 4,
    },
}


def _settings(method: str) -> dict:
    extra = METHODS[method]
    base = {k: v for k, v in CI.items() if not (k.startswith("model") and "model" in extra)}
    return {**base, **extra}


def _run(cfg, federation=None):
    fed, runner = build(cfg, federation)
    state = fed.algorithm.server_init(*fed.task.init())
    try:
        for rnd in range(cfg.rounds):
            clients = fed.participation.clients(rnd)
            state, _ = runner.run_round(state, rnd, cfg.lr_at(rnd), clients=clients)
    finally:
        runner.engine.close()
    return state, runner


@pytest.fixture
def continual_client_app(monkeypatch):
    """The (round, client) of every local training the ClientApp runs."""
    original = client_module.train_client
    calls = []

    def train_client(algorithm, task, downlink, state, data, plan, info, cid):
        calls.append((info.round, cid))
        return original(algorithm, task, downlink, state, data, plan, info, cid)

    monkeypatch.setattr(client_module, "train_client", train_client)
    flower_client._FEDERATIONS.clear()
    yield calls
    flower_client._FEDERATIONS.clear()


@pytest.mark.parametrize("method", list(METHODS))
def test_continual_methods_on_flower_equal_the_sequential_engine(continual_client_app, method):
    ref, seq = _run(make_config(_settings(method)))
    federation, _grid = inline_federation(3)
    state, fl = _run(make_config({**_settings(method), "engine": "flower"}), federation)
    assert fl.engine.name == "flower"
    assert sorted(continual_client_app) == [(r, c) for r in range(4) for c in range(3)]
    assert max_diff(ref, state) < 1e-6
    ref_clients, clients = dict(seq.store.items()), client_states(fl)
    assert set(ref_clients) == set(clients) == (set() if method == "fedavg" else {0, 1, 2})
    for cid in clients:
        assert max_diff(ref_clients[cid], clients[cid]) < 1e-6
    assert {k: v for k, v in seq.ledger.state().items() if k != "lost"} == {
        k: v for k, v in fl.ledger.state().items() if k != "lost"
    }


def test_the_deployment_strategy_weights_each_round_by_that_tasks_client_data():
    """AlgorithmStrategy (a ServerApp of one's own) builds its rounds as a run does: in a
    class-incremental scenario each round's clients hold that task's parts, which weight the
    aggregation, as on the sequential engine."""
    from fedretain.experiments.run import build_rounds
    from fedretain.flower.strategy import AlgorithmStrategy

    cfg = make_config(CI)
    strategy = AlgorithmStrategy.from_config(cfg)
    _, sequential = build_rounds(cfg)
    clients = [0, 1, 2]
    sizes = {}
    for rnd in range(cfg.rounds):
        both = []
        for rounds in (strategy.rounds, sequential):
            opened = rounds.open(strategy.server_state, rnd, cfg.lr, clients=clients)
            both.append([opened.work.clients.size(c) for c in clients])
        assert both[0] == both[1], f"round {rnd}"
        sizes[rnd] = both[0]
    assert sizes[0] == sizes[1] and sizes[2] == sizes[3]
    assert sizes[0] != sizes[2]  # the second task's classes: other parts, other weights
