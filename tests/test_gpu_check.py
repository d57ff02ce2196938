"""``benchmarks/gpu_check.py`` (``scripts/gpu_check.sh``), the GPU verification, exercised on
the CPU: with ``--device cpu`` its conformance compares two CPU runs, which tests the harness
(the table, the comparison, the n/a cases, the time caps, the exit status); a deliberately
perturbed run fails; without a CUDA GPU the CUDA check refuses in one line with status 2."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "benchmarks" / "gpu_check.py"
QUICK = ["--device", "cpu", "--quick", "--only", "conformance"]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", DRIVER)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def part(gpu_check):
    """A part's module (``benchmarks/gpu_parts/NAME.py``), by name."""
    return lambda name: importlib.import_module(f"gpu_parts.{name}")


def _rows(text: str) -> dict[tuple[str, str], list[str]]:
    """(check, engine) -> [result, detail, seconds] of the markdown table in ``text``."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith(("| check ", "|---")):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def test_a_perturbed_run_fails_its_rows_and_the_exit_status(gpu_check, tmp_path, capsys):
    """--perturb scales the device runs' learning rate: the comparison must catch it."""
    args = [*QUICK, "--filter", "fedavg", "--perturb", "0.1", "--out", str(tmp_path)]
    assert gpu_check.main(args) == 1
    rows = _rows(capsys.readouterr().out)
    for engine in ("sequential", "vmap"):
        result, detail, _ = rows[("conformance: fedavg", engine)]
        assert result == "FAIL" and detail.startswith("over 1e-05: params at /x/")


def test_a_part_over_its_time_cap_is_stopped_and_fails(gpu_check, tmp_path, capsys):
    args = [*QUICK, "--filter", "fedavg", "--cap", "conformance=1", "--out", str(tmp_path)]
    assert gpu_check.main(args) == 1
    result, detail, _ = _rows(capsys.readouterr().out)[("conformance", "")]
    assert result == "FAIL" and detail.startswith("stopped at its time cap of 1 s after 0 rows")


def test_the_budget_is_shared_out_by_weight_and_what_a_part_leaves_goes_to_the_next(gpu_check):
    caps = gpu_check.CAPS["cuda"]
    todo = list(gpu_check.PARTS)
    first = gpu_check.part_cap(todo[0], todo, caps, 480.0, fixed=False)
    assert first == pytest.approx(480 * caps[todo[0]] / sum(caps.values()))
    # the caps of the parts still to run always add up to what is left: none starves
    assert sum(gpu_check.part_cap(p, todo, caps, 480.0, False) for p in todo) == pytest.approx(480)
    # a part that finished early leaves more to the last one than its share at the start
    last = gpu_check.part_cap(todo[-1], todo[-1:], caps, 100.0, fixed=False)
    assert last == pytest.approx(100.0)
    # a cap given on the command line, or no budget: the part's own cap, never over what is left
    assert gpu_check.part_cap("speed", todo, {**caps, "speed": 5}, 480.0, fixed=True) == 5
    assert gpu_check.part_cap("speed", todo, caps, math.inf, fixed=False) == caps["speed"]
    assert gpu_check.part_cap("speed", todo, caps, 3.0, fixed=True) == 3.0
    assert gpu_check.BUDGET["cuda"] <= 9 * 60 - 60  # one 9-minute call, a minute to set up


@pytest.mark.slow  # its second part collects the whole suite (pytest -m cuda)
def test_the_table_is_rewritten_after_every_part(gpu_check, tmp_path, capsys):
    """A check stopped from outside after its first part still leaves that part's table."""
    args = ["--device", "cpu", "--quick", "--only", "conformance,cuda_tests"]
    args += ["--filter", "fedavg", "--budget", "900", "--out", str(tmp_path)]
    gpu_check.main(args)
    out = capsys.readouterr().out
    tables = out.split("gpu_check on cpu")[1:]
    assert len(tables) == 2  # one after each part, the second with every row
    assert "conformance: fedavg" in tables[0] and "pytest -m cuda" not in tables[0]
    assert "pytest -m cuda" in tables[1] and "conformance: fedavg" in tables[1]
    written = (tmp_path / "table.md").read_text()
    assert "conformance: fedavg" in written and "pytest -m cuda" in written


