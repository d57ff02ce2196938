"""Run one experiment from a :class:`~fedretain.recipe.config.Config` and write its results
folder.

The folder (the results contract later tools read):

- ``config.toml``: the fully resolved configuration;
- ``metrics.jsonl``: one JSON object per evaluated round (``round``, ``test_accuracy``,
  ``test_loss``, ``train_loss``, ``lr``, cumulative ``bytes_up``/``bytes_down``, ``seconds``
  of wall time and, on engines that can lose replies, ``lost_replies``; with ``privacy=``,
  ``epsilon`` and ``delta``; in a continual scenario, the round's ``task`` and the accuracy on
  the classes seen so far); round 0 is the initial model;
- ``summary.json``: ``final_accuracy``, ``top_accuracy``, ``rounds``, ``bytes_up``,
  ``bytes_down``, ``wall_seconds``, ``rounds_to`` (target -> first round or null), and more;
- ``accuracy.png``: the accuracy curve;
- ``checkpoint/``: the state to continue from (every ``checkpoint_every`` rounds, at the end,
  and when a run stops between rounds: Ctrl-C, a full disk); the last two are kept, and a
  resumed run falls back to the earlier one when the latest cannot be read.

Every file is written atomically, with the mode the umask implies. JSON files are strict
JSON: a non-finite float (a diverged run's loss) is the string ``"NaN"``, ``"Infinity"`` or
``"-Infinity"``; :func:`fedretain.files.read_json` and :func:`~fedretain.files.read_jsonl`
read them back as floats. :func:`run_experiment` is the whole run; :class:`Run` holds its
parts; :func:`check_out` keeps a new run from mixing with an old one's files.
"""

from __future__ import annotations

import shutil
import signal
import sys
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedretain.core.tree import Tree, tree_bytes, tree_numel
from fedretain.engines.round import DivergenceError, Engine, Rounds
from fedretain.errors import OutputError
from fedretain.experiments.checkpoint import (
    Checkpoint,
    fingerprint,
    load_for_resume,
    save_checkpoint,
)
from fedretain.experiments.continual import ContinualRecorder
from fedretain.experiments.tracking import make_tracker
from fedretain.files import write_json, write_jsonl, write_toml
from fedretain.metrics.accuracy import rounds_to_targets, top_accuracy
from fedretain.recipe.config import Config, resolved
from fedretain.recipe.federation import Federation, build_federation, client_store
from fedretain.registry import kind


def run_experiment(
    cfg: Config,
    out: str | Path,
    progress: bool | None = None,
    resume: bool = False,
    overwrite: bool = False,
) -> dict[str, Any]:
    """Run ``cfg`` and write its results folder ``out``; returns the summary.

    With ``resume``, continue from the checkpoint in ``out``: the metrics come out identical
    to those of an uninterrupted run (apart from ``seconds``). A run killed before its first
    checkpoint starts over from round 0. With ``overwrite``, an old run in ``out`` is removed
    first (once the new run's federation is built; see :func:`clear_out`).

    A run that stops between rounds (Ctrl-C, which lets the round in progress finish; a full
    disk; an error in evaluation) saves a checkpoint of its rounds first, where it can.
    """
    run = Run(cfg, out)
    if overwrite and not resume:
        clear_out(out)
    run.start(resume)
    bar = Progress(cfg.label, cfg.rounds, progress) if progress is not False else nullcontext()
    stop = StopAfterRound() if cfg.checkpoint_every else nullcontext()
    try:
        with bar, stop:
            for rnd in range(run.done, cfg.rounds):
                metrics = run.round(rnd)
                if run.done % cfg.eval_every == 0 or run.done == cfg.rounds or run.task_end():
                    run.evaluate(metrics)
                run.settled = True
                if cfg.checkpoint_every and (
                    run.done % cfg.checkpoint_every == 0 or run.done == cfg.rounds
                ):
                    run.checkpoint()
                if isinstance(bar, Progress):
                    bar.update(run.done, run.records[-1]["test_accuracy"])
                if isinstance(stop, StopAfterRound) and stop.requested and run.done < cfg.rounds:
                    raise KeyboardInterrupt
    except DivergenceError as e:  # keep every result so far, say why the run stopped
        run.finish(stopped=str(e))
        raise
    except BaseException:
        run.rescue()
        raise
    finally:
        run.engine.close()
        run.tracker.close()
    return run.finish()


# what a results folder holds (besides the temporary files of atomic writes): --overwrite
# removes only folders made of these
RESULT_DIRS = ("checkpoint", "client_state", "tensorboard", "samples")
RESULT_SUFFIXES = (".json", ".jsonl", ".png", ".toml", ".log")


def _is_result(path: Path) -> bool:
    if path.is_symlink():
        return False
    if path.is_dir():
        return path.name in RESULT_DIRS
    return path.suffix in RESULT_SUFFIXES or (path.name[:1] == "." and path.suffix == ".tmp")


