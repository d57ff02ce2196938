"""The server half: any registered algorithm driven over Flower's Message API.

One round, in :meth:`FlowerEngine.open_round` and :meth:`FlowerEngine.close_round`:

1. the round's clients are partition ids, drawn by the runner with the seeded function every
   engine uses (:mod:`fedretain.engines.schedule`), so the same seed samples the same clients;
2. ``algorithm.broadcast`` gives the downlink; each payload key becomes one named
   ``ArrayRecord`` (:mod:`fedretain.flower.records`), and each sampled client gets a ``train``
   message at the SuperNode holding its partition, with a ``ConfigRecord`` carrying the run's
   configuration and the round (the ClientApp of :mod:`fedretain.flower.client` does the rest);
3. replies are collected until all are in or ``flower_reply_timeout`` seconds passed; a reply
   that is an error (the ClientApp raised, the node is gone) or never comes is *lost*: the round
   goes on with the others, and the ledger counts it (``lost_replies`` in the summary);
4. the uplinks are decoded, stacked in the order of the round's clients and aggregated by
   :meth:`EngineBase.finish_round` (``algorithm.aggregate``), as the sequential engine does.

A lost client is treated exactly like a client that was not sampled: server-side memories
(MIFA's table, GradMA's ``D``) keep its last row, and its own state stays as it was (the
ClientApp commits a new state only once the server has accepted the reply).

:class:`FlowerEngine` is the runner's ``engine=flower``: with no federation it starts Flower's
simulation engine (Ray) itself; inside ``with connected(federation)`` it uses the given Grid
(the ServerApp of :mod:`fedretain.flower.app` on real SuperNodes). :class:`AlgorithmStrategy`
is the same round as a Flower ``Strategy``, for ServerApps of your own (``strategy.start``).
"""

from __future__ import annotations

import logging
import time
import uuid
import weakref
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import tomli_w
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedretain.core.algorithm import RoundInfo
from fedretain.core.tree import Tree, tree_bytes, tree_map
from fedretain.engines.base import EMPTY_ROUND, DivergenceError, EngineBase, UplinkStack
from fedretain.engines.ledger import Ledger
from fedretain.engines.store import ClientStore
from fedretain.errors import ConfigError
from fedretain.experiments.config import Config, resolved
from fedretain.flower.client import DIVERGED, REPLY, ROUND, STATE
from fedretain.flower.federation import (
    Federation,
    NodeMap,
    current_federation,
    error_text,
    exchange,
)
from fedretain.flower.records import (
    payload_to_records,
    record_to_tree,
    records_to_payload,
    tree_to_record,
)

log = logging.getLogger("fedretain.flower")


class FlowerLedger(Ledger):
    """The ledger, plus the replies that never came back, per client."""

    def __init__(self) -> None:
        super().__init__()
        self.lost: dict[int, int] = defaultdict(int)

    def record_lost(self, client: int) -> None:
        self.lost[client] += 1

    @property
    def lost_replies(self) -> int:
        return sum(self.lost.values())

    def state(self) -> dict:
        return {**super().state(), "lost": {str(c): n for c, n in self.lost.items()}}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.lost.clear()
        self.lost.update({int(c): int(n) for c, n in state.get("lost", {}).items()})

    def summary(self) -> dict:
        return {
            **super().summary(),
            "lost_replies": self.lost_replies,
            "lost_replies_by_client": {str(c): n for c, n in sorted(self.lost.items())},
        }


