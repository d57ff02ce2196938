"""``fedretain reproduce NAME --out DIR``: run a preset's plan and write its report.

The presets (:mod:`fedretain.experiments.presets`) declare the runs, the paper's numbers and
the paper's claims; this module runs them and writes ``DIR/report.md``:

- each run goes to ``DIR/<setting>/<method>/seed<k>/`` (the results folder of
  ``fedretain run``, with the run's output in ``run.log``): a folder with ``summary.json`` is
  skipped, one with a checkpoint continued, so an interrupted ``reproduce`` picks up where it
  stopped; ``jobs`` runs at a time, each in its own process with one torch thread; a run that
  fails is reported and the others go on;
- what became of each run is kept with it: ``status.json`` (``state``: finished, diverged or
  failed; the error; the CPU it ran on), and a diverged run's ``summary.json`` has
  ``stopped``. A diverged run (NaN/Inf stopped it) is finished for good and never rerun; a
  failed one is tried again by the next invocation. Neither is a result: the report lists
  them, and leaves them out of every mean, ranking and verdict;
- the report: per setting the paper's numbers beside ours (mean ± std over the seeds and each
  seed's value), accuracy-over-round plots, each claim with its verdict (on the means, its
  per-seed count, and whether its gaps exceed the seeds' spread by
  :func:`fedretain.metrics.spread.separated`) and, where it did not hold, the most likely
  reason; the CPU the runs ran on; and the command line that reproduces it. Several presets
  at once go to ``DIR/<preset>/`` with one ``DIR/report.md``.
"""

from __future__ import annotations

import itertools
import json
import platform
import shlex
import statistics
import traceback
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import redirect_stderr, redirect_stdout, suppress
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from fedretain.engines.round import DivergenceError
from fedretain.errors import ConfigError, DataError, FedRetainError
from fedretain.experiments.presets import (
    INF,
    PRESETS,
    SCALES,
    Claim,
    Data,
    Plan,
    RunSpec,
    comparisons,
    slug,
)
from fedretain.experiments.privacy import PrivacyStudy, Study, study_args, table_rows
from fedretain.experiments.report import RunResult, load_run
from fedretain.files import atomic_write_text, read_json, read_jsonl, save_figure, write_json
from fedretain.metrics.accuracy import r_a, rounds_to
from fedretain.metrics.spread import separated
from fedretain.recipe.config import Config, load_config, parse_value, toml_text

THREADS = 1  # torch threads of every run: runs go in parallel instead (--jobs)
# the slowest algorithms start first, so that parallel jobs finish together (x a FedAvg run)
SLOW = {"gradma": 8.0, "gradma-w": 7.0, "fedreg": 6.0, "fedcurv": 2.0, "mifa": 1.5}
# a sweep's series "acts" once its accuracy curve sits this far from the baseline's, on average
# over the evaluated rounds and seeds (the largest gap at one round measures chaos instead:
# runs differing in anything drift 2-3 points apart at some round)
ACTS = 0.005


@dataclass
class Job:
    """One planned run of a preset: its config arguments, folder and state."""

    preset: str
    spec: RunSpec
    args: list[str]  # KEY=VALUE, as `fedretain run` takes them
    folder: Path
    state: str  # done | resume | fresh


@dataclass
class Section:
    """One preset of an invocation: its plan, data, folder and jobs."""

    name: str
    plan: Plan
    data: Data
    folder: Path
    jobs: list[Job]
    command: str


# ------------------------------------------------------------------------------- planning


def as_args(values: dict[str, Any]) -> list[str]:
    """Flat config keys as ``KEY=VALUE`` arguments that ``load_config`` reads back as they are."""
    out = []
    for key, value in values.items():
        if isinstance(value, str):
            text = value if parse_value(value) == value else json.dumps(value)
        else:
            text = toml_text(value)
        out.append(f"{key}={text}")
    return out


def resolve_data(paper: str, standin: str | None, data_dirs: list[str]) -> Data:
    """The paper's dataset from ``--data-dir`` (``DIR`` or ``NAME=DIR``) or its default folder;
    else the stand-in; else a :class:`Data` that says which files are missing."""
    from fedretain.data.datasets import load_dataset

    named = dict(d.split("=", 1) for d in data_dirs if "=" in d)
    folders = [named[paper]] if paper in named else [d for d in data_dirs if "=" not in d] + [""]
    error = ""
    for folder in folders:
        try:
            samples = len(load_dataset(paper, folder or None).y_train)
            return Data(paper, folder, paper, samples=samples)
        except (DataError, ConfigError) as e:
            error = str(e)
    if standin:
        try:
            samples = len(load_dataset(standin).y_train)
            note = f"{standin} stands in for {paper}: {error}"
            return Data(standin, "", paper, note=note, samples=samples)
        except (DataError, ConfigError) as e:
            error = f"{error}; the stand-in {standin} is missing too: {e}"
    return Data(paper, "", paper, missing=error)


def job_state(folder: Path, cfg: Config) -> str:
    """``done`` (summary.json of at least the planned rounds, or of a run that diverged),
    ``resume`` (a checkpoint to continue or extend) or ``fresh`` (a run that failed is tried
    again); a ConfigError when the folder holds other settings."""
    if (folder / "config.toml").is_file():
        differ = changed_keys(folder, cfg)
        if differ:
            raise ConfigError(
                f"{folder} holds a run with other settings ({', '.join(differ)}); delete it "
                "or choose another --out"
            )
    checkpoint = (folder / "checkpoint" / "meta.json").is_file()
    if read_status(folder).get("state") == "failed":
        return "resume" if checkpoint else "fresh"  # tried again
    if (folder / "summary.json").is_file():
        summary = read_json(folder / "summary.json")
        short = summary.get("rounds", 0) < cfg.rounds and "stopped" not in summary
        return "resume" if short and checkpoint else "done"
    return "resume" if checkpoint else "fresh"


def changed_keys(folder: Path, cfg: Config) -> list[str]:
    """The settings (those a resume may not change) in which ``folder``'s run differs."""
    from fedretain.experiments.checkpoint import fingerprint
    from fedretain.recipe.config import config_from_text

    try:
        old = fingerprint(config_from_text((folder / "config.toml").read_text()))
    except FedRetainError:
        return ["config.toml unreadable"]
    new, defaults = fingerprint(cfg), fingerprint(Config())  # a newer key: its default
    return sorted(k for k in set(old) | set(new) if old.get(k, defaults.get(k)) != new.get(k))


def command_line(
    name: str, out: Path, scale: str, seeds: int, data_dirs: list[str], extra: list[str]
) -> str:
    # NAME and the KEY=VALUE settings together: argparse reads one block of positionals
    words = ["fedretain", "reproduce", name, *extra, "--out", str(out), "--scale", scale]
    words += ["--seeds", str(seeds)]
    for d in data_dirs:
        words += ["--data-dir", d]
    return shlex.join(words)


