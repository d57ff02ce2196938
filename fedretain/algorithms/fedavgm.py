"""FedAvgM: FedAvg clients, heavy-ball momentum on the server.

Hsu, Qi, Brown, "Measuring the Effects of Non-Identical Data Distribution for Federated
Visual Classification", arXiv:1909.06335, 2019.

Server: ``Δ = Σ (n_i/Σn)(x − y_i)``, ``v ← βv + Δ``, ``x ← x − η_s v`` (Nesterov:
``x ← x − η_s (Δ + βv)``, as Flower's and FL-bench's baselines). State ``v`` starts at 0 (the
server state's ``server_opt["b"]``). This is ``fedavg`` with ``server_opt=sgd
server_opt.momentum=β server_opt.lr=η_s`` (:mod:`fedretain.algorithms.server`).
Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, ``buffers``).
"""

from __future__ import annotations

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.fedavg import fedavg
from fedretain.core.algorithm import Algorithm, algorithm_factory, transform
from fedretain.core.local import Penalty
from fedretain.core.optim import Optimizer, server_sgd


@algorithm_factory
def fedavgm(
    *,
    beta: float = 0.9,
    server_lr: float = 1.0,
    nesterov: bool = False,
    weighted: bool = True,
    opt: Optimizer | None = None,
    penalty: Penalty | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """FedAvgM with momentum ``beta`` and server learning rate ``server_lr``.

    :param beta: server momentum β in [0, 1) applied to the round's mean update
    :param server_lr: server learning rate η_g (> 0) of the momentum step
    :param nesterov: Nesterov momentum on the server
    :param weighted: average the clients' models weighted by their sample counts (false: the plain
        mean)
    """
    if not 0 <= beta < 1:
        raise ValueError(f"algo.beta must be in [0, 1), got {beta}")
    if not server_lr > 0:
        raise ValueError(f"algo.server_lr must be > 0, got {server_lr}")
    momentum = server_sgd(lr=server_lr, momentum=beta, nesterov=nesterov)
    algo = fedavg(
        weighted=weighted, opt=opt, penalty=penalty, server_opt=momentum, aggregator=aggregator
    )
    return transform(
        algo,
        name="fedavgm",
    )
