"""Runs of a study as Ray tasks: ``fedretain reproduce ... --ray [ADDRESS]``, ``fedretain sweep
... --ray [ADDRESS]``.

Each run not finished yet becomes one Ray task asking for ``run_cpus`` CPUs and ``run_gpus``
GPUs (``0.25``: four runs share a GPU); the costliest start first, as in the local mode. A task
runs :func:`~fedretain.studies.reproduce.jobs.run_one` on whichever node Ray picks, into the
run's folder where every node shares it with the caller (the folders are made absolute here, on
the caller), else into a scratch folder sent back through Ray (:mod:`.storage`). The caller's
fedretain travels with the study; each node needs its dependencies installed and the data at
the same paths, which :mod:`.nodes` checks on each node before the runs start, setting aside
the nodes that fail.

What a lost node costs: Ray retries a task whose worker or node died (``retries`` times, on
another node when one is left), and the retried run continues from its last checkpoint in its
folder (the task itself looks for one), so only the rounds since that checkpoint are redone. A
run that fails for a reason of its node (:func:`~.nodes.node_fault`) sets it aside and goes to
another node the same way. If the caller dies, its tasks end with it; the same command again
skips the finished runs and continues the others from their checkpoints, exactly as the local
mode does.

``address``: ``None`` starts Ray on this machine for the study (or joins the cluster named by
the ``RAY_ADDRESS`` environment variable), ``"auto"`` joins the cluster this machine is part of
(``ray start`` was run here), ``HOST:PORT`` or ``ray://HOST:10001`` a cluster elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedretain.errors import ConfigError, FedRetainError
from fedretain.extras import require
from fedretain.studies.reproduce.nodes import (
    NODE_LABEL,
    NodeFault,
    check_nodes,
    excluding,
    fitting,
    needs_of,
    shipped_env,
)
from fedretain.studies.reproduce.storage import (
    Folders,
    check_storage,
    drain,
    snapshot,
    token,
)

POLL = 2.0  # seconds between drains of what runs sent back without a shared filesystem
START = (
    "start it with `ray start --head` (and `ray start --address HEAD:6379` on each worker) or "
    "give its address with --ray HOST:PORT"
)


@dataclass(frozen=True)
class RayCluster:
    """Where and how a study's runs go to Ray (see the module's docstring)."""

    address: str | None = None
    run_cpus: float = 1.0
    run_gpus: float = 0.0
    retries: int = 3  # tries again after a worker or node died
    progress_every: float = 60.0  # seconds between progress lines while no run finishes
    stall_after: float = 0.0  # > 0: stop when no run finished for this many seconds
    autoscaling: bool = False  # the cluster adds nodes as runs wait: none has to fit yet
    ship_code: bool = True  # the caller's fedretain goes to the tasks (runtime_env)
    storage: str = "auto"  # where runs write: shared --out, through Ray, or auto (storage.py)

    def __post_init__(self) -> None:
        check_storage(self.storage)
        if not (isinstance(self.retries, int) and self.retries >= 0):
            raise ConfigError(f"--max-retries must be a whole number >= 0, got {self.retries}")
        if not self.stall_after >= 0 or not self.progress_every > 0:
            raise ConfigError(f"--stall-after must be seconds >= 0, got {self.stall_after}")
        if not self.run_cpus > 0:
            raise ConfigError(f"--run-cpus must be > 0, got {self.run_cpus}")
        if not self.run_gpus >= 0:
            raise ConfigError(f"--run-gpus must be >= 0, got {self.run_gpus}")
        if self.run_gpus > 1 and self.run_gpus != int(self.run_gpus):
            raise ConfigError(
                f"--run-gpus above 1 must be a whole number of GPUs, got {self.run_gpus}"
            )

    @property
    def threads(self) -> int:
        """Torch threads of each run: its whole CPUs (at least one)."""
        return max(1, int(self.run_cpus))

    def describe(self) -> str:
        where = self.address or os.environ.get("RAY_ADDRESS") or "a Ray instance on this machine"
        gpus = f", {self.run_gpus:g} GPU" if self.run_gpus else ""
        return f"Ray ({where}): {self.run_cpus:g} CPU{gpus} per run"


def cluster_settings(
    cluster: RayCluster, jobs: int, extra: list[str], echo: Callable[[str], None]
) -> list[str]:
    """The settings of runs sent to Ray: ``device=cuda`` added where each run gets a GPU and
    the settings name no device, and ``gpu_share`` where a run gets part of one (the
    vectorised engine then plans for that part of the card). ``--jobs`` has no say there (Ray
    runs as many at a time as the cluster has room for): one line when it is given."""
    require("ray", "--ray")  # before anything is planned or run
    unreachable = closed_port(cluster.address)
    if unreachable:  # Ray itself would try for minutes
        raise ConfigError(
            f"cannot reach the Ray cluster at {cluster.address}: {unreachable}; {START}"
        )
    if jobs > 1:
        raise ConfigError(
            "--jobs runs local processes; with --ray the cluster runs as many runs at a time "
            "as it has room for: size them with --run-cpus and --run-gpus instead"
        )
    if 0 < cluster.run_gpus < 1 and not any(e.startswith("gpu_share=") for e in extra):
        extra = [*extra, f"gpu_share={cluster.run_gpus:g}"]
    if cluster.run_gpus and not any(e.startswith("device=") for e in extra):
        echo(f"--run-gpus {cluster.run_gpus:g}: the runs train on device=cuda")
        return [*extra, "device=cuda"]
    return extra


def node_paths(data_dirs: list[str]) -> list[str]:
    """``--data-dir`` values (``DIR`` or ``NAME=DIR``) with absolute folders: a Ray task reads
    them on its node, from another working directory."""
    out = []
    for d in data_dirs:
        name, sep, folder = d.rpartition("=") if "=" in d else ("", "", d)
        out.append(f"{name}{sep}{Path(folder).resolve()}")
    return out


def closed_port(address: str | None) -> str:
    """Why ``HOST:PORT`` accepts no connection within 5 s ("" when it does, and for the other
    forms of address, which Ray resolves itself)."""
    if not address or address == "auto" or "://" in address or ":" not in address:
        return ""
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
    except ValueError:
        return f"{port} is no port number"
    except OSError as e:
        return e.strerror or type(e).__name__
    return ""


def connect(
    cluster: RayCluster, echo: Callable[[str], None] = print, env: dict[str, Any] | None = None
) -> Any:
    """``ray``, connected to ``cluster.address`` (one line naming the fix when it cannot be)
    with the job's ``runtime_env`` ``env`` (:func:`~.nodes.shipped_env`), and checked to have
    room for one run: refused where no live node can hold one, unless the cluster autoscales
    (then a note says it must add such a node before any run starts)."""
    require("ray", "--ray")
    import ray  # the flower extra: it comes with flwr[simulation]

    try:
        if not ray.is_initialized():
            with warnings.catch_warnings():  # Ray's notice of a future default, not ours
                warnings.simplefilter("ignore", FutureWarning)
                ray.init(
                    address=cluster.address,
                    runtime_env=env or None,
                    log_to_driver=False,
                    configure_logging=False,
                )
    except (ConnectionError, ValueError, RuntimeError) as e:
        text = " ".join(str(e).split())
        raise ConfigError(
            f"cannot reach the Ray cluster at {cluster.address or 'RAY_ADDRESS'}: {text}; {START}"
        ) from None
    short = no_node_fits(ray.nodes(), cluster.run_cpus, cluster.run_gpus)
    if short and not cluster.autoscaling:
        raise ConfigError(f"{short}; or give --autoscaling where the cluster adds nodes")
    if short:
        echo(
            f"note: {short.split(' (', 1)[0]} yet: with --autoscaling the runs wait until the "
            "cluster adds a node that large (--stall-after bounds the wait)"
        )
    return ray


def no_node_fits(nodes: list[dict[str, Any]], run_cpus: float, run_gpus: float) -> str:
    """Why no live node of ``nodes`` (``ray.nodes()``) can hold one run of ``run_cpus`` CPUs
    and ``run_gpus`` GPUs ("" when one can). A run's task goes to one node: a cluster whose
    totals suffice but none of whose nodes does would leave the runs waiting for ever."""
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive", True)]
    if any(r.get("CPU", 0) >= run_cpus and r.get("GPU", 0) >= run_gpus for r in alive):
        return ""
    largest = sorted(alive, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), reverse=True)
    shown = "; ".join(f"{r.get('CPU', 0):g} CPU, {r.get('GPU', 0):g} GPU" for r in largest[:3])
    more = f" and {len(alive) - 3} more" if len(alive) > 3 else ""
    return (
        f"no node of the Ray cluster can hold one run of {run_cpus:g} CPU and {run_gpus:g} GPU "
        f"(a run's task goes to one node; the largest: {shown or 'none alive'}{more}); lower "
        "--run-cpus/--run-gpus or add a node that large"
    )


def ray_each(
    todo: list[Any],
    cluster: RayCluster,
    run: Callable[..., dict[str, Any]],
    deadline: float | None = None,
    echo: Callable[[str], None] = print,
) -> Iterator[tuple[Any, dict[str, Any] | Exception]]:
    """Run the jobs ``todo`` (already in the order to start them) as Ray tasks, each calling
    ``run(args, folder, resume, study, deadline, folders, feature_net)``
    (:func:`~fedretain.studies.reproduce.jobs.run_task`) on the nodes that pass their
    checks (:func:`~.nodes.check_nodes`), the caller's code shipped with them; yield each job as
    it ends, with its result or its error (the run's own exception where it raised one, else
    Ray's; a :class:`~.nodes.NodeFault` sets its node aside and the run goes to another, while
    tries and nodes are left). While none ends, a line every ``cluster.progress_every`` seconds
    says how many are left; after ``cluster.stall_after`` seconds without one (when set) the
    study stops with a :class:`StalledError` and its runs are cancelled (the same command
    continues them from their checkpoints)."""
    import ray

    if not todo:  # every run finished already: nothing to connect for
        return
    flower = [str(j.folder) for j in todo if "engine=flower" in j.args]
    if flower:  # its simulation starts a Ray of its own inside the task: not supported
        raise ConfigError(
            f"engine=flower runs its clients on a Ray of its own; run {flower[0]} (and "
            f"{len(flower) - 1} other flower run(s)) without --ray, or choose another engine"
        )
    started = not ray.is_initialized()  # then this study's connection, closed at its end
    env = shipped_env(cluster.ship_code) if started else {}  # the code goes with a job's start
    if cluster.ship_code and not started:
        echo(
            "note: Ray was started before the study, so fedretain's code is not shipped with "
            "it: the nodes run the fedretain they have installed"
        )
    pending: dict[Any, Any] = {}
    folders = None
    try:  # from here on, a study that stops (an error, Ctrl-C) closes what it opened
        connect(cluster, echo, env)
        for job in todo:  # made here: a node that does not see them is set aside (nodes.py)
            Path(job.folder).mkdir(parents=True, exist_ok=True)
        folder = Path(os.path.commonpath([str(Path(j.folder).resolve()) for j in todo]))
        with token(folder) as shared:
            aside, storage = check_nodes(ray, needs_of(todo, folder, shared), cluster, env, echo)
        folders = _folders(ray, todo) if storage == "ray" else None
        nets = _feature_nets(ray, todo)
        task = ray.remote(run)
        options = {
            "num_cpus": cluster.run_cpus,
            "num_gpus": cluster.run_gpus,
            "max_retries": cluster.retries,
            "retry_exceptions": False,  # a run's own error is final; a node's: _elsewhere
        }

        def submit(job: Any) -> Any:  # off the nodes set aside so far
            folder = str(Path(job.folder).resolve())
            return task.options(**options, **excluding(aside)).remote(
                job.args, folder, job.resume, job.spec.study, deadline, folders, nets.get(folder)
            )

        pending = {submit(job): job for job in todo}
        moved: dict[str, int] = {}  # a job's tries on another node after a node fault
        total, last = len(pending), time.monotonic()
        said = last  # the last progress line
        while pending:
            ready = _next_ready(ray, pending, cluster, last, said, folders is not None)
            if folders is not None:  # what the runs sent back, into their folders here
                drain(ray, folders)
            if not ready:
                idle = time.monotonic() - last
                if cluster.stall_after and idle >= cluster.stall_after:
                    raise StalledError(_stalled(len(pending), total, idle, cluster))
                if time.monotonic() - said >= cluster.progress_every:
                    said = time.monotonic()
                    finished = total - len(pending)
                    echo(
                        f"waiting: {finished} of {total} run(s) finished, {len(pending)} "
                        f"pending or running; the last finished {idle:.0f} s ago"
                    )
                continue
            last = time.monotonic()
            job = pending.pop(ready[0])
            try:
                result: dict[str, Any] | Exception = ray.get(ready[0])
            except ray.exceptions.RayTaskError as e:  # the run raised: its own error or a node's
                result = e.cause if isinstance(e.cause, Exception) else e
            except ray.exceptions.RayError as e:  # its worker or node died, retries spent
                text = " ".join(str(e).split())[:300]
                result = RuntimeError(f"lost on the Ray cluster: {text}")
            if isinstance(result, NodeFault) and _elsewhere(
                ray, job, result, aside, moved, cluster, echo
            ):
                pending[submit(job)] = job
                continue
            if folders is not None:
                drain(ray, folders)  # its last files, before the run counts as ended
                folders.forget.remote(str(Path(job.folder).resolve()))
            yield job, result
    finally:
        for ref in pending:  # stopped early (Ctrl-C): the runs left are not wanted any more
            ray.cancel(ref, force=True)
        if folders is not None:
            with contextlib.suppress(Exception):  # what came back of them is kept
                drain(ray, folders)
        if started:
            ray.shutdown()


def _feature_nets(ray: Any, todo: list[Any]) -> dict[str, Any]:
    """The feature network of each run measuring FIDs (``diagnostics=generator_quality``),
    made once on the caller for each data set and put in Ray's object store: every FID of the
    study from one extractor (:func:`~fedretain.experiments.generator_quality.feature_net_file`)."""
    from fedretain.experiments.generator_quality import feature_net_file
    from fedretain.recipe.config import load_config

    made: dict[str, Any] = {}
    nets = {}
    for job in todo:
        cfg = load_config(None, job.args)
        if "generator_quality" not in cfg.diagnostics:
            continue
        key = repr((cfg.dataset, cfg.data_dir, cfg.dataset_params, cfg.diagnostics_params))
        if key not in made:
            made[key] = ray.put(feature_net_file(cfg))
        nets[str(Path(job.folder).resolve())] = made[key]
    return nets


def _folders(ray: Any, todo: list[Any]) -> Any:
    """The :class:`~.storage.Folders` actor of a study without a shared filesystem, on the
    caller's node, holding each run's folder as the caller has it (a run part way continues
    from its checkpoint there)."""
    here = ray.get_runtime_context().get_node_id()
    folders = ray.remote(Folders).options(num_cpus=0, label_selector={NODE_LABEL: here}).remote()
    for job in todo:
        files = snapshot(Path(job.folder).resolve())
        if files:
            folders.seed.remote(str(Path(job.folder).resolve()), files)
    return folders


def _elsewhere(
    ray: Any,
    job: Any,
    fault: NodeFault,
    aside: dict[str, str],
    moved: dict[str, int],
    cluster: RayCluster,
    echo: Callable[[str], None],
) -> bool:
    """Set aside the node of ``fault``; whether ``job`` tries again on another node (its tries
    left, and a node left that can hold it: else its error is final)."""
    aside[fault.node] = fault.reason
    key = str(job.folder)
    moved[key] = moved.get(key, 0) + 1
    left = [n for n in fitting(ray, cluster.run_cpus, cluster.run_gpus) if n["NodeID"] not in aside]
    again = moved[key] <= cluster.retries and (bool(left) or cluster.autoscaling)
    then = (
        f"tried again on another node ({moved[key]} of {cluster.retries})"
        if again
        else "not tried again: "
        + ("no node left" if moved[key] <= cluster.retries else "--max-retries spent")
    )
    echo(f"{job.folder}: node {fault.host} ({fault.node[:8]}) set aside: {fault.reason}; {then}")
    return again


class StalledError(FedRetainError):
    """No run of a study on Ray finished within ``--stall-after`` seconds."""


def _next_ready(
    ray: Any, pending: dict[Any, Any], cluster: RayCluster, last: float, said: float, poll: bool
) -> list:
    """The next finished task (``[]`` when none finished before the next progress line, the
    stall limit or, where runs send their folders back through Ray (``poll``), 2 s)."""
    now = time.monotonic()
    wait = max(cluster.progress_every - (now - said), 0.01)
    if cluster.stall_after:
        wait = min(wait, max(cluster.stall_after - (now - last), 0.01))
    if poll:
        wait = min(wait, POLL)
    ready, _ = ray.wait(list(pending), num_returns=1, timeout=wait)
    return ready


def _stalled(left: int, total: int, idle: float, cluster: RayCluster) -> str:
    return (
        f"no run finished for {idle:.0f} s (--stall-after {cluster.stall_after:g}): {left} of "
        f"{total} run(s) pending or running, now cancelled; `ray status` shows whether the "
        "cluster has room for a run (--run-cpus, --run-gpus) and the nodes' logs what the "
        "runs are doing; the same command continues them from their checkpoints"
    )


__all__ = [
    "RayCluster",
    "StalledError",
    "cluster_settings",
    "connect",
    "no_node_fits",
    "node_paths",
    "ray_each",
]
