"""The ``fedretain`` command line: run, compare, partition, list.

Errors the user can fix print one line (``error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from fedretain.errors import FedRetainError


def _cmd_run(args: argparse.Namespace) -> int:
    from fedretain.errors import ConfigError
    from fedretain.experiments.run import run_experiment
    from fedretain.recipe.config import load_config

    if args.resume:
        out = Path(args.resume)
        if args.config or (args.out and Path(args.out).resolve() != out.resolve()):
            raise ConfigError(
                "--resume DIR continues DIR with its own config.toml; drop --config/--out"
            )
        if not (out / "config.toml").is_file():
            raise ConfigError(f"cannot resume {out}: it holds no config.toml of a fedretain run")
        cfg = load_config(out / "config.toml", args.overrides)
    elif not args.out:
        raise ConfigError("run needs --out DIR for its results (or --resume DIR to continue one)")
    else:
        out = Path(args.out)
        cfg = load_config(args.config, args.overrides)
    summary = run_experiment(cfg, out, resume=bool(args.resume))
    print(
        f"{summary['name']}: final accuracy {summary['final_accuracy']:.4f}, "
        f"top {summary['top_accuracy']:.4f}, {summary['rounds']} rounds, "
        f"{summary['bytes_up'] / 1e6:.1f} MB up, {summary['wall_seconds']:.1f} s -> {out}"
    )
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from fedretain.core.tree import tree_numel
    from fedretain.recipe.config import load_config
    from fedretain.recipe.federation import build_federation

    configs = [a for a in args.items if a.endswith(".toml") and "=" not in a]
    overrides = [a for a in args.items if a not in configs]
    if len(configs) > 1:
        raise FedRetainError(f"validate takes one config file, got {', '.join(configs)}")
    cfg = load_config(configs[0] if configs else None, overrides)
    fed = build_federation(cfg)  # loads the data, splits it, builds the model and the algorithm
    sizes = [len(p) for p in fed.parts]
    params, _ = fed.task.init()
    print(
        f"ok: {cfg.algorithm} on {cfg.dataset} ({len(fed.dataset.y_train)} training samples) "
        f"over {len(sizes)} clients of {min(sizes)}-{max(sizes)} samples ({cfg.partition}), "
        f"model {cfg.model} with {tree_numel(params):,} parameters, {cfg.rounds} rounds"
    )
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from fedretain.experiments.report import compare

    compare(args.dirs, args.out, reference=args.reference)
    print(f"report written to {Path(args.out) / 'report.md'}")
    return 0


def _cmd_partition(args: argparse.Namespace) -> int:
    from fedretain.data.datasets import load_dataset
    from fedretain.data.partition import class_counts, summary
    from fedretain.experiments.plots import plot_partition
    from fedretain.recipe.config import load_config
    from fedretain.recipe.federation import make_clients

    cfg = load_config(args.config, args.overrides)
    ds = load_dataset(cfg.dataset, cfg.data_dir or None, **cfg.dataset_params)
    parts = make_clients(cfg, ds)
    print(summary(parts, ds.train_labels, ds.num_classes))
    if args.out:
        plot_partition(class_counts(parts, ds.train_labels, ds.num_classes), args.out)
        print(f"heat map written to {args.out}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from fedretain.registry import kind

    registry = kind(LISTS[args.what])
    width = max(len(n) for n in registry)
    for name, entry in registry.items():
        params = ", ".join(f"{k}={v!r}" for k, v in registry.params(name).items())
        print(f"{name:<{width}}  {entry.description}" + (f"  [{params}]" if args.params else ""))
    return 0


# `fedretain list <what>` -> the registry's kind
LISTS = {
    "algorithms": "algorithm",
    "datasets": "dataset",
    "partitions": "partition",
    "models": "model",
    "losses": "loss",
    "optimizers": "optimizer",
    "server-opts": "server_opt",
    "aggregators": "aggregator",
    "participations": "participation",
    "engines": "engine",
    "stores": "store",
    "diagnostics": "diagnostic",
}


def version() -> str:
    """fedretain's version, from the installed package's metadata (``fedretain.__version__``)."""
    import fedretain

    return fedretain.__version__


def settings_help(width: int = 100) -> str:
    """Every config key with its default and meaning (:class:`~fedretain.recipe.config.Config`
    fields' help), and every component's entries with their options and defaults (the
    registries): the tail of ``fedretain run --help``."""
    from fedretain.recipe.config import (
        COMPONENTS,
        NAMED,
        describe_settings,
        option_defaults,
        param_help,
    )
    from fedretain.registry import PROVIDERS, kind

    def wrap(text: str, indent: str) -> list[str]:
        return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent) or []

    def entries(registry_kind: str, prefix: str | None) -> list[str]:
        registry = kind(registry_kind)
        out = []
        for name, entry in registry.items():
            out += wrap(f"{name}: {entry.description}", "      ")
            if prefix and registry.params(name):
                out += wrap(", ".join(option_defaults(prefix, name)), "          ")
        return out

    lines = wrap(
        "settings, with their defaults (KEY=VALUE on the command line, KEY = VALUE in a "
        "--config TOML file):",
        "",
    )
    named_by = {c.name_field: p for p, c in COMPONENTS.items()}
    for s in describe_settings():
        lines.append(f"  {s.key} = {s.default}")
        lines += wrap(s.help, "      ")
        if s.key in NAMED and NAMED[s.key] in PROVIDERS:
            lines += entries(NAMED[s.key], None)
        elif s.key in named_by:
            lines += wrap(f"options: {named_by[s.key]}.<option> (below)", "      ")
    lines.append("")
    lines += wrap(
        "component options, <prefix>.<option>=VALUE (in a TOML file, a [<prefix>] table, "
        "with name = ... for the component): each kind's entries with their options' "
        "defaults:",
        "",
    )
    for prefix, comp in COMPONENTS.items():
        lines.append(f"  {prefix}.<option>: {param_help(prefix)} ({comp.name_field}=NAME)")
        lines += entries(comp.kind, prefix)
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose help may end with a text computed only when it is shown."""

    help_tail: Callable[[], str] | None = None

    def format_help(self) -> str:
        text = super().format_help()
        return f"{text}\n{self.help_tail()}\n" if self.help_tail else text


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fedretain", description="Federated learning that does not forget.")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="run one experiment and write its results folder",
        description="Run one experiment and write its results folder. Settings come from the "
        "defaults, then --config, then KEY=VALUE arguments (values read as TOML).",
    )
    run.help_tail = settings_help
    run.add_argument("--config", help="a TOML file of settings")
    run.add_argument("--out", help="results folder to write")
    run.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its checkpoint")
    run.add_argument("overrides", nargs="*", help="KEY=VALUE settings, e.g. algorithm=scaffold")
    run.set_defaults(fn=_cmd_run)

    val = sub.add_parser("validate", help="check a configuration (and its data) without training")
    val.add_argument("items", nargs="*", help="[exp.toml] [KEY=VALUE ...]")
    val.set_defaults(fn=_cmd_validate)

    cmp_ = sub.add_parser("compare", help="compare results folders: table and plots")
    cmp_.add_argument("dirs", nargs="+", help="results folders of `fedretain run`")
    cmp_.add_argument("--out", required=True, help="report folder to write")
    cmp_.add_argument(
        "--reference",
        action="append",
        help="results folder of the reference run for R_a (SGD); repeat it, one per seed",
    )
    cmp_.set_defaults(fn=_cmd_compare)

    part = sub.add_parser("partition", help="summarise a partition and draw its heat map")
    part.add_argument("--config", help="a TOML file of settings")
    part.add_argument("--out", help="PNG heat map to write")
    part.add_argument("overrides", nargs="*", help="KEY=VALUE, e.g. partition=dirichlet")
    part.set_defaults(fn=_cmd_partition)

    lst = sub.add_parser("list", help="list what is available")
    lst.add_argument("what", choices=list(LISTS), help="the kind of component")
    lst.add_argument("--params", action="store_true", help="also show each one's parameters")
    lst.set_defaults(fn=_cmd_list)
    return p


def dispatch(args: argparse.Namespace) -> int:
    """Run the chosen command: bad input is one line on stderr and exit status 2."""
    try:
        return args.fn(args)
    except FedRetainError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    return dispatch(build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
