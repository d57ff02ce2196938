"""Gradient inversion on a client's uplink: the observed update, iDLG's label rule, DLG and
Inverting Gradients on tiny models, and the settings' validation.

Tiny models keep every attack well under a second: a bias-free linear layer (updates computed
by hand in NumPy) and a one-hidden-layer MLP on 4x4 images, whose first-layer update
determines the image, so a working attack recovers it almost exactly.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedretain.algorithms import build_algorithm
from fedretain.core.task import Task
from fedretain.data.base import Dataset
from fedretain.errors import ConfigError
from fedretain.losses.ce import ce
from fedretain.models import build_model
from fedretain.privacy.attacks import (
    AttackSettings,
    attack_targets,
    head_key,
    infer_label,
    invert,
    mean_std,
    observed_update,
    simulated_update,
    target_update,
)
from fedretain.privacy.quality import psnr, random_image_psnr

LR = 0.1
SHAPE = (1, 1, 4, 4)


def mlp_task(num_classes: int = 4, hidden: tuple[int, ...] = (32,), seed: int = 0) -> Task:
    torch.manual_seed(seed)
    return Task(build_model("mlp", SHAPE[1:], num_classes, hidden=hidden), ce, num_classes)


def server_state(algo, task: Task) -> dict:
    params, buffers = task.init()
    return algo.server_init(params, buffers)


def image(seed: int) -> torch.Tensor:
    return torch.rand(SHAPE, generator=torch.Generator().manual_seed(1000 + seed))


# --------------------------------------------------------------------------- observed_update

W0 = np.array([[0.3, -0.2], [-0.5, 0.4], [0.1, 0.6]])
X = np.array([[1.0, -2.0], [0.5, 1.5]])
Y = np.array([2, 0])


def sgd_by_hand(w: np.ndarray, steps: int, lr: float = 0.5) -> np.ndarray:
    """``steps`` SGD steps on the batch-mean cross-entropy of logits ``X Wᵀ``; the update."""
    start = w
    for _ in range(steps):
        z = X @ w.T
        p = np.exp(z - z.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        w = w - lr * (p - np.eye(3)[Y]).T @ X / len(X)
    return w - start


def linear_task() -> Task:
    model = nn.Linear(2, 3, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor(W0, dtype=torch.float32))
    return Task(model, ce, num_classes=3)


@pytest.mark.parametrize(
    ("name", "key", "steps"), [("fedavg", "y", 3), ("scaffold", "dy", 3), ("gradma", "d", 1)]
)
def test_observed_update_is_the_hand_computed_sgd_update(name, key, steps):
    # SCAFFOLD's control variates start at zero and GradMA's QP constraints hold at a first
    # participation's first step, so all three take plain SGD steps here
    algo, task = build_algorithm(name), linear_task()
    state = server_state(algo, task)
    x, y = torch.tensor(X, dtype=torch.float32), torch.tensor(Y)
    update = target_update(algo, task, state, x, y, lr=0.5, steps=steps)
    expected = sgd_by_hand(W0, steps)
    assert np.allclose(update["weight"].numpy(), expected, atol=1e-6)
    assert np.abs(expected).max() > 0.05

    # the uplink's own key, and the sign GradMA sends it with
    downlink = {"x": state["x"], "buffers": state["buffers"]}
    raw_by_key = {
        "y": {"y": {"weight": state["x"]["weight"] + torch.tensor(expected)}},
        "dy": {"dy": {"weight": torch.tensor(expected)}},
        "d": {"d": {"weight": -torch.tensor(expected)}},
    }[key]
    got = observed_update(raw_by_key, downlink)
    assert np.allclose(got["weight"].numpy(), expected, atol=1e-6)


def test_fedavg_update_is_the_attackers_sgd_model():
    task = mlp_task()
    algo = build_algorithm("fedavg")
    state = server_state(algo, task)
    x, y = image(0), torch.tensor([1])
    real = target_update(algo, task, state, x, y, LR, steps=3)
    model = simulated_update(task, state["x"], state["buffers"], x, y, LR, steps=3)
    for k in real:
        assert torch.allclose(real[k], model[k].detach(), atol=1e-6), k
    one = simulated_update(task, state["x"], state["buffers"], x, y, LR, create_graph=False)
    grads, _, _ = task.grad(state["x"], state["buffers"], {"x": x, "y": y, "w": torch.ones(1)})
    for k in one:
        assert torch.allclose(one[k], -LR * grads[k], atol=1e-7), k


def test_an_uplink_without_a_model_update_is_refused():
    with pytest.raises(ConfigError, match="no model update") as err:
        observed_update({"grad": {}, "buffers": {}}, {"x": {}})
    assert "\n" not in str(err.value)


# --------------------------------------------------------------------------- iDLG's label rule


@pytest.mark.parametrize("hidden", [(16,), ()])
def test_idlg_label_rule_recovers_every_label(hidden):
    task = mlp_task(num_classes=5, hidden=hidden, seed=3)
    algo = build_algorithm("fedavg")
    state = server_state(algo, task)
    assert head_key(state["x"]) == "head.weight"
    for label in range(5):
        update = target_update(algo, task, state, image(label), torch.tensor([label]), LR)
        assert infer_label(update) == label
        # the rule is about the gradient's sign: the true row's update sums highest
        rows = update["head.weight"].sum(dim=1)
        assert rows[label] > 0 and (rows[torch.arange(5) != label] < 0).all()


# --------------------------------------------------------------------------- reconstruction


@pytest.mark.parametrize(
    "settings",
    [
        AttackSettings.for_method("ig", iterations=200, restarts=1),
        AttackSettings.for_method("dlg", iterations=100, restarts=2),
        AttackSettings.for_method("idlg", iterations=100, restarts=2),
    ],
    ids=["ig", "dlg", "idlg"],
)
def test_attack_reconstructs_a_one_step_fedavg_image_and_not_from_another_update(settings):
    task = mlp_task()
    algo = build_algorithm("fedavg")
    state = server_state(algo, task)
    x, other = image(0), image(1)
    params, buffers = state["x"], state["buffers"]
    update = target_update(algo, task, state, x, torch.tensor([2]), LR)
    rec = invert(task, params, buffers, update, LR, SHAPE, settings=settings)
    good = psnr(rec.x, x).item()
    baseline = random_image_psnr(x).item()
    assert rec.labels.tolist() == [2]
    assert good > 40 and good > baseline + 25, (good, baseline)
    assert rec.x.min() >= 0 and rec.x.max() <= 1

    wrong_update = target_update(algo, task, state, other, torch.tensor([2]), LR)
    wrong = invert(task, params, buffers, wrong_update, LR, SHAPE, settings=settings)
    misled = psnr(wrong.x, x).item()
    assert misled < good - 20 and misled < baseline + 10, (misled, good, baseline)
    assert psnr(wrong.x, other).item() > misled + 10  # it recovered the image it was given


def dlg_lenet(side: int, seed: int) -> Task:
    """DLG's sigmoid LeNet (the zoo's ``lenet-dlg``) on one-channel ``side``² images."""
    torch.manual_seed(seed)
    return Task(build_model("lenet-dlg", (1, side, side), 10), ce, 10)


def smooth_image(side: int, seed: int) -> torch.Tensor:
    coarse = torch.rand((1, 1, 4, 4), generator=torch.Generator().manual_seed(seed))
    return F.interpolate(coarse, size=(side, side), mode="bilinear", align_corners=True)


@pytest.mark.parametrize("seed", [0, 1])
def test_idlg_reaches_dlgs_quality_through_dlgs_sigmoid_lenet(seed):
    # DLG and iDLG report pixel-exact recovery of one image through this LeNet; 100 L-BFGS
    # iterations reach over 100 dB here (above 40 dB the error is float32 rounding)
    side, label = 8, torch.tensor([seed + 3])
    task = dlg_lenet(side, seed)
    algo = build_algorithm("fedavg")
    state = server_state(algo, task)
    x = smooth_image(side, seed)
    update = target_update(algo, task, state, x, label, LR)
    settings = AttackSettings.for_method("idlg", iterations=100)
    rec = invert(task, state["x"], state["buffers"], update, LR, x.shape, settings=settings)
    assert rec.labels.tolist() == label.tolist()
    assert psnr(rec.x, x).item() > 40


def test_uniform_init_starts_in_the_data_box():
    task = mlp_task()
    algo = build_algorithm("fedavg")
    state = server_state(algo, task)
    update = target_update(algo, task, state, image(0), torch.tensor([0]), LR)
    args = (task, state["x"], state["buffers"], update, LR, SHAPE)
    # one IG step of lr 1e-6 leaves x' where it started: uniform in the box, not clamped
    start = AttackSettings(iterations=1, lr=1e-6, restarts=1, box=(0.25, 0.75), init="uniform")
    rec = invert(*args, settings=start)
    assert rec.x.min() > 0.25 and rec.x.max() < 0.75 and rec.x.std() > 0.05
    normal = invert(*args, settings=AttackSettings(iterations=1, lr=1e-6, box=(0.25, 0.75)))
    assert (normal.x == 0.25).any() and (normal.x == 0.75).any()  # N(0, 1), clamped


def test_same_seed_same_reconstruction():
    task = mlp_task()
    algo = build_algorithm("fedavg")
    state = server_state(algo, task)
    update = target_update(algo, task, state, image(0), torch.tensor([0]), LR)
    args = (task, state["x"], state["buffers"], update, LR, SHAPE)
    for method in ("ig", "dlg"):
        settings = AttackSettings.for_method(method, iterations=5, restarts=2, seed=7)
        first, again = invert(*args, settings=settings), invert(*args, settings=settings)
        assert torch.equal(first.x, again.x) and first.loss == again.loss
        other = invert(*args, settings=AttackSettings.for_method(method, iterations=5, seed=8))
        assert not torch.equal(first.x, other.x)


def test_ig_with_given_labels_attacks_a_batch():
    task = mlp_task()
    algo = build_algorithm("fedavg")
    state = server_state(algo, task)
    x = torch.cat([image(0), image(1)])
    y = torch.tensor([0, 3])
    update = target_update(algo, task, state, x, y, LR)
    settings = AttackSettings.for_method("ig", iterations=30, restarts=1)
    rec = invert(
        task, state["x"], state["buffers"], update, LR, x.shape, labels=y, settings=settings
    )
    assert rec.x.shape == x.shape and rec.labels.tolist() == [0, 3]


def test_fedreg_with_mg_changes_the_uplink():
    task = mlp_task()
    fedavg = build_algorithm("fedavg")
    state = server_state(fedavg, task)
    x, y = image(0), torch.tensor([1])
    plain = target_update(fedavg, task, state, x, y, LR)
    updates = {
        mg: target_update(build_algorithm("fedreg", mg=mg, eta_s=0.03), task, state, x, y, LR)
        for mg in (False, True)
    }

    def distance(a, b):
        num = sum(float((a[k] - b[k]).norm() ** 2) for k in a)
        return math.sqrt(num / sum(float(b[k].norm() ** 2) for k in b))

    assert distance(updates[True], plain) > 1e-2
    assert distance(updates[True], updates[False]) > 1e-2
    assert all(torch.isfinite(v).all() for v in updates[True].values())


def test_attack_targets_reports_each_target():
    task = mlp_task()
    algo = build_algorithm("fedavg")
    state = server_state(algo, task)
    gen = torch.Generator().manual_seed(4)
    x = torch.randint(0, 256, (3, 1, 4, 4), generator=gen, dtype=torch.uint8)
    y = torch.tensor([0, 1, 3])
    ds = Dataset("tiny", x, y, x, y, num_classes=4)
    settings = AttackSettings.for_method("ig", iterations=150, restarts=1)
    results = attack_targets(algo, task, state, ds, [2, 0], LR, settings)
    assert [r["index"] for r in results] == [2, 0]
    assert [(r["label_guess"], r["label_true"]) for r in results] == [(3, 3), (0, 0)]
    for r in results:
        target = x[r["index"]].float() / 255
        assert r["reconstruction"].shape == (1, 4, 4)
        assert r["psnr"] == pytest.approx(psnr(r["reconstruction"], target).item())
        assert r["psnr"] > 30 and 0.9 < r["ssim"] <= 1.0 + 1e-6
    mean, std = mean_std(results)
    values = [r["psnr"] for r in results]
    assert mean == pytest.approx(np.mean(values)) and std == pytest.approx(np.std(values))
    assert mean_std([{"psnr": 1.0}, {"psnr": 3.0}]) == (2.0, 1.0)
    with pytest.raises(ConfigError, match="out of range"):
        attack_targets(algo, task, state, ds, [3], LR, settings)


# --------------------------------------------------------------------------- settings


@pytest.mark.parametrize(
    "make",
    [
        lambda: AttackSettings(method="gan"),
        lambda: AttackSettings(iterations=0),
        lambda: AttackSettings(iterations=2.5),
        lambda: AttackSettings(lr=-0.1),
        lambda: AttackSettings(lr=math.inf),
        lambda: AttackSettings(restarts=0),
        lambda: AttackSettings(tv=-1.0),
        lambda: AttackSettings(distance="l1"),
        lambda: AttackSettings(box=(1.0, 0.0)),
        lambda: AttackSettings(seed=1.5),
        lambda: AttackSettings(init="zeros"),
        lambda: AttackSettings.for_method("ig", iters=10),
        lambda: AttackSettings.for_method("deepleak"),
    ],
)
def test_bad_settings_give_one_line_config_errors(make):
    with pytest.raises(ConfigError) as err:
        make()
    assert "\n" not in str(err.value) and str(err.value)


def test_bad_attack_inputs_give_one_line_config_errors():
    task = mlp_task()
    algo = build_algorithm("fedavg")
    state = server_state(algo, task)
    params, buffers = state["x"], state["buffers"]
    update = target_update(algo, task, state, image(0), torch.tensor([0]), LR)
    cases = [
        lambda: invert(task, params, buffers, update, LR, (2, 1, 4, 4)),  # IG: no labels
        lambda: invert(
            task,
            params,
            buffers,
            update,
            LR,
            (2, 1, 4, 4),
            settings=AttackSettings.for_method("idlg"),
        ),
        lambda: invert(task, params, buffers, update, LR, SHAPE, labels=torch.tensor([4])),
        lambda: invert(task, params, buffers, {"head.weight": update["head.weight"]}, LR, SHAPE),
        lambda: invert(task, params, buffers, update, 0.0, SHAPE),
        lambda: invert(task, params, buffers, update, LR, SHAPE, steps=0),
        lambda: target_update(algo, task, state, image(0), torch.tensor([0, 1]), LR),
        lambda: infer_label({"bias": torch.zeros(3)}),
    ]
    for case in cases:
        with pytest.raises(ConfigError) as err:
            case()
        assert "\n" not in str(err.value)
