"""The server half: ``engine=flower``, a round's clients trained over Flower's Message API.

:class:`~fedretain.engines.round.Rounds` opens, collects and closes the round as for every
engine; the Flower engine only maps the round's clients to one
:class:`~fedretain.engines.round.Trained` result:

1. the round's clients are partition ids, drawn by the run with the seeded function every
   engine uses, so the same seed samples the same clients;
2. each payload key of the downlink becomes one named ``ArrayRecord`` (:mod:`.records`), and
   each sampled client gets a ``train`` message at the SuperNode holding its partition, with
   ``fedretain.round`` (:mod:`.protocol`) carrying the run's configuration and the round (the
   ClientApp of :mod:`.client` does the rest); a client no SuperNode holds is *unreached*;
3. replies are collected until all are in or ``engine.reply_timeout`` seconds passed; a reply
   that is an error (the ClientApp raised, the node is gone), malformed, or never comes is
   *lost*; a client that saw NaN/Inf says so (*diverged*);
4. the uplinks are decoded and stacked in the round's order; ``Rounds.collect`` does the
   ledger, the divergence policy and the store, ``Rounds.close`` aggregates.

A lost client is treated exactly like a client that was not sampled: server-side memories
(MIFA's table, GradMA's ``D``) keep its last row, and its own state stays as it was (the
ClientApp commits a new state only once the server has accepted the reply: :meth:`accept`).

With no federation the engine starts Flower's simulation engine (Ray) itself, at its first
round, and stops it in :meth:`close` (the run calls it at its end), with ``engine.client_cpus``
CPUs and ``engine.client_gpus`` GPUs per client (with GPUs the ClientApps train on CUDA, the
server half stays on the run's device: :mod:`.options`); inside
``with connected(federation)`` it uses the given Grid (the ServerApp of :mod:`.app` on real
SuperNodes). :class:`~fedretain.flower.strategy.AlgorithmStrategy` drives the same messages
from Flower's own loop (:meth:`messages`, :meth:`decode`, :meth:`commit`).
"""

from __future__ import annotations

import logging
import time
import uuid
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import tomli_w
import torch
from flwr.app import Message, RecordDict

from fedretain.core.tree import Tree, tree_map, tree_stack
from fedretain.engines.round import Dropped, Trained, Work
from fedretain.flower.federation import (
    NodeMap,
    SuperNodes,
    current_federation,
    error_text,
    exchange,
)
from fedretain.flower.options import check_gpus
from fedretain.flower.protocol import (
    DIVERGED,
    QUERY_STATE,
    REPLY,
    ROUND,
    STATE,
    TRAIN,
    Reply,
    RoundRecord,
    diverged_reason,
)
from fedretain.flower.records import (
    payload_to_records,
    record_to_tree,
    records_to_payload,
    tree_to_record,
)
from fedretain.flower.store import RemoteStore
from fedretain.recipe.config import resolved

log = logging.getLogger("fedretain.flower")
CPU = torch.device("cpu")


def by_client(
    messages: list[Message], clients: list[int], replies: Iterable[Message]
) -> Iterator[tuple[int, Message]]:
    """Each reply with the client its message went to (replies to nothing sent are dropped)."""
    client_of = {m.metadata.message_id: c for m, c in zip(messages, clients, strict=True)}
    for reply in replies:
        cid = client_of.get(reply.metadata.reply_to_message_id)
        if cid is not None:
            yield cid, reply


@dataclass
class Sent:
    """A round's ``train`` messages: the round, what was sent to whom, and the clients no
    message could reach."""

    round: Work
    messages: list[Message] = field(default_factory=list)
    clients: list[int] = field(default_factory=list)  # the client of each message
    unreached: dict[int, str] = field(default_factory=dict)  # client -> why
    holds: dict[int, bool] = field(default_factory=dict)  # replied: whether it keeps a state


