"""MOON: the contrastive loss by hand, its zero gradient at a first participation, one local step
against a direct autograd computation, and the projection head."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from fedretain.algorithms import build_algorithm
from fedretain.algorithms.moon import contrastive_loss, represent
from fedretain.core.algorithm import ClientContext, RoundInfo
from fedretain.core.task import Task
from fedretain.errors import ConfigError
from fedretain.experiments.run import build_rounds
from fedretain.losses.ce import ce
from fedretain.models import build_model
from fedretain.recipe.config import make_config

RUN = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [16],
    "model.projection": 8,
    "clients": 8,
    "clients_per_round": 2,
    "partition": "dirichlet",
    "partition.alpha": 0.5,
    "batch_size": 32,
    "lr": 0.1,
    "local_epochs": 1,
}


def test_contrastive_loss_by_hand():
    z = torch.tensor([[1.0, 0.0]])
    z_glob = torch.tensor([[1.0, 1.0]])  # cos = 1/√2
    z_prev = torch.tensor([[0.0, 1.0]])  # cos = 0
    pos = (1 / math.sqrt(2)) / 0.5
    expected = -math.log(math.exp(pos) / (math.exp(pos) + math.exp(0.0)))
    assert float(contrastive_loss(z, z_glob, z_prev, 0.5)) == pytest.approx(expected, abs=1e-6)
    assert expected == pytest.approx(math.log(1 + math.exp(-math.sqrt(2))), abs=1e-12)


def _task(projection: int | None = 4) -> Task:
    torch.manual_seed(0)
    extra = {} if projection is None else {"projection": projection}
    model = build_model("mlp", (5,), 3, hidden=[6], **extra)
    return Task(model, ce, num_classes=3)


def _batch(n: int = 4) -> dict:
    g = torch.Generator().manual_seed(1)
    return {
        "x": torch.randn(n, 5, generator=g),
        "y": torch.randint(0, 3, (n,), generator=g),
        "w": torch.ones(n),
        "label_mask": torch.ones(3, dtype=torch.bool),
    }


def test_zero_contrastive_gradient_at_first_participation():
    # in float64, where "zero" is rounding (float32 leaves 3e-8, float64 1e-17)
    task = _task()
    task.model.double()
    params, buffers = task.init()
    x = _batch()["x"].double()
    z_glob = represent(task, params, buffers, x, train=False)[0]

    def con(p):
        z = represent(task, p, buffers, x, train=True)[0]
        return contrastive_loss(z, z_glob, z_glob, 0.5).mean()

    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    value = con(leaves)
    assert float(value.detach()) == pytest.approx(math.log(2), abs=1e-14)  # a constant
    grads = torch.autograd.grad(value, list(leaves.values()), allow_unused=True)
    used = [g for g in grads if g is not None]  # the classifier head does not shape z
    assert len(used) == len(grads) - 2
    assert max(float(g.abs().max()) for g in used) < 1e-14


def test_first_round_equals_fedavg_then_differs():
    def run(algorithm: str, rounds: int, **algo):
        cfg = {**RUN, "algorithm": algorithm, **{f"algo.{k}": v for k, v in algo.items()}}
        fed, engine = build_rounds(make_config(cfg))
        state = fed.algorithm.server_init(*fed.task.init())
        for rnd in range(rounds):  # the same two clients: round 2 is their second participation
            state, _ = engine.run_round(state, rnd, 0.1, clients=np.array([0, 1]))
        return state, engine

    moon1, engine = run("moon", 1, mu=5.0)
    avg1, _ = run("fedavg", 1)
    for k in avg1["x"]:
        torch.testing.assert_close(moon1["x"][k], avg1["x"][k], atol=1e-6, rtol=0)
    assert len(engine.store) == 2  # each client keeps its trained model as "prev"
    moon2, _ = run("moon", 2, mu=5.0)
    avg2, _ = run("fedavg", 2)
    diff = max(float((moon2["x"][k] - avg2["x"][k]).abs().max()) for k in avg2["x"])
    assert diff > 1e-4


def test_one_local_step_against_autograd():
    """The step state's gradient is ∇[CE + μ ℓ_con] with frozen z_glob, z_prev (eval mode)."""
    task = _task()
    algo = build_algorithm("moon", mu=2.0, tau=0.5)
    params, buffers = task.init()
    prev = {k: v + 0.1 * torch.randn_like(v) for k, v in params.items()}
    batch = _batch()
    info = RoundInfo(round=1, num_clients=4, clients=(0,), lr=0.1, seed=0)
    ctx = ClientContext(task=task, info=info, client_id=0, num_samples=4, data=batch)
    state = algo.local_init({"x": params, "buffers": buffers}, {"prev": prev}, ctx)
    new, metrics = algo.local_step(state, batch, ctx)

    model = task.model

    def rep(p):
        h = torch.func.functional_call(model.encoder, p_enc(p), (batch["x"],))
        return torch.func.functional_call(model.projection, p_sub(p, "projection."), (h,))

    def p_enc(p):
        return p_sub(p, "encoder.")

    def p_sub(p, prefix):
        return {k.removeprefix(prefix): v for k, v in p.items() if k.startswith(prefix)}

    leaves = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    z = rep(leaves)
    logits = F.linear(z, leaves["head.weight"], leaves["head.bias"])
    z_g, z_p = rep(params).detach(), rep(prev).detach()
    pos = F.cosine_similarity(z, z_g, dim=-1) / 0.5
    neg = F.cosine_similarity(z, z_p, dim=-1) / 0.5
    con = -(pos.exp() / (pos.exp() + neg.exp())).log()
    ce_value = F.cross_entropy(logits, batch["y"])
    total = ce_value + 2.0 * con.mean()
    grads = torch.autograd.grad(total, list(leaves.values()))
    for (k, v), g in zip(params.items(), grads):
        torch.testing.assert_close(new["params"][k], v - 0.1 * g, atol=1e-6, rtol=1e-5)
    assert float(metrics["loss"]) == pytest.approx(float(ce_value), abs=1e-6)  # task loss alone


