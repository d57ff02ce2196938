"""Real processes: a SuperLink and SuperNodes on 127.0.0.1, and the Flower app folder.

The pieces, as commands (``scripts/flower_demo.sh`` runs them for 3 clients)::

    flower-superlink --insecure --host 127.0.0.1 --port 9093 \\
        --disable-runtime-dependency-installation
    python -m fedretain.flower node --insecure --superlink 127.0.0.1:9093 \\
        --host 127.0.0.1 --port 9100 --node-config "partition-id=0 num-partitions=3"
                                        # one per client, its own --port (flower-supernode's
                                        # arguments; its ClientApp process stays warm)
    python -m fedretain.flower app APPDIR --out results/x algorithm=scaffold clients=3 ...
    flwr run APPDIR local-fedretain --stream   # SuperLink connection: $FLWR_HOME/config.toml

``--insecure`` (no TLS) is only for 127.0.0.1: every address here is the loopback. Across
machines, give the SuperLink certificates (``--ssl-*``) and the SuperNodes ``--root-certificates``.

:class:`LocalFederation` starts and stops all of it from Python (the tests use it); stopping
kills every process it started and their descendants (Flower's SuperExec, ServerApp and
ClientApp processes, the warm ClientApp processes).

SuperNodes are warm by default (:mod:`fedretain.flower.node`: one long-running ClientApp
process per SuperNode, their polling capped at ``poll`` seconds); ``warm=False`` gives Flower's
process per message, and ``warm=False, poll=0`` exactly ``flower-supernode`` as Flower ships it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

import tomli_w

from fedretain.errors import ConfigError, FedRetainError
from fedretain.files import read_json
from fedretain.flower.node import DEFAULT_POLL
from fedretain.flower.processes import kill_tree, kill_trees

if TYPE_CHECKING:
    from fedretain.recipe.config import Config

CONNECTION = "local-fedretain"  # the SuperLink connection LocalFederation writes for `flwr run`
HOST = "127.0.0.1"


def app_pyproject(config_text: str, out: str | Path, resume: bool = False) -> str:
    """The ``pyproject.toml`` of a Flower app folder running one fedretain experiment."""
    return tomli_w.dumps(
        {
            "project": {
                "name": "fedretain-run",
                "version": "1.0.0",
                "description": "A fedretain experiment on Flower SuperNodes",
                "license": "Apache-2.0",
                # fedretain must be installed where the apps run (nothing to install per run)
                "dependencies": [],
            },
            "tool": {
                "flwr": {
                    "app": {
                        "publisher": "fedretain",
                        "components": {
                            "serverapp": "fedretain.flower.app:server_app",
                            "clientapp": "fedretain.flower.app:client_app",
                        },
                        "config": {
                            "config": config_text,
                            "out": str(Path(out).resolve()),
                            "resume": resume,
                        },
                    }
                }
            },
        },
        multiline_strings=True,
    )


def write_app(folder: str | Path, config: Config, out: str | Path, resume: bool = False) -> Path:
    """Write the Flower app folder of ``config`` (a :class:`Config`, ``engine`` set to
    ``flower``) whose results go to ``out``; returns the folder."""
    from fedretain.flower.options import flower_config
    from fedretain.recipe.config import resolved

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    text = tomli_w.dumps(resolved(flower_config(config)))
    (folder / "pyproject.toml").write_text(app_pyproject(text, out, resume))
    return folder


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _tool(name: str) -> str:
    """A Flower executable, preferably the one beside this Python."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise FedRetainError(f"{name} not found: install flwr (pip install 'flwr[simulation]')")
    return found


