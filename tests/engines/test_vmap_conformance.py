"""Registry-wide conformance: engine=vmap gives the sequential engine's numbers.

Ragged clients (Dirichlet sizes), several chunks, padded steps and client state across
rounds: in float64 (precision=fp64) every vectorisable algorithm matches to float64 rounding,
which proves the two engines compute the same thing; in float32 to a bound set from the
measured float32-vs-float64 error (see FP32_BOUND).
"""

import numpy as np
import pytest
import torch

from fedretain.algorithms import ALGORITHMS, continual_only
from fedretain.experiments.run import build_rounds
from fedretain.recipe.config import make_config

BASE = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [16],
    "clients": 9,
    "clients_per_round": 5,
    "batch_size": 16,
    "lr": 0.1,
    "partition": "dirichlet",
    "partition.alpha": 0.5,
    "local_epochs": 2,
}
VMAP = {"engine": "vmap", "engine.chunk": 2}  # 5 clients in chunks of 2, 2 and 1

# FedReg's projection (w_s = <Δ, g_s>/|g_s|² with g_s → 0 near the received model) amplifies
# rounding differences ~1.3x per local step, so its comparison takes fewer, larger steps (still
# ragged clients, chunks and padded steps): the 1e-5 bound then holds with a wide margin.
# GradMA's worker side solves a quadratic program at every local step, most of its time here:
# the same fewer, larger steps (ragged and padded still) take a quarter of it.
LARGER_STEPS = {"batch_size": 64, "local_epochs": 1}
OVERRIDES = {
    "fedreg": LARGER_STEPS,
    "gradma": LARGER_STEPS,
    "gradma-w": LARGER_STEPS,
    "moon": {"model.projection": 8},
}


def _run(overrides, rounds=3):
    if overrides.get("engine") == "vmap":
        overrides = {**VMAP, **overrides}
    keys = {k: v for k, v in {**BASE, **overrides}.items() if v is not None}  # None: drop a key
    fed, engine = build_rounds(make_config(keys))
    state = fed.algorithm.server_init(*fed.task.init())
    for rnd in range(rounds):
        state, _ = engine.run_round(state, rnd, 0.1, clients=fed.participation.clients(rnd))
    return state, engine


def _max_diff(a, b):
    worst = 0.0
    for key in a:
        if isinstance(a[key], dict):
            worst = max(worst, _max_diff(a[key], b[key]))
        elif a[key].dtype.is_floating_point:
            worst = max(worst, float((a[key] - b[key]).abs().max()) if a[key].numel() else 0.0)
        else:
            assert torch.equal(a[key], b[key]), key
    return worst


# The engines' float32 states after 3 rounds differ from each other and from the same run in
# float64 by rounding alone. Worst over every algorithm below, seen with AVX-512 and with AVX2
# kernels (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2), OMP_NUM_THREADS=1 and 2:
# vmap vs sequential 9.5e-7, either engine vs float64 1.1e-6 (both MIFA, whose server average
# of stored updates sums the most terms); the other algorithms 3e-8..3e-7. A wrong client,
# step or state is off by 1e-3 or more. The bound keeps ~10x over the worst seen.
FP32_BOUND = 1e-5
# in float64 the engines differ by at most 1.3e-15 (the float32 differences scaled by the
# ratio of the two epsilons), client states 2.8e-16; 1e-12 keeps 1000x over that
FP64_BOUND = 1e-12


def _assert_engines_agree(name: str, precision: str, bound: float) -> None:
    extra = {"algorithm": name, "precision": precision, **OVERRIDES.get(name, {})}
    seq_state, seq = _run({**extra, "engine": "sequential"})
    vm_state, vm = _run({**extra, "engine": "vmap"})
    assert vm.engine.name == "vmap"
    assert _max_diff(seq_state, vm_state) < bound
    assert set(seq.store) == set(vm.store)
    for cid in seq.store:
        assert _max_diff(seq.store[cid], vm.store[cid]) < bound
    assert seq.ledger.state() == vm.ledger.state()


# continual-only methods (fedcil) refuse this non-continual setting with a one-line ConfigError;
# their conformance (resume, ledger) runs in a class-incremental scenario in tests/continual/
@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n not in continual_only()])
def test_vmap_equals_sequential_in_float64(name):
    _assert_engines_agree(name, "fp64", FP64_BOUND)


