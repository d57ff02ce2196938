"""FedReg against an independent float64 NumPy computation of the paper's formulas.

Model: logits ``W x`` with ``W`` of shape 3 x 2 (no bias), so for soft or hard labels ``Y`` the
batch-mean cross-entropy has ``∇_W = mean_i (p_i − y_i) x_iᵀ`` and ``∇_{x_i} = Wᵀ(p_i − y_i)``
with ``p_i = softmax(W x_i)``. The sign steps never meet a gradient component below 0.089 in
magnitude, so float32 and float64 take the same signs.
"""

import numpy as np
import pytest
import torch
from torch import nn

from fedretain.algorithms import build_algorithm
from fedretain.algorithms.fedreg import (
    mean_ce,
    projection_weight,
    pseudo_and_perturbed,
    remove_component,
    safe_ratio,
)
from fedretain.core.algorithm import ClientContext, RoundInfo
from fedretain.core.optim import sgd
from fedretain.core.task import Task
from fedretain.core.tree import tree_vdot
from fedretain.errors import ConfigError
from fedretain.losses.ce import ce

W_G = np.array([[-0.9, 0.8], [0.9, -0.7], [0.2, -0.8]])
X = np.array([[3.5, -1.1], [-0.7, -1.6]])
Y = np.array([2, 1])
LR, GAMMA, ETA_S, STEPS = 0.5, 0.4, 0.2, 10


# --------------------------------------------------------------------------- the reference


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def grad_w(w, x, y_soft):
    return (softmax(x @ w.T) - y_soft).T @ x / len(x)


def grad_x(w, x, y_soft):
    return (softmax(x @ w.T) - y_soft) @ w


def sign_steps(w, x, y_soft, eta, steps):
    for _ in range(steps):
        x = x + eta * np.sign(grad_x(w, x, y_soft))
    return x


def reference_step(w, w_g, x, y, mg=False):
    """One FedReg step written out from ALGORITHMS.md, in float64."""
    onehot = np.eye(3)[y]
    x_s = sign_steps(w_g, x, onehot, ETA_S, STEPS)
    y_s = softmax(x_s @ w_g.T)
    x_p = sign_steps(w_g, x, onehot, 0.01 * ETA_S, STEPS)
    w_gamma = GAMMA * w + (1 - GAMMA) * w_g
    g = grad_w(w_gamma, x, onehot)
    if mg:
        g_u = grad_w(w_gamma, x_s, np.full_like(onehot, 1 / 3))
        g = g - (g * g_u).sum() / (g_u * g_u).sum() * g_u
    w = w - LR * g
    delta = w - w_g
    w_beta = 0.5 * (w + w_g)
    g_s = grad_w(w_beta, x_s, y_s)
    ws = max(0.0, (delta * g_s).sum() / (g_s * g_s).sum())
    g_p = grad_w(w_beta, x_p, onehot)
    wp = max(0.0, ((delta - ws * g_s) * g_p).sum() / (g_p * g_p).sum())
    return w - ws * g_s - wp * g_p, ws, wp


# --------------------------------------------------------------------------- helpers


def make_task(weight: np.ndarray) -> Task:
    model = nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor(weight, dtype=torch.float32))
    return Task(model, ce, num_classes=3)


def make_batch(x: np.ndarray = X, y: np.ndarray = Y) -> dict:
    return {
        "x": torch.tensor(x, dtype=torch.float32),
        "y": torch.tensor(y),
        "w": torch.ones(len(y)),
        "label_mask": torch.ones(3, dtype=torch.bool),
        "idx": torch.arange(len(y)),
    }


def start(algo, weight: np.ndarray, lr: float = LR, batch: dict | None = None):
    """Local training of one client whose whole data is one batch."""
    task = make_task(weight)
    params, buffers = task.init()
    batch = batch if batch is not None else make_batch()
    info = RoundInfo(round=0, num_clients=1, clients=(0,), lr=lr, seed=0)
    ctx = ClientContext(task=task, info=info, client_id=0, num_samples=2, data=batch)
    state = algo.local_init(algo.broadcast(algo.server_init(params, buffers), info), {}, ctx)
    return state, batch, ctx


