"""The composable server side: server optimizers and aggregators against Flower 1.41's own
strategies on the same replies, the FedAvgM identities, compositions and refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import strategy as flwr_strategy

from fedretain.algorithms import build_algorithm
from fedretain.algorithms.aggregators import AGGREGATORS
from fedretain.algorithms.server import ServerStep
from fedretain.core.optim import SERVER_OPTIMIZERS
from fedretain.errors import ConfigError
from fedretain.recipe.config import make_config
from tests.tiny import run_rounds, tiny_engine, w

SHAPES = {"a": (3, 4), "b": (4,)}  # a small model of two arrays, no buffers


def _replies(rnd: int, n: int = 7) -> tuple[list[dict[str, np.ndarray]], list[int]]:
    """``n`` clients' models for round ``rnd`` and their sample counts (seeded)."""
    rng = np.random.default_rng([rnd, n])
    models = [
        {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()} for _ in range(n)
    ]
    return models, [int(c) for c in rng.integers(5, 50, size=n)]


@pytest.fixture(autouse=True)
def _a_flower_run():
    """Messages are stamped with the run of the process (a ServerApp sets it)."""
    from flwr.supercore.task_identity import TaskIdentity

    keys = ("_task_id", "_run_id", "_node_id")
    before = [getattr(TaskIdentity, k) for k in keys]
    for k in keys:
        setattr(TaskIdentity, k, 1)
    yield
    for k, v in zip(keys, before, strict=True):
        setattr(TaskIdentity, k, v)


def _messages(models: list[dict[str, np.ndarray]], counts: list[int]) -> list[Message]:
    out = []
    for model, count in zip(models, counts, strict=True):
        content = RecordDict(
            {
                "arrays": ArrayRecord({k: Array(v) for k, v in model.items()}),
                "metrics": MetricRecord({"num-examples": count}),
            }
        )
        out.append(Message(content, dst_node_id=1, message_type="train"))
    return out


def _stacked(models: list[dict[str, np.ndarray]]) -> dict:
    y = {k: torch.from_numpy(np.stack([m[k] for m in models])) for k in SHAPES}
    return {"y": y, "buffers": {}}


def _flower_arrays(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: np.asarray(a.numpy(), dtype=np.float64) for k, a in record.items()}


def _close(ours: dict, theirs: dict[str, np.ndarray], tol: float = 1e-6) -> None:
    for k, v in theirs.items():
        np.testing.assert_allclose(ours[k].double().numpy(), v, atol=tol, rtol=tol, err_msg=k)


FLOWER_OPTS = {
    "adam": ("FedAdam", {}),
    "yogi": ("FedYogi", {}),
    "adagrad": ("FedAdagrad", {}),
}


@pytest.mark.parametrize("name", list(FLOWER_OPTS))
def test_server_optimizer_equals_flowers_strategy_over_rounds(name):
    """FedAdam/FedYogi/FedAdagrad at the paper's β1, β2, τ: the same new global model as
    Flower 1.41's strategy from the same replies and the same state, round after round."""
    cls, extra = FLOWER_OPTS[name]
    opt = SERVER_OPTIMIZERS.build(name)
    h = opt.hparams
    theirs = getattr(flwr_strategy, cls)(eta=h["lr"], tau=h["tau"], **extra)
    if "beta1" in h:
        theirs.beta_1, theirs.beta_2 = h["beta1"], h["beta2"]
    rng = np.random.default_rng(0)
    x0 = {k: rng.normal(size=s).astype(np.float32) for k, s in SHAPES.items()}
    step = ServerStep(weighted=True, opt=opt)
    state = step.init({k: torch.from_numpy(v) for k, v in x0.items()}, {})
    current = x0
    for rnd in range(1, 5):
        models, counts = _replies(rnd)
        theirs.current_arrays = dict(current)
        record, _ = theirs.aggregate_train(rnd, _messages(models, counts))
        state = step(state, _stacked(models), torch.tensor(counts, dtype=torch.float32))
        expected = _flower_arrays(record)
        _close(state["x"], expected)
        current = {k: v.astype(np.float32) for k, v in expected.items()}
        state = {**state, "x": {k: torch.from_numpy(v) for k, v in current.items()}}


FLOWER_AGGREGATORS = {
    "mean": ("FedAvg", {}, {}),
    "median": ("FedMedian", {}, {}),
    "trimmed_mean": ("FedTrimmedAvg", {"beta": 0.2}, {"beta": 0.2}),
    "krum": ("Krum", {"num_malicious_nodes": 1}, {"num_malicious": 1}),
    "multikrum": (
        "MultiKrum",
        {"num_malicious_nodes": 1, "num_nodes_to_select": 3},
        {"num_malicious": 1, "num_select": 3},
    ),
    "bulyan": ("Bulyan", {"num_malicious_nodes": 1}, {"num_malicious": 1}),
}