def plan_section(
    name: str,
    folder: Path,
    scale: str,
    seeds: int | None,
    data_dirs: list[str],
    extra: list[str],
    out: Path,
    several: bool,
) -> Section:
    entry = PRESETS.get(name)
    data = resolve_data(entry.meta["dataset"], entry.meta.get("standin"), data_dirs)
    n = seeds or entry.meta["seeds"][scale]
    plan = entry.factory(scale, list(range(n)), data)
    jobs = []
    for spec in plan.runs:
        args = as_args({**plan.base, **spec.overrides, "name": spec.method, "threads": THREADS})
        args += extra
        cfg = load_config(None, args)  # every setting checked before anything runs
        run_folder = folder / spec.folder
        if spec.study is not None:
            study_of(spec.study)  # its options checked too
            state = study_state(run_folder)
        else:
            state = job_state(run_folder, cfg)
        state = "missing" if data.missing else state
        jobs.append(Job(name, spec, args, run_folder, state))
    command = command_line(name, out / name if several else out, scale, n, data_dirs, extra)
    return Section(name, plan, data, folder, jobs, command)


# -------------------------------------------------------------------------------- running


def study_of(options: dict[str, Any]) -> Study:
    """A preset's privacy-study options as :class:`Study` (a ConfigError names a bad one)."""
    options = dict(options)
    if "sigmas" in options:
        options["sigmas"] = tuple(options["sigmas"])
    try:
        return Study(**options)
    except TypeError as e:
        raise ConfigError(f"bad privacy-study option in preset: {e}") from None


def study_state(folder: Path) -> str:
    """``done`` (privacy.json written) or ``resume`` (attacks or runs to reuse) or ``fresh``;
    a study refuses a folder of other settings itself."""
    if (folder / "privacy.json").is_file():
        return "done"
    return "resume" if folder.is_dir() and any(folder.iterdir()) else "fresh"


def run_one(
    args: list[str], folder: str, resume: bool, study: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One run, or one privacy study (in this process or a worker): its output goes to
    ``folder/run.log``; returns the line the progress shows."""
    from fedretain.experiments.run import run_experiment

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "run.log", "a") as log, redirect_stdout(log), redirect_stderr(log):
        try:
            cfg = load_config(None, args)
            if study is not None:
                result = PrivacyStudy(cfg, out, study_of(study)).run()
                accs = ", ".join(
                    f"{k} {v['final_accuracy']:.4f}" for k, v in result["runs"].items()
                )
                return {"line": f"σ* {result['sigma_matched']:g}; final {accs}"}
            summary = run_experiment(cfg, out, progress=None, resume=resume)
        except Exception:
            traceback.print_exc(file=log)
            raise
    return {"line": f"{summary['final_accuracy']:.4f} ({summary['wall_seconds']:.1f} s)"}


def one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text if isinstance(e, FedRetainError) else f"{type(e).__name__}: {text}"


STATUS = "status.json"  # in each run's folder: what became of it (state, error, CPU)


def run_jobs(jobs: list[Job], parallel: int, echo: Callable[[str], None]) -> dict[Path, str]:
    """Run the jobs not done yet, ``parallel`` at a time; returns folder -> error of the runs
    that failed or diverged (the others go on). Each run's ``status.json`` records what
    became of it."""
    todo = [j for j in jobs if j.state in ("fresh", "resume")]
    skipped = sum(j.state == "done" for j in jobs)
    if skipped:
        echo(f"{skipped} run(s) already finished: skipped")
    errors: dict[Path, str] = {}
    cpu = machine()
    for job in todo:  # a status left by an earlier try no longer holds
        (job.folder / STATUS).unlink(missing_ok=True)

    def done(i: int, job: Job, result: dict[str, Any] | None, error: Exception | None) -> None:
        what = f"[{i}/{len(todo)}] {job.preset}: {job.spec.setting} / {job.spec.method} "
        what += f"seed {job.spec.seed}"
        if error is not None:
            state = "diverged" if isinstance(error, DivergenceError) else "failed"
            errors[job.folder] = one_line(error)
            write_json(job.folder / STATUS, {"state": state, "error": errors[job.folder], **cpu})
            echo(f"{what}: {state}: {errors[job.folder]} (log: {job.folder / 'run.log'})")
        else:
            assert result is not None
            write_json(job.folder / STATUS, {"state": "finished", **cpu})
            verb = "continued" if job.state == "resume" else "done" if job.spec.study else "final"
            echo(f"{what}: {verb} {result['line']}")

    if parallel <= 1 or len(todo) <= 1:
        for i, job in enumerate(todo, 1):
            try:
                result = run_one(job.args, str(job.folder), job.state == "resume", job.spec.study)
                done(i, job, result, None)
            except Exception as e:
                done(i, job, None, e)
        return errors
    todo.sort(key=lambda j: -SLOW.get(algorithm_of(j), 1.0))
    with ProcessPoolExecutor(parallel, mp_context=get_context("spawn")) as pool:
        futures = {
            pool.submit(run_one, j.args, str(j.folder), j.state == "resume", j.spec.study): j
            for j in todo
        }
        for i, future in enumerate(as_completed(futures), 1):
            job = futures[future]
            try:
                done(i, job, future.result(), None)
            except Exception as e:
                done(i, job, None, e)
    return errors


def read_status(folder: Path) -> dict[str, Any]:
    """``folder``'s ``status.json`` ({} when absent or unreadable)."""
    with suppress(OSError, ValueError):
        status = read_json(folder / STATUS)
        return status if isinstance(status, dict) else {}
    return {}


def machine() -> dict[str, Any]:
    """This machine's CPU: ``cpu`` (its model name), ``avx512`` (True, False, or None where
    unknown) and ``torch_cpu`` (the instruction set torch's kernels use: its float32 sums,
    and so the numbers of a run, depend on it)."""
    import torch

    model, flags = "", None
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and flags is None:
                flags = value.split()
    return {
        "cpu": model or platform.processor() or platform.machine() or "unknown CPU",
        "avx512": None if flags is None else "avx512f" in flags,
        "torch_cpu": torch.backends.cpu.get_cpu_capability(),
    }


def cpu_text(info: dict[str, Any]) -> str:
    avx = {True: "AVX-512", False: "no AVX-512", None: "AVX-512 unknown"}[info.get("avx512")]
    return f"{info.get('cpu', 'unknown CPU')} ({avx}; torch's kernels: {info.get('torch_cpu')})"


def algorithm_of(job: Job) -> str:
    return next((a.split("=", 1)[1] for a in reversed(job.args) if a.startswith("algorithm=")), "")


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
) -> Reproduced:
    """Run the presets ``names`` (``all``: every preset) at ``scale`` into ``out`` and write
    ``out/report.md``; returns its path and how many runs (of this invocation or an earlier
    one) diverged and failed. ``extra``: KEY=VALUE settings for every run."""
    if scale not in SCALES:
        raise ConfigError(f"unknown scale '{scale}'; choose one of: {', '.join(SCALES)}")
    if seeds is not None and seeds < 1:
        raise ConfigError(f"--seeds must be >= 1, got {seeds}")
    if jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {jobs}")
    names = preset_names(names, scale)
    out = Path(out)
    several = len(names) > 1
    data_dirs, extra = list(data_dirs or []), list(extra or [])
    sections = []
    for name in names:
        folder = out / name if several else out
        section = plan_section(name, folder, scale, seeds, data_dirs, extra, out, several)
        if section.data.note and section.plan.base.get("dataset") == section.data.name:
            echo(f"{name}: {section.data.note}")
        if section.data.missing:
            echo(f"{name}: not run: {section.data.missing}")
        sections.append(section)
    errors = run_jobs([j for s in sections for j in s.jobs], jobs, echo)
    texts, diverged, failed = [], 0, 0
    for section in sections:
        text, counts = write_report(section, errors)
        texts.append(text if not several else relink(text, section.name))
        diverged, failed = diverged + counts["diverged"], failed + counts["failed"]
    report = out / "report.md"
    if several:
        index = ["# fedretain reproduce", ""]
        index += [f"- [{s.plan.title}]({s.name}/report.md)" for s in sections]
        atomic_write_text(report, "\n".join([*index, "", *texts]))
    echo(f"report written to {report}")
    done = Reproduced(report, diverged, failed)
    if diverged or failed:
        echo(done.problem())
    return done


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


