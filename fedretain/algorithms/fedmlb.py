"""FedMLB: multi-level branched regularisation through the frozen global model's blocks.

Kim, Kim, Han, "Multi-Level Branched Regularization for Federated Learning", ICML 2022,
arXiv:2207.06936.

The model is split into blocks ``B_0 .. B_{L−1}`` (the model's ``blocks``: ResNet-18's stem
and four stages, FedMLB's B0..B4) followed by ``pool`` and ``head``. Each client keeps a
frozen copy ``G`` of the model it received. With the local features ``f_l = B_l(f_{l−1})``
(``f_{−1} = x``) and the local output ``o = head(pool(f_{L−1}))``, the hybrid path from block
``l`` runs the rest of the network in ``G``:
``h_l = G.head(G.pool(G.B_{L−1}(... G.B_{l+1}(f_l))))``, for ``l = 0 .. L−1`` (the last path is
``G``'s head on the local features, as the reference code). The local loss is

    λ_ce CE(o, y) + (λ_hce/L) Σ_l CE(h_l, y) + (λ_kl/L) Σ_l KL(softmax(h_l/T) ‖ softmax(o/T))

with λ = 1, T = 1 by default (the paper's setting; no T² factor, as the reference code
``jinkyu032/FedMLB``, ``local_update_method/FedMLB.py``). Gradients reach the local blocks
through ``G``'s blocks, whose parameters stay fixed; the KL term is differentiated through both
of its sides, as in the reference code. CE is the task's loss (so ``loss=tce`` composes).
Both models run in training mode, as the reference code; ``G``'s BatchNorm statistics are
not updated. The reference code clips each local gradient to norm 10; that is not done here.

Models: the ResNets give their ``blocks`` and ``pool``: resnet18 (5 blocks, the paper's
model), resnet20 (4), resnet9 (4). The zoo's sequential models (mlp, cnn, cnn2, cnn-fedavg,
lenet5: ``features = body``) are cut after each ReLU of their body, with no pool (an MLP with
``k`` hidden layers has ``k`` blocks; FedReg's CNN has 4). Others (vgg11) are refused when
local training starts, with a one-line error.

Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, ``buffers``): FedAvg's bytes.
The server takes the sample-weighted mean, as FedAvg (the reference code does the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.fedavg import fedavg
from fedretain.core.algorithm import Algorithm, ClientContext, algorithm_factory, transform
from fedretain.core.local import advance
from fedretain.core.optim import Optimizer, sgd
from fedretain.core.task import Batch, Task
from fedretain.core.tree import Tree
from fedretain.errors import ConfigError
from fedretain.models.simple import SequentialModel
from fedretain.models.vgg import VGG

BLOCK_MODELS = (
    "resnet18, resnet20, resnet9, vgg11 (their stages), mlp, cnn, cnn2, cnn-fedavg, lenet5"
)


class SpatialMean(nn.Module):
    """VGG's global average pool between its last stage and its head."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=(-2, -1))


def cut_after(body: nn.Sequential, kind: type[nn.Module]) -> list[nn.Module]:
    """``body`` cut after each layer of ``kind``; layers after the last one join the last
    block (one block when there is none)."""
    groups: list[list[nn.Module]] = [[]]
    for layer in body:
        groups[-1].append(layer)
        if isinstance(layer, kind):
            groups.append([])
    if not groups[-1] and len(groups) > 1:
        groups.pop()
    elif len(groups) > 1:
        groups[-2].extend(groups.pop())
    return [nn.Sequential(*g) for g in groups]


def split_blocks(model: nn.Module) -> tuple[list[nn.Module], Callable[[Tensor], Tensor]]:
    """The model's blocks ``B_0 .. B_{L−1}`` and the ``pool`` between the last one and the head.

    A model with ``blocks`` and ``pool`` (the ResNets) gives those. VGG-11's conv stack is cut
    after each max-pool (its stages, as the ResNets'), then its global average pool. A
    :class:`SequentialModel` (``features = body``: mlp, cnn, cnn2, cnn-fedavg, lenet5) is cut
    after each ReLU of its body and has no pool. Anything else is refused with a one-line error.
    """
    blocks = getattr(model, "blocks", None)
    if isinstance(blocks, nn.ModuleList) and len(blocks) and hasattr(model, "pool"):
        return list(blocks), model.pool
    if isinstance(model, VGG):
        return cut_after(model.body, nn.MaxPool2d), SpatialMean()
    if isinstance(model, SequentialModel):
        return cut_after(model.body, nn.ReLU), nn.Identity()
    raise ConfigError(
        f"algorithm fedmlb needs a model split into blocks ({BLOCK_MODELS}); "
        f"got {type(model).__name__}"
    )


