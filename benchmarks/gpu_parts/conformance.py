"""``conformance``: every registered component on tiny runs, each on ``--device`` against the
CPU reference run of the same config (see ``benchmarks/gpu_check.py``)."""

from __future__ import annotations

import contextlib
import fnmatch
import io
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_parts.common import (
    ACGAN,
    BASE,
    CONTINUAL,
    DEVICE_ENGINES,
    FAIL,
    NA,
    OVERRIDES,
    PASS,
    WALL,
    Emit,
    Options,
    Row,
    error_text,
    last_line,
)


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
