"""DP-SGD as a transformation of the local step: equivalences, clipping, noise, refusals."""

import numpy as np
import pytest
import torch
from torch import nn

from fedretain.algorithms import build_algorithm
from fedretain.algorithms.fedavg import fedavg
from fedretain.core.algorithm import ClientContext, RoundInfo
from fedretain.core.client import train_client
from fedretain.core.task import Task
from fedretain.core.tree import tree_sub
from fedretain.engines.vmap import vectorisable
from fedretain.errors import ConfigError
from fedretain.losses import get_loss
from fedretain.models import build_model
from fedretain.privacy.dpsgd import (
    DPSGD,
    RNG_KEY,
    composable_algorithms,
    dp_gradient,
    noise_generator,
    with_dpsgd,
)

PER_SAMPLE = ["opacus", "functorch"]


def info(rnd: int = 0, seed: int = 0) -> RoundInfo:
    return RoundInfo(round=rnd, num_clients=4, clients=(0, 1, 2, 3), lr=0.1, seed=seed)


def data(n: int, shape: tuple[int, ...], classes: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {
        "x": torch.randn((n, *shape), generator=g),
        "y": torch.randint(0, classes, (n,), generator=g),
        "w": torch.ones(n),
        "label_mask": torch.ones(classes, dtype=torch.bool),
    }


def mlp_task(seed: int = 0) -> Task:
    torch.manual_seed(seed)
    return Task(build_model("mlp", (6,), 3, hidden=[8]), get_loss("ce"), 3)


def cnn_task(seed: int = 0) -> Task:
    torch.manual_seed(seed)
    model = build_model("resnet20", (3, 8, 8), 3, norm="group", groups=2)
    return Task(model, get_loss("ce"), 3)


def train(algo, task, batch, plan, cid=0, rnd=0, seed=0):
    params, buffers = task.init()
    down = algo.broadcast(algo.server_init(params, buffers), info(rnd, seed))
    update = train_client(
        algo, task, down, algo.client_init(params), batch, plan, info(rnd, seed), cid
    )
    return update


def close(a: dict, b: dict, tol: float = 1e-6) -> None:
    assert a.keys() == b.keys()
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=0, atol=tol, msg=k)


PLAN = [np.array([0, 1, 2, 3]), np.array([4, 5, 6, 7]), np.array([5, 2, 7, 0])]


def plain_penalty(params, state):
    # an autograd penalty (not closed form): 0.05 * sum of squares of params - x
    x = state["down"]["x"]
    return 0.05 * sum(((params[k] - x[k]) ** 2).sum() for k in params)


@pytest.mark.parametrize("per_sample", PER_SAMPLE)
@pytest.mark.parametrize("name", ["fedavg", "fedprox", "autograd-penalty"])
def test_no_noise_and_no_clipping_is_the_plain_algorithm(per_sample, name):
    # full batches: sum of per-example gradients / B = the batch mean gradient
    task = mlp_task()
    batch = data(8, (6,), 3)
    if name == "autograd-penalty":
        base = fedavg(penalty=plain_penalty)
    else:
        base = build_algorithm(name, **({"mu": 0.5} if name == "fedprox" else {}))
    dp = with_dpsgd(base, DPSGD(0.0, 1e6, 4, per_sample))
    plain, private = train(base, task, batch, PLAN), train(dp, task, batch, PLAN)
    close(private.uplink["y"], plain.uplink["y"])
    assert float(private.loss) == pytest.approx(float(plain.loss), abs=1e-6)


