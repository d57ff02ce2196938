"""Seeded randomness of a run, as pure functions of (seed, round, client).

Every engine draws the same clients and the same mini-batches in the same order, whatever
order it processes clients in, so the sequential engine, the vectorised engine and Flower give
the same numbers for the same seed.
"""

from __future__ import annotations

import numpy as np

_SAMPLE, _BATCHES = 1, 2


def sample_clients(num_clients: int, per_round: int, seed: int, rnd: int) -> np.ndarray:
    """``per_round`` distinct client ids of ``num_clients``, sorted, drawn without replacement."""
    rng = np.random.default_rng([seed, _SAMPLE, rnd])
    return np.sort(rng.choice(num_clients, size=per_round, replace=False))


def batch_plan(
    num_samples: int,
    batch_size: int,
    seed: int,
    rnd: int,
    client: int,
    *,
    epochs: int = 1,
    steps: int = 0,
    full_batch: bool = False,
) -> list[np.ndarray]:
    """Indices of each local mini-batch of one client in one round.

    - ``full_batch``: one batch holding every sample;
    - ``steps > 0``: exactly ``steps`` batches, taken in order from fresh permutations;
    - otherwise ``epochs`` passes, each a fresh permutation cut into batches of ``batch_size``
      (the last batch of a pass may be smaller).
    """
    if full_batch:
        return [np.arange(num_samples)]
    rng = np.random.default_rng([seed, _BATCHES, rnd, client])
    b = min(batch_size, num_samples)
    if steps > 0:
        per_pass = num_samples // b
        passes = -(-steps // per_pass)
        order = np.concatenate(
            [rng.permutation(num_samples)[: per_pass * b] for _ in range(passes)]
        )
        return [order[k * b : (k + 1) * b] for k in range(steps)]
    plan: list[np.ndarray] = []
    for _ in range(epochs):
        perm = rng.permutation(num_samples)
        plan.extend(perm[k : k + b] for k in range(0, num_samples, b))
    return plan
