"""Functional optimisers: ``init(params) -> state`` and ``update(grads, state, params, lr)``.

They never update in place, so a local step stays a pure function that the vectorised engine
can ``vmap`` over clients. ``lr`` is an argument of ``update`` (a float or a 0-d tensor), so a
learning-rate schedule needs no optimiser state.

The server's optimisers have the same shape, on the round's pseudo-gradient ``g = x − agg(y)``
(``update(g, state, x, opt.lr)``: a server optimiser carries its own step size); ``none`` is
the identity, ``x ← agg(y)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from fedretain.core.tree import Tree, leaves, tree_map, tree_zeros_like
from fedretain.registry import Registry

Lr = float | Tensor


def _finite_at_least(key: str, value: float, low: float, *, strict: bool = False) -> None:
    """Refuse a ``key`` that is not a finite number ``> low`` (``strict``) or ``>= low``."""
    if not (math.isfinite(value) and (value > low if strict else value >= low)):
        raise ValueError(
            f"{key} must be a finite number {'>' if strict else '>='} {low}, got {value}"
        )


def _fraction(key: str, value: float) -> None:
    """Refuse a ``key`` outside ``[0, 1)`` (a decay rate: β, momentum)."""
    if not 0 <= value < 1:
        raise ValueError(f"{key} must be in [0, 1), got {value}")


def step_counter(params: Tree) -> Tensor:
    """A step count of an optimizer state: an int64 0-d tensor, exact at every count, a leaf of
    the state tree (stacked under ``vmap``, checkpointed)."""
    return torch.zeros((), dtype=torch.int64, device=leaves(params)[0].device)


def power(beta: float, t: Tensor) -> Tensor:
    """``beta ** t`` in float64, as ``torch.optim.Adam``'s Python-float bias corrections:
    float32's is off by up to 1e-4 relative (β = 0.9999 at small ``t``). Multiplied into a
    float32 tensor, the 0-d result takes the tensor's dtype."""
    return beta ** t.to(torch.float64)


@dataclass(frozen=True)
class Optimizer:
    """A pair of pure functions, as in optax, with the hyper-parameters they were made with.

    ``lr``: a server optimiser's own step size (its ``update`` is called with it); None for a
    local optimiser, whose ``lr`` comes from the run's schedule."""

    name: str
    init: Callable[[Tree], Tree]
    update: Callable[[Tree, Tree, Tree, Lr], tuple[Tree, Tree]]
    hparams: dict[str, float | bool] = field(default_factory=dict)
    lr: float | None = None

    @property
    def is_plain_sgd(self) -> bool:
        """``p - lr * g`` and nothing else: no momentum, no weight decay."""
        return self.name == "sgd" and self.lr is None and not any(self.hparams.values())

    @property
    def is_identity(self) -> bool:
        """A server step that lands on the aggregate, ``x ← agg(y)``: ``none``, or SGD with
        ``lr = 1`` and no momentum. Taken as the aggregate itself (``x − (x − agg)`` would
        round)."""
        h = self.hparams
        sgd_at_one = self.name == "sgd" and self.lr == 1.0 and not h.get("momentum")
        return self.name == "none" or sgd_at_one


def sgd(momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False) -> Optimizer:
    """SGD as ``torch.optim.SGD`` computes it (dampening 0).

    ``d = g + wd * p``; with momentum ``b = mu * b + d`` (``b = d`` at the first step, which
    the zero-initialised buffer gives exactly), ``d = b`` or, Nesterov, ``d + mu * b``;
    ``p = p - lr * d``.

    :param momentum: heavy-ball momentum (0: none)
    :param weight_decay: L2 penalty added to the gradient
    :param nesterov: Nesterov momentum
    """
    _finite_at_least("optimizer.momentum", momentum, 0)
    _finite_at_least("optimizer.weight_decay", weight_decay, 0)

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
    """Adam (Kingma & Ba, 2015) as ``torch.optim.Adam`` computes it (L2 weight decay; the bias
    corrections in float64 from an exact step count, as torch's Python floats).

    :param beta1: decay of the first moment, in [0, 1)
    :param beta2: decay of the second moment, in [0, 1)
    :param eps: added to the denominator's square root
    :param weight_decay: L2 penalty added to the gradient
    """
    _fraction("optimizer.beta1", beta1)
    _fraction("optimizer.beta2", beta2)
    _finite_at_least("optimizer.eps", eps, 0)
    _finite_at_least("optimizer.weight_decay", weight_decay, 0)

    def init(params: Tree) -> Tree:
        return {
            "m": tree_zeros_like(params),
            "v": tree_zeros_like(params),
            "t": step_counter(params),
        }

    def update(grads: Tree, state: Tree, params: Tree, lr: Lr) -> tuple[Tree, Tree]:
        if weight_decay:
            grads = tree_map(lambda g, p: g + weight_decay * p, grads, params)
        t = state["t"] + 1
        m = tree_map(lambda m, g: beta1 * m + (1 - beta1) * g, state["m"], grads)
        v = tree_map(lambda v, g: beta2 * v + (1 - beta2) * g * g, state["v"], grads)
        c1 = 1 - power(beta1, t)
        c2 = 1 - power(beta2, t)
        new = tree_map(lambda p, m, v: p - lr * (m / c1) / (torch.sqrt(v / c2) + eps), params, m, v)
        return new, {"m": m, "v": v, "t": t}

    hparams = {"beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": weight_decay}
    return Optimizer("adam", init, update, hparams)


