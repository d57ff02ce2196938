"""The ``fedretain`` command line: run, validate, compare, partition, list, privacy, reproduce,
sweep.

Errors the user can fix print one line (``error: ...``) and exit with status 2.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from fedretain.cli_ray import add_ray_options, ray_cluster
from fedretain.data.cli import add_data_commands
from fedretain.errors import FedRetainError, os_error_message


def _config_and_overrides(config: str | None, items: list[str]) -> tuple[str | None, list[str]]:
    """The config file (``--config FILE`` or a bare ``FILE.toml`` among the arguments) and the
    KEY=VALUE settings."""
    files = [a for a in items if a.endswith(".toml") and "=" not in a]
    overrides = [a for a in items if a not in files]
    files = [config, *files] if config else files
    if len(files) > 1:
        raise FedRetainError(f"one config file at a time, got {', '.join(files)}")
    return (files[0] if files else None), overrides


def _cmd_run(args: argparse.Namespace) -> int:
    from fedretain.errors import ConfigError
    from fedretain.experiments.outputs import check_out
    from fedretain.experiments.run import run_experiment
    from fedretain.recipe.config import load_config

    config, overrides = _config_and_overrides(args.config, args.overrides)
    if args.resume:
        out = Path(args.resume)
        if config or args.overwrite or (args.out and Path(args.out).resolve() != out.resolve()):
            raise ConfigError(
                "--resume DIR continues DIR with its own config.toml; drop --config/--out/"
                "--overwrite"
            )
        if not out.exists():
            raise ConfigError(
                f"cannot resume {out}: {out} does not exist; --resume takes the folder a run "
                "wrote (its --out)"
            )
        if not (out / "config.toml").is_file():
            raise ConfigError(f"cannot resume {out}: it holds no config.toml of a fedretain run")
        cfg = load_config(out / "config.toml", overrides)
    elif not args.out:
        raise ConfigError("run needs --out DIR for its results (or --resume DIR to continue one)")
    else:
        out = Path(args.out)
        cfg = load_config(config, overrides)
        check_out(out, args.overwrite)  # an old run is removed once the new one is built
    summary = run_experiment(cfg, out, resume=bool(args.resume), overwrite=args.overwrite)
    if summary.get("paused"):
        print(
            f"{summary['name']}: paused after round {summary['rounds']} of "
            f"{summary['planned_rounds']} (stop_after={summary['stop_after']:g} s), a checkpoint "
            f"saved; continue with `{summary['continue']}`"
        )
        return 0
    skipped = summary.get("skipped_updates", 0)
    print(
        f"{summary['name']}: final accuracy {summary['final_accuracy']:.4f}, "
        f"top {summary['top_accuracy']:.4f}, {summary['rounds']} rounds, "
        + (f"{skipped} client updates skipped, " if skipped else "")
        + f"{summary['bytes_up'] / 1e6:.1f} MB up, {summary['wall_seconds']:.1f} s -> {out}"
    )
    return 0


def components() -> list[str]:
    """Import every layer's registrations (the run's layer imports them all, the recipe's
    below it) and return the kinds a config chooses from, in the config's order."""
    import fedretain.experiments.run  # noqa: F401
    from fedretain.recipe.config import COMPONENTS, NAMED

    return list(dict.fromkeys([*(c.kind for c in COMPONENTS.values()), *NAMED.values()]))


def _cmd_validate(args: argparse.Namespace) -> int:
    from fedretain.core.tree import tree_numel
    from fedretain.recipe.config import load_config
    from fedretain.recipe.federation import build_federation
    from fedretain.registry import kind

    components()  # the diagnostics and trackers are checked too
    config, overrides = _config_and_overrides(args.config, args.items)
    cfg = load_config(config, overrides)
    fed = build_federation(cfg)  # loads the data, splits it, builds the model and the algorithm
    kind("engine").build(cfg.engine, cfg.engine_params, fed).close()  # checks its options
    sizes = [len(p) for p in fed.parts]
    params, _ = fed.task.init()
    print(
        f"ok: {cfg.algorithm} on {cfg.dataset} ({len(fed.dataset.y_train)} training samples) "
        f"over {len(sizes)} clients of {min(sizes)}-{max(sizes)} samples ({cfg.partition}), "
        f"model {cfg.model} with {tree_numel(params):,} parameters, {cfg.rounds} rounds"
    )
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    from fedretain.studies.compare import compare

    compare(args.dirs, args.out, reference=args.reference, allow_mixed=args.allow_mixed)
    print(f"report written to {Path(args.out) / 'report.md'}")
    return 0


