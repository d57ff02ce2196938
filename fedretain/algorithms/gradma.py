"""GradMA: gradient-memory-based acceleration, on the worker side, the server side, or both.

Luo, Chen, Wang, Cai, Zhong, Zhu, "GradMA: A Gradient-Memory-based Accelerated Federated
Learning with Alleviated Catastrophic Forgetting", CVPR 2023, arXiv:2302.14307.
Algorithms 1-4; ``../shared/ALGORITHMS.md`` has the equations.

Both sides correct a direction ``p`` with the QP ``min ½‖p̃ − p‖² s.t. ⟨p̃, M_i⟩ ≥ 0``
(:mod:`fedretain.algorithms.qp`):

- **worker** (Alg. 2): each local step on batch B takes ``g = ∇f_i(x_k; B)`` and the columns
  ``[∇f_i(x_{k−1}; B), ∇f_i(x_t; B), x_k − x_t]``, where ``x_{−1}`` is the client's model at
  the end of its previous participation (``x_t`` at its first), and steps along ``QP(g, M)``;
  three gradients per step;
- **server** (Alg. 3): ``d = mean_i d_i`` with ``d_i = x_t − y_i``; ``m = β1 m̃ + d``; memory
  rows ``D[i] ← β2 D[i] + d_i`` for buffered clients of the round (``d_i`` for a client just
  buffered), ``D[i] ← β2 D[i]`` for the other buffered clients; ``m̃ = QP(m, D)``;
  ``x ← x − η_g m̃``;
- **mem_red** (Alg. 4): at most ``memory`` rows; a round's client that is not buffered, when
  the buffer is full, evicts the buffered client with the smallest counter among those not in
  the round (lowest slot first on ties; its counter drops to 0 and its row is replaced); each
  round's buffered clients count one more participation. With ``memory = 0`` the server is
  FedAvgM (unweighted mean, as the paper). When no client can be evicted (more active clients
  than ``memory``), the rest of the round's clients are not memorised this round.

Variants: ``gradma`` (both), ``gradma-w`` (worker QP, FedAvg server: Alg. 7), ``gradma-s``
(FedAvg workers, GradMA server: Alg. 8). ``per_layer`` solves one QP per parameter tensor, as
the reference code (``lkyddd/GradMA``); the paper solves one over the whole vector.

Defaults: the paper gives no single default for (β1, β2); β1 = 0.9 matches FedAvgM's
momentum (so ``memory = 0`` is exactly our FedAvgM), β2 = 0.5 is the middle of its grid.

Payloads: downlink ``x``, ``buffers``; uplink ``d`` (= x_t − y_i), ``buffers``: FedAvg's bytes.
Server state: ``x``, ``buffers``, ``m`` (m̃), ``D`` (``memory`` rows stacked per parameter
tensor), ``buf`` (client id per row, −1 when empty), ``count`` (counter per row). Client state
(worker variants): ``x_prev``, the client's last local model.
"""

from __future__ import annotations

import torch
from torch import Tensor

from fedretain.algorithms.fedavg import fedavg, mean_weights
from fedretain.algorithms.qp import project_small, project_tree
from fedretain.core.algorithm import (
    Algorithm,
    ClientContext,
    RoundInfo,
    algorithm_factory,
    transform,
)
from fedretain.core.local import advance
from fedretain.core.optim import Optimizer, sgd
from fedretain.core.task import Batch
from fedretain.core.tree import (
    Tree,
    ravel,
    tree_map,
    tree_sub,
    tree_weighted_mean,
    tree_zeros_like,
    unravel_like,
)

VARIANTS = ("both", "worker", "server")


def mem_red(
    buf: list[int], count: list[int], sampled: list[int], memory: int
) -> tuple[list[int], list[int], set[int], list[int]]:
    """Algorithm 4 on plain lists: ``buf[j]`` is the client in slot ``j`` (−1: empty).

    Returns the new ``buf`` and ``count``, the slots filled by new clients this round, and the
    evicted client ids (in order). Pure: the inputs are not modified.
    """
    buf, count = list(buf), list(count)
    new_slots: set[int] = set()
    evicted: list[int] = []
    in_round = set(sampled)
    for i in sampled:
        if i in buf:
            count[buf.index(i)] += 1
            continue
        if -1 in buf:  # free memory left
            slot = buf.index(-1)
        else:
            old = [j for j, k in enumerate(buf) if k not in in_round]
            if not old:  # every row belongs to this round's clients: i is not memorised
                continue
            slot = min(old, key=lambda j: (count[j], j))
            evicted.append(buf[slot])
        buf[slot], count[slot] = i, 1
        new_slots.add(slot)
    return buf, count, new_slots, evicted


