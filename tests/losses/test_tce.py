"""Truncated cross-entropy: values and gradients by hand, the label mask the engines pass, and
``loss=tce`` with every algorithm that trains with a task loss."""

import logging
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.func import vmap

from fedretain.algorithms import ALGORITHMS
from fedretain.core.client import Clients, LocalSpec
from fedretain.core.task import Task
from fedretain.data.base import Dataset, as_float
from fedretain.engines.round import Rounds
from fedretain.engines.sequential import SequentialEngine
from fedretain.experiments.run import build_rounds
from fedretain.losses import LOSSES, get_loss
from fedretain.losses.ce import ce
from fedretain.losses.tce import tce
from fedretain.recipe.config import make_config

E = math.e


def test_registered():
    assert get_loss("tce") is tce and "tce" in LOSSES


def test_value_and_gradient_by_hand():
    # logits (1, 2, 3), label 0, client classes {0, 1}: class 2 is absent
    z = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    mask = torch.tensor([True, True, False])
    loss = tce(z, torch.tensor([0]), mask)
    # −log(e / (e + e²)) = log(1 + e)
    assert float(loss.detach()) == pytest.approx(math.log(1 + E), abs=1e-6)
    (g,) = torch.autograd.grad(loss.sum(), z)
    # softmax over {0, 1} minus the one-hot label; exactly zero for the absent class
    p0 = 1 / (1 + E)
    torch.testing.assert_close(g, torch.tensor([[p0 - 1, 1 - p0, 0.0]]))
    assert float(g[0, 2]) == 0.0


def test_absent_class_logits_get_zero_gradient_for_every_example():
    z = torch.randn(6, 5, requires_grad=True)
    y = torch.tensor([0, 3, 3, 0, 1, 1])
    mask = torch.tensor([True, True, False, True, False])
    (g,) = torch.autograd.grad(tce(z, y, mask).sum(), z)
    assert torch.all(g[:, ~mask] == 0)
    assert torch.all(g[:, mask].abs().sum(dim=0) > 0)


def test_a_client_of_one_class_has_zero_loss_and_zero_gradient():
    """The softmax over a single class is 1 whatever the logits: such a client does not train
    (tce-table1's note at α=0.01, where many clients hold one class)."""
    z = torch.randn(4, 5, requires_grad=True)
    mask = torch.tensor([False, False, True, False, False])
    loss = tce(z, torch.full((4,), 2), mask)
    assert torch.all(loss == 0)
    (g,) = torch.autograd.grad(loss.sum(), z)
    assert torch.all(g == 0)


def test_a_tce_run_warns_about_its_clients_of_one_class(caplog):
    """shards of one class per client: every client's TCE loss is 0, and the run says so."""
    base = {"dataset": "digits", "model": "mlp", "clients": 10, "partition": "shards"}
    one = {**base, "loss": "tce", "partition.classes_per_client": 1}
    with caplog.at_level(logging.WARNING, logger="fedretain"):
        build_rounds(make_config(one))
    assert "10 of 10 clients hold a single class: with loss=tce their loss is 0" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="fedretain"):
        build_rounds(make_config({**one, "partition.classes_per_client": 2}))
        build_rounds(make_config({**one, "loss": "ce"}))
    assert "single class" not in caplog.text


def test_equals_ce_when_every_class_is_present():
    z = torch.randn(8, 4)
    y = torch.randint(0, 4, (8,))
    torch.testing.assert_close(tce(z, y, torch.ones(4, dtype=torch.bool)), ce(z, y))
    torch.testing.assert_close(tce(z, y, None), ce(z, y))
    soft = torch.softmax(torch.randn(8, 4), dim=-1)
    torch.testing.assert_close(tce(z, soft, torch.ones(4, dtype=torch.bool)), ce(z, soft))


def test_own_label_outside_the_mask_counts_as_present():
    z = torch.tensor([[1.0, 2.0, 3.0]])
    # label 2 with mask {0}: the softmax runs over {0, 2}, not over {0} (which would be inf)
    loss = tce(z, torch.tensor([2]), torch.tensor([True, False, False]))
    assert float(loss) == pytest.approx(math.log(1 + math.exp(-2.0)), abs=1e-6)


def test_soft_labels_ignore_absent_classes_without_nan():
    z = torch.tensor([[1.0, 2.0, 3.0]], requires_grad=True)
    y = torch.tensor([[0.5, 0.5, 0.0]])
    loss = tce(z, y, torch.tensor([True, False, False]))  # class 1 has mass: kept
    logp = F.log_softmax(torch.tensor([1.0, 2.0]), dim=-1)
    assert float(loss) == pytest.approx(float(-(0.5 * logp).sum()), abs=1e-6)
    (g,) = torch.autograd.grad(loss.sum(), z)
    assert torch.isfinite(g).all() and float(g[0, 2]) == 0.0


