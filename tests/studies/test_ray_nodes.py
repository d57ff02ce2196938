"""A study's Ray nodes (studies/reproduce/nodes.py): a node's errors told from a run's own,
what sets a node aside, and on a local cluster of real raylets (a head that runs nothing, two
worker nodes of one CPU, one of them misconfigured): the caller's code shipped to the nodes, the
misconfigured node set aside before the study starts, and a run that fails for a reason of its
node tried again on the other one."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import platform
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import fedretain
from fedretain.errors import ConfigError, DataError, DivergenceError, OutputError
from fedretain.studies.reproduce import RayCluster
from fedretain.studies.reproduce import nodes as nodes_module
from fedretain.studies.reproduce.cluster import ray_each
from fedretain.studies.reproduce.jobs import run_task
from fedretain.studies.reproduce.nodes import (
    MIN_FREE_BYTES,
    Needs,
    NodeFault,
    check_nodes,
    inspect_node,
    node_fault,
    problems,
    shipped_env,
    this_node,
    versions,
)

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

FAULTY = "FEDRETAIN_TEST_FAULTY_NODE"  # set in the environment of one node's raylet


def test_a_nodes_errors_are_told_from_a_runs_own():
    assert node_fault(torch.cuda.OutOfMemoryError("CUDA out of memory")) == "CUDA out of memory"
    assert node_fault(MemoryError()) == "out of memory"
    assert node_fault(ModuleNotFoundError("no", name="opacus")) == "cannot import opacus"
    full = OSError(errno.ENOSPC, "No space left on device", "/shared/run/metrics.jsonl")
    assert node_fault(full) == "No space left on device (/shared/run/metrics.jsonl)"
    assert node_fault(OSError(errno.ESTALE, "Stale file handle")).startswith("Stale file")
    assert node_fault(OutputError("cannot write /shared/run: Read-only file system"))
    # errors a run would raise on any node stay final
    for own in (
        DivergenceError("loss is nan"),
        ConfigError("unknown key"),
        DataError("cannot split 10 samples over 20 clients"),
        ValueError("a bug"),
        OSError(errno.ENOENT, "No such file or directory", "x"),
    ):
        assert node_fault(own) == "", own


def test_a_run_out_of_host_memory_is_a_fault_of_its_node(tmp_path):
    """A real allocation the host refuses (an MLP layer of 64 x 1e15 floats: 256 PB, beyond any
    address space, so refused however the host overcommits memory), in a run as a Ray task
    would run it: the error names the node and the cause, and status.json says failed."""
    args = ["dataset=digits", "model=mlp", "model.hidden=[1000000000000000]", "rounds=1"]
    with pytest.raises(NodeFault, match="out of memory") as caught:
        run_task(args, str(tmp_path), False)
    assert caught.value.reason == "out of memory" and caught.value.host == this_node()[1]
    assert '"state": "failed"' in (tmp_path / "status.json").read_text()


def test_a_node_fault_crosses_processes_whole():
    fault = pickle.loads(pickle.dumps(NodeFault("ab" * 28, "gpu-7", "CUDA out of memory")))
    assert (fault.node, fault.host, fault.reason) == ("ab" * 28, "gpu-7", "CUDA out of memory")
    assert str(fault) == "node gpu-7 (abababab): CUDA out of memory"


def test_what_sets_a_node_aside():
    own = {"fedretain": "0.1.0", "torch": "2.13.0+cpu", "numpy": "2.1.3", "python": "3.11.7"}
    fine = {**own, "torch": "2.13.0+cu128", "python": "3.11.2", "missing": [], "folder": True}
    fine["free"] = MIN_FREE_BYTES
    assert problems(fine, own, "/shared/study") == []  # a CUDA build of the same release
    assert problems({**fine, "torch": "2.12.1"}, own, "/s") == [
        "torch 2.12.1 (the caller has 2.13.0+cpu)"
    ]
    assert problems({**fine, "python": "3.12.0"}, own, "/s") == [
        "Python 3.12.0 (the caller has 3.11.7)"
    ]
    assert problems({**fine, "missing": ["mnist: no files"]}, own, "/s") == [
        "cannot load mnist: no files"
    ]
    (unseen,) = problems({**fine, "folder": False, "free": None}, own, "/shared/study")
    assert unseen.startswith("does not see /shared/study: with --storage shared, --out must be")
    # the folder there, but not the caller's token in it: a disk of the node's own
    (apart,) = problems({**fine, "shares": False}, own, "/shared/study")
    assert apart.startswith("sees another folder at /shared/study: with --storage shared")
    (full,) = problems({**fine, "free": 2**20}, own, "/s")
    assert full == "1 MiB free at /s (1 GiB at least)"
    # through Ray, the folder does not matter; the scratch disk does
    ray_only = {**fine, "folder": False, "shares": False, "scratch": "/tmp", "scratch_free": 1}
    assert problems(ray_only, own, "/s", "ray") == ["0 MiB free at /tmp (1 GiB at least)"]
    assert problems({**ray_only, "scratch_free": MIN_FREE_BYTES}, own, "/s", "ray") == []


def write_mnist(folder: Path, n: int = 60) -> None:
    """Small MNIST files in the IDX format (what `fedretain data get mnist` leaves)."""
    import gzip

    import numpy as np

    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, count in (("train", n), ("t10k", n // 2)):
        images = rng.integers(0, 256, (count, 28, 28), dtype=np.uint8)
        labels = (np.arange(count) % 10).astype(np.uint8)
        name = f"{prefix}-images-idx3-ubyte.gz"
        header = (0x803).to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in images.shape)
        (folder / name).write_bytes(gzip.compress(header + images.tobytes()))
        header = (0x801).to_bytes(4, "big") + count.to_bytes(4, "big")
        name = f"{prefix}-labels-idx1-ubyte.gz"
        (folder / name).write_bytes(gzip.compress(header + labels.tobytes()))


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """A head without CPUs and two worker nodes of one CPU: ``good`` with the data home that
    holds MNIST, ``bad`` with an empty one (and a variable naming it the faulty node). Workers
    at the tests' priority (see test_ray_studies.py)."""
    home = tmp_path_factory.mktemp("data")
    write_mnist(home / "mnist")
    empty = tmp_path_factory.mktemp("empty")
    saved = {k: os.environ.get(k) for k in ("RAY_worker_niceness", "FEDRETAIN_DATA_HOME")}
    os.environ.update(RAY_worker_niceness="0", FEDRETAIN_DATA_HOME=str(home))
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    good = c.add_node(num_cpus=1)
    bad = c.add_node(num_cpus=1, env_vars={"FEDRETAIN_DATA_HOME": str(empty), FAULTY: "1"})
    c.wait_for_nodes()
    here = os.getcwd()
    os.chdir(empty)  # Ray puts the caller's folder on the tasks' path: not the source tree's
    try:
        ray.init(
            address=c.address,
            runtime_env=shipped_env(True),
            log_to_driver=False,
            configure_logging=False,
        )
    finally:
        os.chdir(here)
    try:
        yield SimpleNamespace(cluster=c, good=good.node_id, bad=bad.node_id)
    finally:
        ray.shutdown()
        c.shutdown()
        for key, value in saved.items():
            os.environ.pop(key, None)
            if value is not None:
                os.environ[key] = value


