"""``fedretain reproduce NAME --out DIR``: run a preset's plan and write its report.

The presets (:mod:`fedretain.studies.presets`) declare the runs, the paper's numbers and
the paper's claims; :func:`reproduce` plans and runs them (:mod:`.jobs`) and writes
``DIR/report.md`` (:mod:`.report`):

- each run goes to ``DIR/<setting>/<method>/seed<k>/`` (the results folder of
  ``fedretain run``, with the run's output in ``run.log``): a folder with ``summary.json`` is
  skipped, one with a checkpoint continued, so an interrupted ``reproduce`` picks up where it
  stopped; ``jobs`` runs at a time, each in its own process with one torch thread, or as
  tasks on a Ray cluster (``--ray``, :mod:`.cluster`); a run that fails is reported and the
  others go on;
- what became of each run is kept with it: ``status.json`` (``state``: finished, diverged or
  failed; the error; the CPU it ran on), and a diverged run's ``summary.json`` has
  ``stopped``. A diverged run (NaN/Inf stopped it) is finished for good and never rerun; a
  failed one is tried again by the next invocation. Neither is a result: the report lists
  them, and leaves them out of every mean, ranking and verdict (:mod:`.results`);
- the report: per setting the paper's numbers beside ours (mean ± std over the seeds and each
  seed's value), accuracy-over-round plots (:mod:`.figures`), each claim with its verdict (on
  the means, its per-seed count, and whether its gaps exceed the seeds' spread by
  :func:`fedretain.metrics.spread.separated`: :mod:`.claims`) and, where it did not hold, the
  most likely reason; the CPU the runs ran on; and the command line that reproduces it.
  Several presets at once go to ``DIR/<preset>/`` with one ``DIR/report.md``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedretain.errors import ConfigError
from fedretain.files import driver_lock
from fedretain.studies.presets import PRESETS, SCALES
from fedretain.studies.reproduce.claims import claims_section, judge, judge_all
from fedretain.studies.reproduce.cluster import RayCluster, cluster_settings, node_paths
from fedretain.studies.reproduce.jobs import (
    THREADS,
    Job,
    Section,
    as_args,
    changed_keys,
    cpu_text,
    job_state,
    machine,
    plan_section,
    resolve_data,
    run_jobs,
    run_one,
)
from fedretain.studies.reproduce.markdown import cell, fmt
from fedretain.studies.reproduce.report import write_report, write_reports
from fedretain.studies.reproduce.results import Outcome, Results, View, outcomes_of


@dataclass
class Reproduced:
    """What :func:`reproduce` wrote, and how many runs have no result because they diverged
    or failed (the CLI then exits with status 1)."""

    report: Path
    diverged: int
    failed: int

    def problem(self) -> str:
        return (
            f"{self.failed} run(s) failed and {self.diverged} diverged: no result from them; "
            f"the report lists them under 'Runs that failed or diverged' ({self.report})"
        )


def preset_names(names: list[str], scale: str) -> list[str]:
    """``names`` without repeats; ``["all"]``: every preset that has ``scale`` (``medium``:
    only some). An unknown name, or a named preset without ``scale``, stops with one line."""
    if names == ["all"]:
        return [n for n, entry in PRESETS.items() if scale in entry.meta["seeds"]]
    names = list(dict.fromkeys(names))
    for name in names:
        have = PRESETS.get(name).meta["seeds"]  # an unknown name: one line naming the choices
        if scale not in have:
            raise ConfigError(f"preset {name} has no scale '{scale}'; it has: {', '.join(have)}")
    return names


def reproduce(
    names: list[str],
    out: str | Path,
    scale: str = "small",
    seeds: int | None = None,
    jobs: int = 1,
    data_dirs: list[str] | None = None,
    extra: list[str] | None = None,
    echo: Callable[[str], None] = print,
    cluster: RayCluster | None = None,
    report_only: bool = False,
    stop_after: float | None = None,
) -> Reproduced:
    """Run the presets ``names`` (``all``: every preset) at ``scale`` into ``out`` and write
    ``out/report.md``; returns its path and how many runs (of this invocation or an earlier
    one) diverged and failed. ``extra``: KEY=VALUE settings for every run. ``cluster``: the
    runs go to Ray as tasks instead of ``jobs`` local processes (:mod:`.cluster`).
    ``report_only``: run nothing, rewrite the report from the run folders as they are (a
    committed report from its committed results). ``stop_after``: seconds for this invocation;
    each run pauses (``stop_after``, its remaining time when it starts) and one not started
    in time is left for the next invocation."""
    if scale not in SCALES:
        raise ConfigError(f"unknown scale '{scale}'; choose one of: {', '.join(SCALES)}")
    if seeds is not None and seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {seeds}")
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    if stop_after is not None and not (math.isfinite(stop_after) and stop_after > 0):
        raise ConfigError(f"--stop-after must be a number of seconds > 0, got {stop_after}")
    deadline = time.time() + stop_after if stop_after else None
    names = preset_names(names, scale)
    out = Path(out)
    several = len(names) > 1
    data_dirs, extra = list(data_dirs or []), list(extra or [])
    if cluster is not None:
        extra = cluster_settings(cluster, jobs, extra, echo)
        data_dirs = node_paths(data_dirs)
    threads = cluster.threads if cluster else THREADS
    sections = []
    for name in names:
        folder = out / name if several else out
        section = plan_section(name, folder, scale, seeds, data_dirs, extra, out, several, threads)
        if section.data.note and section.plan.base.get("dataset") == section.data.name:
            echo(f"{name}: {section.data.note}")
        if section.data.missing:
            echo(f"{name}: not run: {section.data.missing}")
        sections.append(section)
    todo = [j for s in sections for j in s.jobs]
    with driver_lock(out, "reproduce"):
        if report_only:
            waiting = sum(j.state in ("fresh", "resume") for j in todo)
            if waiting:
                echo(f"--report-only: {waiting} run(s) not finished are reported as such")
            errors: dict[Path, str] = {}
        else:
            errors = run_jobs(todo, jobs, echo, cluster, deadline)
        report, counts = write_reports(sections, errors, out)
    echo(f"report written to {report}")
    done = Reproduced(report, counts["diverged"], counts["failed"])
    if done.diverged or done.failed:
        echo(done.problem())
    return done


def list_presets() -> list[str]:
    """One line per preset: name, description, the paper's dataset, the small-scale estimate
    and the paper scale's on one H100 (from its FLOPs: :mod:`.cost`)."""
    from fedretain.studies.reproduce.cost import read_costs

    costs = read_costs()
    width = max(len(n) for n in PRESETS)
    out = []
    for name, entry in PRESETS.items():
        data = entry.meta["dataset"]
        if entry.meta.get("standin"):
            data += f" ({entry.meta['standin']} stands in)"
        paper = f"; paper on one H100: {costs[name].text()}" if name in costs else ""
        out.append(
            f"{name:<{width}}  {entry.description}; data: {data}; "
            f"small: {entry.meta['estimate']}{paper}"
        )
    return out


__all__ = [
    "Job",
    "Outcome",
    "RayCluster",
    "Reproduced",
    "Results",
    "Section",
    "View",
    "as_args",
    "cell",
    "changed_keys",
    "claims_section",
    "cpu_text",
    "fmt",
    "job_state",
    "judge",
    "judge_all",
    "list_presets",
    "machine",
    "outcomes_of",
    "plan_section",
    "preset_names",
    "reproduce",
    "resolve_data",
    "run_jobs",
    "run_one",
    "write_report",
]
