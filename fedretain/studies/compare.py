"""``fedretain compare``: a table of runs and their overlaid accuracy curves.

Reads results folders (the contract written by :mod:`fedretain.experiments.run`) and writes
``report.md``, ``report.json``, ``accuracy_vs_round.png`` and ``accuracy_vs_bytes.png``.
With a reference run (FedReg uses SGD in the same setting), also ``R_a`` for a in 0.5, 0.9, 1.0;
with one reference per seed, each run is measured against the reference of its own seed. Runs
that share a name over several seeds also get a mean-over-seeds table.

Runs of different datasets, models, partitions (or client counts) or continual scenarios are
refused unless ``allow_mixed``. The report lists every setting of the runs' ``config.toml``
that is not the same in all of them (``lr``, ``local_steps``, ``algo.mu``, a component whose
name differs as a whole: ``partition``), in a "settings that differ" table. A folder given twice
is refused.
"""

from __future__ import annotations

import json
import statistics
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedretain.errors import DataError
from fedretain.experiments.plots import plot_curves
from fedretain.files import atomic_write_text, read_json, read_jsonl, write_json
from fedretain.metrics.accuracy import r_a

R_A_LEVELS = (0.5, 0.9, 1.0)
# settings (with their options) runs must share to be compared; and those named in the report's
# first line (every setting that differs is shown in its table, these first)
SAME_SETTINGS = ("dataset", "model", "partition", "clients", "scenario")
SHOWN_SETTINGS = ("rounds", "clients_per_round")


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
        summary = read_json(path / "summary.json")
        records = read_jsonl(path / "metrics.jsonl")
        config = tomllib.loads((path / "config.toml").read_text())
    except (ValueError, OSError) as e:  # ValueError: JSON's and TOML's decode errors
        raise DataError(f"cannot read results in {path}: {e}") from None
    label = summary.get("name") or config.get("name") or path.name
    return RunResult(path, label, config, summary, records)


def setting(run: RunResult, key: str) -> str:
    """A setting of ``run`` in a word: ``dirichlet(alpha=0.1)``, ``none``, ``100``."""
    value = run.config.get(key)
    if isinstance(value, dict):
        name = value.get("name") or "none"
        opts = ", ".join(f"{k}={json.dumps(v)}" for k, v in value.items() if k != "name")
        return f"{name}({opts})" if opts else name
    return "?" if value is None else str(value)


def differing(runs: list[RunResult], keys: tuple[str, ...]) -> list[str]:
    """The ``keys`` whose setting is not the same in every run."""
    return [k for k in keys if len({setting(r, k) for r in runs}) > 1]


def settings_that_differ(runs: list[RunResult]) -> dict[str, list[str]]:
    """Every setting of the runs' ``config.toml`` that is not the same in all of them -> its
    value in each run, in a word. A component whose name differs is one column
    (``partition``: ``shards(...)``, ``iid``); one whose name is shared, a column per option
    that differs (``model.hidden``, ``algo.mu``). A key a run lacks (an older config) is
    ``-``. The run's ``name`` is its row's label, not a column."""
    order = [*SAME_SETTINGS, *SHOWN_SETTINGS]
    for r in runs:
        order += [k for k in r.config if k not in order]
    columns: dict[str, list[str]] = {}
    for key in order:
        values = [r.config.get(key) for r in runs]
        if key == "name" or all(v is None for v in values):
            continue
        tables = [v if isinstance(v, dict) else None for v in values]
        names = {json.dumps(t.get("name")) if t is not None else None for t in tables}
        if any(t is None for t in tables) or len(names) > 1:  # the component as a whole
            words = [setting(r, key) if v is not None else "-" for r, v in zip(runs, values)]
            if len(set(words)) > 1:
                columns[key] = words
            continue
        subs: list[str] = []
        for t in tables:
            subs += [k for k in t if k != "name" and k not in subs]  # type: ignore[union-attr]
        for sub in subs:
            words = [json.dumps(t[sub]) if sub in t else "-" for t in tables]  # type: ignore
            if len(set(words)) > 1:
                columns[f"{key}.{sub}"] = words
    return columns


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def _mb(n: int) -> str:
    return f"{n / 1e6:.1f}"


