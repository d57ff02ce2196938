"""Studies on a Ray cluster (``--ray``): a local cluster on loopback (a head that runs nothing,
one worker node of one CPU, real raylet processes) runs a ``scale=ci`` preset and a sweep."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest.mock import patch

import pytest

from fedretain.cli import main
from fedretain.errors import ConfigError
from fedretain.studies.reproduce import RayCluster, reproduce
from fedretain.studies.reproduce.cluster import StalledError, no_node_fits, node_paths
from fedretain.studies.reproduce.jobs import plan_section, run_task
from fedretain.studies.reproduce.nodes import NodeFault

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

FMNIST = Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists()
needs_fmnist = pytest.mark.skipif(not FMNIST, reason="apt-get install dataset-fashion-mnist")
PRESET = "fedcurv-table1"
NICENESS = "RAY_worker_niceness"


def runs_at_ci(tmp_path: Path) -> int:
    """How many runs PRESET plans at scale=ci (its plan, not a number kept here)."""
    return len(plan_section(PRESET, tmp_path, "ci", None, [], [], tmp_path, False).jobs)


@pytest.fixture(scope="module")
def cluster():
    """A head node without CPUs (so every run goes to a worker node) and one worker node. Its
    workers run at the tests' priority: Ray's default (nice 15) starves them beside the suite's
    other worker, or anything else busy on the machine."""
    niceness = os.environ.get(NICENESS)
    os.environ[NICENESS] = "0"  # read by the raylets as they start
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    try:
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()
        os.environ.pop(NICENESS, None)
        if niceness is not None:
            os.environ[NICENESS] = niceness


def normalised(report: Path) -> str:
    """A report without what differs between two invocations: its folder, the training time."""
    text = report.read_text().replace(str(report.parent), "OUT")
    return re.sub(r"[0-9.]+ s of training", "T s of training", text)


def files_of(out: Path) -> dict[str, tuple[int, bytes]]:
    """Every finished run's results files: (modification time, contents)."""
    found = {}
    for summary in out.glob("**/summary.json"):
        for name in ("summary.json", "metrics.jsonl"):
            path = summary.parent / name
            found[str(path)] = (path.stat().st_mtime_ns, path.read_bytes())
    return found


@needs_fmnist
def test_a_preset_on_a_ray_cluster_writes_the_local_report(cluster, tmp_path):
    """Locally, on Ray through the shared filesystem, and on Ray with each run's folder sent
    back through Ray's object store (--storage ray): one report."""
    local = tmp_path / "local"
    reproduce([PRESET], local, scale="ci", echo=lambda s: None)
    runs = runs_at_ci(tmp_path)
    for storage in ("auto", "ray"):
        on_ray, lines = tmp_path / storage, []
        on = RayCluster(cluster.address, storage=storage)
        done = reproduce([PRESET], on_ray, scale="ci", echo=lines.append, cluster=on)
        assert (done.failed, done.diverged) == (0, 0)
        assert any(f"{runs} run(s) on Ray" in line for line in lines)
        assert not any("set aside" in line or "do not share" in line for line in lines)
        assert not ray.is_initialized()  # the study's connection is closed after it
        assert normalised(on_ray / "report.md") == normalised(local / "report.md")
        for png in local.glob("*.png"):
            assert (on_ray / png.name).read_bytes() == png.read_bytes()
        # the runs ran on the worker node (another process), each recording its CPU there
        status = (on_ray / "e-10" / "fedavg" / "seed0" / "status.json").read_text()
        assert '"state": "finished"' in status and '"cpu"' in status
        for summary in local.glob("**/summary.json"):  # every run's numbers came back whole
            there = on_ray / summary.parent.relative_to(local)
            metrics = (there / "metrics.jsonl").read_text()
            assert len(metrics.splitlines()) == len(
                (summary.parent / "metrics.jsonl").read_text().splitlines()
            )
            assert (there / "checkpoint" / "meta.json").is_file()
    # the same command again: every run finished, nothing to send to Ray
    again: list[str] = []
    done = reproduce([PRESET], on_ray, scale="ci", echo=again.append, cluster=on)
    assert (done.failed, done.diverged) == (0, 0) and not ray.is_initialized()
    assert f"{runs} run(s) already finished: skipped" in again


