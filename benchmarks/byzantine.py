"""Robust aggregators under attack: 2 of the 10 clients of every round send x + scale N(0, 1)
(tests/byzantine.py's test-only attacker) on experiments/server_side_dirichlet.toml; final and
top test accuracy per aggregator, with and without the attackers, per seed (updates that
diverge are skipped, so a broken run goes on at chance level instead of stopping).

    .venv/bin/python benchmarks/byzantine.py --rounds 30 --seeds 0 1 2 [--set partition=iid]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch

from fedretain.recipe.config import load_config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the attacker lives in tests/
from tests.byzantine import accuracy_under_attack

AGGREGATORS = {
    "mean": [],
    "median": [],
    "trimmed_mean": [],  # beta 0.2: drops 2 of 10 at each end
    "krum": ["aggregator.num_malicious=2"],
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="experiments/server_side_dirichlet.toml")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--scale", type=float, default=10.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--set", nargs="*", default=[], help="KEY=VALUE settings for every run")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print("| aggregator | attackers | final acc per seed | mean final | mean top |")
    print("|---|---|---|---|---|")
    for name, extra in AGGREGATORS.items():
        for count in (2, 0):
            finals, tops = [], []
            for seed in args.seeds:
                overrides = [f"aggregator={name}", f"rounds={args.rounds}", f"seed={seed}", *extra]
                # a broken global model makes honest clients diverge: skip them, go on
                overrides += ["on_divergence=skip", *args.set]
                acc = accuracy_under_attack(load_config(args.config, overrides), count, args.scale)
                finals.append(acc[-1])
                tops.append(max(acc))
            shown = " / ".join(f"{a:.3f}" for a in finals)
            print(
                f"| {name} | {count} of 10 | {shown} | {statistics.mean(finals):.3f} "
                f"| {statistics.mean(tops):.3f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
