"""What a run shows on a terminal and how Ctrl-C stops it: :class:`Progress` (a bar, or a
plain line now and then where no terminal is), the run's observer :class:`RunProgress` that
moves it, and :class:`StopAfterRound` (the first Ctrl-C stops the run after the round in
progress, with a checkpoint).
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from fedretain.experiments.observers import BaseObserver, Record, RoundResult

if TYPE_CHECKING:
    from fedretain.core.tree import Tree
    from fedretain.recipe.config import Config


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


class RunProgress(BaseObserver):
    """The run's observer ``progress``: a :class:`Progress` bar moved at the end of every
    round, with the latest test accuracy."""

    def __init__(self, cfg: Config, progress: bool | None) -> None:
        self.bar = Progress(cfg.label, cfg.rounds, progress)
        self.acc: float | None = None
        self.shown = False

    def start(self, done: int, records: list[Record]) -> None:
        self.bar.__enter__()
        self.shown = True
        self.acc = records[-1]["test_accuracy"] if records else None

    def after_round(self, result: RoundResult) -> None:
        if not result.evaluated:  # an evaluated round moves the bar with its record
            self.bar.update(result.round + 1, self.acc)

    def record(self, record: Record, state: Tree) -> Record:
        self.acc = record["test_accuracy"]
        self.bar.update(record["round"], self.acc)
        return {}

    def close(self) -> None:
        if self.shown:
            self.bar.__exit__(None, None, None)
            self.shown = False


__all__ = ["Progress", "RunProgress", "StopAfterRound"]