@pytest.mark.parametrize("per_sample", PER_SAMPLE)
def test_clipping_by_hand(per_sample):
    # f(x) = w x, loss ½ (w x − y)², w = 1: per-example gradient (w x − y) x
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    task = Task(model, lambda p, y, m=None: 0.5 * (p.squeeze(-1) - y) ** 2, num_classes=1)
    # gradients 1 (x=1, y=0) and 4 (x=2, y=0); a padding row (w=0) with gradient 90
    batch = {
        "x": torch.tensor([[1.0], [2.0], [10.0]]),
        "y": torch.tensor([0.0, 0.0, 1.0]),
        "w": torch.tensor([1.0, 1.0, 0.0]),
        "label_mask": torch.ones(1, dtype=torch.bool),
    }
    C, B, lr = 2.0, 2, 0.1
    algo = with_dpsgd(fedavg(), DPSGD(0.0, C, B, per_sample))
    update = train(algo, task, batch, [np.array([0, 1, 2])])
    clipped = 1.0 * min(1.0, C / (1.0 + 1e-6)) + 4.0 * min(1.0, C / (4.0 + 1e-6))
    expected = 1.0 - lr * clipped / B
    assert float(update.uplink["y"]["weight"]) == pytest.approx(expected, abs=1e-6)
    assert expected == pytest.approx(0.85, abs=1e-5)  # clipped mean 1.5, not the mean 2.5


@pytest.mark.parametrize("make_task", [mlp_task, cnn_task], ids=["mlp", "resnet20-group"])
def test_opacus_and_functorch_give_the_same_noised_update(make_task):
    task = make_task()
    shape = (6,) if make_task is mlp_task else (3, 8, 8)
    batch = data(8, shape, 3, seed=1)
    batch["w"][7] = 0.0  # a padding row
    dp = {p: DPSGD(1.3, 0.7, 4, p) for p in PER_SAMPLE}
    updates = {p: train(with_dpsgd(fedavg(), dp[p]), task, batch, PLAN[:2], cid=2) for p in dp}
    close(updates["opacus"].uplink["y"], updates["functorch"].uplink["y"])
    torch.testing.assert_close(updates["opacus"].loss, updates["functorch"].loss)
    assert torch.equal(updates["opacus"].final[RNG_KEY], updates["functorch"].final[RNG_KEY])
    # and the noise is there: the update is not the plain one
    plain = train(fedavg(), task, batch, PLAN[:2], cid=2)
    diff = tree_sub(plain.uplink["y"], updates["opacus"].uplink["y"])
    assert max(float(v.abs().max()) for v in diff.values()) > 1e-3


@pytest.mark.parametrize("per_sample", PER_SAMPLE)
def test_noise_is_deterministic_per_seed_round_and_client(per_sample):
    task = mlp_task()
    batch = data(8, (6,), 3)
    algo = with_dpsgd(fedavg(), DPSGD(1.0, 1.0, 4, per_sample))
    first = train(algo, task, batch, PLAN, cid=1, rnd=3, seed=7).uplink["y"]
    again = train(algo, task, batch, PLAN, cid=1, rnd=3, seed=7).uplink["y"]
    close(first, again, tol=0.0)
    for other in [{"cid": 2, "rnd": 3, "seed": 7}, {"cid": 1, "rnd": 4, "seed": 7}]:
        moved = train(algo, task, batch, PLAN, **other).uplink["y"]
        assert any(not torch.allclose(first[k], moved[k]) for k in first), other


def test_noise_seed_and_generator_state_round_trip():
    a = noise_generator(0, 1, 2, torch.device("cpu"))
    b = noise_generator(0, 1, 2, torch.device("cpu"))
    c = noise_generator(0, 1, 3, torch.device("cpu"))
    assert torch.equal(a.get_state(), b.get_state())
    assert not torch.equal(a.get_state(), c.get_state())


@pytest.mark.parametrize("per_sample", PER_SAMPLE)
def test_noise_std_is_sigma_c_over_b(per_sample):
    # zero inputs on a bias-free linear model: every per-example gradient is zero
    torch.manual_seed(0)
    task = Task(nn.Linear(100, 100, bias=False), get_loss("ce"), 100)
    batch = data(5, (100,), 100)
    batch["x"] = torch.zeros(5, 100)
    sigma, C, B = 1.5, 0.8, 5
    params, buffers = task.init()
    state = {
        "params": params,
        "buffers": buffers,
        RNG_KEY: noise_generator(0, 0, 0, torch.device("cpu")).get_state(),
    }
    ctx = ClientContext(task=task, info=info(), client_id=0, num_samples=5, data=batch)
    grads, _, _, new_state = dp_gradient(DPSGD(sigma, C, B, per_sample))(state, batch, ctx)
    g = grads["weight"].flatten()
    assert abs(float(g.mean())) < 4 * sigma * C / B / 100
    assert float(g.std()) == pytest.approx(sigma * C / B, rel=0.03)
    assert not torch.equal(new_state[RNG_KEY], state[RNG_KEY])  # the generator moved on


