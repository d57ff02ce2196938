"""FedProx: FedAvg with a proximal term ``μ/2 ‖y − x‖²`` in every client's local loss.

Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, "Federated Optimization in Heterogeneous
Networks", MLSys 2020, arXiv:1812.06127. The paper tunes μ over {0.001, 0.01, 0.1, 1}.

Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, ``buffers``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.fedavg import fedavg
from fedretain.core.algorithm import Algorithm, algorithm_factory, transform
from fedretain.core.local import ClosedFormPenalty, Pull
from fedretain.core.optim import Optimizer
from fedretain.core.tree import Tree, leaves


def prox_penalty(mu: float) -> ClosedFormPenalty:
    """``μ/2 ‖params − x‖²`` with ``x`` the received global model; gradient ``μ (params − x)``,
    a pull toward ``x``."""

    def penalty(params: Tree, state: Tree) -> Tensor:
        terms = [
            torch.sum((p - x) ** 2)
            for p, x in zip(leaves(params), leaves(state["down"]["x"]), strict=True)
        ]
        return 0.5 * mu * torch.stack(terms).sum()

    return ClosedFormPenalty(penalty, pull=Pull(mu, lambda state: state["down"]["x"]))


@algorithm_factory
def fedprox(
    *,
    mu: float = 0.01,
    weighted: bool = True,
    opt: Optimizer | None = None,
    server_opt: Optimizer | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """FedProx with proximal coefficient ``mu``.

    :param mu: weight μ (>= 0) of the proximal term μ/2 ‖y − x‖² towards the received model
    :param weighted: average the clients' models weighted by their sample counts (false: the plain
        mean)
    """
    if mu < 0:
        raise ValueError(f"algo.mu must be >= 0, got {mu}")
    server = {"server_opt": server_opt, "aggregator": aggregator}
    algo = fedavg(weighted=weighted, opt=opt, penalty=prox_penalty(mu), **server)
    return transform(algo, name="fedprox")
