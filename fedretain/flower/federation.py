"""Where the ClientApps are: a Flower ``Grid``, which node holds which partition, and
message exchange with a deadline.

:class:`SuperNodes` wraps the ``Grid`` a ServerApp receives (from Flower's simulation engine
or from a SuperLink), through which it reaches the nodes running the ClientApps. Inside
``with connected(nodes):`` a run's ``engine=flower`` uses them instead of starting a simulation
of its own: that is how the ServerApp of
:mod:`fedretain.flower.app` runs an experiment on real SuperNodes, and how tests share one
simulation between runs.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field

from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

from fedretain.errors import FedRetainError
from fedretain.flower.protocol import NODE, QUERY_PARTITION, node_partition

log = logging.getLogger("fedretain.flower")

# errors that mean the node is gone (no reply will come), not that the ClientApp failed
GONE = (
    ErrorCode.NODE_UNAVAILABLE,
    ErrorCode.MESSAGE_UNAVAILABLE,
    ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
)


class FederationError(FedRetainError):
    """The SuperNodes do not match the run: partitions missing, duplicated or out of range."""


def always_up() -> None:
    """The :attr:`SuperNodes.check` of nodes that nothing stops from outside (deployed ones)."""


@dataclass
class SuperNodes:
    """The nodes running the ClientApps: a Grid to reach them, the torch threads each
    ClientApp should use (0: the node's default), and ``check``, which raises once the nodes
    can no longer answer (a simulation whose runtime stopped), so that no one waits out a
    reply deadline for them."""

    grid: Grid
    client_threads: int = 0
    check: Callable[[], None] = field(default=always_up, repr=False)


_CURRENT: ContextVar[SuperNodes | None] = ContextVar("fedretain_flower_federation", default=None)


@contextmanager
def connected(federation: SuperNodes) -> Iterator[SuperNodes]:
    """Within this block, ``engine=flower`` runs on ``federation``'s nodes."""
    token = _CURRENT.set(federation)
    try:
        yield federation
    finally:
        _CURRENT.reset(token)


def current_federation() -> SuperNodes | None:
    """The nodes of the enclosing :func:`connected` block, if any."""
    return _CURRENT.get()


def exchange(
    grid: Grid,
    messages: list[Message],
    timeout: float,
    check: Callable[[], None] = always_up,
) -> list[Message]:
    """Push ``messages`` and collect their replies until all came back or ``timeout`` seconds
    passed. Messages get their ids on push (``msg.metadata.message_id``); replies that never
    came are simply absent. ``check`` (:attr:`SuperNodes.check`) is called while waiting."""
    if not messages:
        return []
    check()
    pending = {mid for mid in grid.push_messages(messages) if mid}
    deadline = time.monotonic() + timeout
    replies: list[Message] = []
    wait = 0.02
    while pending:
        got = list(grid.pull_messages(pending))
        for reply in got:
            if reply.metadata.reply_to_message_id in pending:
                pending.discard(reply.metadata.reply_to_message_id)
                replies.append(reply)
        left = deadline - time.monotonic()
        if not pending or left <= 0:
            break
        wait = 0.02 if got else min(wait * 1.5, 0.1)  # a reply waits at most 0.1 s here
        time.sleep(min(wait, left))
        check()
    return replies


@contextmanager
def quick_object_pulls(first: float = 0.02, longest: float = 0.5) -> Iterator[None]:
    """Within this block, a ServerApp on a SuperLink (Flower's ``HttpGrid``) retries a reply's
    objects not there yet after ``first`` seconds (doubling up to ``longest``), not after 1 s.

    The SuperLink lists a reply as soon as the SuperNode has pushed the message, before its
    objects (``flwr/superlink/grid/http_grid.py``, ``pull_messages``), and Flower's
    ``pull_objects`` waits ``PULL_INITIAL_BACKOFF`` = 1 s (``flwr/supercore/constant.py``)
    before asking again: up to a second per round lost to a race when replies come quickly.
    """
    try:
        import flwr.superlink.grid.http_grid as http_grid
    except ImportError:  # another Flower: nothing to shorten
        yield
        return
    original = getattr(http_grid, "pull_objects", None)
    if original is None:
        yield
        return
    http_grid.pull_objects = functools.partial(  # type: ignore[attr-defined]
        original, initial_backoff=first, backoff_cap=longest
    )
    try:
        yield
    finally:
        http_grid.pull_objects = original  # type: ignore[attr-defined]


def error_text(reply: Message) -> str:
    """A reply's error as one line."""
    reason = " ".join(str(reply.error.reason).split())
    return reason[:300] or f"error code {reply.error.code}"


class NodeMap:
    """Which SuperNode holds which partition (client id), found by asking each new node."""

    def __init__(
        self,
        grid: Grid,
        num_clients: int,
        timeout: float,
        check: Callable[[], None] = always_up,
    ) -> None:
        self.grid = grid
        self.check = check
        self.num_clients = num_clients
        self.timeout = timeout
        self.node_of: dict[int, int] = {}  # partition -> node id
        self.asked: set[int] = set()  # node ids already asked

    def refresh(self, strict: bool = False) -> None:
        """Forget nodes that left; ask nodes that joined for their partition. A node that
        cannot serve the run is an error when ``strict`` (start-up), else a warning."""
        online = set(self.grid.get_node_ids())
        self.node_of = {p: n for p, n in self.node_of.items() if n in online}
        self.asked &= online
        new = sorted(online - self.asked)
        if not new:
            return
        messages = [
            Message(
                RecordDict({NODE: ConfigRecord()}),
                dst_node_id=n,
                message_type=QUERY_PARTITION,
                ttl=self.timeout,
            )
            for n in new
        ]
        replies = exchange(self.grid, messages, self.timeout, self.check)
        dst = {m.metadata.message_id: m.metadata.dst_node_id for m in messages}
        self.asked |= set(new)  # asked once: a node that cannot answer is not waited for again
        answered = set()
        for reply in replies:
            node = dst.get(reply.metadata.reply_to_message_id, reply.metadata.src_node_id)
            answered.add(node)
            if reply.has_error():
                if reply.error.code in GONE:
                    log.warning("SuperNode %s left: %s", node, error_text(reply))
                    continue
                self._refuse(f"SuperNode {node} cannot serve: {error_text(reply)}", strict)
                continue
            part, num = node_partition(reply.content.config_records[NODE])
            if not 0 <= part < self.num_clients or num not in (-1, self.num_clients):
                self._refuse(
                    f"SuperNode {node} has partition-id={part} num-partitions={num}, but the run "
                    f"has clients={self.num_clients}: give the SuperNodes partition-id "
                    f"0..{self.num_clients - 1} and num-partitions={self.num_clients}",
                    strict,
                )
                continue
            if part in self.node_of and self.node_of[part] != node:
                log.warning(
                    "SuperNodes %s and %s both hold partition %s; using %s",
                    self.node_of[part],
                    node,
                    part,
                    node,
                )
            self.node_of[part] = node
        for node in sorted(set(new) - answered):
            log.warning("SuperNode %s did not say its partition within %.0f s", node, self.timeout)

    @staticmethod
    def _refuse(message: str, strict: bool) -> None:
        if strict:
            raise FederationError(message)
        log.warning("%s; the node is left out", message)

    def wait_for_all(self, timeout: float) -> None:
        """Refresh until every partition has a node; raise after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self.check()
            self.refresh(strict=True)
            missing = [p for p in range(self.num_clients) if p not in self.node_of]
            if not missing:
                return
            if time.monotonic() > deadline:
                shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
                raise FederationError(
                    f"no SuperNode holds partition(s) {shown} after {timeout:.0f} s "
                    f"({len(self.node_of)} of {self.num_clients} connected); start one SuperNode "
                    "per partition with --node-config 'partition-id=<k> "
                    f"num-partitions={self.num_clients}'"
                )
            time.sleep(0.5)

    def nodes(self, clients: Iterable[int]) -> dict[int, int]:
        """The node of each of ``clients`` that has one."""
        return {c: self.node_of[c] for c in clients if c in self.node_of}


__all__ = [
    "FederationError",
    "NodeMap",
    "SuperNodes",
    "connected",
    "current_federation",
    "error_text",
    "exchange",
    "quick_object_pulls",
]
