"""The report's plots and the sections built around them.

- accuracy over rounds and against bytes (:func:`curves_figure`: the mean curves, and each
  diverged seed drawn to where it stopped);
- :func:`extra_plots`: accuracy against bytes, forgetting per round, a continual preset's
  accuracy matrices and its generators' Fréchet distance;
- :func:`sweep_section`: final accuracy against a swept value, and where each series departs
  from the baseline method.

Each helper writes its PNG beside the report and returns the markdown lines that show it.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from fedretain.files import save_figure, write_json
from fedretain.studies.presets import Plan, slug
from fedretain.studies.reproduce.markdown import fmt, image, table
from fedretain.studies.reproduce.results import (
    Records,
    Results,
    curve_gap,
    mean_curve,
    mean_rows,
    spread,
)

Points = list[tuple[float, ...]]  # (x, y) or (x, y, the spread over the seeds)

# a sweep's series "acts" once its accuracy curve sits this far from the baseline's, on average
# over the evaluated rounds and seeds (the largest gap at one round measures chaos instead:
# runs differing in anything drift 2-3 points apart at some round)
ACTS = 0.005
FORGETTING = "forgetting.jsonl"  # diagnostics=forgetting
QUALITY = "generator_quality.jsonl"  # diagnostics=generator_quality


def plot_lines(
    series: list[tuple[str, Points]],
    path: Path,
    xlabel: str,
    ylabel: str,
    title: str = "",
    log: bool = False,
    hlines: list[tuple[str, float]] | None = None,
) -> None:
    """Lines of (x, y) points, one per label, each with a band of ± its points' third value
    where they have one (the spread over the seeds); ``hlines``: labelled horizontal
    lines."""
    from fedretain.experiments import plots  # matplotlib on the Agg backend

    fig, ax = plots.plt.subplots(figsize=(6.4, 4.2))
    for i, (name, points) in enumerate(series):
        style = plots.style(i, len(points))
        xs, ys = [p[0] for p in points], [p[1] for p in points]
        ax.plot(xs, ys, label=name, **style)
        if points and len(points[0]) > 2:
            plots.band(ax, xs, ys, [p[2] for p in points], style["color"])
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


def figure(
    series: list[tuple[str, Points]], path: Path, alt: str, caption: str = "", **plot: Any
) -> list[str]:
    """:func:`plot_lines` into ``path``, and the report's lines that show it (the image, its
    caption)."""
    plot_lines(series, path, **plot)
    return image(alt, path, caption)


def curve_plot(
    curves: list[tuple[str, Records]],
    stopped: list[tuple[str, Records]],
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
    if x == "round":
        write_json(path.with_suffix(".json"), curve_data(curves, stopped, title))
    caption = ""
    if stopped:
        caption = (
            "Each line: the mean over the seeds that finished (a method whose seeds all "
            "diverged has none); a thin line ending in a cross: a seed that diverged, drawn "
            "to where it stopped (" + "; ".join(label for label, _ in stopped) + ")."
        )
    return image(alt, path, caption)


def curve_data(
    curves: list[tuple[str, Records]], stopped: list[tuple[str, Records]], title: str
) -> dict[str, Any]:
    """The numbers a curve plot draws, beside its PNG (``accuracy-<setting>.json``): per
    method the evaluated rounds, the mean accuracy over the seeds and its standard deviation,
    and each diverged seed to where it stopped; the site draws them as an interactive plot
    (docs/hooks/results.py), anyone can re-plot them."""
    return {
        "title": title,
        "x": "round",
        "curves": [
            {
                "method": method,
                "round": [r["round"] for r in records],
                "mean": [r["test_accuracy"] for r in records],
                "std": [r.get("test_accuracy_std", 0.0) for r in records],
            }
            for method, records in curves
        ],
        "stopped": [
            {
                "label": label,
                "round": [r["round"] for r in records if "test_accuracy" in r],
                "accuracy": [r["test_accuracy"] for r in records if "test_accuracy" in r],
            }
            for label, records in stopped
        ],
    }


CROWDED = 5  # more methods than this on one axis: also one panel per method
PANEL_REFERENCE = "FedAvg"  # the baseline drawn in every panel


def curves_figure(
    results: Results, setting: str, methods: list[str], x: str, path: Path, alt: str
) -> list[str]:
    """The mean curves of ``methods`` (over ``x``: round or bytes) and every seed of the
    setting that diverged, as :func:`curve_plot`; nothing when there is nothing to draw."""
    curves = [(m, c) for m in methods if (c := mean_curve(results, setting, m))]
    stopped = [s for m in results.plan.methods(setting) for s in results.stopped(setting, m)]
    if not (curves or stopped):
        return []
    lines = curve_plot(curves, stopped, path, x, alt, setting)
    names = [m for m, _ in curves]
    if x == "round" and len(curves) > CROWDED and PANEL_REFERENCE in names:
        from fedretain.experiments.plots import plot_panels

        panels = path.with_name(path.name.replace("accuracy-", "accuracy-panels-", 1))
        plot_panels(curves, panels, PANEL_REFERENCE, title=setting)
        lines += image(
            f"accuracy over rounds, one panel per method, {setting}",
            panels,
            f"The same curves, one panel per method over {PANEL_REFERENCE}'s (black, dashed); "
            "bands: ± one standard deviation over the seeds.",
        )
    return lines


def extra_plots(plan: Plan, results: Results, folder: Path) -> list[str]:
    """Accuracy against bytes, the forgetting plot (loss increase per round), and a continual
    preset's accuracy matrices and generator quality, under their own heading (none when a
    preset has none of them)."""
    lines: list[str] = []
    for setting in plan.settings():
        if "bytes" in plan.plots:
            path = folder / f"accuracy_vs_bytes-{slug(setting)}.png"
            alt = f"accuracy against communication, {setting}"
            lines += curves_figure(results, setting, plan.methods(setting), "bytes", path, alt)
        if "forgetting" in plan.plots:
            lines += forgetting_figure(results, setting, folder)
        if "continual" in plan.plots:
            lines += continual_lines(results, setting, folder)
    return ["## More results", "", *lines] if lines else []


def forgetting_figure(results: Results, setting: str, folder: Path) -> list[str]:
    """The loss increase per round of each method (and of its reference, where recorded),
    mean over the seeds (``diagnostics=forgetting``)."""
    series = []
    for method in results.plan.methods(setting):
        rows = mean_rows(results, setting, method, FORGETTING, "loss_increase_mean")
        if rows:
            series.append((method, rows))
        ref = mean_rows(results, setting, method, FORGETTING, "loss_increase_ref_mean")
        if ref:  # diagnostics.reference: its local models from the same global models
            series.append((f"{method}'s reference, same global models", ref))
    if not series:
        return []
    return figure(
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


def continual_lines(results: Results, setting: str, folder: Path) -> list[str]:
    """A continual preset's per-task view: each method's accuracy matrix (mean over the
    seeds) and its generators' Fréchet distance over the rounds, where recorded."""
    lines = [f"#### {setting}", ""] if len(results.plan.settings()) > 1 else []
    methods = results.plan.methods(setting)
    for method in methods:
        runs = results.runs_of(setting, method)
        matrices = [r.summary["accuracy_matrix"] for r in runs if r.summary.get("accuracy_matrix")]
        if not matrices:
            continue
        tasks = len(matrices[0][0])
        rows = [
            [f"task {t + 1}"]
            + [f"{statistics.fmean(m[t][j] for m in matrices):.3f}" for j in range(tasks)]
            for t in range(len(matrices[0]))
        ]
        lines += [
            f"{method}: accuracy on each task's classes after each task (mean over "
            f"{len(matrices)} seed(s))",
            "",
            *table(["after", *(f"task {j + 1}" for j in range(tasks))], rows),
            "",
        ]
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


