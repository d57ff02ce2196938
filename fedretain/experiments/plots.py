"""Plots, as PNG files written atomically (matplotlib, Agg backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from fedretain.experiments.results import save_figure

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