def test_transformed_algorithm_records_settings_and_leaves_vmap():
    algo = with_dpsgd(build_algorithm("fedprox", mu=0.1), DPSGD(1.1, 1.0, 32))
    assert algo.name == "fedprox"
    assert algo.hparams["mu"] == 0.1
    assert algo.hparams["dp_noise_multiplier"] == 1.1
    assert algo.hparams["dp_max_grad_norm"] == 1.0
    assert algo.hparams["dp_expected_batch_size"] == 32
    assert not algo.hints.vectorisable
    why = vectorisable(algo, nn.Linear(2, 2))
    assert "fedprox is not vectorisable" in why and "DP-SGD" in why and "generator" in why
    with pytest.raises(ConfigError, match="already"):
        with_dpsgd(algo, DPSGD(1.1, 1.0, 32))


def test_composable_algorithms():
    names = composable_algorithms()
    assert {"fedavg", "fedprox", "feddyn", "fedavgm"} <= set(names)
    assert not {"fedreg", "moon", "mimelite", "fedmlb", "scaffold", "fedcurv"} & set(names)
    task, batch = mlp_task(), data(8, (6,), 3)
    for name in names:  # each trains (two noised steps) and stays finite
        update = train(with_dpsgd(build_algorithm(name), DPSGD(1.0, 1.0, 4)), task, batch, PLAN[:2])
        assert all(bool(v.isfinite().all()) for up in update.uplink.values() for v in up.values())


def test_the_composable_list_is_what_privacy_dpsgd_accepts():
    """The algorithms a refusal lists are those ``privacy=dpsgd`` accepts: not ``sgd``, whose
    full-batch step a run refuses (DP-SGD divides by the expected mini-batch size)."""
    from fedretain.recipe.config import make_config, privacy_mechanism
    from fedretain.registry import kind

    mechanism = privacy_mechanism(make_config({"privacy": "dpsgd"}))
    listed = composable_algorithms()
    assert "sgd" not in listed
    for name in kind("algorithm"):
        try:
            algo = build_algorithm(name)
        except ConfigError:  # the continual methods need a scenario's settings
            continue
        try:
            mechanism.apply(algo, nn.Linear(6, 3))
        except ConfigError as e:
            assert name not in listed, f"{name} listed, then refused: {e}"
        else:
            assert name in listed, f"{name} accepted but not listed"


@pytest.mark.parametrize("name", ["fedreg", "moon", "scaffold", "mimelite", "gradma", "fedcurv"])
def test_algorithms_with_their_own_local_step_are_refused(name):
    with pytest.raises(ConfigError) as err:
        with_dpsgd(build_algorithm(name), DPSGD(1.0, 1.0, 8))
    message = str(err.value)
    assert "\n" not in message and name in message and "fedavg" in message


def test_batchnorm_model_is_refused():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 4), nn.BatchNorm1d(4), nn.Linear(4, 3))
    task = Task(model, get_loss("ce"), 3)
    algo = with_dpsgd(fedavg(), DPSGD(1.0, 1.0, 4))
    with pytest.raises(ConfigError, match="GroupNorm") as err:
        train(algo, task, data(8, (6,), 3), PLAN)
    assert "\n" not in str(err.value) and "model.norm=group" in str(err.value)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"noise_multiplier": -1.0},
        {"noise_multiplier": float("nan")},
        {"max_grad_norm": 0.0},
        {"max_grad_norm": float("inf")},
        {"expected_batch_size": 0},
        {"expected_batch_size": 2.5},
        {"per_sample": "jax"},
    ],
)
def test_bad_settings_are_one_line_config_errors(kwargs):
    settings = {"noise_multiplier": 1.0, "max_grad_norm": 1.0, "expected_batch_size": 8}
    with pytest.raises(ConfigError) as err:
        DPSGD(**{**settings, **kwargs})
    assert "\n" not in str(err.value)