def relink(text: str, prefix: str) -> str:
    """A preset's report inside the combined one: images under its folder, headings one down."""
    lines = []
    for line in text.splitlines():
        if line.startswith("!["):
            label, _, rest = line.partition("](")
            line = f"{label}]({prefix}/{rest}"
        if line.startswith("#"):
            line = "#" + line
        lines.append(line)
    return "\n".join(lines)


# -------------------------------------------------------------------------------- results


class Results:
    """What became of each run of a plan (``outcomes``), its finished runs (``runs``: the
    only results; a diverged or failed run is none) and the metrics computed from them."""

    def __init__(self, plan: Plan, outcomes: dict[tuple[str, str, int], Outcome]) -> None:
        self.plan = plan
        self.outcomes = outcomes
        self.runs = {k: o.run for k, o in outcomes.items() if o.state == "finished" and o.run}
        # a study's rows stand for runs of their own
        specs = [replace(s, method=m) for s in plan.runs for m in (s.rows or (s.method,))]
        self.by_key = {(s.setting, s.method, s.seed): s for s in specs}
        self.seeds = sorted({s.seed for s in plan.runs})

    def run(self, setting: str, method: str, seed: int) -> RunResult | None:
        return self.runs.get((setting, method, seed))

    def value(self, spec: RunSpec, metric: str) -> float | None:
        run = self.runs.get((spec.setting, spec.method, spec.seed))
        if run is None:
            return None
        s = run.summary
        if metric == "final":
            return s["final_accuracy"]
        if metric == "top":
            return s["top_accuracy"]
        if metric.startswith("R_"):
            ref = self.run(spec.setting, self.plan.reference, spec.seed)
            if ref is None:
                return None
            reached = r_a(run.records, ref.summary["final_accuracy"], float(metric[2:]))
            return INF if reached is None else reached
        if metric.startswith("to:"):
            target = self.plan.target(metric[3:], spec.setting)
            if target is None:
                return None
            reached = rounds_to(run.records, target)
            return INF if reached is None else reached
        if metric in ("MB_up", "MB_down"):
            return s["bytes_" + metric[3:]] / 1e6
        if metric in ("loss_increase", "loss_increase_ref"):
            return (s.get("forgetting") or {}).get(metric + "_mean")
        if metric in CONTINUAL:  # continual runs (scenario=...): summary.json's measures
            return s.get(CONTINUAL[metric])
        if metric == "wall_s":
            return s.get("wall_seconds")
        if metric in ("psnr", "ssim", "sigma"):  # a privacy study's row: its attack
            return (s.get("attack") or {}).get(metric)
        if metric == "epsilon":
            return (s.get("privacy") or {}).get("epsilon")
        raise ValueError(f"unknown metric {metric!r}")

    def per_seed(self, setting: str, method: str, metric: str) -> list[float | None]:
        specs = [self.by_key.get((setting, method, seed)) for seed in self.seeds]
        return [self.value(s, metric) for s in specs if s is not None]

    def notes(self, setting: str, method: str) -> list[str]:
        """Per seed (as :meth:`per_seed`), why it has no result ("" where it has one)."""
        keys = [(setting, method, seed) for seed in self.seeds]
        found = [self.outcomes.get(k) for k in keys if k in self.by_key]
        return ["" if o is None or o.state == "finished" else o.short() for o in found]

    def counts(self) -> dict[str, int]:
        """Planned runs (a study counts once) by state: finished, diverged, failed, not run."""
        out = dict.fromkeys(("finished", "diverged", "failed", "not run"), 0)
        for spec in self.plan.runs:
            rows = spec.rows or (spec.method,)
            found = (self.outcomes.get((spec.setting, m, spec.seed)) for m in rows)
            states = [o.state for o in found if o is not None]
            out["finished" if "finished" in states else (states or ["not run"])[0]] += 1
        return out

    def stopped(self, setting: str, method: str) -> list[tuple[str, list[dict[str, Any]]]]:
        """The records of ``method``'s diverged seeds, each labelled with where it stopped."""
        out = []
        for seed in self.seeds:
            o = self.outcomes.get((setting, method, seed))
            if o is not None and o.state == "diverged" and o.run is not None:
                out.append((f"{method} seed {seed}: {o.short()}", o.run.records))
        return out

    def view(self, seed: int | None) -> View:
        return View(self, seed)


class View:
    """One seed's values (``seed``), or the means over the seeds (``None``): what a claim
    checks. A mean is None when a seed has no result (not run, failed or diverged).
    ``read``: the (setting, method) pairs asked for so far."""

    def __init__(self, results: Results, seed: int | None) -> None:
        self.results = results
        self.seed = seed
        self.read: dict[tuple[str, str], None] = {}

    def per_seed(self, setting: str, method: str, metric: str) -> list[float | None]:
        """The values the mean is taken over, aligned by seed (one value for one seed)."""
        if self.seed is not None:
            return [self.get(setting, method, metric)]
        return self.results.per_seed(setting, method, metric)

    def get(self, setting: str, method: str, metric: str) -> float | None:
        self.read[setting, method] = None
        if self.seed is not None:
            spec = self.results.by_key.get((setting, method, self.seed))
            return self.results.value(spec, metric) if spec is not None else None
        values = self.results.per_seed(setting, method, metric)
        if not values or any(v is None for v in values):
            return None
        return statistics.fmean(values)  # type: ignore[arg-type]


