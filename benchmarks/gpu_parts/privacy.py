"""``privacy``: ``fedretain privacy`` on a small digits setting on ``--device`` (see
``benchmarks/gpu_check.py``)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from gpu_parts.common import FAIL, PASS, ROOT, Emit, Options, Row, child_env, cli, flags, last_line


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
