"""The client half: one Flower ``ClientApp`` that runs any registered algorithm.

Each ``train`` message carries the downlink (one ``ArrayRecord`` per payload key) and a
``ConfigRecord`` named ``fedretain.round`` with the run's resolved configuration (TOML), the
round (index, learning rate, sampled clients, seed) and the client it is meant for. The
ClientApp finds its data by its node's ``partition-id`` (node config; the simulation engine
sets it, a SuperNode gets it from ``--node-config "partition-id=0 num-partitions=3"``; an
optional ``data-dir`` overrides the config's ``data_dir`` on that node), rebuilds the data,
the partition, the model and the algorithm from the configuration exactly as the runner does,
and trains with the sequential engine's :meth:`train_client` (same seeded mini-batches, same
code), so a client's update is the one the sequential engine computes.

Per-client state (SCAFFOLD's ``c_i``, GradMA-W's ``x_prev``) lives in ``context.state``, in
two parts: the committed state and the state after the client's latest round. The next message
says which round the server accepted; the new state is committed only if the server accepted
that round's reply, otherwise it is dropped. A reply lost on the way therefore leaves the
client exactly where the server thinks it is. Messages:

- ``train``: local training; reply: the uplink, plus ``fedretain.reply`` (client, loss,
  whether the client keeps state), or ``fedretain.diverged`` (the reason) when NaN/Inf appeared;
- ``query.partition``: reply ``fedretain.node`` with the node's ``partition-id`` (discovery);
- ``query.state``: reply the client's committed state as ``fedretain.state`` (checkpoints).

A ``fedretain.state`` record in a ``train`` message replaces the client's state (resume).
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

if TYPE_CHECKING:
    from fedretain.core.tree import Tree
    from fedretain.experiments.config import Config

# record names (the ``fedretain.`` prefix is reserved: payload keys cannot use it)
ROUND = "fedretain.round"  # ConfigRecord in every train message
REPLY = "fedretain.reply"  # MetricRecord in every train reply
DIVERGED = "fedretain.diverged"  # ConfigRecord replacing REPLY when the update diverged
STATE = "fedretain.state"  # ArrayRecord: a client state (pushed on resume, fetched for checkpoints)
NODE = "fedretain.node"  # ConfigRecord: a node's partition (discovery)
# keys of context.state
_COMMITTED = "fedretain.committed"  # ArrayRecord: the state the server knows of
_NEXT = "fedretain.next"  # ArrayRecord: the state after the latest round, not yet accepted
_INFO = "fedretain.client"  # ConfigRecord: run tag, round of _NEXT

_RNG = 7  # stream tag of the clients' torch seeds (fedretain.engines.schedule uses 1 to 3)

PARTITION_ID = "partition-id"
NUM_PARTITIONS = "num-partitions"
DATA_DIR = "data-dir"


def partition_of(context: Context) -> tuple[int, int]:
    """The node's ``(partition-id, num-partitions)``; num-partitions is -1 when not given."""
    config = context.node_config
    if PARTITION_ID not in config:
        raise ValueError(
            "this SuperNode has no partition-id: start it with "
            "--node-config 'partition-id=<k> num-partitions=<clients>'"
        )
    return int(config[PARTITION_ID]), int(config.get(NUM_PARTITIONS, -1))


def config_from_text(text: str, data_dir: str = "") -> Config:
    """A :class:`Config` from the TOML text of a resolved configuration."""
    from fedretain.experiments.config import load_toml, make_config

    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(text)
    try:
        values = load_toml(f.name)
    finally:
        os.unlink(f.name)
    if data_dir:
        values["data_dir"] = data_dir
    return make_config(values)


class _Worker:
    """One process's copy of the federation, built from the configuration as the runner does."""

    def __init__(self, cfg: Config) -> None:
        from dataclasses import replace

        from fedretain.engines.sequential import SequentialEngine
        from fedretain.experiments.runner import prepare

        built = prepare(replace(cfg, engine="sequential"))
        ref = built["engine"]

        class ClientEngine(SequentialEngine):
            """The sequential engine's local training with one client's state passed in/out."""

            state_in: Tree | None = None
            state_out: Tree | None = None

            def client_state(self, cid: int, server_state: Tree) -> Tree:
                if self.state_in:
                    return self.state_in
                return self.algorithm.client_init(server_state["x"])

            def keep_client_state(self, cid: int, state: Tree) -> None:
                self.state_out = state

        self.engine = ClientEngine(
            built["algorithm"],
            built["task"],
            built["dataset"],
            built["parts"],
            ref.local,
            seed=cfg.seed,
            device=ref.device,
            on_divergence=cfg.on_divergence,
        )
        self.algorithm = built["algorithm"]


