"""Experiment tracking: a run's per-round metrics also in a tracker (``tracking=tensorboard``,
``tracking=mlflow``, ``tracking=wandb``).

A tracker is the run's observer ``tracker`` (:mod:`fedretain.experiments.observers`), built as
``factory(out, config)`` (``out``: the run's results folder; ``config``: the run's
:class:`~fedretain.recipe.config.Config`); it hears of the records, the rows of
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

import contextlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

from fedretain.core.tree import Tree
from fedretain.experiments.observers import BaseObserver, Record
from fedretain.extras import require
from fedretain.files import read_json, write_json
from fedretain.recipe.config import Config, resolved
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

    def __init__(self, out: str | Path, config: Config | None = None) -> None:
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


def settings_of(config: Config | None) -> dict[str, str]:
    """A run's settings as flat ``key: text`` pairs (``algo.mu``, ``model.hidden``): what a
    tracker shows as the run's parameters."""
    if config is None:
        return {}
    out: dict[str, str] = {}
    for key, value in resolved(config).items():
        if isinstance(value, dict):
            out.update({f"{key}.{k}": str(v) for k, v in value.items()})
        else:
            out[key] = str(value)
    return out


class ReplacedRun(BaseObserver):
    """A tracker that keeps each process's points in one run of the tracker's own and, on a
    resume, replaces it: the run the previous process wrote to is removed (its points after
    the checkpoint were never kept) and a new one gets the kept records first. The tracker's
    run id is kept in ``DIR/<name>.json``."""

    name = ""

    def __init__(self, out: str | Path, config: Config | None = None) -> None:
        self.out, self.config = Path(out), config
        self.run: Any = None

    @property
    def id_file(self) -> Path:
        return self.out / f"{self.name}.json"

    def start(self, done: int, records: list[Record]) -> None:
        self.close()
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            self.remove(read_json(self.id_file)["id"])
        self.run = self.open()
        write_json(self.id_file, {"id": self.run_id()})
        for r in records:
            self.write(r)

    def record(self, record: Record, state: Tree) -> Record:
        if self.run is None:
            self.start(0, [])
        self.write(record)
        return {}

    # the environment variable naming the tracker's experiment or project (the library's own)
    group_variable = ""

    @property
    def experiment(self) -> str:
        """Where the tracker files the run: its library's variable where set, else
        ``fedretain`` (a sweep's points and a preset's runs side by side, each under its
        name)."""
        return os.environ.get(self.group_variable) or "fedretain"

    @property
    def label(self) -> str:
        """The run's name in the tracker: the config's label (a sweep's point, a preset's
        method and seed)."""
        return self.config.label if self.config is not None else self.out.name

    def open(self) -> Any:
        """A new run of the tracker's, its settings logged."""
        raise NotImplementedError

    def run_id(self) -> str:
        raise NotImplementedError

    def write(self, record: Record) -> None:
        """The record's scalars at its round."""
        raise NotImplementedError

    def remove(self, run_id: str) -> None:
        """Remove the tracker's run ``run_id`` (a previous process's), where it still is."""
        raise NotImplementedError


