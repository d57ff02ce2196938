"""pfl-research's CIFAR-10 round, timed on fedretain's engines, Flower and pfl-research itself.

Round shape (the CIFAR-10 speed benchmark of pfl-research, Granqvist et al., arXiv:2404.06430,
Section 4.1 and Appendix D): 1,000 users x 50 images of 3x32x32 (10 classes), 50 users per
round, one local epoch of plain SGD with batch size 10 (5 steps per user), FedAvg. Model:
fedretain's zoo ``cnn`` on 3x32x32 (conv 3-32-32-64 (5x5), fc 1024-256-10; 344,298
parameters), rebuilt layer by layer in plain torch for Flower and pfl (the script checks the
parameter shapes against fedretain's). Data: the first 50,000 training images of a CIFAR-10
folder (``--data-dir``, python pickle batches) or, without one, random uint8 images and labels
drawn per user from a fixed seed (user ``u``: ``torch.Generator().manual_seed(1000 + u)``), so
every variant sees the same images; images are scaled to [0, 1] per batch everywhere.
No evaluation is timed. Learning rate 0.05 (it does not change the time).

    .venv/bin/python benchmarks/pfl_job.py                        # all variants, 3 timed rounds
    .venv/bin/python benchmarks/pfl_job.py --variants vmap-10,pfl --rounds 5 --out pfl_job.json
    .venv/bin/python benchmarks/pfl_job.py --data-dir /path/to/cifar10 --device cuda \\
        --variants sequential,vmap-10,vmap-50,vmap-10-compiled,auto

Each variant runs in its own process, one after another (never two at once), and reports the
median seconds of the timed rounds (after one warm-up round), that median x 1,500 rounds in
minutes (the paper's job length), start-up seconds (set-up plus the warm-up round minus a
median round: imports, data, model, Ray, first-call compilation) and the peak RSS of the
process and all its descendants (Ray's workers included), sampled every 0.2 s
(``TreeRss`` of ``benchmarks/engine_speed.py``).

Variants:

- ``sequential``: fedretain's reference engine (``engine=sequential``), one user after another.
- ``sequential-w2``: the same engine with ``engine.workers=2`` (two users at a time on two
  threads, one torch thread each; ``-w<N>`` for N).
- ``vmap-10``, ``vmap-50``: fedretain's vectorised engine (``engine=vmap``, ``engine.chunk``
  10 or 50 users per vmapped call).
- ``vmap-10-compiled``: the same with ``engine.compile=true`` (``torch.compile``), chunk 10.
- ``vmap-50-graphs``: compiled with ``engine.compile_mode=reduce-overhead``, chunk 50: on CUDA
  each local step replayed as one CUDA graph (on a CPU as ``-compiled``).
- ``auto``: fedretain's default engine (``engine=auto``), given the job's 1,500 rounds so that
  it makes the choice it would make for the whole job (printed in the ``engine`` column).
- a suffix ``-bf16`` on any of these (``sequential-bf16``, ``auto-bf16``): the same with
  ``precision=bf16`` (local training under bfloat16 autocast; pfl and Flower stay float32).
- ``flower``: Flower 1.41's simulation engine (``flwr.simulation.run_simulation``, Ray
  backend, 2 CPUs, 1 CPU and 1 torch thread per ClientApp, ``FedAvg`` of
  ``flwr.serverapp.strategy``), 1,000 supernodes.
- ``pfl``: pfl-research 0.6.0 (PyTorch backend, ``FederatedAveraging``, one process), run
  with ``--pfl-python`` (default ``$PFL_PYTHON``, else ``pflenv/bin/python``: a separate
  environment, ``python -m venv pflenv && pflenv/bin/pip install torch==2.13.0
  'pfl[pytorch]==0.6.0'``, Python < 3.13). pfl iterates each user's data in order (no
  shuffle) and weights users equally (all hold 50 images here).

The fedretain variants build the federation with fedretain's own API
(:func:`fedretain.recipe.config.make_config`, :func:`fedretain.experiments.run.build_rounds`,
``Rounds.run_round`` with the participation model's clients); fedretain has no random-image
dataset, so the images are registered as an in-memory dataset and split with
``partition=iid`` (50 per user). ``--device cuda`` applies to the fedretain variants only.

Under the table the script prints ``PUBLISHED``, pfl-research's own wall-clock minutes for this
CIFAR-10 job per framework, with their hardware. It is EMPTY: the numbers are in Table 1 of
arXiv:2404.06430, whose text could not be retrieved when this script was written (only the
abstract's "7-72x faster than alternative open-source frameworks"); fill it in from the paper.
What the paper's benchmark code (github.com/apple/pfl-research, ``publications/pfl/``) does
say: Flower, FedML and FedScale ran on "1 NVIDIA A100 GPU (40GB) and 10CPU" (their
``cifar10/README.md``), and the TFF run used cohort 50, batch 10, 1 local epoch, client lr 0.1,
server lr 1.0, 1,500 iterations, evaluation every 10 (``tff/cifar10/README.md``). Their CIFAR-10
model is pfl-research's small CNN, not fedretain's ``cnn``; their runs also evaluate.

On a shared or busy machine use ``--threads 1``: with 2 torch threads on 2 cores that another
job keeps busy, a CNN step was measured 30x slower than with 1 thread (OpenMP threads waiting
on each other), which swamps every difference between the variants. Compare rows of one
invocation only.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from engine_speed import TreeRss, time_pfl  # noqa: E402  (peak RSS; pfl's round times)

USERS, PER_USER, PER_ROUND, BATCH, EPOCHS, LR = 1000, 50, 50, 10, 1, 0.05
JOB_ROUNDS = 1500
SHAPE, CLASSES = (3, 32, 32), 10
DEFAULT_VARIANTS = "sequential,vmap-10,vmap-50,vmap-10-compiled,auto,flower,pfl"
PFL_PYTHON = os.environ.get("PFL_PYTHON", "pflenv/bin/python")
DATASET_NAME = "pfl-job-images"

# pfl-research's published wall-clock minutes for the CIFAR-10 job (1,500 central iterations),
# per framework (pfl, Flower, FedML, FedScale, FLUTE, TFF), with the hardware each ran on:
# {"framework", "minutes", "hardware"} rows quoted from arXiv:2404.06430, Table 1. EMPTY: the
# table's text could not be retrieved from the stored copies of the paper (only its abstract:
# "7-72x faster"), so no number is given rather than a remembered or guessed one.
PUBLISHED: list[dict[str, str]] = []


# --------------------------------------------------------------------------- data and model


def user_data(u: int, per_user: int, data_dir: str = "") -> tuple[torch.Tensor, torch.Tensor]:
    """User ``u``'s images (uint8, (per_user, 3, 32, 32)) and labels (int64)."""
    if data_dir:
        x, y = cifar10_train(data_dir)
        return x[u * per_user : (u + 1) * per_user], y[u * per_user : (u + 1) * per_user]
    g = torch.Generator().manual_seed(1000 + u)
    x = torch.randint(0, 256, (per_user, *SHAPE), generator=g, dtype=torch.uint8)
    y = torch.randint(0, CLASSES, (per_user,), generator=g)
    return x, y