class RemoteStore(ClientStore):
    """Client states that live on the clients, in ``context.state``.

    The server knows which clients keep a state (their replies say so); reading one asks its
    node (``query.state``), and :meth:`items` asks all of them at once (checkpoints). A state
    written with :meth:`put` (resume) travels with the client's next ``train`` message. After
    the engine's own simulation has closed, the states fetched at its end are what is left.
    """

    def __init__(self, engine: FlowerEngine) -> None:
        super().__init__()
        self.engine = engine
        self.holding: set[int] = set()  # clients whose last accepted reply kept a state
        self.pushed: dict[int, Tree] = {}  # states to hand to their clients (resume)
        self.cache: dict[int, Tree] = {}  # states fetched before the simulation closed

    def __contains__(self, cid: object) -> bool:
        return cid in self.holding or cid in self.pushed

    def __len__(self) -> int:
        return len(self.holding | set(self.pushed))

    def ids(self) -> list[int]:
        return sorted(self.holding | set(self.pushed))

    def __getitem__(self, cid: int) -> Tree:
        states = self.fetch([cid])
        if cid not in states:
            raise KeyError(cid)
        return states[cid]

    def items(self) -> list[tuple[int, Tree]]:  # type: ignore[override]
        return sorted(self.fetch(self.ids()).items())

    def values(self) -> list[Tree]:  # type: ignore[override]
        return [state for _, state in self.items()]

    def put(self, cid: int, state: Tree) -> None:
        self.pushed[cid] = tree_map(lambda v: v.detach().to("cpu").clone(), state)

    def nbytes(self) -> int:
        """Bytes of the states (read from the clients)."""
        return sum(tree_bytes(state) for state in self.values())

    def reported(self, cid: int, keeps_state: bool) -> None:
        """A client's reply was accepted: it now holds its own state (or none)."""
        self.pushed.pop(cid, None)
        self.cache.pop(cid, None)
        if keeps_state:
            self.holding.add(cid)
        else:
            self.holding.discard(cid)

    def hand_back(self) -> None:
        """New nodes (a restarted simulation): the states kept at the end of the previous one
        go back with the clients' next messages; states never read back are gone."""
        gone = sorted(self.holding - set(self.cache) - set(self.pushed))
        if gone:
            log.warning("the states of clients %s were not kept when the nodes stopped", gone)
        self.holding -= set(gone)
        self.pushed.update(self.cache)
        self.cache = {}

    def fetch(self, cids: list[int]) -> dict[int, Tree]:
        wanted = [c for c in cids if c in self]
        out = {c: self.pushed[c] for c in wanted if c in self.pushed}
        rest = [c for c in wanted if c not in out]
        if rest and self.engine.nodes is not None:
            self.cache.update(self.engine.fetch_states(rest))
        out.update({c: self.cache[c] for c in rest if c in self.cache})
        return {c: tree_map(lambda v: v.to(self.device), s) for c, s in out.items()}


@dataclass
class PendingRound:
    """A round whose messages are out: what was sent, to whom, and who could not be reached."""

    info: RoundInfo
    messages: list[Message]
    clients: list[int]  # the client of each message
    lost: dict[int, str] = field(default_factory=dict)  # client -> why it has no reply


