"""Tuning methods alike: each method's learning rate and own hyper-parameter chosen on a
validation split, the way the papers choose (FedReg's, GradMA's and TCE's grid searches).

- Every method gets a :class:`Grid`: the **same learning-rate grid** for all, and for a
  method with a hyper-parameter of its own (FedProx's μ, FedCurv's λ, ...) a grid of that key
  with **as many points** as every other method's; a method's points are the product.
- Every point is trained with the **same** rounds, clients, local work and seeds (only the
  grid's keys differ from the shared base), on the clients' training data less a held-out
  validation split (``val_fraction`` of each client's samples,
  :func:`fedretain.data.partition.train_val_split`), on the **tuning seed**
  (:data:`TUNING_SEED`), which is no evaluation seed: the presets evaluate on seeds 0, 1,
  2, ..., so no choice is made on the runs it is then judged on.
- A run with a validation split records the global model's ``val_accuracy`` at each
  evaluation (:mod:`fedretain.experiments.run`); a point's score is read from those records
  (:class:`Criterion`: the mean over the last 10 % of evaluations, as the reports' "final", or
  the rounds to a validation target, as FedCurv chose), the best mean over the seeds is chosen
  (:func:`choose`), and a choice at the edge of its grid (not at the end of what the key
  allows) is flagged: a wider grid might choose otherwise, and the evaluating report leaves
  the claims that read it undecided. The test set plays no part in the choice.

A tuning preset builds its runs from :func:`grid_points`, prints every point with
:func:`tuning_paragraph` and writes the choices beside its report (:func:`choices`,
``choices.json``); the package ships them in ``fedretain/studies/presets/tuned.json``,
from which the evaluating preset takes its methods' values (:func:`tuned`). ``fedretain
reproduce demo-tune`` and ``fedcurv-tune`` are the two studies.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fedretain.errors import ConfigError
from fedretain.metrics.accuracy import TAIL, tail_count

VAL_FRACTION = 0.1  # of each client's samples held out (TCE's split)
TUNING_SEED = 100  # the seed of every tuning run: the presets evaluate on 0, 1, 2, ...
# keys a grid may not set: they are the budget every point shares
BUDGET_KEYS = frozenset(
    {"rounds", "clients", "clients_per_round", "local_epochs", "local_steps", "batch_size"}
    | {"seed", "val_fraction", "dataset", "model", "partition"}
)
TUNED_FILE = Path(__file__).parent / "presets" / "tuned.json"


@dataclass(frozen=True)
class Grid:
    """A method's grid: ``overrides`` make the method (``{"algorithm": "fedprox"}``), each key
    of ``keys`` (``lr``, ``algo.mu``) takes each of its values; ``bounds``: a key's allowed
    range, whose ends are no grid edge (FedReg's γ ≤ 1)."""

    method: str
    overrides: dict[str, Any]
    keys: dict[str, tuple[float, ...]]
    bounds: dict[str, tuple[float, float]] = field(default_factory=dict)

    def points(self) -> list[dict[str, float]]:
        """Every combination of the keys' values, in grid order."""
        names = list(self.keys)
        return [dict(zip(names, v, strict=True)) for v in itertools.product(*self.keys.values())]

    def label(self, point: dict[str, float]) -> str:
        return " ".join([self.method, *(f"{k}={v:g}" for k, v in point.items())])

    def edge(self, point: dict[str, float]) -> list[str]:
        """The keys of ``point`` at an end of their grid that is not an end of their range."""
        out = []
        for key, values in self.keys.items():
            low, high = self.bounds.get(key, (-math.inf, math.inf))
            x = point[key]
            if len(values) > 1 and x in (min(values), max(values)) and x not in (low, high):
                out.append(key)
        return out


@dataclass(frozen=True)
class Criterion:
    """What a point is scored by: the mean validation accuracy over the last 10 % of its
    evaluations (``target`` None; higher is better), or the first round whose validation
    accuracy reaches ``target`` (fewer is better; never reached: one after the last round,
    then the final validation accuracy breaks ties)."""

    target: float | None = None

    def describe(self) -> str:
        if self.target is None:
            return (
                f"the mean validation accuracy over the last {100 * TAIL:g} % of the evaluations "
                "(higher is better)"
            )
        return (
            f"the rounds to a validation accuracy of {self.target:.0%} (fewer is better; the "
            "final validation accuracy breaks ties)"
        )

    def score(self, records: list[dict[str, Any]]) -> float:
        """The point's score, as a number where higher is better."""
        vals = [(r["round"], r["val_accuracy"]) for r in records if "val_accuracy" in r]
        if not vals:
            raise ConfigError(
                "a tuning run has no val_accuracy in its records: it needs val_fraction > 0"
            )
        trained = [v for rnd, v in vals if rnd > 0] or [v for _, v in vals]
        k = tail_count(len(trained))
        final = statistics.fmean(trained[-k:])
        if self.target is None:
            return final
        last = max(rnd for rnd, _ in vals)
        reached = next((rnd for rnd, v in vals if v >= self.target), last + 1)
        return -reached + final / 10  # fewer rounds first; within a round, the final accuracy

    def shown(self, score: float) -> str:
        if self.target is None:
            return f"{score:.4f}"
        whole = math.floor(score)
        return f"{-whole} rounds, final {10 * (score - whole):.4f}"


def method_grids(
    methods: dict[str, dict[str, Any]],
    lrs: tuple[float, ...],
    own: dict[str, tuple[str, tuple[float, ...], tuple[float, float]]],
) -> list[Grid]:
    """A grid per method of ``methods`` (name -> the keys that make it): the learning rates
    ``lrs`` for every one, and the values of its own key where ``own`` gives one (name ->
    key, values, the key's allowed range, whose ends are no grid edge)."""
    grids = []
    for method, keys in methods.items():
        mine = own.get(method)
        values = {"lr": lrs, **({mine[0]: mine[1]} if mine else {})}
        grids.append(Grid(method, keys, values, {mine[0]: mine[2]} if mine else {}))
    return grids


def check_budgets(grids: Iterable[Grid]) -> None:
    """Every grid takes the same learning rates (where it tunes them) and as many values of
    its own key as every other, and sets no budget key (ConfigError)."""
    grids = list(grids)
    lrs = {g.keys["lr"] for g in grids if "lr" in g.keys}
    if len(lrs) > 1:
        raise ConfigError("tuning grids differ in their learning rates; give every method the same")
    own = {g.method: len(v) for g in grids for k, v in g.keys.items() if k != "lr"}
    if len(set(own.values())) > 1:
        listed = ", ".join(f"{m} {n}" for m, n in own.items())
        raise ConfigError(f"tuning grids differ in size ({listed}); give every method as many")
    for g in grids:
        fixed = sorted(BUDGET_KEYS & {*g.keys, *g.overrides})
        if fixed:
            raise ConfigError(
                f"the grid of {g.method} sets {', '.join(fixed)}, the budget every point shares; "
                "tune another key"
            )


def grid_points(
    grids: Iterable[Grid], seeds: list[int]
) -> list[tuple[Grid, dict[str, float], int]]:
    """Every (grid, point, seed) to run, the budgets checked (:func:`check_budgets`); a preset
    makes each a run with the grid's overrides and the point's keys."""
    grids = list(grids)
    check_budgets(grids)
    return [(g, p, seed) for g in grids for p in g.points() for seed in seeds]


def tuning_seeds(seeds: list[int]) -> list[int]:
    """The tuning runs' seeds: :data:`TUNING_SEED` onwards, as many as asked for."""
    return [TUNING_SEED + s for s in seeds]


Scores = dict[str, list[tuple[dict[str, float], list[float]]]]  # method -> (point, scores)


def scores_of(v: Any, setting: str, grids: Iterable[Grid], criterion: Criterion) -> Scores:
    """method -> each point with the score of each seed that finished. ``v`` is the report's
    view of the results (its ``results.run`` gives each run's records)."""
    results: Any = getattr(v, "results", None)
    if results is None:
        raise TypeError("scores_of needs the report's view of the results")
    out: Scores = {}
    for g in grids:
        out[g.method] = []
        for point in g.points():
            runs = (results.run(setting, g.label(point), s) for s in results.seeds)
            out[g.method].append(
                (point, [criterion.score(r.records) for r in runs if r is not None])
            )
    return out


def choose(scores: Scores) -> dict[str, dict[str, float] | None]:
    """Per method, the point of the best mean score over the seeds (the first in grid order on
    a tie); only points where every seed finished compete (None: none did)."""
    chosen: dict[str, dict[str, float] | None] = {}
    for method, points in scores.items():
        n = max((len(s) for _, s in points), default=0)
        full = [(p, statistics.fmean(s)) for p, s in points if s and len(s) == n]
        chosen[method] = max(full, key=lambda ps: ps[1])[0] if full else None
    return chosen


def choices(grids: list[Grid], criterion: Criterion, v: Any, settings: list[str]) -> dict[str, Any]:
    """What ``choices.json`` holds: per setting and method the grid, every point's score (mean
    over the tuning seeds), the chosen point and the keys chosen at an edge."""
    out: dict[str, Any] = {
        "criterion": criterion.describe(),
        "seeds": list(v.results.seeds),
        "settings": {},
    }
    for setting in settings:
        scores = scores_of(v, setting, grids, criterion)
        chosen = choose(scores)
        entry = {}
        for g in grids:
            pick = chosen[g.method]
            entry[g.method] = {
                "grid": {k: list(vals) for k, vals in g.keys.items()},
                "points": [
                    {**p, "score": statistics.fmean(s) if s else None} for p, s in scores[g.method]
                ],
                "chosen": pick,
                "edge": g.edge(pick) if pick else [],
            }
        out["settings"][setting] = entry
    return out


def tuning_paragraph(
    grids: list[Grid], criterion: Criterion, v: Any, plan: Any, setting: str | None = None
) -> str:
    """Every method's grid, every point's score (mean over the tuning seeds, each seed's value)
    and the chosen point; use as ``functools.partial(tuning_paragraph, grids, criterion)`` for
    a :class:`~fedretain.studies.presets.Plan`'s paragraph (``v``: the report's view of
    the results). With several settings, one table each."""
    settings = [setting] if setting else plan.settings()
    lines = [
        "Each point is scored on the validation split (the clients' held-out "
        f"{100 * VAL_FRACTION:g} % of their training data) by {criterion.describe()}; mean "
        "over the tuning seeds, each seed's value in brackets; the chosen point in bold. The "
        "test set plays no part. One tuning seed does not tell apart points within about a "
        "point of each other: the choice among those is as good as any of them.",
    ]
    for s in settings:
        scores = scores_of(v, s, grids, criterion)
        chosen = choose(scores)
        if len(settings) > 1:
            lines += ["", f"**{s}**"]
        lines += ["", "| method | point | score |", "|---|---|---|"]
        for g in grids:
            for point, got in scores[g.method]:
                what = ", ".join(f"{k}={x:g}" for k, x in point.items())
                text = (
                    f"{criterion.shown(statistics.fmean(got))} "
                    f"({', '.join(criterion.shown(x) for x in got)})"
                    if got
                    else "- (no result: diverged or failed)"
                )
                if point == chosen[g.method]:
                    what, text = f"**{what}**", f"**{text}**"
                lines.append(f"| {g.method} | {what} | {text} |")
        picked = [
            f"{g.method} " + ", ".join(f"{k}={x:g}" for k, x in pick.items())
            for g in grids
            if (pick := chosen[g.method]) is not None
        ]
        if picked:
            lines += ["", "Chosen: " + "; ".join(picked) + "."]
        edges = [
            f"{g.method} ({', '.join(e)})"
            for g in grids
            if (pick := chosen[g.method]) is not None and (e := g.edge(pick))
        ]
        if edges:
            lines += [
                "",
                f"At an edge of its grid: {', '.join(edges)}; a wider grid may choose "
                "otherwise, and the evaluating report leaves the claims that read it undecided.",
            ]
    return "\n".join(lines)


def tuned(preset: str, path: Path = TUNED_FILE) -> dict[str, Any]:
    """The choices the package ships for ``preset`` (``tuned.json``: the ``choices.json`` of
    its tuning preset's committed report); a ConfigError when there are none."""
    try:
        entry = json.loads(path.read_text())[preset]
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(
            f"no tuned values for preset {preset} in {path} ({type(e).__name__}): run its "
            "tuning preset and copy its choices.json there"
        ) from None
    return entry


__all__ = [
    "BUDGET_KEYS",
    "TUNED_FILE",
    "TUNING_SEED",
    "VAL_FRACTION",
    "Criterion",
    "Grid",
    "check_budgets",
    "choices",
    "choose",
    "grid_points",
    "method_grids",
    "scores_of",
    "tuned",
    "tuning_paragraph",
    "tuning_seeds",
]