@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n not in continual_only()])
def test_vmap_equals_sequential(name):
    _assert_engines_agree(name, "fp32", FP32_BOUND)


def test_bf16_runs_are_repeatable_and_close_across_engines():
    """precision=bf16: the same numbers run to run on each engine; across engines the models
    differ by bfloat16 rounding (the vectorised engine's batched matmuls round differently)."""
    bf16 = {"precision": "bf16", "algorithm": "fedprox"}
    seq, _ = _run({**bf16, "engine": "sequential"})
    assert _max_diff(seq, _run({**bf16, "engine": "sequential"})[0]) == 0.0
    vm, _ = _run({**bf16, "engine": "vmap"})
    assert _max_diff(vm, _run({**bf16, "engine": "vmap"})[0]) == 0.0
    fp32, _ = _run({"algorithm": "fedprox", "engine": "sequential"})
    # bfloat16 rounding (8 bits of mantissa): 1.3e-3 seen against fp32, 40x below the bound
    assert 0 < _max_diff(seq, fp32) < 0.05 and _max_diff(seq, vm) < 0.05


def test_batchnorm_model_falls_back_with_a_notice(capsys):
    overrides = {"model": "resnet20", "model.norm": "batch", "clients_per_round": 2}
    base = {k: v for k, v in BASE.items() if k != "model.hidden"}
    fed, engine = build_rounds(make_config({**base, **overrides, "engine": "vmap"}))
    assert "BatchNorm" in capsys.readouterr().err
    _, metrics = engine.run_round(fed.algorithm.server_init(*fed.task.init()), 0, 0.1, 2)
    assert metrics["participants"] == 2 and np.isfinite(metrics["train_loss"])


def test_vmap_runs_end_to_end_from_the_cli(tmp_path):
    from fedretain.cli import main
    from fedretain.files import read_jsonl

    args = [f"{k}={v}" for k, v in BASE.items() if k != "model.hidden"] + ["model.hidden=[16]"]
    vmap = ["engine=vmap", "engine.chunk=2"]
    assert main(["run", *args, *vmap, "rounds=2", "--out", str(tmp_path / "v")]) == 0
    assert main(["run", *args, "rounds=2", "--out", str(tmp_path / "s")]) == 0
    v = read_jsonl(tmp_path / "v" / "metrics.jsonl")
    s = read_jsonl(tmp_path / "s" / "metrics.jsonl")
    # accuracies are counts over 360 test samples: abs=2e-3 (< 1/360) asks for the same count
    assert [r["test_accuracy"] for r in v] == pytest.approx(
        [r["test_accuracy"] for r in s], abs=2e-3
    )


def test_compiled_vmap_equals_sequential_with_client_state():
    """``engine.compile=true`` (TorchInductor) changes speed, not results (FedAvg below)."""
    seq_state, _ = _run({"algorithm": "scaffold", "engine": "sequential"}, rounds=2)
    compiled = {"algorithm": "scaffold", "engine": "vmap", "engine.compile": True}
    vm_state, _ = _run(compiled, rounds=2)
    assert _max_diff(seq_state, vm_state) < FP32_BOUND  # 3.0e-8 seen


