"""Flower integration: every fedretain algorithm on Flower's Message API, both halves.

Flower's strategies are server-only; here one server half and one client half serve every
registered :class:`~fedretain.core.algorithm.Algorithm`, split by role:

- :mod:`.protocol`: the wire protocol on one page (record names, message types, node-config
  and ``context.state`` keys, the round's ``ConfigRecord``); :mod:`.records`: trees to
  ``ArrayRecord``\\ s and back (one record per payload key);
- :mod:`.client`: the ClientApp (local training by partition id, state in ``context.state``);
- :mod:`.engine`: :class:`FlowerEngine`, ``engine=flower`` of a run (an
  :class:`~fedretain.engines.round.Engine`: Flower messages instead of local training);
  :mod:`.store`: :class:`RemoteStore`, the client states that live on the clients;
- :mod:`.strategy`: :class:`AlgorithmStrategy`, the same rounds as a Flower ``Strategy``;
- :mod:`.federation`: the Grid, partition discovery, message exchange with a deadline;
- :mod:`.options`: the settings ``engine=flower`` refuses (checked with the configuration);
- launch tooling: :mod:`.simulation` (Flower's simulation engine, Ray, in the background, and
  :func:`time_simulation` for benchmarks), :mod:`.deployment` (a SuperLink and SuperNodes on
  127.0.0.1 and the Flower app folder), :mod:`.node` (SuperNodes whose ClientApp process
  stays warm across messages), :mod:`.processes` (stop and measure process trees);
- entrances: :mod:`.app` (the ServerApp and ClientApp ``flwr run`` starts) and
  ``python -m fedretain.flower`` (:mod:`.__main__`).

Importing this package does not import Flower (it registers ``engine=flower``); its names
load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from fedretain.engines import ENGINES
from fedretain.flower.options import check_options

_EXPORTS = {
    "AlgorithmStrategy": "strategy",
    "FlowerEngine": "engine",
    "RemoteStore": "store",
    "SuperNodes": "federation",
    "connected": "federation",
    "FlowerSimulation": "simulation",
    "time_simulation": "simulation",
    "LocalFederation": "deployment",
    "make_client_app": "client",
}


def flower_factory(
    fed: Any, client_cpus: float = 1.0, client_gpus: float = 0.0, reply_timeout: float = 300.0
) -> Any:
    """``engine=flower``: a FlowerEngine for the federation ``fed`` (Flower loads only now).

    :param client_cpus: CPUs Flower's simulation gives each client
    :param client_gpus: GPUs (a share, e.g. 0.5, or a whole number) Flower's simulation gives
        each client, which then trains on CUDA; 0: clients train on the CPU
    :param reply_timeout: seconds a round waits for the clients' replies
    """
    from fedretain.flower.engine import flower

    return flower(
        fed, client_cpus=client_cpus, reply_timeout=reply_timeout, client_gpus=client_gpus
    )


ENGINES.add(
    "flower",
    flower_factory,
    "clients as Flower ClientApps: own simulation (Ray) or SuperNodes "
    "(client_cpus, client_gpus, reply_timeout)",
    check=check_options,
)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"fedretain.flower.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'fedretain.flower' has no attribute {name!r}")


__all__ = ["check_options", "flower_factory", *_EXPORTS]
