"""Runs per hour of a study on a local Ray cluster of 1, 2, ... worker nodes, beside the local
mode (``--jobs``), and the arithmetic of a study on a cluster of GPUs.

The study: ``fedretain sweep`` of the main job's setting (``experiments/fmnist_pathological.toml``,
``--rounds`` rounds each) over four methods and ``--seeds`` seeds. For each count N of
``--workers``, a fresh local cluster (``ray.cluster_utils.Cluster``: a head node without CPUs,
so that only the worker nodes run, and N worker nodes of one CPU each, real raylet processes on
this machine) runs the study into a fresh folder with ``--ray``; the local mode runs it with
``--jobs N``. Each measurement starts from an empty folder; the study's wall time includes the
start of Ray's workers (not of the cluster) and the report.

    .venv/bin/python benchmarks/ray_scaling.py --workers 1,2 --rounds 10 --seeds 2

``--project SECONDS,...`` prints, instead, the makespan of a study whose runs take those many
seconds each on one GPU when ``--slots`` of them run at a time (e.g. 8 GPUs x 4 runs per GPU
with ``--run-gpus 0.25``): the costliest first, each to the first free slot (the order the
study starts them in), assuming runs sharing a GPU do not slow each other (an upper bound on
the speed-up: measure a shared GPU before relying on it).
"""

from __future__ import annotations

import argparse
import heapq
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
METHODS = "fedavg,fedprox,scaffold,fedcurv"


def study(out: Path, rounds: int, seeds: int, *mode: str) -> list[str]:
    """The study's command line into ``out``, with the mode's options (``--jobs N``, ``--ray``)."""
    return [
        sys.executable,
        "-m",
        "fedretain",
        "sweep",
        str(ROOT / "experiments" / "fmnist_pathological.toml"),
        f"rounds={rounds}",
        "diagnostics=[]",
        "--grid",
        f"algorithm={METHODS}",
        "--seeds",
        str(seeds),
        "--out",
        str(out),
        *mode,
    ]


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return time.perf_counter() - start


def measure(workers: list[int], rounds: int, seeds: int) -> list[tuple[str, int, float]]:
    """(mode, workers, wall seconds) of the study in each mode."""
    from ray.cluster_utils import Cluster

    rows = []
    scratch = Path(tempfile.mkdtemp(prefix="ray_scaling-"))
    try:
        for n in workers:
            out = scratch / f"local-{n}"
            rows.append(("local --jobs", n, timed(study(out, rounds, seeds, "--jobs", str(n)))))
            print(rows[-1], flush=True)
            cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
            try:
                for _ in range(n):
                    cluster.add_node(num_cpus=1)
                cluster.wait_for_nodes()
                out = scratch / f"ray-{n}"
                rows.append(("Ray", n, timed(study(out, rounds, seeds, "--ray", cluster.address))))
                print(rows[-1], flush=True)
            finally:
                cluster.shutdown()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return rows


def makespan(seconds: list[float], slots: int) -> float:
    """The study's wall time with ``slots`` runs at a time, the costliest first."""
    free = [0.0] * slots
    for s in sorted(seconds, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + s)
    return max(free)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", default="1,2", help="worker counts (and --jobs counts)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--project", help="seconds of each run on one GPU, comma-separated")
    p.add_argument("--slots", type=int, default=32, help="runs at a time (GPUs x runs per GPU)")
    args = p.parse_args()
    if args.project:
        seconds = [float(s) for s in args.project.split(",")]
        span = makespan(seconds, args.slots)
        print(f"{len(seconds)} runs, {sum(seconds) / 3600:.2f} GPU-hours in all")
        print(f"{args.slots} at a time: {span / 3600:.2f} h ({sum(seconds) / span:.1f}x one slot)")
        return
    workers = [int(w) for w in args.workers.split(",")]
    runs = len(METHODS.split(",")) * args.seeds
    rows = measure(workers, args.rounds, args.seeds)
    print(f"\n{runs} runs of {args.rounds} rounds\n")
    print("| mode | workers | wall s | runs per hour |")
    print("|---|---|---|---|")
    for mode, n, wall in rows:
        print(f"| {mode} | {n} | {wall:.1f} | {runs / wall * 3600:.0f} |")


if __name__ == "__main__":
    main()
