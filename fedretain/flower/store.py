"""Client states that live on the clients (``context.state``), seen from the server."""

from __future__ import annotations

import logging
from typing import Protocol

from fedretain.core.tree import Tree, tree_bytes, tree_map
from fedretain.engines.store import ClientStore

log = logging.getLogger("fedretain.flower")


class StateSource(Protocol):
    """Where the states are read from: the engine, while its federation is up."""

    @property
    def connected(self) -> bool: ...

    def fetch_states(self, cids: list[int]) -> dict[int, Tree]: ...


class RemoteStore(ClientStore):
    """Client states that live on the clients, in ``context.state``.

    The server knows which clients keep a state (their accepted replies say so:
    :meth:`reported`); reading one asks its node (``query.state``), and :meth:`items` asks all
    of them at once (checkpoints). A state written with :meth:`put` (resume) travels with the
    client's next ``train`` message. States read while the nodes were up stay readable after
    they stopped, and go back to the clients of a restarted simulation (:meth:`hand_back`).
    """

    def __init__(self, source: StateSource) -> None:
        super().__init__()
        self.source = source
        self.holding: set[int] = set()  # clients whose last accepted reply kept a state
        self.pushed: dict[int, Tree] = {}  # states to hand to their clients (resume)
        self.cache: dict[int, Tree] = {}  # states read from the clients since their last round

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

    def reported(self, cid: int, holds: bool) -> None:
        """A client's reply was accepted: it now holds its own state (or none)."""
        self.pushed.pop(cid, None)
        self.cache.pop(cid, None)
        if holds:
            self.holding.add(cid)
        else:
            self.holding.discard(cid)

    def hand_back(self) -> None:
        """New nodes (a restarted simulation): the states read before the previous one stopped
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
        if rest and self.source.connected:
            self.cache.update(self.source.fetch_states(rest))
        out.update({c: self.cache[c] for c in rest if c in self.cache})
        return {c: tree_map(lambda v: v.to(self.device), s) for c, s in out.items()}


__all__ = ["RemoteStore", "StateSource"]