_CIFAR: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}


def cifar10_train(data_dir: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The 50,000 CIFAR-10 training images (uint8 NCHW) and labels, from the pickle batches in
    ``data_dir`` or ``data_dir/cifar-10-batches-py`` (read without fedretain: pfl and Flower's
    workers do not import it)."""
    if data_dir not in _CIFAR:
        import pickle

        root = Path(data_dir).expanduser()
        if not (root / "data_batch_1").is_file():
            root = root / "cifar-10-batches-py"
        xs, ys = [], []
        for i in range(1, 6):
            with open(root / f"data_batch_{i}", "rb") as f:
                d = pickle.load(f, encoding="bytes")
            xs.append(np.asarray(d[b"data"], dtype=np.uint8).reshape(-1, *SHAPE))
            ys.append(np.asarray(d[b"labels"], dtype=np.int64))
        _CIFAR[data_dir] = (
            torch.from_numpy(np.concatenate(xs)),
            torch.from_numpy(np.concatenate(ys)),
        )
    return _CIFAR[data_dir]


def all_data(users: int, per_user: int, data_dir: str) -> tuple[torch.Tensor, torch.Tensor]:
    if data_dir:
        x, y = cifar10_train(data_dir)
        if users * per_user > len(x):
            raise SystemExit(f"{users} x {per_user} images exceed CIFAR-10's {len(x)}")
        return x[: users * per_user].clone(), y[: users * per_user].clone()
    xs, ys = zip(*(user_data(u, per_user) for u in range(users)), strict=True)
    return torch.cat(xs), torch.cat(ys)


def plain_cnn() -> nn.Sequential:
    """fedretain's zoo ``cnn`` (``fedretain.models.simple.cnn``) on 3x32x32, in plain torch."""
    return nn.Sequential(
        nn.Conv2d(3, 32, 5),
        nn.ReLU(),
        nn.Conv2d(32, 32, 5),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Conv2d(32, 64, 5),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 256),
        nn.ReLU(),
        nn.Linear(256, CLASSES),
    )


