"""Tuning methods alike: each method's main hyper-parameter chosen on a validation split.

The way the papers choose (FedReg's, GradMA's and TCE's grid searches): every method gets a
:class:`Grid` of the **same number of points**, every point is trained with the **same**
rounds, clients, local work and seeds (only the grid's key differs from the shared base),
on the clients' training data less a held-out validation split (``val_fraction`` of each
client's samples, :func:`fedretain.data.partition.train_val_split`), and the point with the
best **final validation accuracy** (mean over the seeds) is chosen. The test set plays no part
in the choice.

A run reports test accuracy only, so the validation accuracy is measured here, from the run's
final checkpoint: the global model of the last round on the union of every client's held-out
samples (:func:`validation_accuracy`, kept in the run folder's ``validation.json``).

A preset builds the runs from :func:`grid_points` and reports them with
:func:`tuning_paragraph` (the grid, every point's validation score, the chosen values);
``fedretain reproduce demo-tune`` is the demo's study.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedretain.errors import ConfigError, DataError
from fedretain.files import read_json, write_json

VAL_FRACTION = 0.1  # of each client's samples held out (TCE's split)
# keys a grid may not set: they are the budget, the same for every point, and the local
# learning rate, the setting's for every method (a method tuning it alone would gain from it)
BUDGET_KEYS = frozenset(
    {"rounds", "clients", "clients_per_round", "local_epochs", "local_steps", "batch_size"}
    | {"seed", "val_fraction", "dataset", "model", "partition", "lr"}
)


@dataclass(frozen=True)
class Grid:
    """A method's grid: ``overrides`` make the method (``{"algorithm": "fedprox"}``), ``key``
    (a config key, ``algo.mu``) takes each of ``values``."""

    method: str
    overrides: dict[str, Any]
    key: str
    values: tuple[float, ...]

    def label(self, value: float) -> str:
        return f"{self.method} {self.key}={value:g}"


def check_budgets(grids: Iterable[Grid]) -> None:
    """Every grid has as many points as the others and sets no budget key (ConfigError)."""
    grids = list(grids)
    sizes = {g.method: len(g.values) for g in grids}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{m} {n}" for m, n in sizes.items())
        raise ConfigError(f"tuning grids differ in size ({listed}); give every method as many")
    for g in grids:
        fixed = sorted(BUDGET_KEYS & {g.key, *g.overrides})
        if fixed:
            raise ConfigError(
                f"the grid of {g.method} sets {', '.join(fixed)}, the budget every point shares; "
                "tune another key"
            )


def grid_points(grids: Iterable[Grid], seeds: list[int]) -> list[tuple[Grid, float, int]]:
    """Every (grid, value, seed) to run, the budgets checked (:func:`check_budgets`); a preset
    makes each a run with the grid's overrides and ``key=value``."""
    grids = list(grids)
    check_budgets(grids)
    return [(g, x, seed) for g in grids for x in g.values for seed in seeds]


def validation_accuracy(folder: str | Path) -> float:
    """Final accuracy of the run in ``folder`` on its validation split: the global model of
    its last checkpoint (the run must have ``val_fraction > 0`` and checkpoint its last
    round) on every client's held-out samples. Kept in ``folder/validation.json``."""
    from fedretain.experiments.checkpoint import load_for_resume
    from fedretain.recipe.config import load_config
    from fedretain.recipe.federation import build_federation

    folder = Path(folder)
    cache = folder / "validation.json"
    cfg = load_config(folder / "config.toml")
    if cache.is_file():
        kept = read_json(cache)
        if kept.get("round") == cfg.rounds:
            return kept["accuracy"]
    if cfg.val_fraction <= 0:
        raise ConfigError(f"{folder} was trained without a validation split; set val_fraction")
    fed = build_federation(cfg)
    ckpt = load_for_resume(folder, cfg, fed.device)
    if ckpt is None or ckpt.round != cfg.rounds:
        raise DataError(
            f"{folder} has no checkpoint of its last round; run it to the end with "
            "checkpoint_every > 0"
        )
    assert fed.val_parts is not None
    idx = torch.from_numpy(np.concatenate(fed.val_parts))
    params, buffers = fed.algorithm.global_model(ckpt.server)
    acc, loss = fed.task.evaluate(
        params, buffers, fed.dataset.x_train[idx], fed.dataset.y_train[idx], fed.eval_batch
    )
    write_json(cache, {"round": cfg.rounds, "accuracy": acc, "loss": loss, "samples": len(idx)})
    return acc