@needs_fmnist
def test_a_study_that_cannot_start_says_so_then_stops_after_its_stall_limit(cluster, tmp_path):
    """The worker's one CPU held by another task: the study's runs cannot start. The driver
    says how many are left while it waits and, at --stall-after, stops with one line and
    cancels them; nothing of them is lost (the same command continues them)."""
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    blocker = ray.remote(num_cpus=1)(lambda: time.sleep(120)).remote()
    try:
        time.sleep(1)  # the blocker holds the CPU
        lines: list[str] = []
        slow = RayCluster(cluster.address, progress_every=0.5, stall_after=3)
        with pytest.raises(StalledError, match=r"no run finished for [34] s \(--stall-after 3\)"):
            reproduce([PRESET], tmp_path / "stalled", scale="ci", echo=lines.append, cluster=slow)
        waiting = [line for line in lines if line.startswith("waiting: 0 of ")]
        assert waiting and "pending or running" in waiting[-1]
    finally:
        ray.cancel(blocker, force=True)
        if ray.is_initialized():
            ray.shutdown()
    assert not list((tmp_path / "stalled").glob("**/summary.json"))


def driver(out: Path, address: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "fedretain.cli",
        "reproduce",
        PRESET,
        *extra,
        "--out",
        str(out),
        "--scale",
        "ci",
        "--ray",
        address,
    ]


def unfinished(out: Path) -> list[Path]:
    """The runs part way: a checkpoint, no summary."""
    started = {c.parent.parent for c in out.glob("**/checkpoint/meta.json")}
    return [f for f in started if not (f / "summary.json").exists()]


def mid_study(out: Path) -> bool:
    """A run finished and another one part way."""
    return any(out.glob("**/summary.json")) and bool(unfinished(out))


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (from /proc)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found += children
        todo += children
    return found


