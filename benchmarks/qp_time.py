"""Time GradMA's QP (fedretain/algorithms/qp.py) at the size of the ``cnn-fedavg`` model.

Workload: ``p`` and the constraint columns are random normal float32 over the 582,026
parameters of ``cnn-fedavg`` (McMahan et al.'s CNN, ``build_model("cnn-fedavg", (1, 28, 28),
10)``). Server side (Alg. 3): 100 memory columns, ``M`` float32 (582026, 100).

    .venv/bin/python benchmarks/qp_time.py                  # every variant, a table
    .venv/bin/python benchmarks/qp_time.py --variant small  # one

Variants (each in its own process, so its peak RSS is its own):

- ``project``: :func:`project` on the flat vector (QR of ``[M | p]`` in float64 row chunks,
  Lawson–Hanson on the 101×100 factor, ``p + Mz`` in float64 chunks).
- ``gram``: the alternative kept for comparison: ``MᵀM``, ``Mᵀp`` in float64 chunks +
  :func:`solve_dual` + ``p + Mz`` (what ``project`` would cost working from ``G``).
- ``tree``: :func:`project_tree` whole-vector on the model's parameter tree, columns given
  as one tree whose leaves carry a leading axis of 100.
- ``tree_per_layer``: the same with ``per_layer=True`` (one QP per leaf, 8 leaves).
- ``small``: :func:`project_small` per call, C = 3 (the worker QP of Alg. 2).
- ``small_vmap10``: ``torch.func.vmap(project_small)`` over 10 clients, per call (all 10).

Median of 5 timed calls after 1 warm-up. ``rss_data_mb`` is the process's peak RSS after the
data is built and before the first call; ``peak_rss_mb`` is the peak at the end. Results:
benchmarks/RESULTS.md.
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
import time

import torch

VARIANTS = ["project", "gram", "tree", "tree_per_layer", "small", "small_vmap10"]
MEMORY, WORKER_C, CLIENTS, REPEATS = 100, 3, 10, 5


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def model_shapes() -> dict[str, tuple[int, ...]]:
    from fedretain.models import build_model

    model = build_model("cnn-fedavg", (1, 28, 28), 10)
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def make_call(variant: str):
    from fedretain.algorithms.qp import (
        _apply,
        _chunk_rows,
        project,
        project_small,
        project_tree,
        solve_dual,
    )

    shapes = model_shapes()
    d = sum(torch.Size(s).numel() for s in shapes.values())
    g = torch.Generator().manual_seed(0)
    if variant in ("project", "gram"):
        p, M = torch.randn(d, generator=g), torch.randn(d, MEMORY, generator=g)
        if variant == "project":
            return d, lambda: project(p, M)[1]

        def gram() -> torch.Tensor:
            G = torch.zeros(MEMORY, MEMORY, dtype=torch.float64)
            b = torch.zeros(MEMORY, dtype=torch.float64)
            step = _chunk_rows(MEMORY) * 16  # 64 MiB of float64 at a time
            for i in range(0, d, step):
                Mc = M[i : i + step].double()
                G += Mc.T @ Mc
                b += Mc.T @ p[i : i + step].double()
            z = solve_dual(G, b)
            _apply(p, M, z, p.dtype)
            return z

        return d, gram
    if variant.startswith("tree"):
        p = {k: torch.randn(s, generator=g) for k, s in shapes.items()}
        cols = {k: torch.randn((MEMORY, *s), generator=g) for k, s in shapes.items()}
        per_layer = variant == "tree_per_layer"
        return d, lambda: project_tree(p, cols, per_layer=per_layer)
    if variant == "small":
        p, M = torch.randn(d, generator=g), torch.randn(d, WORKER_C, generator=g)
        return d, lambda: project_small(p, M)
    P = torch.randn(CLIENTS, d, generator=g)
    Ms = torch.randn(CLIENTS, d, WORKER_C, generator=g)
    batched = torch.func.vmap(project_small)
    return d, lambda: batched(P, Ms)


def one(variant: str, threads: int) -> dict:
    torch.set_num_threads(threads)
    d, call = make_call(variant)
    rss_data = rss_mb()
    out = call()  # warm-up
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t0)
    active = int((out > 0).sum()) if variant in ("project", "gram") else None
    return {
        "variant": variant,
        "d": d,
        "times_s": times,
        "median_s": statistics.median(times),
        "active": active,
        "rss_data_mb": rss_data,
        "peak_rss_mb": rss_mb(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--variant", choices=VARIANTS)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    if args.variant:
        print("RESULT " + json.dumps(one(args.variant, args.threads)))
        return
    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{args.threads} threads, load average before {os.getloadavg()[0]:.1f}"
    )
    print("| variant | d | C | median ms | min-max ms | active z | RSS data MB | peak RSS MB |")
    print("|---|---|---|---|---|---|---|---|")
    for variant in VARIANTS:
        cmd = [sys.executable, __file__, "--variant", variant, "--threads", str(args.threads)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        res = json.loads(out.split("RESULT ", 1)[1])
        C = WORKER_C if variant.startswith("small") else MEMORY
        print(
            f"| {variant} | {res['d']} | {C} | {1e3 * res['median_s']:.1f} | "
            f"{1e3 * min(res['times_s']):.1f}-{1e3 * max(res['times_s']):.1f} | "
            f"{res['active'] if res['active'] is not None else '-'} | "
            f"{res['rss_data_mb']:.0f} | {res['peak_rss_mb']:.0f} |",
            flush=True,
        )
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