def check_out(out: str | Path, overwrite: bool = False) -> None:
    """An OutputError unless a new run may write ``out``: a new or empty folder, or with
    ``overwrite`` a fedretain results folder (which :func:`clear_out` empties)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file, not a folder; choose a new or empty folder")
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if not entries:
        return
    strangers = [p.name for p in entries if not _is_result(p)]
    is_run = (out / "config.toml").is_file() and (
        (out / "metrics.jsonl").is_file() or (out / "checkpoint").is_dir()
    )
    if not is_run or strangers:
        why = f"it holds {', '.join(strangers[:3])}" if strangers else "no metrics.jsonl"
        raise OutputError(
            f"{out} is not empty and does not look like a fedretain results folder ({why}); "
            "choose a new or empty folder for --out (nothing was removed)"
        )
    if not overwrite:
        what = "finished" if (out / "summary.json").is_file() else "unfinished"
        raise OutputError(
            f"{out} already holds a {what} run; pass --resume {out} to continue it, "
            "--overwrite to replace it, or choose another --out"
        )


def clear_out(out: str | Path) -> None:
    """Empty the results folder ``out`` for a new run; nothing but a fedretain results
    folder's files is ever removed (see :func:`check_out`)."""
    check_out(out, overwrite=True)
    for path in sorted(Path(out).iterdir()) if Path(out).is_dir() else []:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


def build_rounds(cfg: Config, out: Path | None = None) -> tuple[Federation, Rounds]:
    """The federation of ``cfg`` and its rounds on the config's engine, without a results
    folder (a disk store needs ``out``); for tests, benchmarks and notebooks."""
    fed = build_federation(cfg)
    return fed, rounds_of(fed, kind("engine").build(cfg.engine, cfg.engine_params, fed), out)


def rounds_of(fed: Federation, engine: Engine, out: Path | None) -> Rounds:
    """The rounds of ``fed`` on ``engine``, with the config's client store (a disk store in
    ``out/client_state``) and divergence policy."""
    store = client_store(fed.config, out)
    return Rounds(
        fed.algorithm,
        fed.task,
        fed.clients,
        engine,
        store,
        on_divergence=fed.config.on_divergence,
        clients_at=fed.clients_for_round if fed.continual is not None else None,
    )