@pytest.mark.parametrize("name", list(FLOWER_AGGREGATORS))
@pytest.mark.parametrize("n", [7, 8])
def test_aggregator_equals_flowers_strategy(name, n):
    cls, theirs_kw, ours_kw = FLOWER_AGGREGATORS[name]
    theirs = getattr(flwr_strategy, cls)(**theirs_kw)
    ours = AGGREGATORS.build(name, ours_kw)
    for rnd in range(3):
        models, counts = _replies(rnd, n)
        # two attackers far out: the robust rules must keep them out, as Flower's do
        for m in models[:2]:
            for k in m:
                m[k] = m[k] * 50.0
        record, _ = theirs.aggregate_train(rnd + 1, _messages(models, counts))
        got = ours(_stacked(models), torch.tensor(counts, dtype=torch.float32))
        _close(got["y"], _flower_arrays(record))


def test_bulyan_keeps_the_model_when_the_round_is_too_small():
    models, _ = _replies(0, 6)
    bulyan = AGGREGATORS.build("bulyan", {"num_malicious": 1})
    assert bulyan(_stacked(models), torch.ones(6)) is None


def test_gradma_s_without_memory_fedavgm_and_fedavg_with_server_momentum_agree():
    beta = 0.9
    momentum = SERVER_OPTIMIZERS.build("sgd", {"momentum": beta})
    a = run_rounds(tiny_engine(build_algorithm("gradma-s", memory=0, beta1=beta), epochs=2), 3)
    b = run_rounds(tiny_engine(build_algorithm("fedavgm", beta=beta, weighted=False), epochs=2), 3)
    c = run_rounds(
        tiny_engine(build_algorithm("fedavg", weighted=False, server_opt=momentum), epochs=2), 3
    )
    assert w(a) == pytest.approx(w(b), abs=1e-6) and w(b) == w(c)  # b and c: the same code
    assert w(a, "m") == pytest.approx(w(b, "server_opt/b"), abs=1e-6)


def test_fedavg_server_sgd_at_lr_one_is_the_average_exactly():
    plain = run_rounds(tiny_engine(build_algorithm("fedavg")), 2)
    one = SERVER_OPTIMIZERS.build("sgd")
    assert one.is_average
    same = run_rounds(tiny_engine(build_algorithm("fedavg", server_opt=one)), 2)
    assert w(plain) == w(same) and "server_opt" not in same


def test_fedadam_moves_the_tiny_model_by_hand():
    """One round, both clients, unweighted: Δ = mean(y) − x, m = 0.1 Δ, v = 0.01 Δ²,
    x ← x + η √(1 − 0.99²)/(1 − 0.9²) · m / (√v + τ)."""
    adam = SERVER_OPTIMIZERS.build("adam", {"lr": 0.1})
    fedavg_state = run_rounds(tiny_engine(build_algorithm("fedavg", weighted=False)), 1)
    state = run_rounds(tiny_engine(build_algorithm("fedavg", weighted=False, server_opt=adam)), 1)
    delta = w(fedavg_state) - 1.0  # x0 = 1
    m, v = 0.1 * delta, 0.01 * delta**2
    eta = 0.1 * (1 - 0.99**2) ** 0.5 / (1 - 0.9**2)
    assert w(state) == pytest.approx(1.0 + eta * m / (v**0.5 + 1e-3), rel=1e-5)


@pytest.mark.parametrize(
    ("algorithm", "key", "value"),
    [
        ("scaffold", "server_opt", "adam"),
        ("mifa", "server_opt", "yogi"),
        ("gradma", "aggregator", "median"),
        ("fedavgm", "server_opt", "adam"),
    ],
)
def test_algorithms_with_their_own_server_step_refuse_in_one_line(algorithm, key, value):
    with pytest.raises(ConfigError, match=rf"{algorithm} takes no {key}: .+composes with"):
        make_config({"algorithm": algorithm, key: value})


def test_aggregator_options_are_checked_against_the_round():
    with pytest.raises(ConfigError, match=r"bulyan aggregator\.num_malicious=2 needs at least 11"):
        make_config({"aggregator": "bulyan", "aggregator.num_malicious": 2})
    with pytest.raises(ConfigError, match=r"aggregator\.beta"):
        make_config({"aggregator": "trimmed_mean", "aggregator.beta": 0.6})
    make_config({"aggregator": "bulyan", "aggregator.num_malicious": 1, "clients_per_round": 7})


@pytest.mark.parametrize(
    ("aggregator", "robust"),
    [("mean", False), ("median", True), ("trimmed_mean", True), ("krum", True)],
)
def test_robust_aggregators_keep_training_under_two_attackers_in_ten(aggregator, robust):
    """Digits, 20 clients, 10 per round, 2 of them sending x + 10 N(0, 1) every round."""
    from tests.byzantine import accuracy_under_attack

    cfg = make_config(
        {
            "dataset": "digits",
            "model": "mlp",
            "model.hidden": [32],
            "clients": 20,
            "clients_per_round": 10,
            "rounds": 10,
            "batch_size": 16,
            "lr": 0.1,
            "aggregator": aggregator,
            **({"aggregator.num_malicious": 2} if aggregator == "krum" else {}),
        }
    )
    acc = accuracy_under_attack(cfg)
    clean = accuracy_under_attack(cfg, count=0)  # the same aggregator without attackers
    if robust:  # keeps training: close to its clean run, far above chance (0.1)
        assert acc[-1] > 0.45 and acc[-1] > clean[-1] - 0.15, (acc, clean)
    else:  # breaks: near chance while the clean run trains
        assert acc[-1] < 0.3 < clean[-1], (acc, clean)
