"""``speed``: seconds per round of pfl-research's CIFAR-10 round, the main job and FedCIL's
round on every engine (see ``benchmarks/gpu_check.py``)."""

from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gpu_parts.common import (
    FAIL,
    NA,
    OK,
    ROOT,
    Emit,
    Options,
    Row,
    child_env,
    dataset_available,
    error_text,
    last_line,
)

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
    from fedretain.recipe.config import load_config
    from fedretain.studies.presets import PRESETS
    from fedretain.studies.reproduce.jobs import as_args, resolve_data

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