def as_np(t: torch.Tensor) -> np.ndarray:
    return t.detach().double().numpy()


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("mg", [False, True])
def test_two_local_steps_match_the_formulas(mg):
    algo = build_algorithm("fedreg", gamma=GAMMA, eta_s=ETA_S, steps=STEPS, mg=mg)
    assert algo.hparams["eta_p"] == pytest.approx(0.01 * ETA_S)  # the default η_p
    state, batch, ctx = start(algo, W_G)
    w_ref = W_G.copy()
    for _ in range(2):  # the second step starts away from θ_g
        state, metrics = algo.local_step(state, batch, ctx)
        w_ref, ws, wp = reference_step(w_ref, W_G, X, Y, mg=mg)
        assert ws > 0.4 and wp > 0.01  # both projections are active in this example
        assert float(metrics["w_s"]) == pytest.approx(ws, rel=1e-4)
        assert float(metrics["w_p"]) == pytest.approx(wp, rel=1e-3)
        np.testing.assert_allclose(as_np(state["params"]["weight"]), w_ref, atol=1e-5)
    # the received model is left alone: W_G exactly, as rounded to float32
    np.testing.assert_array_equal(as_np(state["down"]["x"]["weight"]), np.float32(W_G))


def test_mg_changes_the_step():
    plain, _, _ = reference_step(W_G, W_G, X, Y)
    with_mg, _, _ = reference_step(W_G, W_G, X, Y, mg=True)
    assert np.abs(plain - with_mg).max() > 0.1  # so the MG case above tests something


def test_pseudo_and_perturbed_data_come_from_independent_copies():
    task = make_task(W_G)
    params, buffers = task.init()
    batch = make_batch()
    x_before = batch["x"].clone()
    x_s, y_s, x_p = pseudo_and_perturbed(task, params, buffers, batch, ETA_S, 0.002, STEPS)
    onehot = np.eye(3)[Y]
    # each from the real x with its own step size (aliasing would start x_p at x_s); float32
    # against the float64 reference: 1.4e-6 seen (AVX-512 and AVX2 kernels, 1 and 2 threads),
    # the rounding of x's float32 steps; aliasing is off by a whole step (>= 2e-3)
    np.testing.assert_allclose(as_np(x_s), sign_steps(W_G, X, onehot, ETA_S, STEPS), atol=2e-5)
    np.testing.assert_allclose(as_np(x_p), sign_steps(W_G, X, onehot, 0.002, STEPS), atol=2e-5)
    np.testing.assert_allclose(as_np(y_s), softmax(as_np(x_s) @ W_G.T), atol=1e-6)
    assert float((x_p - batch["x"]).abs().max()) <= STEPS * 0.002 + 1e-6
    assert float((x_s - batch["x"]).abs().max()) == pytest.approx(STEPS * ETA_S, abs=1e-5)
    # disjoint memory (two row ranges of one 2B batch), none of it the batch's; batch untouched
    assert x_s.data_ptr() + x_s.numel() * x_s.element_size() <= x_p.data_ptr()
    assert batch["x"].untyped_storage().data_ptr() != x_s.untyped_storage().data_ptr()
    assert torch.equal(batch["x"], x_before)


def test_descent_direction_steps_down_the_loss():
    task = make_task(W_G)
    params, buffers = task.init()
    x_s, _, _ = pseudo_and_perturbed(task, params, buffers, make_batch(), ETA_S, 0.0, 3, -1.0)
    np.testing.assert_allclose(as_np(x_s), sign_steps(W_G, X, np.eye(3)[Y], -ETA_S, 3), atol=1e-5)


def test_zero_norms_give_zero_weights_not_nan():
    assert float(safe_ratio(torch.tensor(0.0), torch.tensor(0.0))) == 0.0
    assert float(safe_ratio(torch.tensor(3.0), torch.tensor(2.0))) == 1.5
    zero = {"a": torch.zeros(2), "b": torch.zeros(1, 1)}
    d = {"a": torch.ones(2), "b": torch.ones(1, 1)}
    assert float(projection_weight(d, zero)) == 0.0
    assert float(projection_weight(d, d)) == 1.0
    assert float(projection_weight(d, {"a": -torch.ones(2), "b": -torch.ones(1, 1)})) == 0.0
    # a whole step where every gradient is zero: equal rows (uniform softmax, ∇_x = 0, so the
    # generated data stay at x) and x = 0 (every parameter gradient vanishes)
    algo = build_algorithm("fedreg")
    w_flat = np.array([[0.3, -0.2]] * 3)
    state, batch, ctx = start(algo, w_flat, batch=make_batch(np.zeros((2, 2)), Y))
    state, metrics = algo.local_step(state, batch, ctx)
    assert float(metrics["w_s"]) == 0.0 and float(metrics["w_p"]) == 0.0
    np.testing.assert_array_equal(as_np(state["params"]["weight"]), np.float32(w_flat))


