"""Deterministic runs on CUDA: the ``deterministic`` key and where it takes effect.

A CPU run leaves torch's deterministic modes as they are (its numbers repeat by construction);
a CUDA run with ``deterministic=true`` (the default) turns them on before its first CUDA
operation, and they end with the run (:func:`~fedretain.recipe.federation.modes_restored`).
Without a GPU the CUDA path runs through :func:`use_deterministic` with a
``torch.device("cuda")`` (made without a GPU) and through :func:`build_federation` with
``torch.cuda.is_available`` patched, stopped before anything touches the device; the
end-to-end check, two identical runs, needs a GPU.
"""

from __future__ import annotations

import os

import pytest
import torch

from fedretain.errors import ConfigError
from fedretain.experiments.checkpoint import RESUMABLE, fingerprint
from fedretain.experiments.run import run_experiment
from fedretain.files import read_jsonl
from fedretain.recipe import federation
from fedretain.recipe.config import Config, describe_settings, make_config, resolved
from fedretain.recipe.federation import CUBLAS_WORKSPACE, build_federation, use_deterministic

SMALL = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [16],
    "clients": 6,
    "clients_per_round": 3,
    "batch_size": 16,
    "lr": 0.1,
    "rounds": 2,
    "checkpoint_every": 0,
}
ENV = "CUBLAS_WORKSPACE_CONFIG"


def _modes() -> tuple[bool, bool, bool, bool, bool, bool, str | None]:
    return (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.backends.cudnn.allow_tf32,
        torch.backends.cuda.matmul.allow_tf32,
        os.environ.get(ENV),
    )


@pytest.fixture
def torch_modes():
    """Torch's deterministic modes and ``CUBLAS_WORKSPACE_CONFIG`` as before the test, the
    variable unset during it."""
    algorithms, warn_only, cudnn_deterministic, cudnn_benchmark, conv_tf32, mm_tf32, env = _modes()
    os.environ.pop(ENV, None)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(algorithms, warn_only=warn_only)
        torch.backends.cudnn.deterministic = cudnn_deterministic
        torch.backends.cudnn.benchmark = cudnn_benchmark
        torch.backends.cudnn.allow_tf32 = conv_tf32
        torch.backends.cuda.matmul.allow_tf32 = mm_tf32
        os.environ.pop(ENV, None)
        if env is not None:
            os.environ[ENV] = env


def test_deterministic_is_a_bool_key_on_by_default_and_resolved():
    assert Config().deterministic is True
    assert resolved(make_config({}))["deterministic"] is True
    assert resolved(make_config({"deterministic": False}))["deterministic"] is False
    assert next(s for s in describe_settings() if s.key == "deterministic").default == "true"
    for bad in ("yes", 1):
        with pytest.raises(ConfigError, match="deterministic: expected true or false"):
            make_config({"deterministic": bad})


def test_resuming_ignores_deterministic():
    """Old checkpoints have no such key, and changing it changes no result: it is resumable."""
    assert "deterministic" in RESUMABLE
    assert fingerprint(make_config({"deterministic": False})) == fingerprint(Config())


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_cpu_run_leaves_torch_modes_alone(torch_modes, deterministic):
    before = _modes()
    build_federation(make_config({**SMALL, "deterministic": deterministic}))
    assert _modes() == before


def test_a_cpu_device_changes_nothing_whatever_the_modes_are(torch_modes):
    torch.backends.cudnn.benchmark = True
    torch.use_deterministic_algorithms(True, warn_only=True)
    before = _modes()
    use_deterministic(torch.device("cpu"), True)
    assert _modes() == before


@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_a_cuda_device_turns_the_modes_on(torch_modes, name):
    torch.backends.cudnn.benchmark = True
    torch.use_deterministic_algorithms(False)
    torch.backends.cuda.matmul.allow_tf32 = True
    use_deterministic(torch.device(name), True)
    assert _modes() == (True, False, True, False, False, False, CUBLAS_WORKSPACE)