def test_vmap_over_clients_with_their_own_masks():
    z = torch.randn(3, 5, 4)
    y = torch.randint(0, 2, (3, 5))
    masks = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    out = vmap(tce)(z, y, masks)
    torch.testing.assert_close(out, torch.stack([tce(z[k], y[k], masks[k]) for k in range(3)]))


def test_training_batches_carry_the_clients_whole_label_set():
    """Mini-batches of 2 hold one or two of the client's classes; the mask holds all of them."""
    seen = []

    def recording_tce(logits, y, label_mask):
        seen.append((set(y.tolist()), label_mask.tolist()))
        return tce(logits, y, label_mask)

    x = torch.randn(9, 3)
    y = torch.tensor([0, 0, 1, 1, 2, 3, 3, 4, 3])
    ds = Dataset("toy", x, y, x, y, num_classes=6)
    parts = [np.array([0, 1, 2, 3, 4]), np.array([5, 6, 7, 8])]  # classes {0, 1, 2}, {3, 4}
    task = Task(torch.nn.Linear(3, 6), recording_tce, num_classes=6)
    algo = ALGORITHMS.get("fedavg").factory()
    clients = Clients(ds, parts, LocalSpec(batch_size=2), seed=0)
    engine = Rounds(algo, task, clients, SequentialEngine())
    engine.run_round(algo.server_init(*task.init()), 0, 0.1, per_round=2)
    assert len(seen) == 3 + 2  # ceil(5/2) + ceil(4/2) batches
    client0 = [True, True, True, False, False, False]
    client1 = [False, False, False, True, True, False]
    for labels, mask in seen:
        assert mask == (client0 if labels <= {0, 1, 2} else client1)
    assert any(len(labels) == 1 for labels, _ in seen)  # a batch with fewer classes than its client


# --------------------------------------------------------------------------- loss=tce runs

TINY_RUN = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [8],
    "clients": 6,
    "clients_per_round": 3,
    "partition": "shards",
    "partition.classes_per_client": 2,
    "batch_size": 32,
    "lr": 0.1,
    "local_epochs": 1,
    "loss": "tce",
}


def _rounds(overrides: dict, rounds: int = 2):
    fed, engine = build_rounds(make_config({**TINY_RUN, **overrides}))
    state = fed.algorithm.server_init(*fed.task.init())
    losses = []
    for rnd in range(rounds):
        state, metrics = engine.run_round(state, rnd, 0.1, clients=fed.participation.clients(rnd))
        losses.append(metrics["train_loss"])
    built = {"engine": engine, "algorithm": fed.algorithm, "task": fed.task, "dataset": fed.dataset}
    return state, losses, built


@pytest.mark.parametrize("name", ["fedavg", "fedprox", "scaffold", "fedcurv", "fedreg"])
def test_tce_composes_with(name):
    if name not in ALGORITHMS:
        pytest.skip(f"{name} is not registered")
    state, losses, built = _rounds({"algorithm": name})
    assert all(np.isfinite(losses))
    x_test, y_test = built["dataset"].x_test, built["dataset"].y_test
    acc, test_loss = built["task"].evaluate(*built["algorithm"].global_model(state), x_test, y_test)
    assert 0 <= acc <= 1 and np.isfinite(test_loss)


def test_tce_local_loss_differs_from_ce_and_evaluation_uses_full_softmax():
    # two classes per client: the truncated training loss is below the full one
    _, tce_losses, built = _rounds({"algorithm": "fedavg"}, rounds=1)
    _, ce_losses, _ = _rounds({"algorithm": "fedavg", "loss": "ce"}, rounds=1)
    assert tce_losses[0] < ce_losses[0]
    task = built["task"]
    params, buffers = task.init()
    x, y = built["dataset"].x_test[:50], built["dataset"].y_test[:50]
    _, loss = task.evaluate(params, buffers, x, y)
    logits, _ = task.forward(params, buffers, as_float(x), train=False)
    assert loss == pytest.approx(float(F.cross_entropy(logits, y)), rel=1e-5)


# float64: the engines agree to rounding, which proves the same computation; float32: the
# engines gave identical numbers (AVX-512 and AVX2 kernels, 1 and 2 threads); the float32 bound
# is the registry-wide one of tests/engines/test_vmap_conformance.py
@pytest.mark.parametrize("precision, bound", [("fp64", 1e-12), ("fp32", 1e-5)])
def test_tce_vmap_equals_sequential(precision, bound):
    seq, _, _ = _rounds({"algorithm": "fedavg", "engine": "sequential", "precision": precision})
    vmap = {"algorithm": "fedavg", "engine": "vmap", "engine.chunk": 2, "precision": precision}
    vm, _, built = _rounds(vmap)
    assert built["engine"].engine.name == "vmap"
    for key in seq["x"]:
        torch.testing.assert_close(seq["x"][key], vm["x"][key], atol=bound, rtol=0)
