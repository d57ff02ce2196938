"""The command line's options for a study's runs as Ray tasks (``fedretain reproduce ... --ray``,
``fedretain sweep ... --ray``): their parser and the :class:`RayCluster` they name. Apart from
``cli.py`` so that the command line stays one screenful per command; the cluster itself is
:mod:`fedretain.studies.reproduce.cluster`, imported only when a study runs.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_ray_options(parser: argparse.ArgumentParser) -> None:
    """``--ray [ADDRESS]``, ``--run-cpus``, ``--run-gpus``: a study's runs as Ray tasks."""
    parser.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run each run as a Ray task: on the cluster at ADDRESS (auto: the one this machine "
        "joined; HOST:PORT; ray://HOST:10001), without it on RAY_ADDRESS's or a Ray started here; "
        "each node is checked first (see --storage for --out)",
    )
    parser.add_argument(
        "--run-cpus", type=float, default=1.0, help="with --ray: CPUs (torch threads) per run"
    )
    parser.add_argument(
        "--run-gpus",
        type=float,
        default=0.0,
        help="with --ray: GPUs per run (0.25: four runs share a GPU; runs then use device=cuda)",
    )
    parser.add_argument(
        "--stall-after",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --ray: stop when no run finished for this long (default: wait; a line every "
        "minute says how many are left)",
    )
    parser.add_argument(
        "--autoscaling",
        action="store_true",
        help="with --ray: the cluster adds nodes as runs wait (a Ray autoscaler, KubeRay), so "
        "no node has to hold a run yet; a note says so",
    )
    parser.add_argument(
        "--max-retries",
        type=int,
        default=None,
        help="with --ray: tries of a run again after its worker or node died, or failed for a "
        "reason of its node (out of memory, disk full: then on another node; default 3); it "
        "continues from its last checkpoint",
    )
    parser.add_argument(
        "--storage",
        choices=("auto", "shared", "ray"),
        default=None,
        help="with --ray: where the runs write: shared (--out on a filesystem every node "
        "shares), ray (each run on its node's scratch disk, its folder sent back to --out "
        "through Ray's object store at each checkpoint and at its end), auto (default: shared "
        "where every node shares --out, else ray)",
    )
    parser.add_argument(
        "--no-ship-code",
        dest="ship_code",
        action="store_false",
        help="with --ray: the nodes run the fedretain they have installed (checked to be the "
        "caller's version) instead of the caller's code, shipped to each task",
    )


def ray_cluster(args: argparse.Namespace) -> Any:
    """The :class:`RayCluster` the options name, or None without ``--ray``."""
    from fedretain.errors import ConfigError
    from fedretain.studies.reproduce.cluster import RayCluster

    if args.ray is None:
        ray_only = (args.run_cpus != 1.0, args.run_gpus != 0.0, args.max_retries is not None)
        ray_only += (args.storage is not None,)
        if any(ray_only) or args.stall_after or args.autoscaling or not args.ship_code:
            raise ConfigError(
                "--run-cpus, --run-gpus, --max-retries, --stall-after, --autoscaling, --storage "
                "and --no-ship-code are for Ray tasks: give --ray with them"
            )
        return None
    retries = 3 if args.max_retries is None else args.max_retries
    return RayCluster(
        args.ray or None,
        args.run_cpus,
        args.run_gpus,
        retries,
        stall_after=args.stall_after,
        autoscaling=args.autoscaling,
        ship_code=args.ship_code,
        storage=args.storage or "auto",
    )