class Run:
    """One experiment: its federation, engine and rounds, observers and results folder."""

    def __init__(self, cfg: Config, out: str | Path) -> None:
        self.cfg = cfg
        self.out = Path(out)
        self.fed = build_federation(cfg)
        self.engine = kind("engine").build(cfg.engine, cfg.engine_params, self.fed)
        self.observers = [
            kind("diagnostic").build(name, self._params_of(name), self) for name in cfg.diagnostics
        ]
        self.tracker = make_tracker(cfg, self.out)
        continual = self.fed.continual  # a continual scenario: task switches, seen classes
        self.continual = (
            ContinualRecorder(continual, self.fed.dataset, self.out) if continual else None
        )
        privacy = self.fed.privacy
        self.accountant = (
            privacy.accountant(self.fed.clients, self.fed.algorithm, cfg.clients_per_round)
            if privacy is not None
            else None
        )
        self.server_state: Tree = {}
        self.rounds: Rounds  # made by start(): a fresh run clears an old disk store first
        self.records: list[dict[str, Any]] = []
        self.done = 0  # rounds completed
        self.settled = True  # the state is that of round ``done`` with its record: checkpointable
        self.saved = 0  # the round of the latest checkpoint
        self.pending = {"skipped_clients": 0.0, "lost_replies": 0.0}  # since the last record
        self.elapsed0 = 0.0  # wall seconds before this process (resumed runs)
        self.started = time.perf_counter()

    def _params_of(self, diagnostic: str) -> dict[str, Any]:
        own = kind("diagnostic").params(diagnostic)
        return {k: v for k, v in self.cfg.diagnostics_params.items() if k in own}

    def start(self, resume: bool = False) -> None:
        """A fresh run, or the checkpoint's state (a run that never wrote one starts over)."""
        cfg, fed = self.cfg, self.fed
        ckpt = load_for_resume(self.out, cfg, fed.device) if resume else None
        if resume and ckpt is None:
            print(
                f"note: {self.out} has no checkpoint yet; starting over from round 0",
                file=sys.stderr,
            )
        if ckpt is None:
            shutil.rmtree(self.out / "client_state", ignore_errors=True)
        self.rounds = rounds_of(fed, self.engine, self.out)
        self.rounds.keep_local_models = any(o.needs_local_models for o in self.observers)
        self.out.mkdir(parents=True, exist_ok=True)
        write_toml(self.out / "config.toml", resolved(cfg))
        if ckpt is None:
            self.tracker.start([])
            self.server_state = fed.algorithm.server_init(*fed.task.init())
            self.evaluate({"train_loss": None})
            return
        if ckpt.damaged:
            print(f"note: {ckpt.damaged}; using the previous checkpoint", file=sys.stderr)
        print(
            f"resuming {self.out} from round {ckpt.round} of {cfg.rounds} (checkpoint {ckpt.file})",
            file=sys.stderr,
        )
        self.server_state = ckpt.server
        self.saved = ckpt.round
        ckpt.restore_clients(self.rounds.store)
        self.rounds.ledger.load_state(ckpt.ledger)
        self.records, self.done, self.elapsed0 = ckpt.records, ckpt.round, ckpt.elapsed
        if self.accountant is not None:
            self.accountant.load_state(ckpt.extra["accountant"])
        if self.continual is not None:
            self.continual.load_state(ckpt.extra.get("continual"))
        torch.set_rng_state(ckpt.torch_rng)
        if ckpt.cuda_rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(ckpt.cuda_rng)
        write_jsonl(self.out / "metrics.jsonl", self.records)
        self.tracker.start(self.records)
        for observer in self.observers:
            observer.resume(self.done)

    def round(self, rnd: int) -> dict[str, float]:
        """Round ``rnd`` (0-based) with the participation model's clients."""
        self.settled = False
        clients = self.fed.participation.clients(rnd)
        for observer in self.observers:
            observer.before_round(rnd, clients.tolist())
        self.server_state, metrics = self.rounds.run_round(
            self.server_state, rnd, self.cfg.lr_at(rnd), clients=clients
        )
        self.done = rnd + 1
        if self.accountant is not None:
            self.accountant.after_round(rnd, clients.tolist(), self.cfg.lr_at(rnd))
        for observer in self.observers:
            observer.after_round(rnd)
        for key in self.pending:
            self.pending[key] += metrics.get(key, 0.0)
        return metrics

    def evaluate(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """Test the global model; append the record to ``metrics.jsonl``."""
        cfg, fed = self.cfg, self.fed
        p, b = fed.algorithm.global_model(self.server_state)
        extra: dict[str, Any] = {}
        if self.continual is not None:  # on the classes seen so far
            acc, loss, extra = self.continual.evaluate(fed.task, p, b, self.done, fed.eval_batch)
        else:
            acc, loss = fed.task.evaluate(
                p, b, fed.dataset.x_test, fed.dataset.y_test, fed.eval_batch
            )
        train_loss = metrics.get("train_loss")
        ledger = self.rounds.ledger
        record = {
            "round": self.done,
            "test_accuracy": acc,
            "test_loss": loss,
            "train_loss": train_loss if train_loss == train_loss else None,  # NaN: no client
            "lr": cfg.lr_at(max(self.done - 1, 0)),
            "participants": int(metrics.get("participants", 0.0)),
            "skipped_clients": self.pending["skipped_clients"],
            "bytes_up": ledger.bytes_up,
            "bytes_down": ledger.bytes_down,
            "seconds": self.elapsed(),
            **extra,
        }
        if self.engine.remote:
            record["lost_replies"] = int(self.pending["lost_replies"])
        if self.accountant is not None:
            record.update(self.accountant.metrics())
        self.pending = dict.fromkeys(self.pending, 0.0)
        self.records.append(record)
        self.settled = True  # the round has its record, even if writing it fails
        write_jsonl(self.out / "metrics.jsonl", self.records)
        self.tracker.record(record)
        return record

    def task_end(self) -> bool:
        """Whether the rounds done end a task of a continual scenario."""
        return self.continual is not None and self.continual.scenario.task_end(self.done)

    def elapsed(self) -> float:
        return self.elapsed0 + time.perf_counter() - self.started

    def rescue(self) -> None:
        """After a failure between rounds, a checkpoint of the rounds done (when newer than
        the latest); a failure inside a round leaves a state no checkpoint may hold."""
        if not (self.cfg.checkpoint_every and self.settled and self.done > self.saved):
            return
        try:
            self.checkpoint()
        except Exception as e:
            print(f"note: could not save a checkpoint of round {self.done}: {e}", file=sys.stderr)
            return
        print(
            f"note: saved a checkpoint at round {self.done} of {self.cfg.rounds}; continue with "
            f"`fedretain run --resume {self.out}`",
            file=sys.stderr,
        )

    def checkpoint(self) -> None:
        cuda = self.fed.device.type == "cuda"
        save_checkpoint(
            self.out,
            Checkpoint(
                round=self.done,
                server=self.server_state,
                clients=self.rounds.store,
                ledger=self.rounds.ledger.state(),
                records=self.records,
                elapsed=self.elapsed(),
                torch_rng=torch.get_rng_state(),
                cuda_rng=torch.cuda.get_rng_state_all() if cuda else [],
                fingerprint=fingerprint(self.cfg),
                extra={
                    **({} if self.accountant is None else {"accountant": self.accountant.state()}),
                    **({} if self.continual is None else {"continual": self.continual.state()}),
                },
            ),
        )
        self.saved = self.done

    def finish(self, stopped: str = "") -> dict[str, Any]:
        """Write ``summary.json`` and the plots; returns the summary."""
        from fedretain.experiments.plots import plot_curves  # matplotlib: only where a run ends

        cfg = self.cfg
        summary = self.summary()
        if stopped:
            summary["stopped"] = stopped
        else:
            for observer in self.observers:
                summary.update(observer.finish())
        if self.continual is not None:
            summary.update(self.continual.finish(cfg.label))
        write_json(self.out / "summary.json", summary)
        title = f"{cfg.label} (stopped)" if stopped else f"{cfg.label} on {cfg.dataset}"
        plot_curves([(cfg.label, self.records)], self.out / "accuracy.png", title=title)
        return summary

    def summary(self) -> dict[str, Any]:
        cfg, state, final = self.cfg, self.server_state, self.records[-1]
        sizes = [len(p) for p in self.fed.parts]
        return {
            "name": cfg.label,
            "algorithm": cfg.algorithm,
            "engine": self.engine.name,
            **({"engine_choice": self.engine.choice} if getattr(self.engine, "choice", "") else {}),
            "final_accuracy": final["test_accuracy"],
            "final_loss": final["test_loss"],
            "top_accuracy": top_accuracy(self.records),
            "rounds": self.done,
            "rounds_to": rounds_to_targets(self.records, cfg.targets),
            "wall_seconds": final["seconds"],
            "num_params": tree_numel(state["x"]),
            "clients": len(sizes),
            "client_samples": {
                "min": int(min(sizes)),
                "median": float(np.median(sizes)),
                "max": int(max(sizes)),
            },
            "clients_with_state": len(self.rounds.store),
            "skipped_updates": int(sum(r.get("skipped_clients", 0) for r in self.records)),
            **(
                {"privacy": {"mechanism": cfg.privacy, **self.accountant.metrics()}}
                if self.accountant is not None
                else {}
            ),
            "server_state_bytes": {
                k: tree_bytes(v) if isinstance(v, dict) else tree_bytes({k: v})
                for k, v in state.items()
            },
            **self.rounds.ledger.summary(),
        }


class StopAfterRound:
    """Ctrl-C during a run asks it to stop after the round in progress (with a checkpoint);
    a second Ctrl-C stops it at once. Only in the main thread, over Python's own handler."""

    def __init__(self) -> None:
        self.requested = False
        self.previous: Any = None

    def __enter__(self) -> StopAfterRound:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self.previous = signal.signal(signal.SIGINT, self._interrupt)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    def _interrupt(self, signum: int, frame: object) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            "interrupt: stopping after this round, with a checkpoint (Ctrl-C again to stop now)",
            file=sys.stderr,
            flush=True,
        )