# the local optimiser of every algorithm that takes optimiser steps (``optimizer=adam``,
# ``optimizer.momentum=0.9``)
OPTIMIZERS = Registry("optimizer")
OPTIMIZERS.add("sgd", sgd, "SGD as torch.optim.SGD (momentum, weight decay, Nesterov)")
OPTIMIZERS.add("adam", adam, "Adam as torch.optim.Adam (L2 weight decay)")


# --------------------------------------------------------------------------------------------
# server optimizers: the same shape, on the round's pseudo-gradient g = x - agg(y), with their
# own step size (Reddi et al., "Adaptive Federated Optimization", ICLR 2021, arXiv:2003.00295;
# descent: FedAvg is SGD with lr = 1)


def identity() -> Optimizer:
    """``x ← agg(y)``: the server takes the aggregate (the default of every algorithm whose
    server step is a model update)."""

    def update(g: Tree, state: Tree, x: Tree, lr: Lr) -> tuple[Tree, Tree]:
        return tree_map(lambda x, g: x - lr * g, x, g), state

    return Optimizer("none", lambda x: {}, update, {}, lr=1.0)


def server_sgd(lr: float = 1.0, momentum: float = 0.0, nesterov: bool = False) -> Optimizer:
    """``b ← μ b + g``, ``x ← x − η b`` (FedAvgM, Hsu et al. 2019; ``momentum=0``: FedAvg with
    server learning rate ``lr``).

    :param lr: the server learning rate, finite and > 0 (1 with no momentum: FedAvg)
    :param momentum: server momentum, in [0, 1)
    :param nesterov: Nesterov momentum
    """
    _finite_at_least("server_opt.lr", lr, 0, strict=True)
    _fraction("server_opt.momentum", momentum)
    opt = sgd(momentum=momentum, nesterov=nesterov)
    hparams = {"lr": lr, "momentum": momentum, "nesterov": nesterov}
    return Optimizer("sgd", opt.init, opt.update, hparams, lr=lr)


def _adaptive(
    name: str,
    second: Callable[[Tensor, Tensor], Tensor],
    hparams: dict[str, float | bool],
    eta: Callable[[Tensor, Lr], Tensor] | None = None,
) -> Optimizer:
    """The shared shape of FedAdagrad, FedAdam and FedYogi: ``m ← β1 m + (1 − β1) Δ``,
    ``v ← second(v, Δ)``, ``x ← x + η_t m / (√v + τ)`` with ``Δ = −g = agg(y) − x``;
    ``η_t = eta(t, lr)`` at the t-th update (default: ``lr``).

    ``t`` counts the server's updates, not its rounds: a round that leaves the model unchanged
    (no client reachable, every update dropped, Bulyan short of clients) leaves ``m``, ``v``
    and ``t`` unchanged too, so ``eta(t)``'s bias correction always matches the number of
    moment updates. Flower 1.41 counts rounds instead; the two agree whenever every round
    updates the model."""
    _finite_at_least("server_opt.lr", float(hparams["lr"]), 0, strict=True)
    _finite_at_least("server_opt.tau", float(hparams["tau"]), 0, strict=True)
    for key in ("beta1", "beta2"):
        if key in hparams:
            _fraction(f"server_opt.{key}", float(hparams[key]))
    tau, beta1 = hparams["tau"], hparams.get("beta1", 0.0)

    def init(x: Tree) -> Tree:
        return {"m": tree_zeros_like(x), "v": tree_zeros_like(x), "t": step_counter(x)}

    def update(g: Tree, state: Tree, x: Tree, lr: Lr) -> tuple[Tree, Tree]:
        m = tree_map(lambda m, g: beta1 * m - (1 - beta1) * g, state["m"], g)
        v = tree_map(second, state["v"], g)
        t = state["t"] + 1
        step_size = lr if eta is None else eta(t, lr)
        new = tree_map(lambda x, m, v: x + step_size * m / (torch.sqrt(v) + tau), x, m, v)
        return new, {"m": m, "v": v, "t": t}

    return Optimizer(name, init, update, hparams, lr=float(hparams["lr"]))


