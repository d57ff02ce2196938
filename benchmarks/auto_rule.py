"""The measurements behind ``engine=auto``'s rule: one job's round on each engine and thread count.

Each variant is a ``fedretain run`` of the main job's setting
(``experiments/fmnist_pathological.toml``: 100 Fashion-MNIST clients of two label shards, 600
samples each, 10 per round, one local epoch of batch 10, 60 steps per client and round) in its
own process, one after another, with the forgetting diagnostic off (it is the same work on
every engine). ``s/round`` is the median of the rounds after the first (each round includes
the test evaluation, 10,000 samples); ``first round`` holds the start-up (compilation
included). Prints a Markdown table.

    .venv/bin/python benchmarks/auto_rule.py --rounds 10 --threads 1,2
    .venv/bin/python benchmarks/auto_rule.py --rounds 4 --threads 2 model=cnn
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = {
    "sequential": ["engine=sequential"],
    "sequential-w2": ["engine=sequential", "engine.workers=2"],
    "vmap-10": ["engine=vmap", "engine.chunk=10"],
    "vmap-10-compiled": ["engine=vmap", "engine.chunk=10", "engine.compile=true"],
    "auto": ["engine=auto"],
}


def measure(keys: list[str], rounds: int) -> dict[str, float | str]:
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "fedretain.cli", "run"]
        cmd += ["--config", str(ROOT / "experiments/fmnist_pathological.toml")]
        cmd += [f"rounds={rounds}", "eval_every=1", "checkpoint_every=0", *keys, "--out", out]
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
        rows = [json.loads(line) for line in (Path(out) / "metrics.jsonl").open()]
        summary = json.loads((Path(out) / "summary.json").read_text())
    seconds = [r["seconds"] for r in rows]
    per_round = [b - a for a, b in itertools.pairwise(seconds[1:])]
    chosen = next((line for line in proc.stdout.splitlines() if "engine=auto" in line), "")
    return {
        "wall": wall,
        "first": seconds[1] - seconds[0],
        "round": statistics.median(per_round),
        "engine": chosen.removeprefix("engine=auto: ") or summary.get("engine", ""),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", default="1,2", help="comma-separated torch thread counts")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("keys", nargs="*", help="extra config keys, e.g. model=cnn")
    args = parser.parse_args()
    print("| threads | variant | s/round (median) | first round s | whole run s | engine |")
    print("|---|---|---|---|---|---|")
    for threads in args.threads.split(","):
        for name in args.variants.split(","):
            keys = [*VARIANTS[name], f"threads={threads}", "diagnostics=[]", *args.keys]
            m = measure(keys, args.rounds)
            print(
                f"| {threads} | {name} | {m['round']:.3f} | {m['first']:.2f} | {m['wall']:.1f} "
                f"| {m['engine']} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
