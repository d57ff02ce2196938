"""FedAvg: local SGD for E epochs, then the server averages the client models.

McMahan, Moore, Ramage, Hampson, Agüera y Arcas, "Communication-Efficient Learning of Deep
Networks from Decentralized Data", AISTATS 2017, arXiv:1602.05629.

Payloads: downlink ``x`` (global parameters), ``buffers``; uplink ``y`` (the trained local
parameters), ``buffers``. The server takes the sample-weighted mean of the ``y`` (``weighted
= False``: the unweighted mean, as FedReg's code). Other algorithms reuse these functions by
replacing fields of :func:`fedavg`.
"""

from __future__ import annotations

from torch import Tensor

from fedretain.core.algorithm import Algorithm, ClientContext, RoundInfo
from fedretain.core.local import Correct, Penalty, make_local_init, make_local_step
from fedretain.core.optim import Optimizer, sgd
from fedretain.core.tree import Tree, tree_weighted_mean


def server_init(params: Tree, buffers: Tree) -> Tree:
    return {"x": params, "buffers": buffers}


def no_client_state(params: Tree) -> Tree:
    return {}


def broadcast_model(server_state: Tree, info: RoundInfo) -> Tree:
    return {"x": server_state["x"], "buffers": server_state["buffers"]}


def upload_model(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
    return {"y": state["params"], "buffers": state["buffers"]}, client_state


def mean_weights(weights: Tensor, weighted: bool) -> Tensor:
    """The averaging weights: sample counts, or all ones for the unweighted mean."""
    return weights if weighted else weights.new_ones(weights.shape)


def fedavg(
    *,
    weighted: bool = True,
    opt: Optimizer | None = None,
    penalty: Penalty | None = None,
    correct: Correct | None = None,
) -> Algorithm:
    """FedAvg; ``penalty`` and ``correct`` are the local-training hooks others plug in."""
    opt = opt or sgd()

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        w = mean_weights(weights, weighted)
        new = {
            **server_state,
            "x": tree_weighted_mean(uplinks["y"], w),
            "buffers": tree_weighted_mean(uplinks["buffers"], w),
        }
        return new, {}

    return Algorithm(
        name="fedavg",
        server_init=server_init,
        client_init=no_client_state,
        broadcast=broadcast_model,
        local_init=make_local_init(opt),
        local_step=make_local_step(opt, penalty, correct),
        local_final=upload_model,
        aggregate=aggregate,
        downlink_keys=("x", "buffers"),
        uplink_keys=("y", "buffers"),
        hparams={"weighted": weighted},
    )
