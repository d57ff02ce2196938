"""``fedretain compare``: a table of runs and their overlaid accuracy curves.

Reads results folders (the contract written by :mod:`fedretain.experiments.runner`) and writes
``report.md``, ``report.json``, ``accuracy_vs_round.png`` and ``accuracy_vs_bytes.png``.
With a reference run (FedReg uses SGD in the same setting), also ``R_a`` for a in 0.5, 0.9, 1.0.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedretain.errors import DataError
from fedretain.experiments.plots import plot_curves
from fedretain.experiments.results import atomic_write_text, read_jsonl, write_json
from fedretain.metrics.accuracy import r_a

R_A_LEVELS = (0.5, 0.9, 1.0)


@dataclass
class RunResult:
    path: Path
    label: str
    config: dict[str, Any]
    summary: dict[str, Any]
    records: list[dict[str, Any]]


def load_run(path: str | Path) -> RunResult:
    path = Path(path)
    missing = [f for f in ("summary.json", "metrics.jsonl") if not (path / f).is_file()]
    if missing:
        raise DataError(
            f"{path} is not a finished fedretain results folder (no {missing[0]}); "
            "pass folders written by `fedretain run --out DIR`"
        )
    try:
        summary = json.loads((path / "summary.json").read_text())
        records = read_jsonl(path / "metrics.jsonl")
        config = tomllib.loads((path / "config.toml").read_text())
    except (json.JSONDecodeError, tomllib.TOMLDecodeError, OSError) as e:
        raise DataError(f"cannot read results in {path}: {e}") from None
    label = summary.get("name") or config.get("name") or path.name
    return RunResult(path, label, config, summary, records)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


def compare(
    dirs: list[str | Path], out: str | Path, reference: str | Path | None = None
) -> dict[str, Any]:
    """Write the comparison report of ``dirs`` into ``out``; returns its data."""
    if not dirs:
        raise DataError("compare needs at least one results folder")
    runs = [load_run(d) for d in dirs]
    labels = [r.label for r in runs]
    if len(set(labels)) < len(labels):  # same names: tell them apart by folder
        for r in runs:
            r.label = f"{r.label} ({r.path.name})"
    ref = load_run(reference) if reference else None
    targets = list(runs[0].summary.get("rounds_to", {}))
    rows = []
    for r in runs:
        s = r.summary
        row = {
            "name": r.label,
            "folder": str(r.path),
            "algorithm": s.get("algorithm"),
            "final_accuracy": s["final_accuracy"],
            "top_accuracy": s["top_accuracy"],
            "rounds": s["rounds"],
            "rounds_to": s.get("rounds_to", {}),
            "bytes_up": s["bytes_up"],
            "bytes_down": s["bytes_down"],
            "wall_seconds": s.get("wall_seconds"),
        }
        if ref is not None:
            final_ref = ref.summary["final_accuracy"]
            row["R_a"] = {f"{a:g}": r_a(r.records, final_ref, a) for a in R_A_LEVELS}
        rows.append(row)

    lines = ["# fedretain comparison", ""]
    settings = runs[0].config
    lines.append(
        f"Dataset `{settings.get('dataset', {}).get('name', '?')}`, partition "
        f"`{settings.get('partition', {}).get('name', '?')}`, model "
        f"`{settings.get('model', {}).get('name', '?')}`, {settings.get('clients', '?')} clients, "
        f"{settings.get('clients_per_round', '?')} per round."
    )
    lines.append("")
    head = ["run", "final acc", "top acc", *[f"rounds to {t}" for t in targets]]
    if ref is not None:
        head += [f"R_{a:g}" for a in R_A_LEVELS]
    head += ["MB up", "MB down", "wall s"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for row in rows:
        cells = [row["name"], _fmt(row["final_accuracy"]), _fmt(row["top_accuracy"])]
        cells += [_fmt(row["rounds_to"].get(t)) for t in targets]
        if ref is not None:
            cells += [_fmt(v) for v in row["R_a"].values()]
        wall = row["wall_seconds"]
        cells += [
            _mb(row["bytes_up"]),
            _mb(row["bytes_down"]),
            "-" if wall is None else f"{wall:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if ref is not None:
        lines.append(
            f"R_a: first round reaching a x the final accuracy of the reference "
            f"`{ref.label}` ({ref.summary['final_accuracy']:.4f}); '-' if never."
        )
    lines.append("'-' in rounds-to columns: target never reached.")
    lines += ["", "![accuracy vs round](accuracy_vs_round.png)", ""]
    lines += ["![accuracy vs bytes](accuracy_vs_bytes.png)", ""]

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    curves = [(r.label, r.records) for r in runs]
    plot_curves(curves, out / "accuracy_vs_round.png", x="round")
    plot_curves(curves, out / "accuracy_vs_bytes.png", x="bytes")
    data = {"runs": rows, "reference": str(ref.path) if ref else None}
    write_json(out / "report.json", data)
    atomic_write_text(out / "report.md", "\n".join(lines))
    return data
