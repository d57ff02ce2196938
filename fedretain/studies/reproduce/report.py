"""``report.md``: what a preset's runs gave, written from their folders.

Per setting the paper's numbers beside ours (mean ± std over the seeds and each seed's value)
and accuracy-over-round plots; the summary, the extra plots (:mod:`.figures`), the accuracy
change against the classes each round's clients held (coverage), the sweep, the claims with
their verdicts (:mod:`.claims`), the runs that failed or diverged, the CPU the runs ran on,
and the command line of every run. :func:`write_reports` writes one report per preset, and
one combined report when an invocation ran several presets.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from fedretain.data.fetch import SOURCES
from fedretain.files import atomic_write_text, write_json
from fedretain.metrics.accuracy import evaluations, tail_count
from fedretain.studies.presets import Plan, slug
from fedretain.studies.reproduce.claims import chance_line, claims_section
from fedretain.studies.reproduce.figures import curves_figure, extra_plots, sweep_section
from fedretain.studies.reproduce.jobs import (
    Section,
    cpu_text,
    hardware_changed,
    job_command,
)
from fedretain.studies.reproduce.markdown import cell, fmt, label, table
from fedretain.studies.reproduce.results import (
    Results,
    load_results,
    round_lines,
    series_of,
)


def write_reports(
    sections: list[Section], errors: dict[Path, str], out: Path
) -> tuple[Path, dict[str, int]]:
    """Each section's report (in its folder) and, for several, ``out/report.md`` holding them
    all; returns the report's path and the runs by state, summed over the sections."""
    several = len(sections) > 1
    texts, counts = [], dict.fromkeys(("finished", "diverged", "failed", "not run"), 0)
    for section in sections:
        text, found = write_report(section, errors)
        texts.append(relink(text, section.name) if several else text)
        counts = {k: counts[k] + found[k] for k in counts}
    report = out / "report.md"
    if several:
        index = ["# fedretain reproduce", ""]
        index += [f"- [{s.plan.title}]({s.name}/report.md)" for s in sections]
        atomic_write_text(report, "\n".join([*index, "", *texts]))
    return report, counts


def relink(text: str, prefix: str) -> str:
    """A preset's report inside the combined one: images under its folder, headings one down."""
    lines = []
    for line in text.splitlines():
        if line.startswith("!["):
            alt, _, rest = line.partition("](")
            line = f"{alt}]({prefix}/{rest}"
        if line.startswith("#"):
            line = "#" + line
        lines.append(line)
    return "\n".join(lines)


def write_report(section: Section, errors: dict[Path, str]) -> tuple[str, dict[str, int]]:
    """Write ``<preset folder>/report.md`` and its plots; returns the markdown and the runs
    by state (:meth:`Results.counts`)."""
    plan, data, folder = section.plan, section.data, section.folder
    results = load_results(section)
    counts = results.counts()
    lines = heading_lines(section, results)
    lines += runs_lines(plan, results, counts)
    lines += machine_lines(results)
    lines += results_tables(plan, results, folder)
    lines += settings_section(plan, results)
    lines += tuning_section(plan, results)
    if plan.paragraph and counts["finished"]:
        lines += ["## Summary", "", plan.paragraph(results.view(None), plan), ""]
    lines += extra_plots(plan, results, folder)
    lines += coverage_section(plan, results)
    if plan.sweep:
        lines += sweep_section(plan, results, folder)
    if plan.claims:
        claims, records = claims_section(plan, results, data)
        lines += claims
    lines += failures_section(section, results, errors)
    lines += ["## Every run", "", "<details><summary>The command of each run</summary>", ""]
    lines += ["```bash", *(job_command(j) for j in section.jobs), "```", "", "</details>", ""]
    text = "\n".join(lines)
    atomic_write_text(folder / "report.md", text)
    if plan.claims:
        write_json(folder / CLAIMS_FILE, claims_record(section, results, records))
    if plan.choices is not None and counts["finished"]:
        write_json(folder / CHOICES_FILE, plan.choices(results.view(None), plan))
    return text, counts


CLAIMS_FILE = "claims.json"  # each claim's verdict, for the claims ledger (docs/claims.md)
CHOICES_FILE = "choices.json"  # a tuning preset's choices (fedretain.studies.tuning)


