"""The nodes of a study on Ray: the project shipped to them, each checked before the runs
start, and one set aside when a run fails there for a reason of the node, not of the run.

- **Code**: the caller's fedretain goes to every task through the Ray job's ``runtime_env``
  (``py_modules``), so a node needs only the dependencies (torch, numpy, ...) installed, and
  every node runs the caller's code, whatever fedretain it has installed (``--no-ship-code``,
  or a Ray the caller started before the study: each node's own, which the check compares).
- **Checks** (:func:`check_nodes`): one small task on each node that can hold a run reports
  its fedretain, torch, numpy and Python versions, whether it has the data the plan needs
  (the files ``fedretain data get`` lists, else the data set loaded), whether it shares the
  study's folder with the caller (:mod:`.storage`) and how much disk is free there, or on its
  scratch disk where the runs' folders go through Ray. A node that differs
  from the caller or lacks something is set aside with one line naming why; the study starts
  on the others (none left: one error listing every node's reasons).
- **Failures by cause** (:func:`node_fault`): a run that fails with an error of its node (out
  of memory on the card or the host, a module missing, a full or failing disk, the study's
  folder gone) raises :class:`NodeFault` from its task; the caller sets that node aside and
  tries the run again on another one (up to ``--max-retries``), where it continues from its
  last checkpoint. A run's own error (divergence, a configuration or data error) stays final,
  as in the local mode. A worker or node that dies is Ray's to retry (``max_retries``).
"""

from __future__ import annotations

import errno
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fedretain.errors import ConfigError, FedRetainError

NODE_LABEL = "ray.io/node-id"  # the label Ray gives every node: its id
MIN_FREE_BYTES = 1 << 30  # a study's runs write checkpoints and results: 1 GiB at least
CHECK_SECONDS = 300.0  # a node whose check has not answered by then is set aside
SHIPPED = "FEDRETAIN_SHIPPED_VERSION"  # set in shipped tasks: the caller's version

# errno values of a disk or mount failing under a run (not of a path the user named wrongly:
# those are found before the study starts)
NODE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.ESTALE}


@dataclass(frozen=True)
class Needs:
    """What a node must have for a study's runs: the data sets the plan reads (name, folder,
    loader options), and the study's folder at the same path on the same filesystem (where
    it shares the caller's, it sees the caller's ``token`` file there: :mod:`.storage`)."""

    data: tuple[tuple[str, str, tuple[tuple[str, Any], ...]], ...]
    folder: str
    token: str = ""


def needs_of(jobs: list[Any], folder: Path, token: str = "") -> Needs:
    """The :class:`Needs` of ``jobs`` (their ``args``) writing under ``folder``."""
    from fedretain.recipe.config import load_config

    data = set()
    for job in jobs:
        cfg = load_config(None, job.args)
        data.add((cfg.dataset, cfg.data_dir, tuple(sorted(cfg.dataset_params.items()))))
    return Needs(tuple(sorted(data, key=str)), str(folder.resolve()), token)


class NodeFault(FedRetainError):
    """A run failed for a reason of its node (:func:`node_fault`): another node may run it."""

    def __init__(self, node: str, host: str, reason: str) -> None:
        super().__init__(f"node {host} ({node[:8]}): {reason}")
        self.node, self.host, self.reason = node, host, reason

    def __reduce__(self) -> tuple[Any, ...]:  # it crosses from the task to the caller
        return (NodeFault, (self.node, self.host, self.reason))


def node_fault(e: BaseException) -> str:
    """Why ``e``, raised by a run, belongs to the node it ran on ("" for a run's own error:
    one it would raise on any node)."""
    import torch

    from fedretain.errors import OutputError

    if isinstance(e, torch.cuda.OutOfMemoryError):  # co-located runs share the card
        return "CUDA out of memory"
    if isinstance(e, MemoryError) or "can't allocate memory" in str(e):  # torch's CPU allocator
        return "out of memory"
    if isinstance(e, ImportError):
        return f"cannot import {e.name or e}"
    if isinstance(e, OSError) and e.errno in NODE_ERRNOS:
        return f"{e.strerror or e} ({e.filename or 'a file of the run'})"
    if isinstance(e, OutputError):  # the study's folder cannot be written there
        return str(e)
    return ""


def versions() -> dict[str, str]:
    """The versions a run's numbers depend on, in this process."""
    import numpy
    import torch

    from fedretain import __version__

    return {
        "fedretain": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }


def inspect_node(needs: Needs) -> dict[str, Any]:
    """On a node (a Ray task): what it has of ``needs``."""
    import ray

    import fedretain
    from fedretain.data.datasets import default_folder, load_dataset
    from fedretain.data.fetch import present_in

    missing = []
    for name, folder, params in needs.data:
        where = folder or default_folder(name)
        if where and present_in(name, Path(where).expanduser()):
            continue  # its files are there: loading them all (minutes for JPEGs) can wait
        try:
            load_dataset(name, folder or None, **dict(params))
        except Exception as e:  # whatever stops a run from reading it
            missing.append(f"{name}: {e}")
    folder = Path(needs.folder)
    seen = folder.is_dir()
    scratch = tempfile.gettempdir()  # where a run goes without a shared filesystem
    return {
        "node": ray.get_runtime_context().get_node_id(),
        "host": platform.node(),
        "code": str(Path(fedretain.__file__).parent),
        **versions(),
        "missing": missing,
        "folder": seen,
        "shares": seen and (not needs.token or Path(needs.token).exists()),
        "free": shutil.disk_usage(folder).free if seen else None,
        "scratch": scratch,
        "scratch_free": shutil.disk_usage(scratch).free,
    }


def release(version: str) -> str:
    """A version without its local part: torch 2.13.0+cpu and 2.13.0+cu128 are one release."""
    return version.split("+", 1)[0]


