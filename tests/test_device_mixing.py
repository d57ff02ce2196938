"""No tensor of a run meets one on another device, checked on the CPU (tests/device_mixing.py):
the run gets a second CPU device standing in for a GPU, and every operation that would mix
the run's device with the host on a GPU machine is recorded. The generator-quality FID whose
running sums stayed on the host (fixed in ``frechet_distance``) is put back and found; every
registered algorithm, server optimizer, aggregator and privacy mechanism with its accountant,
the continual methods with their replay and generators, the diagnostics (forgetting,
generator quality), metrics and the privacy study's attacks run without a mixing (the whole
registry behind ``slow``, one of each kind in the default suite)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from fedretain.continual import quality
from fedretain.experiments.run import run_experiment
from fedretain.recipe.config import load_config
from fedretain.studies.reproduce.jobs import as_args
from tests.continual.test_quality import toy_dataset
from tests.device_mixing import RUN, DeviceMixing, second_device

ROOT = Path(__file__).resolve().parents[1]


def _conformance_cases() -> dict[str, dict]:
    """gpu_check's conformance cases (benchmarks/gpu_parts/conformance.py), by name: the
    registry."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        module = importlib.import_module("gpu_parts.conformance")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return {c.name: c.keys for c in module.conformance_cases(quick=True)}


CASES = _conformance_cases()
CASES["diagnostics=forgetting"] = {**CASES["fedavg"], "diagnostics": ["forgetting"]}
# one of each kind: an algorithm with client and server state, one with a server-side QP, a
# server optimizer, a robust aggregator, each privacy mechanism (DP-SGD with Opacus and its
# accountant; client DP's adaptive clipping), each continual method (the ACGAN replay with
# the generator-quality FID, DGR, FedCIL's generators, FedLwF-2T), the forgetting diagnostic
DEFAULT = [
    "scaffold",
    "gradma",
    "server_opt=adam",
    "aggregator=bulyan",
    "privacy=dpsgd σ=1",
    "privacy=client_adaptive",
    "class_incremental fedavg+acgan, generator_quality",
    "class_incremental fedavg+dgr",
    "class_incremental fedcil",
    "class_incremental fedlwf2t",
    "diagnostics=forgetting",
]


def test_an_operation_on_two_devices_is_found_and_moves_are_not():
    with DeviceMixing() as check:
        run, host = torch.ones(3, device=RUN), torch.ones(3)
        assert run.device == RUN and host.device == torch.device("cpu")
        _ = run + torch.tensor(2.0)  # a 0-dimensional host tensor: a scalar on CUDA too
        _ = run.copy_(host), host.to(run.device) + run, torch.zeros(3, device=run.device) + run
        _ = run.cpu() + host, run.sum().item(), run.tolist(), run[torch.tensor([0, 2])]
        assert check.mixed == [] and check.on_run > 0
        _ = run * host
        _ = run.numpy()
    found = [m.function for m in check.mixed]
    assert found == ["mul", ".numpy() of a run-device tensor"]
    assert "test_device_mixing.py" in check.mixed[0].where
    assert "host (3,) made by ones" in check.mixed[0].operands


@pytest.fixture(scope="module")
def extractor(tmp_path_factory):
    dataset = toy_dataset(n=64)
    return dataset, quality.feature_extractor(dataset, tmp_path_factory.mktemp("features"))


def _fid_on_the_run_device(monkeypatch, dataset, extractor) -> DeviceMixing:
    with second_device(monkeypatch) as check:
        on_run = extractor.to(RUN)
        real, fake = dataset.x_train[:32].to(RUN), dataset.x_train[32:].to(RUN)
        quality.frechet_distance(on_run, real, fake, batch_size=16)
    return check


def test_the_fid_whose_sums_stayed_on_the_host_is_found(monkeypatch, extractor):
    """The defect put back: torchmetrics' FID not moved to the extractor's device (its running
    sums stay where they were made, on the host) while the features come from the run's."""
    dataset, net = extractor
    assert _fid_on_the_run_device(monkeypatch, dataset, net).mixed == []
    from torchmetrics.image.fid import FrechetInceptionDistance

    monkeypatch.setattr(FrechetInceptionDistance, "to", lambda self, *a, **k: self)
    found = _fid_on_the_run_device(monkeypatch, dataset, net).mixed
    assert found and all("quality.py" in m.where for m in found), found
    assert any("made by zeros" in m.operands for m in found), found


def _runs_on_one_device(monkeypatch, tmp_path, name: str, engine: str) -> None:
    keys = {**CASES[name], "engine": engine, "checkpoint_every": 0}
    cfg = load_config(None, as_args(keys))
    with second_device(monkeypatch) as check:
        run_experiment(cfg, tmp_path, progress=False)
    assert check.on_run > 100, "the run's tensors were not on the second device"
    assert check.mixed == [], "\n".join(map(str, check.mixed))


@pytest.mark.parametrize("name", DEFAULT)
def test_one_of_each_kind_keeps_to_the_run_device(monkeypatch, tmp_path, name):
    _runs_on_one_device(monkeypatch, tmp_path, name, "vmap")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sequential", "vmap"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_whole_registry_keeps_to_the_run_device(monkeypatch, tmp_path, name, engine):
    _runs_on_one_device(monkeypatch, tmp_path, name, engine)


def test_the_privacy_studys_attacks_and_accountants_keep_to_the_run_device(monkeypatch, tmp_path):
    """``fedretain privacy``: four training runs, σ matching through the accountant, the
    gradient-inversion attacks and their PSNR and SSIM."""
    from fedretain.cli import main

    pytest.importorskip("opacus")
    args = ["privacy", "--config", str(ROOT / "experiments/privacy_digits.toml")]
    args += ["--out", str(tmp_path), "--targets", "1", "--iterations", "5", "--sigmas", "1"]
    with second_device(monkeypatch) as check:
        assert main([*args, "rounds=1", "threads=1", "checkpoint_every=0"]) == 0
    assert check.on_run > 1000
    assert check.mixed == [], "\n".join(map(str, check.mixed))
