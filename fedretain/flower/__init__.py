"""Flower integration: every fedretain algorithm on Flower's Message API, both halves.

Flower's strategies are server-only; here one server half and one client half serve every
registered :class:`~fedretain.core.algorithm.Algorithm`:

- :mod:`.records`: trees to ``ArrayRecord``\\ s and back (one record per payload key);
- :mod:`.client`: the ClientApp (local training by partition id, state in ``context.state``);
- :mod:`.strategy`: :class:`FlowerEngine` (``engine=flower`` of the runner) and
  :class:`AlgorithmStrategy` (the same rounds as a Flower ``Strategy``);
- :mod:`.federation`: the Grid, partition discovery, message exchange with a deadline;
- :mod:`.simulation`: Flower's simulation engine (Ray) in the background, and
  :func:`time_simulation` for benchmarks;
- :mod:`.app`: the ServerApp and ClientApp that ``flwr run`` starts on real SuperNodes;
- :mod:`.deployment`: a SuperLink and SuperNodes on 127.0.0.1 and the Flower app folder
  (``python -m fedretain.flower`` is the command line); :mod:`.processes` stops and measures
  the process trees Flower and Ray start.

Importing this package does not import Flower; its names load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fedretain.flower.strategy import FlowerEngine

_EXPORTS = {
    "AlgorithmStrategy": "strategy",
    "FlowerEngine": "strategy",
    "Federation": "federation",
    "connected": "federation",
    "FlowerSimulation": "simulation",
    "time_simulation": "simulation",
    "LocalFederation": "deployment",
    "make_client_app": "client",
}


def flower_engine(*args: Any, **kwargs: Any) -> FlowerEngine:
    """``engine=flower`` for the runner: a :class:`FlowerEngine` (Flower loads only now)."""
    from fedretain.flower.strategy import FlowerEngine

    return FlowerEngine(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"fedretain.flower.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fedretain.flower' has no attribute {name!r}")


__all__ = ["flower_engine", *_EXPORTS]