def claims_record(
    section: Section, results: Results, claims: list[dict[str, Any]]
) -> dict[str, Any]:
    """What ``claims.json`` holds: the preset, its paper, scale, seeds and data, and each
    claim's verdict (:func:`~fedretain.studies.reproduce.claims.claims_section`)."""
    from fedretain.studies.presets import PRESETS

    data = section.data
    paper = PRESETS.get(section.name).meta.get("paper", "")
    used = data.name if not data.missing else "none (missing)"
    if data.name != data.paper and not data.missing:
        used = f"{data.name} (stands in for {data.paper})"
    return {
        "preset": section.name,
        "title": section.plan.title,
        "paper": paper,
        "source": section.plan.source,
        "scale": section.scale,
        "seeds": len(results.seeds),
        "data": used,
        "claims": [{**c, "paper": c.get("paper") or paper} for c in claims],
    }


def heading_lines(section: Section, results: Results) -> list[str]:
    """The title, the seeds and the paper's source, the command that reproduces the report,
    the data used and what differs from the paper."""
    plan, data = section.plan, section.data
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
            f"Get them with `fedretain data get {data.paper}` (the command above then finds "
            "them), or run the command above with `--data-dir FOLDER` (the folder holding them)."
            if data.paper in SOURCES
            else "Then run the command above with `--data-dir FOLDER` (the folder holding the "
            "files)."
        )
        lines.append("")
    elif data.note and plan.base.get("dataset") == data.name:
        lines += [f"Data: {data.note}", ""]
    if plan.reasons:
        lines += ["What differs from the paper here:", ""]
        lines += [f"- {r}" for r in plan.reasons] + [""]
    if plan.left_out:
        lines += [f"Baselines of the paper's table left out: {plan.left_out}", ""]
    return lines


def runs_lines(plan: Plan, results: Results, counts: dict[str, int]) -> list[str]:
    """How many runs finished, diverged, failed or did not run, and the training time."""
    wall = sum(r.summary.get("wall_seconds") or 0 for r in results.runs.values())
    others = ", ".join(f"{counts[k]} {k}" for k in ("diverged", "failed", "not run"))
    lines = [
        f"Runs: {counts['finished']} of {len(plan.runs)} finished, {others}; {wall:.0f} s of "
        "training in all.",
        "",
    ]
    if counts["diverged"] + counts["failed"]:
        lines += [
            "A run that diverged or failed is no result: it is left out of every mean, "
            "ranking and verdict, and listed under [Runs that failed or diverged]"
            "(#runs-that-failed-or-diverged).",
            "",
        ]
    return lines


def machine_lines(results: Results) -> list[str]:
    """The CPU(s) the runs ran on (from their status.json), and why it matters. The machine
    that writes the report is never named: a report rewrites byte-identically on any."""
    ran: dict[str, int] = {}
    for o in {id(o.job): o for o in results.outcomes.values() if o.run}.values():
        key = cpu_text(o.cpu) if o.cpu else ""
        ran[key] = ran.get(key, 0) + 1
    recorded = {k: n for k, n in ran.items() if k}
    if not recorded:
        where = "the runs did not record their CPU" if ran else "no run has a result yet"
    elif len(recorded) == 1 and not ran.get(""):
        where = f"the runs ran on {next(iter(recorded))}"
    else:
        where = "the runs ran on " + "; ".join(f"{k} ({n} runs)" for k, n in recorded.items())
        if ran.get(""):
            where += f"; {ran['']} runs did not record theirs"
    lines = [
        f"Machine: {where}. float32 results vary across CPUs: torch picks its kernels by the "
        "CPU's instruction set, so the same config and seed give different numbers on a CPU "
        "without AVX-512, and a margin within the seeds' spread may change sign.",
        "",
    ]
    moved = {
        o.job.folder: o.cpu["machines"]
        for o in results.outcomes.values()
        if o.run and hardware_changed(o.cpu.get("machines") or [])
    }
    for folder, machines in sorted(moved.items()):
        kinds = " -> ".join(f"{cpu_text(m)} on {m.get('host', '?')}" for m in machines)
        lines += [
            f"Changed machine mid-run (resumed or retried elsewhere): `{folder.name}` of "
            f"`{folder.parent.parent.name}/{folder.parent.name}`: {kinds}; its numbers after "
            "the change may differ from an unbroken run's.",
            "",
        ]
    return lines


