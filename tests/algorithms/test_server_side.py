"""The composable server side: server optimizers and aggregators against Flower 1.41's own
strategies on the same replies, the FedAvgM identities, compositions and refusals."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")
import torch
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import strategy as flwr_strategy

from fedretain.algorithms import build_algorithm
from fedretain.algorithms.aggregators import AGGREGATORS
from fedretain.algorithms.server import ServerStep
from fedretain.core.optim import SERVER_OPTIMIZERS, Optimizer, sgd
from fedretain.core.tree import tree_weighted_mean
from fedretain.errors import ConfigError
from fedretain.recipe.config import make_config
from tests.tiny import run_rounds, tiny_engine, w

SHAPES = {"a": (3, 4), "b": (4,)}  # a small model of two arrays, no buffers


def _replies(
    rnd: int, n: int = 7, dtype: type = np.float32
) -> tuple[list[dict[str, np.ndarray]], list[int]]:
    """``n`` clients' models for round ``rnd`` and their sample counts (seeded)."""
    rng = np.random.default_rng([rnd, n])
    models = [{k: rng.normal(size=s).astype(dtype) for k, s in SHAPES.items()} for _ in range(n)]
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


# float32 replies: ours (torch, float32) and Flower's (numpy) round differently, 1.9e-6 seen
# on values up to ~10 (AVX-512 and AVX2 kernels, 1 and 2 threads); the bound keeps >= 10x
def _close(ours: dict, theirs: dict[str, np.ndarray], tol: float = 2e-6) -> None:
    for k, v in theirs.items():
        np.testing.assert_allclose(ours[k].double().numpy(), v, atol=tol, rtol=tol, err_msg=k)


FLOWER_OPTS = {
    "adam": ("FedAdam", {}),
    "yogi": ("FedYogi", {}),
    "adagrad": ("FedAdagrad", {}),
}


def _flower_optimizer(name: str, opt: Optimizer) -> flwr_strategy.FedOpt:
    """Flower's strategy of the same name with ``opt``'s hyper-parameters."""
    cls, extra = FLOWER_OPTS[name]
    h = opt.hparams
    theirs = getattr(flwr_strategy, cls)(eta=h["lr"], tau=h["tau"], **extra)
    if "beta1" in h:
        theirs.beta_1, theirs.beta_2 = h["beta1"], h["beta2"]
    return theirs


@pytest.mark.parametrize("name", list(FLOWER_OPTS))
def test_server_optimizer_equals_flowers_strategy_over_rounds(name):
    """FedAdam/FedYogi/FedAdagrad at the paper's β1, β2, τ: the same new global model as
    Flower 1.41's strategy from the same replies and the same state, round after round."""
    opt = SERVER_OPTIMIZERS.build(name)
    theirs = _flower_optimizer(name, opt)
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


# server lr 1 and β2 = 0.999: a float32 bias correction (β2^t) put FedAdam 4.7e-5 off Flower's
FLOAT64_OPTS = {
    "adam": {"lr": 1.0, "beta2": 0.999},
    "yogi": {"lr": 1.0, "beta2": 0.999},
    "adagrad": {"lr": 1.0},
}


def _float64_start() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {k: rng.normal(size=s) for k, s in SHAPES.items()}


def _tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}


@pytest.mark.parametrize("name", list(FLOWER_OPTS))
def test_server_optimizer_equals_flowers_strategy_in_float64_to_1e_7(name):
    """In float64 each side runs three rounds on its own (no resynchronising): Flower's own
    ``aggregate_train`` and ours agree to 1e-7, so the step count and the bias correction are
    exact; the count is an int64 tensor (a leaf of the checkpointed state)."""
    opt = SERVER_OPTIMIZERS.build(name, FLOAT64_OPTS[name])
    theirs = _flower_optimizer(name, opt)
    x0 = _float64_start()
    theirs.current_arrays = dict(x0)
    step = ServerStep(weighted=True, opt=opt)
    state = step.init(_tensors(x0), {})
    for rnd in range(1, 4):
        models, counts = _replies(rnd, dtype=np.float64)
        record, _ = theirs.aggregate_train(rnd, _messages(models, counts))
        state = step(state, _stacked(models), torch.tensor(counts, dtype=torch.float64))
        expected = _flower_arrays(record)
        _close(state["x"], expected, tol=1e-7)
        theirs.current_arrays = expected  # what Flower's configure_train would set
    t = state["server_opt"]["t"]
    assert t.dtype == torch.int64 and int(t) == 3


def test_adaptive_server_optimizers_count_updates_not_rounds():
    """A round that leaves the model unchanged (here the aggregator declines it, as Bulyan
    does short of clients) leaves x, m, v and t as they were: FedAdam's next step is Flower's
    first (``server_round=1``), not its second, which Flower's round count would give."""

    def declines_below_three(stacked: dict, weights: torch.Tensor) -> dict | None:
        return None if len(weights) < 3 else tree_weighted_mean(stacked, weights)

    opt = SERVER_OPTIMIZERS.build("adam", FLOAT64_OPTS["adam"])
    step = ServerStep(weighted=True, aggregator=declines_below_three, opt=opt)
    x0 = _float64_start()
    state = step.init(_tensors(x0), {})
    few, few_counts = _replies(0, 2, np.float64)
    state = step(state, _stacked(few), torch.tensor(few_counts, dtype=torch.float64))
    assert int(state["server_opt"]["t"]) == 0
    assert not any(bool(v.any()) for v in state["server_opt"]["m"].values())
    models, counts = _replies(1, 7, np.float64)
    state = step(state, _stacked(models), torch.tensor(counts, dtype=torch.float64))
    assert int(state["server_opt"]["t"]) == 1
    theirs = {}
    for server_round in (1, 2):
        flower = _flower_optimizer("adam", opt)
        flower.current_arrays = dict(x0)
        record, _ = flower.aggregate_train(server_round, _messages(models, counts))
        theirs[server_round] = _flower_arrays(record)
    _close(state["x"], theirs[1], tol=1e-7)
    assert not np.allclose(theirs[1]["a"], theirs[2]["a"], rtol=1e-5, atol=0)


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


