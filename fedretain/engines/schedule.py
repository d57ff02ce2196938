"""Seeded randomness of a run, as pure functions of (seed, round, client).

Every engine draws the same clients and the same mini-batches in the same order, whatever
order it processes clients in, so the sequential engine, the vectorised engine and Flower give
the same numbers for the same seed.
"""

from __future__ import annotations

import numpy as np

from fedretain.registry import Registry

_SAMPLE = 1  # stream 2 is the clients' mini-batches (fedretain.core.client.batch_plan)


def sample_clients(num_clients: int, per_round: int, seed: int, rnd: int) -> np.ndarray:
    """``per_round`` distinct client ids of ``num_clients``, sorted, drawn without replacement."""
    rng = np.random.default_rng([seed, _SAMPLE, rnd])
    return np.sort(rng.choice(num_clients, size=per_round, replace=False))


_PROBS = 3


class Participation:
    """Which clients take part in each round, as a pure function of (seed, round).

    - ``uniform``: ``per_round`` of the ``num_clients`` drawn without replacement (default);
    - ``bernoulli``: client i is reachable in each round with its own probability ``p_i``,
      drawn once per run uniformly from ``[p_min, p_max]``; every reachable client takes part
      (``per_round`` is ignored), so clients with a small ``p_i`` are absent for stretches of
      rounds, and a round may have no client at all (the global model then stays).
    """

    def __init__(
        self,
        mode: str,
        num_clients: int,
        per_round: int,
        seed: int,
        *,
        p_min: float = 0.02,
        p_max: float = 0.2,
    ) -> None:
        if not 0 < p_min <= p_max <= 1:
            raise ValueError(
                f"participation.p_min and p_max need 0 < p_min <= p_max <= 1, got {p_min}, {p_max}"
            )
        self.mode, self.num_clients, self.per_round, self.seed = mode, num_clients, per_round, seed
        self.probs = None
        if mode == "bernoulli":
            rng = np.random.default_rng([seed, _PROBS])
            self.probs = rng.uniform(p_min, p_max, size=num_clients)

    def clients(self, rnd: int) -> np.ndarray:
        if self.probs is None:
            return sample_clients(self.num_clients, self.per_round, self.seed, rnd)
        rng = np.random.default_rng([self.seed, _SAMPLE, rnd])
        return np.flatnonzero(rng.random(self.num_clients) < self.probs)


def uniform(num_clients: int, per_round: int, seed: int) -> Participation:
    """``per_round`` of the ``num_clients`` clients drawn uniformly, without replacement, each
    round."""
    return Participation("uniform", num_clients, per_round, seed)


def bernoulli(
    num_clients: int, per_round: int, seed: int, p_min: float = 0.02, p_max: float = 0.2
) -> Participation:
    """Client i is reachable each round with its own probability p_i ~ U[p_min, p_max].

    :param p_min: lowest reachability probability of a client
    :param p_max: highest reachability probability of a client
    """
    return Participation("bernoulli", num_clients, per_round, seed, p_min=p_min, p_max=p_max)


PARTICIPATIONS = Registry("participation")
PARTICIPATIONS.add("uniform", uniform, "clients_per_round clients drawn uniformly each round")
PARTICIPATIONS.add(
    "bernoulli", bernoulli, "client i reachable with its own probability p_i in [p_min, p_max]"
)
