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


def plot_curves(runs: Sequence[Run], path: str | Path, x: str = "round", title: str = "") -> None:
    """Test accuracy of each run against ``round`` or cumulative communication bytes."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, records in runs:
        if x == "bytes":
            xs = [(r["bytes_up"] + r["bytes_down"]) / 1e6 for r in records]
        else:
            xs = [r["round"] for r in records]
        ax.plot(xs, [r["test_accuracy"] for r in records], label=label, linewidth=1.6)
    ax.set_xlabel("communication (MB, up + down)" if x == "bytes" else "round")
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    if title:
        ax.set_title(title)
    if len(runs) > 1 or (runs and runs[0][0]):
        ax.legend(fontsize=8)
    save_figure(fig, path)
    plt.close(fig)


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
    ax.plot(rounds, [r["loss_prev_mean"] for r in rows], label="loss(t-1)", linewidth=1.6)
    ax.plot(rounds, [r["loss_now_mean"] for r in rows], label="loss(t)", linewidth=1.6)
    if reference and all("loss_now_ref_mean" in r for r in rows):
        ax.plot(
            rounds,
            [r["loss_now_ref_mean"] for r in rows],
            label=f"loss(t), {reference} from the same models",
            linewidth=1.6,
            linestyle="--",
        )
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