class Progress:
    """A progress bar (round, accuracy, ETA) on a terminal; elsewhere (a log file, CI, nohup)
    a plain line every ``every`` seconds and at the end once one was printed, e.g.
    ``FedAvg round 10/30 acc 0.6123 (12 s)``. ``enabled=True`` draws the bar anyway."""

    def __init__(
        self, label: str, total: int, enabled: bool | None = None, every: float = 30.0
    ) -> None:
        tty = sys.stderr.isatty()
        self.enabled = tty if enabled is None else enabled
        self.label, self.total, self.every = label, total, every
        self.lines = enabled is None and not tty
        self.started = self.last = time.monotonic()
        self.printed = False
        self.bar = None
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self.bar = RichProgress(
                TextColumn(f"[bold]{label}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("acc {task.fields[acc]}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                transient=False,
            )
            self.task = self.bar.add_task(label, total=total, acc="-")

    def __enter__(self) -> Progress:
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def update(self, rnd: int, acc: float | None) -> None:
        if self.bar is not None:
            fields = {"acc": f"{acc:.4f}"} if acc is not None else {}
            self.bar.update(self.task, completed=rnd, **fields)
        now = time.monotonic()
        due = now - self.last >= self.every or (rnd == self.total and self.printed)
        if self.lines and due:
            shown = "-" if acc is None else f"{acc:.4f}"
            line = f"{self.label} round {rnd}/{self.total} acc {shown} ({now - self.started:.0f} s)"
            print(line, file=sys.stderr, flush=True)
            self.last, self.printed = now, True


__all__ = [
    "Progress",
    "Run",
    "StopAfterRound",
    "build_rounds",
    "check_out",
    "clear_out",
    "rounds_of",
    "run_experiment",
]
