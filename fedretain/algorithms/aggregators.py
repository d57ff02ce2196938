"""Aggregators: how the server combines the round's uplinked models, stacked on a client axis.

``aggregator=NAME`` with ``aggregator.*`` options composes with every algorithm whose server
step is a model update (see :mod:`fedretain.algorithms.server`). Each is a function
``(stacked, weights) -> aggregate`` over a tree whose leaves have a leading client axis
(``weights``: the algorithm's averaging weights), computing what Flower 1.41's strategy of the
same name computes from the same replies:

- ``mean``: the weighted mean (FedAvg);
- ``median``: the coordinate-wise median (``FedMedian``; the mean of the two middle values for
  an even count, as ``np.median``);
- ``trimmed_mean``: per coordinate, the mean after dropping the ``int(beta n)`` smallest and
  largest values (``FedTrimmedAvg``);
- ``krum`` / ``multikrum``: each client's score is the sum of the squared distances to its
  ``n − f − 2`` nearest other clients (f = ``num_malicious``); the ``num_select`` lowest-scoring
  clients are averaged with the weights (Blanchard et al., NeurIPS 2017; ``Krum``,
  ``MultiKrum``);
- ``bulyan``: Multi-Krum selects ``θ = n − 2f`` clients; per coordinate, the mean of the
  ``θ − 2f`` values closest to their median (El Mhamdi et al., ICML 2018; ``Bulyan``); it needs
  ``n ≥ 4f + 3`` and, like Flower's, leaves the model unchanged in a round with fewer clients.

Krum, Multi-Krum and Bulyan refuse a config whose rounds are expected to be too small:
``clients_per_round`` under uniform participation, ``clients × (p_min + p_max) / 2`` under
Bernoulli participation (whose rounds vary: Bulyan's shorter ones leave the model unchanged).

A function returns None to leave the global model unchanged this round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from fedretain.core.tree import Tree, leaves, tree_map, tree_weighted_mean
from fedretain.engines.schedule import PARTICIPATIONS
from fedretain.errors import ConfigError
from fedretain.registry import Registry

log = logging.getLogger("fedretain")

Aggregator = Callable[[Tree, Tensor], Tree | None]


def _float(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``fn`` on a floating copy of an integer leaf, rounded back to its dtype."""

    def leaf(x: Tensor) -> Tensor:
        if x.dtype.is_floating_point:
            return fn(x)
        return torch.round(fn(x.double())).to(x.dtype)

    return leaf


