"""SCAFFOLD (option II): control variates correct the client drift of local SGD.

Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, "SCAFFOLD: Stochastic Controlled Averaging
for Federated Learning", ICML 2020, arXiv:1910.06378.

- server state ``x``, ``c``; client state ``c_i``; all start at zero;
- local step ``y ← y − η_l (∇f_i(y) − c_i + c)`` (plain SGD: local momentum or weight decay
  would break the control-variate identity, so they are refused);
- final ``c_i⁺ = c_i − c + (x − y) / Σ_k η_l`` (the sum of the step sizes actually taken);
- server ``x ← x + η_g mean(Δy)``, ``c ← c + (1/N) Σ_{i∈S} Δc_i``.

Payloads: downlink ``x``, ``c``, ``buffers``; uplink ``dy`` (= y − x), ``dc`` (= c_i⁺ − c_i),
``buffers``: twice FedAvg's bytes in each direction.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedretain.algorithms.server import ServerStep, mean_weights
from fedretain.core.algorithm import Algorithm, ClientContext, RoundInfo, algorithm_factory
from fedretain.core.local import make_local_init, make_local_step
from fedretain.core.optim import Optimizer, server_sgd, sgd
from fedretain.core.tree import Tree, tree_map, tree_weighted_mean, tree_zeros_like


@algorithm_factory
def scaffold(
    *, server_lr: float = 1.0, weighted: bool = False, opt: Optimizer | None = None
) -> Algorithm:
    """SCAFFOLD option II with global step size ``server_lr`` (η_g).

    :param server_lr: global step size η_g of the model update (the control variate's is 1)
    :param weighted: average ``Δy`` by sample counts instead of the paper's plain mean
    """
    opt = opt or sgd()
    if not opt.is_plain_sgd:
        raise ValueError(
            "scaffold needs plain local SGD: set optimizer=sgd, optimizer.momentum=0, "
            "optimizer.weight_decay=0"
        )

    step = ServerStep(weighted, opt=server_sgd(lr=server_lr))

    def server_init(params: Tree, buffers: Tree) -> Tree:
        return {**step.init(params, buffers), "c": tree_zeros_like(params)}

    def client_init(params: Tree) -> Tree:
        return {"c_i": tree_zeros_like(params)}

    def broadcast(server_state: Tree, info: RoundInfo) -> Tree:
        return {k: server_state[k] for k in ("x", "c", "buffers")}

    def correct(grads: Tree, state: Tree) -> Tree:
        return tree_map(
            lambda g, ci, c: g - ci + c, grads, state["client"]["c_i"], state["down"]["c"]
        )

    def local_final(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
        x, y, c = state["down"]["x"], state["params"], state["down"]["c"]
        c_i = client_state["c_i"]
        lr_sum = state["lr_sum"]
        c_new = tree_map(lambda ci, c, x, y: ci - c + (x - y) / lr_sum, c_i, c, x, y)
        uplink = {
            "dy": tree_map(lambda y, x: y - x, y, x),
            "dc": tree_map(lambda a, b: a - b, c_new, c_i),
            "buffers": state["buffers"],
        }
        return uplink, {"c_i": c_new}

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        w = mean_weights(weights, weighted)
        dy = tree_weighted_mean(uplinks["dy"], w)
        dc_sum = tree_map(lambda d: d.sum(dim=0), uplinks["dc"])
        x = server_state["x"]  # x + η_g dy: a server SGD step on the pseudo-gradient −dy
        new = {
            **server_state,
            **step.step(server_state, x, tree_map(torch.neg, dy)),
            "c": tree_map(lambda c, d: c + d / info.num_clients, server_state["c"], dc_sum),
            "buffers": tree_weighted_mean(uplinks["buffers"], w),
        }
        return new, {}

    return Algorithm(
        name="scaffold",
        server_init=server_init,
        client_init=client_init,
        broadcast=broadcast,
        local_init=make_local_init(opt),
        local_step=make_local_step(opt, correct=correct),
        local_final=local_final,
        aggregate=aggregate,
        downlink_keys=("x", "c", "buffers"),
        uplink_keys=("dy", "dc", "buffers"),
    )
