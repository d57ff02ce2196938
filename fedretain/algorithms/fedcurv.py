"""FedCurv: EWC's diagonal-Fisher penalty, pulling each client towards the other clients' models.

Shoham, Avidor, Keren, Israel, Benditkis, Mor-Yosef, Zeitak, "Overcoming Forgetting in
Federated Learning on Non-IID Data", NeurIPS 2019 Workshop on Federated Learning for Data
Privacy and Confidentiality, arXiv:1910.07796 (§3, §3.1).

Client ``s`` minimises ``L_s(θ) + λ Σ_{j≠s} (θ − θ̂_j)ᵀ diag(F_j) (θ − θ̂_j)``, with ``θ̂_j``
client ``j``'s trained local model and ``F_j`` its diagonal empirical Fisher there. Dropping
constants (§3.1), with ``u_j = F_j`` and ``v_j = F_j ⊙ θ̂_j`` and the server's sums
``U = Σ_j u_j``, ``V = Σ_j v_j``, the penalty is

    λ Σ_p [θ_p² (U − u_s)_p − 2 θ_p (V − v_s)_p]

where ``u_s, v_s`` are the client's own last contribution, which it keeps (client state) and
subtracts, so that the server only ever sends sums.

- **Fisher** (in ``local_final``, over the client's whole training data ``ctx.data``): the
  weighted mean over samples of the squared per-sample gradients of the task loss at the trained
  local model, in eval mode (dropout off; FedReg's code does the same). With ``loss=ce`` the
  per-sample loss is the negative log-likelihood of the true label, the paper's empirical
  Fisher; with ``loss=tce`` it is the truncated likelihood the client trains on. It is
  computed layer by layer from activations and output gradients (:mod:`fedretain.core.fisher`:
  one matmul per Linear layer, one batched matmul per convolution, per-sample gradients only
  for parameters outside Linear/Conv2d/norm layers), in chunks of ``fisher_chunk`` samples per
  pass (``0``: sized to about 256 MiB, for all the clients a vectorised engine trains together).
- **Server sums** (``memory = True``, the default): ``U, V`` hold the latest ``u_j, v_j`` of
  every client that has taken part; a client that has not yet sent anything contributes zero,
  so the first round is FedAvg. The client uploads the change of its contribution,
  ``du = u_s⁺ − u_s`` and ``dv = v_s⁺ − v_s`` (its first contribution in full), the server adds
  ``Σ du``, ``Σ dv``, and ``U − u_s`` is then exactly the other clients' sum. With full
  participation this is the paper's algorithm. ``memory = False`` is FedReg's code
  (``Zoesgithub/FedReg FedUtils/fed/fedcurv.py``): ``U, V`` are the sums over the previous
  round's clients only, the client uploads ``u, v`` and keeps nothing (so it does not subtract
  its own term in the rare case it took part in the previous round too).
- **Server model**: ``x`` is FedAvg's mean of the trained local models (sample-weighted;
  ``weighted = False``: unweighted, as FedReg's code).

Payloads: downlink ``x``, ``U``, ``V``, ``buffers`` (3× FedAvg); uplink ``y`` (the trained local
parameters), ``du``, ``dv`` (``u``, ``v`` with ``memory = False``), ``buffers`` (3× FedAvg).
Client state (``memory = True``): ``u``, ``v``, twice the parameters per client.
λ: 1e-4 by default (FedReg's MNIST/EMNIST baselines; 1e-5 CIFAR-10, 1e-3 CIFAR-100);
``algo.lambda`` on the command line (the factory's keyword is ``lambda_``). On Fashion-MNIST
with the MLP the penalty is inert below λ = 1e-2, helps most at 0.1-1 and diverges at 10
(docs/algorithms.md, "FedCurv's λ", from ``fedretain reproduce fedcurv-table1``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.fedavg import fedavg
from fedretain.algorithms.server import ServerStep
from fedretain.core.algorithm import (
    Algorithm,
    ClientContext,
    RoundInfo,
    algorithm_factory,
    transform,
)
from fedretain.core.fisher import FISHER_BYTES, fisher_diag
from fedretain.core.local import ClosedFormPenalty, make_local_init
from fedretain.core.optim import Optimizer, identity, sgd
from fedretain.core.tree import Tree, leaves, tree_map, tree_zeros_like


def curvature_penalty(lambda_: float) -> ClosedFormPenalty:
    """``λ Σ_p [θ_p² A_p − 2 θ_p B_p]``, ``A = U − u_s`` and ``B = V − v_s`` in the step state;
    gradient ``2λ (θ A − B)``."""

    def penalty(params: Tree, state: Tree) -> Tensor:
        terms = [
            torch.sum(p * p * a - 2.0 * p * b)
            for p, a, b in zip(leaves(params), leaves(state["A"]), leaves(state["B"]), strict=True)
        ]
        return lambda_ * torch.stack(terms).sum()

    def gradient(params: Tree, state: Tree) -> Tree:
        return tree_map(lambda p, a, b: 2.0 * lambda_ * (p * a - b), params, state["A"], state["B"])

    def add_gradient(grads: Tree, params: Tree, state: Tree) -> Tree:
        c = 2.0 * lambda_
        return tree_map(
            lambda g, p, a, b: torch.addcmul(g, p, a, value=c).sub_(b, alpha=c),
            grads,
            params,
            state["A"],
            state["B"],
        )

    return ClosedFormPenalty(penalty, gradient, add_gradient)


@algorithm_factory
def fedcurv(
    *,
    lambda_: float = 1e-4,
    memory: bool = True,
    weighted: bool = True,
    fisher_chunk: int = 0,
    opt: Optimizer | None = None,
    server_opt: Optimizer | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """FedCurv with penalty strength ``lambda_`` (``algo.lambda``).

    :param lambda_: strength λ (>= 0) of the Fisher penalty towards the other clients' models
    :param memory: the server keeps every client's latest Fisher terms (false: only the previous
        round's, as FedReg's code)
    :param weighted: average the clients' models weighted by their sample counts (false: the plain
        mean)
    :param fisher_chunk: samples per pass of the Fisher computation (0: sized to about 256 MiB)
    """
    if not lambda_ >= 0:
        raise ValueError(f"algo.lambda must be >= 0, got {lambda_}")
    if fisher_chunk < 0:
        raise ValueError(f"algo.fisher_chunk must be >= 0 (0: sized to memory), got {fisher_chunk}")
    opt = opt or sgd()
    base_init = make_local_init(opt)
    base = fedavg(weighted=weighted, opt=opt, penalty=curvature_penalty(lambda_))
    sent = ("du", "dv") if memory else ("u", "v")

    # the model part of the server
    step = ServerStep(weighted, aggregator, server_opt or identity())

    def server_init(params: Tree, buffers: Tree) -> Tree:
        zeros = tree_zeros_like(params)
        return {**step.init(params, buffers), "U": zeros, "V": zeros}

    def client_init(params: Tree) -> Tree:
        if not memory:
            return {}
        zeros = tree_zeros_like(params)
        return {"u": zeros, "v": zeros}

    def broadcast(server_state: Tree, info: RoundInfo) -> Tree:
        return {k: server_state[k] for k in ("x", "U", "V", "buffers")}

    def local_init(down: Tree, client_state: Tree, ctx: ClientContext) -> Tree:
        state = base_init(down, client_state, ctx)
        if memory:  # the other clients' sums: subtract the client's own last contribution
            a = tree_map(torch.sub, down["U"], client_state["u"])
            b = tree_map(torch.sub, down["V"], client_state["v"])
        else:
            a, b = down["U"], down["V"]
        return {**state, "A": a, "B": b}

    def local_final(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
        theta = state["params"]
        u = fisher_diag(ctx.task, theta, state["buffers"], ctx.data, fisher_chunk)
        v = tree_map(torch.mul, u, theta)
        if not memory:
            return {"y": theta, "u": u, "v": v, "buffers": state["buffers"]}, client_state
        uplink = {
            "y": theta,
            "du": tree_map(torch.sub, u, client_state["u"]),
            "dv": tree_map(torch.sub, v, client_state["v"]),
            "buffers": state["buffers"],
        }
        return uplink, {"u": u, "v": v}

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        su = tree_map(lambda d: d.sum(dim=0), uplinks[sent[0]])
        sv = tree_map(lambda d: d.sum(dim=0), uplinks[sent[1]])
        if memory:
            su = tree_map(torch.add, server_state["U"], su)
            sv = tree_map(torch.add, server_state["V"], sv)
        models = {"y": uplinks["y"], "buffers": uplinks["buffers"]}
        return {**step(server_state, models, weights), "U": su, "V": sv}, {}

    return transform(
        base,
        name="fedcurv",
        server_init=server_init,
        client_init=client_init,
        broadcast=broadcast,
        local_init=local_init,
        local_final=local_final,
        aggregate=aggregate,
        downlink_keys=("x", "U", "V", "buffers"),
        uplink_keys=("y", *sent, "buffers"),
        hints={"reads_data_outside_step": True},  # the uplink's Fisher information, in local_final
    )


__all__ = ["FISHER_BYTES", "curvature_penalty", "fedcurv", "fisher_diag"]
