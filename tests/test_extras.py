"""The core runs without the optional packages, and each feature that needs one says which
extra installs it, in one line: Flower and Ray (``[flower]``), Opacus (``[privacy]``),
TensorBoard (``[tracking]``), MLflow, W&B and h5py (``[femnist]``) are blocked from import in a
child process (as on a machine without them, such as the GPU image), and a tiny job runs there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKER = """
import sys

BLOCKED = {"flwr", "ray", "opacus", "tensorboard", "mlflow", "wandb", "h5py"}


class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)", name=name)
        return None


sys.meta_path.insert(0, Block())
"""
TINY = ["dataset=digits", "model=mlp", "clients=4", "clients_per_round=2", "rounds=2"]


@pytest.fixture(scope="module")
def without_extras(tmp_path_factory: pytest.TempPathFactory):
    """Run ``python -m ARGS`` with the optional packages blocked; (exit code, out, err)."""
    site = tmp_path_factory.mktemp("blocked")
    (site / "sitecustomize.py").write_text(BLOCKER)
    env = {**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}

    def run(*args: str, cwd: Path = site) -> tuple[int, str, str]:
        proc = subprocess.run(
            [sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True
        )
        return proc.returncode, proc.stdout, proc.stderr

    return run, site


def test_the_blocker_blocks(without_extras):
    run, _ = without_extras
    code, _, err = run("flwr")
    assert code != 0 and "blocked" in err


def test_the_core_runs_without_flower_ray_opacus_or_tensorboard(without_extras):
    run, site = without_extras
    code, out, err = run("fedretain", "run", *TINY, "--out", str(site / "run"))
    assert code == 0, err
    assert "final accuracy" in out and (site / "run" / "summary.json").is_file()


CASES = [
    (["fedretain", "run", *TINY, "engine=flower"], "flower", "engine=flower needs flwr"),
    (["fedretain", "run", *TINY, "privacy=dpsgd"], "privacy", "privacy=dpsgd needs opacus"),
    (
        ["fedretain", "run", *TINY, "privacy=client_fixed"],
        "privacy",
        "privacy=client_fixed needs opacus",
    ),
    (
        ["fedretain", "run", *TINY, "tracking=tensorboard"],
        "tracking",
        "tracking=tensorboard needs tensorboard",
    ),
    (["fedretain", "run", *TINY, "tracking=mlflow"], "mlflow", "tracking=mlflow needs mlflow"),
    (["fedretain", "run", *TINY, "tracking=wandb"], "wandb", "tracking=wandb needs wandb"),
    (["fedretain.flower", "simulate", *TINY], "flower", "fedretain.flower needs flwr"),
    (["fedretain", "reproduce", "demo", "--scale", "ci", "--ray"], "flower", "--ray needs ray"),
    (  # the refusals fixture writes femnist/*.h5 (their bytes are never read)
        ["fedretain", "run", *TINY, "dataset=femnist", "data_dir=femnist"],
        "femnist",
        "FEMNIST's fed_emnist_train.h5 needs h5py",
    ),
]
# every case's `python -m MODULE ARGS` in one blocked process (one torch start in all):
# [exit status, stderr] per case
EACH = """
import contextlib, io, json, runpy, sys

results = []
for argv in json.loads(sys.argv[1]):
    err, code = io.StringIO(), 0
    sys.argv = list(argv)
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else int(e.code is not None)
    results.append([code, err.getvalue()])
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def refusals(without_extras):
    run, site = without_extras
    (site / "each.py").write_text(EACH)
    (site / "femnist").mkdir()
    for split in ("train", "test"):
        (site / "femnist" / f"fed_emnist_{split}.h5").write_bytes(b"")
    argvs = [[*args, "--out", str(site / f"x{i}")] for i, (args, _, _) in enumerate(CASES)]
    code, out, err = run("each", json.dumps(argvs))
    assert code == 0, err
    return json.loads(out.splitlines()[-1])


@pytest.mark.parametrize("case", range(len(CASES)), ids=[c[2] for c in CASES])
def test_a_feature_without_its_package_names_the_extra_in_one_line(refusals, case):
    _, extra, what = CASES[case]
    code, err = refusals[case]
    assert code == 2, err
    assert err.count("\n") == 1 and what in err
    assert f'pip install "fedretain[{extra}]"' in err
