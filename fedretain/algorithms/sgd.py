"""SGD: each client takes one gradient step on its whole local data as one batch.

The reference baseline of FedReg (Xu et al., ICLR 2022, §4): with sample-weighted averaging
this is exactly one step of full-batch gradient descent on the sampled clients' union, so it
cannot forget; FedReg's ``R_a`` metric is measured against its final accuracy.

Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, ``buffers``).
"""

from __future__ import annotations

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.fedavg import fedavg
from fedretain.core.algorithm import Algorithm, algorithm_factory, transform
from fedretain.core.optim import Optimizer


@algorithm_factory
def sgd(
    *,
    weighted: bool = True,
    opt: Optimizer | None = None,
    server_opt: Optimizer | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """FedAvg with a single full-batch local step per round.

    :param weighted: average the clients' models weighted by their sample counts (false: the plain
        mean)
    """
    algo = fedavg(weighted=weighted, opt=opt, server_opt=server_opt, aggregator=aggregator)
    return transform(algo, name="sgd", hints={"schedule": "full_batch"})
