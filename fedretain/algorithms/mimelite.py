"""MimeLite: local SGD steps that apply the server's momentum, frozen for the round.

Karimireddy, Jaggi, Kale, Mohri, Reddi, Stich, Suresh, "Breaking the centralized barrier for
cross-device federated learning", NeurIPS 2021, arXiv:2008.03606 (first titled "Mime:
Mimicking Centralized Stochastic Algorithms in Federated Learning").

- server state ``x``, ``m`` (starts at 0); no client state;
- local step ``y ← y − η((1−β)∇f_i(y; B) + β m)`` with ``m`` as received (plain SGD: a local
  momentum or weight decay would change the update the server statistics stand for, so they
  are refused);
- each client also returns ``∇f_i(x)``, the gradient of its whole local data (``ctx.data``) at
  the received ``x``;
- server ``m ← (1−β) mean_i ∇f_i(x) + β m``, ``x ← mean_i y_i``.

β = 0.9 (the paper's default momentum). The means are unweighted as in the paper's Algorithm
(``weighted=True``: by sample counts, both of them). FedJAX and TFF use the undampened form
``y ← y − η(∇f_i(y) + β m)``, ``m ← mean ∇f_i(x) + β m``: the same algorithm after rescaling
``η`` by ``1/(1−β)``. The full-data gradient is taken in training mode with the round's
BatchNorm statistics left alone.

Payloads: downlink ``x``, ``m``, ``buffers``; uplink ``y`` (the trained local parameters),
``grad`` (``∇f_i(x)``), ``buffers``: twice FedAvg's bytes in each direction.
"""

from __future__ import annotations

from torch import Tensor

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.fedavg import fedavg
from fedretain.algorithms.server import ServerStep, mean_weights
from fedretain.core.algorithm import (
    Algorithm,
    ClientContext,
    RoundInfo,
    algorithm_factory,
    transform,
)
from fedretain.core.local import make_local_step
from fedretain.core.optim import Optimizer, identity, sgd
from fedretain.core.tree import Tree, tree_map, tree_weighted_mean, tree_zeros_like


@algorithm_factory
def mimelite(
    *,
    beta: float = 0.9,
    weighted: bool = False,
    opt: Optimizer | None = None,
    server_opt: Optimizer | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """MimeLite with server momentum ``beta``.

    :param beta: momentum β in [0, 1) the local steps apply from the server
    :param weighted: weigh both server means (models, gradients) by sample counts (false: the plain
        means, as the paper)
    """
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"algo.beta must be in [0, 1), got {beta}")
    opt = opt or sgd()
    if not opt.is_plain_sgd:
        raise ValueError(
            "mimelite applies the server momentum in plain local SGD steps: set optimizer=sgd, "
            "optimizer.momentum=0, optimizer.weight_decay=0"
        )
    base = fedavg(opt=opt)
    # the model part of the server
    step = ServerStep(weighted, aggregator, server_opt or identity())

    def server_init(params: Tree, buffers: Tree) -> Tree:
        return {**step.init(params, buffers), "m": tree_zeros_like(params)}

    def broadcast(server_state: Tree, info: RoundInfo) -> Tree:
        return {k: server_state[k] for k in ("x", "m", "buffers")}

    def correct(grads: Tree, state: Tree) -> Tree:
        return tree_map(lambda g, m: (1.0 - beta) * g + beta * m, grads, state["down"]["m"])

    def local_final(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
        down = state["down"]
        full_grad, _, _ = ctx.task.grad(down["x"], down["buffers"], ctx.data)
        uplink = {"y": state["params"], "grad": full_grad, "buffers": state["buffers"]}
        return uplink, client_state

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        grad = tree_weighted_mean(uplinks["grad"], mean_weights(weights, weighted))
        new = step(server_state, {"y": uplinks["y"], "buffers": uplinks["buffers"]}, weights)
        m = tree_map(lambda g, m: (1.0 - beta) * g + beta * m, grad, server_state["m"])
        return {**new, "m": m}, {}

    return transform(
        base,
        name="mimelite",
        server_init=server_init,
        broadcast=broadcast,
        local_step=make_local_step(opt, correct=correct),
        local_final=local_final,
        aggregate=aggregate,
        downlink_keys=("x", "m", "buffers"),
        uplink_keys=("y", "grad", "buffers"),
        hints={"reads_data_outside_step": True},  # the full gradient, in local_final
    )