class Scale(nn.Module):
    """uint8 images to floats in [0, 1], as every variant scales them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().div(255.0)


def shapes(model: nn.Module) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in model.parameters()]


def check_model() -> int:
    """Parameter shapes of fedretain's ``cnn`` on 3x32x32 equal :func:`plain_cnn`'s, layer by
    layer; returns the parameter count."""
    from fedretain.models import build_model

    ours, plain = shapes(build_model("cnn", SHAPE, CLASSES)), shapes(plain_cnn())
    if ours != plain:
        raise SystemExit(f"plain_cnn differs from fedretain's cnn: {plain} vs {ours}")
    return sum(int(np.prod(s)) for s in ours)


# --------------------------------------------------------------------------- fedretain


def run_fedretain(variant: str, a: argparse.Namespace) -> tuple[list[float], str]:
    """Round times (the warm-up first, set-up included) on one of fedretain's engines."""
    t_setup = time.perf_counter()
    from fedretain.data.base import Dataset
    from fedretain.data.datasets import DATASETS
    from fedretain.experiments.run import build_rounds
    from fedretain.recipe.config import make_config

    x, y = all_data(a.users, a.per_user, a.data_dir)
    ds = Dataset(DATASET_NAME, x, y, x[:10], y[:10], num_classes=CLASSES)

    def load(data_dir: Path | None = None) -> Dataset:
        return ds

    DATASETS.add(DATASET_NAME, load, "benchmarks/pfl_job.py's images", needs_files=False)
    values: dict[str, object] = {
        "dataset": DATASET_NAME,
        "partition": "iid",
        "model": "cnn",
        "clients": a.users,
        "clients_per_round": a.per_round,
        "batch_size": BATCH,
        "local_epochs": EPOCHS,
        "lr": LR,
        "rounds": JOB_ROUNDS,
        "threads": a.threads,
        "device": a.device,
        "seed": 0,
    }
    if variant.endswith("-bf16"):  # local training under bfloat16 autocast
        variant, values["precision"] = variant.removesuffix("-bf16"), "bf16"
    if variant.startswith("vmap-"):
        values["engine"] = "vmap"
        values["engine.chunk"] = int(variant.split("-")[1])
        values["engine.compile"] = variant.endswith("-compiled")
        if variant.endswith("-graphs"):  # compiled, each step replayed as a CUDA graph
            values["engine.compile_mode"] = "reduce-overhead"
    elif variant.startswith("sequential-w"):
        values["engine"] = "sequential"
        values["engine.workers"] = int(variant.removeprefix("sequential-w"))
    else:
        values["engine"] = variant  # sequential or auto
    cfg = make_config(values)
    fed, rounds = build_rounds(cfg)
    state = fed.algorithm.server_init(*fed.task.init())
    times = []
    for r in range(a.rounds + 1):
        t0 = t_setup if r == 0 else time.perf_counter()
        clients = fed.participation.clients(r)
        state, _ = rounds.run_round(state, r, cfg.lr_at(r), clients=clients)
        if fed.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    choice = getattr(rounds.engine, "choice", "")  # engine=auto: what it chose and why
    name = choice.split(":")[0] if choice else type(rounds.engine).__name__
    if variant.startswith("vmap-"):
        name += f" chunk={values['engine.chunk']}" + (
            " compiled" if values["engine.compile"] else ""
        )
        name += " compiled (reduce-overhead)" if "engine.compile_mode" in values else ""
    if "engine.workers" in values:
        name += f" workers={values['engine.workers']}"
    return times, name + (" bf16" if "precision" in values else "")


# --------------------------------------------------------------------------- Flower

_FLOWER_MODEL: dict[str, nn.Module] = {}


def flower_train(msg, context):
    """One user's local epoch in a Flower ClientApp (the model is kept per worker process)."""
    from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict

    cfg = msg.content["config"]
    torch.set_num_threads(int(cfg["threads"]))
    u = int(context.node_config["partition-id"])
    rnd = int(cfg["server-round"]) - 1
    per_user = int(cfg["per_user"])
    if "model" not in _FLOWER_MODEL:
        _FLOWER_MODEL["model"] = plain_cnn()
    model = _FLOWER_MODEL["model"]
    x, y = user_data(u, per_user, str(cfg["data_dir"]))
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    g = torch.Generator().manual_seed(10_000_000 + rnd * 10_000 + u)
    for _ in range(EPOCHS):
        for idx in torch.randperm(per_user, generator=g).split(BATCH):
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[idx].float().div_(255.0)), y[idx]).backward()
            opt.step()
    reply = RecordDict(
        {
            "arrays": ArrayRecord(model.state_dict()),
            "metrics": MetricRecord({"num-examples": per_user}),
        }
    )
    return Message(content=reply, reply_to=msg)


