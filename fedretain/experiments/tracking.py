"""Experiment tracking: a run's per-round metrics also in a tracker (``tracking=tensorboard``).

A tracker is the run's observer ``tracker`` (:mod:`fedretain.experiments.observers`), built as
``factory(out)`` (``out``: the run's results folder); it hears of the records, the rows of
``metrics.jsonl``, after every other observer has added its keys:

- ``start(done, records)`` once, when the run knows what it keeps: ``0, []`` for a fresh run,
  the checkpoint's round and records (rounds ``0..done``) for a resumed one;
- ``record(record, state)`` for each evaluated round, as it is appended to ``metrics.jsonl``
  (it adds nothing to the record; ``state``, the server state evaluated, it leaves);
- ``close()`` once, when the run ends (also when it stops early).

A resumed run never duplicates points: the tracker keeps what was written up to the
checkpoint and drops what a killed process wrote after it. A new tracker is one
:class:`~fedretain.experiments.observers.BaseObserver` subclass with these hooks and one line
in :data:`TRACKERS`.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from fedretain.core.tree import Tree
from fedretain.experiments.observers import BaseObserver, Record
from fedretain.extras import require
from fedretain.recipe.config import Config
from fedretain.registry import Registry


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """The keys of a record that are numbers (not ``round``, the step; not None or bools)."""
    return {
        k: float(v)
        for k, v in record.items()
        if k != "round" and isinstance(v, int | float) and not isinstance(v, bool)
    }


class TensorBoardTracker(BaseObserver):
    """Every numeric key of each record as a TensorBoard scalar (tag: the key, step: the
    round) in ``DIR/tensorboard/``, with torch's :class:`~torch.utils.tensorboard.SummaryWriter`
    (``tensorboard --logdir DIR/tensorboard``).

    A fresh run clears the folder. A resumed run at round ``done`` opens its writer with
    ``purge_step = done + 1``: TensorBoard drops the points of rounds after the checkpoint that
    the previous process wrote, and keeps those before it (each record is flushed as it comes,
    so they are on disk before the checkpoint that covers them). A folder without event files
    (tracking switched on at the resume) gets the kept records first.
    """

    def __init__(self, out: str | Path) -> None:
        self.folder = Path(out) / "tensorboard"
        self.writer: Any = None

    def start(self, done: int, records: list[Record]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.close()
        if not records:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.writer = SummaryWriter(str(self.folder))
            return
        replay = not any(self.folder.glob("events.out.tfevents.*"))
        self.writer = SummaryWriter(str(self.folder), purge_step=done + 1)
        if replay:
            for r in records:
                self.write(r)

    def record(self, record: Record, state: Tree) -> Record:
        self.write(record)
        return {}

    def write(self, record: Record) -> None:
        """The record's scalars at its round."""
        if self.writer is None:
            self.start(0, [])
        for tag, value in scalars(record).items():
            self.writer.add_scalar(tag, value, global_step=record["round"])
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def check_tensorboard(cfg: Config) -> None:
    """``tracking=tensorboard`` needs the ``tensorboard`` package (torch's writer uses it)."""
    require("tensorboard", "tracking=tensorboard")


# factory(out) -> the tracker (an observer); ``check=fn(cfg)`` validates against the whole config
TRACKERS = Registry("tracker", internal=("out",))
TRACKERS.add(
    "tensorboard",
    TensorBoardTracker,
    "each round's metrics as TensorBoard scalars in DIR/tensorboard/",
    check=check_tensorboard,
)


def make_tracker(cfg: Config, out: str | Path) -> BaseObserver | None:
    """The tracker ``cfg.tracking`` names for the results folder ``out`` (None: no tracking)."""
    return TRACKERS.build(cfg.tracking, {}, out) if cfg.tracking else None


__all__ = ["TRACKERS", "TensorBoardTracker", "make_tracker", "scalars"]