class MLflowTracker(ReplacedRun):
    """Every numeric key of each record as an MLflow metric (key: the key, step: the round) of
    one MLflow run named after the config's label, the run's settings as its parameters, in
    the experiment ``MLFLOW_EXPERIMENT_NAME`` names (else ``fedretain``). The store:
    ``MLFLOW_TRACKING_URI`` where set, else a SQLite database beside the results
    (``sqlite:///DIR/mlflow.db``: ``mlflow ui --backend-store-uri sqlite:///DIR/mlflow.db``
    shows it). A resumed run deletes the MLflow run the previous process wrote to (its points
    after the checkpoint were never kept) and logs the kept records to a new one."""

    name = "mlflow"
    group_variable = "MLFLOW_EXPERIMENT_NAME"

    def client(self) -> Any:
        from mlflow.tracking import MlflowClient

        uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{self.out.resolve()}/mlflow.db"
        return MlflowClient(uri)

    def open(self) -> Any:
        from mlflow.entities import Param

        client = self.client()
        found = client.get_experiment_by_name(self.experiment)
        experiment = found.experiment_id if found else client.create_experiment(self.experiment)
        run = client.create_run(experiment, run_name=self.label)
        params = [Param(k, v[:6000]) for k, v in settings_of(self.config).items()]
        for i in range(0, len(params), 100):  # MLflow takes 100 parameters a call
            client.log_batch(run.info.run_id, params=params[i : i + 100])
        self.mlflow = client
        return run

    def run_id(self) -> str:
        return self.run.info.run_id

    def write(self, record: Record) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(k, v, now, record["round"]) for k, v in scalars(record).items()]
        self.mlflow.log_batch(self.run_id(), metrics=metrics)

    def remove(self, run_id: str) -> None:
        with contextlib.suppress(Exception):  # gone already, or another store: nothing to do
            self.client().delete_run(run_id)

    def close(self) -> None:
        if self.run is not None:
            self.mlflow.set_terminated(self.run_id())
            self.run = None


class WandbTracker(ReplacedRun):
    """Every numeric key of each record logged to a Weights & Biases run at its round, the
    run's settings as its config, named after the config's label, in the project
    ``WANDB_PROJECT`` names (else ``fedretain``). Offline unless ``WANDB_MODE`` says otherwise:
    the run is written to ``DIR/wandb/offline-run-*`` and ``wandb sync
    DIR/wandb/offline-run-*`` uploads it later. A resumed run removes the offline folder the
    previous process wrote (its points after the checkpoint were never kept) and logs the kept
    records to a new run."""

    name = "wandb"
    group_variable = "WANDB_PROJECT"

    def open(self) -> Any:
        import wandb

        return wandb.init(
            project=self.experiment,
            name=self.label,
            config=settings_of(self.config),
            dir=str(self.out),
            mode=os.environ.get("WANDB_MODE") or "offline",
            reinit="create_new",
        )

    def run_id(self) -> str:
        return self.run.id

    def write(self, record: Record) -> None:
        self.run.log(scalars(record), step=record["round"])

    def remove(self, run_id: str) -> None:
        for folder in (self.out / "wandb").glob(f"offline-run-*-{run_id}"):
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def check_mlflow(cfg: Config) -> None:
    """``tracking=mlflow`` needs MLflow's client (``mlflow-skinny``, or ``mlflow`` with its UI)."""
    require("mlflow", "tracking=mlflow")


def check_wandb(cfg: Config) -> None:
    """``tracking=wandb`` needs the ``wandb`` package."""
    require("wandb", "tracking=wandb")


# factory(out, config) -> the tracker (an observer); ``check=fn(cfg)`` validates the config
TRACKERS = Registry("tracker", internal=("out", "config"))
TRACKERS.add(
    "tensorboard",
    TensorBoardTracker,
    "each round's metrics as TensorBoard scalars in DIR/tensorboard/",
    check=check_tensorboard,
    files=("tensorboard/",),
)
TRACKERS.add(
    "mlflow",
    MLflowTracker,
    "each round's metrics and the settings in an MLflow run (MLFLOW_TRACKING_URI, else "
    "sqlite:///DIR/mlflow.db)",
    check=check_mlflow,
    files=("mlflow.db", "mlflow.json"),
)
TRACKERS.add(
    "wandb",
    WandbTracker,
    "each round's metrics and the settings in a Weights & Biases run (offline in DIR/wandb/ "
    "unless WANDB_MODE says otherwise; wandb sync uploads it)",
    check=check_wandb,
    files=("wandb/", "wandb.json"),
)


def make_tracker(cfg: Config, out: str | Path) -> BaseObserver | None:
    """The tracker ``cfg.tracking`` names for the results folder ``out`` (None: no tracking)."""
    return TRACKERS.build(cfg.tracking, {}, out, cfg) if cfg.tracking else None


__all__ = [
    "TRACKERS",
    "MLflowTracker",
    "TensorBoardTracker",
    "WandbTracker",
    "make_tracker",
    "scalars",
    "settings_of",
]