_WORKERS: dict[tuple[str, str], _Worker] = {}


def _worker(text: str, context: Context) -> _Worker:
    """The cached worker of this configuration (one kept per process: the latest)."""
    data_dir = str(context.node_config.get(DATA_DIR, ""))
    key = (text, data_dir)
    if key not in _WORKERS:
        _WORKERS.clear()
        _WORKERS[key] = _Worker(config_from_text(text, data_dir))
    return _WORKERS[key]


def _settle_state(context: Context, run: str, accepted: int) -> ArrayRecord:
    """Commit or drop the pending state by the server's word; returns the committed state
    (an empty record when the client has none)."""
    info = context.state.config_records.get(_INFO)
    if info is None or str(info["run"]) != run:  # first message of this run on this node
        for key in (_COMMITTED, _NEXT, _INFO):
            if key in context.state:
                del context.state[key]
        context.state[_INFO] = ConfigRecord({"run": run, "next_round": -1})
        return ArrayRecord()
    if _NEXT in context.state:
        if int(info["next_round"]) == accepted:
            context.state[_COMMITTED] = context.state[_NEXT]
        del context.state[_NEXT]
        info["next_round"] = -1
    return context.state.array_records.get(_COMMITTED, ArrayRecord())


def _train(msg: Message, context: Context) -> Message:
    import numpy as np
    import torch

    from fedretain.core.algorithm import RoundInfo
    from fedretain.engines.base import DivergenceError
    from fedretain.flower.records import (
        payload_to_records,
        record_to_tree,
        records_to_payload,
        tree_to_record,
    )

    meta = msg.content.config_records[ROUND]
    cid, _ = partition_of(context)
    if cid != int(meta["client"]):
        raise ValueError(f"a message for client {meta['client']} reached partition {cid}")
    committed = _settle_state(context, str(meta["run"]), int(meta["accepted"]))
    if STATE in msg.content.array_records:  # resume: the server's copy of the state wins
        committed = context.state[_COMMITTED] = msg.content.array_records[STATE]
    state = record_to_tree(committed)
    worker = _worker(str(meta["config"]), context)
    threads = int(meta["threads"])
    if threads > 0 and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    info = RoundInfo(
        round=int(meta["round"]),
        num_clients=int(meta["num_clients"]),
        clients=tuple(int(c) for c in meta["clients"]),
        lr=float(meta["lr"]),
        seed=int(meta["seed"]),
    )
    downlink = records_to_payload(msg.content, worker.algorithm.downlink_keys)
    # torch's RNG (dropout, random augmentations) seeded by (seed, round, client): the same run
    # gives the same numbers whichever process trains which client
    rng = np.random.SeedSequence([info.seed, _RNG, info.round, cid])
    torch.manual_seed(int(rng.generate_state(1)[0]))
    engine = worker.engine
    engine.state_in, engine.state_out = state, None
    try:
        uplink, loss = engine.train_client(cid, downlink, info)
    except DivergenceError as e:
        reason = ConfigRecord({"client": cid, "reason": str(e)})
        return Message(RecordDict({DIVERGED: reason}), reply_to=msg)
    new_state = engine.state_out or state  # an empty new state keeps the old one
    engine.state_in = engine.state_out = None
    context.state[_NEXT] = tree_to_record(new_state)
    context.state[_INFO]["next_round"] = info.round
    reply = MetricRecord(
        {
            "client": cid,
            "loss": float(loss),
            "num_samples": len(engine.parts[cid]),
            "has_state": int(bool(new_state)),
        }
    )
    return Message(RecordDict({**payload_to_records(uplink), REPLY: reply}), reply_to=msg)


def _query_partition(msg: Message, context: Context) -> Message:
    cid, num = partition_of(context)
    record = ConfigRecord({PARTITION_ID: cid, NUM_PARTITIONS: num})
    return Message(RecordDict({NODE: record}), reply_to=msg)


def _query_state(msg: Message, context: Context) -> Message:
    meta = msg.content.config_records[ROUND]
    cid, _ = partition_of(context)
    state = _settle_state(context, str(meta["run"]), int(meta["accepted"]))
    record = MetricRecord({"client": cid, "has_state": int(len(state) > 0)})
    return Message(RecordDict({STATE: state, REPLY: record}), reply_to=msg)


def make_client_app() -> ClientApp:
    """A ClientApp serving every registered algorithm (the configuration comes with each
    message)."""
    app = ClientApp()
    app.train()(_train)
    app.query("partition")(_query_partition)
    app.query("state")(_query_state)
    return app


client_app = make_client_app()

__all__ = ["client_app", "config_from_text", "make_client_app", "partition_of"]
