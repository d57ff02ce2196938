"""``determinism``: a CNN run twice on ``--device`` on each engine, identical numbers; the
cost of the deterministic modes (see ``benchmarks/gpu_check.py``)."""

from __future__ import annotations

import itertools
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from gpu_parts.common import (
    FAIL,
    OK,
    PASS,
    WALL,
    Emit,
    Options,
    Row,
    child_env,
    cli,
    dataset_available,
    flags,
    last_line,
)


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
