"""Plots, as PNG files written atomically (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedretain.files import save_figure

Run = tuple[str, Sequence[dict[str, Any]]]  # (label, metrics records)

LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "v", "D", "P", "X", "*", "<", ">")
MARKS = 8  # markers along a line: enough to tell lines apart, few enough to read them


def style(i: int, points: int = 0) -> dict[str, Any]:
    """The ``i``-th line's colour, marker and line style (cycles of 10, 10 and 4): any two of
    the first ten lines differ in marker as well as colour; each line is a little thinner,
    with smaller markers, than the one before, so a line drawn over an earlier one leaves its
    edges in sight; with ``points``, markers on about ``MARKS`` of them, staggered from line
    to line so that they do not hide each other."""
    k = i % 10
    out: dict[str, Any] = {
        "color": f"C{k}",
        "linestyle": LINESTYLES[i % len(LINESTYLES)],
        "marker": MARKERS[i % len(MARKERS)],
        "linewidth": 2.8 - 0.18 * k,
        "markersize": 10.0 - 0.6 * k,
    }
    if points > MARKS:
        step = max(points // MARKS, 1)
        out["markevery"] = (i % step, step)
    return out


def plot_curves(
    runs: Sequence[Run],
    path: str | Path,
    x: str = "round",
    title: str = "",
    stopped: Sequence[Run] = (),
) -> None:
    """Test accuracy of each run against ``round`` or cumulative communication bytes, every
    run in its own colour, line style and marker; where the records hold
    ``test_accuracy_std`` (a mean over seeds), a band of ± one standard deviation around the
    line; ``stopped``: runs that ended early (a diverged seed), each drawn thin to its last
    record, which a large cross marks."""

    def xs_of(records: Sequence[dict[str, Any]]) -> list[float]:
        if x == "bytes":
            return [(r["bytes_up"] + r["bytes_down"]) / 1e6 for r in records]
        return [r["round"] for r in records]

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for i, (label, records) in enumerate(runs):
        ys = [r["test_accuracy"] for r in records]
        look = style(i, len(ys))
        ax.plot(xs_of(records), ys, label=label, **look)
        if records and "test_accuracy_std" in records[0]:
            band(ax, xs_of(records), ys, [r["test_accuracy_std"] for r in records], look["color"])
    for i, (label, records) in enumerate(stopped, len(runs)):
        xs, ys = xs_of(records), [r["test_accuracy"] for r in records]
        line = {**style(i, len(ys)), "linewidth": 1.0}
        ax.plot(xs, ys, label=label, alpha=0.8, **line)
        if xs:
            ax.plot(xs[-1:], ys[-1:], "X", color=line["color"], markersize=11, mec="black")
    ax.set_xlabel("communication (MB, up + down)" if x == "bytes" else "round")
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    if len(runs) + len(stopped) > 1 or (runs and runs[0][0]):
        ax.legend(fontsize=8)
    save_figure(fig, path)
    plt.close(fig)


def plot_panels(runs: Sequence[Run], path: str | Path, reference: str, title: str = "") -> None:
    """Small multiples of :func:`plot_curves`' accuracy over rounds: one panel per run, in its
    colour and marker with its band of ± one standard deviation, over ``reference``'s curve
    (black, dashed; its band too), the axes shared, so that methods whose curves lie on top of each
    other in one plot can each be seen against the same baseline."""
    cols = 3
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(
        rows, cols, figsize=(9.6, 2.6 * rows), sharex=True, sharey=True, squeeze=False
    )
    base = dict(runs).get(reference, [])
    for i, ax in enumerate(axes.flat):
        if i >= len(runs):
            ax.axis("off")
            continue
        label, records = runs[i]
        look = style(i, len(records))
        if base and label != reference:
            xs, ys = [r["round"] for r in base], [r["test_accuracy"] for r in base]
            ax.plot(xs, ys, color="black", linewidth=1.1, linestyle=(0, (4, 2)), label=reference)
            band(ax, xs, ys, [r.get("test_accuracy_std", 0.0) for r in base], "black")
        xs, ys = [r["round"] for r in records], [r["test_accuracy"] for r in records]
        ax.plot(xs, ys, label=label, **look)
        band(ax, xs, ys, [r.get("test_accuracy_std", 0.0) for r in records], look["color"])
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
        if i % cols == 0:
            ax.set_ylabel("test accuracy")
        if i >= len(runs) - cols:
            ax.set_xlabel("round")
    if title:
        fig.suptitle(title)
    save_figure(fig, path)
    plt.close(fig)


def band(
    ax: Any, xs: Sequence[float], ys: Sequence[float], sd: Sequence[float], color: str
) -> None:
    """A translucent band of ± ``sd`` around a line (the spread over the seeds)."""
    if not any(sd):
        return
    low = [y - s for y, s in zip(ys, sd, strict=True)]
    high = [y + s for y, s in zip(ys, sd, strict=True)]
    ax.fill_between(xs, low, high, color=color, alpha=0.15, linewidth=0)


def plot_partition(counts: np.ndarray, path: str | Path, max_clients: int = 100) -> None:
    """Heat map of samples per class (rows) and client (columns), like TCE's Figure 4."""
    shown = counts[:max_clients]
    fig, ax = plt.subplots(figsize=(min(2 + 0.12 * len(shown), 16), 0.3 * counts.shape[1] + 1.5))
    im = ax.imshow(shown.T, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_xlabel(f"client (first {len(shown)} of {len(counts)})")
    ax.set_ylabel("class")
    fig.colorbar(im, ax=ax, label="samples")
    save_figure(fig, path)
    plt.close(fig)


def plot_loss_increase(
    rows: Sequence[dict[str, Any]], path: str | Path, title: str = "", reference: str = ""
) -> None:
    """FedReg's Figure 1: loss on the previous round's clients' data under the global model
    (``loss(t-1)``) and averaged over this round's local models (``loss(t)``); with a
    reference algorithm, also its ``loss(t)`` from the same global models."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    rounds = [r["round"] for r in rows]
    lines = [("loss(t-1)", "loss_prev_mean"), ("loss(t)", "loss_now_mean")]
    if reference and all("loss_now_ref_mean" in r for r in rows):
        lines.append((f"loss(t), {reference} from the same models", "loss_now_ref_mean"))
    for i, (label, key) in enumerate(lines):
        ys = [r[key] for r in rows]
        ax.plot(rounds, ys, label=label, **style(i, len(ys)))
    ax.set_xlabel("round t")
    ax.set_ylabel("loss on the clients of round t-1")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    save_figure(fig, path)
    plt.close(fig)


def plot_forgetting_heatmap(record: dict[str, Any], path: str | Path, title: str = "") -> None:
    """TCE's forgetting matrix: ``F_ki`` (rows k: evaluated client, columns i: local model)."""
    f = np.asarray(record["F"])
    clients = record["clients"]
    fig, ax = plt.subplots(figsize=(1.5 + 0.45 * len(clients), 1.2 + 0.45 * len(clients)))
    lim = max(float(np.abs(f).max()), 1e-6)
    im = ax.imshow(f, cmap="RdBu", vmin=-lim, vmax=lim, interpolation="nearest")
    ax.set_xticks(range(len(clients)), [str(c) for c in clients], rotation=90, fontsize=7)
    ax.set_yticks(range(len(clients)), [str(c) for c in clients], fontsize=7)
    ax.set_xlabel("local model of client i")
    ax.set_ylabel(f"accuracy on client k ({record.get('F_on', 'validation')} data)")
    fig.colorbar(im, ax=ax, label="F_ki = Acc_k(local i) - Acc_k(global)")
    if title:
        ax.set_title(title, fontsize=9)
    save_figure(fig, path)
    plt.close(fig)