# ---------------------------------------------------------------------------- the sweep


def sweep_section(plan: Plan, results: Results, folder: Path) -> list[str]:
    """Final accuracy against the swept value per series, and where a series departs from the
    baseline method."""
    assert plan.sweep is not None
    lines = [f"## Accuracy against {plan.sweep.key}", ""]
    for setting in plan.settings():
        lines += sweep_setting(plan, results, setting, folder)
    return lines


def sweep_setting(plan: Plan, results: Results, setting: str, folder: Path) -> list[str]:
    """One setting of :func:`sweep_section`: its table, the baseline's lines and the plot."""
    sweep = plan.sweep
    assert sweep is not None
    mean = results.view(None)
    specs = [r for r in plan.runs if r.setting == setting and r.x is not None]
    series = list(dict.fromkeys(r.line for r in specs))
    xs = sorted({r.x for r in specs if r.x is not None})
    by = {(r.line, r.x): r.method for r in specs}
    final = {k: mean.get(setting, m, "final") for k, m in by.items()}
    gaps = {}
    if sweep.baseline:
        gaps = {k: curve_gap(results, setting, m, sweep.baseline) for k, m in by.items()}
    head = [sweep.key, *[f"{s} final acc" for s in series]]
    if sweep.baseline:
        head += [f"{s}: mean gap to {sweep.baseline} (points)" for s in series]
    rows = []
    for x in xs:
        row = [f"{x:g}"] + [fmt(final[s, x], "final") if (s, x) in by else "" for s in series]
        for s in series if sweep.baseline else []:
            g = gaps.get((s, x))
            row.append(f"{g * 100:+.2f}" if g is not None else "")
        rows.append(row)
    lines = [f"### {setting}", "", *table(head, rows), ""]
    hlines = []
    if sweep.baseline:
        base = mean.get(setting, sweep.baseline, "final")
        if base is not None:
            hlines.append((sweep.baseline, base))
            lines.append(f"{sweep.baseline}: final accuracy {base:.4f}.")
        for s in series:
            acts = next((x for x in xs if abs(gaps.get((s, x)) or 0.0) > ACTS), None)
            lines.append(acts_line(plan, s, acts))
        lines.append("")
    points = []
    for s in series:
        pts = [
            (x, v, seed_spread(results, setting, by[s, x]))
            for x in xs
            if (v := final.get((s, x))) is not None
        ]
        if pts:
            points.append((s, pts))
    if points:
        lines += figure(
            points,
            folder / f"sweep-{slug(setting)}.png",
            f"final accuracy against {sweep.key}, {setting}",
            xlabel=sweep.key,
            ylabel="final test accuracy (mean over seeds, band: ± sd)",
            title=setting,
            log=sweep.log,
            hlines=hlines,
        )
    return lines


