"""The class-incremental methods on the vectorised engine: the round's clients (classifiers,
generators, discriminators) train together under vmap and give the sequential engine's numbers.

Their random numbers (replayed and fake labels, generator noise) are drawn before the round's
steps (``Algorithm.local_draws``), the same on both engines; clients whose mini-batch plans
differ in shape train in separate vmapped groups (a generator's BatchNorm must not see padding).
In float64 the engines agree to float64 rounding; in float32 the training losses agree to 1e-5,
while the parameters can differ more: the biases in front of the generator's BatchNorm get a
gradient that is zero up to rounding, which Adam scales up to full steps (seen: 4.7e-4 relative
between the engines on FedProx+ACGAN, 2.5e-3 between float32 and float64 on one engine).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from fedretain.engines.vmap import VmapEngine
from fedretain.experiments.run import build_rounds
from fedretain.recipe.config import make_config

CONTINUAL = {
    "dataset": "digits",
    "scenario": "class_incremental",
    "scenario.tasks": 2,
    "scenario.classes_per_task": 2,
    "scenario.rounds_per_task": 2,
    "rounds": 4,  # two tasks: the second one replays the first
    "clients": 3,
    "clients_per_round": 3,
    "batch_size": 8,
    "local_steps": 2,
    "threads": 1,
    "optimizer": "adam",
    "lr": 1e-3,
}
ACGAN = {"model": "acgan", "model.width": 4, "model.z_dim": 16}
MLP = {"model": "mlp", "model.hidden": [16]}
METHODS = {
    "fedavg": {**ACGAN, "algorithm": "fedavg"},
    "fedavg+acgan": {**ACGAN, "algorithm": "fedavg", "replay": "acgan"},
    "fedprox+acgan": {**ACGAN, "algorithm": "fedprox", "replay": "acgan"},
    "fedcil": {
        **ACGAN,
        "algorithm": "fedcil",
        "algo.consolidation_steps": 2,
        "algo.consolidation_batch": 4,
    },
    "fedlwf2t": {**ACGAN, "algorithm": "fedlwf2t"},
    "fedavg+dgr": {**MLP, "replay": "dgr", "replay.width": 4, "replay.z_dim": 16},
}
ROUNDS = CONTINUAL["rounds"]


def run(keys: dict, rounds: int = ROUNDS) -> tuple[dict, object, list[float]]:
    fed, rounds_ = build_rounds(make_config(keys))
    state = fed.algorithm.server_init(*fed.task.init())
    losses = []
    for rnd in range(rounds):
        clients = fed.participation.clients(rnd)
        state, metrics = rounds_.run_round(state, rnd, keys["lr"], clients=clients)
        losses.append(float(metrics["train_loss"]))
    return state, rounds_, losses


def max_diff(a: dict, b: dict) -> float:
    worst = 0.0
    for key in a:
        if isinstance(a[key], dict):
            worst = max(worst, max_diff(a[key], b[key]))
        elif a[key].dtype.is_floating_point:
            if a[key].numel():
                worst = max(worst, float((a[key] - b[key].to(a[key].device)).abs().max()))
        else:
            assert torch.equal(a[key].cpu(), b[key].cpu()), key
    return worst


def both_engines(name: str, **extra) -> tuple[tuple, tuple]:
    keys = {**CONTINUAL, **METHODS[name], **extra}
    seq = run({**keys, "engine": "sequential"})
    vm = run({**keys, "engine": "vmap", "engine.chunk": 2})  # chunks of 2 and 1
    assert isinstance(vm[1].engine, VmapEngine), "fell back to the sequential engine"
    return seq, vm


@pytest.mark.parametrize("name", list(METHODS))
def test_continual_methods_train_together_with_the_sequential_numbers(name):
    (seq_state, seq, seq_losses), (vm_state, vm, vm_losses) = both_engines(name, precision="fp64")
    # 6e-12 seen (FedProx+ACGAN; AVX-512 and AVX2 kernels, 1 and 2 threads)
    assert max_diff(seq_state, vm_state) < 1e-10
    assert set(seq.store) == set(vm.store)
    for cid in seq.store:
        assert max_diff(seq.store[cid], vm.store[cid]) < 1e-10
    assert vm_losses == pytest.approx(seq_losses, rel=1e-12)
    assert seq.ledger.state() == vm.ledger.state()


@pytest.mark.parametrize("name", ["fedavg+acgan", "fedcil"])
def test_float32_losses_agree_across_engines(name):
    (_, _, seq_losses), (_, _, vm_losses) = both_engines(name)
    # 5.6e-8 seen (AVX-512 and AVX2 kernels, 1 and 2 threads): float32 rounding alone
    assert vm_losses == pytest.approx(seq_losses, rel=1e-5)


def test_clients_with_other_plan_shapes_train_in_groups(monkeypatch):
    """Local epochs over clients of other sizes: plans of other step counts and last-batch
    widths. Each group of equal plans is one vmapped call; the results come back in the
    round's order, equal to the sequential engine's."""
    groups = []
    compute = VmapEngine._compute_group

    def spy(self, work, chunk):
        groups.append(chunk.cids)
        return compute(self, work, chunk)

    monkeypatch.setattr(VmapEngine, "_compute_group", spy)
    ragged = {"local_steps": 0, "local_epochs": 1, "batch_size": 64, "precision": "fp64"}
    (seq_state, seq, _), (vm_state, vm, _) = both_engines("fedavg+acgan", **ragged)
    assert len(groups) > 2 * ROUNDS  # some chunk of 2 was split into groups
    assert max_diff(seq_state, vm_state) < 1e-10
    for cid in seq.store:
        assert max_diff(seq.store[cid], vm.store[cid]) < 1e-10


def test_the_steps_see_the_same_draws_on_both_engines():
    """What the replay's step receives as ``batch["draws"]``: the same labels and noise, cut to
    the step's width, whichever engine runs it."""
    keys = {**CONTINUAL, **METHODS["fedcil"], "algo.consolidation_steps": 0}
    seen: dict[str, list] = {"sequential": [], "vmap": []}
    for engine in seen:
        fed, rounds_ = build_rounds(make_config({**keys, "engine": engine, "clients_per_round": 1}))
        algo = rounds_.algorithm
        step = algo.local_step

        def spy(state, batch, ctx, engine=engine, step=step):
            seen[engine].append({k: unwrapped(v) for k, v in batch["draws"].items()})
            return step(state, batch, ctx)

        rounds_.algorithm = replace(algo, local_step=spy)
        state = algo.server_init(*fed.task.init())
        for rnd in range(3):
            state, _ = rounds_.run_round(state, rnd, 1e-3, clients=[rnd % 3])
    assert len(seen["sequential"]) == 3 * CONTINUAL["local_steps"]
    for a, b in zip(seen["sequential"], seen["vmap"], strict=True):
        assert set(a) == {"labels0", "z0", "labels1", "z1", "z2", "labels3", "z3", "z4"}
        for key in a:
            assert a[key].shape[0] == CONTINUAL["batch_size"]
            assert torch.equal(a[key], b[key])


def unwrapped(v: torch.Tensor) -> torch.Tensor:
    """``v`` as a plain tensor: under vmap (one client) its only row."""
    functorch = torch._C._functorch
    if functorch.is_batchedtensor(v):
        return functorch.get_unwrapped(v).squeeze(0).clone()
    return v.clone()


@pytest.mark.cuda
@pytest.mark.parametrize("name", ["fedcil", "fedavg+dgr", "fedlwf2t"])
def test_cuda_vectorised_continual_runs_match_the_cpu_reference(name, gpu):
    """On a GPU the vectorised continual round gives the CPU's sequential numbers (float64:
    the computation, not float32 rounding, is compared)."""
    keys = {**CONTINUAL, **METHODS[name], "precision": "fp64"}
    cpu_state, _, cpu_losses = run({**keys, "engine": "sequential"})
    gpu_state, gpu_run, gpu_losses = run({**keys, "engine": "vmap", "device": gpu})
    assert isinstance(gpu_run.engine, VmapEngine) and gpu_run.device.type == gpu
    assert max_diff(cpu_state, gpu_state) < 1e-9
    assert gpu_losses == pytest.approx(cpu_losses, rel=1e-9)
