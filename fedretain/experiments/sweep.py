"""``fedretain sweep``: one experiment over a grid of settings and seeds, in one report.

``fedretain sweep exp.toml KEY=VALUE ... --grid algo.mu=0.001,0.01,0.1 --grid lr=[0.05, 0.1]
--seeds 3 --out DIR`` runs every point of the grid (the product of the ``--grid`` axes) with
every seed, each into ``DIR/<point>/seed<k>/`` (the results folder of ``fedretain run``, its
output in ``run.log``, what became of it in ``status.json``), then compares the finished runs in
``DIR/report.md`` (:func:`fedretain.experiments.report.compare`: each point's mean over the
seeds, its curves) and lists the runs that failed or diverged.

The runs go as :mod:`fedretain.experiments.reproduce` runs its presets' (the same planning and
running): ``--jobs N`` local processes, or Ray tasks with ``--ray [ADDRESS]``; finished runs are
skipped and interrupted ones continued from their checkpoints, so the same command again picks up
where a killed sweep stopped; a folder holding a run of other settings is refused.

An axis is ``KEY=v1,v2,...`` (each value read as TOML, as ``KEY=VALUE`` is) or ``KEY=[v1, v2]``
(a TOML list, for values that hold commas themselves: ``--grid 'engine.devices=[["cpu"], "all"]'``).
"""

from __future__ import annotations

import itertools
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedretain.errors import ConfigError
from fedretain.experiments.presets.plan import RunSpec, slug
from fedretain.experiments.reproduce.cluster import RayCluster, cluster_settings
from fedretain.experiments.reproduce.jobs import (
    THREADS,
    Job,
    as_args,
    job_state,
    read_status,
    run_jobs,
)
from fedretain.files import atomic_write_text
from fedretain.recipe.config import config_values, load_config, parse_value, toml_text


@dataclass(frozen=True)
class Axis:
    """One ``--grid`` axis: a config key and its values."""

    key: str
    values: tuple[Any, ...]


def parse_axis(text: str) -> Axis:
    """``KEY=v1,v2,...`` or ``KEY=[v1, v2, ...]`` as an :class:`Axis` (ConfigError otherwise)."""
    key, sep, rest = text.partition("=")
    key, rest = key.strip(), rest.strip()
    if not sep or not key or not rest:
        raise ConfigError(
            f"cannot read --grid '{text}': it takes KEY=v1,v2,... (or KEY=[v1, v2] as TOML), "
            "e.g. --grid algo.mu=0.001,0.01"
        )
    if rest.startswith("["):
        try:
            values = tomllib.loads(f"v = {rest}")["v"]
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"--grid {key}: {rest} is not a TOML list ({e})") from None
    else:
        values = [parse_value(v.strip()) for v in rest.split(",")]
    texts = [toml_text(v) for v in values]
    if len(set(texts)) < len(texts) or not values:
        raise ConfigError(f"--grid {key}: give each value once, got {rest}")
    return Axis(key, tuple(values))


def points(axes: list[Axis]) -> list[dict[str, Any]]:
    """Every point of the grid: one value per axis, in the order the axes and values came."""
    keys = [a.key for a in axes]
    if len(set(keys)) < len(keys):
        raise ConfigError(f"--grid names a key twice: {', '.join(keys)}")
    return [
        dict(zip(keys, combo, strict=True))
        for combo in itertools.product(*(a.values for a in axes))
    ]


def label(point: dict[str, Any]) -> str:
    """A point's name in the report: ``algo.mu=0.01 lr=0.1``."""
    return " ".join(as_args(point)) or "base"


def plan_sweep(
    config: str | None,
    overrides: list[str],
    axes: list[Axis],
    out: Path,
    seeds: int | None = None,
    threads: int = THREADS,
) -> list[Job]:
    """The sweep's runs, every setting checked before anything runs, each with its state read
    from its folder (see :func:`fedretain.experiments.reproduce.jobs.job_state`)."""
    if seeds is not None and seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {seeds}")
    if seeds is not None and any(a.key == "seed" for a in axes):
        raise ConfigError("--seeds and --grid seed=... both choose the seeds: give one of them")
    grid = points(axes)
    folders = {slug(label(p)) for p in grid}
    if len(folders) < len(grid):
        raise ConfigError("two grid points share a folder name: make their values differ more")
    base = config_values(config, overrides)
    jobs = []
    for point in grid:
        name = label(point)
        for seed in range(seeds) if seeds else [None]:
            values = {**base, **point, "name": name, "threads": threads}
            if seed is not None:
                values["seed"] = seed
            args = as_args(values)
            cfg = load_config(None, args)  # every point checked before anything runs
            folder = out / slug(name) / f"seed{cfg.seed}"
            spec = RunSpec("sweep", name, cfg.seed, point)
            jobs.append(Job("sweep", spec, args, folder, job_state(folder, cfg)))
    return jobs


def sweep(
    config: str | None,
    overrides: list[str],
    axes: list[Axis],
    out: str | Path,
    seeds: int | None = None,
    jobs: int = 1,
    cluster: RayCluster | None = None,
    echo: Callable[[str], None] = print,
) -> tuple[Path, int]:
    """Run the sweep and write ``out/report.md``; returns its path and how many runs failed or
    diverged (no result from them)."""
    from fedretain.experiments.report import compare

    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    out = Path(out)
    if cluster is not None:
        overrides = cluster_settings(cluster, jobs, overrides, echo)
    planned = plan_sweep(
        config, overrides, axes, out, seeds, cluster.threads if cluster else THREADS
    )
    grid = len({j.spec.method for j in planned})
    echo(f"{len(planned)} run(s): {grid} grid point(s) x {len(planned) // grid} seed(s)")
    run_jobs(planned, jobs, echo, cluster)
    status = {j.folder: read_status(j.folder) for j in planned}  # none: finished before
    finished = [f for f, s in status.items() if s.get("state", "finished") == "finished"]
    lost = {f: s for f, s in status.items() if f not in finished}
    report = out / "report.md"
    if finished:
        compare(finished, out, allow_mixed=True)
    text = report.read_text() if finished else "# Sweep\n\nNo run finished.\n"
    if lost:
        text += "\n## Runs that failed or diverged (no result from them)\n\n"
        for folder, s in lost.items():
            text += f"- {folder}: {s.get('state', 'failed')}: {s.get('error', '')}\n"
    atomic_write_text(report, text)
    echo(f"report written to {report}")
    return report, len(lost)


__all__ = ["Axis", "label", "parse_axis", "plan_sweep", "points", "sweep"]