# ------------------------------------------------------------------------- the results


def results_tables(plan: Plan, results: Results, folder: Path) -> list[str]:
    """Per setting: the table of ours beside the paper's numbers, and accuracy over rounds;
    then what the rounds-to and R_a columns count, and the plan's notes."""
    lines = ["## Results", ""]
    if len(results.seeds) > 1:
        lines += [
            "Ours: mean ± std over the seeds (each seed's value); '-': never reached, or no "
            "mean because a seed has no result (it diverged, failed or did not run).",
            "",
        ]
    for setting in plan.settings():
        lines += [f"### {setting}", "", *setting_table(plan, results, setting), ""]
        if "round" in plan.plots:
            path = folder / f"accuracy-{slug(setting)}.png"
            alt = f"accuracy over rounds, {setting}"
            methods = round_lines(plan, results, setting)
            lines += curves_figure(results, setting, methods, "round", path, alt)
    lines += target_notes(plan)
    lines += chance_notes(plan, results)
    lines += metric_notes(plan, results)
    lines += [line for note in plan.notes for line in (note, "")]
    if plan.reference and any(m.startswith("R_") for m in plan.metrics):
        lines += [
            f"R_a: the first round reaching a x the final accuracy of {plan.reference} in the "
            "same setting and seed (FedReg's measure).",
            "",
        ]
    return lines


def columns(metrics: list[str]) -> list[str]:
    """A table's metrics as shown: the last evaluation beside the final accuracy, and the
    bytes up and down in every table."""
    out = []
    for metric in metrics:
        out.append(metric)
        if metric == "final" and "last" not in metrics:
            out.append("last")
    return out + [m for m in ("MB_up", "MB_down") if m not in out]


def setting_table(plan: Plan, results: Results, setting: str) -> list[str]:
    """One setting's rows: each method's metrics, the paper's beside ours where it has them."""
    methods = plan.methods(setting)
    head, cols = ["method"], []
    keys = {*methods, *(series_of(plan, setting, m) for m in methods)}
    for metric in columns(plan.metrics_of(setting)):
        if any(metric in plan.paper.get((setting, m), {}) for m in keys):
            head.append(f"{label(metric)} (paper)")
            cols.append((metric, True))
        head.append(label(metric))
        cols.append((metric, False))
    rows = []
    for method in methods:
        notes = results.notes(setting, method)
        rows.append(
            [method]
            + [
                fmt(paper_value(plan, results, setting, method, metric), metric)
                if paper
                else cell(results.per_seed(setting, method, metric), metric, notes)
                for metric, paper in cols
            ]
        )
    return table(head, rows)


def chance_notes(plan: Plan, results: Results) -> list[str]:
    """The methods whose final accuracy is at chance on some seed, in any setting, whether a
    claim reads them or not: their numbers in the tables above measure nothing learnt."""
    line = chance_line(plan.chance)
    found = []
    for setting in plan.settings():
        for method in plan.methods(setting):
            finals = [v for v in results.per_seed(setting, method, "final") if v is not None]
            low = [v for v in finals if v <= line]
            if low:
                where = f"{setting}: " if len(plan.settings()) > 1 else ""
                found.append(f"{where}{method} ({len(low)} of {len(finals)} seeds)")
    if not found:
        return []
    return [
        f"At chance (a final accuracy of at most {line:.3f}, against {plan.chance:g} for a "
        f"guess): {'; '.join(found)}. Their other numbers measure nothing learnt, and a claim "
        "that compares only such models is undecided.",
        "",
    ]


def metric_notes(plan: Plan, results: Results) -> list[str]:
    """What the accuracy columns measure (how many evaluations "final" averages)."""
    shown = {m for s in plan.settings() for m in columns(plan.metrics_of(s))}
    if "final" not in shown and "top" not in shown:
        return []
    counts = sorted({len(evaluations(r.records)) for r in results.runs.values()})
    tails = ", ".join(f"{tail_count(n)} of {n}" for n in counts)
    here = f" (here the last {tails})" if tails else ""
    return [
        "final acc: the mean test accuracy over the last 10 % of the evaluations"
        f"{here}, so that one evaluation of a swinging curve does not decide it; last "
        "acc: the last evaluation; top acc: the highest test accuracy of any evaluation, picked "
        "on the test set itself (an optimistic measure). MB up and down: the bytes each run "
        "sent and received in all.",
        "",
    ]


