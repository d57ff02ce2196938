"""``fedretain sweep``: one experiment over a grid of settings and seeds, in one report.

``fedretain sweep exp.toml KEY=VALUE ... --grid algo.mu=0.001,0.01,0.1 --grid lr=[0.05, 0.1]
--seeds 3 --out DIR`` runs every point of the grid (the product of the ``--grid`` axes) with
every seed, each into ``DIR/<point>/seed<k>/`` (the results folder of ``fedretain run``, its
output in ``run.log``, what became of it in ``status.json``), then compares the finished runs in
``DIR/report.md`` (:func:`fedretain.studies.compare.compare`: each point's mean over the
seeds, its curves) and lists the runs that failed or diverged.

The runs go as :mod:`fedretain.studies.reproduce` runs its presets' (the same planning and
running): ``--jobs N`` local processes, or Ray tasks with ``--ray [ADDRESS]``; finished runs are
skipped and interrupted ones continued from their checkpoints, so the same command again picks up
where a killed sweep stopped; a folder holding a run of other settings is refused.

An axis is ``KEY=v1,v2,...`` (each value read as TOML, as ``KEY=VALUE`` is) or ``KEY=[v1, v2]``
(a TOML list, for values that hold commas themselves: ``--grid 'engine.devices=[["cpu"], "all"]'``).
``threads`` and ``name`` are no axis: every run uses one torch thread (runs go in parallel with
``--jobs`` instead) and is named after its point. A sweep of more than :data:`MAX_RUNS` runs is
refused before any config is built, unless ``max_runs`` (``--max-runs``) allows it.

The folder: a sweep writes only into a new or empty folder, or an earlier sweep's. It refuses
a folder holding a run at its top (``config.toml``, ``summary.json``) or anything it did not
write there: ``DIR/sweep.json`` (:data:`MANIFEST`) lists the points' folders it made, and the
report's files are its own. ``overwrite`` (``--overwrite``) starts the sweep over, removing only
those (and refusing, with nothing removed, where a point's folder holds a file no run writes).
"""

from __future__ import annotations

import itertools
import math
import re
import shutil
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedretain.errors import ConfigError, OutputError
from fedretain.files import LOCK, atomic_write_text, driver_lock, read_json, write_json
from fedretain.recipe.config import config_values, load_config, parse_value, toml_text
from fedretain.studies.presets.plan import RunSpec, slug
from fedretain.studies.reproduce.cluster import RayCluster, cluster_settings
from fedretain.studies.reproduce.jobs import (
    THREADS,
    Job,
    as_args,
    job_state,
    read_status,
    run_jobs,
)

MAX_RUNS = 10_000  # more runs in one sweep: refused unless max_runs (--max-runs) allows them
MANIFEST = "sweep.json"  # in the sweep's folder: the points' folders it made there
REPORT_FILES = ("report.md", "report.json", "accuracy_vs_round.png", "accuracy_vs_bytes.png")
# keys that are no axis: why (they do not change results, or the sweep sets them)
NOT_AXES = {
    "threads": "threads do not change results, and every run of a sweep uses one torch thread; "
    "run more at a time with --jobs N",
    "name": "the sweep names each run after its point",
    "stop_after": "stop_after pauses runs and never changes their results; give it as a "
    "setting for every run (KEY=VALUE after the config)",
}


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
    if key in NOT_AXES:
        raise ConfigError(f"--grid {key}: {key} cannot be an axis of a sweep: {NOT_AXES[key]}")
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


def check_size(axes: list[Axis], seeds: int | None = None, max_runs: int = MAX_RUNS) -> int:
    """The number of runs of the sweep (points x seeds), computed without building them; a
    ConfigError when it is more than ``max_runs``."""
    if seeds is not None and seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {seeds}")
    if max_runs < 1:
        raise ConfigError(f"--max-runs must be >= 1, got {max_runs}")
    runs = math.prod(len(a.values) for a in axes) * (seeds or 1)
    if runs > max_runs:
        raise ConfigError(
            f"the sweep has {runs:,} runs ({' x '.join(str(len(a.values)) for a in axes)} "
            f"point(s) x {seeds or 1} seed(s)), more than --max-runs {max_runs:,}; give fewer "
            f"values or seeds, or pass --max-runs {runs} to run them all"
        )
    return runs


def plan_sweep(
    config: str | None,
    overrides: list[str],
    axes: list[Axis],
    out: Path,
    seeds: int | None = None,
    threads: int = THREADS,
    max_runs: int = MAX_RUNS,
    fresh: bool = False,
) -> list[Job]:
    """The sweep's runs, every setting checked before anything runs, each with its state read
    from its folder (see :func:`fedretain.studies.reproduce.jobs.job_state`; ``fresh``:
    every run starts over, its folder unread). More than ``max_runs`` runs are refused first
    (:func:`check_size`)."""
    check_size(axes, seeds, max_runs)
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
            state = "fresh" if fresh else job_state(folder, cfg)
            jobs.append(Job("sweep", spec, args, folder, state))
    return jobs


