"""The arithmetic of ``fedretain reproduce fedcil-table1 --scale paper``: floating-point
operations per round and per run of each method, counted with torch's ``FlopCounterMode`` (the
matrix products and convolutions, forward and backward), and the least time the preset can take
on a GPU at a given rate.

For each method a round of the paper's configuration (5 clients, the ACGAN at width 64, batch
32, Adam) is counted at 1 and 2 local steps (and FedCIL's server consolidation at 1 and 2
steps): the round's cost is linear in both, so the paper's round (400 local steps, 100
consolidation steps) follows exactly. Counting runs the real code on the CPU (seconds per
method); nothing is timed.

    .venv/bin/python benchmarks/continual_flops.py [--rate-tflops 50,200]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from fedretain.experiments.presets import PRESETS
from fedretain.experiments.reproduce.jobs import as_args, resolve_data
from fedretain.experiments.run import build_rounds
from fedretain.recipe.config import load_config

PRESET = "fedcil-table1"


def round_flops(keys: dict[str, Any], steps: int, consolidation: int) -> int:
    """Floating-point operations of the second round (the replay is on from the first task's
    end; its cost does not depend on it) at ``steps`` local steps."""
    keys = {**keys, "local_steps": steps, "device": "cpu", "engine": "sequential"}
    if "algo.consolidation_steps" in keys or keys.get("algorithm") == "fedcil":
        keys["algo.consolidation_steps"] = consolidation
    fed, rounds = build_rounds(load_config(None, as_args(keys)))
    state = fed.algorithm.server_init(*fed.task.init())
    clients = list(range(fed.config.clients_per_round))
    state, _ = rounds.run_round(state, 0, fed.config.lr, clients=clients)
    with FlopCounterMode(display=False) as counter:
        rounds.run_round(state, 1, fed.config.lr, clients=clients)
    return int(counter.get_total_flops())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rate-tflops",
        default="50,200",
        help="sustained rates (TFLOP/s) to turn the count into hours",
    )
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rate_tflops.split(",") if r]
    torch.set_num_threads(2)
    entry = PRESETS.get(PRESET)
    data = resolve_data(entry.meta["dataset"], entry.meta.get("standin"), [])
    if data.missing:
        print(f"{PRESET}: data missing: {data.missing}", file=sys.stderr)
        return 2
    seeds = entry.meta["seeds"]["paper"]
    plan = entry.factory("paper", list(range(seeds)), data)
    specs = {}
    for spec in plan.runs:  # one run per method (the settings cost alike)
        specs.setdefault(spec.method, spec)
    base = plan.base
    paper_steps, rounds = int(base["local_steps"]), int(base["rounds"])
    total = 0.0
    rows = []
    for method, spec in specs.items():
        keys = {**base, **spec.overrides}
        paper_cons = int(keys.get("algo.consolidation_steps", 100))
        f11, f21 = round_flops(keys, 1, 1), round_flops(keys, 2, 1)
        per_step = f21 - f11  # the round's 5 clients, one local step each
        fixed = f11 - per_step  # the rest of the round (the consolidation's 1 step included)
        if method == "FedCIL":
            per_cons = round_flops(keys, 1, 2) - f11
            fixed += (paper_cons - 1) * per_cons
        per_round = fixed + paper_steps * per_step
        runs = sum(1 for s in plan.runs if s.method == method)
        run_flops = rounds * per_round
        total += runs * run_flops
        rows.append((method, per_step / 5, per_round, run_flops, runs))
        print(f"counted {method}", file=sys.stderr)
    print("| method | GFLOP per client step | TFLOP per round | PFLOP per run | runs |")
    print("|---|---|---|---|---|")
    for method, step, rnd, run, runs in rows:
        print(f"| {method} | {step / 1e9:.1f} | {rnd / 1e12:.2f} | {run / 1e15:.2f} | {runs} |")
    hours = ", ".join(f"{total / (r * 1e12) / 3600:.1f} h at {r:g} TFLOP/s" for r in rates)
    print(f"\n{PRESET} --scale paper: {len(plan.runs)} runs, {total / 1e15:.0f} PFLOP; {hours}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