def test_a_cublas_setting_already_made_is_kept(torch_modes):
    os.environ[ENV] = ":16:8"
    use_deterministic(torch.device("cuda"))
    assert os.environ[ENV] == ":16:8" and torch.are_deterministic_algorithms_enabled()


def test_deterministic_false_turns_an_earlier_runs_modes_off_on_cuda(torch_modes):
    use_deterministic(torch.device("cuda"), True)  # an earlier run of the same process
    use_deterministic(torch.device("cuda"), False)
    # torch's fast defaults: nondeterministic kernels, cuDNN benchmarking, TF32 convolutions
    assert _modes() == (False, False, False, True, True, False, CUBLAS_WORKSPACE)


class _Stop(Exception):
    pass


@pytest.mark.parametrize("deterministic", [True, False])
def test_a_cuda_federation_sets_the_modes_before_using_the_device(
    torch_modes, monkeypatch, deterministic
):
    """Every entry (run, reproduce, the Flower ClientApp, the privacy study) builds its
    federation with :func:`build_federation`: the modes are set right after the device is
    resolved, before the data are loaded and the model moves to the device."""
    before, seen = _modes(), []

    def load_dataset(*args, **kwargs):
        seen.append(_modes())
        raise _Stop

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(federation, "load_dataset", load_dataset)
    with pytest.raises(_Stop):
        build_federation(make_config({**SMALL, "device": "cuda", "deterministic": deterministic}))
    if deterministic:
        assert seen == [(True, False, True, False, False, False, CUBLAS_WORKSPACE)]
    else:
        assert seen == [(False, False, False, True, True, False, before[-1])]


def test_a_cuda_runs_modes_end_with_it_and_a_later_cpu_run_sees_the_processs_own(
    torch_modes, monkeypatch, tmp_path
):
    """A deterministic CUDA run (stopped once its modes are set, as the GPU is absent) then a
    CPU run in the same process: the modes are restored after the first, so the second runs
    under the process's own modes, and they are still the same after it."""
    torch.backends.cudnn.benchmark = True  # the process's own choices
    torch.backends.cuda.matmul.allow_tf32 = True
    before, seen = _modes(), []

    def load_dataset(*args, **kwargs):
        seen.append(_modes())
        raise _Stop

    with monkeypatch.context() as m:
        m.setattr(torch.cuda, "is_available", lambda: True)
        m.setattr(federation, "load_dataset", load_dataset)
        with pytest.raises(_Stop):
            run_experiment(make_config({**SMALL, "device": "cuda"}), tmp_path / "a", False)
    assert seen == [(True, False, True, False, False, False, CUBLAS_WORKSPACE)]
    assert _modes() == before  # restored, the cuBLAS variable unset again
    run_experiment(make_config(SMALL), tmp_path / "b", progress=False)
    assert _modes() == before
    assert read_jsonl(tmp_path / "b" / "metrics.jsonl")[-1]["round"] == SMALL["rounds"]


def _metrics(path):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in read_jsonl(path)]


@pytest.mark.cuda
@pytest.mark.parametrize("engine", ["sequential", "vmap"])
@pytest.mark.parametrize(
    "model",
    [{"model": "mlp", "model.hidden": [16]}, {"model": "lenet-dlg", "model.activation": "relu"}],
)
def test_a_cuda_run_repeats_its_numbers(tmp_path, torch_modes, engine, model, gpu):
    """The same config run twice on the GPU: the same metrics.jsonl, bit for bit (cuBLAS in
    the MLP, cuDNN's convolutions in the LeNet)."""
    keys = {k: v for k, v in SMALL.items() if not k.startswith("model")}
    cfg = {**keys, **model, "device": gpu, "engine": engine, "algorithm": "scaffold"}
    for name in ("a", "b"):
        before = _modes()
        run_experiment(make_config(cfg), tmp_path / name, progress=False)
        assert _modes() == before  # the run's modes ended with it
    first, second = (_metrics(tmp_path / name / "metrics.jsonl") for name in ("a", "b"))
    assert first[-1]["round"] == SMALL["rounds"] and first == second
