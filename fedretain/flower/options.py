"""What ``engine=flower`` accepts: the settings it refuses (one line each, checked when a
configuration is validated) and a configuration turned into a Flower one.

Where the clients train (:func:`client_device`): with ``engine.client_gpus=0`` (the default)
on the CPU, and the run's ``device`` must be ``cpu``; with ``engine.client_gpus > 0`` on CUDA:
Flower's simulation gives each ClientApp (a Ray actor) that share of a GPU, which the actor
sees as ``cuda``, and on SuperNodes each ClientApp takes its node's first visible GPU. The
server half (aggregation, evaluation) stays on the run's ``device``, ``cpu`` or ``cuda``.
Whether the machine has the GPUs is checked before Ray starts (:func:`check_gpus`), not here:
a configuration may be validated on a machine without them.

Light on purpose: no Flower import, so that registering the engine costs nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fedretain.errors import ConfigError
from fedretain.extras import require
from fedretain.recipe.config import Config, component_params


def check_options(cfg: Config) -> None:
    """Refuse settings ``engine=flower`` cannot honour, with one line each (and a missing
    Flower, the flower extra)."""
    require("flwr", "engine=flower")
    params = component_params(cfg, "engine")
    gpus = params["client_gpus"]
    if not gpus >= 0:
        raise ConfigError(f"engine.client_gpus must be >= 0 (0: clients on the CPU), got {gpus}")
    if gpus > 1 and gpus != int(gpus):
        raise ConfigError(
            f"engine.client_gpus above 1 must be a whole number of GPUs (Ray's rule), got {gpus}"
        )
    if cfg.device != "cpu" and gpus == 0:
        raise ConfigError(
            f"engine=flower trains clients on the CPU; device={cfg.device} is not supported "
            "unless the clients train on GPUs too (engine.client_gpus=1, or a share such as "
            "0.5); or use engine=sequential or engine=vmap on a GPU"
        )
    if cfg.precision == "fp64":
        raise ConfigError(
            "engine=flower sends float32 records; precision=fp64 (a float64 reference run) "
            "runs on engine=sequential, vmap or auto"
        )
    if cfg.store != "memory":
        raise ConfigError(
            "engine=flower keeps client states on the clients (context.state); "
            f"store={cfg.store} is not supported, use store=memory"
        )
    dtype = component_params(cfg, "store").get("dtype", "float32")
    if dtype != "float32":
        raise ConfigError(
            "engine=flower keeps client states on the clients in their own dtype; "
            f"store.dtype={dtype} is not supported, use store.dtype=float32"
        )
    if cfg.diagnostics:
        raise ConfigError(
            "engine=flower cannot run diagnostics: the clients' trained models stay on the "
            "clients; use engine=sequential or engine=vmap for them"
        )
    for key in ("client_cpus", "reply_timeout"):
        if not params[key] > 0:
            raise ConfigError(f"engine.{key} must be > 0, got {params[key]}")


def client_device(cfg: Config) -> str:
    """The device the ClientApps of ``cfg`` train on: ``cuda`` (the GPU Ray gives the actor,
    or the node's first) when ``engine.client_gpus > 0``, else the run's ``device`` (``cpu``)."""
    gpus = cfg.engine_params.get("client_gpus", 0.0) if cfg.engine == "flower" else 0.0
    return "cuda" if gpus > 0 else cfg.device


def check_gpus(client_gpus: float) -> None:
    """Refuse ``engine.client_gpus > 0`` where torch finds fewer CUDA GPUs than one client
    asks for, with one line: Ray would wait for them forever. Called before Ray starts."""
    if not client_gpus > 0:
        return
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ConfigError(
            f"engine.client_gpus={client_gpus:g} asks Ray for GPUs, but torch finds no CUDA "
            "GPU; set engine.client_gpus=0 to train the clients on the CPU"
        )
    if client_gpus > count:
        raise ConfigError(
            f"engine.client_gpus={client_gpus:g} asks for more GPUs per client than torch finds "
            f"({count}); set engine.client_gpus to at most {count}"
        )


def flower_config(cfg: Config, **changes: Any) -> Config:
    """``cfg`` with ``engine=flower`` (the options of another engine dropped) and ``changes``,
    checked with :func:`check_options`."""
    params = dict(cfg.engine_params) if cfg.engine == "flower" else {}
    out = replace(cfg, engine="flower", engine_params=params, **changes)
    check_options(out)
    return out


__all__ = ["check_gpus", "check_options", "client_device", "flower_config"]
