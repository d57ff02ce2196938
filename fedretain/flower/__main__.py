"""``python -m fedretain.flower``: fedretain experiments on real Flower processes.

- ``local``: start a SuperLink and one SuperNode per client on 127.0.0.1, run one experiment
  with ``flwr run``, stop every process (``Ctrl-C`` stops them too); the SuperNodes are warm
  (one ClientApp process each for every message) unless ``--cold``;
- ``app``: write a Flower app folder for one experiment, to run on a SuperLink of your own
  with ``flwr run DIR <connection> --stream`` (SuperNodes started with
  ``--node-config "partition-id=<k> num-partitions=<clients>"``);
- ``node``: a SuperNode (``flower-supernode``'s arguments) whose ClientApp process stays warm
  across messages (``--cold``: Flower's process per message; ``--poll S``: the SuperNode's
  polling interval), see :mod:`fedretain.flower.node`;
- ``worker``: the warm ClientApp process alone, beside a ``flower-supernode --isolation
  process`` of your own (``--runtime-api-address HOST:PORT``).

Settings are those of ``fedretain run`` (``--config exp.toml`` and ``KEY=VALUE``);
``engine`` is set to ``flower``.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from fedretain.cli import dispatch
from fedretain.errors import FedRetainError
from fedretain.extras import installed, require

if TYPE_CHECKING:
    from fedretain.recipe.config import Config


def _config(args: argparse.Namespace) -> Config:
    from fedretain.recipe.config import load_config

    return load_config(args.config, [*args.overrides, "engine=flower"])


def _cmd_local(args: argparse.Namespace) -> int:
    from fedretain.flower.deployment import LocalFederation

    cfg = _config(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the processes on SIGTERM too
    print(f"starting a SuperLink and {cfg.clients} SuperNodes on 127.0.0.1", file=sys.stderr)
    with LocalFederation(cfg.clients, warm=not args.cold) as federation:
        summary = federation.run(cfg, args.out, resume=args.resume)
    print(
        f"{summary['name']}: final accuracy {summary['final_accuracy']:.4f}, "
        f"{summary['rounds']} rounds, {summary.get('lost_replies', 0)} lost replies, "
        f"{summary['wall_seconds']:.1f} s -> {args.out}"
    )
    return 0


def _cmd_app(args: argparse.Namespace) -> int:
    from fedretain.flower.deployment import write_app

    if not args.overrides or "=" in args.overrides[0]:
        raise FedRetainError("app needs the folder to write first: app DIR [KEY=VALUE ...]")
    folder, args.overrides = args.overrides[0], args.overrides[1:]
    cfg = _config(args)
    folder = write_app(folder, cfg, args.out, resume=args.resume)
    print(f"Flower app written to {folder}; run it with: flwr run {folder} <connection> --stream")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m fedretain.flower",
        description="fedretain experiments on Flower SuperLink/SuperNode processes.",
    )
    p.epilog = (
        "also: node [--cold] [--poll S] FLOWER-SUPERNODE-ARGS (a SuperNode with a warm "
        "ClientApp process), worker --runtime-api-address HOST:PORT (that process alone)"
    )
    sub = p.add_subparsers(dest="command", required=True)
    local = sub.add_parser("local", help="run on a SuperLink and SuperNodes started on 127.0.0.1")
    app = sub.add_parser("app", help="write a Flower app folder for `flwr run`")
    for q, items in ((local, "KEY=VALUE settings"), (app, "DIR (the folder), then KEY=VALUE")):
        q.add_argument("--config", help="a TOML file of settings")
        q.add_argument("--out", required=True, help="results folder (on the SuperLink's machine)")
        q.add_argument("--resume", action="store_true", help="continue the run in --out")
        q.add_argument("overrides", nargs="*", help=f"{items}, e.g. algorithm=scaffold")
    local.add_argument(
        "--cold", action="store_true", help="a new ClientApp process per message (Flower's way)"
    )
    local.set_defaults(fn=_cmd_local)
    app.set_defaults(fn=_cmd_app)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not installed("flwr"):  # the flower extra: one line, before any of Flower is imported
        return dispatch(argparse.Namespace(fn=lambda _: require("flwr", "fedretain.flower")))
    if argv and argv[0] in ("node", "worker"):  # Flower's own arguments: passed through
        from fedretain.flower import node

        run = node.node_main if argv[0] == "node" else node.worker_main
        return dispatch(argparse.Namespace(fn=lambda _: run(argv[1:])))
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)  # KEY=VALUE may come before and after options
    unknown = [item for item in rest if item.startswith("-")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.overrides = [*args.overrides, *rest]
    if args.out:
        args.out = str(Path(args.out).resolve())
    return dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