def problems(
    report: dict[str, Any], own: dict[str, str], folder: str, storage: str = "shared"
) -> list[str]:
    """What keeps a node (its :func:`inspect_node` report) from the study: versions other than
    the caller's ``own``, data it cannot load, and, where the runs write to the shared
    ``folder`` (``storage``), that folder not shared with the caller or nearly full; where
    they go through Ray (``storage="ray"``), its scratch disk nearly full."""
    found = [
        f"{key} {report.get(key)} (the caller has {own[key]})"
        for key in ("fedretain", "torch", "numpy")
        if release(str(report.get(key))) != release(own[key])
    ]
    if report.get("python", "").split(".")[:2] != own["python"].split(".")[:2]:
        found.append(f"Python {report.get('python')} (the caller has {own['python']})")
    found += [f"cannot load {m}" for m in report.get("missing", [])]
    if storage == "ray":
        free, where = report.get("scratch_free"), report.get("scratch")
    elif not report.get("shares", report.get("folder")):
        seen = "sees another folder at" if report.get("folder") else "does not see"
        found.append(
            f"{seen} {folder}: with --storage shared, --out must be on a filesystem every node "
            "shares with the caller (--storage ray sends the runs' folders through Ray)"
        )
        return found
    else:
        free, where = report.get("free"), folder
    if free is not None and free < MIN_FREE_BYTES:
        found.append(f"{free / 2**20:.0f} MiB free at {where} (1 GiB at least)")
    return found


def shipped_env(ship: bool) -> dict[str, Any]:
    """The ``runtime_env`` of a study's Ray job: the caller's fedretain package, and its
    version (the metadata of an installed package does not travel), unless ``ship`` is
    False."""
    if not ship:
        return {}
    from fedretain import __version__

    package = Path(sys.modules["fedretain"].__file__).parent
    return {
        "py_modules": [str(package)],
        "excludes": ["__pycache__", "*.pyc"],
        "env_vars": {SHIPPED: __version__},
    }


def fitting(ray: Any, run_cpus: float, run_gpus: float) -> list[dict[str, Any]]:
    """The live nodes that can hold one run."""
    return [
        n
        for n in ray.nodes()
        if n.get("Alive", True)
        and n.get("Resources", {}).get("CPU", 0) >= run_cpus
        and n.get("Resources", {}).get("GPU", 0) >= run_gpus
    ]


def check_nodes(
    ray: Any,
    needs: Needs,
    cluster: Any,
    env: dict[str, Any],
    echo: Callable[[str], None] = print,
    timeout: float = CHECK_SECONDS,
) -> tuple[dict[str, str], str]:
    """Check every node that can hold a run (:func:`inspect_node`, one task pinned to each);
    return the node ids set aside, each with its reasons (one line each said so), and where
    the runs write: ``cluster.storage``, or for ``auto`` the shared folder where every node
    answering shares it with the caller, else through Ray (a line says so). None passes: a
    :class:`~fedretain.errors.ConfigError`, unless the cluster autoscales."""
    own = versions()
    if env:  # the nodes run the caller's code: its version, not the one they have installed
        own["fedretain"] = env["env_vars"][SHIPPED]
    nodes = fitting(ray, cluster.run_cpus, cluster.run_gpus)
    task = ray.remote(inspect_node)
    refs = {
        task.options(num_cpus=0, label_selector={NODE_LABEL: n["NodeID"]}).remote(needs): n
        for n in nodes
    }
    ready, late = ray.wait(list(refs), num_returns=len(refs), timeout=timeout) if refs else ([], [])
    aside, reports = {}, {}
    for ref in late:
        ray.cancel(ref, force=True)
        aside[refs[ref]["NodeID"]] = f"did not answer its check within {timeout:g} s"
    for ref in ready:
        try:
            reports[refs[ref]["NodeID"]] = ray.get(ref)
        except Exception as e:  # the check could not even run there
            aside[refs[ref]["NodeID"]] = " ".join(str(e).split())[:300]
    storage = cluster.storage
    apart = [r["host"] for r in reports.values() if not r.get("shares")]
    if storage == "auto":
        storage = "ray" if apart else "shared"
        if apart:
            echo(
                f"{len(apart)} node(s) ({', '.join(sorted(set(apart))[:3])}) do not share "
                f"{needs.folder} with the caller: the runs' folders come back through Ray's "
                "object store (--storage ray)"
            )
    for node, report in reports.items():
        found = problems(report, own, needs.folder, storage)
        if found:
            aside[node] = "; ".join(found)
    for node in nodes:
        if node["NodeID"] in aside:
            where = node.get("NodeManagerHostname") or node.get("NodeManagerAddress", "?")
            echo(f"node {where} ({node['NodeID'][:8]}) set aside: {aside[node['NodeID']]}")
    if nodes and len(aside) == len(nodes) and not cluster.autoscaling:
        raise ConfigError(
            f"no node of the Ray cluster passed the checks ({len(nodes)} set aside, each line "
            "above naming why): fix what they name, then run the same command again"
        )
    return aside, storage


def excluding(aside: dict[str, str]) -> dict[str, Any]:
    """Task options that keep a task off the nodes set aside."""
    return {"label_selector": {NODE_LABEL: f"!in({','.join(sorted(aside))})"}} if aside else {}


def this_node() -> tuple[str, str]:
    """The Ray node id and host name of the task calling it (no id outside Ray)."""
    import ray

    node = ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    return node or "", platform.node()


__all__ = [
    "Needs",
    "NodeFault",
    "check_nodes",
    "excluding",
    "inspect_node",
    "needs_of",
    "node_fault",
    "problems",
    "shipped_env",
]
