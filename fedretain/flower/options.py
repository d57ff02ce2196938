"""What ``engine=flower`` accepts: the settings it refuses (one line each, checked when a
configuration is validated) and a configuration turned into a Flower one.

Light on purpose: no Flower import, so that registering the engine costs nothing.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from fedretain.errors import ConfigError
from fedretain.recipe.config import Config, component_params


def check_options(cfg: Config) -> None:
    """Refuse settings ``engine=flower`` cannot honour, with one line each."""
    if cfg.device != "cpu":
        raise ConfigError(
            f"engine=flower trains clients on the CPU; device={cfg.device} is not supported "
            "(use engine=sequential or engine=vmap on a GPU)"
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
    params = component_params(cfg, "engine")
    for key in ("client_cpus", "reply_timeout"):
        if not params[key] > 0:
            raise ConfigError(f"engine.{key} must be > 0, got {params[key]}")


def flower_config(cfg: Config, **changes: Any) -> Config:
    """``cfg`` with ``engine=flower`` (the options of another engine dropped) and ``changes``,
    checked with :func:`check_options`."""
    params = dict(cfg.engine_params) if cfg.engine == "flower" else {}
    out = replace(cfg, engine="flower", engine_params=params, **changes)
    check_options(out)
    return out


__all__ = ["check_options", "flower_config"]