class FlowerEngine(EngineBase):
    """Rounds over Flower's Message API (see the module docstring).

    ``config`` is the run's configuration (its resolved TOML goes to the clients, which rebuild
    data, model and algorithm from it). ``federation``: the Grid to use; default: the one of an
    enclosing :func:`connected` block, else a simulation of ``clients`` nodes started at the
    first round (Ray, ``flower_client_cpus`` CPUs per client) and closed after the
    configuration's last round (a later round starts a new one).
    """

    name = "flower"

    def __init__(
        self, *args: Any, config: Config, federation: Federation | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        check_options(config)
        self.config_text = tomli_w.dumps(resolved(config))
        self.rounds = config.rounds
        self.keep_states_at_end = config.checkpoint_every > 0
        self.reply_timeout = float(config.flower_reply_timeout)
        self.client_cpus = float(config.flower_client_cpus)
        self.run_tag = uuid.uuid4().hex[:16]  # names this run's client states on the nodes
        self.ledger = FlowerLedger()
        self.store = RemoteStore(self)
        self.store.device = self.device
        self.accepted: dict[int, int] = {}  # client -> round of its last accepted reply
        self.federation = federation or current_federation()
        self.simulation: Any = None  # a FlowerSimulation this engine started
        self.nodes: NodeMap | None = None
        self.startup_seconds = 0.0  # simulation start and node discovery
        self.close_after_last_round = True  # an own simulation ends with the run
        if self.federation is not None:
            self.connect()

    # ---- the federation -------------------------------------------------------------------

    def connect(self) -> Federation:
        """The federation, started (own simulation) and mapped (partition -> node) if needed."""
        if self.federation is not None and self.nodes is not None:
            return self.federation
        start = time.perf_counter()
        if self.federation is None:
            from fedretain.flower.simulation import FlowerSimulation

            self.simulation = FlowerSimulation(self.num_clients, client_cpus=self.client_cpus)
            self._finalizer = weakref.finalize(self, self.simulation.close)
            self.federation = self.simulation.start()
            self.store.hand_back()  # a new simulation's nodes start empty
        nodes = NodeMap(self.federation.grid, self.num_clients, self.reply_timeout)
        try:
            nodes.wait_for_all(self.reply_timeout)
        except BaseException:
            self.close()  # a simulation this engine started does not outlive the failure
            raise
        self.nodes = nodes
        self.startup_seconds = time.perf_counter() - start
        return self.federation

    def close(self) -> None:
        """Stop the simulation this engine started (nothing when the federation was given)."""
        if self.simulation is not None:
            self.simulation.close()
            self.simulation = self.federation = self.nodes = None

    def __enter__(self) -> FlowerEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- one round ------------------------------------------------------------------------

    def run_round(
        self,
        server_state: Tree,
        rnd: int,
        lr: float,
        per_round: int = 0,
        clients: np.ndarray | None = None,
    ) -> tuple[Tree, dict[str, float]]:
        """One round with ``clients`` (default: ``per_round`` drawn uniformly)."""
        info = self.start_round(rnd, lr, per_round, clients)
        if info is None:  # nobody reachable: the global model stays
            result = server_state, {**EMPTY_ROUND, "lost_replies": 0.0}
        else:
            federation = self.connect()
            assert self.nodes is not None
            self.nodes.refresh()
            pending = self.open_round(server_state, info, federation.client_threads)
            replies = exchange(federation.grid, pending.messages, self.reply_timeout)
            result = self.close_round(server_state, pending, replies)
        if self.simulation is not None and self.close_after_last_round and rnd + 1 >= self.rounds:
            self.finish()
        return result

    def open_round(self, server_state: Tree, info: RoundInfo, threads: int = 0) -> PendingRound:
        """Broadcast and build one ``train`` message per reachable sampled client."""
        assert self.nodes is not None, "connect() first"
        algo = self.algorithm
        downlink = algo.broadcast(server_state, info)
        self.check_payload(downlink, algo.downlink_keys, "downlink")
        records = payload_to_records(downlink)  # encoded once, shared by every message
        common = {
            "run": self.run_tag,
            "config": self.config_text,
            "round": info.round,
            "lr": float(info.lr),
            "clients": list(info.clients),
            "num_clients": info.num_clients,
            "seed": info.seed,
            "threads": int(threads),
        }
        nodes = self.nodes.nodes(info.clients)
        pending = PendingRound(info, [], [])
        for cid in info.clients:
            if cid not in nodes:
                pending.lost[cid] = "no SuperNode holds its partition"
                continue
            meta = ConfigRecord({**common, "client": cid, "accepted": self.accepted.get(cid, -1)})
            content = RecordDict({**records, ROUND: meta})
            if cid in self.store.pushed:
                content[STATE] = tree_to_record(self.store.pushed[cid])
            message = Message(
                content,
                dst_node_id=nodes[cid],
                message_type="train",
                ttl=self.reply_timeout,
                group_id=str(info.round + 1),
            )
            pending.messages.append(message)
            pending.clients.append(cid)
            self.ledger.record(cid, "down", downlink)
        return pending

    def close_round(
        self, server_state: Tree, pending: PendingRound, replies: Iterable[Message]
    ) -> tuple[Tree, dict[str, float]]:
        """Decode the replies, count the lost ones, aggregate the rest (in the round's order)."""
        info, algo = pending.info, self.algorithm
        client_of = {m.metadata.message_id: c for m, c in zip(pending.messages, pending.clients)}
        lost = dict(pending.lost)
        answers: dict[int, Message] = {}
        for reply in replies:
            cid = client_of.get(reply.metadata.reply_to_message_id)
            if cid is None:
                continue
            if reply.has_error():
                lost[cid] = error_text(reply)
            else:
                answers[cid] = reply
        for cid in pending.clients:
            if cid not in answers and cid not in lost:
                lost[cid] = f"no reply within {self.reply_timeout:g} s"
        stack = UplinkStack(len(info.clients))
        losses, kept = [], []
        for cid in info.clients:
            if cid in lost:
                continue
            content = answers[cid].content
            if DIVERGED in content.config_records:
                if self.on_divergence != "skip":
                    raise DivergenceError(str(content.config_records[DIVERGED]["reason"]))
                continue
            try:
                uplink = records_to_payload(content, algo.uplink_keys)
                meta = content.metric_records[REPLY]
            except (KeyError, ValueError) as e:
                lost[cid] = f"malformed reply ({e})"
                continue
            uplink = tree_map(lambda v: v.to(self.device), uplink)
            loss = float(meta["loss"])
            where = f"the update of client {cid}"
            try:
                self.check_finite({"loss": torch.tensor(loss), **uplink}, info.round, where)
            except DivergenceError:
                if self.on_divergence != "skip":
                    raise
                continue
            self.ledger.record(cid, "up", uplink)
            self.accepted[cid] = info.round
            self.store.reported(cid, bool(meta["has_state"]))
            stack.add(uplink)
            losses.append(loss)
            kept.append(cid)
        for cid, why in sorted(lost.items()):
            self.ledger.record_lost(cid)
            log.warning("round %d: lost the reply of client %d: %s", info.round + 1, cid, why)
        server_state, metrics = self.finish_round(server_state, info, stack.stacked(), kept, losses)
        metrics["lost_replies"] = float(len(lost))
        log.info(
            "round %d: %d of %d clients aggregated, %d replies lost, train loss %.4f",
            info.round + 1,
            len(kept),
            len(info.clients),
            len(lost),
            metrics["train_loss"],
        )
        return server_state, metrics

    # ---- client states --------------------------------------------------------------------

    def fetch_states(self, cids: list[int]) -> dict[int, Tree]:
        """Ask the clients for their committed states (``query.state``); nothing when the
        federation is closed."""
        federation = self.federation
        if federation is None or self.nodes is None:
            return {}
        nodes = self.nodes.nodes(cids)
        messages, clients = [], []
        for cid in cids:
            if cid not in nodes:
                log.warning("the state of client %d is out of reach: its node is gone", cid)
                continue
            meta = ConfigRecord({"run": self.run_tag, "accepted": self.accepted.get(cid, -1)})
            messages.append(
                Message(
                    RecordDict({ROUND: meta}),
                    dst_node_id=nodes[cid],
                    message_type="query.state",
                    ttl=self.reply_timeout,
                )
            )
            clients.append(cid)
        replies = exchange(federation.grid, messages, self.reply_timeout)
        client_of = {m.metadata.message_id: c for m, c in zip(messages, clients)}
        out: dict[int, Tree] = {}
        for reply in replies:
            cid = client_of.get(reply.metadata.reply_to_message_id)
            if cid is None:
                continue
            if reply.has_error():
                log.warning("could not read the state of client %d: %s", cid, error_text(reply))
                continue
            state = record_to_tree(reply.content.array_records[STATE])
            if state:
                out[cid] = state
        return out

    def finish(self) -> None:
        """End of the run: keep the clients' states (for the last checkpoint), then close."""
        if self.keep_states_at_end and len(self.store):
            self.store.fetch(self.store.ids())
        self.close()


def check_options(config: Config) -> None:
    """Refuse settings ``engine=flower`` cannot honour, with one line each."""
    if config.device != "cpu":
        raise ConfigError(
            f"engine=flower trains clients on the CPU; device={config.device} is not supported "
            "(use engine=sequential or engine=vmap on a GPU)"
        )
    if getattr(config, "client_store", "memory") != "memory":
        raise ConfigError(
            "engine=flower keeps client states on the clients (context.state); "
            f"client_store={config.client_store} is not supported, use client_store=memory"
        )
    if getattr(config, "client_store_dtype", "float32") != "float32":
        raise ConfigError(
            "engine=flower keeps client states on the clients in their own dtype; "
            f"client_store_dtype={config.client_store_dtype} is not supported"
        )
    if getattr(config, "diagnostics", []):
        raise ConfigError(
            "engine=flower cannot run diagnostics: the clients' trained models stay on the "
            "clients; use engine=sequential or engine=vmap for them"
        )
    if not config.flower_client_cpus > 0:
        raise ConfigError(f"flower_client_cpus must be > 0, got {config.flower_client_cpus}")
    if not config.flower_reply_timeout > 0:
        raise ConfigError(f"flower_reply_timeout must be > 0, got {config.flower_reply_timeout}")


class AlgorithmStrategy(Strategy):
    """fedretain's rounds as a Flower ``Strategy``, for a ServerApp of your own.

    ``strategy.start(grid, strategy.initial_arrays(), num_rounds=...)`` runs the rounds with
    Flower's loop; clients are sampled with the run's seeded participation model and trained
    with the configuration's learning-rate schedule. The server state (the model and the
    algorithm's server variables) lives in :attr:`server_state`; the ``arrays`` Flower passes
    around are the global model ``x`` as a record, reported, never read back. Clients are the
    ClientApp of :mod:`fedretain.flower.client` (the same as for ``engine=flower``).

    Build one with :meth:`from_config`, or from parts the runner's ``prepare`` made.
    """

    def __init__(
        self,
        engine: FlowerEngine,
        server_state: Tree,
        sample: Callable[[int], np.ndarray],
        lr_at: Callable[[int], float],
    ) -> None:
        self.engine = engine
        self.server_state = server_state
        self.sample = sample
        self.lr_at = lr_at
        self.pending: PendingRound | None = None
        self.history: list[dict[str, float]] = []

    @classmethod
    def from_config(cls, config: Config) -> AlgorithmStrategy:
        """Data, model and algorithm of ``config`` (``engine`` is set to ``flower``); the
        federation is the Grid ``start`` receives."""
        from fedretain.experiments.runner import prepare

        built = prepare(replace(config, engine="flower"))
        engine, task = built["engine"], built["task"]
        state = built["algorithm"].server_init(*task.init())
        return cls(engine, state, built["participation"].clients, config.lr_at)

    def initial_arrays(self) -> ArrayRecord:
        """The initial global model as a record (what ``start`` wants as ``initial_arrays``)."""
        return tree_to_record(self.server_state["x"])

    def _attach(self, grid: Grid) -> None:
        engine = self.engine
        if engine.federation is None or engine.federation.grid is not grid:
            engine.close()
            engine.federation, engine.nodes = Federation(grid), None
        engine.connect()

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._attach(grid)
        rnd = server_round - 1
        info = self.engine.start_round(rnd, self.lr_at(rnd), 0, self.sample(rnd))
        if info is None:
            self.pending = None
            return []
        assert self.engine.nodes is not None
        self.engine.nodes.refresh()
        threads = self.engine.federation.client_threads if self.engine.federation else 0
        self.pending = self.engine.open_round(self.server_state, info, threads)
        return self.pending.messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        if self.pending is None:
            metrics = {**EMPTY_ROUND, "lost_replies": 0.0}
        else:
            self.server_state, metrics = self.engine.close_round(
                self.server_state, self.pending, list(replies)
            )
        self.pending = None
        self.history.append(metrics)
        return tree_to_record(self.server_state["x"]), MetricRecord(dict(metrics))

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []  # fedretain evaluates the global model on the server

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> None:
        return None

    def summary(self) -> None:
        algo = self.engine.algorithm
        log.info(
            "%s over %d partitions: downlink %s, uplink %s",
            algo.name,
            self.engine.num_clients,
            ", ".join(algo.downlink_keys),
            ", ".join(algo.uplink_keys),
        )


__all__ = [
    "AlgorithmStrategy",
    "FlowerEngine",
    "FlowerLedger",
    "PendingRound",
    "RemoteStore",
    "check_options",
]