def settings_section(plan: Plan, results: Results) -> list[str]:
    """Per setting, the keys the plan sets per method (and the learning rate), with the
    values each method's first finished run ran with (its ``config.toml``): what each method
    ran with, whatever the plan meant or the command line added."""
    import tomllib

    lines = []
    for setting in plan.settings():
        configs = {}
        for method in plan.methods(setting):
            runs = results.runs_of(setting, method)
            if runs and (runs[0].path / "config.toml").is_file():
                configs[method] = flat(tomllib.loads((runs[0].path / "config.toml").read_text()))
        if len(configs) < 2 or plan.sweep:
            continue
        own = [k for r in plan.runs if r.setting == setting for k in r.overrides]
        keys = ["lr", *dict.fromkeys(k for k in own if k not in UNSHOWN and k != "lr")]
        rows = [[m, *(shown(c.get(k)) for k in keys)] for m, c in configs.items()]
        head = f"### Settings of each method: {setting}" if len(plan.settings()) > 1 else ""
        lines += [head, ""] if head else []
        lines += [*table(["method", *keys], rows), ""]
    if lines:
        lines = [
            "## Settings of each method",
            "",
            "The keys set per method, and the learning rate, as each method's runs ran with "
            "them (their config.toml).",
            "",
            *lines,
        ]
    return lines


UNSHOWN = {"name", "seed", "threads", "device", "data_dir", "deterministic"}


def flat(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A config.toml's keys as ``KEY=VALUE`` arguments name them (``algo.mu``, ``model``)."""
    out: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict):
            for k, v in value.items():
                out[key if k == "name" else f"{key}.{k}"] = v
        else:
            out[prefix + key] = value
    return out


def shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value) if value != "" else '""'


