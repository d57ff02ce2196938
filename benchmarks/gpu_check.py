"""The GPU verification of fedretain in one command: one markdown table, a non-zero exit on any
failure. ``scripts/gpu_check.sh`` is its entry point on a GPU machine (wheels, PYTHONPATH).

Parts (``--only`` picks some), in the order of what they decide: each runs in its own process
under a time cap, its share of what is left of ``--budget`` (default 480 s on CUDA: one
9-minute call with a minute for the machine to install the wheels), in proportion to the parts'
weights (``CAPS``), so that time a part does not use goes to the parts after it and the last
never starves; after each part the table of everything so far is rewritten
(``OUT/table.md``) and printed, so a call stopped at its limit still returns what ran:

- ``conformance``: every registered algorithm, server optimizer, aggregator, privacy
  mechanism and the continual methods (class-incremental FedAvg/FedProx, ACGAN replay with the
  generator-quality diagnostic, DGR, FedLwF-2T, FedCIL) on tiny runs (scikit-learn digits, a
  small MLP or a width-4 ACGAN, 2-3 rounds), each on the sequential and the vectorised engine on
  ``--device``, against the CPU reference run of the same config (the sequential engine in a
  separate process, so that the device run's deterministic modes cannot touch it): every
  number of ``metrics.jsonl`` (wall time excluded) and every float of the final server state
  within ``--tolerance`` (1e-5). A config the library refuses, or a vmap run that falls back to
  the sequential engine, is "n/a" with the reason. DP-SGD draws its noise from a generator on
  the run's device, so a CUDA run cannot repeat the CPU's noise: it is compared with
  ``privacy.noise_multiplier=0`` (clipping only), and with noise only on what does not depend
  on the draws (the accountant's epsilon, the bytes). The generators' Fréchet distance is
  compared relatively (a matrix square root of feature covariances). On CUDA, TF32 is off in
  this part (the runs' ``deterministic=true`` turns it off too; ``--tf32`` keeps torch's
  defaults).
- ``determinism``: a CNN run (cuDNN is where nondeterminism lives) twice on ``--device``, each
  in its own process, on the sequential and the vectorised engine: identical ``metrics.jsonl``
  (wall time excluded); and the time per round of ``deterministic=false`` against the default.
- ``cuda_tests``: the suite's tests marked ``cuda`` (``pytest -m cuda``), one row each: the
  SCAFFOLD conformance, the CUDA determinism tests, ``engine.devices=all`` against the plain
  run; skipped ("n/a") without CUDA.
- ``presets``: ``fedretain reproduce all --scale ci device=DEVICE``: one row per preset (its
  runs finished, none failed or diverged, its report written); a preset whose data are missing
  is "n/a".
- ``privacy``: ``fedretain privacy`` on a small digits setting on ``--device``.
- ``speed``: pfl-research's CIFAR-10 round (``benchmarks/pfl_job.py``) on every engine (the
  vectorised one in chunks of 10, 25 and 50 and with each step replayed as a CUDA graph) and pfl
  itself (when importable; "not installed" otherwise), and the main job's shape
  (``experiments/fmnist_pathological.toml``) at 100 clients per round on engine=sequential,
  vmap and auto: seconds per round (the default, deterministic modes on; ``--models mlp,cnn``
  adds the CNN); and FedCIL's round of ``fedcil-table1 --scale paper`` on the sequential and the
  vectorised engine, with the paper run's time projected from it.

Fashion-MNIST (the determinism CNN, the presets' stand-in, the main job) is read from its
default folder; ``--data DIR`` links ``DIR/fashion-mnist`` there when it is missing. Without
it the determinism check runs a LeNet on digits and the main job's rows are "n/a".

    python3 benchmarks/gpu_check.py                                 # everything, on CUDA
    python3 benchmarks/gpu_check.py --only conformance --filter 'fedavg,aggregator=*'
    .venv/bin/python benchmarks/gpu_check.py --device cpu --quick   # the harness on a CPU

On a CPU (``--device cpu``) the comparison with the CPU reference degenerates to two CPU runs,
which still tests the harness. Without a CUDA GPU and without ``--device cpu`` it says so in
one line and exits with status 2. Everything a part writes stays under ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import importlib.util
import io
import itertools
import json
import math
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# the parts in the order of what they decide: the CUDA numbers first, the speed table last
PARTS = ("conformance", "determinism", "cuda_tests", "presets", "privacy", "speed")
# each part's weight in the budget (--budget: its cap is its share of what is left), and its
# cap where there is no budget, by device type. On one H100 the parts are estimated (not yet
# measured there) at about 50, 50, 15, 60 and 50 s (more where engine=auto compiles its
# vmapped step: tens of seconds); on 2 CPU cores with --quick they took 40, 40, 10, 25 and 90 s
CAPS = {
    "cuda": {
        "conformance": 120,
        "determinism": 75,
        "cuda_tests": 60,
        "privacy": 45,
        "presets": 150,
        "speed": 210,
    },
    "cpu": {
        "conformance": 400,
        "determinism": 300,
        "cuda_tests": 120,
        "privacy": 150,
        "presets": 900,
        "speed": 500,
    },
}
BUDGET = {"cuda": 480.0, "cpu": 0.0}  # seconds for every part together; 0: none
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


# --------------------------------------------------------------------------- conformance


@dataclass(frozen=True)
class Case:
    """One configuration of the conformance: ``keys`` (flat config keys); ``compare``: all
    (every number) or accounting (what does not depend on the device's random draws)."""

    name: str
    keys: dict[str, Any]
    compare: str = "all"


def conformance_cases(quick: bool) -> list[Case]:
    """Every registered algorithm, server optimizer, aggregator and privacy mechanism, and the
    continual methods, each as a tiny config."""
    from fedretain.algorithms import continual_only
    from fedretain.registry import kind

    base = dict(BASE)
    continual = dict(CONTINUAL)
    if quick:
        base.update(local_epochs=1, clients=6, clients_per_round=3)
        continual.update({"scenario.tasks": 2, "rounds": 2, "local_steps": 2})
    import fedretain.recipe.config  # noqa: F401  (registers every algorithm, continual ones too)

    algorithms = list(kind("algorithm"))
    only_continual = set(continual_only())
    cases = []
    for name in algorithms:
        if name not in only_continual:
            cases.append(Case(name, {**base, "algorithm": name, **OVERRIDES.get(name, {})}))
    for name in kind("server_opt"):
        cases.append(Case(f"server_opt={name}", {**base, "server_opt": name}))
    for name in kind("aggregator"):
        if name != "mean":  # the algorithm's own weighted mean: every algorithm row above
            cases.append(Case(f"aggregator={name}", {**base, "aggregator": name}))
    for name in kind("privacy"):
        keys = {**base, "privacy": name}
        if name == "dpsgd":  # its noise comes from the device's generator
            cases.append(Case("privacy=dpsgd σ=0", {**keys, "privacy.noise_multiplier": 0.0}))
            cases.append(Case("privacy=dpsgd σ=1", keys, compare="accounting"))
        elif name == "client_adaptive":  # the count's noise must leave room for the update's
            cases.append(Case(f"privacy={name}", {**keys, "privacy.clipped_count_stddev": 1.0}))
        else:
            cases.append(Case(f"privacy={name}", keys))
    # in float64: Adam scales the rounding noise in the gradients of the biases in front of the
    # generator's BatchNorm (zero up to rounding) to full steps, so float32 runs on two engines
    # or devices differ there by 1e-4 (tests/continual/test_vectorised.py); float64 compares
    # the computation
    gan = {
        **{k: v for k, v in continual.items() if not k.startswith("model")},
        **ACGAN,
        "precision": "fp64",
    }
    quality = {
        "diagnostics": ["generator_quality"],
        "diagnostics.fid_every": 1,
        "diagnostics.fid_samples": 50,
        "diagnostics.per_class": 2,
    }
    cil = [
        ("fedavg", {**continual, "algorithm": "fedavg"}),
        ("fedprox", {**continual, "algorithm": "fedprox"}),
        ("fedavg+acgan, generator_quality", {**gan, "replay": "acgan", **quality}),
        ("fedavg+dgr", {**continual, "replay": "dgr", "replay.width": 4, "replay.z_dim": 16}),
    ]
    for name in sorted(only_continual):
        keys = {**continual, "algorithm": name}
        if name == "fedcil":  # its ACGAN, a short consolidation
            keys = {**gan, "algorithm": name}
            keys.update({"algo.consolidation_steps": 2, "algo.consolidation_batch": 4})
        cil.append((name, keys))
    cases += [Case(f"class_incremental {n}", keys) for n, keys in cil]
    return cases


def selected(name: str, patterns: list[str]) -> bool:
    return not patterns or any(fnmatch.fnmatchcase(name, p) for p in patterns)


def run_config(keys: dict[str, Any], out: str) -> dict[str, Any]:
    """Run the flat config ``keys`` into ``out`` (a fresh folder) with fedretain's own
    ``run_experiment``; its records, final server state (on the CPU, from the last checkpoint),
    summary and stderr notes."""
    from fedretain.experiments.checkpoint import load_checkpoint
    from fedretain.experiments.run import run_experiment
    from fedretain.files import read_jsonl
    from fedretain.recipe.config import make_config

    keys = {**keys, "checkpoint_every": keys["rounds"], "eval_every": 1}
    if "generator_quality" in keys.get("diagnostics", []):  # one feature classifier for all
        keys["diagnostics.cache_dir"] = str(Path(out).parent.parent / "feature-cache")
    cfg = make_config(keys)
    notes = io.StringIO()
    with contextlib.redirect_stderr(notes):
        summary = run_experiment(cfg, out, progress=False)
    state = load_checkpoint(out, "cpu").server
    return {
        "records": read_jsonl(Path(out) / "metrics.jsonl"),
        "state": state,
        "summary": summary,
        "notes": notes.getvalue(),
    }


def reference_run(keys: dict[str, Any], out: str) -> dict[str, Any]:
    """The CPU reference of ``keys`` (sequential engine), in a worker process; an error comes
    back as ``{"error": ...}``."""
    try:
        return run_config({**keys, "device": "cpu", "engine": "sequential"}, out)
    except Exception as e:
        return {"error": error_text(e)}


def tree_diff(a: Any, b: Any, path: str = "") -> tuple[float, str]:
    """The largest absolute difference between two state trees (dicts of tensors) and where;
    infinite where their structure, shapes or integer values differ."""
    import torch

    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or set(a) != set(b):
            return math.inf, f"{path or 'state'}: other keys"
        worst = (0.0, "")
        for key in a:
            worst = max(worst, tree_diff(a[key], b[key], f"{path}/{key}"), key=lambda t: t[0])
        return worst
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return (0.0, "") if a == b else (math.inf, path)
    if a.shape != b.shape:
        return math.inf, f"{path}: shapes {tuple(a.shape)} vs {tuple(b.shape)}"
    if not a.dtype.is_floating_point:
        return (0.0, "") if torch.equal(a, b.to(a.device)) else (math.inf, path)
    if a.numel() == 0:
        return 0.0, ""
    diff = (a.double() - b.double().to(a.device)).abs()
    both_nan = a.isnan() & b.to(a.device).isnan()
    return float(diff.masked_fill(both_nan, 0.0).max()), path


def number_diff(a: Any, b: Any) -> float:
    """|a - b| for two record values (0 for equal non-numbers, NaN == NaN)."""
    if isinstance(a, bool) or isinstance(b, bool) or not isinstance(a, int | float):
        return 0.0 if a == b else math.inf
    if not isinstance(b, int | float):
        return math.inf
    if math.isnan(a) and math.isnan(b):
        return 0.0
    if math.isinf(a) or math.isinf(b):
        return 0.0 if a == b else math.inf
    return abs(a - b) / max(1.0, abs(a))  # relative above 1 (epsilon, bytes)


ACCOUNTING = ("round", "participants", "bytes_up", "bytes_down", "epsilon", "delta", "task")


def compare(ref: dict[str, Any], got: dict[str, Any], tol: float, what: str) -> tuple[bool, str]:
    """Whether ``got`` matches the reference ``ref`` within ``tol``, and the numbers."""
    worst: dict[str, float] = {}
    if len(ref["records"]) != len(got["records"]):
        return False, f"{len(got['records'])} records, the reference {len(ref['records'])}"
    for a, b in zip(ref["records"], got["records"]):
        for key in set(a) | set(b):
            if WALL.search(key) or (what == "accounting" and key not in ACCOUNTING):
                continue
            worst[key] = max(worst.get(key, 0.0), number_diff(a.get(key), b.get(key)))
    if what == "accounting":  # the noise differs: the run must stay finite
        finite = all(
            isinstance(r.get("test_loss"), float) and math.isfinite(r["test_loss"])
            for r in got["records"]
        )
        worst["finite"] = 0.0 if finite else math.inf
    else:
        worst["params"], where = tree_diff(ref["state"], got["state"])
        if worst["params"] > tol and where:
            worst[f"params at {where}"] = worst.pop("params")
    fid = [r["summary"].get("generator_quality", {}).get("fid") for r in (ref, got)]
    if None not in fid:  # FID: a matrix square root of feature covariances, compared relatively
        worst["fid (relative)"] = abs(fid[0] - fid[1]) / max(abs(fid[0]), 1e-12)
    bad = {k: v for k, v in worst.items() if not v <= tol}
    shown = ["params", "test_loss", "test_accuracy", "train_loss", "epsilon", "fid (relative)"]
    parts = [f"{k} {worst[k]:.1e}" for k in shown if k in worst and k not in bad]
    if bad:
        listed = ", ".join(f"{k} {v:.1e}" for k, v in sorted(bad.items(), key=lambda t: -t[1])[:4])
        return False, f"over {tol:g}: {listed}" + (f"; {', '.join(parts)}" if parts else "")
    last = got["records"][-1]
    acc = last.get("test_accuracy")
    tail = f"; final acc {acc:.4f}" if isinstance(acc, float) else ""
    return True, "max |Δ| " + ", ".join(parts) + tail


def precheck(keys: dict[str, Any]) -> tuple[str, str]:
    """``(refused, fallback)``: why fedretain refuses the config ``keys`` (its ConfigError),
    and why ``engine=vmap`` would run it sequentially; empty where neither applies (and
    after any other error, which the runs themselves then report)."""
    from fedretain.engines.vmap import vectorisable
    from fedretain.errors import ConfigError
    from fedretain.recipe.config import make_config
    from fedretain.recipe.federation import build_federation

    try:
        fed = build_federation(make_config({**keys, "device": "cpu"}))
    except ConfigError as e:
        return str(e).strip().splitlines()[0], ""
    except Exception:
        return "", ""
    return "", vectorisable(fed.algorithm, fed.task.model) or ""


def conformance(opts: Options, emit: Emit) -> None:
    """Every case on the sequential and vectorised engines on the device against its CPU
    reference (computed meanwhile by a pool of worker processes)."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    import torch

    if opts.cuda and not opts.tf32:  # float32 convolutions and matmuls, as on the CPU
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    work = Path(opts.out)
    cases = [c for c in conformance_cases(opts.quick) if selected(c.name, opts.filter)]
    if not cases:
        emit(Row("conformance", "", FAIL, f"no case matches --filter {opts.filter}", 0.0))
        return
    checked = {c.name: precheck(c.keys) for c in cases}
    refused = {name: why for name, (why, _) in checked.items() if why}
    todo = [c for c in cases if c.name not in refused]
    workers = max(1, min(len(todo), (os.cpu_count() or 2) - 1, 8))
    started = time.perf_counter()
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        refs = {
            c.name: pool.submit(reference_run, c.keys, str(work / f"case{i}" / "cpu"))
            for i, c in enumerate(todo)
        }
        for case in cases:
            check = f"conformance: {case.name}"
            if case.name in refused:
                for engine in DEVICE_ENGINES:
                    emit(Row(check, engine, NA, f"refused: {refused[case.name]}", 0.0))
                continue
            index = todo.index(case)
            fallback = checked[case.name][1]
            if "generator_quality" in case.keys.get("diagnostics", []):
                refs[case.name].result()  # the reference trains the cached feature classifier
            got: dict[str, tuple[dict[str, Any] | str, float]] = {}
            for engine, keys in DEVICE_ENGINES.items():
                if engine == "vmap" and fallback:
                    continue
                run_keys = {**case.keys, **keys, "device": opts.device}
                if opts.perturb:  # a deliberately broken run, to see the check fail
                    run_keys["lr"] = run_keys["lr"] * (1.0 + opts.perturb)
                t0 = time.perf_counter()
                try:
                    result: dict[str, Any] | str = run_config(
                        run_keys, str(work / f"case{index}" / engine)
                    )
                except Exception as e:
                    result = error_text(e)
                got[engine] = (result, time.perf_counter() - t0)
            ref = refs[case.name].result()
            for engine in DEVICE_ENGINES:
                if engine not in got:
                    emit(Row(check, engine, NA, f"falls back to sequential: {fallback}", 0.0))
                    continue
                result, seconds = got[engine]
                if isinstance(result, str):
                    emit(Row(check, engine, FAIL, f"{opts.device} run failed: {result}", seconds))
                elif "error" in ref:
                    emit(Row(check, engine, FAIL, f"CPU reference failed: {ref['error']}", seconds))
                elif engine == "vmap" and result["summary"]["engine"] != "vmap":
                    why = last_line(result["notes"])
                    emit(Row(check, engine, FAIL, f"ran {result['summary']['engine']}: {why}", 0))
                else:
                    ok, detail = compare(ref, result, opts.tolerance, case.compare)
                    if case.compare == "accounting":
                        detail += " (noise drawn on the device: only ε, bytes and finiteness)"
                    emit(Row(check, engine, PASS if ok else FAIL, detail, seconds))
    print(f"conformance: {len(cases)} cases in {time.perf_counter() - started:.0f} s", flush=True)


# --------------------------------------------------------------------------- determinism


def determinism_setting(opts: Options) -> tuple[dict[str, Any], str]:
    """The CNN run of the determinism check and its description: FedAvg on the main job's
    Fashion-MNIST shards with the zoo's CNN (digits with the LeNet when --quick or without
    Fashion-MNIST)."""
    keys: dict[str, Any] = {
        "algorithm": "fedavg",
        "batch_size": 10,
        "lr": 0.05,
        "local_steps": 5,
        "rounds": 4,
        "checkpoint_every": 0,
        "eval_every": 1,
        "seed": 0,
        "threads": 1 if not opts.cuda else 2,
    }
    missing = dataset_available("fashion-mnist")
    if opts.quick or missing:
        keys.update(
            {
                "dataset": "digits",
                "model": "lenet-dlg",
                "model.activation": "relu",
                "clients": 20,
                "clients_per_round": 10,
                "partition": "shards",
                "partition.classes_per_client": 2,
                "rounds": 3,
            }
        )
        why = " (--quick)" if opts.quick else f" ({missing})"
        return keys, f"FedAvg, LeNet on digits, 10 of 20 clients{why}"
    keys.update(
        {
            "dataset": "fashion-mnist",
            "model": "cnn",
            "clients": 100,
            "clients_per_round": 20,
            "partition": "shards",
            "partition.classes_per_client": 2,
        }
    )
    return keys, "FedAvg, zoo CNN on Fashion-MNIST shards, 20 of 100 clients"


def cli_run(keys: dict[str, Any], out: Path, timeout: float | None = None) -> tuple[list, str]:
    """``fedretain run`` in a process of its own: the records, or an error line."""
    from fedretain.files import read_jsonl

    proc = subprocess.run(
        cli("run", *flags(keys), "--out", str(out)),
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout,
    )
    if proc.returncode != 0:
        return [], f"exit {proc.returncode}: {last_line(proc.stderr) or last_line(proc.stdout)}"
    return read_jsonl(out / "metrics.jsonl"), ""


def without_wall(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if not WALL.search(k)} for r in records]


def seconds_per_round(records: list[dict[str, Any]]) -> float:
    """The median wall seconds of a round (training and evaluation), the first left out
    (first calls: cuDNN's plans, allocations)."""
    stamps = [r["seconds"] for r in records]
    steps = [b - a for a, b in itertools.pairwise(stamps)]
    return statistics.median(steps[1:] if len(steps) > 1 else steps)


def first_difference(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> str:
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} records"
    for ra, rb in zip(a, b):
        for key in ra:
            if ra[key] != rb.get(key):
                return f"round {ra.get('round')}: {key} {ra[key]!r} vs {rb.get(key)!r}"
    return ""


def determinism(opts: Options, emit: Emit) -> None:
    """The same config and seed twice (two processes) on each engine: identical metrics;
    then deterministic=false once, for its time per round."""
    keys, what = determinism_setting(opts)
    work = Path(opts.out)
    for engine in ("sequential", "vmap"):  # vmap: chunks sized to memory, as by default
        run_keys = {**keys, "engine": engine, "device": opts.device}
        t0 = time.perf_counter()
        runs = []
        for name in ("a", "b"):
            runs.append(cli_run(run_keys, work / f"{engine}-{name}"))
        seconds = time.perf_counter() - t0
        errors = [e for _, e in runs if e]
        if errors:
            emit(Row(f"determinism: {what}, twice", engine, FAIL, errors[0], seconds))
            continue
        (a, _), (b, _) = runs
        diff = first_difference(without_wall(a), without_wall(b))
        if diff:
            detail = f"the two runs differ at {diff}"
        else:
            detail = (
                f"identical metrics.jsonl over {len(a) - 1} rounds "
                f"(final acc {a[-1]['test_accuracy']:.4f}, loss {a[-1]['test_loss']:.6f})"
            )
        emit(Row(f"determinism: {what}, twice", engine, FAIL if diff else PASS, detail, seconds))
        t0 = time.perf_counter()
        fast, error = cli_run({**run_keys, "deterministic": False}, work / f"{engine}-fast")
        seconds = time.perf_counter() - t0
        if error:
            emit(Row("determinism: deterministic=false", engine, FAIL, error, seconds))
            continue
        on, off = seconds_per_round(b), seconds_per_round(fast)
        differ = first_difference(without_wall(a), without_wall(fast))
        same = "other numbers" if differ else "the same numbers"
        detail = (
            f"{on:.3f} s/round deterministic (default), {off:.3f} s/round with "
            f"deterministic=false ({(on / off - 1) * 100:+.0f}% for determinism); false gave "
            f"{same}"
        )
        emit(Row("determinism: cost of deterministic=true", engine, OK, detail, seconds))


# --------------------------------------------------------------------------- presets


RUNS_LINE = re.compile(
    r"Runs: (\d+) of (\d+) finished, (\d+) diverged, (\d+) failed, (\d+) not run"
)


def presets(opts: Options, emit: Emit) -> None:
    """``fedretain reproduce PRESETS --scale ci device=DEVICE``; one row per preset."""
    from fedretain.experiments.presets import PRESETS

    out = Path(opts.out) / "reproduce"
    jobs = opts.jobs or max(1, min(12 if opts.cuda else 8, os.cpu_count() or 1))
    names = [n for n, e in PRESETS.items() if "ci" in e.meta["seeds"]]
    if opts.presets != "all":
        names = [n for n in opts.presets.split(",") if n]
    # KEY=VALUE right after the names: argparse takes no positional argument after an option
    args = ["reproduce", *names, f"device={opts.device}", "--scale", "ci", "--out", str(out)]
    args += ["--jobs", str(jobs)]
    t0 = time.perf_counter()
    proc = subprocess.run(cli(*args), capture_output=True, text=True, env=child_env())
    seconds = time.perf_counter() - t0
    (Path(opts.out) / "reproduce.log").write_text(proc.stdout + proc.stderr)
    several = len(names) > 1
    total = 0
    for name in names:
        folder = out / name if several else out
        report = folder / "report.md"
        check = f"preset {name} --scale ci"
        if not report.is_file():
            emit(Row(check, "auto", FAIL, f"no report.md (exit {proc.returncode})", 0.0))
            continue
        text = report.read_text()
        m = RUNS_LINE.search(text)
        if m is None:
            emit(Row(check, "auto", FAIL, "report.md without its runs line", 0.0))
            continue
        finished, planned, diverged, failed, not_run = map(int, m.groups())
        total += planned
        devices = {
            line.split("=", 1)[1].strip().strip('"')
            for cfg in folder.rglob("config.toml")
            for line in cfg.read_text().splitlines()
            if line.startswith("device =")
        }
        on = ", ".join(sorted(devices)) or "no device"
        if not_run == planned and "the data are missing" in text:
            why = text.split("**Not run: the data are missing.**", 1)[1].split("\n")[0]
            emit(Row(check, "auto", NA, f"data missing: {why.split(';')[0].strip()}", 0.0))
        elif failed or diverged or finished != planned or devices != {opts.device}:
            detail = f"{finished} of {planned} finished, {failed} failed, {diverged} diverged"
            emit(Row(check, "auto", FAIL, f"{detail}; ran on {on}", 0.0))
        else:
            emit(Row(check, "auto", PASS, f"{finished} of {planned} runs finished on {on}", 0.0))
    result = PASS if proc.returncode == 0 else FAIL
    detail = f"exit {proc.returncode}, {total} runs, --jobs {jobs}, report {out / 'report.md'}"
    if proc.returncode:
        detail += f": {last_line(proc.stderr) or last_line(proc.stdout)}"
    what = "all" if opts.presets == "all" else opts.presets
    emit(Row(f"fedretain reproduce {what} --scale ci", "auto", result, detail, seconds))


# ------------------------------------------------------------------------ cuda tests

# -rA's summary: "PASSED test", "FAILED test - why", "SKIPPED [n] file:line: why"
PYTEST_LINE = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED)(?: \[\d+\])? (\S+?):?(?: (?:- )?(.*))?$")