def _cmd_partition(args: argparse.Namespace) -> int:
    from fedretain.data.datasets import load_dataset
    from fedretain.data.partition import class_counts, summary
    from fedretain.experiments.plots import plot_partition
    from fedretain.files import figure_format
    from fedretain.recipe.config import load_config
    from fedretain.recipe.federation import describe_task_plan, make_clients

    if args.out:
        figure_format(args.out)  # a name whose format is known, before anything is computed
    cfg = load_config(*_config_and_overrides(args.config, args.overrides))
    ds = load_dataset(cfg.dataset, cfg.data_dir or None, **cfg.dataset_params)
    plan = describe_task_plan(cfg, ds)
    if plan is not None:  # a continual scenario: its task plan is the partition
        print(plan)
        return 0
    parts = make_clients(cfg, ds)
    print(summary(parts, ds.train_labels, ds.num_classes))
    if args.out:
        plot_partition(class_counts(parts, ds.train_labels, ds.num_classes), args.out)
        print(f"heat map written to {args.out}")
    return 0


def _numbers(option: str, text: str, kind: Callable[[str], Any], example: str) -> tuple:
    """A comma-separated option (``--images 0,7``): its values, or a ConfigError naming it;
    empty items are skipped, and an option that lists none is refused."""
    from fedretain.errors import ConfigError

    items = [i.strip() for i in text.split(",") if i.strip()]
    what = "training-image indices" if option == "--images" else "numbers"
    try:
        values = tuple(kind(i) for i in items)
    except ValueError:
        raise ConfigError(
            f"{option} must be comma-separated {what}, e.g. {option} {example}; got {text!r}"
        ) from None
    if not values:
        raise ConfigError(f"{option} {text!r} lists none: give {what}, e.g. {option} {example}")
    return values


def _cmd_privacy(args: argparse.Namespace) -> int:
    from fedretain.errors import ConfigError
    from fedretain.recipe.config import load_config
    from fedretain.studies.privacy import PrivacyStudy, Study

    images = _numbers("--images", args.images, int, "0,7") if args.images != "" else ()
    study = Study(
        targets=args.targets,
        images=images,
        attack=args.attack,
        iterations=args.iterations,
        restarts=args.restarts,
        steps=args.steps,
        sigmas=_numbers("--sigmas", args.sigmas, float, "0.01,0.1,1"),
        max_grad_norm=args.max_grad_norm,
        train=not args.no_train,
        seed=args.seed,
    )
    cfg = load_config(args.config, args.overrides)
    privacy = PrivacyStudy(cfg, args.out, study)  # builds the federation; writes nothing yet
    available = len(privacy.fed.dataset.y_train)
    if not images and study.targets > available:
        raise ConfigError(
            f"--targets {study.targets} is more than the {available} training images of "
            f"{cfg.dataset}; pass --targets {available} or fewer (or --images I,J)"
        )
    result = privacy.run()
    line = f"sigma* {result['sigma_matched']:g}"
    if "runs" in result:
        accs = ", ".join(f"{k} {v['final_accuracy']:.4f}" for k, v in result["runs"].items())
        line += f"; final accuracy: {accs}"
    print(f"{line}; report written to {Path(args.out) / 'report.md'}")
    paths = [Path(args.out) / "grids" / f"{method}.png" for method in result["attacks"]]
    grids = [str(p) for p in paths if p.exists()]
    if grids:
        print("reconstructions (originals on top): " + ", ".join(grids))
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from fedretain.errors import ConfigError
    from fedretain.studies.reproduce import list_presets, reproduce

    if args.list:
        print("\n".join(list_presets()))
        return 0
    if not args.names:
        raise ConfigError("reproduce needs a preset NAME (or --list to see them)")
    names = [n for n in args.names if "=" not in n]
    extra = [n for n in args.names if "=" in n]  # KEY=VALUE settings for every run
    if not names:
        raise ConfigError("reproduce needs a preset NAME before its KEY=VALUE settings")
    if not args.out:
        raise ConfigError("reproduce needs --out DIR for its runs and report")
    done = reproduce(
        names,
        args.out,
        args.scale,
        args.seeds,
        args.jobs,
        args.data_dir,
        extra,
        cluster=ray_cluster(args),
        report_only=args.report_only,
        stop_after=args.stop_after,
    )
    if done.diverged or done.failed:  # the report is written, but some rows have no result
        print(f"error: {done.problem()}", file=sys.stderr)
        return 1
    return 0


