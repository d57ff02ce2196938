"""FedAvgM: FedAvg clients, heavy-ball momentum on the server.

Hsu, Qi, Brown, "Measuring the Effects of Non-Identical Data Distribution for Federated
Visual Classification", arXiv:1909.06335, 2019.

Server: ``Δ = Σ (n_i/Σn)(x − y_i)``, ``v ← βv + Δ``, ``x ← x − η_s v`` (Nesterov:
``x ← x − η_s (Δ + βv)``, as Flower's and FL-bench's baselines). State ``v`` starts at 0.
Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, ``buffers``).
"""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor

from fedretain.algorithms.fedavg import fedavg, mean_weights
from fedretain.core.algorithm import AggregateFn, Algorithm, InitFn, RoundInfo
from fedretain.core.local import Penalty
from fedretain.core.optim import Optimizer
from fedretain.core.tree import Tree, tree_map, tree_weighted_mean, tree_zeros_like


def momentum_server(
    beta: float, server_lr: float, nesterov: bool, weighted: bool
) -> tuple[InitFn, AggregateFn]:
    """Server init and aggregate of FedAvgM, for reuse by FedProxM and others."""

    def server_init(params: Tree, buffers: Tree) -> Tree:
        return {"x": params, "buffers": buffers, "v": tree_zeros_like(params)}

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        w = mean_weights(weights, weighted)
        x = server_state["x"]
        delta = tree_map(lambda x, y: x - y, x, tree_weighted_mean(uplinks["y"], w))
        v = tree_map(lambda v, d: beta * v + d, server_state["v"], delta)
        step = tree_map(lambda d, v: d + beta * v, delta, v) if nesterov else v
        new = {
            **server_state,
            "x": tree_map(lambda x, s: x - server_lr * s, x, step),
            "v": v,
            "buffers": tree_weighted_mean(uplinks["buffers"], w),
        }
        return new, {}

    return server_init, aggregate


def fedavgm(
    *,
    beta: float = 0.9,
    server_lr: float = 1.0,
    nesterov: bool = False,
    weighted: bool = True,
    opt: Optimizer | None = None,
    penalty: Penalty | None = None,
) -> Algorithm:
    """FedAvgM with momentum ``beta`` and server learning rate ``server_lr``."""
    if not 0 <= beta < 1:
        raise ValueError(f"algo.beta must be in [0, 1), got {beta}")
    server_init, aggregate = momentum_server(beta, server_lr, nesterov, weighted)
    return replace(
        fedavg(weighted=weighted, opt=opt, penalty=penalty),
        name="fedavgm",
        server_init=server_init,
        aggregate=aggregate,
        hparams={"beta": beta, "server_lr": server_lr, "nesterov": nesterov, "weighted": weighted},
    )