@dataclass
class Outcome:
    """What became of one planned run (or one row of a privacy study): ``finished`` (a
    result), ``diverged`` (NaN/Inf stopped it in ``round``; ``run`` holds its records up to
    there), ``failed`` (``reason``: the error) or ``not run``."""

    state: str
    job: Job
    reason: str = ""
    round: int | None = None
    run: RunResult | None = None
    cpu: dict[str, Any] = field(default_factory=dict)

    def short(self) -> str:
        """How a table cell shows a seed without a result."""
        return f"diverged in round {self.round}" if self.state == "diverged" else self.state


def outcomes_of(job: Job) -> dict[str, Outcome]:
    """Each table row of ``job`` (its method, or a study's rows): what became of it, from its
    folder (``summary.json``'s ``stopped``, ``status.json``)."""
    spec, folder = job.spec, job.folder
    rows = spec.rows or (spec.method,)
    status = read_status(folder)
    cpu = {k: status[k] for k in ("cpu", "avx512", "torch_cpu") if k in status}

    def every(state: str, reason: str = "") -> dict[str, Outcome]:
        return {row: Outcome(state, job, reason, cpu=cpu) for row in rows}

    if job.state == "missing":
        return every("not run", "the data are missing")
    if status.get("state") == "failed":  # the last try failed (an older summary is stale)
        return every("failed", status.get("error", ""))
    if spec.study is not None:
        if not (folder / "privacy.json").is_file():
            return every("not run")
        found = study_rows(folder)
        unreadable = "its training run's results are missing or unreadable"
        return {
            row: Outcome("finished", job, run=found[row], cpu=cpu)
            if row in found
            else Outcome("failed", job, unreadable, cpu=cpu)
            for row in rows
        }
    if not (folder / "summary.json").is_file():
        return every("not run")
    try:
        run = load_run(folder)
    except DataError as e:
        return every("failed", str(e))
    stopped = run.summary.get("stopped")
    if stopped:  # run_experiment keeps a diverged run's results and says why it stopped
        out = Outcome("diverged", job, stopped, run.summary.get("rounds", 0) + 1, run, cpu)
        return {spec.method: out}
    return {spec.method: Outcome("finished", job, run=run, cpu=cpu)}


def load_results(section: Section) -> Results:
    outcomes = {}
    for job in section.jobs:
        for row, outcome in outcomes_of(job).items():
            outcomes[job.spec.setting, row, job.spec.seed] = outcome
    return Results(section.plan, outcomes)


def study_rows(folder: Path) -> dict[str, RunResult]:
    """A finished privacy study's table rows: each its training run, with the attack on its
    uplink (PSNR, SSIM, σ*) in ``summary["attack"]``."""
    if not (folder / "privacy.json").is_file():
        return {}
    result = read_json(folder / "privacy.json")
    rows = {}
    for row, (run_name, attack) in table_rows(result).items():
        with suppress(DataError):
            run = load_run(folder / "runs" / run_name)
            scores = result["attacks"].get(attack, {})
            sigma = result["sigma_matched"] if "dpsgd" in run_name else None
            run.summary["attack"] = {**scores, "sigma": sigma}
            rows[row] = run
    return rows


# ------------------------------------------------------------------------------ the report

# continual metric -> its summary.json key (fedretain.experiments.continual)
CONTINUAL = {
    "avg_acc": "average_accuracy",
    "forgetting": "average_forgetting",
    "bwt": "backward_transfer",
}

LABELS = {
    "avg_acc": "average accuracy",
    "forgetting": "average forgetting",
    "bwt": "backward transfer",
    "final": "final acc",
    "top": "top acc",
    "R_0.5": "R_0.5",
    "R_0.9": "R_0.9",
    "R_1": "R_1.0",
    "MB_up": "MB up",
    "MB_down": "MB down",
    "loss_increase": "loss increase",
    "loss_increase_ref": "reference's loss increase",
    "wall_s": "wall s",
    "psnr": "attack PSNR (dB)",
    "ssim": "attack SSIM",
    "sigma": "σ*",
    "epsilon": "ε",
}


def label(metric: str) -> str:
    return f"rounds to {metric[3:]}" if metric.startswith("to:") else LABELS[metric]


def fmt(value: Any, metric: str) -> str:
    """One number as the table shows it: '-' for a target never reached (or no value)."""
    if value is None or value == INF:
        return "-"
    if isinstance(value, str):
        return value
    if metric.startswith(("R_", "to:")):
        return f"{value:g}" if value == int(value) else f"{value:.1f}"
    if metric.startswith("MB") or metric == "wall_s":
        return f"{value:.1f}"
    if metric in ("psnr", "sigma", "epsilon"):
        return f"{value:.2f}" if metric == "psnr" else f"{value:.3g}"
    return f"{value:.4f}"


def cell(values: list[float | None], metric: str, notes: list[str] | None = None) -> str:
    """Mean ± std over the seeds, then each seed's value; ``notes``: per seed, why it has no
    value ("diverged in round 75", "failed", "not run"), shown instead of it."""
    if not values:
        return "not run"
    notes = notes or [""] * len(values)
    seen = [note or fmt(v, metric) for v, note in zip(values, notes, strict=True)]
    if len(values) == 1:
        return seen[0]
    shown = ", ".join(seen)
    if any(notes) or any(v is None or v == INF for v in values):
        return f"- ({shown})"
    mean, std = statistics.fmean(values), statistics.stdev(values)  # type: ignore[arg-type]
    return f"{fmt(mean, metric)} ± {fmt(std, metric)} ({shown})"


def failures_section(section: Section, results: Results, errors: dict[Path, str]) -> list[str]:
    """Every run that diverged or failed, this invocation or an earlier one (its folder says
    so), with why and where its log is."""
    bad = {}  # one line per job (a study's rows share theirs)
    for o in results.outcomes.values():
        if o.state in ("diverged", "failed") and o.job.folder not in bad:
            bad[o.job.folder] = f"{o.short()}: {o.reason}"
    for job in section.jobs:  # a worker that died before its folder could say so
        if job.folder in errors and job.folder not in bad:
            bad[job.folder] = f"failed: {errors[job.folder]}"
    if not bad:
        return []
    lines = ["## Runs that failed or diverged", ""]
    lines += [f"- `{f}`: {why} (log: `{f / 'run.log'}`)" for f, why in bad.items()]
    lines += [
        "",
        "A diverged run is kept as it stopped and not run again (lower its lr, or set "
        "`on_divergence=skip` to drop a client's NaN update); a failed one is tried again by "
        "the next invocation.",
        "",
    ]
    return lines


