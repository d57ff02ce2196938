"""One round, written once: open it, let an engine train the round's clients, close it.

- The client's side (who the clients are, one client's local training, the client-state
  rules) is :mod:`fedretain.core.client`, below the engines.
- :class:`Rounds` opens a round (sampling, broadcast, downlink check), collects what the engine
  returns (uplink check, finiteness and the divergence policy, ledger, client-state store,
  uplinks stacked in the round's order) and closes it (``algorithm.aggregate``). An engine is
  only the way it maps the round's clients to :class:`Trained` results: one after another,
  stacked under ``vmap``, or over Flower's messages (see :class:`Engine`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Protocol, cast

import numpy as np
import torch
from torch import Tensor

from fedretain.core.algorithm import Algorithm, RoundInfo
from fedretain.core.client import (
    Clients,
    ClientUpdate,
    client_state,
    diverged,
    keeps_old_state,
    local_model,
)
from fedretain.core.task import Batch, Task
from fedretain.core.tree import Tree, finite_rows, leaves, tree_allfinite, tree_map
from fedretain.engines.ledger import Ledger
from fedretain.engines.schedule import sample_clients
from fedretain.engines.store import ClientStore, MemoryStore
from fedretain.errors import DivergenceError, FedRetainError

log = logging.getLogger("fedretain")


class Dropped(NamedTuple):
    """A client of the round without a usable update, and why: ``diverged`` (it reported
    NaN/Inf), ``lost`` (it got the downlink, no usable reply came back) or ``unreached`` (no
    message reached it). Local engines drop nobody: the round checks their updates itself."""

    why: str
    kind: str  # diverged | lost | unreached

    @property
    def got_downlink(self) -> bool:
        return self.kind != "unreached"


@dataclass
class Trained:
    """What an engine returns for some of a round's clients, in the round's order.

    ``uplinks``, ``losses``, ``states`` and ``models`` are stacked on a leading axis, one row
    per client of ``clients``. ``states`` is None when the clients keep their own states (an
    engine with its own store: Flower's); ``models`` (``params``/``buffers``) only when the
    round keeps local models. ``dropped``: the clients without a usable update.
    """

    clients: list[int]
    uplinks: Tree | None = None
    losses: Tensor | None = None
    states: Tree | None = None
    models: Tree | None = None
    dropped: dict[int, Dropped] = field(default_factory=dict)

    @classmethod
    def one(cls, cid: int, update: ClientUpdate, keep_model: bool = False) -> Trained:
        """One client's update as a stack of one (views, no copy)."""
        models = local_model(update.final) if keep_model else None
        return cls(
            clients=[cid],
            uplinks=tree_map(lambda v: v.unsqueeze(0), update.uplink),
            losses=update.loss.reshape(1),
            states=tree_map(lambda v: v.unsqueeze(0), update.state),
            models=None if models is None else tree_map(lambda v: v.unsqueeze(0), models),
        )


class UplinkStack:
    """The round's kept uplinks, in the round's order. A single result holding every client
    is used as it is; otherwise rows are copied into one preallocated stack."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.count = 0
        self.buffers: Tree | None = None
        self.whole: Tree | None = None

    def add(self, stacked: Tree, rows: list[int]) -> None:
        n = stacked_rows(stacked)
        if self.count == 0 and len(rows) == n == self.capacity:
            self.whole, self.count = stacked, n
            return
        if self.buffers is None:
            self.buffers = tree_map(lambda v: v.new_empty((self.capacity, *v.shape[1:])), stacked)
        index = None if len(rows) == n else torch.tensor(rows, device=leaves(stacked)[0].device)
        for buf, v in zip(leaves(self.buffers), leaves(stacked), strict=True):
            buf[self.count : self.count + len(rows)].copy_(v if index is None else v[index])
        self.count += len(rows)

    def stacked(self) -> Tree | None:
        if self.whole is not None:
            return self.whole
        if self.buffers is None or self.count == self.capacity:
            return self.buffers
        return tree_map(lambda buf: buf[: self.count], self.buffers)


def stacked_rows(tree: Tree) -> int:
    first = leaves(tree)
    return int(first[0].shape[0]) if first else 0


def stored_state(store: ClientStore, cid: int) -> Tree | None:
    """Client ``cid``'s kept state, or None (asked with ``in`` first: a remote store's
    lookup is a message to the client's node)."""
    if cid in store:
        return store[cid]
    return None


@dataclass
class Work:
    """A round's clients as an engine gets them (the shape of fedjax's ``for_each_client``):
    what the clients share (the algorithm, the task, the round's info and downlink) and, for
    each client of ``info.clients``, its state, data and mini-batch plan (:meth:`inputs`).

    An engine turns the work into :class:`Trained` results covering the clients in their
    order; it reads nothing else of the run and writes nothing back: the round does that
    (:meth:`Rounds.collect`), and tells a remote engine which updates it kept
    (:meth:`RemoteEngine.commit`)."""

    algorithm: Algorithm
    task: Task
    info: RoundInfo
    downlink: Tree
    clients: Clients
    store: ClientStore  # the clients' kept states, read here only
    keep_models: bool = False

    def state(self, cid: int) -> Tree:
        """Client ``cid``'s state to train from (:func:`client_state`)."""
        return client_state(self.algorithm, stored_state(self.store, cid), self.downlink)

    def inputs(self, cid: int) -> tuple[Tree, Batch, list[np.ndarray]]:
        """Client ``cid``'s state, whole data and seeded mini-batch plan for the round."""
        clients = self.clients
        return self.state(cid), clients.data(cid), clients.plan(cid, self.info, self.algorithm)


@dataclass
class OpenRound:
    """A round in progress: the engine's work, and what has been collected so far."""

    work: Work
    stack: UplinkStack
    kept: list[int] = field(default_factory=list)  # the clients whose update the round kept
    losses: list[float] = field(default_factory=list)
    lost: int = 0
    models: dict[int, tuple[Tree, Tree]] = field(default_factory=dict)

    @property
    def info(self) -> RoundInfo:
        return self.work.info

    @property
    def downlink(self) -> Tree:
        return self.work.downlink


class Engine(Protocol):
    """How a round's clients are trained: ``train(work)`` yields :class:`Trained` results
    covering the clients of :class:`Work`, in the round's order. An engine may bring its own
    client store (``store``, Flower's remote one, which the federation's rounds then keep) and
    may lose replies (``remote``: then it is a :class:`RemoteEngine`)."""

    name: str
    store: ClientStore | None
    remote: bool

    def train(self, work: Work) -> Iterator[Trained]: ...

    def close(self) -> None:
        """Release what the engine started (Flower's simulation); the run calls it at its end."""


class RemoteEngine(Engine, Protocol):
    """An engine whose clients keep their own states (``remote`` true: Flower's): after the
    round has collected each result, it tells the engine which of those clients' updates it
    kept (``commit``), whose clients then keep their new state. A local engine is never told
    (the round's store has the states)."""

    def commit(self, work: Work, trained: Trained, kept: list[int]) -> None:
        """Of ``trained``'s clients, the round kept the updates of ``kept``."""


EMPTY_ROUND = {"train_loss": float("nan"), "participants": 0.0, "skipped_clients": 0.0}


class Rounds:
    """Runs rounds of ``algorithm`` over ``clients`` with ``engine``; owns the client-state
    store (``store``, in memory by default; whoever builds the rounds picks it:
    :meth:`~fedretain.recipe.federation.Federation.rounds` takes a remote engine's own) and the
    ledger. ``run_round`` is the whole round; ``open``/``collect``/``close`` are
    its parts, for engines driven from outside (Flower's ``Strategy``)."""

    def __init__(
        self,
        algorithm: Algorithm,
        task: Task,
        clients: Clients,
        engine: Engine,
        store: ClientStore | None = None,
        *,
        on_divergence: str = "stop",
        clients_at: Callable[[int], Clients] | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.task = task
        self.clients = clients
        # the clients of round r (a continual scenario's task parts); by default the same ones
        self.clients_at = clients_at or (lambda rnd: self.clients)
        self.engine = engine
        # a store is a Mapping: an empty one is falsy, so test for None
        self.store = store if store is not None else MemoryStore()
        self.store.device = clients.device
        self.on_divergence = on_divergence  # "stop" raises, "skip" drops the client's update
        self.ledger = Ledger()
        self.keep_local_models = False  # diagnostics: keep the round's trained local models
        self.local_models: dict[int, tuple[Tree, Tree]] = {}

    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def device(self) -> torch.device:
        return self.clients.device

    def client_state(self, cid: int, downlink: Tree) -> Tree:
        """The client's state to train from (:func:`client_state`)."""
        return client_state(self.algorithm, stored_state(self.store, cid), downlink)

    def run_round(
        self,
        server_state: Tree,
        rnd: int,
        lr: float,
        per_round: int = 0,
        clients: np.ndarray | None = None,
    ) -> tuple[Tree, dict[str, float]]:
        """One round with ``clients`` (default: ``per_round`` drawn uniformly)."""
        opened = self.open(server_state, rnd, lr, per_round, clients)
        if opened is None:  # nobody reachable: the global model stays
            return server_state, self.empty_metrics()
        for trained in self.engine.train(opened.work):
            kept = self.collect(opened, trained)
            if self.engine.remote:
                cast(RemoteEngine, self.engine).commit(opened.work, trained, kept)
        return self.close(server_state, opened)

    def empty_metrics(self) -> dict[str, float]:
        return {**EMPTY_ROUND, "lost_replies": 0.0} if self.engine.remote else dict(EMPTY_ROUND)

    def open(
        self,
        server_state: Tree,
        rnd: int,
        lr: float,
        per_round: int = 0,
        clients: np.ndarray | None = None,
    ) -> OpenRound | None:
        """Sample (unless ``clients`` are given) and broadcast; None when nobody takes part."""
        self.local_models = {}
        self.clients = self.clients_at(rnd)
        if clients is None:
            clients = sample_clients(self.num_clients, per_round, self.clients.seed, rnd)
        if len(clients) == 0:
            return None
        info = RoundInfo(
            round=rnd,
            num_clients=self.num_clients,
            clients=tuple(int(c) for c in clients),
            lr=lr,
            seed=self.clients.seed,
        )
        downlink = self.algorithm.broadcast(server_state, info)
        self.check_payload(downlink, self.algorithm.downlink_keys, "downlink")
        work = Work(
            self.algorithm,
            self.task,
            info,
            downlink,
            self.clients,
            self.store,
            self.keep_local_models,
        )
        return OpenRound(work, UplinkStack(len(info.clients)))

    def collect(self, rnd: OpenRound, trained: Trained) -> list[int]:
        """Account for one engine result: ledger, divergence policy, store, stack; returns the
        clients of ``trained`` whose update the round kept."""
        info, algo = rnd.info, self.algorithm
        dropped = trained.dropped
        for cid in [*trained.clients, *(c for c, d in dropped.items() if d.got_downlink)]:
            self.ledger.record(cid, "down", rnd.downlink)
        for cid, d in sorted(dropped.items()):
            if d.kind != "diverged":
                self.ledger.record_lost(cid)
                rnd.lost += 1
                log.warning("round %d: lost the reply of client %d: %s", info.round + 1, cid, d.why)
        for d in dropped.values():
            if d.kind == "diverged" and self.on_divergence != "skip":
                raise DivergenceError(d.why)
        if not trained.clients:
            return []
        assert trained.uplinks is not None and trained.losses is not None
        self.check_payload(trained.uplinks, algo.uplink_keys, "uplink")
        # one finiteness check and one host transfer per result, not per client
        finite = finite_rows({"loss": trained.losses, **trained.uplinks}, len(trained.clients))
        finite, losses = finite.tolist(), trained.losses.tolist()
        rows = []
        for k, cid in enumerate(trained.clients):
            if not finite[k]:
                if self.on_divergence != "skip":
                    raise diverged(info.round, f"the update of client {cid}")
                continue
            self.ledger.record(cid, "up", tree_map(lambda v, k=k: v[k], trained.uplinks))
            if trained.states is not None:
                state = tree_map(lambda v, k=k: v[k], trained.states)
                if not keeps_old_state(state):
                    self.store.put(cid, state)
            if rnd.work.keep_models:
                if trained.models is None:
                    raise FedRetainError(
                        f"{algo.name} keeps no 'params' in its local state, which forgetting "
                        "diagnostics read; run it without diagnostics"
                    )
                model = tree_map(lambda v, k=k: v[k], trained.models)
                rnd.models[cid] = (model["params"], model["buffers"])
            rows.append(k)
            rnd.kept.append(cid)
            rnd.losses.append(losses[k])
        if rows:
            rnd.stack.add(trained.uplinks, rows)
        return [trained.clients[k] for k in rows]

    def close(self, server_state: Tree, rnd: OpenRound) -> tuple[Tree, dict[str, float]]:
        """Aggregate the kept clients' stacked uplinks (in the round's order) into the server."""
        info, kept = rnd.info, rnd.kept
        self.local_models = rnd.models
        metrics = {
            "skipped_clients": float(len(info.clients) - len(kept)),
            "participants": float(len(kept)),
        }
        if self.engine.remote:
            metrics["lost_replies"] = float(rnd.lost)
        stacked = rnd.stack.stacked()
        if stacked is None or not kept:  # every update was dropped: the global model stays
            return server_state, {**metrics, "train_loss": float("nan")}
        if len(kept) < len(info.clients):
            info = replace(info, clients=tuple(kept))
        weights = torch.tensor(  # float32, or float64 in a precision=fp64 run
            [self.clients.size(c) for c in kept],
            dtype=leaves(server_state["x"])[0].dtype,
            device=self.device,
        )
        try:
            server_state, agg = self.algorithm.aggregate(server_state, stacked, weights, info)
        except Exception as e:
            if getattr(self.engine, "debug", False):
                e.add_note(f"engine=debug: round {info.round + 1}, the server's aggregate")
            raise
        if not tree_allfinite(server_state["x"]):
            raise diverged(info.round, "the global model after aggregation")
        metrics["train_loss"] = float(np.mean(rnd.losses))
        metrics.update({k: float(v) for k, v in agg.items()})
        return server_state, metrics

    def check_payload(self, payload: Tree, declared: tuple[str, ...], what: str) -> None:
        if tuple(payload) != declared:
            raise RuntimeError(
                f"{self.algorithm.name} sent {what} keys {tuple(payload)}, declared {declared}"
            )


__all__ = [
    "EMPTY_ROUND",
    "Dropped",
    "Engine",
    "OpenRound",
    "RemoteEngine",
    "Rounds",
    "Trained",
    "UplinkStack",
    "Work",
]