def remember(
    server_state: Tree, rows: Tree, clients: list[int], beta2: float
) -> tuple[Tree, list[int]]:
    """Algorithm 3's memory update: the buffer after :func:`mem_red` of ``clients`` (the
    round's, in uplink order) and ``D`` with every kept row decayed by β2, a row of a client of
    the round plus its update (``rows``: the round's ``d_i`` stacked in uplink order), a row just
    filled equal to its client's update. Returns ``{"D", "buf", "count"}`` and the filled slots.
    """
    memory = server_state["buf"].shape[0]
    buf, count, new_slots, _ = mem_red(
        server_state["buf"].tolist(), server_state["count"].tolist(), clients, memory
    )
    # per slot: the uplink row of this round's client (or -1) and whether it is new
    src = torch.tensor([clients.index(c) if c in clients else -1 for c in buf])
    fresh = torch.tensor([j in new_slots for j in range(memory)])

    def update_rows(D: Tensor, up: Tensor) -> Tensor:
        # empty slots stay zero: they are never written, and evicted rows are refilled
        shape = (memory,) + (1,) * (D.dim() - 1)
        s, f = src.to(D.device), fresh.to(D.device)
        incoming = up[s.clamp(min=0)] * (s >= 0).view(shape).to(up.dtype)
        return D * (beta2 * (~f).to(D.dtype)).view(shape) + incoming

    memorised = {
        "D": tree_map(update_rows, server_state["D"], rows),
        "buf": torch.tensor(buf, dtype=torch.int64),
        "count": torch.tensor(count, dtype=torch.int64),
    }
    return memorised, [j for j in range(memory) if buf[j] >= 0]


def server_step(
    server_state: Tree,
    d: Tree,
    rows: Tree,
    clients: list[int],
    beta1: float,
    beta2: float,
    server_lr: float,
    per_layer: bool,
) -> tuple[Tree, dict[str, Tensor]]:
    """Algorithm 3 given the round's mean update ``d`` and its clients' updates ``rows``
    (stacked in the order of ``clients``): ``m = β1 m̃ + d``, the memory updated
    (:func:`remember`), ``m̃ = QP(m, D)`` over the filled rows, ``x ← x − η_g m̃``. Returns the
    new ``x``, ``m`` and memory, and the count of memory rows used."""
    m = tree_map(lambda mt, di: beta1 * mt + di, server_state["m"], d)
    new = dict(server_state)
    metrics: dict[str, Tensor] = {}
    if server_state["buf"].shape[0]:
        memorised, filled = remember(server_state, rows, clients, beta2)
        idx = torch.tensor(filled, dtype=torch.int64)
        columns = tree_map(lambda r: r.index_select(0, idx.to(r.device)), memorised["D"])
        m = project_tree(m, columns, per_layer=per_layer)
        new.update(memorised)
        metrics["memory_rows"] = torch.tensor(float(len(filled)))
    new["m"] = m
    new["x"] = tree_map(lambda xi, mi: xi - server_lr * mi, server_state["x"], m)
    return new, metrics


def _columns(*vectors: Tensor) -> Tensor:
    """The (d, C) matrix of the QP's columns, stored column by column: stacking on a new last
    axis interleaves the C vectors element by element, 20x slower for C = 3 (RESULTS.md)."""
    return torch.stack(vectors).T


def _worker_step(opt: Optimizer, per_layer: bool):
    def local_step(state: Tree, batch: Batch, ctx: ClientContext) -> tuple[Tree, dict]:
        task = ctx.task
        x_t = state["down"]["x"]
        g, loss, new_buffers = task.grad(state["params"], state["buffers"], batch)
        g_prev, _, _ = task.grad(state["prev"], state["buffers"], batch)
        g_glob, _, _ = task.grad(x_t, state["buffers"], batch)
        drift = tree_sub(state["params"], x_t)
        if per_layer:
            corrected = {
                k: project_small(
                    g[k].reshape(-1),
                    _columns(g_prev[k].reshape(-1), g_glob[k].reshape(-1), drift[k].reshape(-1)),
                ).reshape(g[k].shape)
                for k in g
            }
        else:
            columns = _columns(ravel(g_prev), ravel(g_glob), ravel(drift))
            corrected = unravel_like(project_small(ravel(g), columns), g)
        new_state = {**advance(opt, state, corrected, new_buffers), "prev": state["params"]}
        return new_state, {"loss": loss}

    return local_step