def test_comparison_bounds_every_number_and_the_state(part):
    conformance = part("conformance")
    state = {"x": {"w": torch.tensor([1.0, 2.0]), "step": torch.tensor([3])}}
    records = [{"round": 1, "test_loss": 0.5, "test_accuracy": 0.25, "seconds": 1.0}]
    ref = {"records": records, "state": state, "summary": {}}
    close = {"x": {"w": torch.tensor([1.0, 2.0 + 2**-18]), "step": torch.tensor([3])}}
    slower = [{**records[0], "seconds": 9.0, "test_loss": 0.5 + 2e-6}]
    ok, detail = conformance.compare(ref, {**ref, "state": close, "records": slower}, 1e-5, "all")
    assert ok and "params 3.8e-06" in detail and "test_loss 2.0e-06" in detail
    off = {"x": {"w": torch.tensor([1.0, 2.1]), "step": torch.tensor([3])}}
    ok, detail = conformance.compare(ref, {**ref, "state": off}, 1e-5, "all")
    assert not ok and detail.startswith("over 1e-05: params at /x/w 1.0e-01")
    step = {"x": {"w": torch.tensor([1.0, 2.0]), "step": torch.tensor([4])}}
    assert not conformance.compare(ref, {**ref, "state": step}, 1e-5, "all")[0]
    shorter = {**ref, "records": records + records}
    assert not conformance.compare(ref, shorter, 1e-5, "all")[0]
    # accounting: the losses may differ (the device's noise), the run must stay finite
    noisy = [{**records[0], "test_loss": 0.9}]
    assert conformance.compare(ref, {**ref, "records": noisy}, 1e-5, "accounting")[0]
    diverged = [{**records[0], "test_loss": math.nan}]
    assert not conformance.compare(ref, {**ref, "records": diverged}, 1e-5, "accounting")[0]
    assert conformance.number_diff(math.nan, math.nan) == 0.0
    assert conformance.number_diff(None, 0.0) == math.inf


def test_refusals_and_fallbacks_are_found_before_running(part):
    conformance = part("conformance")
    base = {**conformance.BASE, "clients_per_round": 2}
    refused, _ = conformance.precheck({**base, "aggregator": "krum"})
    assert "krum" in refused or "clients" in refused
    assert conformance.precheck(dict(conformance.BASE)) == ("", "")
    _, fallback = conformance.precheck({**conformance.BASE, "privacy": "dpsgd"})
    assert "not vectorisable" in fallback
    names = [c.name for c in conformance.conformance_cases(quick=True)]
    for name in ("fedavg", "scaffold", "server_opt=adam", "aggregator=bulyan", "privacy=dpsgd σ=0"):
        assert name in names
    assert "class_incremental fedcil" in names and "class_incremental fedlwf2t" in names
    assert "aggregator=mean" not in names


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_the_cuda_tests_part_reads_every_kind_of_pytest_summary_line(part):
    lines = {
        "PASSED tests/engines/test_vmap_devices.py::test_all[x]": ("PASSED", "", None),
        "FAILED tests/a.py::test_b - AssertionError: 1 != 2": ("FAILED", "", "AssertionError"),
        "SKIPPED [4] tests/engines/test_deterministic.py:155: needs a CUDA GPU": (
            "SKIPPED",
            "tests/engines/test_deterministic.py:155",
            "needs a CUDA GPU",
        ),
    }
    for line, (kind, name, why) in lines.items():
        found = part("cuda_tests").PYTEST_LINE.match(line)
        assert found and found.group(1) == kind, line
        assert found.group(2) == (name or line.split()[1]), line
        assert (found.group(3) or None) == why or why in found.group(3), line