def validation_scores(
    v: Any, setting: str, grids: Iterable[Grid]
) -> dict[str, dict[float, list[float]]]:
    """method -> grid value -> the validation accuracy of each seed that finished. ``v`` is
    the report's view of the results (its ``results.run`` gives each run's folder)."""
    results: Any = getattr(v, "results", None)
    if results is None:
        raise TypeError("validation_scores needs the report's view of the results")
    out: dict[str, dict[float, list[float]]] = {}
    for g in grids:
        out[g.method] = {}
        for x in g.values:
            runs = (results.run(setting, g.label(x), s) for s in results.seeds)
            out[g.method][x] = [validation_accuracy(r.path) for r in runs if r is not None]
    return out


def choose(scores: dict[str, dict[float, list[float]]]) -> dict[str, float | None]:
    """Per method, the value of the best mean validation accuracy over the seeds (the first
    in grid order on a tie); only points where every seed finished compete (None: none did)."""
    chosen: dict[str, float | None] = {}
    for method, points in scores.items():
        n = max((len(s) for s in points.values()), default=0)
        means = {x: statistics.fmean(s) for x, s in points.items() if s and len(s) == n}
        chosen[method] = max(means, key=lambda x: means[x]) if means else None
    return chosen


def tuning_paragraph(grids: list[Grid], v: Any, plan: Any) -> str:
    """The grid of each method, every point's validation accuracy (mean over the seeds, each
    seed's value) and the chosen value; use as ``functools.partial(tuning_paragraph, grids)``
    for a :class:`~fedretain.experiments.presets.Plan`'s paragraph (``v``: the report's view
    of the results)."""
    setting = plan.settings()[0]
    scores = validation_scores(v, setting, grids)
    chosen = choose(scores)
    lines = [
        "Each point's final accuracy on the validation split (the clients' held-out "
        f"{VAL_FRACTION:.0%} of their training data; mean over the seeds, each seed's value in "
        "brackets); the chosen value, the best mean, in bold. The test set plays no part.",
        "",
        "| method | key | "
        + " | ".join(f"point {i + 1}" for i in range(len(grids[0].values)))
        + " | chosen |",
        "|---|---|" + "---|" * len(grids[0].values) + "---|",
    ]
    for g in grids:
        cells = []
        for x in g.values:
            s = scores[g.method][x]
            text = f"{x:g}: " + (
                f"{statistics.fmean(s):.4f} ({', '.join(f'{a:.4f}' for a in s)})" if s else "-"
            )
            cells.append(f"**{text}**" if x == chosen[g.method] else text)
        pick = chosen[g.method]
        lines.append(
            f"| {g.method} | `{g.key}` | "
            + " | ".join(cells)
            + f" | {'-' if pick is None else f'{pick:g}'} |"
        )
    picked = [
        f"{g.method} {g.key}={chosen[g.method]:g}" for g in grids if chosen[g.method] is not None
    ]
    if picked:
        lines += ["", "Chosen: " + "; ".join(picked) + "."]
    edges = [g.method for g in grids if chosen[g.method] in (min(g.values), max(g.values))]
    if edges:
        lines += [
            "",
            f"At an edge of its grid: {', '.join(edges)}; a wider grid may choose otherwise.",
        ]
    return "\n".join(lines)


__all__ = [
    "BUDGET_KEYS",
    "VAL_FRACTION",
    "Grid",
    "check_budgets",
    "choose",
    "grid_points",
    "tuning_paragraph",
    "validation_accuracy",
    "validation_scores",
]
