"""Round time and peak memory as the work grows: clients per round, model size, per-client
state and the partition, one table per invocation.

Every measured point runs in its own process, one after another (never two at once), so that
its peak RSS (the child's ``ru_maxrss`` from ``os.wait4``: the high-water mark of its resident
memory, set-up and data included) belongs to that point alone. Federations are built through
fedretain's public API (``make_config`` + ``build_rounds``) on random images: a dataset
``scaling-random`` (uint8 images, random labels, ``partition=iid`` so that every client holds
exactly the same number of samples) is registered in the child process only. ``s/round`` is
the median of ``--rounds`` timed rounds after one warm-up round (which takes the start-up cost:
first calls, allocation). Every peak includes the interpreter with torch imported (about
230 MB on CPU; ``rss_start`` in the JSON). Machines drift between runs: compare rows within
one table only.

Tables (``--table``):

``clients``
    Clients per round 10 / 100 / 1,000 (every client in every round): the zoo ``mlp``
    (784-200-200-200-10), FedAvg, ``engine=vmap`` with its default chunking (sized to memory),
    60 samples per client of 1x28x28, 5 local steps of batch 10. Columns: clients per round,
    s/round, peak RSS MB.
``models``
    ``mlp``, ``cnn`` (FedReg's CNN) and ``resnet18`` (GroupNorm) on 3x32x32 inputs, 10 clients
    per round of 60 samples, 5 local steps of batch 10, FedAvg, ``engine=auto`` (the default; the
    engine it chose and why is printed). Columns: model, parameters, engine, s/round, peak RSS
    MB.
``state``
    SCAFFOLD's per-client state ``c_i`` for 100 / 10,000 / 100,000 clients in total, with
    ``store=memory`` and ``store=disk`` (float32; the disk store writes one safetensors file per
    client into a temporary folder, removed after the point). Model: ``mlp`` with one hidden
    layer of 8 units on 1x28x28 (6,370 parameters: 25 KB of state per client, 2.5 GB for
    100,000), 2 samples per client, 100 clients per round, 1 local step of batch 2,
    ``engine=vmap``. A store holds a state only for clients that have taken part, and training
    every one of 100,000 clients is not a bounded-time benchmark, so before the rounds the store
    is filled with every client's state as SCAFFOLD initialises it (``client_init``: zeros of
    the model's shape, exactly what a client that has not yet taken part is given): the point
    then holds N states, as if every client had taken part once. Timed: that fill (``fill
    s``) and the rounds (100 sampled clients read and write their states each round).
    Columns: store, clients, states held, fill s, s/round, peak RSS MB, state MB (the store's
    ``nbytes()``: tensor bytes in RAM, file bytes on disk).
``partition``
    ``partition=dirichlet`` with ``alpha=0.001`` (``min_samples=1``, unbalanced: the config's
    defaults) over 10,000 and 100,000 clients, through ``fedretain.data.partition
    .make_partition`` as the config calls it. Labels: Fashion-MNIST's 60,000 training labels
    (``/usr/share/datasets/fashion-mnist``; 60,000 random labels of 10 classes where that
    folder is missing), tiled to 6 labels per client when there are more clients than
    labels (a partition cannot have more clients than samples): 60,000 labels for 10,000
    clients, 600,000 for 100,000. Columns: clients, labels, seconds, peak RSS MB.

``--quick`` shrinks every table for a smoke run (clients per round 10/20/40 of 20 samples;
2 clients per round of 20 samples and 1 step for the models; 100/1,000 clients, 20 per round,
for the state; 100/1,000 clients for the partition). The commands, one per table (defaults:
3 timed rounds, 2 CPU threads, CPU):

    .venv/bin/python benchmarks/scaling.py --table clients --plot benchmarks/scaling_clients.png
    .venv/bin/python benchmarks/scaling.py --table models --plot benchmarks/scaling_models.png
    .venv/bin/python benchmarks/scaling.py --table state --plot benchmarks/scaling_state.png
    .venv/bin/python benchmarks/scaling.py --table partition --plot benchmarks/scaling_partition.png

Add ``--out FILE.json`` to keep the numbers, ``--device cuda`` for a GPU (the round tables).
Results go to benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_state import peak_rss_mb  # the benchmarks folder is not a package

DATASET = "scaling-random"
FASHION = Path("/usr/share/datasets/fashion-mnist")
TABLES = ("clients", "models", "state", "partition")
COLUMNS = {
    "clients": [("clients per round", "per_round"), ("s/round", "round_s"), ("peak RSS MB", "rss")],
    "models": [
        ("model", "model"),
        ("parameters", "params"),
        ("engine", "engine"),
        ("s/round", "round_s"),
        ("peak RSS MB", "rss"),
    ],
    "state": [
        ("store", "store"),
        ("clients", "clients"),
        ("states held", "states"),
        ("fill s", "fill_s"),
        ("s/round", "round_s"),
        ("peak RSS MB", "rss"),
        ("state MB", "state_mb"),
    ],
    "partition": [
        ("clients", "clients"),
        ("labels", "labels"),
        ("seconds", "seconds"),
        ("peak RSS MB", "rss"),
    ],
}


# --------------------------------------------------------------------------------------------
# the points of each table


def points(table: str, quick: bool) -> list[dict]:
    """The table's points, in the order they run."""
    if table == "clients":
        return [{"per_round": k} for k in ((10, 20, 40) if quick else (10, 100, 1_000))]
    if table == "models":
        return [{"model": m} for m in ("mlp", "cnn", "resnet18")]
    if table == "state":
        sizes = (100, 1_000) if quick else (100, 10_000, 100_000)
        return [{"store": s, "clients": n} for s in ("memory", "disk") for n in sizes]
    return [{"clients": n} for n in ((100, 1_000) if quick else (10_000, 100_000))]