class LocalFederation:
    """A SuperLink and ``supernodes`` SuperNodes on 127.0.0.1; SuperNode ``k`` holds
    partition ``k`` of ``supernodes``::

        with LocalFederation(3) as fed:
            summary = fed.run(cfg, "results/x")     # cfg.clients == 3

    Logs and Flower's home (``FLWR_HOME``: the SuperLink connection, installed apps) go to
    ``workdir`` (a temporary folder, removed on close, unless given). ``warm``: each SuperNode
    keeps one ClientApp process for all its messages (else Flower starts one per message);
    ``poll``: the SuperNodes' polling interval in seconds (0: Flower's 3 s).
    """

    def __init__(
        self,
        supernodes: int,
        *,
        workdir: str | Path | None = None,
        port: int = 0,
        warm: bool = True,
        poll: float = DEFAULT_POLL,
    ) -> None:
        if supernodes < 1:
            raise ValueError(f"supernodes must be >= 1, got {supernodes}")
        if poll < 0:
            raise ConfigError(f"poll must be >= 0 seconds, got {poll}; 0 keeps Flower's 3 s")
        self.supernodes = supernodes
        self.warm, self.poll = warm, poll
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix="fedretain-flower-"))
        self.port = port or free_port()
        # Flower starts its own executables (flower-superexec, flwr-clientapp...) by name
        path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
        self.env = {**os.environ, "FLWR_HOME": str(self.workdir / "flwr-home"), "PATH": path}
        self.superlink: subprocess.Popen | None = None
        self.nodes: list[subprocess.Popen | None] = []
        self._logs: list[IO[bytes]] = []
        self._processes: list[subprocess.Popen] = []  # every process started, in order
        self._runs: dict[int, tuple[str, float]] = {}  # flwr pid -> (its log, submit time)

    # ---- processes ------------------------------------------------------------------------

    def _spawn(self, args: list[str], log_name: str) -> subprocess.Popen:
        log = open(self.workdir / log_name, "ab")  # noqa: SIM115 (closed in close())
        self._logs.append(log)
        process = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            cwd=self.workdir,
            start_new_session=True,
        )
        self._processes.append(process)
        return process

    def start(self) -> LocalFederation:
        """Start the SuperLink, wait until it listens, then start the SuperNodes."""
        if self.superlink is not None:
            return self
        home = self.workdir / "flwr-home"
        home.mkdir(parents=True, exist_ok=True)
        connection = {"address": f"{HOST}:{self.port}", "insecure": True}
        (home / "config.toml").write_text(
            tomli_w.dumps({"superlink": {"default": CONNECTION, CONNECTION: connection}})
        )
        try:
            self.superlink = self._spawn(
                [
                    _tool("flower-superlink"),
                    "--insecure",
                    "--host",
                    HOST,
                    "--port",
                    str(self.port),
                    "--disable-runtime-dependency-installation",
                ],
                "superlink.log",
            )
            self._wait_listening(self.port, 120.0)
            for k in range(self.supernodes):
                self.nodes.append(self.start_node(k))
        except BaseException:
            self.close()
            raise
        return self

    def node_command(self, k: int) -> list[str]:
        """The command of the SuperNode holding partition ``k``."""
        if self.warm or self.poll > 0:
            launcher = [sys.executable, "-m", "fedretain.flower.node", "node"]
            launcher += ["--poll", str(self.poll)]
            launcher += [] if self.warm else ["--cold"]
        else:  # Flower's own SuperNode, untouched
            launcher = [_tool("flower-supernode")]
        return [
            *launcher,
            "--insecure",
            "--superlink",
            f"{HOST}:{self.port}",
            "--host",
            HOST,
            "--port",
            str(free_port()),
            "--node-config",
            f"partition-id={k} num-partitions={self.supernodes}",
        ]

    def start_node(self, k: int) -> subprocess.Popen:
        """Start a SuperNode holding partition ``k`` (also to bring one back)."""
        return self._spawn(self.node_command(k), f"supernode-{k}.log")

    def _wait_listening(self, port: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.superlink is not None
            if self.superlink.poll() is not None:
                raise FedRetainError(f"the SuperLink exited; see {self.workdir / 'superlink.log'}")
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                if s.connect_ex((HOST, port)) == 0:
                    return
            time.sleep(0.2)
        raise FedRetainError(f"the SuperLink did not listen on {HOST}:{port} within {timeout} s")

    def kill_node(self, k: int, sig: int = signal.SIGKILL) -> None:
        """Kill SuperNode ``k`` and its processes (SIGKILL: a crash, no goodbye)."""
        node = self.nodes[k]
        if node is not None:
            kill_tree(node.pid, sig)
            node.wait(timeout=30)
            self.nodes[k] = None

    def close(self) -> None:
        """Stop every process this federation started, and their descendants: the runs, then
        the SuperNodes (while the SuperLink still answers their goodbye), then the SuperLink."""
        runs = [p for p in self._processes if p not in self.nodes and p is not self.superlink]
        kill_trees([p.pid for p in runs if p.poll() is None], grace=5.0)
        kill_trees([n.pid for n in self.nodes if n is not None and n.poll() is None])
        if self.superlink is not None:
            kill_tree(self.superlink.pid)
        for process in self._processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        self._processes.clear()
        self.nodes = [None] * len(self.nodes)
        self.superlink = None
        for log in self._logs:
            log.close()
        self._logs.clear()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> LocalFederation:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- runs -----------------------------------------------------------------------------

    def submit(self, config: Config, out: str | Path, resume: bool = False) -> subprocess.Popen:
        """Start ``flwr run`` for ``config`` (results in ``out``); returns the ``flwr`` process,
        which streams the run's log to ``workdir/run-<n>.log`` and ends with the run."""
        self.start()
        n = len(self._runs) + 1
        app = write_app(self.workdir / f"app-{n}", config, out, resume)
        started = time.time()
        process = self._spawn(
            [_tool("flwr"), "run", str(app), CONNECTION, "--stream"], f"run-{n}.log"
        )
        self._runs[process.pid] = (f"run-{n}.log", started)
        return process

    def wait(self, process: subprocess.Popen, out: str | Path, timeout: float = 3600) -> dict:
        """Wait for a submitted run; returns its ``summary.json`` (an error if it has none)."""
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            raise FedRetainError(f"the Flower run did not finish within {timeout:.0f} s") from None
        log, started = self._runs.get(process.pid, ("run-*.log", 0.0))
        summary = Path(out) / "summary.json"
        if not summary.is_file() or summary.stat().st_mtime < started:
            tail = " | ".join(self.log_text(log).strip().splitlines()[-3:])
            raise FedRetainError(
                f"the Flower run wrote no {summary} (log {self.workdir / log}: {tail})"
            )
        return read_json(summary)

    def run(
        self, config: Config, out: str | Path, resume: bool = False, timeout: float = 3600
    ) -> dict:
        """Run ``config`` on the SuperNodes (``config.clients`` must equal their number);
        returns the summary."""
        if config.clients != self.supernodes:
            raise FedRetainError(
                f"clients={config.clients} but this federation has {self.supernodes} SuperNodes"
            )
        return self.wait(self.submit(config, out, resume), out, timeout)

    def log_text(self, name: str) -> str:
        """The text of one of the logs in ``workdir`` (``superlink.log``, ``run-1.log``...)."""
        path = self.workdir / name
        return path.read_text(errors="replace") if path.exists() else ""


__all__ = ["LocalFederation", "app_pyproject", "free_port", "write_app"]
