"""FedProx: FedAvg with a proximal term ``μ/2 ‖y − x‖²`` in every client's local loss.

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in Heterogeneous
Networks", MLSys 2020, arXiv:1812.06127. The paper tunes μ over {0.001, 0.01, 0.1, 1}.

Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, ``buffers``).
"""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.fedavg import fedavg
from fedretain.core.algorithm import Algorithm
from fedretain.core.local import ClosedFormPenalty
from fedretain.core.optim import Optimizer, ServerOptimizer
from fedretain.core.tree import Tree, leaves, tree_map


def prox_penalty(mu: float) -> ClosedFormPenalty:
    """``μ/2 ‖params − x‖²`` with ``x`` the received global model; gradient ``μ (params − x)``."""

    def penalty(params: Tree, state: Tree) -> Tensor:
        terms = [
            torch.sum((p - x) ** 2)
            for p, x in zip(leaves(params), leaves(state["down"]["x"]), strict=True)
        ]
        return 0.5 * mu * torch.stack(terms).sum()

    def gradient(params: Tree, state: Tree) -> Tree:
        return tree_map(lambda p, x: mu * (p - x), params, state["down"]["x"])

    def add_gradient(grads: Tree, params: Tree, state: Tree) -> Tree:
        x = state["down"]["x"]
        return tree_map(lambda g, p, x: torch.add(g, p - x, alpha=mu), grads, params, x)

    return ClosedFormPenalty(penalty, gradient, add_gradient)


def fedprox(
    *,
    mu: float = 0.01,
    weighted: bool = True,
    opt: Optimizer | None = None,
    server_opt: ServerOptimizer | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """FedProx with proximal coefficient ``mu``."""
    if mu < 0:
        raise ValueError(f"algo.mu must be >= 0, got {mu}")
    server = {"server_opt": server_opt, "aggregator": aggregator}
    algo = fedavg(weighted=weighted, opt=opt, penalty=prox_penalty(mu), **server)
    return replace(algo, name="fedprox", hparams={"mu": mu, "weighted": weighted})
