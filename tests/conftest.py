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

settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


STANDIN = os.environ.get("FEDRETAIN_CUDA_STANDIN", "")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
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
