"""Engines: how a round's clients are trained. The round itself is :mod:`.round`.

A new engine goes in ``fedretain/engines/<name>.py`` as a class with ``train(work)``, which
turns a round's :class:`~fedretain.engines.round.Work` into
:class:`~fedretain.engines.round.Trained` results (see
:class:`~fedretain.engines.round.Engine`), and a factory
``<name>(fed, **options)`` taking the federation (:mod:`fedretain.recipe`) and its options
(``engine.<option>=value``), plus one line below.
"""

from __future__ import annotations

from typing import Any

from fedretain.engines.auto import auto_engine
from fedretain.engines.sequential import DebugEngine, SequentialEngine
from fedretain.engines.vmap import vmap_engine
from fedretain.registry import Registry


def sequential(fed: Any, workers: int = 1) -> SequentialEngine:
    """``engine=sequential``: the reference engine, one client after another.

    :param workers: clients trained at a time on that many threads, one torch thread each
        (1: one at a time; models with dropout need 1)
    """
    return SequentialEngine(workers)


ENGINES = Registry("engine")
ENGINES.add(
    "auto",
    auto_engine,
    "vmap where the algorithm, model and threads make it faster (compiled for long runs), "
    "else sequential (several clients at a time with several threads)",
)
ENGINES.add(
    "sequential",
    sequential,
    "one client after another: the reference (workers: clients trained at a time on threads)",
)


def debug(fed: Any) -> DebugEngine:
    """``engine=debug``: the sequential engine with every error located (round, client,
    stage) and a stop at the first NaN or Inf a client's stage gives."""
    return DebugEngine()


ENGINES.add(
    "debug",
    debug,
    "sequential, each error noted with its round, client and stage (local_step 3 of 40), "
    "stopped at the first NaN/Inf a stage gives, naming its key",
)
ENGINES.add(
    "vmap", vmap_engine, "clients trained together under torch.func.vmap (chunk, compile, devices)"
)