def test_without_cuda_the_cuda_check_refuses_in_one_line(gpu_check, capsys):
    assert gpu_check.main(["--device", "cuda"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("gpu_check needs a CUDA GPU")
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True, env=env
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "needs a CUDA GPU" in proc.stderr


# ------------------------------------------------------------------ the image and its rehearsal

WHEELS = ROOT / "scripts" / "gpu-wheels"
IMAGE_LACKS = ["flwr", "ray", "opacus", "tomli_w", "quadprog"]


def _wheels_sh(script: str, python: str, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHON": python, "GPU_CHECK_SITE": str(site)}
    cmd = f"source {ROOT / 'scripts' / 'wheels.sh'} && {script}"
    return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, env=env)


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    """The rehearsal's environment, built from this interpreter's packages."""
    folder = tmp_path_factory.mktemp("rehearsal")
    build = [sys.executable, str(ROOT / "scripts" / "rehearse_env.py"), str(folder / "env")]
    proc = subprocess.run(build, capture_output=True, text=True, check=True)
    return folder, proc.stdout.splitlines()


def _finds(python: str, modules: list[str], pythonpath: str = "") -> dict[str, bool]:
    code = "import importlib.util as u, json, sys; "
    code += "print(json.dumps([u.find_spec(m) is not None for m in sys.argv[1:]]))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"PYTHONPATH": pythonpath} if pythonpath else {})
    out = subprocess.run([python, "-c", code, *modules], capture_output=True, text=True, env=env)
    return dict(zip(modules, json.loads(out.stdout)))


def test_the_committed_wheels_are_the_pinned_ones_and_match_their_sums():
    """Every wheel gpu_check installs on the image is listed with its SHA-256, at the version
    scripts/wheels.sh pins and, where the lock pins it too, the lock's."""
    import hashlib

    sums = dict(ln.split()[::-1] for ln in (WHEELS / "SHA256SUMS").read_text().splitlines())
    assert set(sums) == {p.name for p in WHEELS.glob("*.whl")}
    for name, digest in sums.items():
        assert hashlib.sha256((WHEELS / name).read_bytes()).hexdigest() == digest, name
    pinned = _wheels_sh('printf "%s\\n" "${WHEELS_PINNED[@]}"', sys.executable, ROOT).stdout
    pins = {ln.split("==")[0].replace("-", "_"): ln.split("==")[1] for ln in pinned.split()}
    shipped = {n.split("-")[0]: n.split("-")[1] for n in sums}
    assert shipped == pins
    lock = (ROOT / "requirements-lock.txt").read_text().splitlines()
    for line in lock:
        name, _, version = line.partition("==")
        if name.replace("-", "_") in pins:
            assert pins[name.replace("-", "_")] == version, line


def test_the_rehearsal_has_the_images_packages_and_none_of_what_it_lacks(rehearsal):
    folder, printed = rehearsal
    python = printed[0]
    assert Path(python) == folder / "env" / "bin" / "python"
    found = _finds(python, [*IMAGE_LACKS, "torch", "numpy", "torchmetrics", "skimage", "pytest"])
    assert not any(found[m] for m in IMAGE_LACKS), found
    assert all(found[m] for m in ("torch", "numpy", "torchmetrics", "skimage", "pytest")), found
    assert printed[1].startswith("rehearsal differs from the image: python ")


def test_install_wheels_checks_the_sums_and_takes_this_interpreters_wheels(rehearsal, tmp_path):
    _, printed = rehearsal
    site = tmp_path / "site"
    proc = _wheels_sh('install_wheels && echo "$PYTHONPATH"', printed[0], site)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-1].split(":")[0] == str(site)
    found = _finds(printed[0], ["tomli_w", "opacus", "multiprocess", "pfl", "flwr"], str(site))
    assert found == {
        "tomli_w": True,
        "opacus": True,
        "multiprocess": True,
        "pfl": True,
        "flwr": False,
    }
    assert not (site / "benchmarks").exists()  # opacus's own would shadow the repository's
    tampered = tmp_path / "wheels"
    tampered.mkdir()
    for p in WHEELS.iterdir():
        (tampered / p.name).write_bytes(p.read_bytes())
    with open(tampered / "tomli_w-1.2.0-py3-none-any.whl", "ab") as f:
        f.write(b"\0")
    proc = _wheels_sh(f"install_wheels {tampered}", printed[0], tmp_path / "site2")
    assert proc.returncode == 2 and "does not match its SHA256SUMS" in proc.stderr
    assert not (tmp_path / "site2").exists()


def test_the_rehearsal_runs_a_part_in_the_images_environment(tmp_path):
    """``gpu_check.sh --rehearse`` end to end on one part: the wheels installed as on the
    image (tomli-w, which every run needs to write its config), the CPU standing in; its
    conformance prints one table of passing rows."""
    cmd = ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--rehearse", str(tmp_path / "env")]
    cmd += ["--only", "conformance", "--filter", "fedavg,aggregator=krum"]
    cmd += ["--out", str(tmp_path / "out")]
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "rehearsal differs from the image: python" in proc.stderr
    assert (tmp_path / "env" / "wheels-site" / "tomli_w").is_dir()
    out = proc.stdout
    assert out.count("| check | engine | result | detail | seconds |") == 1
    rows = _rows(out)
    checks = ["conformance: fedavg", "conformance: aggregator=krum"]
    assert set(rows) == {(c, e) for c in checks for e in ("sequential", "vmap")}
    for (check, engine), (result, detail, _) in rows.items():
        assert result == "pass", (check, engine, detail)
        assert detail.startswith("max \\|Δ\\| params")
    # the same config on the same engine: bit for bit; the vectorised engine: float rounding
    assert "params 0.0e+00" in rows[("conformance: fedavg", "sequential")][1]
    assert "4 passed, 0 failed" in out
    assert (tmp_path / "out" / "table.md").read_text().count("| conformance: ") == 4


@pytest.mark.slow
def test_the_rehearsal_runs_every_part_on_the_cpu(tmp_path):
    """``bash scripts/gpu_check.sh --rehearse``: every part in the image's environment, the
    CPU standing in for CUDA (minutes: the presets at --scale ci)."""
    cmd = ["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--rehearse", str(tmp_path / "env")]
    env = {**os.environ, "PYTHON": sys.executable}
    proc = subprocess.run(
        [*cmd, "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env
    )
    rows = _rows(proc.stdout)
    assert proc.returncode == 0, [r for r in rows.items() if r[1][0] == "FAIL"]
    checks = {check.split(":")[0].split(" ")[0] for check, _ in rows}
    assert {"conformance", "determinism", "pytest", "fedretain", "preset", "speed"} <= checks
    passed = {check for check, _ in rows if rows[(check, _)][0] == "pass"}
    assert any(c.startswith("pytest -m cuda: tests/engines/test_deterministic.py") for c in passed)
