"""Flower's simulation engine (Ray backend) as a background service offering its Grid.

``flwr.simulation.run_simulation`` blocks while its ServerApp runs; here it runs in a thread
with a ServerApp that hands its Grid over and waits. Whoever holds the Grid (a run's
``engine=flower``, a test, a benchmark) drives the rounds, and :meth:`FlowerSimulation.close`
ends the ServerApp, which stops Ray and every actor process::

    with FlowerSimulation(num_supernodes=10, client_cpus=1) as sim:
        with connected(sim.federation):
            run_experiment(cfg, "results/x")   # cfg.engine == "flower", cfg.clients == 10

Each virtual SuperNode ``k`` has node config ``partition-id = k``; ClientApps run in Ray actors
with ``client_cpus`` CPUs each (Ray gets every CPU of the machine unless ``total_cpus`` says
otherwise), and each actor's torch uses ``max(1, int(client_cpus))`` threads. With
``client_gpus > 0`` each actor also holds that share of a GPU (a fraction, such as 0.5 for two
clients per GPU, or a whole number), Ray gets every GPU torch sees, and Ray's
``CUDA_VISIBLE_DEVICES`` shows the actor its own GPU as ``cuda``, where the ClientApp trains
when the run's ``engine.client_gpus`` asks for it
(:func:`~fedretain.flower.options.client_device`). Asking for GPUs the machine lacks is
refused before Ray starts (Ray would wait for them forever).
"""

from __future__ import annotations

import logging
import os
import queue
import resource
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

from flwr.app import Context
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from fedretain.errors import FedRetainError
from fedretain.flower.federation import SuperNodes
from fedretain.flower.options import check_gpus
from fedretain.flower.processes import tree_rss_kb

if TYPE_CHECKING:
    from fedretain.recipe.config import Config

log = logging.getLogger("fedretain.flower")