def test_compiled_vmap_reuses_its_graphs_across_chunks_and_rounds():
    """Ragged clients, chunks of other sizes and rounds of other step counts must not
    recompile: past torch's limit (8 graphs) the step would silently run eagerly; the
    compiled FedAvg gives the sequential engine's numbers."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    overrides = {"algorithm": "fedavg", "engine": "vmap", "engine.compile": True}
    fed, engine = build_rounds(make_config({**BASE, **VMAP, **overrides, "clients": 20}))
    state = fed.algorithm.server_init(*fed.task.init())
    graphs = []
    for rnd in range(5):
        state, _ = engine.run_round(state, rnd, 0.1, clients=fed.participation.clients(rnd))
        graphs.append(counters["stats"]["unique_graphs"])
    # the plain and the masked step, each for a full and a last, smaller chunk at most
    assert graphs[-1] <= 4 and graphs[1:] == [graphs[1]] * 4, graphs
    seq_state, _ = _run({"algorithm": "fedavg", "engine": "sequential", "clients": 20}, rounds=5)
    assert _max_diff(seq_state, state) < FP32_BOUND


def test_compile_mode_reaches_torch_compile_and_is_checked(monkeypatch):
    """``engine.compile_mode`` is torch.compile's mode (here recorded, the step left eager:
    the numbers are the eager engine's); other than default it compiles; a mode torch does not
    know is a config error naming the choices."""
    from fedretain.errors import ConfigError

    modes = []

    def record(fn, dynamic=None, mode=None):
        modes.append(mode)
        return fn

    eager, _ = _run({"algorithm": "scaffold", "engine": "vmap"}, rounds=2)
    monkeypatch.setattr(torch, "compile", record)
    graphs, _ = _run(
        {"algorithm": "scaffold", "engine": "vmap", "engine.compile_mode": "reduce-overhead"},
        rounds=2,
    )
    assert modes == ["reduce-overhead"] * 2  # the plain and the masked step, built once
    assert _max_diff(eager, graphs) == 0.0
    with pytest.raises(ConfigError, match=r"compile_mode must be one of default, .*'fast'"):
        _run({"engine": "auto", "engine.compile_mode": "fast"}, rounds=1)


@pytest.mark.cuda
def test_cuda_graphs_match_the_cpu_reference(real_gpu):
    """``engine.compile_mode=reduce-overhead`` on CUDA (each step replayed as a CUDA graph,
    chunks of 2, 2 and 1 replaying over one memory pool) gives the CPU's numbers."""
    cpu_state, _ = _run({"algorithm": "scaffold", "engine": "sequential"}, rounds=2)
    overrides = {"engine.compile_mode": "reduce-overhead", "device": real_gpu}
    gpu_state, _ = _run({"algorithm": "scaffold", "engine": "vmap", **overrides}, rounds=2)
    to_cpu = {
        k: {n: v.cpu() for n, v in t.items()} if isinstance(t, dict) else t.cpu()
        for k, t in gpu_state.items()
    }
    assert _max_diff(cpu_state, to_cpu) < 1e-4


@pytest.mark.cuda
@pytest.mark.parametrize("engine", ["sequential", "vmap"])
def test_cuda_engines_match_the_cpu_reference(engine, gpu):
    """``device=cuda`` runs unchanged: the GPU's numbers equal the CPU's to float tolerance."""
    cpu_state, _ = _run({"algorithm": "scaffold", "engine": "sequential"}, rounds=2)
    gpu_state, run = _run({"algorithm": "scaffold", "engine": engine, "device": gpu}, rounds=2)
    assert run.device.type == gpu and gpu_state["x"][next(iter(gpu_state["x"]))].device.type == gpu
    to_cpu = {
        k: {n: v.cpu() for n, v in t.items()} if isinstance(t, dict) else t.cpu()
        for k, t in gpu_state.items()
    }
    assert _max_diff(cpu_state, to_cpu) < 1e-4


COMPOSABLE = [n for n in ALGORITHMS if ALGORITHMS.takes(n, "server_opt")]


@pytest.mark.parametrize("precision, bound", [("fp64", FP64_BOUND), ("fp32", FP32_BOUND)])
@pytest.mark.parametrize("name", COMPOSABLE)
def test_vmap_equals_sequential_with_a_server_optimizer_and_a_robust_aggregator(
    name, precision, bound
):
    """Every algorithm whose server step is a model update, composed with FedAdam and the
    coordinate-wise median (float32: 3.1e-7 seen, AVX-512 and AVX2 kernels, 1 and 2 threads)."""
    extra = {**OVERRIDES.get(name, {}), "server_opt": "adam", "aggregator": "median"}
    extra["precision"] = precision
    seq_state, seq = _run({"algorithm": name, "engine": "sequential", **extra})
    vm_state, vm = _run({"algorithm": name, "engine": "vmap", **extra})
    assert "server_opt" in seq_state and vm.engine.name == "vmap"
    assert _max_diff(seq_state, vm_state) < bound
    assert seq.ledger.state() == vm.ledger.state()
