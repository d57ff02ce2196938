"""Run one experiment from a :class:`~fedretain.recipe.config.Config` and write its results
folder.

The folder it writes, file by file, is the results contract of
:mod:`fedretain.experiments.outputs` (with :func:`~fedretain.experiments.outputs.check_out`,
which keeps a new run from mixing with an old one's files). :func:`run_experiment` is the
whole run; :class:`Run` holds its parts.

Whatever follows a run besides training (a continual scenario's recorder, the privacy
accountant, the diagnostics, the tracker, the progress bar) is one of its observers
(:mod:`fedretain.experiments.observers`), by name: :data:`BUILT_IN` and :data:`SHOWN_BY` hold
the factories of the built-in ones, the config's diagnostics the others. :class:`Run` only
trains, evaluates (with the test set, or the observer that is an evaluation: a continual
run's seen classes), records and checkpoints, and tells its observers.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

import fedretain.experiments.components  # noqa: F401  (registers what kind() reads below)
from fedretain.core.tree import Tree, tree_bytes, tree_numel
from fedretain.engines.round import Rounds
from fedretain.errors import DivergenceError
from fedretain.experiments.checkpoint import (
    Checkpoint,
    check_rounds,
    fingerprint,
    resume_point,
    rng_states,
    save_checkpoint,
)
from fedretain.experiments.continual import ContinualRecorder
from fedretain.experiments.observers import (
    AccountantObserver,
    Evaluation,
    LostReplies,
    Observer,
    RoundResult,
    WholeTestSet,
)
from fedretain.experiments.outputs import clear_out
from fedretain.experiments.progress import RunProgress, StopAfterRound
from fedretain.experiments.tracking import make_tracker
from fedretain.files import write_json, write_jsonl, write_toml
from fedretain.metrics.accuracy import rounds_to_targets, top_accuracy
from fedretain.recipe.config import Config, resolved, validate
from fedretain.recipe.federation import (
    Federation,
    build_federation,
    modes_restored,
)
from fedretain.registry import kind


@modes_restored()  # a CUDA run's deterministic modes end with it
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
    first (once the new run's federation is built; see :func:`clear_out`). ``progress``: a
    progress bar (None: on a terminal; see :class:`Progress`).

    A run that stops between rounds (Ctrl-C, which lets the round in progress finish; a full
    disk; an error in evaluation) saves a checkpoint of its rounds first, where it can.

    With ``cfg.stop_after`` seconds, the run pauses before a round that would run past them
    (its longest round so far as the estimate; at least one round is run): it saves a
    checkpoint and returns ``{"paused": True, ...}`` (:func:`paused_summary`) without writing
    ``summary.json``; resuming continues it with the numbers of an uninterrupted run.
    """
    began, longest, paused = time.perf_counter(), 0.0, False  # stop_after counts from here
    if resume:
        check_rounds(Path(out), cfg)  # before anything is built or written
    run = Run(cfg, out, progress)
    stop = StopAfterRound() if cfg.checkpoint_every else nullcontext()
    try:
        if overwrite and not resume:
            clear_out(out)
        run.start(resume)
        with stop:
            for rnd in range(run.done, cfg.rounds):
                t0 = time.perf_counter()
                metrics = run.round(rnd)
                if run.due(run.done):
                    run.evaluate(metrics)
                run.settled = True
                if cfg.checkpoint_every and (
                    run.done % cfg.checkpoint_every == 0 or run.done == cfg.rounds
                ):
                    run.checkpoint()
                if isinstance(stop, StopAfterRound) and stop.requested and run.done < cfg.rounds:
                    raise KeyboardInterrupt
                now = time.perf_counter()
                longest = max(longest, now - t0)
                late = now - began + longest > cfg.stop_after  # the next round would overrun
                if cfg.stop_after and late and run.done < cfg.rounds:
                    if run.saved < run.done:
                        run.checkpoint()
                    paused = True
                    break
    except DivergenceError as e:  # keep every result so far, say why the run stopped
        run.finish(stopped=str(e))
        raise
    except BaseException:
        rescue(run)
        raise
    finally:
        run.close()
    if paused:
        return paused_summary(run)
    summary = run.finish()
    say_skipped(run, int(summary.get("skipped_updates", 0)))
    return summary


