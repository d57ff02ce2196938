"""Per-client state at scale: SCAFFOLD's ``c_i`` for 10,000 clients on ``cnn-fedavg``.

Every one of ``--clients`` clients (6 random 1x28x28 samples each, 10 classes) takes part once,
in rounds of ``--per-round`` clients, one local SGD step each, so that at the end the store
holds one ``c_i`` (582,026 floats) per client. Printed: the estimate (bytes per client x
clients), the measured store size, the peak RSS of the process and the wall time; checked:
every client has a state and SCAFFOLD's server variate equals the mean of all ``c_i``
(``c = (1/N) sum_i c_i`` holds exactly in exact arithmetic).

    .venv/bin/python benchmarks/scale_state.py --store disk --dtype float16
    .venv/bin/python benchmarks/scale_state.py --store memory --dtype float16
    .venv/bin/python benchmarks/scale_state.py --clients 300 --per-round 100   # a quick look

The slow test ``tests/engines/test_scale.py`` runs the first line. Results: RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

SAMPLES = 6


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def run(
    clients: int = 10_000,
    per_round: int = 500,
    store: str = "disk",
    dtype: str = "float16",
    folder: str | Path | None = None,
    model: str = "cnn-fedavg",
) -> dict:
    """Run the scale check; returns the measured numbers (see the module docstring)."""
    from fedretain.algorithms import build_algorithm
    from fedretain.core.client import Clients, LocalSpec
    from fedretain.core.task import Task
    from fedretain.core.tree import tree_numel
    from fedretain.data.base import Dataset
    from fedretain.engines.round import Rounds
    from fedretain.engines.sequential import SequentialEngine
    from fedretain.engines.store import make_store
    from fedretain.losses import get_loss
    from fedretain.models import build_model

    rss_start = peak_rss_mb()
    g = torch.Generator().manual_seed(0)
    n = clients * SAMPLES
    x = (torch.rand(n, 1, 28, 28, generator=g) * 255).to(torch.uint8)  # stored as images are
    y = torch.randint(0, 10, (n,), generator=g)
    ds = Dataset("scale", x, y, x[:10], y[:10], num_classes=10)
    parts = [np.arange(c * SAMPLES, (c + 1) * SAMPLES) for c in range(clients)]
    torch.manual_seed(0)
    task = Task(build_model(model, (1, 28, 28), 10), get_loss("ce"), 10)
    algo = build_algorithm("scaffold")
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        engine = Rounds(
            algo,
            task,
            Clients(ds, parts, LocalSpec(batch_size=SAMPLES, steps=1), seed=0),
            SequentialEngine(),
            make_store(store, dtype, Path(tmp) / "client_state"),
        )
        state = algo.server_init(*task.init())
        num_params = tree_numel(state["x"])
        per_client = num_params * (2 if dtype != "float32" else 4)
        rss_ready = peak_rss_mb()
        t0 = time.perf_counter()
        for rnd, start in enumerate(range(0, clients, per_round)):
            ids = np.arange(start, min(start + per_round, clients))
            state, _ = engine.run_round(state, rnd, 0.05, clients=ids)
        seconds = time.perf_counter() - t0
        # c = (1/N) sum_i c_i, summed in float64 straight from the store
        total = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in state["c"].items()}
        for cid in engine.store:
            for k, v in engine.store[cid]["c_i"].items():
                total[k] += v.double()
        err = max(float((total[k] / clients - state["c"][k].double()).abs().max()) for k in total)
        scale = max(float(v.abs().max()) for v in state["c"].values())
        return {
            "clients": clients,
            "per_round": per_round,
            "store": store,
            "dtype": dtype,
            "model": model,
            "num_params": num_params,
            "estimate_gb": per_client * clients / 1e9,
            "store_gb": engine.store.nbytes() / 1e9,
            "clients_with_state": len(engine.store),
            "rss_before_mb": rss_start,
            "rss_ready_mb": rss_ready,
            "peak_rss_mb": peak_rss_mb(),
            "seconds": seconds,
            "c_mean_max_abs_err": err,
            "c_max_abs": scale,
        }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--clients", type=int, default=10_000)
    ap.add_argument("--per-round", type=int, default=500)
    ap.add_argument("--store", choices=["memory", "disk"], default="disk")
    ap.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default="float16")
    ap.add_argument("--folder", default=None, help="where the disk store goes (default: /tmp)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    res = run(args.clients, args.per_round, args.store, args.dtype, args.folder)
    res["machine"] = f"{platform.machine()} {platform.processor() or ''}".strip()
    res["torch"] = torch.__version__
    print(json.dumps(res, indent=2))
    sys.exit(0 if res["clients_with_state"] == args.clients else 1)


if __name__ == "__main__":
    main()
