"""Helpers of the Flower tests: a tiny federation, runs on any engine, and an in-process Grid.

:class:`InlineGrid` runs the fedretain ClientApp in this process, one node per partition, with
faults on demand: ``fail`` makes a node's ClientApp raise in a round (the reply is an error, as
Flower sends it), ``drop`` lets the node train but loses its reply on the way (the server never
hears back), ``offline`` takes nodes away.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from flwr.app import Context, Error, Message, RecordDict
from flwr.common.constant import SUPERLINK_NODE_ID, ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

from fedretain.core.tree import Tree
from fedretain.engines.round import Rounds
from fedretain.experiments.run import build_rounds
from fedretain.flower.client import make_client_app
from fedretain.flower.federation import SuperNodes, connected
from fedretain.flower.protocol import ROUND
from fedretain.recipe.config import make_config
from fedretain.recipe.federation import Federation as Recipe
from tests.engines.test_vmap_conformance import _max_diff

# 4 clients of ragged size (FedProx's synthetic data, Dirichlet 0.5), 3 per round. The data
# is generated without scikit-learn, which every ClientApp process would otherwise import. One
# torch thread everywhere (the ClientApps too): tiny matmuls do not thrash a loaded 2-core machine
BASE = {
    "dataset": "synthetic",
    "dataset.devices": 6,
    "model": "mlp",
    "model.hidden": [16],
    "clients": 4,
    "clients_per_round": 3,
    "batch_size": 16,
    "lr": 0.1,
    "partition": "dirichlet",
    "partition.alpha": 0.5,
    "seed": 1,  # samples {0, 1, 3}, then {0, 2, 3}
    "threads": 1,
    "checkpoint_every": 0,
    "engine": "sequential",  # the reference (engine=flower replaces it)
}


def config(**overrides: object):
    return make_config({**BASE, **{k.replace("__", "."): v for k, v in overrides.items()}})


def build(cfg, federation: SuperNodes | None = None) -> tuple[Recipe, Rounds]:
    """The federation of ``cfg`` and its rounds (on ``federation``'s nodes for engine=flower)."""
    if federation is None:
        return build_rounds(cfg)
    with connected(federation):
        return build_rounds(cfg)


def run_rounds(
    cfg,
    rounds: int = 2,
    federation: SuperNodes | None = None,
    drop: dict[int, set[int]] | None = None,
) -> tuple[Tree, Rounds]:
    """``rounds`` rounds of ``cfg`` (on ``federation`` for engine=flower); ``drop[r]``: clients
    left out of round ``r`` (the reference for lost replies). Returns (server state, rounds);
    ``rounds.last_metrics`` are the last round's metrics."""
    fed, runner = build(cfg, federation)
    state = fed.algorithm.server_init(*fed.task.init())
    try:
        for rnd in range(rounds):
            clients = fed.participation.clients(rnd)
            clients = [c for c in clients if c not in (drop or {}).get(rnd, set())]
            state, runner.last_metrics = runner.run_round(
                state, rnd, cfg.lr_at(rnd), clients=clients
            )
    finally:
        runner.engine.close()  # nothing to stop on a given federation
    return state, runner


# The Flower tests bound max_diff (engine=flower against the sequential engine) by 1e-5. A
# ClientApp trains with the sequential engine's code, one thread as here: the numbers seen were
# identical (simulation and CLI runs, AVX-512 and AVX2 kernels). A ClientApp on a CPU with other
# kernels rounds differently: each side is then within 1.7e-6 of the float64 run of this
# federation (FedReg on AVX2 kernels; the other algorithms <= 7.9e-7), so 1e-5 bounds that too.
def max_diff(a: Tree, b: Tree) -> float:
    return _max_diff(a, b)


def client_states(rounds: Rounds) -> dict[int, Tree]:
    return dict(rounds.store.items())


class InlineGrid(Grid):
    def __init__(self, num_nodes: int) -> None:
        # messages take their run from the process's task identity, as in a ServerApp process
        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID
        self.app = make_client_app()
        self.node_ids = [1000 + k for k in range(num_nodes)]
        self.partition = {n: k for k, n in enumerate(self.node_ids)}
        self.contexts = {
            n: Context(
                run_id=1,
                node_id=n,
                node_config={"partition-id": k, "num-partitions": num_nodes},
                state=RecordDict(),
                run_config={},
            )
            for n, k in self.partition.items()
        }
        self.fail: set[tuple[int, int]] = set()  # (round, partition): the ClientApp raises
        self.drop: set[tuple[int, int]] = set()  # (round, partition): the reply is lost
        self.offline: set[int] = set()  # partitions whose node is gone
        self.replies: dict[str, Message] = {}
        self.sent: list[tuple[str, int]] = []  # (message type, partition) of every message

    def set_run(self, run: object) -> None:  # pragma: no cover - not used
        pass

    @property
    def run(self) -> object:  # pragma: no cover - not used
        return None

    def create_message(self, *args: object, **kwargs: object) -> Message:  # pragma: no cover
        raise NotImplementedError

    def get_node_ids(self) -> Iterable[int]:
        return [n for n in self.node_ids if self.partition[n] not in self.offline]

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
            ids.append(msg.metadata.message_id)
            node = msg.metadata.dst_node_id
            part = self.partition[node]
            self.sent.append((msg.metadata.message_type, part))
            if part in self.offline:
                continue
            rnd = (
                int(msg.content.config_records[ROUND]["round"])
                if msg.metadata.message_type == "train"
                else -1
            )
            if (rnd, part) in self.fail:
                error = Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason="boom")
                reply = Message(error, reply_to=msg)
            else:
                reply = self.app(msg, self.contexts[node])
            if (rnd, part) not in self.drop:
                self.replies[msg.metadata.message_id] = reply
        return ids

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return [self.replies.pop(i) for i in list(message_ids) if i in self.replies]

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        return self.pull_messages(self.push_messages(messages))


def inline_federation(num_nodes: int) -> tuple[SuperNodes, InlineGrid]:
    grid = InlineGrid(num_nodes)
    return SuperNodes(grid, client_threads=0), grid