class FlowerEngine:
    """Rounds over Flower's Message API (see the module docstring).

    ``config_text`` is the run's resolved configuration (TOML): the clients rebuild data, model
    and algorithm from it. ``federation``: the Grid to use; default: the one of an enclosing
    :func:`~fedretain.flower.federation.connected` block, else a simulation of
    ``num_clients`` nodes (Ray, ``client_cpus`` CPUs and ``client_gpus`` GPUs per client)
    started at the first round and stopped by :meth:`close`. Where the clients train follows
    the configuration (:func:`~fedretain.flower.options.client_device`); a simulation asking for
    GPUs the machine lacks is refused here, when the engine is built, before Ray starts.
    """

    name = "flower"
    remote = True

    def __init__(
        self,
        config_text: str,
        num_clients: int,
        *,
        client_cpus: float = 1.0,
        reply_timeout: float = 300.0,
        federation: SuperNodes | None = None,
        device: torch.device = CPU,
        client_gpus: float = 0.0,
    ) -> None:
        if not client_cpus > 0:
            raise ValueError(f"client_cpus must be > 0, got {client_cpus}")
        if not client_gpus >= 0:
            raise ValueError(f"client_gpus must be >= 0, got {client_gpus}")
        if not reply_timeout > 0:
            raise ValueError(f"reply_timeout must be > 0, got {reply_timeout}")
        self.config_text = config_text
        self.num_clients = num_clients
        self.client_cpus = float(client_cpus)
        self.client_gpus = float(client_gpus)
        self.reply_timeout = float(reply_timeout)
        self.device = device
        self.run_tag = uuid.uuid4().hex[:16]  # names this run's client states on the nodes
        self.store = RemoteStore(self)
        self.store.device = device
        self.accepted: dict[int, int] = {}  # client -> round of its last accepted reply
        self.sent: Sent | None = None  # the messages of the round in flight
        self.federation = federation or current_federation()
        if self.federation is None:  # an own simulation: Ray would wait forever for GPUs
            check_gpus(self.client_gpus)
        self.simulation: Any = None  # a FlowerSimulation this engine started
        self.nodes: NodeMap | None = None
        self.startup_seconds = 0.0  # simulation start and node discovery
        if self.federation is not None:
            self.connect()

    # ---- the federation -------------------------------------------------------------------

    @property
    def connected(self) -> bool:
        return self.federation is not None and self.nodes is not None

    def connect(self) -> SuperNodes:
        """The federation, started (own simulation) and mapped (partition -> node) if needed."""
        if self.federation is not None and self.nodes is not None:
            return self.federation
        start = time.perf_counter()
        if self.federation is None:
            from fedretain.flower.simulation import FlowerSimulation

            self.simulation = FlowerSimulation(
                self.num_clients, client_cpus=self.client_cpus, client_gpus=self.client_gpus
            )
            self._finalizer = weakref.finalize(self, self.simulation.close)
            self.federation = self.simulation.start()
            self.store.hand_back()  # a new simulation's nodes start empty
        nodes = NodeMap(
            self.federation.grid, self.num_clients, self.reply_timeout, self.federation.check
        )
        try:
            nodes.wait_for_all(self.reply_timeout)
        except BaseException:
            self.close()  # a simulation this engine started does not outlive the failure
            raise
        self.nodes = nodes
        self.startup_seconds = time.perf_counter() - start
        return self.federation

    def attach(self, federation: SuperNodes) -> None:
        """Use ``federation`` from now on (a Strategy's Grid), closing an own simulation."""
        if self.federation is None or self.federation.grid is not federation.grid:
            self.close()
            self.federation, self.nodes = federation, None
        self.connect()

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

    def train(self, work: Work) -> Iterator[Trained]:
        """One ``train`` message per reachable client, the replies within the deadline, one
        result for the whole round."""
        federation = self.connect()
        sent = self.messages(work, federation.client_threads)
        replies = exchange(federation.grid, sent.messages, self.reply_timeout, federation.check)
        yield self.decode(sent, replies)

    def messages(self, work: Work, threads: int = 0) -> Sent:
        """One ``train`` message per sampled client a SuperNode holds (nodes refreshed first)."""
        assert self.nodes is not None, "connect() first"
        self.nodes.refresh()
        info = work.info
        records = payload_to_records(work.downlink)  # encoded once, shared by every message
        nodes = self.nodes.nodes(info.clients)
        sent = self.sent = Sent(work)
        for cid in info.clients:
            if cid not in nodes:
                sent.unreached[cid] = "no SuperNode holds its partition"
                continue
            header = RoundRecord(
                self.run_tag,
                self.accepted.get(cid, -1),
                client=cid,
                info=info,
                config=self.config_text,
                threads=threads,
            )
            content = RecordDict({**records, ROUND: header.encode()})
            if cid in self.store.pushed:
                content[STATE] = tree_to_record(self.store.pushed[cid])
            sent.messages.append(
                Message(
                    content,
                    dst_node_id=nodes[cid],
                    message_type=TRAIN,
                    ttl=self.reply_timeout,
                    group_id=str(info.round + 1),
                )
            )
            sent.clients.append(cid)
        return sent

    def decode(self, sent: Sent, replies: Iterable[Message]) -> Trained:
        """The replies as one result: uplinks and losses stacked in the round's order, and the
        lost, unreached and diverged clients (which clients keep a state: ``sent.holds``)."""
        uplink_keys = sent.round.algorithm.uplink_keys
        device = sent.round.clients.device
        lost: dict[int, str] = {}
        answers: dict[int, Message] = {}
        for cid, reply in by_client(sent.messages, sent.clients, replies):
            if reply.has_error():
                lost[cid] = error_text(reply)
            else:
                answers[cid] = reply
        diverged: dict[int, str] = {}
        uplinks, losses, kept = [], [], []
        for cid in sent.clients:  # the round's order
            if cid in lost:
                continue
            if cid not in answers:
                lost[cid] = f"no reply within {self.reply_timeout:g} s"
                continue
            content = answers[cid].content
            if DIVERGED in content.config_records:
                diverged[cid] = diverged_reason(content.config_records[DIVERGED])
                continue
            try:
                uplink = records_to_payload(content, uplink_keys)
                reply = Reply.decode(content.metric_records[REPLY])
            except (KeyError, ValueError) as e:
                lost[cid] = f"malformed reply ({e})"
                continue
            uplinks.append(tree_map(lambda v: v.to(device), uplink))
            losses.append(reply.loss)
            sent.holds[cid] = reply.has_state
            kept.append(cid)
        trained = Trained(
            clients=kept,
            dropped={
                **{c: Dropped(why, "diverged") for c, why in diverged.items()},
                **{c: Dropped(lost[c], "lost") for c in sent.clients if c in lost},
                **{c: Dropped(why, "unreached") for c, why in sent.unreached.items()},
            },
        )
        if kept:
            trained.uplinks = tree_stack(uplinks)
            trained.losses = torch.tensor(losses, dtype=torch.float32, device=device)
        return trained

    def commit(self, work: Work, trained: Trained, kept: list[int]) -> None:
        """After ``Rounds.collect``: the clients whose update the round kept hold their new
        state (or none) and commit it at their next message."""
        sent = self.sent
        assert sent is not None and sent.round is work, "commit() follows this round's messages"
        for cid in kept:
            self.accepted[cid] = work.info.round
            self.store.reported(cid, sent.holds[cid])
        log.info(
            "round %d: %d of %d clients kept, %d replies lost",
            work.info.round + 1,
            len(kept),
            len(work.info.clients),
            sum(d.kind != "diverged" for d in trained.dropped.values()),
        )

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
            header = RoundRecord(self.run_tag, self.accepted.get(cid, -1))
            messages.append(
                Message(
                    RecordDict({ROUND: header.encode()}),
                    dst_node_id=nodes[cid],
                    message_type=QUERY_STATE,
                    ttl=self.reply_timeout,
                )
            )
            clients.append(cid)
        replies = exchange(federation.grid, messages, self.reply_timeout, federation.check)
        out: dict[int, Tree] = {}
        for cid, reply in by_client(messages, clients, replies):
            if reply.has_error():
                log.warning("could not read the state of client %d: %s", cid, error_text(reply))
                continue
            state = record_to_tree(reply.content.array_records[STATE])
            if state:
                out[cid] = state
        return out


def flower(
    fed: Any, client_cpus: float = 1.0, reply_timeout: float = 300.0, client_gpus: float = 0.0
) -> FlowerEngine:
    """``engine=flower`` for the federation ``fed`` (a :class:`~fedretain.recipe.Federation`):
    its configuration goes to the clients."""
    return FlowerEngine(
        tomli_w.dumps(resolved(fed.config)),
        len(fed.clients),
        client_cpus=client_cpus,
        reply_timeout=reply_timeout,
        device=fed.device,
        client_gpus=client_gpus,
    )


__all__ = ["FlowerEngine", "Sent", "flower"]
