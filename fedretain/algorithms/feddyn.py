"""FedDyn: dynamic regularisation aligns the clients' local optima with the global one.

Acar, Zhao, Navarro, Mattina, Whatmough, Saligrama, "Federated Learning Based on Dynamic
Regularization", ICLR 2021, arXiv:2111.04263 (Algorithm 1).

- client state ``g_i`` (the client's ``∇L_i`` at its last local model), zero before its first
  participation; server state ``x`` (``θ^t``), ``h``, zero at the start;
- local objective ``L_i(θ) − ⟨g_i, θ⟩ + α/2 ‖θ − θ^{t−1}‖²``, the quadratic term written out
  as a penalty (the official code hides it in the optimiser's weight decay, which changes what
  ``weight_decay`` means and interacts with momentum);
- final ``g_i ← g_i − α (θ_i − θ^{t−1})``, upload ``θ_i``;
- server ``h ← h − (α/N) Σ_{i∈S} (θ_i − θ^{t−1})``, ``θ^t = mean_S θ_i − h/α`` (plain mean
  over the round's clients, as the paper); ``θ^t`` is broadcast and evaluated.

``α`` is the same for every client. (The official code divides it by the client's share of the
data relative to the mean, ``α n̄ / n_i``; that is not in the paper and not done here.) The
paper's grid is {0.1, 0.01, 0.001}; 0.01 is the default. BatchNorm buffers are the plain mean
over the round's clients.

Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, the trained local parameters,
``buffers``). Client state ``g_i``: one parameter-sized tree per client.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedretain.algorithms.fedavg import fedavg, mean_weights
from fedretain.core.algorithm import (
    Algorithm,
    ClientContext,
    RoundInfo,
    algorithm_factory,
    transform,
)
from fedretain.core.local import ClosedFormPenalty, Pull
from fedretain.core.optim import Optimizer
from fedretain.core.tree import Tree, leaves, tree_map, tree_weighted_mean, tree_zeros_like


def dyn_penalty(alpha: float) -> ClosedFormPenalty:
    """``−⟨g_i, θ⟩ + α/2 ‖θ − x‖²`` with ``x`` the received global model; gradient
    ``α (θ − x) − g_i = α (θ − (x + g_i / α))``, a pull toward ``x + g_i / α`` (computed once
    per client and round)."""

    def penalty(params: Tree, state: Tree) -> Tensor:
        terms = [
            torch.sum((alpha / 2) * (p - x) ** 2 - g * p)
            for p, x, g in zip(
                leaves(params),
                leaves(state["down"]["x"]),
                leaves(state["client"]["g_i"]),
                strict=True,
            )
        ]
        return torch.stack(terms).sum()

    def anchor(state: Tree) -> Tree:
        return tree_map(
            lambda x, g: torch.add(x, g, alpha=1.0 / alpha),
            state["down"]["x"],
            state["client"]["g_i"],
        )

    return ClosedFormPenalty(penalty, pull=Pull(alpha, anchor))


@algorithm_factory
def feddyn(*, alpha: float = 0.01, opt: Optimizer | None = None) -> Algorithm:
    """FedDyn with regularisation strength ``alpha`` (α).

    :param alpha: strength α (> 0) of the dynamic regulariser
    """
    if not alpha > 0:
        raise ValueError(f"algo.alpha must be > 0 (the server divides by it), got {alpha}")
    base = fedavg(weighted=False, opt=opt, penalty=dyn_penalty(alpha))

    def server_init(params: Tree, buffers: Tree) -> Tree:
        return {"x": params, "buffers": buffers, "h": tree_zeros_like(params)}

    def client_init(params: Tree) -> Tree:
        return {"g_i": tree_zeros_like(params)}

    def local_final(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
        y, x = state["params"], state["down"]["x"]
        g_i = tree_map(lambda g, y, x: g - alpha * (y - x), client_state["g_i"], y, x)
        return {"y": y, "buffers": state["buffers"]}, {"g_i": g_i}

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        x = server_state["x"]
        n = info.num_clients
        h = tree_map(
            lambda h, y, x: h - (alpha / n) * (y - x).sum(dim=0), server_state["h"], uplinks["y"], x
        )
        ones = mean_weights(weights, False)
        mean_y = tree_weighted_mean(uplinks["y"], ones)
        new = {
            **server_state,
            "x": tree_map(lambda m, h: m - h / alpha, mean_y, h),
            "h": h,
            "buffers": tree_weighted_mean(uplinks["buffers"], ones),
        }
        return new, {}

    return transform(
        base,
        name="feddyn",
        server_init=server_init,
        client_init=client_init,
        local_final=local_final,
        aggregate=aggregate,
    )


__all__ = ["dyn_penalty", "feddyn"]