def cuda_tests(opts: Options, emit: Emit) -> None:
    """The suite's tests marked ``cuda`` (``pytest -m cuda``: the SCAFFOLD conformance, the
    determinism of both engines, ``engine.devices=all`` against the plain run, ...), one row
    each; without CUDA they skip (n/a)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-m", "cuda"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), cwd=ROOT)
    seconds = time.perf_counter() - t0
    results = {"PASSED": PASS, "FAILED": FAIL, "ERROR": FAIL, "SKIPPED": NA}
    seen = 0
    for line in proc.stdout.splitlines():
        found = PYTEST_LINE.match(line.strip())
        if found:
            seen += 1
            kind, name, why = found.groups()
            emit(Row(f"pytest -m cuda: {name}", "", results[kind], why or "", seconds))
    if proc.returncode not in (0, 5) or not seen:  # 5: no test selected
        why = last_line(proc.stdout) or last_line(proc.stderr)
        emit(Row("pytest -m cuda", "", FAIL, f"exit {proc.returncode}: {why}", seconds))


# --------------------------------------------------------------------------- privacy


def privacy(opts: Options, emit: Emit) -> None:
    """``fedretain privacy`` (attacks, sigma matching, four training runs) on the device."""
    out = Path(opts.out) / "study"
    study = ["--targets", "1", "--iterations", "20" if opts.quick else "50", "--sigmas", "0.01,1"]
    keys = {"rounds": 2, "threads": 1, "checkpoint_every": 0, "device": opts.device}
    args = ["privacy", "--config", str(ROOT / "experiments/privacy_digits.toml"), "--out"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cli(*args, str(out), *study, *flags(keys)),
        capture_output=True,
        text=True,
        env=child_env(),
    )
    seconds = time.perf_counter() - t0
    check = "fedretain privacy (digits, 2 rounds)"
    if proc.returncode != 0 or not (out / "report.md").is_file():
        why = last_line(proc.stderr) or last_line(proc.stdout)
        emit(Row(check, "auto", FAIL, f"exit {proc.returncode}: {why}", seconds))
        return
    result = json.loads((out / "privacy.json").read_text())
    psnr = ", ".join(f"{k} {v['psnr']:.1f} dB" for k, v in result["attacks"].items())
    runs = ", ".join(f"{k} {v['final_accuracy']:.3f}" for k, v in result["runs"].items())
    detail = f"σ* = {result['sigma_matched']:g}; attack PSNR {psnr}; final acc {runs}"
    emit(Row(check, "auto", PASS, detail, seconds))


# --------------------------------------------------------------------------- speed


PFL_CHECK = "speed: pfl-research CIFAR-10 round"


def pfl_rows(opts: Options, emit: Emit) -> None:
    """pfl-research's CIFAR-10 round on each engine (benchmarks/pfl_job.py) and pfl itself:
    chunks of 10, 25 and 50 (the whole round: what memory allows, as auto's), then, in an
    invocation of its own (compiling takes tens of seconds; a cap reached there costs only its
    row), the step replayed as CUDA graphs (engine.compile_mode=reduce-overhead)."""
    variants = ["sequential", "vmap-10", "vmap-25", "auto"]
    have_pfl = importlib.util.find_spec("pfl") is not None
    pfl_job(opts, emit, [*variants, "pfl"] if have_pfl else variants)
    if not have_pfl:
        emit(Row(PFL_CHECK, "pfl", NA, "not installed (pfl-research 0.6.0: see the wheels)", 0.0))
    if not opts.quick:
        pfl_job(opts, emit, ["vmap-50-graphs"])


def pfl_job(opts: Options, emit: Emit, variants: list[str]) -> None:
    """One invocation of benchmarks/pfl_job.py for ``variants``: a row each."""
    args = ["--device", opts.device, "--variants", ",".join(variants)]
    args += ["--threads", "2" if opts.cuda else str(os.cpu_count() or 1)]
    if opts.quick:
        args += ["--rounds", "1", "--users", "100", "--per-round", "10"]
    else:
        args += ["--rounds", "2"]
    out = Path(opts.out) / f"pfl_job-{variants[0]}.json"
    # pfl's PyTorch backend picks CUDA when it sees a GPU; the device is named here
    env = child_env(PFL_PYTORCH_DEVICE="cuda" if opts.cuda else "cpu")
    cmd = [sys.executable, str(ROOT / "benchmarks/pfl_job.py"), *args, "--out", str(out)]
    cmd += ["--pfl-python", sys.executable]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - t0
    if proc.returncode != 0 or not out.is_file():
        why = last_line(proc.stderr) or last_line(proc.stdout)
        emit(Row(PFL_CHECK, ",".join(variants), FAIL, f"exit {proc.returncode}: {why}", seconds))
        return
    shape = "100 users, 10 per round" if opts.quick else "1,000 users, 50 per round"
    for res in json.loads(out.read_text())["results"]:
        variant = res["variant"]
        if "error" in res:
            emit(Row(PFL_CHECK, variant, FAIL, res["error"][:200], 0.0))
            continue
        device = (opts.device if opts.cuda else "cpu") if variant == "pfl" else res["device"]
        detail = (
            f"{res['median_s']:.3f} s/round ({shape}; {res['engine']}, {device}); 1,500 rounds "
            f"{res['projected_min']:.1f} min; first round {res['first_round_s']:.1f} s"
        )
        emit(Row(PFL_CHECK, variant, OK, detail, res["first_round_s"] + sum(res["round_s"])))


def main_job_rows(opts: Options, emit: Emit) -> None:
    """The main job's shape (experiments/fmnist_pathological.toml) at 100 clients per round
    (--quick: 20), per engine and model: seconds per round after a warm-up round."""
    per_round = 20 if opts.quick else 100
    missing = dataset_available("fashion-mnist")
    for model in [m for m in opts.models.split(",") if m]:
        check = f"speed: main job, {model}, {per_round} clients per round"
        if missing:
            emit(Row(check, "all", NA, f"data missing: {missing}", 0.0))
            continue
        main_job_model(opts, emit, check, [f"clients_per_round={per_round}", f"model={model}"])


def timed_rounds(cfg: Any, rounds: int) -> tuple[list[float], str]:
    """Seconds of each of the first ``rounds`` rounds of ``cfg`` (the device synchronised), and
    the engine's choice (engine=auto's reason)."""
    import torch

    from fedretain.experiments.run import build_rounds

    fed, engine = build_rounds(cfg)
    state = fed.algorithm.server_init(*fed.task.init())
    times = []
    for rnd in range(rounds):
        t = time.perf_counter()
        clients = fed.participation.clients(rnd)
        state, _ = engine.run_round(state, rnd, cfg.lr_at(rnd), clients=clients)
        if fed.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    engine.engine.close()
    return times, getattr(engine.engine, "choice", "")


def main_job_model(opts: Options, emit: Emit, check: str, keys: list[str]) -> None:
    """One model's rows of :func:`main_job_rows`."""
    from fedretain.recipe.config import load_config

    timed = 1 if opts.quick else 2
    base: dict[str, float] = {}
    for engine in ("sequential", "vmap", "auto"):
        overrides = [*keys, f"engine={engine}", f"device={opts.device}"]
        overrides.append("threads=1" if not opts.cuda else "threads=2")
        t0 = time.perf_counter()
        try:
            cfg = load_config(ROOT / "experiments/fmnist_pathological.toml", overrides)
            times, choice = timed_rounds(cfg, timed + 1)
        except Exception as e:
            emit(Row(check, engine, FAIL, error_text(e), time.perf_counter() - t0))
            continue
        median = statistics.median(times[1:])
        base[engine] = median
        speedup = ""
        if engine != "sequential" and "sequential" in base:
            speedup = f", {base['sequential'] / median:.1f}x sequential"
        detail = f"{median:.3f} s/round{speedup}" + (f"; {choice}" if choice else "")
        emit(Row(check, engine, OK, detail, time.perf_counter() - t0))


