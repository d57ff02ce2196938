"""``engine=auto``: the fastest engine that gives the reference's numbers for this run.

The rule (measured in ``benchmarks/RESULTS.md``, "engine=auto"); every engine it may pick gives
the sequential engine's numbers up to floating-point summation order:

1. The sequential engine, the reference, when the algorithm or the model cannot be vectorised
   (:func:`~fedretain.engines.vmap.vectorisable`).
2. On CUDA: the vectorised engine (15-18x the sequential engine on an H100), compiled
   (``torch.compile``) from :data:`COMPILE_CLIENT_STEPS_CUDA` client mini-batch steps (rounds x
   clients per round x local steps per client): the vectorised round is already short (0.1 s
   for 100 clients) while compiling costs 27-46 s.
3. On a CPU, the sequential engine for models with convolutions: under vmap a convolution
   becomes a grouped convolution, which was slower than or level with the per-client loop on
   two of the three CNN jobs measured (pfl-research's CIFAR-10 round: 1.27 s sequential
   against 1.55 s vectorised and 1.42 s compiled; FedReg's CNN on the main job's clients: 3.9 s
   against 4.0 s and 3.6 s plus 4 s of compilation).
4. On a CPU with one torch thread (``threads=1``, as ``fedretain reproduce --jobs N`` runs
   each process), the sequential engine: one client's model stays in cache, while a chunk of
   ten is stacked in memory (the main job's FedAvg round: 0.30 s sequential, 0.33 s
   vectorised). From :data:`COMPILE_CLIENT_STEPS_ONE_THREAD` client steps the compiled
   vectorised engine instead (0.20 s per round, after 4-12 s of compilation).
5. On a CPU with several threads, the vectorised engine (the main job: 1.2x the sequential
   engine; the engine benchmark's 100 clients: 1.4x) when the clients are even (the mean
   client's local steps at least :data:`MIN_BALANCE` of the largest client's: a chunk runs as
   many steps as its largest client, so on a Dirichlet α = 0.1 split of the main job it was
   1.6x slower than the loop), compiled from
   :data:`COMPILE_CLIENT_STEPS` client steps when a C++ compiler is on ``PATH``
   (TorchInductor needs one on CPU): compilation cost 8-12 s and saved 0.2-0.4 ms per client
   step. The compiled step is built once per run and fed fixed strides and a fixed data length
   (the largest client's), so that one graph per step kind and chunk size serves every round.

Wherever this picks the sequential engine on a CPU with several torch threads, it trains as
many clients at a time as there are threads, each on one thread (unless the model draws random
numbers in training; ``engine.workers=N`` sets N instead, wherever it keeps the sequential
engine): on two cores, 1.16-1.40x the one-at-a-time engine on the engine benchmark's CNN,
0.90-1.31x (median 1.07x) on pfl-research's CIFAR-10 round, 1.18-1.31x on the main job's MLP
round (``benchmarks/RESULTS.md``, "Clients on threads"). Each client's numbers are then those
of ``threads=1``: the two-thread engine's up to summation order.

On a CPU the vectorised engine takes :data:`CPU_CHUNK` clients per call unless ``engine.chunk``
says otherwise (chunks of 25 and 50 were no faster on the MLP and 1.5x slower on the CNN); on
CUDA the chunk is sized to an eighth of the GPU's memory
(:func:`~fedretain.engines.vmap.memory_budget`). That is a rule of memory, not yet of speed: on
pfl-research's CIFAR-10 round it gives one chunk of all 50 clients, the same call as
``engine.chunk=50`` (the H100's 0.07 s per round for the default engine against 0.05 s in
chunks of 50 was not a difference of chunk size: the same call, which the default then
compiled, rule 2's CUDA threshold coming after that measurement); whether fewer clients per
call are ever faster on a GPU is not measured yet (``scripts/gpu_check.sh`` times chunks of
10, 25 and 50).
The rule stays a fixed function of the config: a chunk picked by timing would make the
numbers, which can move with the chunk by float32 rounding, depend on the machine's load.
The choice and its reason are printed once and written to ``summary.json`` (``engine``,
``engine_choice``).

``engine.devices`` (``all`` or a list, see :mod:`fedretain.engines.vmap`) is checked whatever
the choice and goes to the vectorised engine where the rule picks it (the rule itself looks at
the run's device only); the sequential engine trains on the run's device, and the choice says
that the devices are unused.
"""

from __future__ import annotations

import shutil
from typing import Any

import numpy as np
import torch

from fedretain.engines.sequential import SequentialEngine, draws_random_numbers
from fedretain.engines.vmap import VmapEngine, check_compile_mode, parse_devices, vectorisable

COMPILE_CLIENT_STEPS = 50_000
COMPILE_CLIENT_STEPS_ONE_THREAD = 100_000
COMPILE_CLIENT_STEPS_CUDA = 1_000_000
CPU_CHUNK = 10
MIN_BALANCE = 0.9


