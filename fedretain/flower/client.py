"""The client half: one Flower ``ClientApp`` that runs any registered algorithm.

Each ``train`` message carries the downlink and ``fedretain.round`` (see :mod:`.protocol`):
the run's resolved configuration (TOML), the round and the client it is meant for. The
ClientApp finds its data by its node's ``partition-id`` (node config; the simulation engine
sets it, a SuperNode gets it from ``--node-config "partition-id=0 num-partitions=3"``; an
optional ``data-dir`` overrides the config's ``data_dir`` on that node), rebuilds the
federation from the configuration exactly as a run does
(:func:`~fedretain.recipe.federation.build_federation`, cached per process), and trains with
:func:`~fedretain.core.client.train_client` (same seeded mini-batches, same code), so a
client's update is the one the sequential engine computes. It trains on the CPU, or on CUDA
with ``engine.client_gpus > 0`` (:func:`~fedretain.flower.options.client_device`: the GPU Ray
gives its actor, or its node's first), whatever the server half's ``device``.

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

from dataclasses import replace
from typing import TYPE_CHECKING

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

from fedretain.flower.protocol import (
    CLIENT,
    COMMITTED,
    DATA_DIR,
    DIVERGED,
    NEXT,
    NODE,
    NUM_PARTITIONS,
    PARTITION_ID,
    REPLY,
    RNG_STREAM,
    ROUND,
    STATE,
    Reply,
    RoundRecord,
    diverged_record,
    node_record,
    state_reply,
)

if TYPE_CHECKING:
    from fedretain.recipe.federation import Federation


def partition_of(context: Context) -> tuple[int, int]:
    """The node's ``(partition-id, num-partitions)``; num-partitions is -1 when not given."""
    config = context.node_config
    if PARTITION_ID not in config:
        raise ValueError(
            "this SuperNode has no partition-id: start it with "
            "--node-config 'partition-id=<k> num-partitions=<clients>'"
        )
    return int(config[PARTITION_ID]), int(config.get(NUM_PARTITIONS, -1))


_FEDERATIONS: dict[tuple[str, str], Federation] = {}


def federation_of(text: str, context: Context) -> Federation:
    """The federation of this configuration on this node (one kept per process: the latest),
    on the clients' device (:func:`~fedretain.flower.options.client_device`: CUDA with
    ``engine.client_gpus > 0``, else the CPU)."""
    from fedretain.flower.options import client_device
    from fedretain.recipe.config import config_from_text
    from fedretain.recipe.federation import build_federation

    data_dir = str(context.node_config.get(DATA_DIR, ""))
    key = (text, data_dir)
    if key not in _FEDERATIONS:
        _FEDERATIONS.clear()
        cfg = config_from_text(text)
        device = client_device(cfg)
        if device != cfg.device:  # the server half's device: the clients train elsewhere
            cfg = replace(cfg, device=device)
        _FEDERATIONS[key] = build_federation(cfg, data_dir or None)
    return _FEDERATIONS[key]


def _settle_state(context: Context, run: str, accepted: int) -> ArrayRecord:
    """Commit or drop the pending state by the server's word; returns the committed state
    (an empty record when the client has none)."""
    info = context.state.config_records.get(CLIENT)
    if info is None or str(info["run"]) != run:  # first message of this run on this node
        for key in (COMMITTED, NEXT, CLIENT):
            if key in context.state:
                del context.state[key]
        context.state[CLIENT] = ConfigRecord({"run": run, "next_round": -1})
        return ArrayRecord()
    if NEXT in context.state:
        if int(info["next_round"]) == accepted:
            context.state[COMMITTED] = context.state[NEXT]
        del context.state[NEXT]
        info["next_round"] = -1
    return context.state.array_records.get(COMMITTED, ArrayRecord())


def _train(msg: Message, context: Context) -> Message:
    import numpy as np
    import torch

    from fedretain.core.client import client_state, diverged, keeps_old_state, train_client
    from fedretain.core.tree import tree_allfinite, tree_map
    from fedretain.flower.records import (
        payload_to_records,
        record_to_tree,
        records_to_payload,
        tree_to_record,
    )

    header = RoundRecord.decode(msg.content.config_records[ROUND])
    info = header.info
    if info is None:
        raise ValueError(f"a train message without its round reached {context.node_id}")
    cid, _ = partition_of(context)
    if cid != header.client:
        raise ValueError(f"a message for client {header.client} reached partition {cid}")
    committed = _settle_state(context, header.run, header.accepted)
    if STATE in msg.content.array_records:  # resume: the server's copy of the state wins
        committed = context.state[COMMITTED] = msg.content.array_records[STATE]
    fed = federation_of(header.config, context)
    if header.threads > 0 and torch.get_num_threads() != header.threads:
        torch.set_num_threads(header.threads)
    algorithm, clients = fed.algorithm, fed.clients_for_round(info.round)  # a continual task's
    # records arrive on the host: onto the clients' device (nothing to do on a CPU)
    downlink = tree_map(
        lambda v: v.to(fed.device), records_to_payload(msg.content, algorithm.downlink_keys)
    )
    stored = tree_map(lambda v: v.to(fed.device), record_to_tree(committed))
    state = client_state(algorithm, stored, downlink)
    # torch's RNG (dropout, random augmentations) seeded by (seed, round, client): the same run
    # gives the same numbers whichever process trains which client
    rng = np.random.SeedSequence([info.seed, RNG_STREAM, info.round, cid])
    torch.manual_seed(int(rng.generate_state(1)[0]))
    update = train_client(
        algorithm,
        fed.task,
        downlink,
        state,
        clients.data(cid),
        clients.plan(cid, info, algorithm),
        info,
        cid,
    )
    if not tree_allfinite({"loss": update.loss, **update.uplink}):
        reason = str(diverged(info.round, f"the update of client {cid}"))
        return Message(RecordDict({DIVERGED: diverged_record(cid, reason)}), reply_to=msg)
    new_state = stored if keeps_old_state(update.state) else update.state
    context.state[NEXT] = tree_to_record(new_state)
    context.state[CLIENT]["next_round"] = info.round
    reply = Reply(cid, float(update.loss), clients.size(cid), bool(new_state))
    records = payload_to_records(update.uplink)
    return Message(RecordDict({**records, REPLY: reply.encode()}), reply_to=msg)


def _query_partition(msg: Message, context: Context) -> Message:
    cid, num = partition_of(context)
    return Message(RecordDict({NODE: node_record(cid, num)}), reply_to=msg)


def _query_state(msg: Message, context: Context) -> Message:
    header = RoundRecord.decode(msg.content.config_records[ROUND])
    cid, _ = partition_of(context)
    state = _settle_state(context, header.run, header.accepted)
    reply = state_reply(cid, len(state) > 0)
    return Message(RecordDict({STATE: state, REPLY: reply}), reply_to=msg)


def make_client_app() -> ClientApp:
    """A ClientApp serving every registered algorithm (the configuration comes with each
    message)."""
    app = ClientApp()
    app.train()(_train)
    app.query("partition")(_query_partition)
    app.query("state")(_query_state)
    return app


client_app = make_client_app()

__all__ = ["client_app", "federation_of", "make_client_app", "partition_of"]