def continual_rows(opts: Options, emit: Emit) -> None:
    """fedcil-table1 at ``--scale paper``: FedCIL's round (5 clients, an ACGAN of width 64,
    batch 32, Adam, the server's consolidation) on the sequential and the vectorised engine at
    50 local steps (--quick: 5 steps, 5 consolidation steps, width 8), timed after a warm-up
    round; a FedCIL run of the paper (200 rounds of 400 steps) projected from it, an upper
    bound (the consolidation, a fixed cost per round, is scaled with the steps). The preset's
    other methods cost less per step (``benchmarks/paper_cost.py``)."""
    from fedretain.experiments.presets import PRESETS
    from fedretain.experiments.reproduce.jobs import as_args, resolve_data
    from fedretain.recipe.config import load_config

    check = "speed: fedcil-table1 paper, FedCIL round"
    entry = PRESETS.get("fedcil-table1")
    data = resolve_data(entry.meta["dataset"], entry.meta.get("standin"), [])
    if data.missing:
        emit(Row(check, "all", NA, f"data missing: {data.missing}", 0.0))
        return
    plan = entry.factory("paper", [0], data)
    spec = next(s for s in plan.runs if s.method == "FedCIL")
    steps = 5 if opts.quick else 50
    keys = {**plan.base, **spec.overrides, "local_steps": steps, "device": opts.device}
    if opts.quick:  # the harness only: the paper's ACGAN takes seconds per step on a CPU
        keys.update({"algo.consolidation_steps": 5, "model.width": 8})
    base = 0.0
    for engine in ("sequential", "vmap"):
        t0 = time.perf_counter()
        try:
            times, _ = timed_rounds(load_config(None, as_args({**keys, "engine": engine})), 2)
        except Exception as e:
            emit(Row(check, engine, FAIL, error_text(e), time.perf_counter() - t0))
            continue
        per_round = times[-1]
        hours = per_round * (400 / steps) * 200 / 3600
        faster = f", {base / per_round:.1f}x sequential" if base else ""
        base = base or per_round
        detail = (
            f"{per_round:.2f} s/round at {steps} local steps{faster}; a FedCIL run of the "
            f"paper (200 rounds x 400 steps) at most {hours:.2f} h"
        )
        emit(Row(check, engine, OK, detail, time.perf_counter() - t0))


