"""FedReg's local-stage time divided by FedAvg's, on the same clients and data, in one process.

FedReg (Xu et al., ICLR 2022, arXiv:2203.02645) reports 1.1 s against FedAvg's 0.7 s per local
stage on MNIST (two classes), 1.57x (Table C.2, a GTX 1080 Ti). Workload here, after the
paper's MNIST setting (App. B.2): Fashion-MNIST-shaped inputs (random 1x28x28 in [0, 1], two
classes per client), FedReg's MNIST CNN (``cnn``, 228k parameters), batch 10, 40 local epochs,
lr 0.1, γ 0.4, η_s 0.2, η_p 0.002, E = 10; one client per entry of ``--samples`` (the paper's
5,000 MNIST clients hold 12 samples on average, power-law distributed).

Variants, timed interleaved (every repeat runs each client under each variant, rotating which
variant goes first), so machine drift hits them alike; compare numbers within one run only:
``fedavg``, ``fedreg`` and ``fedreg-mg``, each the registered algorithm's local stage
(``fedretain.core.client.train_client``). FedReg generates the pseudo and perturbed copies of the
client's data once, in ``local_init`` (E = 10 sign steps over 2n samples), then takes three
gradients per local step (four with MG) where FedAvg takes one.

    .venv/bin/python benchmarks/fedreg_local_time.py               # the full workload
    .venv/bin/python benchmarks/fedreg_local_time.py --samples 12,24 --epochs 2 --repeats 1
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
from collections.abc import Callable

import numpy as np
import torch

from fedretain.algorithms import build_algorithm
from fedretain.core.algorithm import RoundInfo
from fedretain.core.client import Clients, LocalSpec, train_client
from fedretain.core.task import Task
from fedretain.core.tree import Tree
from fedretain.data.base import Dataset
from fedretain.losses import get_loss
from fedretain.models import build_model

VARIANTS = ("fedavg", "fedreg", "fedreg-mg")
LR, GAMMA, ETA_S, STEPS = 0.1, 0.4, 0.2, 10


def make_dataset(sizes: list[int]) -> tuple[Dataset, list[np.ndarray]]:
    """Random 1x28x28 inputs in [0, 1]; client ``c`` holds classes ``c mod 10`` and ``c+1``."""
    g = torch.Generator().manual_seed(0)
    n = sum(sizes)
    x = torch.rand(n, 1, 28, 28, generator=g)
    y = torch.empty(n, dtype=torch.int64)
    parts, start = [], 0
    for c, size in enumerate(sizes):
        idx = np.arange(start, start + size)
        pick = torch.randint(0, 2, (size,), generator=g)
        y[start : start + size] = (c + pick) % 10
        parts.append(idx)
        start += size
    return Dataset("bench", x, y, x[:10], y[:10], num_classes=10), parts


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--samples", default="12,12,24,48,96", help="samples of each client")
    ap.add_argument("--epochs", type=int, default=40, help="local epochs (paper: 40)")
    ap.add_argument("--batch", type=int, default=10, help="batch size (paper: 10)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats after one warm-up")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    sizes = [int(s) for s in args.samples.split(",")]
    dataset, parts = make_dataset(sizes)
    spec = LocalSpec(args.batch, args.epochs)

    torch.manual_seed(0)
    model = build_model("cnn", (1, 28, 28), 10).to(device)
    task = Task(model, get_loss("ce"), 10)
    algos = {
        "fedavg": build_algorithm("fedavg"),
        "fedreg": build_algorithm("fedreg", gamma=GAMMA, eta_s=ETA_S, steps=STEPS),
        "fedreg-mg": build_algorithm("fedreg", gamma=GAMMA, eta_s=ETA_S, steps=STEPS, mg=True),
    }
    clients = Clients(dataset, parts, spec, seed=0, device=device)
    params, buffers = task.init()
    info = RoundInfo(
        round=0, num_clients=len(sizes), clients=tuple(range(len(sizes))), lr=LR, seed=0
    )
    downlink = {"x": params, "buffers": buffers}

    def stage(variant: str, cid: int) -> Tree:
        algo = algos[variant]
        data, plan = clients.data(cid), clients.plan(cid, info, algo)
        state = algo.client_init(downlink["x"])
        return train_client(algo, task, downlink, state, data, plan, info, cid).uplink

    def timed(fn: Callable[[], Tree]) -> tuple[float, Tree]:
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        return time.perf_counter() - t0, out

    for variant in VARIANTS:  # warm-up
        stage(variant, 0)
    times = {v: [[] for _ in sizes] for v in VARIANTS}
    for r in range(args.repeats):
        order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]
        for cid in range(len(sizes)):
            for variant in order:
                t, _ = timed(lambda v=variant, c=cid: stage(v, c))
                times[variant][cid].append(t)

    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"device {device}, {args.threads} threads; cnn, batch {args.batch}, {args.epochs} "
        f"epochs, median of {args.repeats} interleaved repeats"
    )
    print(
        "| client | samples | steps | fedavg s | fedreg s | fedreg-mg s "
        "| fedreg / fedavg | mg / fedavg |"
    )
    print("|---|---|---|---|---|---|---|---|")
    med = {v: [statistics.median(ts) for ts in times[v]] for v in VARIANTS}
    for cid, size in enumerate(sizes):
        steps = len(clients.plan(cid, info, algos["fedavg"]))
        a, f, m = (med[v][cid] for v in VARIANTS)
        print(
            f"| {cid} | {size} | {steps} | {a:.3f} | {f:.3f} | {m:.3f} "
            f"| {f / a:.2f}x | {m / a:.2f}x |"
        )
    a, f, m = (sum(med[v]) for v in VARIANTS)
    print(f"| all | {sum(sizes)} | | {a:.3f} | {f:.3f} | {m:.3f} | {f / a:.2f}x | {m / a:.2f}x |")
    print("paper (Table C.2, MNIST two classes, GTX 1080 Ti): 1.1 s / 0.7 s = 1.57x")


if __name__ == "__main__":
    main()
