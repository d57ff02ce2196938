"""FedProxM: FedProx clients with FedAvgM's server momentum.

The combination used as a baseline by GradMA (Luo et al., CVPR 2023): local loss
``f_i(y) + μ/2 ‖y − x‖²`` (Li et al., MLSys 2020) and server ``v ← βv + Δ``,
``x ← x − η_s v`` (Hsu et al., 2019). Payloads: as FedAvg.
"""

from __future__ import annotations

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.fedavgm import fedavgm
from fedretain.algorithms.fedprox import prox_penalty
from fedretain.core.algorithm import Algorithm, algorithm_factory, transform
from fedretain.core.optim import Optimizer


@algorithm_factory
def fedproxm(
    *,
    mu: float = 0.01,
    beta: float = 0.9,
    server_lr: float = 1.0,
    nesterov: bool = False,
    weighted: bool = True,
    opt: Optimizer | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """FedProx local training with FedAvgM aggregation.

    :param mu: weight μ (>= 0) of the proximal term μ/2 ‖y − x‖² towards the received model
    :param beta: server momentum β in [0, 1) applied to the round's mean update
    :param server_lr: server learning rate η_g (> 0) of the momentum step
    :param nesterov: Nesterov momentum on the server
    :param weighted: average the clients' models weighted by their sample counts (false: the plain
        mean)
    """
    if mu < 0:
        raise ValueError(f"algo.mu must be >= 0, got {mu}")
    algo = fedavgm(
        beta=beta,
        server_lr=server_lr,
        nesterov=nesterov,
        weighted=weighted,
        opt=opt,
        penalty=prox_penalty(mu),
        aggregator=aggregator,
    )
    return transform(algo, name="fedproxm")