def speed(opts: Options, emit: Emit) -> None:
    main_job_rows(opts, emit)
    continual_rows(opts, emit)  # before pfl's rows, whose compiled variant may meet the cap
    pfl_rows(opts, emit)


RUNNERS: dict[str, Callable[[Options, Emit], None]] = {
    "conformance": conformance,
    "determinism": determinism,
    "cuda_tests": cuda_tests,
    "privacy": privacy,
    "presets": presets,
    "speed": speed,
}


# --------------------------------------------------------------------------- driver


def run_part(name: str, opts: Options, rows_file: Path) -> None:
    """Run part ``name`` in this process, appending its rows to ``rows_file`` as they come."""

    def emit(row: Row) -> None:
        with open(rows_file, "a") as f:
            f.write(json.dumps(asdict(row)) + "\n")
        print(f"{row.result:>4} | {row.check} | {row.engine} | {row.detail}", flush=True)

    Path(opts.out).mkdir(parents=True, exist_ok=True)
    RUNNERS[name](opts, emit)


def read_rows(path: Path) -> list[Row]:
    if not path.is_file():
        return []
    return [Row(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def stop(proc: subprocess.Popen) -> None:
    """Stop a part's process and everything it started (its own process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def spawn_part(name: str, opts: Options, out: Path, cap: float) -> list[Row]:
    """Part ``name`` in a process of its own, stopped after ``cap`` seconds: its rows, and a
    failing row when it crashed or ran over its cap."""
    rows_file = out / f"{name}.rows.jsonl"
    rows_file.unlink(missing_ok=True)
    part_opts = {**asdict(opts), "out": str(out / name)}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--part", name]
    cmd += ["--rows", str(rows_file), "--options", json.dumps(part_opts)]
    log = out / f"{name}.log"
    t0 = time.perf_counter()
    with open(log, "w") as f:
        proc = subprocess.Popen(
            cmd, stdout=f, stderr=subprocess.STDOUT, env=child_env(), start_new_session=True
        )
        try:
            code = proc.wait(timeout=cap)
            over = False
        except subprocess.TimeoutExpired:
            stop(proc)
            code, over = proc.returncode, True
    seconds = time.perf_counter() - t0
    rows = read_rows(rows_file)
    if over:
        why = f"stopped at its time cap of {cap:.0f} s after {len(rows)} rows (log: {log})"
        rows.append(Row(name, "", FAIL, why, seconds))
    elif code != 0:
        text = log.read_text()
        rows.append(Row(name, "", FAIL, f"crashed (exit {code}): {last_line(text)[:200]}", seconds))
    elif not rows:
        rows.append(Row(name, "", FAIL, f"no rows (log: {log})", seconds))
    return rows


def part_cap(part: str, todo: list[str], caps: dict[str, float], left: float, fixed: bool) -> float:
    """``part``'s time cap: its share of the ``left`` seconds in proportion to the weights of
    the parts still to run (``todo``, ``part`` first), or its own cap where there is no budget
    or the command line fixed it (never more than what is left)."""
    if math.isinf(left) or fixed:
        return min(caps[part], left)
    return left * caps[part] / sum(caps[p] for p in todo)


def write_table(out: Path, header: str, rows: list[Row]) -> None:
    """The table of every row so far, to ``out/table.md`` (replaced whole) and to stdout: a
    check stopped from outside still leaves the table of the parts that ran."""
    text = header + "\n\n" + table(rows) + "\n"
    tmp = out / "table.md.tmp"
    tmp.write_text(text)
    tmp.replace(out / "table.md")
    print(text, flush=True)


def machine(opts: Options) -> str:
    import torch

    if opts.cuda:
        gpu = torch.cuda.get_device_name(torch.device(opts.device))
    else:
        gpu = "no GPU (--device cpu: the harness only)"
    return f"{gpu}; torch {torch.__version__}; {os.cpu_count()} CPUs"


def link_data(folder: str) -> list[str]:
    """Datasets of ``folder`` (``folder/<dataset>/``) linked to their default folders where
    those are missing (the runs and the presets read the default folders); what was linked."""
    from fedretain.data.datasets import DATASETS

    linked = []
    for name, entry in DATASETS.items():
        default, source = entry.meta.get("default_dir"), Path(folder) / name
        if not default or not source.is_dir() or Path(default).exists():
            continue
        Path(default).parent.mkdir(parents=True, exist_ok=True)
        Path(default).symlink_to(source.resolve(), target_is_directory=True)
        linked.append(f"{name} -> {source}")
    return linked


def parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda[:N] (default), or cpu: the harness")
    ap.add_argument("--only", default=",".join(PARTS), help=f"parts, of: {','.join(PARTS)}")
    ap.add_argument("--quick", action="store_true", help="smaller runs (for a CPU)")
    ap.add_argument(
        "--filter",
        default="",
        help="conformance cases by name, comma-separated shell patterns "
        "(fedavg, 'aggregator=*', 'class_incremental *', 'privacy=*')",
    )
    ap.add_argument("--tolerance", type=float, default=TOLERANCE, help="conformance bound")
    ap.add_argument("--tf32", action="store_true", help="keep torch's TF32 defaults on CUDA")
    ap.add_argument("--jobs", type=int, default=0, help="reproduce's runs at a time (0: auto)")
    ap.add_argument("--presets", default="all", help="presets to reproduce, comma-separated")
    ap.add_argument("--models", default="mlp", help="models of the main job's speed rows")
    ap.add_argument("--data", default="", help="a folder of datasets (DATA/fashion-mnist/...)")
    ap.add_argument("--out", default="", help="working folder (default: a new temporary one)")
    ap.add_argument(
        "--cap",
        action="append",
        default=[],
        metavar="PART=SECONDS",
        help="a part's time cap (default by device: " + json.dumps(CAPS) + ")",
    )
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds for all parts together, shared out as they go (default 480 on CUDA, "
        "none on a CPU; 0: none)",
    )
    ap.add_argument("--perturb", type=float, default=0.0, help=argparse.SUPPRESS)
    ap.add_argument("--part", help=argparse.SUPPRESS)  # one part, in a child process
    ap.add_argument("--rows", help=argparse.SUPPRESS)
    ap.add_argument("--options", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    a = parse(argv)
    if a.part:
        run_part(a.part, Options(**json.loads(a.options)), Path(a.rows))
        return 0
    opts = Options(
        device=a.device,
        quick=a.quick,
        filter=[p.strip() for p in a.filter.split(",") if p.strip()],
        tolerance=a.tolerance,
        perturb=a.perturb,
        tf32=a.tf32,
        jobs=a.jobs,
        presets=a.presets,
        models=a.models,
    )
    try:
        import torch

        cuda = torch.cuda.is_available()
        found = f"torch {torch.__version__} finds none"
    except ImportError:
        cuda, found = False, f"{sys.executable} cannot import torch"
    if opts.cuda and not cuda:
        print(
            f"gpu_check needs a CUDA GPU ({found}); --device cpu runs the harness on the CPU",
            file=sys.stderr,
        )
        return NEEDS_CUDA
    if opts.device != "cpu" and not opts.cuda:
        print(f"--device must be cuda[:N] or cpu, got {opts.device}", file=sys.stderr)
        return NEEDS_CUDA
    parts = [p for p in a.only.split(",") if p]
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        print(
            f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}", file=sys.stderr
        )
        return NEEDS_CUDA
    kind = "cuda" if opts.cuda else "cpu"
    caps = dict(CAPS[kind])
    for item in a.cap:
        part, _, value = item.partition("=")
        caps[part] = float(value)
    budget = BUDGET[kind] if a.budget is None else a.budget
    out = Path(a.out or tempfile.mkdtemp(prefix="gpu_check-"))
    out.mkdir(parents=True, exist_ok=True)
    linked = link_data(a.data) if a.data else []
    header = f"gpu_check on {opts.device}: {machine(opts)}"
    if linked:
        header += f"; data linked: {', '.join(linked)}"
    print(header, file=sys.stderr, flush=True)
    started = time.perf_counter()
    rows: list[Row] = []
    todo = [p for p in PARTS if p in parts]
    fixed = {item.partition("=")[0] for item in a.cap}  # caps given on the command line
    for i, part in enumerate(todo):
        left = budget - (time.perf_counter() - started) if budget else math.inf
        if left < 10:
            why = f"not run: the budget of {budget:.0f} s was spent (--budget 0: none)"
            rows.append(Row(part, "", FAIL, why, 0.0))
        else:
            cap = part_cap(part, todo[i:], caps, left, part in fixed)
            print(f"--- {part} (cap {cap:.0f} s)", file=sys.stderr, flush=True)
            part_rows = spawn_part(part, opts, out, cap)
            for row in part_rows:
                print(
                    f"{row.result:>4} | {row.check} | {row.engine} | {row.detail}", file=sys.stderr
                )
            rows += part_rows
        write_table(out, header, rows)  # after every part: what ran so far
    total = time.perf_counter() - started
    failed = sum(r.failed for r in rows)
    counts = {k: sum(r.result == k for r in rows) for k in (PASS, FAIL, NA, OK)}
    keep = bool(failed or a.out)  # a failure's logs stay for a look
    where = f"; logs and outputs in {out}" if keep else ""
    print(
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[NA]} n/a, {counts[OK]} measured "
        f"in {total:.0f} s{where}"
    )
    if not keep:
        shutil.rmtree(out, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