@algorithm_factory
def gradma(
    *,
    variant: str = "both",
    beta1: float = 0.9,
    beta2: float = 0.5,
    server_lr: float = 1.0,
    memory: int = 100,
    per_layer: bool = False,
    weighted: bool = False,
    opt: Optimizer | None = None,
) -> Algorithm:
    """GradMA; ``variant`` is ``both``, ``worker`` (GradMA-W) or ``server`` (GradMA-S).

    :param variant: which side runs GradMA's QP: both, worker (GradMA-W) or server (GradMA-S)
    :param beta1: server momentum β1 in [0, 1) of the mean update
    :param beta2: decay β2 in [0, 1) of the server's memorised client updates
    :param server_lr: server learning rate η_g of the projected momentum step
    :param memory: most clients whose updates the server memorises (0: the server is FedAvgM)
    :param per_layer: one QP per parameter tensor, as the reference code (false: one over the whole
        model, as the paper)
    :param weighted: average the clients' updates weighted by their sample counts (false: the plain
        mean, as the paper)
    """
    if variant not in VARIANTS:
        raise ValueError(f"algo.variant must be one of {', '.join(VARIANTS)}, got {variant!r}")
    if not 0 <= beta1 < 1 or not 0 <= beta2 < 1:
        raise ValueError(f"algo.beta1 and algo.beta2 must be in [0, 1), got {beta1}, {beta2}")
    if memory < 0:
        raise ValueError(f"algo.memory must be >= 0, got {memory}")
    opt = opt or sgd()
    base = fedavg(opt=opt)
    worker = variant in ("both", "worker")
    server = variant in ("both", "server")

    def client_init(params: Tree) -> Tree:
        return {"x_prev": params} if worker else {}

    def local_init(down: Tree, client_state: Tree, ctx: ClientContext) -> Tree:
        state = base.local_init(down, client_state, ctx)
        if worker:
            state["prev"] = client_state["x_prev"]
        return state

    def local_final(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
        uplink = {"d": tree_sub(state["down"]["x"], state["params"]), "buffers": state["buffers"]}
        return uplink, ({"x_prev": state["params"]} if worker else client_state)

    def server_init(params: Tree, buffers: Tree) -> Tree:
        state = {"x": params, "buffers": buffers}
        if server:
            state["m"] = tree_zeros_like(params)
            state["D"] = tree_map(lambda p: p.new_zeros((memory, *p.shape)), params)
            state["buf"] = torch.full((memory,), -1, dtype=torch.int64)
            state["count"] = torch.zeros(memory, dtype=torch.int64)
        return state

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        w = mean_weights(weights, weighted)
        d = tree_weighted_mean(uplinks["d"], w)
        buffers = tree_weighted_mean(uplinks["buffers"], w)
        if not server:  # GradMA-W: the server averages like FedAvg
            return {**server_state, "x": tree_sub(server_state["x"], d), "buffers": buffers}, {}
        new, metrics = server_step(
            server_state, d, uplinks["d"], list(info.clients), beta1, beta2, server_lr, per_layer
        )
        return {**new, "buffers": buffers}, metrics

    name = {"both": "gradma", "worker": "gradma-w", "server": "gradma-s"}[variant]
    return transform(
        base,
        name=name,
        server_init=server_init,
        client_init=client_init,
        local_init=local_init,
        local_step=_worker_step(opt, per_layer) if worker else base.local_step,
        local_final=local_final,
        aggregate=aggregate,
        uplink_keys=("d", "buffers"),
    )


@algorithm_factory
def gradma_w(
    *, per_layer: bool = False, weighted: bool = False, opt: Optimizer | None = None
) -> Algorithm:
    """GradMA-W (Alg. 7): the worker-side QP with FedAvg's server.

    :param per_layer: one QP per parameter tensor, as the reference code (false: one over the whole
        model, as the paper)
    :param weighted: average the clients' updates weighted by their sample counts (false: the plain
        mean, as the paper)
    """
    return gradma(variant="worker", per_layer=per_layer, weighted=weighted, memory=0, opt=opt)


@algorithm_factory
def gradma_s(
    *,
    beta1: float = 0.9,
    beta2: float = 0.5,
    server_lr: float = 1.0,
    memory: int = 100,
    per_layer: bool = False,
    weighted: bool = False,
    opt: Optimizer | None = None,
) -> Algorithm:
    """GradMA-S (Alg. 8): FedAvg workers with the GradMA server.

    :param beta1: server momentum β1 in [0, 1) of the mean update
    :param beta2: decay β2 in [0, 1) of the server's memorised client updates
    :param server_lr: server learning rate η_g of the projected momentum step
    :param memory: most clients whose updates the server memorises (0: the server is FedAvgM)
    :param per_layer: one QP per parameter tensor, as the reference code (false: one over the whole
        model, as the paper)
    :param weighted: average the clients' updates weighted by their sample counts (false: the plain
        mean, as the paper)
    """
    return gradma(variant="server", **locals())
