"""fedretain's rounds as a Flower ``Strategy``, for a ServerApp of your own.

The round is the one every engine runs (:class:`~fedretain.engines.round.Rounds`: open,
collect, close); the messages are those of ``engine=flower``
(:class:`~fedretain.flower.engine.FlowerEngine`: :meth:`~FlowerEngine.messages`,
:meth:`~FlowerEngine.decode`, :meth:`~FlowerEngine.commit`). Only the loop is Flower's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from fedretain.core.tree import Tree
from fedretain.engines.round import OpenRound, Rounds
from fedretain.flower.engine import FlowerEngine, Sent, flower
from fedretain.flower.federation import SuperNodes
from fedretain.flower.options import flower_config
from fedretain.flower.records import tree_to_record
from fedretain.recipe.config import Config, component_params
from fedretain.recipe.federation import build_federation

log = logging.getLogger("fedretain.flower")


class AlgorithmStrategy(Strategy):
    """fedretain's rounds as a Flower ``Strategy``, for a ServerApp of your own.

    ``strategy.start(grid, strategy.initial_arrays(), num_rounds=...)`` runs the rounds with
    Flower's loop; clients are sampled with the run's seeded participation model and trained
    with the configuration's learning-rate schedule. The server state (the model and the
    algorithm's server variables) lives in :attr:`server_state`; the ``arrays`` Flower passes
    around are the global model ``x`` as a record, reported, never read back. Clients are the
    ClientApp of :mod:`fedretain.flower.client` (the same as for ``engine=flower``).

    Build one with :meth:`from_config`, or from :class:`Rounds` on a :class:`FlowerEngine`.
    """

    def __init__(
        self,
        rounds: Rounds,
        server_state: Tree,
        sample: Callable[[int], np.ndarray],
        lr_at: Callable[[int], float],
    ) -> None:
        if not isinstance(rounds.engine, FlowerEngine):
            raise TypeError(f"AlgorithmStrategy needs a FlowerEngine, got {rounds.engine.name}")
        self.rounds = rounds
        self.engine: FlowerEngine = rounds.engine
        self.server_state = server_state
        self.sample = sample
        self.lr_at = lr_at
        self.pending: tuple[OpenRound, Sent] | None = None  # the round in flight
        self.history: list[dict[str, float]] = []

    @classmethod
    def from_config(cls, config: Config) -> AlgorithmStrategy:
        """Data, model and algorithm of ``config`` (``engine`` is set to ``flower``); the
        federation is the Grid ``start`` receives."""
        cfg = flower_config(config)
        fed = build_federation(cfg)
        params = component_params(cfg, "engine")
        engine = flower(fed, params["client_cpus"], params["reply_timeout"])
        rounds = fed.rounds(engine)
        state = fed.algorithm.server_init(*fed.task.init())
        return cls(rounds, state, fed.participation.clients, cfg.lr_at)

    def initial_arrays(self) -> ArrayRecord:
        """The initial global model as a record (what ``start`` wants as ``initial_arrays``)."""
        return tree_to_record(self.server_state["x"])

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        engine = self.engine
        engine.attach(SuperNodes(grid))  # kept as it is when it already runs on this grid
        rnd = server_round - 1
        opened = self.rounds.open(self.server_state, rnd, self.lr_at(rnd), clients=self.sample(rnd))
        if opened is None:
            self.pending = None
            return []
        threads = engine.federation.client_threads if engine.federation else 0
        sent = engine.messages(opened.work, threads)
        self.pending = (opened, sent)
        return sent.messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        pending, self.pending = self.pending, None
        if pending is None:
            metrics = self.rounds.empty_metrics()
        else:
            opened, sent = pending
            trained = self.engine.decode(sent, list(replies))
            kept = self.rounds.collect(opened, trained)
            self.engine.commit(opened.work, trained, kept)
            self.server_state, metrics = self.rounds.close(self.server_state, opened)
        self.history.append(metrics)
        return tree_to_record(self.server_state["x"]), MetricRecord(dict(metrics))

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return []  # fedretain evaluates the global model on the server

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> None:
        return None

    def summary(self) -> None:
        algo = self.rounds.algorithm
        log.info(
            "%s over %d partitions: downlink %s, uplink %s",
            algo.name,
            self.rounds.num_clients,
            ", ".join(algo.downlink_keys),
            ", ".join(algo.uplink_keys),
        )


__all__ = ["AlgorithmStrategy"]
