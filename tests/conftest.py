"""Test-wide settings: property-based tests are derandomised in CI (the same examples every
run); tests marked ``cuda`` need a CUDA GPU and skip without one (``pytest -m cuda`` selects
them on a machine with one). They take their device from the ``gpu`` fixture: ``cuda``, or
the CPU standing in for it where ``FEDRETAIN_CUDA_STANDIN=cpu`` (gpu_check's rehearsal, which
runs them on a CPU to find what would fail before the first GPU minute is spent)."""

import os
import tempfile

import pytest
import torch
from hypothesis import settings

# datasets a developer fetched with `fedretain data get` (read without data_dir) stay out of the
# suite: it sees an empty folder of its own
os.environ["FEDRETAIN_DATA_HOME"] = tempfile.mkdtemp(prefix="fedretain-test-data-")

# the suite tests what a killed process leaves, not a power loss: no fsync (inherited by the
# real processes the tests start); tests/experiments/test_results.py checks the default flushes
os.environ["FEDRETAIN_FSYNC"] = "0"

settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


STANDIN = os.environ.get("FEDRETAIN_CUDA_STANDIN", "")


# The longest test files, longest first (seconds of one worker on a 2-vCPU AMD EPYC, 2026-11-29;
# benchmarks/RESULTS.md, "Test suite"): they are collected first, so that pytest-xdist
# (scripts/test.sh: --dist loadfile --no-loadscope-reorder) hands them out first and the
# workers end on short files together, instead of one worker finishing a 2-minute file alone
LONGEST_FIRST = (
    "tests/flower/test_deployment.py",  # 126 s
    "tests/engines/test_vmap_conformance.py",  # 93
    "tests/continual/test_scenario.py",  # 84
    "tests/test_gpu_check.py",  # 83
    "tests/studies/test_ray_studies.py",  # 65: real raylets, a preset three ways
    "tests/studies/test_reproduce.py",  # 64
    "tests/studies/test_ci_fedcil.py",  # 61
    "tests/engines/test_auto.py",  # 54
    "tests/privacy/test_runs.py",  # 51
    "tests/flower/test_simulation.py",  # 47
    "tests/experiments/test_resume.py",  # 45
    "tests/studies/test_ci_tce.py",  # 40
    "tests/models/test_models.py",  # 42
    "tests/studies/test_ci_gradma.py",  # 41
    "tests/studies/test_ray_nodes.py",  # 27
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))
    if torch.cuda.is_available() or STANDIN == "cpu":
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture
def gpu() -> str:
    """The device of a test marked ``cuda``: "cuda", or "cpu" standing in for it."""
    return "cpu" if STANDIN == "cpu" and not torch.cuda.is_available() else "cuda"


@pytest.fixture
def real_gpu() -> str:
    """The device "cuda", for a ``cuda`` test that checks what only CUDA has (graphs, devices):
    skipped under the CPU stand-in."""
    if STANDIN == "cpu" and not torch.cuda.is_available():
        pytest.skip("checks what only CUDA has: the CPU cannot stand in for it")
    return "cuda"
