"""Functional optimisers: ``init(params) -> state`` and ``update(grads, state, params, lr)``.

They never update in place, so a local step stays a pure function that the vectorised engine
can ``vmap`` over clients. ``lr`` is an argument of ``update`` (a float or a 0-d tensor), so a
learning-rate schedule needs no optimiser state.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from fedretain.core.tree import Tree, leaves, tree_map, tree_zeros_like
from fedretain.registry import Registry

Lr = float | Tensor


@dataclass(frozen=True)
class Optimizer:
    """A pair of pure functions, as in optax, with the hyper-parameters they were made with."""

    name: str
    init: Callable[[Tree], Tree]
    update: Callable[[Tree, Tree, Tree, Lr], tuple[Tree, Tree]]
    hparams: dict[str, float | bool] = field(default_factory=dict)

    @property
    def is_plain_sgd(self) -> bool:
        """``p - lr * g`` and nothing else: no momentum, no weight decay."""
        return self.name == "sgd" and not any(self.hparams.values())


def sgd(momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False) -> Optimizer:
    """SGD as ``torch.optim.SGD`` computes it (dampening 0).

    ``d = g + wd * p``; with momentum ``b = mu * b + d`` (``b = d`` at the first step, which
    the zero-initialised buffer gives exactly), ``d = b`` or, Nesterov, ``d + mu * b``;
    ``p = p - lr * d``.
    """
    if momentum < 0 or weight_decay < 0:
        raise ValueError("momentum and weight_decay must be >= 0")

    def init(params: Tree) -> Tree:
        return {"b": tree_zeros_like(params)} if momentum else {}

    def update(grads: Tree, state: Tree, params: Tree, lr: Lr) -> tuple[Tree, Tree]:
        d = grads
        if weight_decay:
            d = tree_map(lambda g, p: g + weight_decay * p, d, params)
        if momentum:
            b = tree_map(lambda b, g: momentum * b + g, state["b"], d)
            d = tree_map(lambda g, b: g + momentum * b, d, b) if nesterov else b
            state = {"b": b}
        if isinstance(lr, Tensor):  # one fused op: p + (-1) * g * lr
            return tree_map(lambda p, g: torch.addcmul(p, g, lr, value=-1.0), params, d), state
        return tree_map(lambda p, g: torch.add(p, g, alpha=-lr), params, d), state

    hparams = {"momentum": momentum, "weight_decay": weight_decay, "nesterov": nesterov}
    return Optimizer("sgd", init, update, hparams)


def adam(
    beta1: float = 0.9, beta2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0
) -> Optimizer:
    """Adam (Kingma & Ba, 2015) as ``torch.optim.Adam`` computes it (L2 weight decay)."""

    def init(params: Tree) -> Tree:
        t = torch.zeros((), device=leaves(params)[0].device)
        return {"m": tree_zeros_like(params), "v": tree_zeros_like(params), "t": t}

    def update(grads: Tree, state: Tree, params: Tree, lr: Lr) -> tuple[Tree, Tree]:
        if weight_decay:
            grads = tree_map(lambda g, p: g + weight_decay * p, grads, params)
        t = state["t"] + 1
        m = tree_map(lambda m, g: beta1 * m + (1 - beta1) * g, state["m"], grads)
        v = tree_map(lambda v, g: beta2 * v + (1 - beta2) * g * g, state["v"], grads)
        c1 = 1 - beta1**t
        c2 = 1 - beta2**t
        new = tree_map(lambda p, m, v: p - lr * (m / c1) / (torch.sqrt(v / c2) + eps), params, m, v)
        return new, {"m": m, "v": v, "t": t}

    hparams = {"beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": weight_decay}
    return Optimizer("adam", init, update, hparams)


# the local optimiser of every algorithm that takes optimiser steps (``optimizer=adam``,
# ``optimizer.momentum=0.9``)
OPTIMIZERS = Registry("optimizer")
OPTIMIZERS.add("sgd", sgd, "SGD as torch.optim.SGD (momentum, weight decay, Nesterov)")
OPTIMIZERS.add("adam", adam, "Adam as torch.optim.Adam (L2 weight decay)")