class _Paths(nn.Module):
    """Runs blocks ``start ..`` of the model, its ``pool`` and ``head``; with ``collect``, also
    returns the output of every block it ran (the features ``f_l``)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        # the blocks are the model's own submodules, so functional_call's substitution reaches
        # them; a tuple attribute is not registered a second time
        self.split = split_blocks(model)

    def forward(
        self, x: Tensor, start: int = 0, collect: bool = False
    ) -> Tensor | tuple[list[Tensor], Tensor]:
        blocks, pool = self.split
        feats = []
        for block in blocks[start:]:
            x = block(x)
            feats.append(x)
        logits = self.model.head(pool(x))
        return (feats, logits) if collect else logits


_PATHS: dict[int, _Paths] = {}  # id(model) -> its paths, built once (not at every step)


def _paths_of(model: nn.Module) -> _Paths:
    paths = _PATHS.get(id(model))
    if paths is None or paths.model is not model:
        if len(_PATHS) > 8:
            _PATHS.clear()
        paths = _PATHS[id(model)] = _Paths(model)
    return paths


def _call_paths(
    task: Task, params: Tree, buffers: Tree, x: Tensor, start: int, collect: bool
) -> Any:
    if not task.model.training:  # both models run in training mode
        task.model.train(True)
    tensors = {f"model.{k}": v for k, v in {**params, **buffers}.items()}
    paths = _paths_of(task.model)
    return task.train_call(paths, tensors, (x,), {"start": start, "collect": collect})


def local_paths(
    task: Task, params: Tree, buffers: Tree, x: Tensor
) -> tuple[list[Tensor], Tensor, Tree]:
    """The local model's block outputs ``f_0 .. f_{L−1}``, its logits ``o`` and its new
    buffers (copies of ``buffers``: BatchNorm's in-place statistics never touch the inputs)."""
    buffers = {k: v.clone() for k, v in buffers.items()}
    feats, logits = _call_paths(task, params, buffers, x, 0, True)
    return feats, logits, buffers


def hybrid_path(task: Task, frozen: Tree, frozen_buffers: Tree, f: Tensor, level: int) -> Tensor:
    """``h_l``: the frozen model ``G`` from block ``level + 1`` on, applied to ``f_level``."""
    frozen_buffers = {k: v.clone() for k, v in frozen_buffers.items()}  # G's stay as received
    return _call_paths(task, frozen, frozen_buffers, f, level + 1, False)


def kl_per_example(p_logits: Tensor, q_logits: Tensor, temperature: float) -> Tensor:
    """``KL(softmax(p/T) ‖ softmax(q/T))`` per example."""
    log_p = F.log_softmax(p_logits / temperature, dim=-1)
    log_q = F.log_softmax(q_logits / temperature, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(dim=-1)


def mlb_loss(
    task: Task,
    params: Tree,
    buffers: Tree,
    frozen: Tree,
    frozen_buffers: Tree,
    batch: Batch,
    *,
    lambda_ce: float = 1.0,
    lambda_hce: float = 1.0,
    lambda_kl: float = 1.0,
    temperature: float = 1.0,
) -> tuple[Tensor, tuple[Tensor, Tree]]:
    """FedMLB's local loss (weighted batch mean), and ``(CE(o, y), new buffers)``."""
    feats, logits, new_buffers = local_paths(task, params, buffers, batch["x"])
    y, mask, w = batch["y"], batch.get("label_mask"), batch["w"]
    ce_main = task.loss(logits, y, mask)
    ce_hybrid = torch.zeros_like(ce_main)
    kl = torch.zeros_like(ce_main)
    for level, f in enumerate(feats):
        h = hybrid_path(task, frozen, frozen_buffers, f, level)
        ce_hybrid = ce_hybrid + task.loss(h, y, mask)
        kl = kl + kl_per_example(h, logits, temperature)
    num = len(feats)
    per_example = lambda_ce * ce_main + (lambda_hce * ce_hybrid + lambda_kl * kl) / num
    denom = w.sum().clamp_min(1.0)
    return (per_example * w).sum() / denom, ((ce_main * w).sum().detach() / denom, new_buffers)


@algorithm_factory
def fedmlb(
    *,
    lambda_ce: float = 1.0,
    lambda_hce: float = 1.0,
    lambda_kl: float = 1.0,
    temperature: float = 1.0,
    weighted: bool = True,
    opt: Optimizer | None = None,
    server_opt: Optimizer | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """FedMLB with loss weights ``lambda_*`` (all 1 in the paper) and KL temperature ``T``.

    :param lambda_ce: weight of the local model's cross-entropy
    :param lambda_hce: weight of the hybrid paths' mean cross-entropy
    :param lambda_kl: weight of the hybrid paths' mean KL divergence to the local output
    :param temperature: softmax temperature T of the KL term
    :param weighted: average the clients' models weighted by their sample counts (false: the plain
        mean)
    """
    for key, value in (
        ("lambda_ce", lambda_ce),
        ("lambda_hce", lambda_hce),
        ("lambda_kl", lambda_kl),
    ):
        if not value >= 0:
            raise ValueError(f"algo.{key} must be >= 0, got {value}")
    if not temperature > 0:
        raise ValueError(f"algo.temperature must be > 0, got {temperature}")
    opt = opt or sgd()
    base = fedavg(weighted=weighted, opt=opt, server_opt=server_opt, aggregator=aggregator)
    weights = {
        "lambda_ce": lambda_ce,
        "lambda_hce": lambda_hce,
        "lambda_kl": lambda_kl,
        "temperature": temperature,
    }

    def local_init(down: Tree, client_state: Tree, ctx: ClientContext) -> Tree:
        split_blocks(ctx.task.model)  # refuses a model it cannot split
        return base.local_init(down, client_state, ctx)

    def local_step(state: Tree, batch: Batch, ctx: ClientContext) -> tuple[Tree, dict]:
        task = ctx.task
        down = state["down"]

        def objective(p: Tree) -> tuple[Tensor, tuple[Tensor, Tree]]:
            return mlb_loss(task, p, state["buffers"], down["x"], down["buffers"], batch, **weights)

        grads, (loss, new_buffers) = task.grad_and_aux(objective, state["params"])
        return advance(opt, state, grads, new_buffers), {"loss": loss}

    return transform(
        base,
        name="fedmlb",
        local_init=local_init,
        local_step=local_step,
    )