def _seed(run: RunResult) -> Any:
    return run.config.get("seed", run.summary.get("seed"))


def _pick_reference(run: RunResult, refs: list[RunResult]) -> RunResult:
    if len(refs) == 1:
        return refs[0]
    same = [r for r in refs if _seed(r) == _seed(run)]
    if len(same) != 1:
        raise DataError(
            f"{run.path} has seed {_seed(run)}, and {len(same)} of the references have it; "
            "pass one reference, or one per seed"
        )
    return same[0]


def _mean_std(values: list[float]) -> str:
    if len(values) < 2:
        return _fmt(values[0]) if values else "-"
    return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}"


def _seed_table(rows: list[dict[str, Any]], with_r_a: bool) -> list[str]:
    """Runs sharing a name over several seeds: mean ± std, and R_a seed by seed."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["base_name"], []).append(row)
    if not any(len({r["seed"] for r in g}) > 1 for g in groups.values()):
        return []
    head = ["run", "seeds", "final acc", "top acc"]
    if with_r_a:
        head += [f"R_{a:g} per seed" for a in R_A_LEVELS]
    forgetting = [
        k for k in ("loss_increase", "loss_increase_ref") if any(r.get(k) is not None for r in rows)
    ]
    head += [
        {"loss_increase": "loss increase", "loss_increase_ref": "reference's"}[k]
        for k in forgetting
    ]
    lines = ["## Mean over seeds", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, group in groups.items():
        cells = [
            name,
            ", ".join(str(r["seed"]) for r in group),
            _mean_std([r["final_accuracy"] for r in group]),
            _mean_std([r["top_accuracy"] for r in group]),
        ]
        if with_r_a:
            cells += [" / ".join(_fmt(r["R_a"][f"{a:g}"]) for r in group) for a in R_A_LEVELS]
        for k in forgetting:
            cells.append(_mean_std([r[k] for r in group if r.get(k) is not None]))
        lines.append("| " + " | ".join(cells) + " |")
    if "loss_increase_ref" in forgetting:
        lines += [
            "",
            "Loss increase: loss(t) - loss(t-1) on the previous round's clients (FedReg App. B.1); "
            "reference's: the diagnostics.reference algorithm's local models trained from the "
            "same global models on the same clients and batches (App. B.3).",
        ]
    return [*lines, ""]


def compare(
    dirs: list[str | Path],
    out: str | Path,
    reference: str | Path | list[str | Path] | None = None,
    allow_mixed: bool = False,
) -> dict[str, Any]:
    """Write the comparison report of ``dirs`` into ``out``; returns its data.

    ``reference``: one results folder (SGD in FedReg's tables) for ``R_a``, or one per seed.
    Runs that differ in a setting of :data:`SAME_SETTINGS` are refused unless
    ``allow_mixed``.
    """
    if not dirs:
        raise DataError("compare needs at least one results folder")
    seen: dict[Path, str | Path] = {}
    for d in dirs:
        key = Path(d).resolve()
        if key in seen:
            also = "" if str(seen[key]) == str(d) else f" (also as {d})"
            raise DataError(
                f"the results folder {seen[key]} is given twice{also}; give each folder once"
            )
        seen[key] = d
    runs = [load_run(d) for d in dirs]
    mixed = differing(runs, SAME_SETTINGS)
    if mixed and not allow_mixed:
        each = "; ".join(
            f"{r.path}: " + ", ".join(f"{k} {setting(r, k)}" for k in mixed) for r in runs
        )
        raise DataError(
            f"the runs differ in {', '.join(mixed)} ({each}); compare runs of one setting, "
            "or pass --allow-mixed to compare them anyway"
        )
    whole = mixed + differing(runs, SHOWN_SETTINGS)  # named "differs" in the first line
    columns = settings_that_differ(runs)
    shown = list(columns)
    base = {id(r): r.label for r in runs}
    labels = [r.label for r in runs]
    if len(set(labels)) < len(labels):  # same names: tell them apart by seed, else by folder
        seeds_differ = len({(r.label, _seed(r)) for r in runs}) == len(runs)
        for r in runs:
            r.label = f"{r.label} (seed {_seed(r)})" if seeds_differ else f"{r.label} ({r.path})"
    if isinstance(reference, str | Path):
        reference = [reference]
    refs = [load_run(d) for d in reference or []]
    targets = list(runs[0].summary.get("rounds_to", {}))
    rows = []
    for r in runs:
        s = r.summary
        row = {
            "name": r.label,
            "base_name": base[id(r)],
            "seed": _seed(r),
            "folder": str(r.path),
            "algorithm": s.get("algorithm"),
            "final_accuracy": s["final_accuracy"],
            "top_accuracy": s["top_accuracy"],
            "rounds": s["rounds"],
            "rounds_to": s.get("rounds_to", {}),
            "bytes_up": s["bytes_up"],
            "bytes_down": s["bytes_down"],
            "wall_seconds": s.get("wall_seconds"),
            "loss_increase": (s.get("forgetting") or {}).get("loss_increase_mean"),
            "loss_increase_ref": (s.get("forgetting") or {}).get("loss_increase_ref_mean"),
        }
        if shown:
            row["settings"] = {k: words[len(rows)] for k, words in columns.items()}
        if refs:
            ref = _pick_reference(r, refs)
            row["reference"] = str(ref.path)
            row["R_a"] = {
                f"{a:g}": r_a(r.records, ref.summary["final_accuracy"], a) for a in R_A_LEVELS
            }
        rows.append(row)

    lines = ["# fedretain comparison", ""]

    def common(key: str, fmt: str) -> str:
        return f"{key} differs (below)" if key in whole else fmt.format(setting(runs[0], key))

    head_parts = [
        common("dataset", "Dataset `{}`"),
        common("partition", "partition `{}`"),
        common("model", "model `{}`"),
        common("clients", "{} clients"),
        common("clients_per_round", "{} per round"),
    ]
    header = ", ".join(head_parts)
    lines.append(header[:1].upper() + header[1:] + ".")
    lines.append("")
    if shown:
        lines += [
            "Settings that differ between the runs:",
            "",
            "| run | " + " | ".join(shown) + " |",
            "|" + "---|" * (len(shown) + 1),
        ]
        lines += [f"| {r['name']} | " + " | ".join(r["settings"].values()) + " |" for r in rows]
        lines.append("")
    head = ["run", "final acc", "top acc", *[f"rounds to {t}" for t in targets]]
    if refs:
        head += [f"R_{a:g}" for a in R_A_LEVELS]
    head += ["MB up", "MB down", "wall s"]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for row in rows:
        cells = [row["name"], _fmt(row["final_accuracy"]), _fmt(row["top_accuracy"])]
        cells += [_fmt(row["rounds_to"].get(t)) for t in targets]
        if refs:
            cells += [_fmt(v) for v in row["R_a"].values()]
        wall = row["wall_seconds"]
        cells += [
            _mb(row["bytes_up"]),
            _mb(row["bytes_down"]),
            "-" if wall is None else f"{wall:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for ref in refs:
        lines.append(
            f"R_a: first round reaching a x the final accuracy of the reference "
            f"`{ref.label}` (seed {_seed(ref)}: {ref.summary['final_accuracy']:.4f}); "
            "'-' if never."
        )
    lines.append("'-' in rounds-to columns: target never reached.")
    lines.append("")
    lines += _seed_table(rows, bool(refs))
    lines += ["![accuracy vs round](accuracy_vs_round.png)", ""]
    lines += ["![accuracy vs bytes](accuracy_vs_bytes.png)", ""]

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    curves = [(r.label, r.records) for r in runs]
    plot_curves(curves, out / "accuracy_vs_round.png", x="round")
    plot_curves(curves, out / "accuracy_vs_bytes.png", x="bytes")
    data = {"runs": rows, "references": [str(r.path) for r in refs]}
    write_json(out / "report.json", data)
    atomic_write_text(out / "report.md", "\n".join(lines))
    return data
