"""``presets``: every preset at ``--scale ci`` on ``--device`` (see
``benchmarks/gpu_check.py``)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

from gpu_parts.common import FAIL, NA, PASS, Emit, Options, Row, child_env, cli, last_line

RUNS_LINE = re.compile(
    r"Runs: (\d+) of (\d+) finished, (\d+) diverged, (\d+) failed, (\d+) not run"
)


def presets(opts: Options, emit: Emit) -> None:
    """``fedretain reproduce PRESETS --scale ci device=DEVICE``; one row per preset."""
    from fedretain.studies.presets import PRESETS

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