def paused_summary(run: Run) -> dict[str, Any]:
    """What a run paused by ``stop_after`` returns (no ``summary.json`` is written): its
    rounds so far and the command that continues it."""
    return {
        "paused": True,
        "name": run.cfg.label,
        "rounds": run.done,
        "planned_rounds": run.cfg.rounds,
        "stop_after": run.cfg.stop_after,
        "continue": f"fedretain run --resume {run.out}",
    }


def say_skipped(run: Run, skipped: int) -> None:
    """With ``on_divergence=skip``, how many client updates were skipped, on stderr: a warning
    when every update of the run was (the model never trained)."""
    if not skipped:
        return
    sampled = sum(len(run.fed.participation.clients(r)) for r in range(run.done))
    if skipped >= sampled:
        print(
            f"warning: every client update of the run was skipped ({skipped} of {sampled}, "
            "on_divergence=skip): the model never trained; its accuracy is the initial "
            "model's (lower lr, or on_divergence=stop to see where it diverges)",
            file=sys.stderr,
        )
    else:
        print(
            f"note: {skipped} of {sampled} client updates were skipped (on_divergence=skip)",
            file=sys.stderr,
        )


def rescue(run: Run) -> None:
    """After a failure between rounds, a checkpoint of the rounds done (when newer than the
    latest); a failure inside a round leaves a state no checkpoint may hold."""
    if not (run.cfg.checkpoint_every and run.settled and run.done > run.saved):
        return
    try:
        run.checkpoint()
    except Exception as e:
        print(f"note: could not save a checkpoint of round {run.done}: {e}", file=sys.stderr)
        return
    print(
        f"note: saved a checkpoint at round {run.done} of {run.cfg.rounds}; continue with "
        f"`fedretain run --resume {run.out}`",
        file=sys.stderr,
    )


def build_rounds(cfg: Config, out: Path | None = None) -> tuple[Federation, Rounds]:
    """The federation of ``cfg`` and its rounds on the config's engine, without a results
    folder (a disk store needs ``out``); for tests, benchmarks and notebooks."""
    fed = build_federation(cfg)
    return fed, fed.rounds(kind("engine").build(cfg.engine, cfg.engine_params, fed), out)


# The built-in observers by name (a checkpoint keeps each one's state under it): factory(run)
# -> the observer, or None where this run has none. The run tells its observers in this order,
# with the config's diagnostics between the two groups: what adds keys to the records comes
# before the tracker and the progress bar, which show the records whole.
BUILT_IN: dict[str, Callable[[Run], Observer | None]] = {
    "continual": lambda run: ContinualRecorder(run.fed, run.out) if run.fed.continual else None,
    "lost_replies": lambda run: LostReplies() if run.engine.remote else None,
    "accountant": lambda run: AccountantObserver.of(run.fed),
}
SHOWN_BY: dict[str, Callable[[Run], Observer | None]] = {
    "tracker": lambda run: make_tracker(run.cfg, run.out),
    "progress": lambda run: None if run.progress is False else RunProgress(run.cfg, run.progress),
}


def diagnostic(name: str) -> Callable[[Run], Observer]:
    """The factory of the diagnostic ``name``, with the ``diagnostics.*`` options it takes."""

    def build(run: Run) -> Observer:
        own = kind("diagnostic").params(name)
        params = {k: v for k, v in run.cfg.diagnostics_params.items() if k in own}
        return kind("diagnostic").build(name, params, run.fed, run.out)

    return build


def observers_of(run: Run) -> dict[str, Observer]:
    """The observers of ``run`` by name, in the order they are told of it."""
    factories = {**BUILT_IN, **{n: diagnostic(n) for n in run.cfg.diagnostics}, **SHOWN_BY}
    made = {name: factory(run) for name, factory in factories.items()}
    return {name: observer for name, observer in made.items() if observer is not None}