def machine_lines(results: Results) -> list[str]:
    """The CPU(s) the runs ran on (from their status.json; this machine for older runs), and
    why it matters."""
    ran: dict[str, int] = {}
    for o in {id(o.job): o for o in results.outcomes.values() if o.run}.values():
        key = cpu_text(o.cpu) if o.cpu else ""
        ran[key] = ran.get(key, 0) + 1
    here = cpu_text(machine())
    recorded = {k: n for k, n in ran.items() if k}
    if not recorded:
        where = f"this report was written on {here}"
        where += "; the runs' CPU was not recorded" if ran else ""
    elif len(recorded) == 1 and not ran.get(""):
        where = f"the runs ran on {next(iter(recorded))}"
    else:
        where = "the runs ran on " + "; ".join(f"{k} ({n} runs)" for k, n in recorded.items())
        if ran.get(""):
            where += f"; {ran['']} runs did not record theirs"
    return [
        f"Machine: {where}. float32 results vary across CPUs: torch picks its kernels by the "
        "CPU's instruction set, so the same config and seed give different numbers on a CPU "
        "without AVX-512, and a margin within the seeds' spread may change sign.",
        "",
    ]


def write_report(section: Section, errors: dict[Path, str]) -> tuple[str, dict[str, int]]:
    """Write ``<preset folder>/report.md`` and its plots; returns the markdown and the runs
    by state (:meth:`Results.counts`)."""
    plan, data, folder = section.plan, section.data, section.folder
    results = load_results(section)
    seeds = results.seeds
    lines = [f"# {plan.title}", ""]
    lines.append(
        f"Preset `{section.name}`, {len(seeds)} seed(s) ({', '.join(map(str, seeds))}); "
        f"the paper's numbers: {plan.source}."
    )
    lines += ["", "Reproduce it with", "", "```bash", section.command, "```", ""]
    if data.missing:
        lines += [f"**Not run: the data are missing.** {data.missing}", ""]
        lines.append(
            "Then run the command above with `--data-dir FOLDER` (the folder holding the files)."
        )
        lines.append("")
    elif data.note and plan.base.get("dataset") == data.name:
        lines += [f"Data: {data.note}", ""]
    if plan.reasons:
        lines += ["What differs from the paper here:", ""]
        lines += [f"- {r}" for r in plan.reasons] + [""]
    counts = results.counts()
    finished = counts["finished"]
    wall = sum(r.summary.get("wall_seconds") or 0 for r in results.runs.values())
    others = ", ".join(f"{counts[k]} {k}" for k in ("diverged", "failed", "not run"))
    lines += [
        f"Runs: {finished} of {len(plan.runs)} finished, {others}; {wall:.0f} s of training "
        "in all.",
        "",
    ]
    if counts["diverged"] + counts["failed"]:
        lines += [
            "A run that diverged or failed is no result: it is left out of every mean, "
            "ranking and verdict, and listed under [Runs that failed or diverged]"
            "(#runs-that-failed-or-diverged).",
            "",
        ]
    lines += machine_lines(results)
    lines += results_tables(plan, results, folder)
    if plan.paragraph and finished:
        lines += ["## Summary", "", plan.paragraph(results.view(None), plan), ""]
    lines += extra_plots(plan, results, folder)
    lines += coverage_section(plan, results)
    if plan.sweep:
        lines += sweep_section(plan, results, folder)
    lines += claims_section(plan, results, data)
    lines += failures_section(section, results, errors)
    lines += ["## Every run", "", "<details><summary>The command of each run</summary>", ""]
    lines += ["```bash"]
    lines += [job_command(j) for j in section.jobs]
    lines += ["```", "", "</details>", ""]
    text = "\n".join(lines)
    atomic_write_text(folder / "report.md", text)
    return text, counts


def coverage_section(plan: Plan, results: Results) -> list[str]:
    """For ``plan.coverage``'s settings: each method's mean accuracy change between two
    evaluations against the number of classes the clients of the rounds in between held (over
    the seeds), and the correlation of the two. The rounds' clients and data come from each
    run's own config (its partition and participation, rebuilt)."""
    import numpy as np

    from fedretain.recipe.config import config_from_text
    from fedretain.recipe.federation import build_federation

    lines = []
    for setting in plan.coverage:
        rows, feds = {}, {}
        for method in plan.methods(setting):
            pairs = []
            for seed in results.seeds:
                run = results.run(setting, method, seed)
                if run is None:
                    continue
                if seed not in feds:  # one partition per seed: every method's is the same
                    cfg = config_from_text((run.path / "config.toml").read_text())
                    feds[seed] = build_federation(cfg)
                fed = feds[seed]
                labels = np.asarray(fed.dataset.y_train)
                acc = {r["round"]: r["test_accuracy"] for r in run.records}
                evaluated = sorted(acc)
                for a, b in itertools.pairwise(evaluated):
                    cids = [c for rnd in range(a, b) for c in fed.participation.clients(rnd)]
                    held = {int(k) for c in cids for k in np.unique(labels[fed.parts[c]])}
                    pairs.append((len(held), acc[b] - acc[a]))
            if pairs:
                rows[method] = pairs
        if not rows:
            continue
        counts = sorted({k for pairs in rows.values() for k, _ in pairs})
        head = ["method", *[f"{k} classes" for k in counts], "correlation"]
        lines += [
            f"### {setting}: accuracy change against the classes the rounds' clients held",
            "",
            "Mean change of test accuracy (points) from one evaluation to the next, by how "
            "many classes the clients of the rounds in between held (how often, over the "
            "seeds), and the correlation of the two: where it is strongly positive, the swings "
            "follow which classes each round happened to sample.",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
        ]
        for method, pairs in rows.items():
            k = np.array([p[0] for p in pairs], dtype=float)
            d = np.array([p[1] for p in pairs])
            cells = [
                f"{100 * d[k == c].mean():+.1f} ({int((k == c).sum())})" if (k == c).any() else ""
                for c in counts
            ]
            corr = f"{np.corrcoef(k, d)[0, 1]:+.2f}" if k.std() > 0 and d.std() > 0 else "-"
            lines.append(f"| {method} | " + " | ".join(cells) + f" | {corr} |")
        lines.append("")
    return lines


def job_command(job: Job) -> str:
    """The command line that runs one job by itself."""
    if job.spec.study is not None:
        words = ["fedretain", "privacy", *job.args, *study_args(study_of(job.spec.study))]
    else:
        words = ["fedretain", "run", *job.args]
    return shlex.join([*words, "--out", str(job.folder)])