def fedadam(
    lr: float = 0.1,
    beta1: float = 0.9,
    beta2: float = 0.99,
    tau: float = 1e-3,
    bias_correction: bool = True,
) -> Optimizer:
    """FedAdam: ``v ← β2 v + (1 − β2) Δ²``. With ``bias_correction`` the step is
    ``η √(1 − β2^(t+1)) / (1 − β1^(t+1))`` at the t-th update (t = 1, 2, ...; in float64), as
    Flower 1.41's ``FedAdam`` computes it at round t; without, the paper's Algorithm 2
    (``η``). ``t`` counts updates, not rounds (see :func:`_adaptive`).

    :param lr: the server learning rate η, finite and > 0
    :param beta1: decay of the first moment m, in [0, 1)
    :param beta2: decay of the second moment v, in [0, 1)
    :param tau: the adaptivity τ added to √v, finite and > 0
    :param bias_correction: Flower's correction of η from the count of updates
    """

    def corrected(t: Tensor, lr: Lr) -> Tensor:
        return lr * torch.sqrt(1 - power(beta2, t + 1)) / (1 - power(beta1, t + 1))

    hparams = {"lr": lr, "beta1": beta1, "beta2": beta2, "tau": tau}
    return _adaptive(
        "adam",
        lambda v, g: beta2 * v + (1 - beta2) * g * g,
        {**hparams, "bias_correction": bias_correction},
        corrected if bias_correction else None,
    )


def fedyogi(
    lr: float = 0.01, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3
) -> Optimizer:
    """FedYogi: ``v ← v − (1 − β2) Δ² sign(v − Δ²)`` (no bias correction, as the paper and
    Flower).

    :param lr: the server learning rate η, finite and > 0
    :param beta1: decay of the first moment m, in [0, 1)
    :param beta2: rate of the second moment v, in [0, 1)
    :param tau: the adaptivity τ added to √v, finite and > 0
    """
    return _adaptive(
        "yogi",
        lambda v, g: v - (1 - beta2) * g * g * torch.sign(v - g * g),
        {"lr": lr, "beta1": beta1, "beta2": beta2, "tau": tau},
    )


def fedadagrad(lr: float = 0.1, tau: float = 1e-3) -> Optimizer:
    """FedAdagrad: ``v ← v + Δ²``, ``m = Δ`` (β1 = 0, as the paper's Algorithm 2 and Flower).

    :param lr: the server learning rate η, finite and > 0
    :param tau: the adaptivity τ added to √v, finite and > 0
    """
    return _adaptive("adagrad", lambda v, g: v + g * g, {"lr": lr, "tau": tau})


# the server optimizer of every algorithm whose server step is a model update
# (``server_opt=adam server_opt.lr=0.01``); β1, β2 and τ as the paper fixes them, η as Flower
# 1.41's defaults (the paper tunes η per task)
SERVER_OPTIMIZERS = Registry("server_opt")
SERVER_OPTIMIZERS.add("none", identity, "x <- agg(y): the aggregate itself (FedAvg's step)")
SERVER_OPTIMIZERS.add("sgd", server_sgd, "x <- x - lr * b, b <- momentum * b + g (FedAvgM)")
SERVER_OPTIMIZERS.add("adam", fedadam, "FedAdam (Reddi et al. 2021), Flower's bias correction")
SERVER_OPTIMIZERS.add("yogi", fedyogi, "FedYogi (Reddi et al. 2021)")
SERVER_OPTIMIZERS.add("adagrad", fedadagrad, "FedAdagrad (Reddi et al. 2021)")