def seed_spread(results: Results, setting: str, method: str) -> float:
    """The standard deviation of ``method``'s final accuracy over its seeds (0 with one)."""
    values = [x for x in results.per_seed(setting, method, "final") if x is not None]
    return spread(values)


def acts_line(plan: Plan, series: str, acts: float | None) -> str:
    """Where ``series``'s penalty starts to act (``acts``: the first swept value whose curve
    departs from the baseline's; None: none does)."""
    sweep = plan.sweep
    assert sweep is not None
    if acts is None:
        return (
            f"{series}'s accuracy curve stays within {ACTS * 100:g} points of "
            f"{sweep.baseline}'s on average over the rounds (same seeds) at every "
            f"{sweep.key} swept: its penalty does not act at these values here."
        )
    gap = (
        f"more than {ACTS * 100:g} points on average over the evaluated rounds "
        "(same seeds; the mean gap column)"
    )
    return (
        f"{series}'s penalty acts from {sweep.key} = {acts:g}: its accuracy curve "
        f"sits away from {sweep.baseline}'s by {gap}; at smaller "
        f"{sweep.key} it tracks {sweep.baseline}'s."
    )


__all__ = [
    "ACTS",
    "curve_plot",
    "curves_figure",
    "extra_plots",
    "figure",
    "plot_lines",
    "sweep_section",
]