def results_tables(plan: Plan, results: Results, folder: Path) -> list[str]:
    lines = ["## Results", ""]
    if len(results.seeds) > 1:
        lines += [
            "Ours: mean ± std over the seeds (each seed's value); '-': never reached, or no "
            "mean because a seed has no result (it diverged, failed or did not run).",
            "",
        ]
    for setting in plan.settings():
        methods = plan.methods(setting)
        head, cols = ["method"], []
        keys = {*methods, *(series_of(plan, setting, m) for m in methods)}
        for metric in plan.metrics_of(setting):
            if any(metric in plan.paper.get((setting, m), {}) for m in keys):
                head.append(f"{label(metric)} (paper)")
                cols.append((metric, True))
            head.append(label(metric))
            cols.append((metric, False))
        lines += [f"### {setting}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for method in methods:
            row = [method]
            for metric, paper in cols:
                if paper:
                    row.append(fmt(paper_value(plan, results, setting, method, metric), metric))
                else:
                    values = results.per_seed(setting, method, metric)
                    row.append(cell(values, metric, results.notes(setting, method)))
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        curves = [
            (name, mean_curve(results, setting, name))
            for name in round_lines(plan, results, setting)
        ]
        curves = [(n, c) for n, c in curves if c]
        stopped = [s for name in plan.methods(setting) for s in results.stopped(setting, name)]
        if (curves or stopped) and "round" in plan.plots:
            path = folder / f"accuracy-{slug(setting)}.png"
            alt = f"accuracy over rounds, {setting}"
            lines += curve_plot(curves, stopped, path, "round", alt, setting)
    lines += target_notes(plan)
    lines += [line for note in plan.notes for line in (note, "")]
    if plan.reference and any(m.startswith("R_") for m in plan.metrics):
        lines += [
            f"R_a: the first round reaching a x the final accuracy of {plan.reference} in the "
            "same setting and seed (FedReg's measure).",
            "",
        ]
    return lines


def target_notes(plan: Plan) -> list[str]:
    """What each rounds-to column counts: our target, and the paper's where it differs."""
    lines = []
    for key in plan.targets:
        parts = []
        for setting in plan.settings():
            mine, theirs = plan.target(key, setting), plan.target(key, setting, paper=True)
            if mine is None:
                continue
            text = f"{mine:.0%}"
            if theirs is not None and abs(mine - theirs) > 1e-9:
                text += f" (the paper: {theirs:.0%})"
            parts.append(text if not isinstance(plan.targets[key], dict) else f"{setting}: {text}")
        parts = list(dict.fromkeys(parts))
        if parts:
            lines += [f"Rounds to {key}: the first round reaching {', '.join(parts)}.", ""]
    return lines


def paper_value(plan: Plan, results: Results, setting: str, method: str, metric: str) -> Any:
    """The paper's number for a row; a sweep's series without its own row (the paper's tuned
    value) shows it on the row of our best value (highest mean final accuracy)."""
    own = plan.paper.get((setting, method))
    if own is not None:
        return own.get(metric)
    series = series_of(plan, setting, method)
    theirs = plan.paper.get((setting, series))
    if theirs is None or method not in round_lines(plan, results, setting):
        return None
    return theirs.get(metric)


def round_lines(plan: Plan, results: Results, setting: str) -> list[str]:
    """The methods drawn over rounds: all of them, or in a sweep each series at its best x."""
    methods = plan.methods(setting)
    if not plan.sweep:
        return methods
    chosen = []
    for series in dict.fromkeys(r.line for r in plan.runs if r.setting == setting):
        members = [m for m in methods if series_of(plan, setting, m) == series]
        scored = [(results.view(None).get(setting, m, "final"), m) for m in members]
        scored = [(v, m) for v, m in scored if v is not None]
        if scored:
            chosen.append(max(scored)[1])
    return chosen


def series_of(plan: Plan, setting: str, method: str) -> str:
    runs = (r for r in plan.runs if r.setting == setting and method in (r.rows or (r.method,)))
    return next(r.line for r in runs)


def curve_plot(
    curves: list[tuple[str, list[dict[str, Any]]]],
    stopped: list[tuple[str, list[dict[str, Any]]]],
    path: Path,
    x: str,
    alt: str,
    title: str,
) -> list[str]:
    """:func:`~fedretain.experiments.plots.plot_curves` of the mean curves and the diverged
    seeds into ``path``; the report's lines that show it (with a caption where a seed
    stopped)."""
    from fedretain.experiments.plots import plot_curves

    plot_curves(curves, path, x=x, title=title, stopped=stopped)
    lines = [f"![{alt}]({path.name})", ""]
    if stopped:
        lines += [
            "Each line: the mean over the seeds that finished (a method whose seeds all "
            "diverged has none); a thin line ending in a cross: a seed that diverged, drawn "
            "to where it stopped (" + "; ".join(label for label, _ in stopped) + ").",
            "",
        ]
    return lines


def mean_curve(results: Results, setting: str, method: str) -> list[dict[str, Any]]:
    """The accuracy and bytes per evaluated round, averaged over the seeds that finished (a
    diverged seed is drawn on its own: :meth:`Results.stopped`)."""
    runs = [r for s in results.seeds if (r := results.run(setting, method, s)) is not None]
    if not runs:
        return []
    rounds = set.intersection(*({rec["round"] for rec in r.records} for r in runs))
    out = []
    for rnd in sorted(rounds):
        recs = [next(x for x in r.records if x["round"] == rnd) for r in runs]
        out.append(
            {
                "round": rnd,
                "test_accuracy": statistics.fmean(x["test_accuracy"] for x in recs),
                "bytes_up": statistics.fmean(x["bytes_up"] for x in recs),
                "bytes_down": statistics.fmean(x["bytes_down"] for x in recs),
            }
        )
    return out


FORGETTING = "forgetting.jsonl"  # diagnostics=forgetting
QUALITY = "generator_quality.jsonl"  # diagnostics=generator_quality


def extra_plots(plan: Plan, results: Results, folder: Path) -> list[str]:
    """Accuracy against bytes, the forgetting plot (loss increase per round), and a continual
    preset's accuracy matrices and generator quality."""
    lines = []
    for setting in plan.settings():
        curves = [(m, mean_curve(results, setting, m)) for m in plan.methods(setting)]
        curves = [(n, c) for n, c in curves if c]
        stopped = [s for name in plan.methods(setting) for s in results.stopped(setting, name)]
        if "bytes" in plan.plots and (curves or stopped):
            path = folder / f"accuracy_vs_bytes-{slug(setting)}.png"
            alt = f"accuracy against communication, {setting}"
            lines += curve_plot(curves, stopped, path, "bytes", alt, setting)
        if "forgetting" in plan.plots:
            series = []
            for method in plan.methods(setting):
                rows = mean_rows(results, setting, method, FORGETTING, "loss_increase_mean")
                if rows:
                    series.append((method, rows))
                ref = mean_rows(results, setting, method, FORGETTING, "loss_increase_ref_mean")
                if ref:  # diagnostics.reference: its local models from the same global models
                    series.append((f"{method}'s reference, same global models", ref))
            if series:
                lines += figure(
                    series,
                    folder / f"forgetting-{slug(setting)}.png",
                    f"forgetting, {setting}",
                    "Forgetting: loss(t) - loss(t-1) on the previous round's clients' data, "
                    "averaged over this round's local models (FedReg App. B.1; "
                    "`diagnostics=forgetting`); mean over the seeds.",
                    xlabel="round t",
                    ylabel="loss increase on the clients of round t-1",
                    title=f"{setting}: forgetting (lower is better)",
                )
        if "continual" in plan.plots:
            lines += continual_lines(results, setting, folder)
    return lines


def mean_rows(
    results: Results, setting: str, method: str, file: str, key: str
) -> list[tuple[float, float]]:
    """``key`` of each round of the runs' ``file`` (a JSON-lines diagnostic), mean over the
    seeds that wrote it."""
    per_round: dict[int, list[float]] = {}
    for seed in results.seeds:
        run = results.run(setting, method, seed)
        path = run.path / file if run else None
        if path is None or not path.is_file():
            continue
        for r in read_jsonl(path):
            if r.get(key) is not None:
                per_round.setdefault(r["round"], []).append(r[key])
    return [(float(k), statistics.fmean(v)) for k, v in sorted(per_round.items())]


def continual_lines(results: Results, setting: str, folder: Path) -> list[str]:
    """A continual preset's per-task view: each method's accuracy matrix (mean over the
    seeds) and its generators' Fréchet distance over the rounds, where recorded."""
    lines = [f"#### {setting}", ""] if len(results.plan.settings()) > 1 else []
    methods = results.plan.methods(setting)
    for method in methods:
        runs = [r for s in results.seeds if (r := results.run(setting, method, s)) is not None]
        matrices = [r.summary["accuracy_matrix"] for r in runs if r.summary.get("accuracy_matrix")]
        if not matrices:
            continue
        tasks = len(matrices[0][0])
        head = " | ".join(f"task {j + 1}" for j in range(tasks))
        lines += [
            f"{method}: accuracy on each task's classes after each task (mean over "
            f"{len(matrices)} seed(s))",
            "",
            f"| after | {head} |",
            "|---" * (tasks + 1) + "|",
        ]
        for t in range(len(matrices[0])):
            cells = [statistics.fmean(m[t][j] for m in matrices) for j in range(tasks)]
            lines.append(f"| task {t + 1} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
        lines.append("")
    fid = [(m, r) for m in methods if (r := mean_rows(results, setting, m, QUALITY, "fid"))]
    if fid:
        lines += figure(
            fid,
            folder / f"fid-{slug(setting)}.png",
            f"generator quality, {setting}",
            "Fréchet distance between the global ACGAN's samples and the test images of the "
            "classes seen so far, on the features of fedretain's own classifier "
            "(`diagnostics=generator_quality`; lower is better), over the rounds, mean over "
            "the seeds. Last values: "
            + ", ".join(f"{m} {r[-1][1]:.1f} (round {r[-1][0]:.0f})" for m, r in fid)
            + ".",
            xlabel="round",
            ylabel="Fréchet distance (lower is better)",
            title=f"{setting}: the global generator",
        )
    return lines


def figure(
    series: list[tuple[str, list[tuple[float, float]]]],
    path: Path,
    alt: str,
    caption: str,
    **plot: Any,
) -> list[str]:
    """:func:`plot_lines` into ``path``, and the report's lines that show it (the image, its
    caption)."""
    plot_lines(series, path, **plot)
    return [f"![{alt}]({path.name})", "", caption, ""]


def plot_lines(
    series: list[tuple[str, list[tuple[float, float]]]],
    path: Path,
    xlabel: str,
    ylabel: str,
    title: str = "",
    log: bool = False,
    hlines: list[tuple[str, float]] | None = None,
) -> None:
    """Lines of (x, y) points, one per label; ``hlines``: labelled horizontal lines."""
    from fedretain.experiments import plots  # matplotlib on the Agg backend

    fig, ax = plots.plt.subplots(figsize=(6.4, 4.2))
    for i, (name, points) in enumerate(series):
        style = plots.style(i, len(points))
        ax.plot([p[0] for p in points], [p[1] for p in points], label=name, **style)
    for name, y in hlines or []:
        ax.axhline(y, linestyle="--", color="grey", label=name)
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    save_figure(fig, path)
    plots.plt.close(fig)


def sweep_section(plan: Plan, results: Results, folder: Path) -> list[str]:
    """Final accuracy against the swept value per series, and where a series departs from the
    baseline method."""
    sweep = plan.sweep
    assert sweep is not None
    mean = results.view(None)
    lines = [f"## Accuracy against {sweep.key}", ""]
    for setting in plan.settings():
        specs = [r for r in plan.runs if r.setting == setting and r.x is not None]
        series = list(dict.fromkeys(r.line for r in specs))
        xs = sorted({r.x for r in specs if r.x is not None})
        by = {(r.line, r.x): r.method for r in specs}
        head = [sweep.key, *[f"{s} final acc" for s in series]]
        if sweep.baseline:
            head += [f"{s}: mean gap to {sweep.baseline} (points)" for s in series]
        lines += [f"### {setting}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for x in xs:
            row = [f"{x:g}"]
            for s in series:
                method = by.get((s, x))
                row.append(fmt(mean.get(setting, method, "final"), "final") if method else "")
            for s in series if sweep.baseline else []:
                method = by.get((s, x))
                g = curve_gap(results, setting, method, sweep.baseline) if method else None
                row.append(f"{g * 100:+.2f}" if g is not None else "")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
        points = []
        for s in series:
            pts = [
                (x, v)
                for x in xs
                if (m := by.get((s, x))) and (v := mean.get(setting, m, "final")) is not None
            ]
            if pts:
                points.append((s, pts))
        hlines = []
        if sweep.baseline:
            base = mean.get(setting, sweep.baseline, "final")
            if base is not None:
                hlines.append((sweep.baseline, base))
                lines.append(f"{sweep.baseline}: final accuracy {base:.4f}.")
            for s in series:
                acts = next(
                    (
                        x
                        for x in xs
                        if (m := by.get((s, x)))
                        and abs(curve_gap(results, setting, m, sweep.baseline) or 0.0) > ACTS
                    ),
                    None,
                )
                gap = (
                    f"more than {ACTS * 100:g} points on average over the evaluated rounds "
                    "(same seeds; the mean gap column)"
                )
                if acts is None:
                    lines.append(
                        f"{s}'s accuracy curve stays within {ACTS * 100:g} points of "
                        f"{sweep.baseline}'s on average over the rounds (same seeds) at every "
                        f"{sweep.key} swept: its penalty does not act at these values here."
                    )
                else:
                    lines.append(
                        f"{s}'s penalty acts from {sweep.key} = {acts:g}: its accuracy curve "
                        f"sits away from {sweep.baseline}'s by {gap}; at smaller "
                        f"{sweep.key} it tracks {sweep.baseline}'s."
                    )
            lines.append("")
        if points:
            path = f"sweep-{slug(setting)}.png"
            plot_lines(
                points,
                folder / path,
                xlabel=sweep.key,
                ylabel="final test accuracy (mean over seeds)",
                title=setting,
                log=sweep.log,
                hlines=hlines,
            )
            lines += [f"![final accuracy against {sweep.key}, {setting}]({path})", ""]
    return lines


def curve_gap(results: Results, setting: str, method: str, baseline: str) -> float | None:
    """``method``'s test accuracy minus ``baseline``'s (same seed), averaged over the evaluated
    rounds both have, then over the seeds; None when no seed has both runs."""
    gaps = []
    for seed in results.seeds:
        a, b = results.run(setting, method, seed), results.run(setting, baseline, seed)
        if a is None or b is None:
            continue
        acc = {r["round"]: r["test_accuracy"] for r in b.records if "test_accuracy" in r}
        diffs = [
            r["test_accuracy"] - acc[r["round"]]
            for r in a.records
            if "test_accuracy" in r and r["round"] in acc
        ]
        if diffs:
            gaps.append(statistics.fmean(diffs))
    return statistics.fmean(gaps) if gaps else None


def verdict(result: bool | None) -> str:
    return {True: "held", False: "did not hold", None: "undecided"}[result]


SPREAD_RULE = (
    "Beyond the seeds' spread: every comparison the claim makes has a paired 95 % t-interval "
    "of its gap over the seeds that excludes zero (`fedretain.metrics.spread`; with 3 seeds "
    "the mean gap must exceed 2.5 times its standard deviation over the seeds; one seed never "
    "separates; a target never reached counts as one round after the last round run)."
)


@dataclass
class Judged:
    """A claim checked on the means and on each seed: ``overall`` and ``seeds`` (verdicts),
    ``separated`` (whether every comparison it makes exceeds the seeds' spread; None when it
    makes none) and ``read`` (the setting and method pairs its check asked for)."""

    overall: bool | None
    seeds: list[bool | None]
    separated: bool | None
    read: list[tuple[str, str]]


def judge(claim: Claim, results: Results) -> Judged:
    """Check ``claim`` on the means and on each seed; pair up the comparisons its check makes
    seed by seed (``a < b`` at the means: the same ``a < b`` on each seed) and test each with
    :func:`fedretain.metrics.spread.separated`."""
    mean = results.view(None)
    with comparisons() as at_means:
        overall = claim.check(mean)
    seeds, per_seed = [], []
    for seed in results.seeds:
        with comparisons() as made:
            seeds.append(claim.check(results.view(seed)))
        per_seed.append(made if len(made) == len(at_means) else [(None, None)] * len(at_means))
    last = max((r.summary.get("rounds", 0) for r in results.runs.values()), default=0)

    def finite(x: float | None) -> float | None:  # never reached: one round after the last
        return last + 1.0 if x == INF else x

    apart = None
    if at_means:
        apart = all(
            separated([finite(m[i][0]) for m in per_seed], [finite(m[i][1]) for m in per_seed])
            for i in range(len(at_means))
        )
    return Judged(overall, seeds, apart, list(mean.read))


def verdict_cell(j: Judged) -> str:
    """The verdict on the means, how many seeds it held on, and whether its gaps exceed the
    seeds' spread: never a bare "held"."""
    n, k = len(j.seeds), sum(s is True for s in j.seeds)
    text = f"**{verdict(j.overall)}**"
    if n == 1:
        return text + (" (one seed: no spread to measure)" if j.overall is not None else "")
    count = f"held on {k} of {n} seeds"
    if j.overall is None:
        return f"{text} ({count})"
    if j.separated is None:
        spread = "the seeds' spread not measured (no paired comparison)"
    else:
        spread = "beyond the seeds' spread" if j.separated else "within the seeds' spread"
    if j.overall is True and j.separated:
        return f"{text} on {k} of {n} seeds, {spread}"
    if j.overall is True:
        return f"{text} on the means only, {spread} ({count})"
    return f"{text} on the means, {spread} ({count})"


def no_result(results: Results, read: list[tuple[str, str]]) -> str:
    """The runs a claim asked for that have no result: "SCAFFOLD diverged in round 53 (seed
    1)"."""
    parts = []
    for setting, method in read:
        for seed in results.seeds:
            o = results.outcomes.get((setting, method, seed))
            if o is not None and o.state != "finished":
                parts.append(f"{method} {o.short()} (seed {seed})")
    return "no result from " + ", ".join(dict.fromkeys(parts)) if parts else ""


def claims_section(plan: Plan, results: Results, data: Data) -> list[str]:
    lines = ["## Claims", ""]
    many = len(results.seeds) > 1
    head = ["#", "claim", "verdict"] + (["per seed"] if many else []) + ["likely reason"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    held = apart = 0
    for i, claim in enumerate(plan.claims, 1):
        if data.missing:
            row = [str(i), claim.text, "not run (data missing)"] + ([""] if many else []) + [""]
            lines.append("| " + " | ".join(row) + " |")
            continue
        j = judge(claim, results)
        held += j.overall is True
        apart += j.overall is True and bool(j.separated) and many
        reason = ""
        if j.overall is not True:
            parts = [claim.why_not] if claim.why_not else []
            if plan.reasons:  # the differences listed above, by their first words
                parts.insert(0, ", ".join(r.split(":")[0] for r in plan.reasons) + " (above)")
            if j.overall is None:
                parts.insert(0, no_result(results, j.read) or "no side reached its target")
            reason = "; ".join(parts)
        row = [str(i), claim.text, verdict_cell(j)]
        if many:
            row.append(", ".join(verdict(s) for s in j.seeds))
        row.append(reason or "")
        lines.append("| " + " | ".join(row) + " |")
    lines.append("")
    if not data.missing:
        spread = f", {apart} of them beyond the seeds' spread" if many else ""
        lines += [
            f"{held} of {len(plan.claims)} claims held on the means over the seeds{spread} "
            "('undecided': a run it needs has no result, or no side reached the target). "
            + (SPREAD_RULE if many else "With one seed the seeds' spread is not measured."),
            "",
        ]
    return lines


def list_presets() -> list[str]:
    """One line per preset: name, description, the paper's dataset, the small-scale estimate."""
    width = max(len(n) for n in PRESETS)
    out = []
    for name, entry in PRESETS.items():
        data = entry.meta["dataset"]
        if entry.meta.get("standin"):
            data += f" ({entry.meta['standin']} stands in)"
        out.append(
            f"{name:<{width}}  {entry.description}; data: {data}; small: {entry.meta['estimate']}"
        )
    return out


__all__ = [
    "Outcome",
    "Reproduced",
    "Results",
    "View",
    "list_presets",
    "machine",
    "reproduce",
    "resolve_data",
    "run_one",
]