def steps_per_client(fed: Any) -> np.ndarray:
    """Each client's local mini-batch steps per round."""
    cfg = fed.config
    sizes = np.array([len(p) for p in fed.clients.parts])
    if fed.algorithm.hints.schedule == "full_batch":
        return np.ones_like(sizes)
    if cfg.local_steps:
        return np.full_like(sizes, cfg.local_steps)
    return cfg.local_epochs * np.maximum(1, np.ceil(sizes / cfg.batch_size)).astype(int)


def client_steps(fed: Any) -> int:
    """The run's local mini-batch steps over all rounds and clients (median client size)."""
    per_client = int(np.median(steps_per_client(fed)))
    return fed.config.rounds * fed.config.clients_per_round * per_client


def balance(fed: Any) -> float:
    """Mean local steps per client over the largest client's: a chunk of clients under vmap
    takes as many steps as its largest client (the others' are masked)."""
    steps = steps_per_client(fed)
    return float(steps.mean() / steps.max())


def choose(fed: Any, threads: int | None = None, workers: int = 0) -> tuple[str, bool, int, str]:
    """``(engine, compiled, workers, why)`` for the federation ``fed`` with ``threads`` torch
    threads (default: torch's current number); ``workers`` is the sequential engine's: the
    given one (``engine.workers``), or 0 for the rule's."""
    threads = threads or torch.get_num_threads()
    device = fed.device.type
    workers = workers or (
        threads
        if device == "cpu" and threads > 1 and not draws_random_numbers(fed.task.model)
        else 1
    )
    why = vectorisable(fed.algorithm, fed.task.model)
    if why:
        return "sequential", False, workers, why
    steps = client_steps(fed)
    if device == "cuda":
        if steps < COMPILE_CLIENT_STEPS_CUDA:
            return "vmap", False, 1, f"CUDA; {steps:,} client steps < {COMPILE_CLIENT_STEPS_CUDA:,}"
        return "vmap", True, 1, f"CUDA; {steps:,} client steps >= {COMPILE_CLIENT_STEPS_CUDA:,}"
    if fed.task.convolutional:
        return (
            "sequential",
            False,
            workers,
            "convolutions on a CPU: vmap makes them grouped, no faster",
        )
    threshold = COMPILE_CLIENT_STEPS_ONE_THREAD if threads == 1 else COMPILE_CLIENT_STEPS
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if steps >= threshold and compiler:
        return "vmap", True, 1, f"{threads} CPU thread(s); {steps:,} client steps >= {threshold:,}"
    short = f"{steps:,} client steps < {threshold:,}" if compiler else "no C++ compiler"
    if threads == 1:
        return "sequential", False, workers, f"one CPU thread; {short} to compile"
    even = balance(fed)
    if even < MIN_BALANCE:
        why = f"uneven clients (mean steps / largest client's {even:.2f} < {MIN_BALANCE})"
        return "sequential", False, workers, f"{why}; {short} to compile"
    return "vmap", False, 1, f"{threads} CPU threads; {short} to compile"


def auto_engine(
    fed: Any,
    chunk: int = 0,
    workers: int = 0,
    devices: str | list[str] | None = None,
    compile_mode: str = "default",
) -> VmapEngine | SequentialEngine:
    """``engine=auto``: see the module's rule.

    :param chunk: clients per vectorised call where it picks the vectorised engine (0: 10 on a
        CPU, sized to memory on CUDA)
    :param workers: clients trained at a time on threads where it keeps the sequential engine
        (0: one per torch thread on a CPU, 1 with dropout or on CUDA)
    :param devices: where it picks the vectorised engine, the devices each round's clients are
        split over: all (every CUDA GPU) or a list such as ["cuda:0", "cuda:1"] (CUDA ones
        with device=cuda); none: the run's device alone
    :param compile_mode: torch.compile's mode where the rule compiles (reduce-overhead: CUDA
        graphs on CUDA)
    """
    check_compile_mode(compile_mode)
    if chunk < 0:
        raise ValueError(f"engine.chunk must be >= 0 (0: the rule's), got {chunk}")
    if workers < 0:
        raise ValueError(f"engine.workers must be >= 0 (0: the rule's), got {workers}")
    split = parse_devices(devices, fed.device)
    name, compiled, workers, why = choose(fed, workers=workers)
    engine: VmapEngine | SequentialEngine
    if name == "vmap":
        size = chunk or (CPU_CHUNK if fed.device.type == "cpu" else 0)
        engine = VmapEngine(fed.task, size, compiled, split, compile_mode, fed.config.gpu_share)
        mode = f", {compile_mode}" if compile_mode != "default" else ""
        name = f"vmap{f' (compiled{mode})' if compiled else ''}, chunk {size or 'sized to memory'}"
        name += f", on {', '.join(str(d) for d in split)}" if split else ""
    else:
        engine = SequentialEngine(workers)
        name += f", {workers} workers" if workers > 1 else ""
        name += ", engine.devices unused (the run's device)" if split else ""
    engine.choice = f"{name}: {why}"
    print(f"engine=auto: {engine.choice}")
    return engine
