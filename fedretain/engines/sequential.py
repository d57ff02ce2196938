"""The sequential engine: the reference, one client after another, as plain as a loop can be.

Each client of the round trains with :func:`~fedretain.engines.round.train_client` on its own
seeded mini-batches; :class:`~fedretain.engines.round.Rounds` does the rest of the round.
"""

from __future__ import annotations

from collections.abc import Iterator

from fedretain.engines.round import OpenRound, Rounds, Trained, train_client


class SequentialEngine:
    name = "sequential"
    choice = ""  # engine=auto: why this engine was chosen
    store = None  # the run's store keeps the client states
    remote = False

    def train(self, rounds: Rounds, rnd: OpenRound) -> Iterator[Trained]:
        algo, clients = rounds.algorithm, rounds.clients
        for cid in rnd.info.clients:
            update = train_client(
                algo,
                rounds.task,
                rnd.downlink,
                rounds.client_state(cid, rnd.downlink),
                clients.data(cid),
                clients.plan(cid, rnd.info, algo),
                rnd.info,
                cid,
            )
            yield Trained.one(cid, update, rnd.keep_models)

    def close(self) -> None:
        """Nothing to release."""