def _median(x: Tensor) -> Tensor:
    s = x.sort(dim=0).values
    n = s.shape[0]
    return (s[(n - 1) // 2] + s[n // 2]) / 2


def mean() -> Aggregator:
    """The weighted mean: FedAvg's aggregate."""
    return tree_weighted_mean


def median() -> Aggregator:
    def aggregate(stacked: Tree, weights: Tensor) -> Tree:
        return tree_map(_float(_median), stacked)

    return aggregate


def trimmed_mean(beta: float = 0.2) -> Aggregator:
    """Per coordinate, the mean without the ``int(beta n)`` smallest and largest values.

    :param beta: the fraction cut from each tail, in [0, 0.5)
    """
    if not 0 <= beta < 0.5:
        raise ValueError(f"aggregator.beta must be in [0, 0.5), got {beta}")

    def trim(x: Tensor) -> Tensor:
        n = x.shape[0]
        cut = int(beta * n)
        return x.sort(dim=0).values[cut : n - cut].mean(dim=0)

    def aggregate(stacked: Tree, weights: Tensor) -> Tree:
        return tree_map(_float(trim), stacked)

    return aggregate


def _rows(stacked: Tree) -> Tensor:
    """Each client's whole uplink as one row (float64), as Flower flattens a reply's arrays."""
    first = leaves(stacked)
    n = first[0].shape[0]
    return torch.cat([v.reshape(n, -1).double() for v in first], dim=1)


def multikrum_select(stacked: Tree, num_malicious: int, num_select: int) -> Tensor:
    """Indices of the ``num_select`` clients with the lowest Krum scores."""
    rows = _rows(stacked)
    norms = (rows * rows).sum(dim=1)
    dist = norms[:, None] + norms[None, :] - 2 * rows @ rows.T
    n = rows.shape[0]
    closest = max(1, n - num_malicious - 2)
    nearest = torch.argsort(dist, dim=1, stable=True)[:, 1 : closest + 1]
    scores = torch.gather(dist, 1, nearest).sum(dim=1)
    return torch.argsort(scores, stable=True)[:num_select]


def _at_least(key: str, value: int, low: int) -> None:
    if value < low:
        raise ValueError(f"aggregator.{key} must be >= {low}, got {value}")


def multikrum(num_malicious: int = 0, num_select: int = 1) -> Aggregator:
    """The weighted mean of the ``num_select`` clients with the lowest Krum scores.

    :param num_malicious: f, the attackers tolerated (needs 2f + 3 clients a round)
    :param num_select: the clients averaged (needs as many a round)
    """
    _at_least("num_malicious", num_malicious, 0)
    _at_least("num_select", num_select, 1)

    def aggregate(stacked: Tree, weights: Tensor) -> Tree:
        keep = multikrum_select(stacked, num_malicious, num_select).to(weights.device)
        chosen = tree_map(lambda v: v.index_select(0, keep), stacked)
        return tree_weighted_mean(chosen, weights.index_select(0, keep))

    return aggregate


def krum(num_malicious: int = 0) -> Aggregator:
    """The client with the lowest Krum score.

    :param num_malicious: f, the attackers tolerated (needs 2f + 3 clients a round)
    """
    return multikrum(num_malicious, 1)


def bulyan(num_malicious: int = 0) -> Aggregator:
    """Multi-Krum's ``n − 2f`` clients, then per coordinate the mean of the ``n − 4f`` values
    closest to their median.

    :param num_malicious: f, the attackers tolerated (needs 4f + 3 clients a round; a round
        with fewer leaves the model unchanged)
    """
    f = num_malicious
    _at_least("num_malicious", f, 0)

    def aggregate(stacked: Tree, weights: Tensor) -> Tree | None:
        n = leaves(stacked)[0].shape[0]
        if n < 4 * f + 3:
            need = 4 * f + 3
            log.warning("bulyan: %d clients, needs %d (4 num_malicious + 3): no update", n, need)
            return None
        theta = n - 2 * f
        beta = theta - 2 * f
        keep = multikrum_select(stacked, f, theta).to(weights.device)

        def closest_mean(x: Tensor) -> Tensor:
            chosen = x.index_select(0, keep)
            far = (chosen - _median(chosen)).abs()
            idx = torch.argsort(far, dim=0, stable=True)[:beta]
            return torch.take_along_dim(chosen, idx, dim=0).mean(dim=0)

        return tree_map(_float(closest_mean), stacked)

    return aggregate


def expected_participants(cfg: Any) -> float:
    """The clients expected in a round: ``clients_per_round`` (uniform participation), or
    ``clients × (p_min + p_max) / 2`` (bernoulli: the mean of the p_i's distribution)."""
    if cfg.participation != "bernoulli":
        return cfg.clients_per_round
    p = {**PARTICIPATIONS.params("bernoulli"), **cfg.participation_params}
    return cfg.clients * (p["p_min"] + p["p_max"]) / 2


def _needs(name: str, minimum: Callable[[dict[str, Any]], int]) -> Callable[[Any], None]:
    """A config check: the clients expected in a round must reach ``minimum(params)``."""

    def check(cfg: Any) -> None:
        params = {**AGGREGATORS.params(name), **cfg.aggregator_params}
        need = minimum(params)
        expected = expected_participants(cfg)
        if expected >= need:
            return
        shown = ", ".join(f"aggregator.{k}={v}" for k, v in cfg.aggregator_params.items())
        head = f"aggregator={name}{' ' + shown if shown else ''} needs at least {need} clients"
        if cfg.participation != "bernoulli":
            raise ConfigError(f"{head} per round, got clients_per_round={cfg.clients_per_round}")
        raise ConfigError(
            f"{head} per round, but participation=bernoulli expects {expected:g} "
            "(clients x (participation.p_min + participation.p_max) / 2); raise clients or "
            "participation.p_min/p_max, or use participation=uniform"
        )

    return check


AGGREGATORS = Registry("aggregator")
AGGREGATORS.add("mean", mean, "weighted mean (FedAvg)")
AGGREGATORS.add("median", median, "coordinate-wise median (FedMedian)")
AGGREGATORS.add("trimmed_mean", trimmed_mean, "per coordinate, mean without the beta tails")
AGGREGATORS.add(
    "krum",
    krum,
    "the client closest to its n-f-2 neighbours (Krum; f = num_malicious)",
    check=_needs("krum", lambda p: 2 * p["num_malicious"] + 3),
)
AGGREGATORS.add(
    "multikrum",
    multikrum,
    "weighted mean of the num_select best Krum scores (Multi-Krum)",
    check=_needs("multikrum", lambda p: max(2 * p["num_malicious"] + 3, p["num_select"])),
)
AGGREGATORS.add(
    "bulyan",
    bulyan,
    "Multi-Krum selection, then a trimmed mean around the median (Bulyan)",
    check=_needs("bulyan", lambda p: 4 * p["num_malicious"] + 3),
)

__all__ = ["AGGREGATORS", "Aggregator", "bulyan", "krum", "mean", "median", "multikrum"]