def test_the_callers_code_goes_to_the_nodes_and_a_node_without_the_data_is_set_aside(
    nodes, tmp_path, monkeypatch
):
    needs = Needs((("mnist", "", ()),), str(tmp_path))
    report = ray.get(
        ray.remote(inspect_node)
        .options(num_cpus=0, label_selector={"ray.io/node-id": nodes.good})
        .remote(needs)
    )
    # the task ran the package the caller shipped (unpacked by Ray), reporting its version
    assert report["code"] != str(Path(fedretain.__file__).parent)
    assert report["fedretain"] == fedretain.__version__
    assert report["missing"] == [] and report["folder"] and report["node"] == nodes.good
    lines: list[str] = []
    aside, storage = check_nodes(ray, needs, RayCluster(), shipped_env(True), lines.append)
    assert list(aside) == [nodes.bad] and storage == "shared"  # no token asked for: the folder
    (line,) = lines
    start = f"node {platform.node()} ({nodes.bad[:8]}) set aside: cannot load mnist: dataset mnist"
    assert line.startswith(start), line
    # versions are compared: to a caller of another torch release, every node differs
    monkeypatch.setattr(nodes_module, "versions", lambda: {**versions(), "torch": "1.0.0"})
    with pytest.raises(ConfigError, match="no node of the Ray cluster passed the checks"):
        check_nodes(ray, needs, RayCluster(), {}, lines.append)
    assert sum("(the caller has 1.0.0)" in line for line in lines[1:]) == 2


def faulty_run(args, folder, resume, study=None, deadline=None, folders=None, net=None):
    """A run that fails for a reason of its node on the faulty node (out of memory there), or
    with its own error where its args say so, and otherwise finishes."""
    if "seed=13" in args:  # the run that diverges
        raise DivergenceError("loss is nan")
    if os.environ.get(FAULTY):
        raise NodeFault(*this_node(), "out of memory")
    return {"line": f"ran on {this_node()[0]}"}


def job(folder: Path, *args: str) -> SimpleNamespace:
    return SimpleNamespace(
        folder=folder,
        args=["dataset=digits", *args],
        resume=False,
        spec=SimpleNamespace(study=None),
    )


def test_a_run_failing_for_its_node_goes_to_another_and_its_own_error_stays(nodes, tmp_path):
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the tasks are defined here
    todo = [job(tmp_path / f"run{i}") for i in range(4)] + [job(tmp_path / "own", "seed=13")]
    lines: list[str] = []
    # digits needs no files: both nodes pass their checks, and the faulty one fails its runs
    ran = ray_each(todo, RayCluster(retries=2), faulty_run, echo=lines.append)
    ended = {j.folder.name: result for j, result in ran}
    for i in range(4):  # each finished, on the good node
        assert ended[f"run{i}"] == {"line": f"ran on {nodes.good}"}
    assert isinstance(ended["own"], DivergenceError)  # not tried elsewhere
    moved = [line for line in lines if "set aside: out of memory" in line]
    assert moved and all(f"({nodes.bad[:8]})" in line for line in moved)
    assert all("tried again on another node (1 of 2)" in line for line in moved)