class Run:
    """One experiment: its federation, engine and rounds, observers (everything besides
    training: :mod:`fedretain.experiments.observers`), evaluation and results folder."""

    def __init__(self, cfg: Config, out: str | Path, progress: bool | None = False) -> None:
        validate(cfg)  # again, with this layer's kinds: cfg may be older than their import
        self.cfg, self.out, self.progress = cfg, Path(out), progress
        self.fed = build_federation(cfg)
        self.engine = kind("engine").build(cfg.engine, cfg.engine_params, self.fed)
        self.server_state: Tree = {}
        self.rounds: Rounds  # made by start(): a fresh run clears an old disk store first
        self.records: list[dict[str, Any]] = []
        self.done = 0  # rounds completed
        self.settled = True  # the state is that of round ``done`` with its record: checkpointable
        self.saved = 0  # the round of the latest checkpoint
        self.skipped = 0.0  # skipped client updates since the last record
        self.elapsed0 = 0.0  # wall seconds before this process (resumed runs)
        self.started = time.perf_counter()
        self.val_index: torch.Tensor | None = None  # the validation split's samples
        self.observers = observers_of(self)
        evaluations = (o for o in self.observers.values() if isinstance(o, Evaluation))
        self.evaluation: Evaluation = next(evaluations, WholeTestSet(self.fed))

    def start(self, resume: bool = False) -> None:
        """A fresh run, or the checkpoint's state (a run that never wrote one starts over)."""
        cfg, fed = self.cfg, self.fed
        ckpt = resume_point(self.out, cfg, fed.device) if resume else None
        if ckpt is None:
            shutil.rmtree(self.out / "client_state", ignore_errors=True)
        self.rounds = fed.rounds(self.engine, self.out)
        self.rounds.keep_local_models = any(o.needs_local_models for o in self.observers.values())
        self.out.mkdir(parents=True, exist_ok=True)
        write_toml(self.out / "config.toml", resolved(cfg))
        if ckpt is None:
            self.server_state = fed.algorithm.server_init(*fed.task.init())
        else:
            self.restore(ckpt)
        for observer in self.observers.values():
            observer.start(self.done, self.records)
        if ckpt is None:
            self.evaluate({"train_loss": None})

    def restore(self, ckpt: Checkpoint) -> None:
        """The checkpoint's state: the rounds, the records, the observers' states, the RNG."""
        self.server_state, self.saved = ckpt.server, ckpt.round
        ckpt.restore_clients(self.rounds.store)
        self.rounds.ledger.load_state(ckpt.ledger)
        self.records, self.done, self.elapsed0 = ckpt.records, ckpt.round, ckpt.elapsed
        for name, observer in self.observers.items():
            observer.load_state(ckpt.extra.get(name))
        self.skipped = ckpt.extra.get(RUN_STATE, {}).get("skipped", 0.0)  # since the record
        ckpt.restore_rng()
        write_jsonl(self.out / "metrics.jsonl", self.records)

    def round(self, rnd: int) -> dict[str, float]:
        """Round ``rnd`` (0-based) with the participation model's clients."""
        self.settled = False
        clients = self.fed.participation.clients(rnd)
        ids, lr = clients.tolist(), self.cfg.lr_at(rnd)
        for observer in self.observers.values():
            observer.before_round(rnd, ids)
        before = self.server_state
        self.server_state, metrics = self.rounds.run_round(before, rnd, lr, clients=clients)
        self.done = rnd + 1
        local = self.rounds.local_models if self.rounds.keep_local_models else {}
        result = RoundResult(
            rnd, ids, lr, metrics, before, self.server_state, local, self.due(rnd + 1)
        )
        for observer in self.observers.values():
            observer.after_round(result)
        self.skipped += metrics.get("skipped_clients", 0.0)
        return metrics

    def due(self, done: int) -> bool:
        """Whether round ``done`` is evaluated: every ``eval_every`` rounds, the last round,
        and where the evaluation asks for one (a continual task's end)."""
        cfg = self.cfg
        return done % cfg.eval_every == 0 or done == cfg.rounds or self.evaluation.due(done)

    def evaluate(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """Test the global model (and, with a validation split, validate it); append the
        record to ``metrics.jsonl``."""
        model = self.fed.algorithm.global_model(self.server_state)
        acc, loss = self.evaluation.evaluate(*model, self.done)
        train_loss = metrics.get("train_loss")
        record = {
            "round": self.done,
            "test_accuracy": acc,
            "test_loss": loss,
            **self.validate(*model),
            "train_loss": train_loss if train_loss == train_loss else None,  # NaN: no client
            "lr": self.cfg.lr_at(max(self.done - 1, 0)),
            "participants": int(metrics.get("participants", 0.0)),
            "skipped_clients": self.skipped,
            "bytes_up": self.rounds.ledger.bytes_up,
            "bytes_down": self.rounds.ledger.bytes_down,
            "seconds": self.elapsed(),
        }
        for observer in self.observers.values():
            record.update(observer.record(record, self.server_state))
        self.skipped = 0.0
        self.records.append(record)
        self.settled = True  # the round has its record, even if writing it fails
        write_jsonl(self.out / "metrics.jsonl", self.records)
        return record

    def validate(self, params: Tree, buffers: Tree) -> dict[str, float]:
        """With a validation split (``val_fraction``), the global model's ``val_accuracy`` and
        ``val_loss`` on every client's held-out samples (what tuning chooses by); else {}."""
        fed = self.fed
        if fed.val_parts is None:
            return {}
        if self.val_index is None:
            self.val_index = torch.from_numpy(np.concatenate(fed.val_parts))
        x, y = fed.dataset.x_train[self.val_index], fed.dataset.y_train[self.val_index]
        acc, loss = fed.task.evaluate(params, buffers, x, y, fed.eval_batch)
        return {"val_accuracy": acc, "val_loss": loss}

    def elapsed(self) -> float:
        return self.elapsed0 + time.perf_counter() - self.started

    def checkpoint(self) -> None:
        """Save the run's state (:func:`checkpoint_of`) as its latest checkpoint."""
        save_checkpoint(self.out, checkpoint_of(self))
        self.saved = self.done

    def finish(self, stopped: str = "") -> dict[str, Any]:
        """Write ``summary.json`` and the plots; returns the summary."""
        from fedretain.experiments.plots import plot_curves  # matplotlib: only where a run ends

        summary = summary_of(self, stopped)
        write_json(self.out / "summary.json", summary)
        label = self.cfg.label
        title = f"{label} (stopped)" if stopped else f"{label} on {self.cfg.dataset}"
        if self.cfg.plots:
            plot_curves([(label, self.records)], self.out / "accuracy.png", title=title)
        return summary

    def close(self) -> None:
        """Release the engine and the observers (also after a failure)."""
        self.engine.close()
        for observer in self.observers.values():
            observer.close()


RUN_STATE = "run"  # the checkpoint's extra entry of the run's own counts since its last record


def checkpoint_of(run: Run) -> Checkpoint:
    """The run's state after round ``run.done``, with its observers' states by name."""
    states = {name: observer.state() for name, observer in run.observers.items()}
    torch_rng, cuda_rng = rng_states(run.fed.device)
    return Checkpoint(
        round=run.done,
        server=run.server_state,
        clients=run.rounds.store,
        ledger=run.rounds.ledger.state(),
        records=run.records,
        elapsed=run.elapsed(),
        torch_rng=torch_rng,
        cuda_rng=cuda_rng,
        fingerprint=fingerprint(run.cfg),
        extra={
            RUN_STATE: {"skipped": run.skipped},
            **{name: state for name, state in states.items() if state is not None},
        },
    )


def summary_of(run: Run, stopped: str = "") -> dict[str, Any]:
    """The run's ``summary.json``: its own keys, the observers' and why it ``stopped`` early."""
    cfg, state, records, engine = run.cfg, run.server_state, run.records, run.engine
    final = records[-1]
    sizes = [len(p) for p in run.fed.parts]
    summary = {
        "name": cfg.label,
        "algorithm": cfg.algorithm,
        "engine": engine.name,
        **({"engine_choice": engine.choice} if getattr(engine, "choice", "") else {}),
        "final_accuracy": final["test_accuracy"],
        "final_loss": final["test_loss"],
        "top_accuracy": top_accuracy(records),
        "rounds": run.done,
        "rounds_to": rounds_to_targets(records, cfg.targets),
        "wall_seconds": final["seconds"],
        "num_params": tree_numel(state["x"]),
        "clients": len(sizes),
        "client_samples": {
            "min": int(min(sizes)),
            "median": float(np.median(sizes)),
            "max": int(max(sizes)),
        },
        "clients_with_state": len(run.rounds.store),
        "skipped_updates": int(sum(r.get("skipped_clients", 0) for r in records)),
        "server_state_bytes": {
            k: tree_bytes(v) if isinstance(v, dict) else tree_bytes({k: v})
            for k, v in state.items()
        },
        **run.rounds.ledger.summary(),
    }
    for observer in run.observers.values():
        summary.update(observer.finish(bool(stopped)))
    return {**summary, "stopped": stopped} if stopped else summary


__all__ = [
    "BUILT_IN",
    "SHOWN_BY",
    "Run",
    "build_rounds",
    "checkpoint_of",
    "observers_of",
    "run_experiment",
    "summary_of",
]