@pytest.mark.parametrize("name", ["none", "sgd"])
def test_fedavg_server_sgd_at_lr_one_and_none_are_the_average_exactly(name):
    """``none`` (the default) and SGD at lr 1 without momentum land on the aggregate itself:
    the same bits as FedAvg, no optimiser state."""
    plain = run_rounds(tiny_engine(build_algorithm("fedavg")), 2)
    one = SERVER_OPTIMIZERS.build(name)
    assert one.is_identity and one.lr == 1.0
    same = run_rounds(tiny_engine(build_algorithm("fedavg", server_opt=one)), 2)
    assert w(plain) == w(same) and "server_opt" not in same
    assert not SERVER_OPTIMIZERS.build("sgd", {"lr": 0.5}).is_identity


def test_a_server_optimizer_has_the_local_optimizers_shape():
    """One shape for both sides: server SGD's ``update(g, state, x, opt.lr)`` is the local
    SGD's ``update`` at that lr, momentum buffer included."""
    server = SERVER_OPTIMIZERS.build("sgd", {"lr": 0.5, "momentum": 0.9})
    local = sgd(momentum=0.9)
    x, g = {"w": torch.tensor([1.0, -2.0])}, {"w": torch.tensor([0.25, 4.0])}
    ours, s1 = server.update(g, server.init(x), x, server.lr)
    theirs, s2 = local.update(g, local.init(x), x, 0.5)
    assert torch.equal(ours["w"], theirs["w"]) and torch.equal(s1["b"]["w"], s2["b"]["w"])
    assert ours["w"].tolist() == [0.875, -4.0]  # x - 0.5 g, the buffer b = g at the first step


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


OUT_OF_RANGE = [  # (component, its options, the refused key, what the message says of it)
    ("server_opt=adam", {"beta2": 1.5}, "server_opt.beta2", r"must be in \[0, 1\), got 1\.5"),
    ("server_opt=yogi", {"beta2": -0.1}, "server_opt.beta2", r"must be in \[0, 1\)"),
    ("server_opt=adam", {"beta1": 1.0}, "server_opt.beta1", r"must be in \[0, 1\)"),
    ("server_opt=adagrad", {"lr": -1}, "server_opt.lr", r"must be a finite number > 0"),
    ("server_opt=adagrad", {"tau": 0}, "server_opt.tau", r"must be a finite number > 0"),
    ("server_opt=sgd", {"momentum": 1.0}, "server_opt.momentum", r"must be in \[0, 1\)"),
    ("aggregator=krum", {"num_malicious": -1}, "aggregator.num_malicious", r"must be >= 0"),
    ("aggregator=multikrum", {"num_select": 0}, "aggregator.num_select", r"must be >= 1"),
    ("optimizer=adam", {"beta2": 1.0}, "optimizer.beta2", r"must be in \[0, 1\)"),
]


@pytest.mark.parametrize(("component", "options", "key", "says"), OUT_OF_RANGE)
def test_out_of_range_options_are_refused_naming_only_their_key(component, options, key, says):
    prefix, _, name = component.partition("=")
    values = {prefix: name, **{f"{prefix}.{k}": v for k, v in options.items()}}
    with pytest.raises(ConfigError, match=re.escape(key) + " " + says) as err:
        make_config(values)
    message = str(err.value)
    assert "\n" not in message and set(re.findall(rf"{prefix}\.\w+", message)) == {key}


def test_bernoulli_participation_is_checked_against_the_aggregators_clients_per_round():
    """Bulyan with f = 1 needs 7 clients: 20 clients reachable with p_i ~ U[0.02, 0.2] give
    2.2 a round, so Bulyan would leave the model unchanged in nearly every round: refused at
    validation, as a uniform draw of too few clients is."""
    bernoulli = {"participation": "bernoulli", "clients": 20, "clients_per_round": 10}
    bulyan = {"aggregator": "bulyan", "aggregator.num_malicious": 1}
    with pytest.raises(
        ConfigError, match=r"needs at least 7 clients .*bernoulli expects 2\.2"
    ) as e:
        make_config({**bernoulli, **bulyan})
    assert "participation.p_min" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(
        ConfigError, match=r"krum needs at least 3 clients .*bernoulli expects 0\.22 "
    ):
        make_config({**bernoulli, "aggregator": "krum", "clients": 2, "clients_per_round": 2})
    wide = {"participation.p_min": 0.5, "participation.p_max": 0.9}  # 14 expected
    make_config({**bernoulli, **bulyan, **wide})


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