def received_net(args, folder, resume, study=None, deadline=None, folders=None, net=None):
    """What a task was sent of the study's FID feature network."""
    return {"line": "", "net": None if net is None else (net[0], hashlib.sha256(net[1]).digest())}


def test_a_studys_fid_network_is_made_once_by_the_caller_and_sent_to_each_run(nodes, tmp_path):
    fid = [
        "dataset=digits",
        "scenario=class_incremental",
        "scenario.tasks=2",
        "scenario.classes_per_task=2",
        "scenario.rounds_per_task=2",
        "rounds=4",
        "model=acgan",
        "replay=acgan",
        "diagnostics=generator_quality",
        f"diagnostics.cache_dir={tmp_path / 'cache'}",
    ]
    todo = [job(tmp_path / f"fid{i}", *fid, f"seed={i}") for i in range(2)]
    todo.append(job(tmp_path / "plain"))
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ended = {j.folder.name: r for j, r in ray_each(todo, RayCluster(), received_net, echo=print)}
    (cached,) = (tmp_path / "cache").iterdir()  # one network, made on the caller
    sent = (cached.name, hashlib.sha256(cached.read_bytes()).digest())
    assert ended["fid0"]["net"] == ended["fid1"]["net"] == sent
    assert ended["plain"]["net"] is None


def fails_after_a_checkpoint(
    args, folder, resume, study=None, deadline=None, folders=None, net=None
):
    """The real run task; on the faulty node the run pauses after its first round (its
    checkpoint sent back through Ray) and the node then fails it."""
    if os.environ.get(FAULTY):
        run_task([*args, "stop_after=0.001"], folder, resume, study, deadline, folders, net)
        raise NodeFault(*this_node(), "out of memory")
    return run_task(args, folder, resume, study, deadline, folders, net)


@pytest.mark.slow  # 17 s; the default suite sends a preset's folders through Ray (test_ray_studies)
def test_without_a_shared_filesystem_a_run_moved_off_a_failing_node_continues_exactly(
    nodes, tmp_path
):
    """Runs whose folders travel through Ray (--storage ray): a run the faulty node stopped
    after a checkpoint goes on from that checkpoint on the other node, and its numbers are
    those of a run never stopped."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    args = ["dataset=digits", "model=mlp", "rounds=4", "checkpoint_every=1", "clients=4"]
    args.append("clients_per_round=4")
    todo = [job(tmp_path / f"run{i}", *args, f"seed={i}") for i in range(3)]
    lines: list[str] = []
    through = RayCluster(retries=1, storage="ray")
    ran = ray_each(todo, through, fails_after_a_checkpoint, echo=lines.append)
    ended = {j.folder.name: result for j, result in ran}
    assert all("line" in r for r in ended.values()), ended
    assert any("set aside: out of memory; tried again" in line for line in lines)
    moved = [j for j in todo if "resuming " in (j.folder / "run.log").read_text()]
    assert moved, "no run went on from a checkpoint that came back"
    for j in moved:  # against the same run never stopped, as a task on the good node
        alone = tmp_path / f"alone-{j.folder.name}"
        alone.mkdir()
        on_good = {"num_cpus": 1, "label_selector": {"ray.io/node-id": nodes.good}}
        ray.get(ray.remote(run_task).options(**on_good).remote(j.args, str(alone), False))
        assert numbers(j.folder) == numbers(alone)


def numbers(folder: Path) -> list[dict]:
    """A run's metrics without its times."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if "seconds" not in k} for r in rows]


def test_what_comes_back_through_ray_stays_in_its_runs_folder(tmp_path):
    """drain (storage.py) writes what runs sent into their folders on the caller: a name that
    would leave its folder is ignored, a removed file goes with the folders it leaves empty."""
    from fedretain.studies.reproduce.storage import drain

    run = tmp_path / "study" / "run"
    sent = [  # what each take() returns: (folder, files changed, files removed) per push
        [(str(run), {"checkpoint/clients-2/0.safetensors": b"x", "metrics.jsonl": b"{}"}, [])],
        [(str(run), {"../../outside": b"y", "/etc/x": b"z"}, [])],
    ]

    class Outbox:  # the actor's take(), as ray.get returns it
        take = SimpleNamespace(remote=lambda: sent.pop(0))

    through = SimpleNamespace(get=lambda x: x)
    assert drain(through, Outbox) == 2
    assert (run / "checkpoint" / "clients-2" / "0.safetensors").read_bytes() == b"x"
    assert drain(through, Outbox) == 0 and not (tmp_path / "outside").exists()
    sent.append([(str(run), {}, ["checkpoint/clients-2/0.safetensors"])])
    assert drain(through, Outbox) == 1
    assert sorted(p.name for p in run.rglob("*")) == ["metrics.jsonl"]  # checkpoint/ emptied too
