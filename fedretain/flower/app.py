"""The ServerApp and ClientApp that ``flwr run`` starts on a SuperLink and its SuperNodes.

A Flower app folder (written by ``python -m fedretain.flower app DIR ...``, see
:mod:`fedretain.flower.deployment`) names them as its components::

    [tool.flwr.app.components]
    serverapp = "fedretain.flower.app:server_app"
    clientapp = "fedretain.flower.app:client_app"

and carries the run configuration: ``config`` (the experiment's resolved configuration as TOML
text, ``engine = "flower"``), ``out`` (the results folder, on the SuperLink's machine) and
``resume`` (continue the run in ``out`` from its checkpoint). The ServerApp runs the experiment
exactly as ``fedretain run`` does (:func:`fedretain.experiments.run.run_experiment`), its
rounds going to the SuperNodes: every SuperNode needs
``--node-config "partition-id=<k> num-partitions=<clients>"`` and fedretain installed (with
the data, or a ``data-dir=...`` node config pointing at it).
"""

from __future__ import annotations

import logging
import sys

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fedretain.flower.client import make_client_app


def make_server_app() -> ServerApp:
    """The ServerApp: one fedretain experiment per Flower run (run config: config, out)."""
    app = ServerApp()

    @app.main()
    def main(grid: Grid, context: Context) -> None:
        from fedretain.errors import ConfigError
        from fedretain.experiments.run import run_experiment
        from fedretain.flower.federation import SuperNodes, connected, quick_object_pulls
        from fedretain.recipe.config import config_from_text

        run_config = context.run_config
        text, out = str(run_config.get("config", "")), str(run_config.get("out", ""))
        if not text.strip() or not out:
            raise ConfigError("the Flower run config needs 'config' (TOML text) and 'out' (folder)")
        cfg = config_from_text(text)
        if cfg.engine != "flower":
            raise ConfigError(f"the run's config has engine={cfg.engine}; set engine=flower")
        handler = logging.StreamHandler(sys.stderr)  # Flower streams it to `flwr run --stream`
        handler.setFormatter(logging.Formatter("fedretain: %(message)s"))
        log = logging.getLogger("fedretain")  # the rounds' warnings and the engine's notes
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        try:
            # replies' objects retried after 20 ms, not Flower's 1 s: see quick_object_pulls
            with connected(SuperNodes(grid, client_threads=cfg.threads)), quick_object_pulls():
                resume = bool(run_config.get("resume", False))
                summary = run_experiment(cfg, out, progress=False, resume=resume)
        finally:
            log.removeHandler(handler)
        if summary.get("paused"):  # stop_after: `resume` in the run config continues it
            print(
                f"{summary['name']}: paused after round {summary['rounds']} of "
                f"{summary['planned_rounds']} (stop_after), a checkpoint saved -> {out}",
                file=sys.stderr,
            )
            return
        print(
            f"{summary['name']}: final accuracy {summary['final_accuracy']:.4f}, "
            f"{summary['rounds']} rounds, {summary['lost_replies']} lost replies -> {out}",
            file=sys.stderr,
        )

    return app


server_app = make_server_app()
client_app = make_client_app()

__all__ = ["client_app", "make_server_app", "server_app"]
