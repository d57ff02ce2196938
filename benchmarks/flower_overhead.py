"""Per-round overhead of real Flower processes beyond training: a SuperLink and 3 SuperNodes on
127.0.0.1 (:class:`fedretain.flower.deployment.LocalFederation`), N rounds of a tiny
configuration (FedAvg, synthetic data, a 16-unit MLP, every client every round).

Each round's wall time comes from the run's ``metrics.jsonl`` (cumulative ``seconds``, every
round evaluated); the same rounds on the sequential engine, in this process, are the training
(and evaluation) they contain. Overhead per round = median Flower round - median sequential
round, over rounds 2..N (round 1 also pays each ClientApp's first build). The clients train in
parallel, so a round's overhead is what each client waits beyond its training; ``/client``
divides it by the clients (the cost of the processes summed over clients).

Modes: ``cold`` (Flower as shipped: ``flower-supernode``, a new ``flwr-clientapp`` process per
message, the SuperNode's 3 s idle poll), ``cold-poll`` (``node --cold``: the same with the
SuperNode's polling capped at 0.1 s) and ``warm`` (``python -m fedretain.flower node``: one
long-running ClientApp process per SuperNode, polling capped at 0.1 s; the default of
LocalFederation). The ServerApp retries missing reply objects after 20 ms in every mode
(:func:`fedretain.flower.federation.quick_object_pulls`). Modes run interleaved,
``--repeat`` times, each on a fresh federation::

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/flower_overhead.py
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/flower_overhead.py --rounds 8 --repeat 2 \\
        --modes cold,warm
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

MODES = {  # name -> LocalFederation options
    "cold": {"warm": False, "poll": 0.0},
    "cold-poll": {"warm": False, "poll": 0.1},
    "warm": {"warm": True, "poll": 0.1},
}
CONFIG = {
    "algorithm": "fedavg",
    "dataset": "synthetic",
    "dataset.devices": 6,
    "model": "mlp",
    "model.hidden": [16],
    "clients": 3,
    "clients_per_round": 3,
    "batch_size": 16,
    "lr": 0.1,
    "seed": 1,
    "threads": 1,
    "eval_every": 1,
    "checkpoint_every": 0,
}


def round_seconds(out: Path) -> list[float]:
    """Seconds of each round (1..N) from a run's metrics.jsonl."""
    records = [json.loads(line) for line in (out / "metrics.jsonl").open()]
    seconds = [r["seconds"] for r in sorted(records, key=lambda r: r["round"])]
    return [b - a for a, b in itertools.pairwise(seconds)]


def machine() -> str:
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    cpu = platform.processor() or platform.machine()
    return f"{platform.node()}, {os.cpu_count()} CPUs ({cpu}), load average {load}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--modes", default="cold,warm", help=f"comma-separated of {', '.join(MODES)}")
    p.add_argument("--json", help="write the results here too")
    args = p.parse_args(argv)
    modes = args.modes.split(",")
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        p.error(f"unknown mode(s) {unknown}; choose from {list(MODES)}")

    from fedretain.experiments.run import run_experiment
    from fedretain.flower.deployment import LocalFederation
    from fedretain.recipe.config import make_config

    print("command:", " ".join([Path(sys.executable).name, *sys.argv]))
    print("machine:", machine())
    settings = {**CONFIG, "rounds": args.rounds}
    work = Path(tempfile.mkdtemp(prefix="flower-overhead-"))
    results: list[dict] = []
    for rep in range(args.repeat):
        seq_cfg = make_config({**settings, "engine": "sequential"})
        run_experiment(seq_cfg, work / f"seq-{rep}", progress=False)
        seq = round_seconds(work / f"seq-{rep}")
        for mode in modes:
            cfg = make_config({**settings, "engine": "flower", "engine.reply_timeout": 120.0})
            out = work / f"{mode}-{rep}"
            started = time.perf_counter()
            with LocalFederation(3, **MODES[mode]) as fed:
                summary = fed.run(cfg, out, timeout=900)
            total = time.perf_counter() - started
            got = round_seconds(out)
            steady, ref = statistics.median(got[1:]), statistics.median(seq[1:])
            row = {
                "mode": mode,
                "repeat": rep + 1,
                "load": os.getloadavg()[0],
                "first_round": got[0],
                "round": steady,
                "sequential_round": ref,
                "overhead": steady - ref,
                "overhead_per_client": (steady - ref) / 3,
                "rounds": [round(s, 3) for s in got],
                "lost_replies": summary.get("lost_replies", 0),
                "total": total,
            }
            results.append(row)
            print(
                f"[{rep + 1}] {mode:9s} round {steady:6.2f} s (first {got[0]:5.2f} s), "
                f"sequential {ref:5.3f} s, overhead {steady - ref:5.2f} s/round "
                f"({(steady - ref) / 3:4.2f} s/client), whole run {total:5.1f} s, "
                f"load {row['load']:.2f}, rounds {row['rounds']}",
                flush=True,
            )
    print("\nmedian overhead per round (seconds), over repeats:")
    for mode in modes:
        values = [r["overhead"] for r in results if r["mode"] == mode]
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"  {mode:9s} {statistics.median(values):5.2f}  ({shown})")
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine(), "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
