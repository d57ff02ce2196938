"""What the tests of `fedretain reproduce` share: the ``ci`` fixture (a module imports it: every
preset at scale=ci into one module-wide folder, on tiny files the tests write where a preset
reads its paper's data at ci) and the check that a preset runs at ci and reports every claim,
which each paper's file applies to its presets (tests/studies/test_ci_<paper>.py, so that
the suite's workers share them out; the other presets in test_reproduce.py)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from fedretain.studies.presets import PRESETS, Data, Plan
from fedretain.studies.reproduce import plan_section, reproduce, resolve_data
from tests.data.test_data_cifar import write_cifar10
from tests.data.test_datasets import write_mnist_like

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists()
VERDICTS = ("**held**", "**did not hold**", "**undecided**", "not run (data missing)")
# the papers whose presets have a test file of their own (test_ci_<paper>.py); the others'
# presets run in test_reproduce.py
PAPERS = ("FedReg", "FedCIL", "GradMA", "TCE")
# presets whose whole ci plan runs behind `slow`: demo-tune's 120 runs (1.5 min) run on a
# reduced grid in tests/studies/test_tuning.py, and in full in gpu_check's presets part
SLOW_AT_CI = {"demo-tune"}


def presets_of(paper: str | None) -> list:
    """The presets of ``paper`` (its name starts their registry entry's ``paper``), or those of
    no paper of :data:`PAPERS` (None), as pytest parameters (behind ``slow`` where listed)."""

    def mine(name: str) -> bool:
        of = PRESETS.get(name).meta["paper"]
        return of.startswith(paper) if paper else not of.startswith(PAPERS)

    return [
        pytest.param(n, marks=pytest.mark.slow) if n in SLOW_AT_CI else n
        for n in PRESETS
        if mine(n)
    ]


def plan_of(name: str, data_dirs: list[str] | None = None) -> tuple[Plan, Data]:
    """Preset ``name``'s plan at ci, on the data ``data_dirs`` give (else its default)."""
    entry = PRESETS.get(name)
    data = resolve_data(entry.meta["dataset"], entry.meta.get("standin"), data_dirs or [])
    return entry.factory("ci", [0], data), data


def write_emnist(folder: Path) -> None:
    """Tiny EMNIST letters and balanced splits: 5 training and 2 test images per class."""
    for split, classes, offset in (("letters", 26, 1), ("balanced", 47, 0)):
        files = ("train-images-idx3", "train-labels-idx1", "test-images-idx3", "test-labels-idx1")
        names = tuple(f"emnist-{split}-{f}-ubyte" for f in files)
        write_mnist_like(folder, names, 5 * classes, 2 * classes, classes, label_offset=offset)


def ci_data_dirs(name: str, root: Path) -> list[str]:
    """The tiny files a preset reads at scale=ci: CIFAR-10's, and EMNIST's for a preset on
    EMNIST without a stand-in (one with a stand-in keeps running on Fashion-MNIST)."""
    meta = PRESETS.get(name).meta
    emnist = meta["dataset"] == "emnist" and not meta.get("standin")
    return [f"cifar10={root / 'cifar'}"] + ([f"emnist={root / 'emnist'}"] if emnist else [])


@pytest.fixture(scope="module")
def ci(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Path]:
    """Runs a preset at scale=ci into one module-wide folder (once: reproduce skips finished
    runs), with tiny CIFAR-10 and EMNIST files; returns the preset's folder."""
    root = tmp_path_factory.mktemp("ci")
    write_cifar10(root / "cifar", per_batch=20)  # 100 training images, 10 per class
    write_emnist(root / "emnist")

    def run(name: str, **kwargs) -> Path:
        out = root / name
        kwargs.setdefault("data_dirs", ci_data_dirs(name, root))
        reproduce([name], out, scale="ci", echo=kwargs.pop("echo", lambda s: None), **kwargs)
        return out

    return run


def check_at_ci(ci: Callable[..., Path], name: str) -> str:
    """Preset ``name`` runs at ci: a verdict for every claim; every run finished and every
    image present, or, where the data its runs read are missing, the report says so. Returns
    the report's text."""
    out = ci(name)
    text = (out / "report.md").read_text()
    section = plan_section(name, out, "ci", None, ci_data_dirs(name, out.parent), [], out, False)
    plan, data = section.plan, section.data
    assert f"fedretain reproduce {name} --out {out} --scale ci --seeds 1" in text
    for claim in plan.claims:  # every claim, with a verdict
        row = next(line for line in text.splitlines() if f"| {claim.text} |" in line)
        assert any(v in row for v in VERDICTS), row
    if data.missing:
        assert not FMNIST and "Not run: the data are missing" in text
        return text
    assert f"Runs: {len(plan.runs)} of {len(plan.runs)} finished" in text
    assert "Runs that failed" not in text
    for image in re.findall(r"\]\(([^)]+\.png)\)", text):
        assert (out / image).is_file(), image
    for spec in plan.runs:
        done = "privacy.json" if spec.study is not None else "summary.json"
        assert (out / spec.folder / done).is_file()
    return text