def test_mg_gradient_is_orthogonal_to_the_uniform_label_gradient():
    task = make_task(W_G)
    params, buffers = task.init()
    batch = make_batch()
    x_s, _, _ = pseudo_and_perturbed(task, params, buffers, batch, ETA_S, 0.002, STEPS)
    w = batch["w"]
    g, _ = task.grad_and_aux(
        lambda p: (mean_ce(task, p, {}, batch["x"], batch["y"], w), {}), params
    )
    uniform = torch.full((x_s.shape[0], task.num_classes), 1.0 / task.num_classes)
    g_u, _ = task.grad_and_aux(lambda p: (mean_ce(task, p, {}, x_s, uniform, w), {}), params)
    g_mg = remove_component(g, g_u)
    scale = float(tree_vdot(g, g).sqrt() * tree_vdot(g_u, g_u).sqrt())
    assert abs(float(tree_vdot(g, g_u))) > 0.1 * scale  # g had a component along g'
    # float32 rounding leaves 1.6e-7 of the scale (AVX-512 and AVX2 kernels, 1 and 2 threads)
    assert abs(float(tree_vdot(g_mg, g_u))) < 2e-6 * scale
    # g' = 0 leaves g as it is
    zero = {k: torch.zeros_like(v) for k, v in g_u.items()}
    assert torch.equal(remove_component(g, zero)["weight"], g["weight"])


def test_generated_once_per_round_and_looked_up_by_batch_rows():
    algo = build_algorithm("fedreg", eta_s=ETA_S, steps=STEPS)
    state, data, ctx = start(algo, W_G)
    task = ctx.task
    params, buffers = task.init()
    x_s, y_s, x_p = pseudo_and_perturbed(task, params, buffers, data, ETA_S, 0.01 * ETA_S, STEPS)
    assert torch.equal(state["generated"]["y_s"], y_s)
    gen = state["generated"]
    assert torch.equal(gen["x_s"], x_s) and torch.equal(gen["x_p"], x_p)
    # a one-row batch (row 1) uses row 1 of the generated data: the same step as computing
    # the pseudo data for that row alone
    row = {k: (v[1:2] if k != "label_mask" else v) for k, v in data.items()}
    row["idx"] = torch.tensor([1])
    new, _ = algo.local_step(state, row, ctx)
    alone = {**row, "idx": torch.tensor([0])}
    state1, _, ctx1 = start(algo, W_G, batch={**alone})
    new1, _ = algo.local_step(state1, alone, ctx1)
    torch.testing.assert_close(new["params"]["weight"], new1["params"]["weight"])


def test_local_step_is_pure():
    algo = build_algorithm("fedreg")
    state, batch, ctx = start(algo, W_G)
    before = state["params"]["weight"].clone()
    algo.local_step(state, batch, ctx)
    assert torch.equal(state["params"]["weight"], before)


def test_server_takes_the_unweighted_mean_by_default():
    algo = build_algorithm("fedreg")
    state = algo.server_init({"w": torch.zeros(1)}, {})
    uplinks = {"y": {"w": torch.tensor([[1.0], [4.0]])}, "buffers": {}}
    info = RoundInfo(round=0, num_clients=2, clients=(0, 1), lr=0.1, seed=0)
    new, _ = algo.aggregate(state, uplinks, torch.tensor([1.0, 3.0]), info)
    assert float(new["x"]["w"]) == pytest.approx(2.5)
    new, _ = build_algorithm("fedreg", weighted=True).aggregate(
        state, uplinks, torch.tensor([1.0, 3.0]), info
    )
    assert float(new["x"]["w"]) == pytest.approx(3.25)


@pytest.mark.parametrize(
    ("hparams", "match"),
    [
        ({"gamma": 1.5}, r"algo\.gamma must be in \[0, 1\]"),
        ({"eta_s": -0.1}, r"algo\.eta_s must be >= 0"),
        ({"eta_p": -1.0}, r"algo\.eta_p must be a number >= 0"),
        ({"steps": -1}, r"algo\.steps must be an integer >= 0"),
        ({"direction": "up"}, r"algo\.direction must be one of ascent, descent"),
    ],
)
def test_bad_hyperparameters_are_named(hparams, match):
    with pytest.raises(ConfigError, match=match):
        build_algorithm("fedreg", **hparams)


def test_refuses_local_momentum():
    with pytest.raises(ConfigError, match="plain local SGD"):
        build_algorithm("fedreg", opt=sgd(momentum=0.9))


def test_clamp_keeps_generated_data_in_the_data_range():
    task = make_task(W_G)
    params, buffers = task.init()
    batch = make_batch()
    lo, hi = float(batch["x"].min()), float(batch["x"].max())
    free, _, _ = pseudo_and_perturbed(task, params, buffers, batch, ETA_S, 0.002, STEPS)
    assert float(free.min()) < lo or float(free.max()) > hi  # the steps leave the range ...
    x_s, _, x_p = pseudo_and_perturbed(
        task, params, buffers, batch, ETA_S, 0.002, STEPS, clamp=True
    )
    for x in (x_s, x_p):  # ... unless clamped
        assert float(x.min()) >= lo and float(x.max()) <= hi
