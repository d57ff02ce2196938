"""``cuda_tests``: the suite's tests marked ``cuda``, one row each (see
``benchmarks/gpu_check.py``)."""

from __future__ import annotations

import re
import subprocess
import sys
import time

from gpu_parts.common import FAIL, NA, PASS, ROOT, Emit, Options, Row, child_env, last_line

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
