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

A function returns None to leave the global model unchanged this round.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from fedretain.core.tree import Tree, leaves, tree_map, tree_weighted_mean
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


def multikrum(num_malicious: int = 0, num_select: int = 1) -> Aggregator:
    if num_malicious < 0 or num_select < 1:
        raise ValueError(
            "aggregator.num_malicious must be >= 0 and aggregator.num_select >= 1, got "
            f"{num_malicious} and {num_select}"
        )

    def aggregate(stacked: Tree, weights: Tensor) -> Tree:
        keep = multikrum_select(stacked, num_malicious, num_select).to(weights.device)
        chosen = tree_map(lambda v: v.index_select(0, keep), stacked)
        return tree_weighted_mean(chosen, weights.index_select(0, keep))

    return aggregate


def krum(num_malicious: int = 0) -> Aggregator:
    return multikrum(num_malicious, 1)


def bulyan(num_malicious: int = 0) -> Aggregator:
    f = num_malicious
    if f < 0:
        raise ValueError(f"aggregator.num_malicious must be >= 0, got {f}")

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


def _needs(kind: str, minimum: Callable[[dict[str, Any]], int]) -> Callable[[Any], None]:
    """A config check: the round's client count (uniform participation) must reach
    ``minimum(params)``."""

    def check(cfg: Any) -> None:
        params = {**AGGREGATORS.params(kind), **cfg.aggregator_params}
        need = minimum(params)
        if cfg.participation == "uniform" and cfg.clients_per_round < need:
            shown = ", ".join(f"aggregator.{k}={v}" for k, v in cfg.aggregator_params.items())
            raise ConfigError(
                f"aggregator={kind}{' ' + shown if shown else ''} needs at least {need} clients "
                f"per round, got clients_per_round={cfg.clients_per_round}"
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