def _cmd_ledger(args: argparse.Namespace) -> int:
    from fedretain.studies.reproduce.ledger import write_ledger

    print(f"ledger written to {write_ledger(Path(args.results), Path(args.out))}")
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    from fedretain.errors import ConfigError
    from fedretain.studies.sweep import parse_axis, sweep

    config, overrides = _config_and_overrides(None, args.items)
    if not args.grid:
        raise ConfigError("sweep needs at least one --grid KEY=v1,v2,... (e.g. --grid lr=0.05,0.1)")
    axes = [parse_axis(g) for g in args.grid]
    _, lost = sweep(
        config,
        overrides,
        axes,
        args.out,
        args.seeds,
        args.jobs,
        cluster=ray_cluster(args),
        max_runs=args.max_runs,
        overwrite=args.overwrite,
    )
    if lost:
        print(f"error: {lost} run(s) failed or diverged: the report lists them", file=sys.stderr)
        return 1
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    from fedretain.registry import kind

    components()
    registry = kind(list_kind(args.what))
    width = max(len(n) for n in registry)
    for name, entry in registry.items():
        print(f"{name:<{width}}  {entry.description}")
        if args.params:  # the config's options (a loss or a tracker has none)
            from fedretain.recipe.config import COMPONENTS, toml_text

            prefixes = [p for p, c in COMPONENTS.items() if c.kind == registry.kind]
            for key, meaning in registry.meanings(name).items() if prefixes else ():
                default = toml_text(registry.params(name)[key])
                line = f"{prefixes[0]}.{key}={default}  {meaning}"
                print(textwrap.fill(line, 100, initial_indent="    ", subsequent_indent="        "))
    return 0


_PLURALS = {"loss": "losses", "privacy": "privacy"}  # where it is not the kind + "s"


class _Lists(Mapping[str, str]):
    """``fedretain list <what>`` -> the registry's kind: every kind a config chooses from,
    in the plural, "-" for "_" (``server-opts``). Made on first use, so that building the parser
    (``fedretain --help``) imports no registry."""

    @functools.cached_property
    def _lists(self) -> dict[str, str]:
        return {_PLURALS.get(k, k.replace("_", "-") + "s"): k for k in components()}

    def __getitem__(self, what: str) -> str:
        return self._lists[what]

    def __iter__(self) -> Iterator[str]:
        return iter(self._lists)

    def __len__(self) -> int:
        return len(self._lists)


LISTS: Mapping[str, str] = _Lists()


