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

Each part is a module of ``benchmarks/gpu_parts/`` (``conformance.py``, ``determinism.py``, ...;
what they share in ``common.py``); this file shares the time out and writes the table.

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
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_parts, when loaded by path

from gpu_parts.common import (
    FAIL,
    NA,
    NEEDS_CUDA,
    OK,
    PASS,
    TOLERANCE,
    Emit,
    Options,
    Row,
    child_env,
    last_line,
    table,
)
from gpu_parts.conformance import conformance
from gpu_parts.cuda_tests import cuda_tests
from gpu_parts.determinism import determinism
from gpu_parts.presets import presets
from gpu_parts.privacy import privacy
from gpu_parts.speed import speed

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
