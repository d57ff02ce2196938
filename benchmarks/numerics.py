"""Numerics before and after a refactor: run a fixed set of configs, then compare two
snapshots' ``metrics.jsonl`` and ``summary.json`` (apart from wall times).

    python benchmarks/numerics.py run /tmp/before            # on the old code
    python benchmarks/numerics.py run /tmp/after --like /tmp/before   # same configs, new code
    python benchmarks/numerics.py compare /tmp/before /tmp/after

The set (``run``): the main job's runs (the ``demo`` preset, seed 0, shortened to 6 rounds),
one medium ``fedcil-table1`` seed (FedAvg, FedAvg+ACGAN and FedCIL with per-client class
draws, 2 of its 5 tasks: ``scenario.tasks=2``), and the digits privacy config with
``privacy=dpsgd`` and ``privacy=client_fixed`` (noise multipliers 1 and 0.1); each on the
sequential and the vectorised engine where the run allows it (a run that diverges is compared
up to where it stopped). The configs are saved as ``KEY=VALUE`` lists in ``configs.json``;
``--like`` reruns exactly those, so that a change of the presets cannot hide a change of the
numbers. Runs go one at a time, one torch thread each; about 10 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

IGNORED = {"seconds", "wall_seconds"}  # wall time: differs run to run
ENGINES = ("sequential", "vmap")


def configs() -> dict[str, list[str]]:
    """name -> ``KEY=VALUE`` arguments of ``fedretain run``."""
    from fedretain.studies.presets import PRESETS
    from fedretain.studies.reproduce import as_args, resolve_data

    out: dict[str, list[str]] = {}
    demo = PRESETS.get("demo")
    plan = demo.factory(
        "small", [0], resolve_data(demo.meta["dataset"], demo.meta.get("standin"), [])
    )
    for spec in plan.runs:
        args = as_args({**plan.base, **spec.overrides, "name": spec.method, "threads": 1})
        for engine in ENGINES:
            out[f"demo-{spec.method}-{engine}"] = [
                *args,
                "rounds=6",
                "checkpoint_every=3",
                f"engine={engine}",
            ]
    fedcil = PRESETS.get("fedcil-table1")
    plan = fedcil.factory(
        "medium", [0], resolve_data(fedcil.meta["dataset"], fedcil.meta.get("standin"), [])
    )
    for spec in plan.runs:
        if spec.setting.endswith("drawn per client"):
            args = as_args({**plan.base, **spec.overrides, "name": spec.method, "threads": 1})
            rounds = int(dict(a.split("=", 1) for a in args)["scenario.rounds_per_task"]) * 2
            out[f"fedcil-{spec.method}"] = [*args, "scenario.tasks=2", f"rounds={rounds}"]
    for privacy, noise in itertools.product(("dpsgd", "client_fixed"), (1.0, 0.1)):
        for engine in ENGINES:
            out[f"privacy-{privacy}-{noise:g}-{engine}"] = [
                "--config",
                "experiments/privacy_digits.toml",
                f"privacy={privacy}",
                f"privacy.noise_multiplier={noise}",
                "rounds=8",
                "threads=1",
                f"engine={engine}",
            ]
    return out


def run(folder: Path, like: Path | None) -> None:
    import torch

    from fedretain.errors import DivergenceError
    from fedretain.experiments.run import run_experiment
    from fedretain.recipe.config import load_config

    torch.set_num_threads(1)
    folder.mkdir(parents=True, exist_ok=True)
    todo = json.loads((like / "configs.json").read_text()) if like else configs()
    (folder / "configs.json").write_text(json.dumps(todo, indent=1))
    for name, args in todo.items():
        if (folder / name / "summary.json").is_file():
            continue
        path = args[1] if args[:1] == ["--config"] else None
        cfg = load_config(path, args[2:] if path else args)
        try:
            summary = run_experiment(cfg, folder / name, progress=False, overwrite=True)
        except DivergenceError as e:  # its records and summary are written: compared as well
            print(f"{name}: {e}")
            continue
        print(f"{name}: {summary['final_accuracy']:.4f} ({summary['wall_seconds']:.1f} s)")


def strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip(v) for k, v in value.items() if k not in IGNORED}
    if isinstance(value, list):
        return [strip(v) for v in value]
    return value


def compare(a: Path, b: Path) -> int:
    from fedretain.files import read_json, read_jsonl

    names = sorted(json.loads((a / "configs.json").read_text()))
    bad = 0
    for name in names:
        for file, read in (("metrics.jsonl", read_jsonl), ("summary.json", read_json)):
            x, y = (p / name / file for p in (a, b))
            if not y.is_file():
                print(f"{name}/{file}: missing in {b}")
                bad += 1
                continue
            if strip(read(x)) != strip(read(y)):
                print(f"{name}/{file}: DIFFERS")
                bad += 1
    print(f"{len(names)} runs compared, {bad} files differ")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("folder", type=Path)
    r.add_argument("--like", type=Path, help="rerun the configs of this earlier snapshot")
    c = sub.add_parser("compare")
    c.add_argument("a", type=Path)
    c.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args.folder, args.like)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
