"""Every preset at ``--scale paper``: floating-point operations, local steps and the time on one
H100 they imply (:mod:`fedretain.studies.reproduce.cost`), written to the committed table
``fedretain/studies/presets/paper_cost.json`` that ``fedretain reproduce --list`` and
docs/reproduce.md show. It counts (the real code on random inputs of each paper's dataset's
shape, under torch's FLOP counter); nothing is timed. A preset already in the table is kept
unless named with ``--force``; the table is rewritten after each preset, so a killed run
continues where it stopped.

    .venv/bin/python benchmarks/paper_cost.py [NAME ...] [--force]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from fedretain.files import write_json
from fedretain.studies.presets import PRESETS
from fedretain.studies.reproduce.cost import COST_FILE, as_json, preset_cost, read_costs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help="presets (default: every one)")
    parser.add_argument("--force", action="store_true", help="count the named presets again")
    parser.add_argument("--out", type=Path, default=COST_FILE, help="the table to write")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    costs = read_costs(args.out)
    names = args.names or list(PRESETS)
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        print(f"error: unknown preset(s) {', '.join(unknown)}", file=sys.stderr)
        return 2
    for name in names:
        if name in costs and not args.force:
            continue
        start = time.perf_counter()
        costs[name] = preset_cost(name, echo=lambda line: print(line, file=sys.stderr))
        took = time.perf_counter() - start
        ordered = {n: costs[n] for n in PRESETS if n in costs}
        write_json(args.out, as_json(ordered))
        print(f"{name}: {costs[name].text()} [counted in {took:.0f} s]")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