# --------------------------------------------------------------------------------------------
# in the child process: one point


def register_random_dataset() -> None:
    """Add ``scaling-random`` to fedretain's dataset registry (this process only)."""
    from fedretain.data.base import Dataset
    from fedretain.data.datasets import DATASETS

    def load_random(
        data_dir: Path | None = None,
        n: int = 600,
        channels: int = 1,
        size: int = 28,
        classes: int = 10,
        seed: int = 0,
    ) -> Dataset:
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, 256, (n, channels, size, size), dtype=torch.uint8, generator=g)
        y = torch.randint(0, classes, (n,), generator=g)
        return Dataset(DATASET, x, y, x[:10].clone(), y[:10].clone(), num_classes=classes)

    if DATASET not in DATASETS:
        DATASETS.add(DATASET, load_random, "random uint8 images (benchmarks)", needs_files=False)


def timed_rounds(fed, engine, rounds: int, lr: float, state=None) -> list[float]:
    """Seconds of the warm-up round and then of ``rounds`` rounds."""
    if state is None:
        state = fed.algorithm.server_init(*fed.task.init())
    times = []
    for rnd in range(rounds + 1):
        t0 = time.perf_counter()
        state, _ = engine.run_round(state, rnd, lr, clients=fed.participation.clients(rnd))
        times.append(time.perf_counter() - t0)
    return times


def base_values(args: argparse.Namespace, clients: int, per_round: int, samples: int) -> dict:
    return {
        "dataset": DATASET,
        "dataset.n": clients * samples,
        "partition": "iid",
        "clients": clients,
        "clients_per_round": per_round,
        "rounds": args.rounds + 1,
        "lr": 0.05,
        "threads": args.threads,
        "device": args.device,
        "seed": 0,
    }