def tuning_section(plan: Plan, results: Results) -> list[str]:
    """How the methods' learning rates and hyper-parameters were chosen: the tuning's choices,
    their grids and every point's validation score, or why they were not tuned; and where a
    run did not run with its method's choice (a KEY=VALUE on the command line overrode it)."""
    import tomllib

    if not plan.tuning and not plan.tuning_note:
        return []
    lines = ["## Tuning", ""]
    if plan.tuning_note:
        lines += [plan.tuning_note, ""]
    if not plan.tuning:
        return lines
    overridden = []
    for t in plan.tuning:
        settings = [t.setting] if t.setting else plan.settings()
        for setting in settings:
            for run in results.runs_of(setting, t.runs_as())[:1]:
                ran = flat(tomllib.loads((run.path / "config.toml").read_text()))
                overridden += [
                    f"{t.runs_as()} {k}={ran.get(k)} (chosen: {x:g})"
                    for k, x in t.chosen.items()
                    if k in ran and ran[k] != x
                ]
    if overridden:
        lines += [
            "**The runs did not run with the tuned values**: "
            + "; ".join(dict.fromkeys(overridden))
            + " (the command's KEY=VALUE settings override them).",
            "",
        ]
    from fedretain.studies.tuning import Criterion

    per_setting = any(t.setting for t in plan.tuning)
    rows = []
    for t in plan.tuning:
        grid = "; ".join(f"{k} in {{{', '.join(f'{x:g}' for x in v)}}}" for k, v in t.grid.items())
        chosen = ", ".join(f"{k}={x:g}" for k, x in t.chosen.items())
        edge = ", ".join(t.edge) if t.edge else ""
        rows.append([*([t.setting] if per_setting else []), t.method, grid, chosen, edge])
    head = ["method", "grid", "chosen", "at a grid edge"]
    lines += [*table(["setting", *head] if per_setting else head, rows), ""]
    summary = "Every point's validation score"
    if any(t.target is not None for t in plan.tuning):
        summary += " (rounds to the target; one that never reached it shows one after the last)"
    lines += [f"<details><summary>{summary}</summary>", ""]
    for t in plan.tuning:
        shown = Criterion(t.target).shown
        scored = [
            ", ".join(f"{k}={v:g}" for k, v in p.items() if k != "score")
            + (f": {shown(p['score'])}" if p.get("score") is not None else ": no result")
            for p in t.points
        ]
        where = f"{t.setting}, " if t.setting else ""
        lines += [f"- {where}{t.method}: " + "; ".join(scored)]
    lines += ["", "</details>", ""]
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
    value) shows it on the row of the value chosen on validation (``plan.tuning``), else of
    our best value (highest mean final accuracy)."""
    own = plan.paper.get((setting, method))
    if own is not None:
        return own.get(metric)
    series = series_of(plan, setting, method)
    theirs = plan.paper.get((setting, series))
    if theirs is None:
        return None
    chosen = [
        t.runs_as()
        for t in plan.tuning
        if t.setting in ("", setting) and series_of(plan, setting, t.runs_as()) == series
    ]
    if chosen:
        return theirs.get(metric) if method == chosen[0] else None
    if method not in round_lines(plan, results, setting):
        return None
    return theirs.get(metric)


# ----------------------------------------------------------------------------- coverage


def coverage_section(plan: Plan, results: Results) -> list[str]:
    """For ``plan.coverage``'s settings: each method's mean accuracy change between two
    evaluations against the number of classes the clients of the rounds in between held (over
    the seeds), and the correlation of the two. The rounds' clients and data come from each
    run's own config (its partition and participation, rebuilt)."""
    import numpy as np

    lines = []
    for setting in plan.coverage:
        feds: dict[int, Any] = {}  # one partition per seed: every method's is the same
        found = {m: coverage_pairs(results, setting, m, feds) for m in plan.methods(setting)}
        rows = {m: pairs for m, pairs in found.items() if pairs}
        if not rows:
            continue
        counts = sorted({k for pairs in rows.values() for k, _ in pairs})
        head = ["method", *[f"{k} classes" for k in counts], "correlation"]
        body = []
        for method, pairs in rows.items():
            k = np.array([p[0] for p in pairs], dtype=float)
            d = np.array([p[1] for p in pairs])
            cells = [
                f"{100 * d[k == c].mean():+.1f} ({int((k == c).sum())})" if (k == c).any() else ""
                for c in counts
            ]
            corr = f"{np.corrcoef(k, d)[0, 1]:+.2f}" if k.std() > 0 and d.std() > 0 else "-"
            body.append([method, *cells, corr])
        lines += [
            f"### {setting}: accuracy change against the classes the rounds' clients held",
            "",
            "Mean change of test accuracy (points) from one evaluation to the next, by how "
            "many classes the clients of the rounds in between held (how often, over the "
            "seeds), and the correlation of the two: where it is strongly positive, the swings "
            "follow which classes each round happened to sample.",
            "",
            *table(head, body),
            "",
        ]
    return lines


def coverage_pairs(
    results: Results, setting: str, method: str, feds: dict[int, Any]
) -> list[tuple[int, float]]:
    """(classes the clients between two evaluations held, the accuracy change between them)
    over ``method``'s finished seeds; ``feds``: each seed's rebuilt federation, shared by
    the methods."""
    import numpy as np

    from fedretain.recipe.config import config_from_text
    from fedretain.recipe.federation import build_federation

    pairs = []
    for seed in results.seeds:
        run = results.run(setting, method, seed)
        if run is None:
            continue
        if seed not in feds:
            cfg = config_from_text((run.path / "config.toml").read_text())
            feds[seed] = build_federation(cfg)
        fed = feds[seed]
        labels = np.asarray(fed.dataset.y_train)
        acc = {r["round"]: r["test_accuracy"] for r in run.records}
        for a, b in itertools.pairwise(sorted(acc)):
            cids = [c for rnd in range(a, b) for c in fed.participation.clients(rnd)]
            held = {int(k) for c in cids for k in np.unique(labels[fed.parts[c]])}
            pairs.append((len(held), acc[b] - acc[a]))
    return pairs


# ---------------------------------------------------------------------------- failures


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


__all__ = [
    "coverage_section",
    "failures_section",
    "machine_lines",
    "relink",
    "results_tables",
    "write_report",
    "write_reports",
]