def test_local_final_keeps_the_trained_model_and_first_prev_is_the_global():
    algo = build_algorithm("moon")
    x = {"w": torch.tensor([1.0])}
    assert algo.client_init(x)["prev"] is x
    state = {"params": {"w": torch.tensor([2.0])}, "buffers": {}}
    uplink, client_state = algo.local_final(state, {"prev": x}, None)
    assert uplink["y"] is state["params"] and client_state["prev"] is state["params"]


def test_projection_head_model_option():
    task = _task(projection=4)
    model = task.model
    assert [n for n, _ in model.named_parameters()][-6:] == [
        "projection.0.weight",
        "projection.0.bias",
        "projection.2.weight",
        "projection.2.bias",
        "head.weight",
        "head.bias",
    ]
    assert model.projection[0].in_features == model.projection[0].out_features == 6
    x = _batch()["x"]
    assert model.features(x).shape == (4, 4)
    torch.testing.assert_close(model(x), model.head(model.features(x)))


def test_warns_without_a_projection_head_only():
    batch = _batch()
    info = RoundInfo(round=0, num_clients=4, clients=(0,), lr=0.1, seed=0)
    algo = build_algorithm("moon")
    for projection, expect in ((None, True), (4, False)):
        task = _task(projection)
        params, buffers = task.init()
        ctx = ClientContext(task=task, info=info, client_id=0, num_samples=4, data=batch)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            algo.local_init({"x": params, "buffers": buffers}, algo.client_init(params), ctx)
        assert any("model.projection=256" in str(c.message) for c in caught) == expect


# float64: the engines agree to rounding, which proves the same computation; float32: the
# bound keeps >100x over the differences seen (1.5e-8; AVX-512 and AVX2 kernels, 1 and 2
# threads)
@pytest.mark.parametrize("precision, bound", [("fp64", 1e-12), ("fp32", 1e-5)])
def test_vmap_equals_sequential_with_the_projection_head(precision, bound):
    def run(engine_name: str):
        keys = {**RUN, "algorithm": "moon", "engine": engine_name, "precision": precision}
        fed, engine = build_rounds(make_config(keys))
        state = fed.algorithm.server_init(*fed.task.init())
        for rnd in range(2):
            state, _ = engine.run_round(state, rnd, 0.1, clients=fed.participation.clients(rnd))
        return state, engine

    seq, _ = run("sequential")
    vm, engine = run("vmap")
    assert engine.engine.name == "vmap"
    for k in seq["x"]:
        torch.testing.assert_close(seq["x"][k], vm["x"][k], atol=bound, rtol=0)


def test_bad_hyperparameters():
    with pytest.raises(ConfigError, match=r"algo\.tau must be > 0"):
        build_algorithm("moon", tau=0.0)
    with pytest.raises(ConfigError, match=r"algo\.mu must be >= 0"):
        build_algorithm("moon", mu=-1.0)
    with pytest.raises(ConfigError, match="projection must be an integer >= 1"):
        build_model("mlp", (5,), 3, projection=0)


def test_a_config_without_a_projection_head_is_refused():
    """MOON contrasts projected representations: validation refuses it without the head."""
    cfg = {k: v for k, v in RUN.items() if k != "model.projection"}
    refused = r"moon with model\.projection=None: .*model\.projection=P"
    with pytest.raises(ConfigError, match=refused):
        make_config({**cfg, "algorithm": "moon"})
    make_config({**cfg, "algorithm": "fedavg"})  # the same config is fine for other algorithms
