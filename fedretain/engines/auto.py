"""``engine=auto``: the fastest engine that gives the reference's numbers for this run.

The rule (measured in ``benchmarks/RESULTS.md``, "engine=auto"):

1. The vectorised engine when the algorithm and the model can be vectorised
   (:func:`~fedretain.engines.vmap.vectorisable`); its numbers equal the sequential engine's up
   to floating-point summation order. Otherwise the sequential engine, the reference.
2. Compiled (``torch.compile``) when a C++ compiler is on ``PATH`` (TorchInductor needs one on
   CPU) and the run trains at least :data:`COMPILE_CLIENT_STEPS` client mini-batch steps
   (rounds x clients per round x local steps per client): on the engine benchmark compilation
   cost 12 s (MLP) to 39 s (CNN) of start-up and saved 0.4-0.8 ms per client step, so it pays
   off from about 30,000-50,000 client steps on 2 CPU cores. On CUDA the vectorised round is
   already short (0.1 s for 100 clients) while compiling costs 27-46 s, so the threshold is
   :data:`COMPILE_CLIENT_STEPS_CUDA`. The compiled step is built once per run and fed
   fixed strides and a fixed data length (the largest client's), so that one graph per step
   kind and chunk size serves every round (:mod:`fedretain.engines.vmap`).

The choice and its reason are printed once and written to ``summary.json`` (``engine``,
``engine_choice``).
"""

from __future__ import annotations

import math
import shutil
from typing import Any

import numpy as np

from fedretain.engines.sequential import SequentialEngine
from fedretain.engines.vmap import VmapEngine, vectorisable

COMPILE_CLIENT_STEPS = 50_000
COMPILE_CLIENT_STEPS_CUDA = 1_000_000


def client_steps(fed: Any) -> int:
    """The run's local mini-batch steps over all rounds and clients (median client size)."""
    cfg = fed.config
    if fed.algorithm.schedule == "full_batch":
        per_client = 1
    elif cfg.local_steps:
        per_client = cfg.local_steps
    else:
        median = float(np.median([len(p) for p in fed.clients.parts]))
        per_client = cfg.local_epochs * max(1, math.ceil(median / cfg.batch_size))
    return cfg.rounds * cfg.clients_per_round * per_client


def choose(fed: Any) -> tuple[str, bool, str]:
    """``(engine, compiled, why)`` for the federation ``fed``."""
    why = vectorisable(fed.algorithm, fed.task.model)
    if why:
        return "sequential", False, why
    steps = client_steps(fed)
    threshold = COMPILE_CLIENT_STEPS_CUDA if fed.device.type == "cuda" else COMPILE_CLIENT_STEPS
    compiler = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if fed.device.type == "cpu" and compiler is None:
        return "vmap", False, "vectorisable; no C++ compiler on PATH for torch.compile"
    if steps < threshold:
        return "vmap", False, f"vectorisable; {steps:,} client steps < {threshold:,} to compile"
    return "vmap", True, f"vectorisable; {steps:,} client steps >= {threshold:,}: compiled"


def auto_engine(fed: Any, chunk: int = 0) -> VmapEngine | SequentialEngine:
    """``engine=auto``: see the module's rule; ``chunk`` as ``engine=vmap``'s."""
    if chunk < 0:
        raise ValueError(f"chunk must be >= 0 (0: sized to memory), got {chunk}")
    name, compiled, why = choose(fed)
    engine: VmapEngine | SequentialEngine
    if name == "vmap":
        engine = VmapEngine(fed.task, chunk, compiled)
    else:
        engine = SequentialEngine()
    engine.choice = f"{name}{' (compiled)' if compiled else ''}: {why}"
    print(f"engine=auto: {engine.choice}")
    return engine
