"""Time one FL round of the sequential engine beside a plain PyTorch loop, in the same run.

Workload (the engine benchmark of fedretain): 100 clients x 60 samples (random 1x28x28,
10 classes), 5 local epochs of plain SGD, batch 10 (30 steps per client), lr 0.05, FedAvg
weighted by samples. Models: ``cnn-fedavg`` (McMahan et al.'s CNN, 582k parameters) and
``mlp`` 784-200-200-200-10. Each variant runs in its own process so its peak RSS is its own.

    .venv/bin/python benchmarks/round_time.py                 # every model and variant, a table
    .venv/bin/python benchmarks/round_time.py --model mlp --variant engine --rounds 3   # one

Variants: ``loop`` (one nn.Module + torch.optim.SGD, the plain reference), ``engine``
(fedretain's sequential engine running the registered ``fedavg``) and ``vmap-<chunk>`` (the
vectorised engine with that many clients per vmapped call), e.g.
``--variants loop,engine,vmap-10,vmap-50``. Machines drift between
runs: compare variants within one invocation only. Results: benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

CLIENTS, SAMPLES, EPOCHS, BATCH, LR = 100, 60, 5, 10, 0.05
MODELS = {"cnn-fedavg": {}, "mlp": {"hidden": [200, 200, 200]}}


def flops_per_round(model: str) -> float:
    """Analytic: 3 x forward FLOPs (conv/linear MACs x 2) x samples x epochs x clients."""
    if model == "cnn-fedavg":
        macs = 24 * 24 * 32 * 25 + 8 * 8 * 64 * 32 * 25 + 1024 * 512 + 512 * 10
    else:
        macs = 784 * 200 + 200 * 200 + 200 * 200 + 200 * 10
    return 3.0 * 2 * macs * CLIENTS * SAMPLES * EPOCHS


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(CLIENTS * SAMPLES, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (CLIENTS * SAMPLES,), generator=g)
    return x, y


def run_engine(model_name: str, rounds: int, vmap_chunk: int | None = None) -> list[float]:
    from fedretain.algorithms import build_algorithm
    from fedretain.core.task import Task
    from fedretain.data.base import Dataset
    from fedretain.engines.base import LocalSpec
    from fedretain.engines.sequential import SequentialEngine
    from fedretain.engines.vmap import VmapEngine
    from fedretain.losses import get_loss
    from fedretain.models import build_model

    x, y = make_data()
    ds = Dataset("bench", x, y, x[:10], y[:10], num_classes=10)
    parts = [np.arange(c * SAMPLES, (c + 1) * SAMPLES) for c in range(CLIENTS)]
    torch.manual_seed(0)
    model = build_model(model_name, (1, 28, 28), 10, **MODELS[model_name])
    task = Task(model, get_loss("ce"), 10)
    algo = build_algorithm("fedavg")
    spec = LocalSpec(BATCH, EPOCHS)
    if vmap_chunk is None:
        engine = SequentialEngine(algo, task, ds, parts, spec, seed=0)
    else:
        engine = VmapEngine(algo, task, ds, parts, spec, seed=0, chunk=vmap_chunk)
    state = algo.server_init(*task.init())
    times = []
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        state, _ = engine.run_round(state, r, LR, CLIENTS)
        times.append(time.perf_counter() - t0)
    return times[1:]


def run_loop(model_name: str, rounds: int) -> list[float]:
    from fedretain.engines.schedule import batch_plan
    from fedretain.models import build_model

    x, y = make_data()
    torch.manual_seed(0)
    model = build_model(model_name, (1, 28, 28), 10, **MODELS[model_name])
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    params = list(model.parameters())
    global_params = [p.detach().clone() for p in params]
    times = []
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        acc = [torch.zeros_like(p) for p in global_params]
        for c in range(CLIENTS):
            with torch.no_grad():
                for p, g in zip(params, global_params):
                    p.copy_(g)
            xc, yc = x[c * SAMPLES : (c + 1) * SAMPLES], y[c * SAMPLES : (c + 1) * SAMPLES]
            for idx in batch_plan(SAMPLES, BATCH, 0, r, c, epochs=EPOCHS):
                i = torch.from_numpy(idx)
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(xc[i]), yc[i]).backward()
                opt.step()
            with torch.no_grad():
                for a, p in zip(acc, params):
                    a.add_(p, alpha=1.0 / CLIENTS)
        global_params = acc
        times.append(time.perf_counter() - t0)
    return times[1:]


def peak_matmul_gflops() -> float:
    n = 4096
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.matmul(a, b)
    ts = []
    for _ in range(5):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        ts.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(ts) / 1e9


def one(model: str, variant: str, rounds: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    if variant == "loop":
        times = run_loop(model, rounds)
    elif variant == "engine":
        times = run_engine(model, rounds)
    else:  # vmap-<chunk>
        times = run_engine(model, rounds, vmap_chunk=int(variant.split("-")[1]))
    med = statistics.median(times)
    return {
        "model": model,
        "variant": variant,
        "threads": threads,
        "round_s": times,
        "median_s": med,
        "gflops": flops_per_round(model) / med / 1e9,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", choices=list(MODELS))
    ap.add_argument("--variant", help="loop, engine (sequential) or vmap-<chunk>")
    ap.add_argument(
        "--variants", default="loop,engine", help="comma-separated variants for the table"
    )
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.model and args.variant:
        print("RESULT " + json.dumps(one(args.model, args.variant, args.rounds, args.threads)))
        return
    torch.set_num_threads(args.threads)
    peak = peak_matmul_gflops()
    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{args.threads} threads, fp32 matmul peak {peak:.0f} GFLOP/s (same run)"
    )
    print("| model | variant | s/round (median) | GFLOP/s | % of matmul peak | peak RSS MB |")
    print("|---|---|---|---|---|---|")
    for model in [args.model] if args.model else list(MODELS):
        for variant in args.variants.split(","):
            cmd = [
                sys.executable,
                __file__,
                "--model",
                model,
                "--variant",
                variant,
                "--rounds",
                str(args.rounds),
                "--threads",
                str(args.threads),
            ]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            res = json.loads(out.split("RESULT ", 1)[1])
            print(
                f"| {model} | {variant} | {res['median_s']:.2f} | {res['gflops']:.1f} | "
                f"{100 * res['gflops'] / peak:.0f}% | {res['peak_rss_mb']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
