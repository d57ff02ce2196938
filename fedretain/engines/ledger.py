"""The ledger: bytes that cross the network, per client, per direction, per payload key.

Engines record every downlink and uplink here, so an algorithm's communication cost (SCAFFOLD's
2x, FedCurv's extra vectors) is counted from what it actually sends, never declared by hand.
"""

from __future__ import annotations

from collections import defaultdict

from fedretain.core.tree import Tree, tree_bytes


class Ledger:
    def __init__(self) -> None:
        self.by_key: dict[str, dict[str, int]] = {"down": defaultdict(int), "up": defaultdict(int)}
        self.per_client: dict[int, dict[str, int]] = defaultdict(lambda: {"down": 0, "up": 0})
        self.lost: dict[int, int] = defaultdict(int)  # replies that never came back (Flower)

    def record(self, client: int, direction: str, payload: Tree) -> int:
        """Count one payload sent to (``down``) or from (``up``) a client; returns its bytes."""
        if direction not in ("down", "up"):
            raise ValueError(f"direction must be 'down' or 'up', got {direction!r}")
        total = 0
        for key, value in payload.items():
            n = tree_bytes(value) if isinstance(value, dict) else tree_bytes({key: value})
            self.by_key[direction][key] += n
            total += n
        self.per_client[client][direction] += total
        return total

    def record_lost(self, client: int) -> None:
        self.lost[client] += 1

    @property
    def lost_replies(self) -> int:
        return sum(self.lost.values())

    @property
    def bytes_down(self) -> int:
        return sum(self.by_key["down"].values())

    @property
    def bytes_up(self) -> int:
        return sum(self.by_key["up"].values())

    def state(self) -> dict:
        """Everything counted so far, JSON-ready (for checkpoints)."""
        return {
            "by_key": {d: dict(v) for d, v in self.by_key.items()},
            "per_client": {str(c): dict(v) for c, v in self.per_client.items()},
            "lost": {str(c): n for c, n in self.lost.items()},
        }

    def load_state(self, state: dict) -> None:
        for d in ("down", "up"):
            self.by_key[d].clear()
            self.by_key[d].update(state["by_key"][d])
        self.per_client.clear()
        for c, v in state["per_client"].items():
            self.per_client[int(c)] = dict(v)
        self.lost.clear()
        self.lost.update({int(c): int(n) for c, n in state.get("lost", {}).items()})

    def summary(self) -> dict:
        return {
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "bytes_up_by_key": dict(self.by_key["up"]),
            "bytes_down_by_key": dict(self.by_key["down"]),
            "lost_replies": self.lost_replies,
            "lost_replies_by_client": {str(c): n for c, n in sorted(self.lost.items())},
        }
