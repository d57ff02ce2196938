"""What the parts of ``benchmarks/gpu_check.py`` share: the rows of its table, the
options each part reads, the tiny federations they run, and the helpers that start
runs in child processes."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent
TOLERANCE = 1e-5
PASS, FAIL, NA, OK = "pass", "FAIL", "n/a", "ok"  # OK: a measurement, not a verdict
WALL = re.compile(r"seconds|wall|time")  # record keys of wall time, never compared
NEEDS_CUDA = 2  # exit status without a CUDA GPU

# the tiny federation of tests/engines/test_vmap_conformance.py: ragged clients (Dirichlet
# sizes), several vmap chunks (5 clients in chunks of 2, 2, 1), padded steps
BASE: dict[str, Any] = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [16],
    "clients": 9,
    "clients_per_round": 5,
    "batch_size": 16,
    "lr": 0.1,
    "partition": "dirichlet",
    "partition.alpha": 0.5,
    "local_epochs": 2,
    "rounds": 2,
    "threads": 1,
    "seed": 0,
}
OVERRIDES: dict[str, dict[str, Any]] = {  # as in test_vmap_conformance
    "fedreg": {"batch_size": 64, "local_epochs": 1},
    "moon": {"model.projection": 8},
}
# the class-incremental setting of tests/continual (3 tasks of 2 classes, 1 round each)
CONTINUAL: dict[str, Any] = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [16],
    "scenario": "class_incremental",
    "scenario.tasks": 3,
    "scenario.classes_per_task": 2,
    "scenario.rounds_per_task": 1,
    "rounds": 3,
    "clients": 3,
    "clients_per_round": 3,
    "batch_size": 16,
    "local_steps": 3,
    "lr": 0.1,
    "threads": 1,
    "seed": 0,
}
# tests/continual/test_replay.py's ACGAN: a width-4 generator and discriminator, Adam
ACGAN = {"model": "acgan", "model.width": 4, "model.z_dim": 16, "optimizer": "adam", "lr": 1e-3}
VMAP = {"engine": "vmap", "engine.chunk": 2}
DEVICE_ENGINES = {"sequential": {"engine": "sequential"}, "vmap": VMAP}


# --------------------------------------------------------------------------- rows and table


@dataclass
class Row:
    """One line of the table."""

    check: str
    engine: str
    result: str  # pass, FAIL, n/a or ok (a measurement)
    detail: str
    seconds: float

    @property
    def failed(self) -> bool:
        return self.result == FAIL


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def table(rows: Iterable[Row]) -> str:
    """The markdown table of ``rows``."""
    lines = ["| check | engine | result | detail | seconds |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [r.check, r.engine, r.result, r.detail, f"{r.seconds:.1f}"]
        lines.append("| " + " | ".join(cell(c) for c in cells) + " |")
    return "\n".join(lines)


Emit = Callable[[Row], None]


@dataclass
class Options:
    """The driver's settings, as each part reads them."""

    device: str = "cuda"
    quick: bool = False
    filter: list[str] = field(default_factory=list)
    tolerance: float = TOLERANCE
    perturb: float = 0.0
    tf32: bool = False
    jobs: int = 0
    presets: str = "all"
    models: str = "mlp"
    out: str = ""

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def error_text(e: BaseException) -> str:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {first}"[:300]


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a child process: the repository on PYTHONPATH."""
    env = dict(os.environ)
    paths = [str(ROOT), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra)
    return env


def cli(*args: str) -> list[str]:
    """A ``fedretain`` command line run from the repository (no console script needed)."""
    return [sys.executable, "-m", "fedretain.cli", *args]


def flags(keys: dict[str, Any]) -> list[str]:
    """``KEY=VALUE`` arguments (values as TOML) of flat config keys."""
    out = []
    for k, v in keys.items():
        text = json.dumps(v) if isinstance(v, list | bool) else str(v)
        out.append(f"{k}={text}")
    return out


def dataset_available(name: str) -> str:
    """Empty when ``name`` loads from its default folder, else why not."""
    try:
        from fedretain.data.datasets import load_dataset

        load_dataset(name)
        return ""
    except Exception as e:
        return error_text(e)