class _QuietDeprecation(logging.Filter):
    """Drops Flower's notice that ``run_simulation`` is deprecated (this module pins flwr)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "`run_simulation` function is deprecated" not in record.getMessage()


class FlowerSimulation:
    """``num_supernodes`` virtual SuperNodes running the fedretain ClientApp under Ray.

    One at a time per process: Flower starts Ray only when it is not running and stops it at
    the end, so a second simulation would share, then stop, the first one's cluster.
    """

    _running: FlowerSimulation | None = None

    def __init__(
        self,
        num_supernodes: int,
        *,
        client_cpus: float = 1.0,
        total_cpus: int | None = None,
        client_app: ClientApp | None = None,
        verbose: bool = False,
        start_timeout: float = 300.0,
        client_gpus: float = 0.0,
    ) -> None:
        if num_supernodes < 1:
            raise ValueError(f"num_supernodes must be >= 1, got {num_supernodes}")
        if not client_cpus > 0:
            raise ValueError(f"client_cpus must be > 0, got {client_cpus}")
        if not client_gpus >= 0:
            raise ValueError(f"client_gpus must be >= 0, got {client_gpus}")
        check_gpus(client_gpus)
        self.num_supernodes = num_supernodes
        self.client_cpus = float(client_cpus)
        self.client_gpus = float(client_gpus)
        self.total_cpus = total_cpus or os.cpu_count() or 1
        self.client_app = client_app
        self.verbose = verbose
        self.start_timeout = start_timeout
        self.federation: SuperNodes | None = None
        self.startup_seconds = 0.0
        self._thread: threading.Thread | None = None
        self._grids: queue.Queue[Grid] = queue.Queue()
        self._stop = threading.Event()
        self._error: BaseException | None = None

    def _server_app(self) -> ServerApp:
        app = ServerApp()

        @app.main()
        def main(grid: Grid, context: Context) -> None:
            self._grids.put(grid)
            self._stop.wait()

        return app

    def backend_config(self) -> dict[str, Any]:
        """The Ray backend's configuration: Ray's own cluster of ``total_cpus`` CPUs (and, with
        ``client_gpus > 0``, every GPU torch sees), ``client_cpus`` CPUs and ``client_gpus``
        GPUs per ClientApp actor."""
        init_args: dict[str, Any] = {
            "num_cpus": self.total_cpus,
            "address": "local",  # a cluster of our own, never one found on the machine
            "logging_level": "WARNING" if self.verbose else "ERROR",
            "log_to_driver": self.verbose,
        }
        if self.client_gpus > 0:
            import torch

            init_args["num_gpus"] = torch.cuda.device_count()
        return {
            "init_args": init_args,
            "client_resources": {"num_cpus": self.client_cpus, "num_gpus": self.client_gpus},
        }

    def _run(self) -> None:
        from flwr.simulation import run_simulation

        from fedretain.flower.client import client_app

        try:
            run_simulation(
                server_app=self._server_app(),
                client_app=self.client_app or client_app,
                num_supernodes=self.num_supernodes,
                backend_name="ray",
                backend_config=self.backend_config(),
                verbose_logging=self.verbose,
            )
        except BaseException as e:  # reported by start() or close()
            self._error = e

    def start(self) -> SuperNodes:
        """Start Ray and the SuperNodes; returns the federation once the Grid is up."""
        if self.federation is not None:
            return self.federation
        if FlowerSimulation._running is not None:
            raise FedRetainError(
                "a Flower simulation is already running in this process; close it first "
                "(or run this experiment on it: `with connected(sim.federation): ...`)"
            )
        FlowerSimulation._running = self
        started = time.perf_counter()
        flwr_log = logging.getLogger("flwr")
        if not any(isinstance(f, _QuietDeprecation) for f in flwr_log.filters):
            flwr_log.addFilter(_QuietDeprecation())
        if not self.verbose:
            flwr_log.setLevel(logging.WARNING)
        warnings.filterwarnings(
            "ignore", message="Tip: In future versions of Ray", category=FutureWarning
        )
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="flower-simulation", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + self.start_timeout
        while True:
            try:
                grid = self._grids.get(timeout=0.2)
                break
            except queue.Empty:
                if not self._thread.is_alive() or time.monotonic() > deadline:
                    self.close()
                    raise FedRetainError(
                        f"Flower's simulation engine did not start{self._why()}"
                    ) from None
        threads = max(1, int(self.client_cpus))
        self.federation = SuperNodes(grid, client_threads=threads, check=self.check)
        self.startup_seconds = time.perf_counter() - started
        return self.federation

    def _why(self) -> str:
        """``": "`` and the root cause of the runtime's failure (Ray's own words), if any."""
        error = self._error
        while error is not None and error.__cause__ is not None:
            error = error.__cause__
        return f": {type(error).__name__}: {error}" if error is not None else ""

    def check(self) -> None:
        """Raise once the simulation's runtime has stopped (Ray failed to start or crashed, or
        :meth:`close` ran): its SuperNodes will not answer, and a round should not wait out
        its reply deadline for them."""
        if self._thread is None or not self._thread.is_alive():
            raise FedRetainError(f"Flower's simulation engine stopped{self._why()}")

    def close(self) -> None:
        """End the ServerApp; Flower then stops Ray and its actors. Safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)
            if self._thread.is_alive():
                log.warning("Flower's simulation engine did not stop within 120 s")
            self._thread = None
        self.federation = None
        if FlowerSimulation._running is self:
            FlowerSimulation._running = None

    def __enter__(self) -> FlowerSimulation:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def time_simulation(config: Config, rounds: int | None = None) -> dict[str, Any]:
    """Run ``rounds`` rounds (default ``config.rounds``) of ``config`` on Flower's simulation
    engine and time them (for the engine benchmark).

    Returns ``startup_s`` (Ray, the virtual SuperNodes, the first ClientApp answers: partition
    discovery), ``round_s`` (seconds of each round, the first ClientApp calls of each Ray actor
    building its data and model included), ``peak_rss_mb`` (RSS summed over this process and
    all of its descendants, Ray's included, sampled every 0.25 s) and ``peak_processes``.
    Nothing is written to disk.
    """
    from fedretain.flower.options import flower_config
    from fedretain.recipe.federation import build_federation
    from fedretain.registry import kind

    rounds = config.rounds if rounds is None else rounds
    cfg = flower_config(config, rounds=rounds, checkpoint_every=0)
    peak = {"rss": 0, "procs": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            rss, procs = tree_rss_kb(os.getpid())
            peak["rss"], peak["procs"] = max(peak["rss"], rss), max(peak["procs"], procs)
            done.wait(0.25)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        fed = build_federation(cfg)
        # the FlowerEngine, by its registered factory (engine.py starts this module's simulation)
        engine = kind("engine").build("flower", cfg.engine_params, fed)
        runner = fed.rounds(engine)  # the one constructor: a continual config's clients too
        state = fed.algorithm.server_init(*fed.task.init())
        round_s = []
        try:
            engine.connect()
            for rnd in range(rounds):
                start = time.perf_counter()
                state, _ = runner.run_round(
                    state, rnd, cfg.lr_at(rnd), clients=fed.participation.clients(rnd)
                )
                round_s.append(time.perf_counter() - start)
        finally:
            engine.close()
    finally:
        done.set()
        sampler.join()
    self_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "startup_s": engine.startup_seconds,
        "round_s": round_s,
        "peak_rss_mb": max(peak["rss"], self_peak_kb) / 1024.0,
        "peak_processes": peak["procs"],
    }


__all__ = ["FlowerSimulation", "time_simulation"]
