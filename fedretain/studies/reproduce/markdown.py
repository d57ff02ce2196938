"""How the report writes its numbers and tables: metric labels, one number (:func:`fmt`), a
cell of values over the seeds (:func:`cell`), markdown tables (:func:`table`) and images."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fedretain.studies.presets.plan import INF, NO_GUARANTEE

LABELS = {
    "avg_acc": "average accuracy",
    "forgetting": "average forgetting",
    "bwt": "backward transfer",
    "final": "final acc",
    "last": "last acc",
    "top": "top acc (test max)",
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
    "psnr_random": "random-image PSNR (dB)",
    "psnr_mean": "mean-image PSNR (dB)",
}
# measures no mean over the seeds may be taken of: each seed's σ* is its own (a mean ε over
# different σ means nothing), shown seed by seed
PER_SEED = ("sigma", "epsilon")


def label(metric: str) -> str:
    """A metric's column heading."""
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
    if metric in ("psnr", "psnr_random", "psnr_mean"):
        return f"{value:.2f}"
    if metric == "epsilon" and value > NO_GUARANTEE:
        return f"{value:.3g} (no meaningful guarantee)"
    if metric in ("sigma", "epsilon") or abs(value) >= 1e6:  # a blown-up loss: its magnitude
        return f"{value:.3g}"
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
    if metric in PER_SEED:
        return "-" if all(v is None for v in values) else f"per seed: {shown}"
    if any(notes) or any(v is None or v == INF for v in values):
        return f"- ({shown})"
    mean, std = statistics.fmean(values), statistics.stdev(values)  # type: ignore[arg-type]
    return f"{fmt(mean, metric)} ± {fmt(std, metric)} ({shown})"


def row(cells: Sequence[str]) -> str:
    """One markdown table row."""
    return "| " + " | ".join(cells) + " |"


def table(head: Sequence[str], rows: Sequence[Sequence[str]] = ()) -> list[str]:
    """A markdown table: its heading row, the rule under it and ``rows``."""
    return [row(head), "|" + "---|" * len(head), *(row(r) for r in rows)]


def image(alt: str, path: Path | str, caption: str = "") -> list[str]:
    """The report's lines that show an image beside the report (and its caption)."""
    lines = [f"![{alt}]({Path(path).name})", ""]
    return [*lines, caption, ""] if caption else lines


__all__ = ["LABELS", "cell", "fmt", "image", "label", "row", "table"]
