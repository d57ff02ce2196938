"""MIFA and MIFAM: the server remembers every client's latest update and averages over all N.

Gu, Huang, Zhang, Huang, "Fast Federated Learning in the Presence of Arbitrary Device
Unavailability", NeurIPS 2021, arXiv:2106.04159.

Clients train as FedAvg's. The server keeps a table with one row per client, for all ``N``
clients (``info.num_clients``), each row the shape of the parameters, all rows zero before the
client's first participation; an active client's row is overwritten, an absent client's row is
reused as it is (stale).

- **mifa** (the paper's Algorithm 1): row ``G_i ← (y_i − x)/η_t`` with ``η_t = info.lr``, the
  local learning rate of the round (the paper stores the opposite sign,
  ``(x − y_i)/η_t``, and subtracts); server ``x ← x + η_t (1/N) Σ_{i=1}^{N} G_i``. The division
  is by ``N``, not by the number of active clients (that would be "biased FedAvg"). With
  ``wait_all = True`` (the paper's alternative) ``x`` stays put until every client has taken
  part at least once; only the table is filled before that.
- **mifam** (no public code; by analogy with GradMA's server momentum): row
  ``d_i ← x − y_i``, the client's update relative to the global model it received (no division
  by the learning rate; the engines are synchronous, so that model is the server's current
  ``x``); ``d = (1/N) Σ_{i=1}^{N} d_i``, ``m ← β m + d``, ``x ← x − η_g m``
  (``m`` starts at 0). With ``β = 0`` and every client active each round, this is the
  unweighted FedAvg.

Buffers (BatchNorm statistics) are the unweighted mean over the round's active clients.
The paper's objective weighs clients equally (``1/N``), so there is no ``weighted`` option:
weighting by sample counts would need the counts of clients the server has not yet seen.

Server state: ``x``, ``buffers``, the table (``G`` for mifa, ``D`` for mifam: the parameter
tree with a leading client axis, ``{name: Tensor(N, *shape)}``), mifa's ``seen`` (bool
``(N,)``, which clients have taken part) and mifam's ``m`` (``server_opt["b"]``: the momentum
of a server SGD step, :mod:`fedretain.algorithms.server`). ``server_init`` does not know
``N``, so it creates the table with a leading axis of size 0; the first ``aggregate`` grows it
to ``N`` zero rows (``seen`` likewise) and its shape is fixed afterwards. The tree's structure
never changes, so checkpoints round-trip before and after the first round.

Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, the trained local parameters,
``buffers``). Server memory: ``N`` x the parameters, on top of FedAvg's (and ``m`` for mifam);
each round reads the whole table, ``O(N · |x|)``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from fedretain.algorithms.fedavg import fedavg
from fedretain.algorithms.server import ServerStep, mean_weights
from fedretain.core.algorithm import Algorithm, RoundInfo, algorithm_factory, transform
from fedretain.core.optim import Optimizer, server_sgd
from fedretain.core.tree import (
    Tree,
    leaves,
    tree_map,
    tree_weighted_mean,
    tree_where,
)


def empty_table(params: Tree) -> Tree:
    """A table with no rows yet: each leaf of ``params`` with a leading axis of size 0."""
    return tree_map(lambda p: p.new_zeros((0, *p.shape)), params)


def sized_table(table: Tree, num_clients: int) -> Tree:
    """The table with ``num_clients`` rows: zero rows if it had none yet, else as it is."""

    def size(t: Tensor) -> Tensor:
        if t.shape[0] == num_clients:
            return t
        if t.shape[0] == 0:
            return t.new_zeros((num_clients, *t.shape[1:]))
        raise ValueError(
            f"the server's client table has {t.shape[0]} rows but the round has "
            f"num_clients={num_clients}; the federation cannot change size during a run"
        )

    return tree_map(size, table)


def write_rows(table: Tree, clients: Sequence[int], rows: Tree) -> Tree:
    """A new table with the rows of ``clients`` replaced by ``rows`` (stacked in that order)."""

    idx: dict[torch.device, Tensor] = {}  # one index tensor per device, not one per leaf

    def write(t: Tensor, r: Tensor) -> Tensor:
        if t.device not in idx:
            idx[t.device] = torch.tensor(clients, dtype=torch.long, device=t.device)
        return t.index_copy(0, idx[t.device], r.to(t.dtype))

    return tree_map(write, table, rows)


def _device(tree: Tree) -> torch.device | None:
    """The device of ``tree``'s leaves; None (torch's default device) for a tree without any."""
    ls = leaves(tree)
    return ls[0].device if ls else None


@algorithm_factory
def mifa(*, wait_all: bool = False, opt: Optimizer | None = None) -> Algorithm:
    """MIFA: ``x ← x + η_t (1/N) Σ_i G_i`` over the remembered ``G_i = (y_i − x)/η_t``.

    :param wait_all: leave the model unchanged until every client has taken part at least once
    """

    def server_init(params: Tree, buffers: Tree) -> Tree:
        return {
            "x": params,
            "buffers": buffers,
            "G": empty_table(params),
            "seen": torch.zeros(0, dtype=torch.bool, device=_device(params)),
        }

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        if not info.lr > 0:
            raise ValueError(f"mifa divides by the local learning rate, got lr={info.lr}")
        n, lr = info.num_clients, info.lr
        x = server_state["x"]
        table = sized_table(server_state["G"], n)
        rows = tree_map(lambda y, x: (y - x) / lr, uplinks["y"], x)
        table = write_rows(table, info.clients, rows)
        seen = server_state["seen"]
        if seen.shape[0] == 0:
            seen = torch.zeros(n, dtype=torch.bool, device=seen.device)
        idx = torch.tensor(info.clients, dtype=torch.long, device=seen.device)
        seen = seen.index_fill(0, idx, True)
        new_x = tree_map(lambda x, g: x + lr * g.mean(dim=0), x, table)
        if wait_all:
            new_x = tree_where(seen.all(), new_x, x)
        new = {
            **server_state,
            "x": new_x,
            "buffers": tree_weighted_mean(uplinks["buffers"], mean_weights(weights, False)),
            "G": table,
            "seen": seen,
        }
        return new, {}

    return transform(
        fedavg(weighted=False, opt=opt),
        name="mifa",
        server_init=server_init,
        aggregate=aggregate,
    )


@algorithm_factory
def mifam(*, beta: float = 0.9, server_lr: float = 1.0, opt: Optimizer | None = None) -> Algorithm:
    """MIFA's memory with server momentum: ``m ← β m + (1/N) Σ_i d_i``, ``x ← x − η_g m``.

    :param beta: server momentum β in [0, 1) on the mean of the remembered updates
    :param server_lr: server learning rate η_g (> 0) of the momentum step
    """
    if not 0 <= beta < 1:
        raise ValueError(f"algo.beta must be in [0, 1), got {beta}")
    if not server_lr > 0:
        raise ValueError(f"algo.server_lr must be > 0, got {server_lr}")
    step = ServerStep(False, opt=server_sgd(lr=server_lr, momentum=beta))  # m: server_opt["b"]

    def server_init(params: Tree, buffers: Tree) -> Tree:
        return {**step.init(params, buffers), "D": empty_table(params)}

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        x = server_state["x"]
        table = sized_table(server_state["D"], info.num_clients)
        rows = tree_map(lambda y, x: x - y, uplinks["y"], x)
        table = write_rows(table, info.clients, rows)
        mean = tree_map(lambda d: d.mean(dim=0), table)
        new = {
            **server_state,
            **step.step(server_state, x, mean),
            "buffers": tree_weighted_mean(uplinks["buffers"], mean_weights(weights, False)),
            "D": table,
        }
        return new, {}

    return transform(
        fedavg(weighted=False, opt=opt),
        name="mifam",
        server_init=server_init,
        aggregate=aggregate,
    )


__all__ = ["empty_table", "mifa", "mifam", "sized_table", "write_rows"]
