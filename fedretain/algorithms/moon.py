"""MOON: model-contrastive local training keeps the local representation near the global one.

Li, He, Song, "Model-Contrastive Federated Learning", CVPR 2021, arXiv:2103.16257 (§3, eq. 3-4).

Local loss on a batch: ``ℓ(logits, y) + μ · ℓ_con`` with, per example,

    ℓ_con = −log( e^{cos(z, z_glob)/τ} / (e^{cos(z, z_glob)/τ} + e^{cos(z, z_prev)/τ}) )

where ``z`` is the representation of the model being trained, ``z_glob`` that of the received
global model and ``z_prev`` that of the client's previous local model (both frozen: computed
in eval mode, no gradient). ``ℓ`` is the task loss (``loss=ce`` or ``tce``). At a client's
first participation its previous model is the received global model, so ``ℓ_con`` is the
constant ``log 2`` with zero gradient. Server: FedAvg's sample-weighted mean (as the official
code).

The representation: the paper's network is encoder -> projection head
Linear(d, d)-ReLU-Linear(d, 256) -> classifier, ``z`` the projection output. Every zoo model
gets that head with ``model.projection=256`` (its ``features`` is then the projection output).
Without it, ``z`` is the model's ``features`` (the penultimate representation: the official
code's ``use_project_head = 0``) and a warning says so; a bare module without ``features`` uses
its output. The reference passes use the received BatchNorm statistics for both frozen models
(exact for models without BatchNorm; the previous model's own statistics are not kept).

τ = 0.5. μ = 1 by default (the paper's CIFAR-100 and Tiny-ImageNet setting); the paper uses
μ = 5 for CIFAR-10 (``algo.mu=5``).

Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, ``buffers``). Client state
``prev``: the client's last trained parameters (one parameter-sized tree per client).
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.fedavg import fedavg
from fedretain.core.algorithm import Algorithm, ClientContext, algorithm_factory, transform
from fedretain.core.local import advance
from fedretain.core.optim import Optimizer, sgd
from fedretain.core.task import Batch, Task
from fedretain.core.tree import Tree
from fedretain.models import functional_method

NO_PROJECTION = (
    "moon: the model has no projection head, so z is its features; "
    "set model.projection=256 for the paper's architecture"
)


def represent(
    task: Task, params: Tree, buffers: Tree, x: Tensor, train: bool
) -> tuple[Tensor, Tensor, Tree]:
    """``(z, logits, new_buffers)`` from one pass: ``z = features(x)``, ``logits = head(z)``.

    A model without ``features``/``head`` gives its output as both ``z`` and logits.
    """
    model = task.model
    if not (hasattr(model, "features") and hasattr(model, "head")):
        logits, new_buffers = task.forward(params, buffers, x, train)
        return logits, logits, new_buffers
    if model.training != train:
        model.train(train)
    if buffers and train:  # BatchNorm updates its statistics in place: work on copies
        buffers = {k: v.clone() for k, v in buffers.items()}
    tensors = {**params, **buffers}
    z = functional_method(model, tensors, "features", x)
    return z, functional_method(model, tensors, "head", z), buffers


def contrastive_loss(z: Tensor, z_glob: Tensor, z_prev: Tensor, tau: float) -> Tensor:
    """Per-example ``ℓ_con``: cross-entropy of ``[cos(z, z_glob), cos(z, z_prev)]/τ``, target 0."""
    pos = F.cosine_similarity(z, z_glob, dim=-1) / tau
    neg = F.cosine_similarity(z, z_prev, dim=-1) / tau
    return torch.logsumexp(torch.stack([pos, neg], dim=-1), dim=-1) - pos


@algorithm_factory
def moon(
    *,
    mu: float = 1.0,
    tau: float = 0.5,
    weighted: bool = True,
    opt: Optimizer | None = None,
    server_opt: Optimizer | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """MOON with contrastive weight ``mu`` (μ) and temperature ``tau`` (τ).

    :param mu: weight μ (>= 0) of the model-contrastive loss
    :param tau: temperature τ (> 0) of the contrastive loss
    :param weighted: average the clients' models weighted by their sample counts (false: the plain
        mean)
    """
    if not mu >= 0:
        raise ValueError(f"algo.mu must be >= 0, got {mu}")
    if not tau > 0:
        raise ValueError(f"algo.tau must be > 0, got {tau}")
    opt = opt or sgd()
    base = fedavg(weighted=weighted, opt=opt, server_opt=server_opt, aggregator=aggregator)

    def client_init(params: Tree) -> Tree:
        # called with the received global model at the client's first participation
        return {"prev": params}

    def local_init(down: Tree, client_state: Tree, ctx: ClientContext) -> Tree:
        if getattr(ctx.task.model, "projection", None) is None:
            warnings.warn(NO_PROJECTION, stacklevel=2)
        return base.local_init(down, client_state, ctx)

    def local_step(state: Tree, batch: Batch, ctx: ClientContext) -> tuple[Tree, dict]:
        task, x, w = ctx.task, batch["x"], batch["w"]
        ref_buffers = state["down"]["buffers"]
        z_glob = represent(task, state["down"]["x"], ref_buffers, x, train=False)[0].detach()
        z_prev = represent(task, state["client"]["prev"], ref_buffers, x, train=False)[0].detach()
        total_w = w.sum().clamp_min(1.0)

        def objective(p: Tree) -> tuple[Tensor, tuple[Tensor, Tree]]:
            z, logits, new_buffers = represent(task, p, state["buffers"], x, train=True)
            loss = (task.loss(logits, batch["y"], batch.get("label_mask")) * w).sum() / total_w
            con = (contrastive_loss(z, z_glob, z_prev, tau) * w).sum() / total_w
            return loss + mu * con, (loss.detach(), new_buffers)

        grads, (loss, new_buffers) = task.grad_and_aux(objective, state["params"])
        return advance(opt, state, grads, new_buffers), {"loss": loss}

    def local_final(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
        uplink, _ = base.local_final(state, client_state, ctx)
        return uplink, {"prev": state["params"]}

    return transform(
        base,
        name="moon",
        client_init=client_init,
        local_init=local_init,
        local_step=local_step,
        local_final=local_final,
    )


__all__ = ["contrastive_loss", "moon", "represent"]