def list_kind(what: str) -> str:
    """``fedretain list WHAT`` -> the registry's kind. WHAT is a kind in the plural
    (``optimizers``) or the singular (``optimizer``), with "-" or "_" (``server-opts``,
    ``server_opt``), in any case; a ConfigError with the closest name otherwise."""
    from fedretain.errors import ConfigError

    aliases: dict[str, str] = {}
    for plural, k in LISTS.items():
        for name in (plural, k, k.replace("_", "-")):
            aliases[name.replace("_", "-")] = k
    key = what.strip().lower().replace("_", "-")
    if key in aliases:
        return aliases[key]
    close = difflib.get_close_matches(key, aliases, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise ConfigError(
        f"cannot list '{what}'{hint}; list one of: {', '.join(LISTS)} (or the singular: "
        "fedretain list optimizer)"
    )


class _AnyKind:
    """``list``'s choices for argparse: shown as :data:`LISTS` in its help; every WHAT passes
    argparse's check, and :func:`list_kind` reads it (singular or plural, a did-you-mean)."""

    def __iter__(self) -> Iterator[str]:
        return iter(LISTS)

    def __contains__(self, what: object) -> bool:
        return True


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
    from fedretain.registry import kind

    kinds = components()

    def wrap(text: str, indent: str, hanging: str = "") -> list[str]:
        return (
            textwrap.wrap(
                text,
                width,
                initial_indent=indent,
                subsequent_indent=indent + hanging,
                break_on_hyphens=False,  # names such as gradma-w stay whole
            )
            or []
        )

    def entries(registry_kind: str, prefix: str | None) -> list[str]:
        registry = kind(registry_kind)
        out = []
        for name, entry in registry.items():  # a name at column 6, its description's rest at 8
            out += wrap(f"{name}: {entry.description}", "      ", "  ")
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
        if s.key in NAMED and NAMED[s.key] in kinds:
            lines += entries(NAMED[s.key], None)
        elif s.key in named_by:
            prefix = named_by[s.key]
            choices = ", ".join(kind(COMPONENTS[prefix].kind))
            lines += wrap(f"choices: {choices}", "      ")
            lines += wrap(f"options: {prefix}.<option> (below)", "      ")
    lines.append("")
    lines += wrap(
        "component options, <prefix>.<option>=VALUE (in a TOML file, a [<prefix>] table, "
        "with name = ... for the component): each kind's entries with their options' "
        "defaults (`fedretain list <kind> --params` gives each option's meaning):",
        "",
    )
    plurals = {k: plural for plural, k in LISTS.items()}
    for prefix, comp in COMPONENTS.items():
        lines.append(f"  {prefix}.<option>: {param_help(prefix)} ({comp.name_field}=NAME)")
        lines.append(f"    their meanings: fedretain list {plurals[comp.kind]} --params")
        lines += entries(comp.kind, prefix)
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """An argument parser whose help may end with a text computed only when it is shown."""

    help_tail: Callable[[], str] | None = None

    def format_help(self) -> str:
        text = super().format_help()
        return f"{text}\n{self.help_tail()}\n" if self.help_tail else text


MAX_SWEEP_RUNS = 10_000  # fedretain.studies.sweep.MAX_RUNS (not imported to build the parser)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="fedretain", description="Federated learning that does not forget.")
    p.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="run one experiment and write its results folder",
        description="Run one experiment and write its results folder. Settings come from the "
        "defaults, then --config (or a FILE.toml argument), then KEY=VALUE arguments (values "
        "read as TOML).",
    )
    run.help_tail = settings_help
    run.add_argument("--config", help="a TOML file of settings")
    run.add_argument("--out", help="results folder to write: new or empty")
    run.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its checkpoint")
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --out (only a fedretain results folder is emptied)",
    )
    run.add_argument(
        "overrides", nargs="*", help="[exp.toml] KEY=VALUE settings, e.g. algorithm=scaffold"
    )
    run.set_defaults(settings="overrides", fn=_cmd_run)

    val = sub.add_parser("validate", help="check a configuration (and its data) without training")
    val.add_argument("--config", help="a TOML file of settings (or give it as an argument)")
    val.add_argument("items", nargs="*", help="[exp.toml] [KEY=VALUE ...]")
    val.set_defaults(settings="items", fn=_cmd_validate)

    cmp_ = sub.add_parser("compare", help="compare results folders: table and plots")
    cmp_.add_argument("dirs", nargs="+", help="results folders of `fedretain run`")
    cmp_.add_argument("--out", required=True, help="report folder to write")
    cmp_.add_argument(
        "--reference",
        action="append",
        help="results folder of the reference run for R_a (SGD); repeat it, one per seed",
    )
    cmp_.add_argument(
        "--allow-mixed",
        action="store_true",
        help="compare runs of different datasets, models, partitions or scenarios anyway",
    )
    cmp_.set_defaults(fn=_cmd_compare)

    part = sub.add_parser("partition", help="summarise a partition and draw its heat map")
    part.add_argument("--config", help="a TOML file of settings")
    part.add_argument(
        "--out", help="heat map to write, in the format its suffix names: .png, .pdf, .svg, ..."
    )
    part.add_argument("overrides", nargs="*", help="[exp.toml] KEY=VALUE, e.g. partition=dirichlet")
    part.set_defaults(settings="overrides", fn=_cmd_partition)

    priv = sub.add_parser(
        "privacy",
        help="gradient inversion against FedReg with MG and DP-SGD (FedReg's Table 4)",
        description="Attack one local step of a client holding one training image under FedAvg, "
        "FedReg with MG and FedAvg with DP-SGD over a grid of noise multipliers; pick the "
        "smallest sigma whose PSNR is at most FedReg-MG's; train FedAvg, FedReg-MG and FedAvg "
        "and FedProx with DP-SGD at that sigma; write DIR/report.md. Resumable.",
    )
    priv.add_argument("--config", help="a TOML file of settings (the training setting)")
    priv.add_argument("--out", required=True, help="folder of the attacks, runs and report.md")
    priv.add_argument("--targets", type=int, default=8, help="training images attacked (drawn)")
    priv.add_argument(
        "--images",
        default="",
        help="chosen training images to attack, dataset indices I,J (instead of --targets)",
    )
    priv.add_argument("--attack", default="ig", help="ig (default), dlg or idlg")
    priv.add_argument("--iterations", type=int, default=300, help="attack iterations")
    priv.add_argument("--restarts", type=int, default=1, help="attack restarts (lowest loss kept)")
    priv.add_argument("--steps", type=int, default=1, help="local steps of the attacked client")
    priv.add_argument(
        "--sigmas",
        default="0.001,0.003,0.01,0.03,0.1,0.3,1",
        help="DP-SGD noise multipliers to attack, increasing, comma-separated",
    )
    priv.add_argument("--max-grad-norm", type=float, default=1.0, help="DP-SGD clipping norm C")
    priv.add_argument("--no-train", action="store_true", help="attacks only, no training runs")
    priv.add_argument("--seed", type=int, default=0, help="seed of the targets and the attack")
    priv.add_argument("overrides", nargs="*", help="KEY=VALUE settings, e.g. rounds=10")
    priv.set_defaults(settings="overrides", fn=_cmd_privacy)

    rep = sub.add_parser(
        "reproduce",
        help="reproduce a paper's table (or the demo): runs, report with verdicts",
        description="Run a preset's runs (resumably: finished runs are skipped, interrupted "
        "ones continued) and write DIR/report.md: the paper's numbers beside ours, each claim "
        "with its verdict, plots, and the command that reproduces it. Exit status 1 when a "
        "run failed or diverged (the report lists them), 2 on bad input.",
    )
    rep.add_argument("names", nargs="*", metavar="NAME", help="preset(s), or all; then KEY=VALUE")
    rep.add_argument("--list", action="store_true", help="list the presets")
    rep.add_argument("--out", help="folder of the runs and report.md")
    rep.add_argument(
        "--scale", default="small", help="ci, small (default), medium (fedcil-table1) or paper"
    )
    rep.add_argument("--seeds", type=int, help="seeds per run (default: the preset's)")
    rep.add_argument("--jobs", type=int, default=1, help="runs at a time, one process each")
    rep.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: rewrite the report from the run folders as they are",
    )
    rep.add_argument(
        "--stop-after",
        type=float,
        metavar="SECONDS",
        help="pause every run (stop_after) so that the invocation ends within SECONDS; a run "
        "not started by then is left for the next one, which continues them all",
    )
    rep.add_argument(
        "--data-dir",
        action="append",
        default=[],
        metavar="[DATASET=]DIR",
        help="folder of the paper's dataset (repeat it, DATASET=DIR, for several)",
    )
    add_ray_options(rep)
    rep.set_defaults(settings="names", fn=_cmd_reproduce)

    led = sub.add_parser(
        "ledger",
        help="the claims ledger: every claim of the reports under a folder, one page",
        description="Read RESULTS/<preset>/claims.json of every report (written with it) and "
        "write one page of every claim's verdict, with the counts per paper.",
    )
    led.add_argument("results", nargs="?", default="results", help="the reports' folder")
    led.add_argument("--out", required=True, help="the page to write (docs/claims.md)")
    led.set_defaults(fn=_cmd_ledger)

    add_data_commands(sub)

    swp = sub.add_parser(
        "sweep",
        help="one experiment over a grid of settings and seeds, compared in one report",
        description="Run every point of the grid (the product of the --grid axes) with every "
        "seed into DIR/<point>/seed<k>/ (resumably: finished runs are skipped, interrupted ones "
        "continued) and compare them in DIR/report.md. Exit status 1 when a run failed or "
        "diverged (the report lists them), 2 on bad input.",
    )
    swp.add_argument("items", nargs="*", help="[exp.toml] [KEY=VALUE ...]: the base settings")
    swp.add_argument(
        "--grid",
        action="append",
        default=[],
        metavar="KEY=v1,v2,...",
        help="an axis of the grid (repeat for more): values read as TOML, or KEY=[v1, v2]",
    )
    swp.add_argument("--out", required=True, help="folder of the runs and report.md")
    swp.add_argument("--seeds", type=int, help="seeds 0..N-1 for every point (default: seed)")
    swp.add_argument("--jobs", type=int, default=1, help="runs at a time, one process each")
    swp.add_argument(
        "--max-runs",
        type=int,
        default=MAX_SWEEP_RUNS,
        metavar="N",
        help="refuse a sweep of more runs than N (points x seeds), before any is built "
        "(default %(default)s)",
    )
    swp.add_argument(
        "--overwrite",
        action="store_true",
        help="start the sweep over: remove what an earlier sweep wrote in --out (only that)",
    )
    add_ray_options(swp)
    swp.set_defaults(settings="items", fn=_cmd_sweep)

    lst = sub.add_parser("list", help="list what is available")
    lst.add_argument(  # the choices are read when they are shown, not here
        "what",
        metavar="WHAT",
        choices=_AnyKind(),
        help="the kind of component: %(choices)s (or its singular: optimizer)",
    )
    lst.add_argument(
        "--params",
        action="store_true",
        help="also show each one's parameters: config key, default and meaning",
    )
    lst.set_defaults(fn=_cmd_list)
    return p


def dispatch(args: argparse.Namespace) -> int:
    """Run the chosen command: bad input is one line on stderr and exit status 2."""
    try:
        return args.fn(args)
    except FedRetainError as e:
        print(f"error: {e}", file=sys.stderr)
        for note in getattr(e, "__notes__", ()):  # engine=debug: where it arose
            print(f"  {note}", file=sys.stderr)
        return 2
    except OSError as e:  # a file or folder that cannot be read or written
        print(f"error: {os_error_message(e, action='cannot use')}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    # KEY=VALUE settings after an option (`reproduce demo --scale ci device=cuda`) join the
    # command's others; argparse reads only one block of positionals
    dest = getattr(args, "settings", None)
    if rest and dest and all("=" in r and not r.startswith("-") for r in rest):
        getattr(args, dest).extend(rest)
    elif rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    return dispatch(args)


if __name__ == "__main__":
    sys.exit(main())