def kill_node(cluster, node) -> None:
    """A node's sudden death, its runs with it: its processes are frozen at once (a run at 25 ms
    a round would otherwise finish while Ray takes the node down), then killed."""
    (raylet,) = node.all_processes["raylet"]
    frozen = descendants(raylet.process.pid)
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGSTOP)
    cluster.remove_node(node, allow_graceful=False)
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # a minute of real processes; a preset on the cluster stays in the default
@needs_fmnist
def test_a_lost_worker_costs_only_its_unfinished_runs(cluster, tmp_path):
    out = tmp_path / "study"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # a checkpoint every round: the run found part way has rounds to go when its node dies
    settings = ("rounds=12", "checkpoint_every=1")
    proc = subprocess.Popen(
        driver(out, cluster.address, *settings),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 180
        while not mid_study(out) and time.monotonic() < deadline:
            time.sleep(0.01)
        (worker,) = [n for n in cluster.worker_nodes]
        kill_node(cluster, worker)  # the node dies mid-study
        time.sleep(1)
        proc.send_signal(signal.SIGKILL)  # and so does the caller
    finally:
        proc.wait()
    before = files_of(out)
    runs = runs_at_ci(tmp_path / "plan")
    assert 1 <= len(before) // 2 < runs
    assert unfinished(out), "no run was part way when its node died"
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    again = subprocess.run(
        driver(out, cluster.address, *settings),
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert again.returncode == 0, again.stderr
    assert f"{len(before) // 2} run(s) already finished: skipped" in again.stdout
    assert ": continued " in again.stdout  # the run in flight went on from its checkpoint
    after = files_of(out)
    assert len(after) == 2 * runs
    for path, (mtime, data) in before.items():  # finished runs were not run again
        assert after[path] == (mtime, data), path
    assert f"Runs: {runs} of {runs} finished" in (out / "report.md").read_text()


def test_runs_holding_part_of_a_gpu_plan_for_that_part():
    from fedretain.studies.reproduce.cluster import cluster_settings

    def settings(gpus: float, extra: list[str]) -> list[str]:
        with patch("fedretain.studies.reproduce.cluster.closed_port", return_value=""):
            return cluster_settings(RayCluster(run_gpus=gpus), 1, extra, lambda s: None)

    assert settings(0.25, []) == ["gpu_share=0.25", "device=cuda"]
    assert settings(1, []) == ["device=cuda"]
    assert settings(0.5, ["gpu_share=1", "device=cuda:0"]) == ["gpu_share=1", "device=cuda:0"]
    assert settings(0, ["lr=0.1"]) == ["lr=0.1"]


def test_cluster_options_are_checked(tmp_path, capsys):
    with pytest.raises(ConfigError, match="run-cpus"):
        RayCluster(run_cpus=0)
    with pytest.raises(ConfigError, match="whole number"):
        RayCluster(run_gpus=1.5)
    with pytest.raises(ConfigError, match="max-retries"):
        RayCluster(retries=-1)
    assert main(["reproduce", "demo", "--out", str(tmp_path), "--run-gpus", "1"]) == 2
    assert "give --ray with them" in capsys.readouterr().err
    assert main(["reproduce", "demo", "--out", str(tmp_path), "--max-retries", "1"]) == 2
    assert "give --ray with them" in capsys.readouterr().err
    for alone in (["--autoscaling"], ["--no-ship-code"], ["--storage", "ray"]):
        assert main(["reproduce", "demo", "--out", str(tmp_path), *alone]) == 2
        assert "give --ray with them" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--storage must be one of auto, shared, ray"):
        RayCluster(storage="s3")
    args = ["reproduce", "demo", "--out", str(tmp_path), "--ray", "--jobs", "2"]
    assert main(args) == 2
    assert "--run-cpus and --run-gpus" in capsys.readouterr().err
    args = ["reproduce", "demo", "--out", str(tmp_path), "--ray", "127.0.0.1:1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot reach the Ray cluster at 127.0.0.1:1" in err
    assert "ray start --head" in err


def test_a_node_that_does_not_see_the_study_folder_says_so(tmp_path):
    with pytest.raises(NodeFault, match=r"does not see .*every node sees at the same path"):
        run_task(["rounds=1"], str(tmp_path / "made-elsewhere"), False)
    assert not (tmp_path / "made-elsewhere").exists()  # nothing written beside the share


def test_data_folders_reach_the_nodes_as_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert node_paths(["data", "cifar10=../c"]) == [
        str(tmp_path / "data"),
        f"cifar10={tmp_path.parent / 'c'}",
    ]


def test_flower_runs_are_refused_before_ray_starts(tmp_path, capsys):
    args = ["sweep", "dataset=digits", "model=mlp", "engine=flower", "--grid", "lr=0.1,0.2"]
    assert main([*args, "--out", str(tmp_path), "--ray"]) == 2
    err = capsys.readouterr().err
    assert "engine=flower runs its clients on a Ray of its own" in err and "1 other" in err
    assert not ray.is_initialized()


def _node(cpus: float, gpus: float = 0, alive: bool = True) -> dict:
    return {"Alive": alive, "Resources": {"CPU": cpus, **({"GPU": gpus} if gpus else {})}}


def test_a_run_must_fit_one_node_not_the_clusters_totals():
    """A task runs on one node: two 1-GPU nodes hold runs of 1 GPU, never one of 2 (which
    the totals would admit and Ray would leave waiting for ever); dead nodes count for
    nothing."""
    two_gpus = [_node(8, 1), _node(8, 1)]
    assert no_node_fits(two_gpus, 1, 1) == ""
    assert no_node_fits(two_gpus, 1, 0.25) == ""
    short = no_node_fits(two_gpus, 1, 2)
    assert "no node of the Ray cluster can hold one run of 1 CPU and 2 GPU" in short
    assert "the largest: 8 CPU, 1 GPU; 8 CPU, 1 GPU" in short
    assert no_node_fits([_node(2), _node(2)], 3, 0).startswith("no node")
    assert no_node_fits([_node(16, 4, alive=False), _node(2)], 4, 0).startswith("no node")
    assert "none alive" in no_node_fits([_node(16, alive=False)], 1, 0)


def test_an_autoscaling_cluster_is_accepted_with_a_note_where_no_node_fits_yet(monkeypatch):
    from fedretain.studies.reproduce.cluster import connect

    # a connected cluster of one 1-GPU node
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.setattr(ray, "nodes", lambda: [_node(8, 1)])
    lines: list[str] = []
    with pytest.raises(ConfigError, match="add a node that large; or give --autoscaling"):
        connect(RayCluster(run_gpus=2), lines.append)
    assert connect(RayCluster(run_gpus=2, autoscaling=True), lines.append) is ray
    assert lines == [
        "note: no node of the Ray cluster can hold one run of 1 CPU and 2 GPU yet: with "
        "--autoscaling the runs wait until the cluster adds a node that large (--stall-after "
        "bounds the wait)"
    ]
    assert connect(RayCluster(run_gpus=1, autoscaling=True), lines.append) is ray
    assert len(lines) == 1  # a node fits: nothing to note


@pytest.mark.slow  # a cluster of its own and a study of real processes: about two minutes
@needs_fmnist
def test_a_node_lost_under_a_live_driver_costs_only_the_rounds_since_its_checkpoints(
    tmp_path, monkeypatch
):
    """Two worker nodes; one dies mid-study while the driver goes on: the study finishes on the
    other node, the runs the dead one held continue there from their checkpoints, and the
    report is complete."""
    monkeypatch.setenv(NICENESS, "0")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [c.add_node(num_cpus=1) for _ in range(2)]
    c.wait_for_nodes()
    out = tmp_path / "study"
    log = tmp_path / "driver.log"
    try:
        with open(log, "w") as sink:
            proc = subprocess.Popen(
                driver(out, c.address, "rounds=12", "checkpoint_every=1"),
                env={**os.environ, "OMP_NUM_THREADS": "1"},
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
            try:
                deadline = time.monotonic() + 300
                while len(unfinished(out)) < 2 and time.monotonic() < deadline:
                    time.sleep(0.01)  # each node part way through a run
                held = unfinished(out)
                kill_node(c, nodes[1])  # the driver lives on
                assert proc.wait(timeout=900) == 0, log.read_text()[-3000:]
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    finally:
        c.shutdown()
    assert len(held) == 2, "the nodes were not both part way through a run"
    runs = runs_at_ci(tmp_path / "plan")
    assert len(files_of(out)) == 2 * runs  # every run finished
    assert f"Runs: {runs} of {runs} finished" in (out / "report.md").read_text()
    # a run the dead node held went on from its checkpoint on the node left: its log says so
    resumed = [f for f in held if "resuming " in (f / "run.log").read_text()]
    assert resumed, [f.name for f in held]


def own_mounts() -> bool:
    """Whether this machine lets a process see its own mounts (``unshare -m``: root, or a
    user namespace)."""
    try:
        return subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0
    except OSError:
        return False


@pytest.mark.slow  # a cluster of its own, a node in its own mount namespace: about a minute
@needs_fmnist
@pytest.mark.skipif(not own_mounts(), reason="unshare -m is not permitted here")
def test_a_node_that_does_not_share_the_study_folder_sends_the_runs_back_through_ray(
    tmp_path, monkeypatch
):
    """The worker node's raylet runs in its own mount namespace with an empty tmpfs over the
    folder that holds --out: it cannot see what the driver writes, nor the driver what it
    writes there. The check finds it does not share the folder, the runs' folders come back
    through Ray's object store, and the report is the local one."""
    local, out = tmp_path / "local", tmp_path / "study"
    reproduce([PRESET], local, scale="ci", echo=lambda s: None)
    monkeypatch.setenv(NICENESS, "0")
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    ray_bin = Path(sys.executable).parent / "ray"
    script = (
        f"mount -t tmpfs tmpfs {tmp_path} && exec {ray_bin} start --address {c.address} "
        "--num-cpus 1 --block"
    )
    node = subprocess.Popen(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ray.init(address=c.address, log_to_driver=False, configure_logging=False)
        deadline = time.monotonic() + 60
        while len([n for n in ray.nodes() if n["Alive"]]) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        ray.shutdown()
        lines: list[str] = []
        done = reproduce(
            [PRESET], out, scale="ci", echo=lines.append, cluster=RayCluster(c.address)
        )
    finally:
        if ray.is_initialized():
            ray.shutdown()
        os.killpg(node.pid, signal.SIGTERM)
        node.wait(timeout=60)
        c.shutdown()
    assert (done.failed, done.diverged) == (0, 0)
    assert any("do not share" in line and "through Ray's object store" in line for line in lines)
    assert normalised(out / "report.md") == normalised(local / "report.md")
    runs = runs_at_ci(tmp_path / "plan")
    assert len(files_of(out)) == 2 * runs


def test_a_run_lost_on_a_ray_node_names_no_machine_of_the_caller(tmp_path):
    """A run whose Ray worker died (retries spent) left no status: the caller writes one, but
    not with its own CPU, which the run never ran on (locally it does: the same machine)."""
    from fedretain.studies.presets.plan import RunSpec
    from fedretain.studies.reproduce import jobs

    job = jobs.Job("p", RunSpec("s", "m", 0, {}), ["rounds=1"], tmp_path / "run", "fresh")
    lost = RuntimeError("lost on the Ray cluster: the worker died")
    for cluster, has_cpu in ((RayCluster(), False), (None, True)):
        job.folder.mkdir(exist_ok=True)
        with patch.object(jobs, "run_each", lambda *a: iter([(job, lost)])):
            errors = jobs.run_jobs([job], 1, lambda line: None, cluster)
        status = jobs.read_status(job.folder)
        assert errors == {job.folder: "RuntimeError: lost on the Ray cluster: the worker died"}
        assert status["state"] == "failed" and ("cpu" in status) == has_cpu


@pytest.mark.slow  # a cluster of its own with a Ray Client server: about a minute
@needs_fmnist
def test_a_study_through_ray_client_gives_the_local_report(tmp_path, monkeypatch):
    """``--ray ray://HOST:10001 --storage ray``: the caller is a Ray Client, not a node; the
    code is shipped with the client's job, the runs' folders come back through Ray, and the
    report is the local one."""
    local, out = tmp_path / "local", tmp_path / "client"
    reproduce([PRESET], local, scale="ci", echo=lambda s: None)
    monkeypatch.setenv(NICENESS, "0")
    port = 10001 + os.getpid() % 1000  # another worker's cluster may hold 10001
    c = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 0, "ray_client_server_port": port}
    )
    c.add_node(num_cpus=1)
    c.wait_for_nodes()
    try:
        on = RayCluster(f"ray://127.0.0.1:{port}", storage="ray")
        done = reproduce([PRESET], out, scale="ci", echo=lambda s: None, cluster=on)
    finally:
        c.shutdown()
    assert (done.failed, done.diverged) == (0, 0)
    assert normalised(out / "report.md") == normalised(local / "report.md")
    assert len(files_of(out)) == 2 * runs_at_ci(tmp_path / "plan")
