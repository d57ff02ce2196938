"""What became of each run of a plan, and the numbers the report reads from the finished ones.

- :class:`Outcome`: one planned run (or one row of a privacy study) as its folder tells it:
  finished, diverged, failed or not run (:func:`outcomes_of`, :func:`load_results`);
- :class:`Results`: a plan's outcomes and its metrics per run, per seed and over the seeds;
  :class:`View`: one seed's values or the means, what a claim checks;
- the curves the plots draw: mean accuracy per round (:func:`mean_curve`), a diagnostic's
  mean per round (:func:`mean_rows`), one method's gap to another (:func:`curve_gap`).

Only finished runs are results: a diverged or failed run is left out of every mean.
"""

from __future__ import annotations

import statistics
from contextlib import suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from fedretain.errors import DataError
from fedretain.files import read_json, read_jsonl
from fedretain.metrics.accuracy import final_accuracy, r_a, rounds_to
from fedretain.studies.compare import RunResult, load_run
from fedretain.studies.presets import INF, Plan, RunSpec
from fedretain.studies.privacy import table_rows
from fedretain.studies.reproduce.jobs import Job, Section, read_status

Records = list[dict[str, Any]]

# continual metric -> its summary.json key (fedretain.experiments.continual)
CONTINUAL = {
    "avg_acc": "average_accuracy",
    "forgetting": "average_forgetting",
    "bwt": "backward_transfer",
}


def rows_of(spec: RunSpec) -> tuple[str, ...]:
    """The table rows a planned run fills: its method, or a privacy study's rows."""
    return spec.rows or (spec.method,)


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
    rows = rows_of(spec)
    status = read_status(folder)
    cpu = {k: status[k] for k in ("cpu", "avx512", "torch_cpu", "gpu", "machines") if k in status}

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


def study_rows(folder: Path) -> dict[str, RunResult]:
    """A finished privacy study's table rows: each its training run, with the attack on its
    uplink (PSNR, SSIM, σ*) in ``summary["attack"]``."""
    if not (folder / "privacy.json").is_file():
        return {}
    result = read_json(folder / "privacy.json")
    base = result.get("baselines") or {}
    rows = {}
    for row, (run_name, attack) in table_rows(result).items():
        with suppress(DataError):
            run = load_run(folder / "runs" / run_name)
            scores = result["attacks"].get(attack, {})
            dp = "dpsgd" in run_name
            run.summary["attack"] = {
                **scores,
                "sigma": result["sigma_matched"] if dp else None,
                "matched": result.get("matched") if dp else None,
                "psnr_random": base.get("random"),
                "psnr_mean": base.get("mean_image"),
            }
            rows[row] = run
    return rows


def load_results(section: Section) -> Results:
    """The :class:`Results` of a section, read from its runs' folders."""
    outcomes = {}
    for job in section.jobs:
        for row, outcome in outcomes_of(job).items():
            outcomes[job.spec.setting, row, job.spec.seed] = outcome
    return Results(section.plan, outcomes)


class Results:
    """What became of each run of a plan (``outcomes``), its finished runs (``runs``: the
    only results; a diverged or failed run is none) and the metrics computed from them."""

    def __init__(self, plan: Plan, outcomes: dict[tuple[str, str, int], Outcome]) -> None:
        self.plan = plan
        self.outcomes = outcomes
        self.runs = {k: o.run for k, o in outcomes.items() if o.state == "finished" and o.run}
        # a study's rows stand for runs of their own
        specs = [replace(s, method=m) for s in plan.runs for m in rows_of(s)]
        self.by_key = {(s.setting, s.method, s.seed): s for s in specs}
        self.seeds = sorted({s.seed for s in plan.runs})

    def run(self, setting: str, method: str, seed: int) -> RunResult | None:
        return self.runs.get((setting, method, seed))

    def runs_of(self, setting: str, method: str) -> list[RunResult]:
        """``method``'s finished runs in ``setting``, by seed."""
        return [r for s in self.seeds if (r := self.run(setting, method, s)) is not None]

    def value(self, spec: RunSpec, metric: str) -> float | None:
        run = self.runs.get((spec.setting, spec.method, spec.seed))
        if run is None:
            return None
        s = run.summary
        if metric == "final":  # the mean over the last 10 % of the evaluations
            return final_accuracy(run.records)
        if metric == "last":
            return s["final_accuracy"]
        if metric == "top":
            return s["top_accuracy"]
        if metric.startswith("R_"):
            ref = self.run(spec.setting, self.plan.reference, spec.seed)
            if ref is None:
                return None
            reached = r_a(run.records, final_accuracy(ref.records), float(metric[2:]))
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
        if metric in ("psnr", "ssim", "sigma", "psnr_random", "psnr_mean"):  # a study's row
            return (s.get("attack") or {}).get(metric)
        if metric == "epsilon":
            return (s.get("privacy") or {}).get("epsilon")
        raise ValueError(f"unknown metric {metric!r}")

    def at(self, setting: str, method: str, seed: int, metric: str) -> float | None:
        """One seed's value (None where that run is not planned or has no result)."""
        spec = self.by_key.get((setting, method, seed))
        return self.value(spec, metric) if spec is not None else None

    def planned_seeds(self, setting: str, method: str) -> list[int]:
        return [seed for seed in self.seeds if (setting, method, seed) in self.by_key]

    def per_seed(self, setting: str, method: str, metric: str) -> list[float | None]:
        return [self.at(setting, method, s, metric) for s in self.planned_seeds(setting, method)]

    def notes(self, setting: str, method: str) -> list[str]:
        """Per seed (as :meth:`per_seed`), why it has no result ("" where it has one)."""
        found = [
            self.outcomes.get((setting, method, s)) for s in self.planned_seeds(setting, method)
        ]
        return ["" if o is None or o.state == "finished" else o.short() for o in found]

    def counts(self) -> dict[str, int]:
        """Planned runs (a study counts once) by state: finished, diverged, failed, not run."""
        out = dict.fromkeys(("finished", "diverged", "failed", "not run"), 0)
        for spec in self.plan.runs:
            found = (self.outcomes.get((spec.setting, m, spec.seed)) for m in rows_of(spec))
            states = [o.state for o in found if o is not None]
            out["finished" if "finished" in states else (states or ["not run"])[0]] += 1
        return out

    def unfinished(self, setting: str, method: str) -> list[tuple[int, Outcome]]:
        """``method``'s seeds without a result, with what became of each."""
        found = ((seed, self.outcomes.get((setting, method, seed))) for seed in self.seeds)
        return [(seed, o) for seed, o in found if o is not None and o.state != "finished"]

    def exhausted(self, setting: str, method: str) -> str:
        """Why ``method``'s result sits at the edge of a grid on some seed ("" where not): a
        privacy study whose noise grid never brought the attack down to the target's."""
        for seed in self.seeds:
            run = self.run(setting, method, seed)
            attack = (run.summary.get("attack") or {}) if run is not None else {}
            if attack.get("matched") is False:
                return (
                    f"{method}'s σ* on seed {seed} is the top of the noise grid "
                    f"({attack.get('sigma'):g}) and never matched the target's PSNR"
                )
        return ""

    def stopped(self, setting: str, method: str) -> list[tuple[str, Records]]:
        """The records of ``method``'s diverged seeds, each labelled with where it stopped."""
        return [
            (f"{method} seed {seed}: {o.short()}", o.run.records)
            for seed, o in self.unfinished(setting, method)
            if o.state == "diverged" and o.run is not None
        ]

    def view(self, seed: int | None) -> View:
        return View(self, seed)