def run_flower(a: argparse.Namespace) -> tuple[list[float], str]:
    """Round times on Flower's simulation engine (2 CPUs, 1 CPU per ClientApp)."""
    t_setup = time.perf_counter()
    import logging

    import pfl_job  # this file as a module, so that Ray's workers import flower_train by name
    from flwr.app import ArrayRecord, ConfigRecord, Context
    from flwr.clientapp import ClientApp
    from flwr.serverapp import Grid, ServerApp
    from flwr.serverapp.strategy import FedAvg
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.WARNING)
    client_app = ClientApp()
    client_app.train()(pfl_job.flower_train)
    server_app = ServerApp()
    stamps: dict[int, float] = {}
    sums: dict[int, float] = {}  # a checksum of the global model per round: did clients train?

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        torch.manual_seed(0)
        init = {k: v.detach().clone() for k, v in plain_cnn().state_dict().items()}
        strategy = FedAvg(
            fraction_train=a.per_round / a.users,
            fraction_evaluate=0.0,
            min_train_nodes=a.per_round,
            min_available_nodes=a.users,
        )

        def evaluate_fn(server_round: int, arrays: ArrayRecord) -> None:
            stamps[server_round] = time.perf_counter()
            sums[server_round] = float(
                sum(v.double().sum() for v in arrays.to_torch_state_dict().values())
            )

        strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(init),
            train_config=ConfigRecord(
                {"threads": 1, "per_user": a.per_user, "data_dir": a.data_dir}
            ),
            num_rounds=a.rounds + 1,
            evaluate_fn=evaluate_fn,
        )

    run_simulation(
        server_app=server_app,
        client_app=client_app,
        num_supernodes=a.users,
        backend_name="ray",
        backend_config={
            "init_args": {"num_cpus": 2},
            "client_resources": {"num_cpus": 1.0, "num_gpus": 0.0},
        },
    )
    n = a.rounds + 1
    if any(r not in stamps for r in range(1, n + 1)):
        raise SystemExit(f"Flower finished {len(stamps)} of {n} rounds")
    if any(sums[r] == sums[r - 1] for r in range(1, n + 1)):
        raise SystemExit("Flower: a round left the global model unchanged (no client replies?)")
    times = [stamps[1] - t_setup] + [stamps[r] - stamps[r - 1] for r in range(2, n + 1)]
    return times, "flwr " + __import__("flwr").__version__


# --------------------------------------------------------------------------- pfl-research


def run_pfl(a: argparse.Namespace) -> tuple[list[float], str]:
    """Round times in pfl-research's simulator (PyTorch backend, one process)."""
    t_setup = time.perf_counter()
    import pfl

    x, y = all_data(a.users, a.per_user, a.data_dir)
    p = a.per_user
    data = {u: [x[u * p : (u + 1) * p], y[u * p : (u + 1) * p]] for u in range(a.users)}
    torch.manual_seed(0)
    net = nn.Sequential(Scale(), plain_cnn())
    count = sum(p.numel() for p in net.parameters())
    if a.expect_params and count != a.expect_params:
        raise SystemExit(f"pfl's CNN has {count} parameters, fedretain's cnn {a.expect_params}")
    times = time_pfl(net, data, a.per_round, a.rounds, t_setup, LR, EPOCHS, BATCH)
    return times, f"pfl {pfl.__version__}" if hasattr(pfl, "__version__") else "pfl"


# --------------------------------------------------------------------------- driver


def device_of(a: argparse.Namespace) -> str:
    """Where the variant trained: ``--device`` for fedretain's engines; pfl's PyTorch backend
    picks ``PFL_PYTORCH_DEVICE``, else CUDA where it sees a GPU; the Flower copy the CPU."""
    if a.variant == "pfl":
        return os.environ.get("PFL_PYTORCH_DEVICE") or (
            "cuda" if torch.cuda.is_available() else "cpu"
        )
    return "cpu" if a.variant == "flower" else a.device


