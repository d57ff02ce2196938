"""The wire protocol between the server half (:mod:`.engine`, :mod:`.strategy`) and the
ClientApp (:mod:`.client`), on one page.

Messages (``message_type``) and their records:

- ``train``: the downlink (one ``ArrayRecord`` per payload key, :mod:`.records`) and
  ``fedretain.round`` (a ``ConfigRecord``: the run's tag and resolved configuration, the round,
  its learning rate, sampled clients and seed, the torch threads, the client the message is
  meant for and the round of its last accepted reply); with ``fedretain.state`` (an
  ``ArrayRecord``) when the server hands the client its state (resume). Reply: the uplink and
  ``fedretain.reply`` (a ``MetricRecord``: client, loss, samples, whether it keeps state), or
  ``fedretain.diverged`` (a ``ConfigRecord``: client, reason) when NaN/Inf appeared;
- ``query.partition``: reply ``fedretain.node`` with the node's partition (discovery);
- ``query.state``: ``fedretain.round`` with only the run's tag and the accepted round; reply
  the client's committed state as ``fedretain.state`` and ``fedretain.reply`` (client,
  has_state).

A node finds its data by its node config (``partition-id``, ``num-partitions``, optionally
``data-dir``). A client keeps its state in ``context.state`` in two parts, committed and next
(see :mod:`.client`); the round of the next state and the run tag go in ``fedretain.client``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from flwr.app import ConfigRecord, MetricRecord

from fedretain.core.algorithm import RoundInfo

# record names (the ``fedretain.`` prefix is reserved: payload keys cannot use it)
ROUND = "fedretain.round"  # ConfigRecord in every train and query.state message
REPLY = "fedretain.reply"  # MetricRecord in every train and query.state reply
DIVERGED = "fedretain.diverged"  # ConfigRecord replacing REPLY when the update diverged
STATE = "fedretain.state"  # ArrayRecord: a client state (pushed on resume, fetched for checkpoints)
NODE = "fedretain.node"  # ConfigRecord: a node's partition (discovery)

# message types
TRAIN = "train"
QUERY_PARTITION = "query.partition"
QUERY_STATE = "query.state"

# node-config keys
PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
DATA_DIR = "data-dir"

# keys of a client's context.state
COMMITTED = "fedretain.committed"  # ArrayRecord: the state the server knows of
NEXT = "fedretain.next"  # ArrayRecord: the state after the latest round, not yet accepted
CLIENT = "fedretain.client"  # ConfigRecord: run tag, round of NEXT ("run", "next_round")

RNG_STREAM = 7  # stream tag of the clients' torch seeds (fedretain.engines.schedule uses 1 to 3)


@dataclass(frozen=True)
class RoundRecord:
    """What ``fedretain.round`` tells a client: the run (``run``, a tag naming this run's
    states on the nodes), the round of its last accepted reply (``accepted``, -1: none) and,
    in a ``train`` message, the round itself, the configuration (TOML text), the torch threads
    to use (0: the node's default) and the client the message is meant for."""

    run: str
    accepted: int = -1
    client: int = -1
    info: RoundInfo | None = None
    config: str = ""
    threads: int = 0

    def encode(self) -> ConfigRecord:
        out: dict = {"run": self.run, "accepted": int(self.accepted)}
        if self.info is not None:
            info = self.info
            out.update(
                {
                    "config": self.config,
                    "round": int(info.round),
                    "lr": float(info.lr),
                    "clients": [int(c) for c in info.clients],
                    "num_clients": int(info.num_clients),
                    "seed": int(info.seed),
                    "threads": int(self.threads),
                    "client": int(self.client),
                }
            )
        return ConfigRecord(out)

    @classmethod
    def decode(cls, record: ConfigRecord) -> RoundRecord:
        run, accepted = str(record["run"]), int(record["accepted"])
        if "round" not in record:  # query.state
            return cls(run, accepted)
        info = RoundInfo(
            round=int(record["round"]),
            num_clients=int(record["num_clients"]),
            clients=tuple(int(c) for c in record["clients"]),
            lr=float(record["lr"]),
            seed=int(record["seed"]),
        )
        return cls(
            run,
            accepted,
            client=int(record["client"]),
            info=info,
            config=str(record["config"]),
            threads=int(record["threads"]),
        )


class Reply(NamedTuple):
    """``fedretain.reply``: the client, its mean loss, its samples, whether it keeps state."""

    client: int
    loss: float
    num_samples: int
    has_state: bool

    def encode(self) -> MetricRecord:
        return MetricRecord(
            {
                "client": int(self.client),
                "loss": float(self.loss),
                "num_samples": int(self.num_samples),
                "has_state": int(bool(self.has_state)),
            }
        )

    @classmethod
    def decode(cls, record: MetricRecord) -> Reply:
        return cls(
            int(record["client"]),
            float(record["loss"]),
            int(record["num_samples"]),
            bool(record["has_state"]),
        )


def diverged_record(client: int, reason: str) -> ConfigRecord:
    """``fedretain.diverged``: the client and why its update was not sent."""
    return ConfigRecord({"client": int(client), "reason": reason})


def diverged_reason(record: ConfigRecord) -> str:
    return str(record["reason"])


def state_reply(client: int, has_state: bool) -> MetricRecord:
    """``fedretain.reply`` of a ``query.state``."""
    return MetricRecord({"client": int(client), "has_state": int(bool(has_state))})


def node_record(partition: int, num_partitions: int) -> ConfigRecord:
    """``fedretain.node``: a node's ``partition-id`` and ``num-partitions`` (-1: not given)."""
    return ConfigRecord({PARTITION_ID: int(partition), NUM_PARTITIONS: int(num_partitions)})


def node_partition(record: ConfigRecord) -> tuple[int, int]:
    return int(record[PARTITION_ID]), int(record[NUM_PARTITIONS])


__all__ = [
    "CLIENT",
    "COMMITTED",
    "DATA_DIR",
    "DIVERGED",
    "NEXT",
    "NODE",
    "NUM_PARTITIONS",
    "PARTITION_ID",
    "QUERY_PARTITION",
    "QUERY_STATE",
    "REPLY",
    "RNG_STREAM",
    "ROUND",
    "STATE",
    "TRAIN",
    "Reply",
    "RoundRecord",
    "diverged_reason",
    "diverged_record",
    "node_partition",
    "node_record",
    "state_reply",
]