class View:
    """One seed's values (``seed``), or the means over the seeds (``None``): what a claim
    checks. A mean is None when a seed has no result (not run, failed or diverged).
    ``read``: the (setting, method, metric) asked for so far."""

    def __init__(self, results: Results, seed: int | None) -> None:
        self.results = results
        self.seed = seed
        self.read: dict[tuple[str, str, str], None] = {}

    def per_seed(self, setting: str, method: str, metric: str) -> list[float | None]:
        """The values the mean is taken over, aligned by seed (one value for one seed)."""
        if self.seed is not None:
            return [self.get(setting, method, metric)]
        return self.results.per_seed(setting, method, metric)

    def get(self, setting: str, method: str, metric: str) -> float | None:
        self.read[setting, method, metric] = None
        if self.seed is not None:
            return self.results.at(setting, method, self.seed, metric)
        values = self.results.per_seed(setting, method, metric)
        if not values or any(v is None for v in values):
            return None
        return statistics.fmean(values)  # type: ignore[arg-type]


# ------------------------------------------------------------------- series and curves


def series_of(plan: Plan, setting: str, method: str) -> str:
    """The line (a sweep's series, else the method itself) that ``method`` belongs to."""
    runs = (r for r in plan.runs if r.setting == setting and method in rows_of(r))
    return next(r.line for r in runs)


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


def mean_curve(results: Results, setting: str, method: str) -> Records:
    """The accuracy (and its standard deviation over the seeds, ``test_accuracy_std``) and
    bytes per evaluated round, averaged over the seeds that finished (a diverged seed is drawn
    on its own: :meth:`Results.stopped`)."""
    runs = results.runs_of(setting, method)
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
                "test_accuracy_std": spread([x["test_accuracy"] for x in recs]),
                "bytes_up": statistics.fmean(x["bytes_up"] for x in recs),
                "bytes_down": statistics.fmean(x["bytes_down"] for x in recs),
            }
        )
    return out


def spread(values: list[float]) -> float:
    """The standard deviation over the seeds (0 with one)."""
    return statistics.stdev(values) if len(values) > 1 else 0.0


def mean_rows(
    results: Results, setting: str, method: str, file: str, key: str
) -> list[tuple[float, float, float]]:
    """``key`` of each round of the runs' ``file`` (a JSON-lines diagnostic): the mean over
    the seeds that wrote it, and their standard deviation."""
    per_round: dict[int, list[float]] = {}
    for run in results.runs_of(setting, method):
        path = run.path / file
        if not path.is_file():
            continue
        for r in read_jsonl(path):
            if r.get(key) is not None:
                per_round.setdefault(r["round"], []).append(r[key])
    return [(float(k), statistics.fmean(v), spread(v)) for k, v in sorted(per_round.items())]


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


__all__ = [
    "CONTINUAL",
    "Outcome",
    "Results",
    "View",
    "curve_gap",
    "load_results",
    "mean_curve",
    "mean_rows",
    "outcomes_of",
    "round_lines",
    "rows_of",
    "series_of",
    "study_rows",
]