def run_point(table: str, point: dict, args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    rss_start = peak_rss_mb()  # Python, torch and this module: the floor of every point
    if table == "partition":
        return {**run_partition(point["clients"]), "rss_start": rss_start}
    from fedretain.core.tree import tree_numel
    from fedretain.experiments.run import build_rounds
    from fedretain.recipe.config import make_config

    register_random_dataset()
    out: dict = {**point, "rss_start": rss_start}
    if table == "clients":
        k = point["per_round"]
        values = base_values(args, k, k, 60 if not args.quick else 20)
        values.update({"model": "mlp", "algorithm": "fedavg", "engine": "vmap", "local_steps": 5})
        values["batch_size"] = 10
        fed, engine = build_rounds(make_config(values))
    elif table == "models":
        per_round, samples, steps = (2, 20, 1) if args.quick else (10, 60, 5)
        values = base_values(args, per_round, per_round, samples)
        values.update(
            {
                "dataset.channels": 3,
                "dataset.size": 32,
                "model": point["model"],
                "algorithm": "fedavg",
                "engine": "auto",
                "local_steps": steps,
                "batch_size": 10,
            }
        )
        fed, engine = build_rounds(make_config(values))
        out["engine"] = engine.engine.name + (
            " (compiled)" if "compiled" in engine_choice(engine) else ""
        )
        out["engine_choice"] = engine_choice(engine)
    else:  # state
        per_round = min(100, point["clients"]) if not args.quick else min(20, point["clients"])
        values = base_values(args, point["clients"], per_round, 2)
        values.update(
            {
                "model": "mlp",
                "model.hidden": [8],
                "algorithm": "scaffold",
                "engine": "vmap",
                "local_steps": 1,
                "batch_size": 2,
                "store": point["store"],
            }
        )
        with tempfile.TemporaryDirectory(prefix="scaling-state-") as tmp:
            fed, engine = build_rounds(make_config(values), Path(tmp))
            state = fed.algorithm.server_init(*fed.task.init())
            t0 = time.perf_counter()
            for cid in range(point["clients"]):
                engine.store.put(cid, fed.algorithm.client_init(state["x"]))
            out["fill_s"] = time.perf_counter() - t0
            times = timed_rounds(fed, engine, args.rounds, 0.05, state)
            out["states"] = len(engine.store)
            out["state_mb"] = engine.store.nbytes() / 1e6
            out["params"] = tree_numel(state["x"])
        return finish(out, times)
    out["params"] = tree_numel(fed.algorithm.server_init(*fed.task.init())["x"])
    return finish(out, timed_rounds(fed, engine, args.rounds, 0.05))


def engine_choice(engine) -> str:
    return getattr(engine.engine, "choice", "") or engine.engine.name


def finish(out: dict, times: list[float]) -> dict:
    out["warmup_s"] = times[0]
    out["rounds_s"] = times[1:]
    out["round_s"] = statistics.median(times[1:]) if len(times) > 1 else times[0]
    out["rss_self"] = peak_rss_mb()
    return out


def fashion_labels() -> tuple[np.ndarray, str]:
    """Fashion-MNIST's training labels, or 60,000 random labels of 10 classes."""
    path = FASHION / "train-labels-idx1-ubyte.gz"
    if path.exists():
        from fedretain.data.idx import read_idx

        return read_idx(path, ndim=1).astype(np.int64), "fashion-mnist"
    return np.random.default_rng(0).integers(0, 10, 60_000), "random"


def run_partition(clients: int) -> dict:
    from fedretain.data.partition import make_partition

    labels, source = fashion_labels()
    if clients > labels.size:  # 6 labels per client, as Fashion-MNIST over 10,000 clients
        labels = np.tile(labels, -(-6 * clients // labels.size))
    t0 = time.perf_counter()
    parts = make_partition("dirichlet", labels, clients, 0, alpha=0.001)
    seconds = time.perf_counter() - t0
    sizes = np.array([len(p) for p in parts])
    return {
        "clients": clients,
        "labels": int(labels.size),
        "label_source": source,
        "seconds": seconds,
        "min_size": int(sizes.min()),
        "max_size": int(sizes.max()),
        "rss_self": peak_rss_mb(),
    }


# --------------------------------------------------------------------------------------------
# in the parent: one child per point, the table, the plot


def spawn(table: str, point: dict, args: argparse.Namespace) -> dict:
    """Run one point in a child process; its result with ``rss`` (the child's peak RSS)."""
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--table",
        table,
        "--point",
        json.dumps(point),
    ]
    cmd += ["--rounds", str(args.rounds), "--threads", str(args.threads), "--device", args.device]
    cmd += ["--quick"] if args.quick else []
    with tempfile.TemporaryFile("w+") as so, tempfile.TemporaryFile("w+") as se:
        proc = subprocess.Popen(cmd, stdout=so, stderr=se, text=True)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        so.seek(0)
        se.seek(0)
        stdout, stderr = so.read(), se.read()
    if proc.returncode != 0 or "RESULT " not in stdout:
        why = (stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return {**point, "error": why}
    res = json.loads(stdout.split("RESULT ", 1)[1].splitlines()[0])
    res["rss"] = usage.ru_maxrss / 1024.0  # kB on Linux
    return res


def cell(key: str, value: object) -> str:
    if value is None:
        return ""
    if key in ("round_s", "seconds", "fill_s"):
        return f"{value:.3f}" if value < 10 else f"{value:.1f}"
    if key in ("rss", "state_mb"):
        return f"{value:,.0f}" if value >= 10 else f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def print_row(table: str, res: dict) -> None:
    if "error" in res:
        first = [cell(k, res.get(k)) for _, k in COLUMNS[table][:1]]
        print(f"| {' | '.join(first)} | error: {res['error']} |", flush=True)
        return
    print("| " + " | ".join(cell(k, res.get(k)) for _, k in COLUMNS[table]) + " |", flush=True)


def plot(table: str, results: list[dict], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = [r for r in results if "error" not in r]
    fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(10, 4))
    y_key = "seconds" if table == "partition" else "round_s"
    if table == "state":
        series = {s: [r for r in ok if r["store"] == s] for s in ("memory", "disk")}
        x_key, xlabel = "clients", "clients in total (states held)"
    elif table == "models":
        series, x_key, xlabel = {"engine=auto": ok}, "params", "model parameters"
    elif table == "clients":
        series, x_key, xlabel = {"mlp, vmap": ok}, "per_round", "clients per round"
    else:
        series, x_key, xlabel = {"dirichlet alpha=0.001": ok}, "clients", "clients"
    for label, rows in series.items():
        if not rows:
            continue
        rows = sorted(rows, key=lambda r: r[x_key])
        xs = [r[x_key] for r in rows]
        ax_t.plot(xs, [r[y_key] for r in rows], "o-", label=label)
        ax_m.plot(xs, [r["rss"] for r in rows], "s-", label=label)
        if table == "models":
            for r in rows:
                ax_t.annotate(r["model"], (r[x_key], r[y_key]), fontsize=8)
                ax_m.annotate(r["model"], (r[x_key], r["rss"]), fontsize=8)
    for ax in (ax_t, ax_m):
        xs = [r[x_key] for r in ok]
        if xs and max(xs) / max(min(xs), 1) >= 10:
            ax.set_xscale("log")
        ax.set_xlabel(xlabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    ax_t.set_ylabel("seconds" if table == "partition" else "s/round (median)")
    ax_m.set_ylabel("peak RSS MB (per process)")
    ax_t.set_title(f"{table}: time")
    ax_m.set_title(f"{table}: peak memory")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--table", choices=TABLES, required=True)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true", help="tiny sizes for a smoke run")
    ap.add_argument("--out", help="write the results as JSON here")
    ap.add_argument("--plot", help="write a PNG plot of the table here")
    ap.add_argument("--point", help=argparse.SUPPRESS)  # internal: run one point, print JSON
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be >= 1")
    if args.point:
        print("RESULT " + json.dumps(run_point(args.table, json.loads(args.point), args)))
        return
    print(
        f"scaling --table {args.table}{' --quick' if args.quick else ''}: "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__}, {args.threads} threads, device {args.device}, {args.rounds} timed "
        "rounds after 1 warm-up; each point in its own process"
    )
    cols = COLUMNS[args.table]
    print("| " + " | ".join(c for c, _ in cols) + " |")
    print("|" + "---|" * len(cols), flush=True)
    results = []
    for point in points(args.table, args.quick):
        res = spawn(args.table, point, args)
        results.append(res)
        print_row(args.table, res)
    for res in results:
        if res.get("engine_choice"):
            print(f"engine=auto, {res['model']}: {res['engine_choice']}")
    if args.table == "partition" and results and "label_source" in results[0]:
        print(f"labels: {results[0]['label_source']}")
    if args.out:
        meta = {
            "table": args.table,
            "quick": args.quick,
            "rounds": args.rounds,
            "threads": args.threads,
            "device": args.device,
            "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "torch": torch.__version__,
            "parent_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        }
        Path(args.out).write_text(json.dumps({**meta, "results": results}, indent=2) + "\n")
    if args.plot:
        plot(args.table, results, args.plot)
        print(f"plot: {args.plot}")
    sys.exit(1 if any("error" in r for r in results) else 0)


if __name__ == "__main__":
    main()