def _is_point(path: Path) -> bool:
    """A folder of ``seed<k>`` folders: a point of a sweep written before :data:`MANIFEST`."""
    if path.is_symlink() or not path.is_dir():
        return False
    entries = list(path.iterdir())
    return bool(entries) and all(p.is_dir() and re.fullmatch(r"seed\d+", p.name) for p in entries)


def _is_temporary(path: Path) -> bool:
    """An atomic write's temporary file, or the lock of the driver writing the folder."""
    return path.name == LOCK or (path.name[:1] == "." and path.suffix == ".tmp")


def written(out: Path) -> set[str]:
    """The names at the top of ``out`` that a sweep wrote: the points' folders its
    :data:`MANIFEST` lists (an older sweep's: its folders of ``seed<k>`` folders) and, where
    there are any, the report's files and the manifest."""
    manifest = out / MANIFEST
    if manifest.is_file():
        try:
            names = read_json(manifest)["points"]
            if not all(isinstance(n, str) for n in names):
                raise TypeError("a name is not a string")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise OutputError(
                f"{manifest} cannot be read ({e}); it lists what a sweep wrote in {out}: "
                "choose another --out (nothing was written)"
            ) from None
    else:
        names = [p.name for p in out.iterdir() if _is_point(p)]
    return {*names, *REPORT_FILES, MANIFEST} if names or manifest.is_file() else set()


def check_sweep_out(out: Path) -> set[str]:
    """An OutputError unless a sweep may write ``out``: a new or empty folder, or one holding
    only what a sweep wrote there (:func:`written`), which it returns."""
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file, not a folder; choose a new or empty folder")
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if not entries:
        return set()
    run = [n for n in ("config.toml", "summary.json") if (out / n).exists()]
    if run:
        raise OutputError(
            f"{out} holds a fedretain run ({run[0]}); a sweep writes its runs into the "
            "subfolders of a new or empty folder, or an earlier sweep's: choose another --out "
            "(nothing was written)"
        )
    ours = written(out)
    others = [p.name for p in entries if p.name not in ours and not _is_temporary(p)]
    if others:
        raise OutputError(
            f"{out} holds {', '.join(others[:3])}, which no sweep wrote there; a sweep writes "
            "into a new or empty folder, or an earlier sweep's: choose another --out "
            "(nothing was written)"
        )
    return ours


def clear_sweep(out: Path, ours: set[str]) -> None:
    """Remove what a sweep wrote in ``out`` (``ours``, from :func:`check_sweep_out`): every
    point folder's runs are checked first, and where one holds a file no run writes nothing
    is removed (an OutputError names it)."""
    from fedretain.experiments.outputs import strangers

    folders = [out / n for n in sorted(ours) if (out / n).is_dir() and n not in REPORT_FILES]
    for folder in folders:
        for entry in sorted(folder.iterdir()):
            others = strangers(entry) if entry.is_dir() and not entry.is_symlink() else []
            if others or not entry.is_dir() or entry.is_symlink():
                what = entry / others[0] if others else entry
                raise OutputError(
                    f"{what} was not written by a sweep; --overwrite removes only a sweep's "
                    "own files: move it out, or choose another --out (nothing was removed)"
                )
    for folder in folders:
        shutil.rmtree(folder)
    for name in (*REPORT_FILES, MANIFEST):
        (out / name).unlink(missing_ok=True)


def sweep(
    config: str | None,
    overrides: list[str],
    axes: list[Axis],
    out: str | Path,
    seeds: int | None = None,
    jobs: int = 1,
    cluster: RayCluster | None = None,
    echo: Callable[[str], None] = print,
    max_runs: int = MAX_RUNS,
    overwrite: bool = False,
) -> tuple[Path, int]:
    """Run the sweep and write ``out/report.md``; returns its path and how many runs failed or
    diverged (no result from them). ``overwrite``: start over, removing what an earlier sweep
    wrote in ``out`` (and nothing else). A second driver on ``out`` is refused while this
    one runs (:func:`~fedretain.files.driver_lock`)."""
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    out = Path(out)
    check_size(axes, seeds, max_runs)  # cheap: before any config is built
    ours = check_sweep_out(out)
    if cluster is not None:
        overrides = cluster_settings(cluster, jobs, overrides, echo)
    threads = cluster.threads if cluster else THREADS
    planned = plan_sweep(config, overrides, axes, out, seeds, threads, max_runs, overwrite)
    with driver_lock(out, "sweep"):
        return _sweep(out, ours, planned, overwrite, jobs, echo, cluster)


def _sweep(
    out: Path,
    ours: set[str],
    planned: list[Job],
    overwrite: bool,
    jobs: int,
    echo: Callable[[str], None],
    cluster: RayCluster | None,
) -> tuple[Path, int]:
    """The sweep's runs and report, ``out`` locked (:func:`run_sweep`)."""
    from fedretain.studies.compare import compare

    if overwrite:
        clear_sweep(out, ours)
        ours = set()
    made = sorted({*(ours - {*REPORT_FILES, MANIFEST}), *(j.folder.parent.name for j in planned)})
    write_json(out / MANIFEST, {"points": made})
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


__all__ = [
    "MANIFEST",
    "MAX_RUNS",
    "Axis",
    "check_size",
    "check_sweep_out",
    "label",
    "parse_axis",
    "plan_sweep",
    "points",
    "sweep",
]
