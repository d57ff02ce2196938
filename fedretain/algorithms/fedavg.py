"""FedAvg: local SGD for E epochs, then the server averages the client models.

McMahan, Moore, Ramage, Hampson, Agüera y Arcas, "Communication-Efficient Learning of Deep
Networks from Decentralized Data", AISTATS 2017, arXiv:1602.05629.

Payloads: downlink ``x`` (global parameters), ``buffers``; uplink ``y`` (the trained local
parameters), ``buffers``. The server takes the sample-weighted mean of the ``y`` (``weighted
= False``: the unweighted mean, as FedReg's code); ``aggregator`` and ``server_opt`` replace
the mean and the assignment ``x ← mean`` (:mod:`fedretain.algorithms.server`: FedAvgM,
FedAdam, a median...). Other algorithms reuse these functions by replacing fields of
:func:`fedavg`.
"""

from __future__ import annotations

from torch import Tensor

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.server import ServerStep, mean_weights
from fedretain.core.algorithm import Algorithm, ClientContext, Hints, RoundInfo, algorithm_factory
from fedretain.core.local import Correct, LocalRule, Penalty, make_local_init, make_local_step
from fedretain.core.optim import Optimizer, identity, sgd
from fedretain.core.tree import Tree

__all__ = ["broadcast_model", "fedavg", "mean_weights", "no_client_state", "upload_model"]


def no_client_state(params: Tree) -> Tree:
    return {}


def broadcast_model(server_state: Tree, info: RoundInfo) -> Tree:
    return {"x": server_state["x"], "buffers": server_state["buffers"]}


def upload_model(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
    return {"y": state["params"], "buffers": state["buffers"]}, client_state


@algorithm_factory
def fedavg(
    *,
    weighted: bool = True,
    opt: Optimizer | None = None,
    penalty: Penalty | None = None,
    correct: Correct | None = None,
    server_opt: Optimizer | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """FedAvg; ``penalty`` and ``correct`` are the local-training hooks others plug in,
    ``server_opt`` and ``aggregator`` the server's.

    :param weighted: average the clients' models weighted by their sample counts (false: the plain
        mean)
    """
    opt = opt or sgd()
    step = ServerStep(weighted, aggregator, server_opt or identity())

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        return step(server_state, {"y": uplinks["y"], "buffers": uplinks["buffers"]}, weights), {}

    # the local rule, for transformations of the local step (DP-SGD)
    rule = LocalRule(opt, penalty, correct, make_local_step(opt, penalty, correct))
    return Algorithm(
        name="fedavg",
        server_init=step.init,
        client_init=no_client_state,
        broadcast=broadcast_model,
        local_init=make_local_init(opt, penalty),
        local_step=rule.step,
        local_final=upload_model,
        aggregate=aggregate,
        downlink_keys=("x", "buffers"),
        uplink_keys=("y", "buffers"),
        hints=Hints(local_rule=rule),
    )