def one(a: argparse.Namespace) -> dict:
    torch.set_num_threads(a.threads)
    with TreeRss() as rss:
        if a.variant == "flower":
            times, engine = run_flower(a)
        elif a.variant == "pfl":
            times, engine = run_pfl(a)
        elif a.variant.removesuffix("-bf16") in ("sequential", "auto") or a.variant.startswith(
            ("vmap-", "sequential-w")
        ):
            times, engine = run_fedretain(a.variant, a)
        else:
            raise SystemExit(f"unknown variant {a.variant!r}; known: {DEFAULT_VARIANTS}")
    med = statistics.median(times[1:])
    return {
        "variant": a.variant,
        "engine": engine,
        "device": device_of(a),
        "threads": a.threads,
        "users": a.users,
        "per_user": a.per_user,
        "per_round": a.per_round,
        "round_s": times[1:],
        "median_s": med,
        "projected_min": med * JOB_ROUNDS / 60.0,
        "first_round_s": times[0],
        "startup_s": times[0] - med,  # negative where the timed rounds' noise exceeds it
        "peak_rss_mb": rss.peak,
    }


def child_command(a: argparse.Namespace, variant: str, params: int) -> list[str]:
    python = a.pfl_python if variant == "pfl" else sys.executable
    cmd = [python, str(Path(__file__).resolve()), "--variant", variant]
    cmd += ["--rounds", str(a.rounds), "--threads", str(a.threads), "--device", a.device]
    cmd += ["--users", str(a.users), "--per-user", str(a.per_user)]
    cmd += ["--per-round", str(a.per_round), "--expect-params", str(params)]
    return cmd + (["--data-dir", a.data_dir] if a.data_dir else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated subset")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--data-dir", default="", help="a CIFAR-10 folder; empty: random images")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (fedretain's variants only)")
    ap.add_argument("--out", default="", help="also write the results to this JSON file")
    ap.add_argument("--pfl-python", default=PFL_PYTHON, help="python with pfl-research 0.6.0")
    ap.add_argument("--variant", help=argparse.SUPPRESS)  # one variant, in a child process
    ap.add_argument("--users", type=int, default=USERS, help=argparse.SUPPRESS)
    ap.add_argument("--per-user", type=int, default=PER_USER, help=argparse.SUPPRESS)
    ap.add_argument("--per-round", type=int, default=PER_ROUND, help=argparse.SUPPRESS)
    ap.add_argument("--expect-params", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.variant:
        print("RESULT " + json.dumps(one(a)), flush=True)
        return
    params = check_model()
    print(
        f"round: {a.users} users x {a.per_user} images 3x32x32, {a.per_round} per round, batch "
        f"{BATCH}, {EPOCHS} local epoch SGD, FedAvg; model cnn ({params:,} parameters); data: "
        f"{a.data_dir or 'random (seeded)'}; {os.cpu_count()} CPUs, {a.threads} torch threads, "
        f"device {a.device}; {a.rounds} timed rounds after 1 warm-up",
        flush=True,
    )
    print("| variant | engine | s/round (median) | 1,500 rounds (min) | start-up s | peak RSS MB |")
    print("|---|---|---|---|---|---|", flush=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), str(HERE.parent)] + [p for p in [env.get("PYTHONPATH", "")] if p]
    )
    results = []
    for variant in [v for v in a.variants.split(",") if v]:
        proc = subprocess.run(
            child_command(a, variant, params), capture_output=True, text=True, env=env
        )
        if proc.returncode != 0 or "RESULT " not in proc.stdout:
            why = (proc.stderr.strip().splitlines() or [f"failed (exit {proc.returncode})"])[-1]
            print(f"| {variant} | {why[:160]} | | | | |", flush=True)
            results.append({"variant": variant, "error": why})
            continue
        res = json.loads(proc.stdout.split("RESULT ", 1)[1].splitlines()[0])
        results.append(res)
        print(
            f"| {variant} | {res['engine']} | {res['median_s']:.2f} | {res['projected_min']:.1f} "
            f"| {res['startup_s']:.1f} | {res['peak_rss_mb']:.0f} |",
            flush=True,
        )
    print("\npublished (their hardware), pfl-research arXiv:2404.06430, 1,500 rounds:")
    if PUBLISHED:
        for row in PUBLISHED:
            print(f"- {row['framework']}: {row['minutes']} min ({row['hardware']})")
    else:
        print("- (not found: the paper's table could not be retrieved; see the module docstring)")
    if a.out:
        Path(a.out).write_text(json.dumps({"results": results, "published": PUBLISHED}, indent=1))


if __name__ == "__main__":
    main()
