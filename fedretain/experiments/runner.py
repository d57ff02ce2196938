"""Run one experiment from a :class:`Config` and write its results folder.

The folder (the results contract later tools read):

- ``config.toml``: the fully resolved configuration;
- ``metrics.jsonl``: one JSON object per evaluated round (``round``, ``test_accuracy``,
  ``test_loss``, ``train_loss``, ``lr``, cumulative ``bytes_up``/``bytes_down`` and
  ``seconds`` of wall time); round 0 is the initial model;
- ``summary.json``: ``final_accuracy``, ``top_accuracy``, ``rounds``, ``bytes_up``,
  ``bytes_down``, ``wall_seconds``, ``rounds_to`` (target -> first round or null), and more;
- ``accuracy.png``: the accuracy curve;
- ``checkpoint/``: the state to continue from (every ``checkpoint_every`` rounds and at the end).

Every file is written atomically.
"""

from __future__ import annotations

import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedretain.algorithms import build_algorithm
from fedretain.core.algorithm import Algorithm
from fedretain.core.optim import OPTIMIZERS, Optimizer
from fedretain.core.task import Task
from fedretain.core.tree import Tree, tree_bytes, tree_numel
from fedretain.data.base import Dataset
from fedretain.data.datasets import load_dataset
from fedretain.data.partition import make_partition, train_val_split
from fedretain.engines.base import DivergenceError, LocalSpec
from fedretain.engines.schedule import Participation
from fedretain.engines.sequential import SequentialEngine
from fedretain.engines.store import ClientStore, make_store
from fedretain.engines.vmap import VmapEngine
from fedretain.errors import ConfigError, DataError
from fedretain.experiments.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from fedretain.experiments.config import Config, resolved
from fedretain.experiments.results import read_jsonl, write_json, write_jsonl, write_toml
from fedretain.flower import flower_engine
from fedretain.losses import get_loss
from fedretain.metrics.accuracy import rounds_to_targets, top_accuracy
from fedretain.metrics.forgetting import Forgetting
from fedretain.models import build_model

ENGINES = {"sequential": SequentialEngine, "vmap": VmapEngine, "flower": flower_engine}


def build_optimizer(cfg: Config) -> Optimizer:
    if cfg.optimizer == "sgd":
        return OPTIMIZERS["sgd"](momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    return OPTIMIZERS["adam"](weight_decay=cfg.weight_decay)


def resolve_device(name: str) -> torch.device:
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name} asked for, but torch finds no CUDA GPU; use device=cpu")
    return torch.device(name)


class Progress:
    """A progress bar (round, accuracy, ETA) on a terminal; silent otherwise."""

    def __init__(self, label: str, total: int, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
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


def make_clients(cfg: Config, dataset: Dataset) -> list[np.ndarray]:
    """The config's partition of the dataset's training samples over ``cfg.clients``."""
    return make_partition(
        cfg.partition,
        dataset.train_labels,
        cfg.clients,
        cfg.seed,
        groups=dataset.groups,
        **cfg.partition_params,
    )


def build_engine(
    cfg: Config,
    algorithm: Algorithm,
    task: Task,
    dataset: Dataset,
    parts: list[np.ndarray],
    store: ClientStore,
) -> Any:
    """The config's engine for ``algorithm`` (the run's own, or a diagnostic reference)."""
    extra = {
        "vmap": {"chunk": cfg.vmap_chunk, "compile": cfg.vmap_compile},
        "flower": {"config": cfg},
    }.get(cfg.engine, {})
    return ENGINES[cfg.engine](
        algorithm,
        task,
        dataset,
        parts,
        LocalSpec(cfg.batch_size, cfg.local_epochs, cfg.local_steps),
        seed=cfg.seed,
        device=resolve_device(cfg.device),
        on_divergence=cfg.on_divergence,
        store=store,
        **extra,
    )


class ReferenceLocal:
    """A reference algorithm's local models, trained from the run's global model of each round
    on the same clients and mini-batches (``diagnostics_reference``). Nothing of it reaches
    the run: the reference keeps its own client store and the torch RNG is restored."""

    def __init__(self, cfg: Config, built: dict[str, Any]) -> None:
        # the reference's own default hyper-parameters: cfg.algo belongs to the run's algorithm
        self.algorithm = build_algorithm(cfg.diagnostics_reference, opt=build_optimizer(cfg))
        self.engine = build_engine(
            cfg,
            self.algorithm,
            built["task"],
            built["dataset"],
            built["parts"],
            make_store("memory", "float32", None),
        )
        self.engine.keep_local_models = True

    def local_models(
        self, start_model: tuple[Tree, Tree], rnd: int, lr: float, clients: list[int]
    ) -> dict[int, tuple[Tree, Tree]]:
        cuda = self.engine.device.type == "cuda"
        rng = torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else []
        state = self.algorithm.server_init(*start_model)
        self.engine.run_round(state, rnd, lr, clients=clients)
        torch.set_rng_state(rng[0])
        if cuda:
            torch.cuda.set_rng_state_all(rng[1])
        return self.engine.local_models


def prepare(cfg: Config, out: Path | None = None) -> dict[str, Any]:
    """Everything a run needs, built from the config: data, partition, task, algorithm.

    ``out`` is the results folder (a disk client store lives in ``out/client_state``).
    """
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    dataset = load_dataset(cfg.dataset, cfg.data_dir or None, **cfg.dataset_params)
    parts = make_clients(cfg, dataset)
    val_parts = None
    if cfg.val_fraction > 0:
        parts, val_parts = train_val_split(parts, cfg.val_fraction, cfg.seed)
    empty = [i for i, p in enumerate(parts) if len(p) == 0]
    if empty:
        raise DataError(
            f"partition {cfg.partition} left {len(empty)} of {len(parts)} clients without "
            f"training data (first: client {empty[0]}); use fewer clients or a partition "
            "parameter that guarantees samples (e.g. partition.min_samples=1)"
        )
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, dataset.input_shape, dataset.num_classes, **cfg.model_params)
    task = Task(model.to(device), get_loss(cfg.loss), dataset.num_classes)
    algorithm = build_algorithm(cfg.algorithm, opt=build_optimizer(cfg), **cfg.algo)
    engine = build_engine(
        cfg,
        algorithm,
        task,
        dataset,
        parts,
        make_store(
            cfg.client_store if out is not None else "memory",
            cfg.client_store_dtype,
            out / "client_state" if out is not None else None,
        ),
    )
    participation = Participation(
        cfg.participation, len(parts), cfg.clients_per_round, cfg.seed, **cfg.participation_params
    )
    return {
        "participation": participation,
        "dataset": dataset,
        "parts": parts,
        "val_parts": val_parts,
        "task": task,
        "algorithm": algorithm,
        "engine": engine,
    }


# settings that may change when a run is resumed: they do not change the computation
RESUMABLE = (
    "name",
    "rounds",
    "eval_every",
    "targets",
    "threads",
    "checkpoint_every",
    "device",
    "engine",
    "vmap_chunk",
    "vmap_compile",
    "diagnostics",
    "diagnostics_rounds",
    "diagnostics_reference",
    "diagnostics_samples",
)


def _fingerprint(cfg: Config) -> dict[str, Any]:
    return {k: v for k, v in resolved(cfg).items() if k not in RESUMABLE}


def _summary(
    cfg: Config,
    records: list[dict[str, Any]],
    built: dict[str, Any],
    rounds_done: int,
    server_state: Tree,
) -> dict[str, Any]:
    server_bytes = {
        k: tree_bytes(v) if isinstance(v, dict) else tree_bytes({k: v})
        for k, v in server_state.items()
    }
    engine, parts = built["engine"], built["parts"]
    final = records[-1]
    sizes = [len(p) for p in parts]
    return {
        "name": cfg.label,
        "algorithm": cfg.algorithm,
        "final_accuracy": final["test_accuracy"],
        "final_loss": final["test_loss"],
        "top_accuracy": top_accuracy(records),
        "rounds": rounds_done,
        "rounds_to": rounds_to_targets(records, cfg.targets),
        "wall_seconds": final["seconds"],
        "num_params": tree_numel(server_state["x"]),
        "clients": len(parts),
        "client_samples": {
            "min": int(min(sizes)),
            "median": float(np.median(sizes)),
            "max": int(max(sizes)),
        },
        "clients_with_state": len(engine.store),
        "skipped_updates": int(sum(r.get("skipped_clients", 0) for r in records)),
        "server_state_bytes": server_bytes,
        **engine.ledger.summary(),
    }


def _pseudo_settings(algorithm: Algorithm) -> dict[str, float] | None:
    """FedReg's pseudo-data settings of this run (its resolved hyper-parameters), for the
    Fisher diagnostic (None: the diagnostic's defaults)."""
    if algorithm.name != "fedreg":
        return None
    return {k: algorithm.hparams[k] for k in ("eta_s", "eta_p", "steps")}


def run_experiment(
    cfg: Config, out: str | Path, progress: bool | None = None, resume: bool = False
) -> dict[str, Any]:
    """Run ``cfg`` and write its results folder ``out``; returns the summary.

    With ``resume``, continue from the checkpoint in ``out``: the metrics come out identical
    to those of an uninterrupted run (apart from ``seconds``).
    """
    from fedretain.experiments.plots import plot_curves  # matplotlib: only where a run ends

    out = Path(out)
    built = prepare(cfg, out)
    dataset, task, algorithm, engine = (
        built[k] for k in ("dataset", "task", "algorithm", "engine")
    )
    x_test, y_test = dataset.x_test, dataset.y_test
    forgetting = None
    if "forgetting" in cfg.diagnostics:
        engine.keep_local_models = True
        forgetting = Forgetting(
            task,
            dataset,
            built["parts"],
            built["val_parts"],
            cfg.diagnostics_rounds or [cfg.rounds],
            cfg.eval_batch_size,
            pseudo=_pseudo_settings(algorithm),
            seed=cfg.seed,
            eval_samples=cfg.diagnostics_samples,
        )
    reference = ReferenceLocal(cfg, built) if cfg.diagnostics_reference else None
    records: list[dict[str, Any]] = []
    skipped = 0.0
    fingerprint = _fingerprint(cfg)

    if resume:
        ckpt = load_checkpoint(out, engine.device)
        # a key newer than the checkpoint counts as its default there
        defaults = resolved(Config())
        changed = [
            k
            for k in set(ckpt.fingerprint) | set(fingerprint)
            if ckpt.fingerprint.get(k, defaults.get(k)) != fingerprint.get(k)
        ]
        if changed:
            raise ConfigError(
                f"cannot resume {out}: {', '.join(sorted(changed))} differ from the checkpoint; "
                f"only {', '.join(RESUMABLE)} may change"
            )
        server_state = ckpt.server
        ckpt.restore_clients(engine.store)
        engine.ledger.load_state(ckpt.ledger)
        records = ckpt.records
        first_round, elapsed0 = ckpt.round, ckpt.elapsed
        if forgetting is not None and (out / "forgetting.jsonl").exists():
            kept = [r for r in read_jsonl(out / "forgetting.jsonl") if r["round"] <= first_round]
            forgetting.records = kept
            forgetting.prev_clients = kept[-1]["clients"] if kept else []
            write_jsonl(out / "forgetting.jsonl", kept)
        torch.set_rng_state(ckpt.torch_rng)
        if ckpt.cuda_rng and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(ckpt.cuda_rng)
        write_jsonl(out / "metrics.jsonl", records)
    else:
        params, buffers = task.init()
        server_state = algorithm.server_init(params, buffers)
        first_round, elapsed0 = 0, 0.0
    out.mkdir(parents=True, exist_ok=True)
    write_toml(out / "config.toml", resolved(cfg))
    start = time.perf_counter()

    def evaluate(rnd: int, train_loss: float | None, participants: float = 0.0) -> dict[str, Any]:
        p, b = algorithm.global_model(server_state)
        acc, loss = task.evaluate(p, b, x_test, y_test, cfg.eval_batch_size)
        record = {
            "round": rnd,
            "test_accuracy": acc,
            "test_loss": loss,
            "train_loss": train_loss if train_loss == train_loss else None,  # NaN: no client
            "lr": cfg.lr_at(max(rnd - 1, 0)),
            "participants": int(participants),
            "skipped_clients": skipped,
            "bytes_up": engine.ledger.bytes_up,
            "bytes_down": engine.ledger.bytes_down,
            "seconds": elapsed0 + time.perf_counter() - start,
        }
        records.append(record)
        write_jsonl(out / "metrics.jsonl", records)
        return record

    def checkpoint(done: int) -> None:
        save_checkpoint(
            out,
            Checkpoint(
                round=done,
                server=server_state,
                clients=engine.store,
                ledger=engine.ledger.state(),
                records=records,
                elapsed=elapsed0 + time.perf_counter() - start,
                torch_rng=torch.get_rng_state(),
                cuda_rng=torch.cuda.get_rng_state_all() if engine.device.type == "cuda" else [],
                fingerprint=fingerprint,
            ),
        )

    if not records:
        evaluate(0, None)
    done = first_round
    bar = Progress(cfg.label, cfg.rounds, progress) if progress is not False else nullcontext()
    try:
        with bar:
            for rnd in range(first_round, cfg.rounds):
                clients = built["participation"].clients(rnd)
                start_model = algorithm.global_model(server_state)
                server_state, m = engine.run_round(
                    server_state, rnd, cfg.lr_at(rnd), clients=clients
                )
                done = rnd + 1
                if forgetting is not None:
                    ref = None
                    if reference is not None:
                        ref = reference.local_models(start_model, rnd, cfg.lr_at(rnd), clients)
                    forgetting.round(rnd, start_model, engine.local_models, ref)
                    write_jsonl(out / "forgetting.jsonl", forgetting.records)
                skipped += m.get("skipped_clients", 0.0)
                acc = None
                if done % cfg.eval_every == 0 or done == cfg.rounds:
                    acc = evaluate(done, m["train_loss"], m.get("participants", 0.0))[
                        "test_accuracy"
                    ]
                    skipped = 0.0
                if cfg.checkpoint_every and (
                    done % cfg.checkpoint_every == 0 or done == cfg.rounds
                ):
                    checkpoint(done)
                if isinstance(bar, Progress):
                    bar.update(done, acc)
    except DivergenceError as e:  # keep every result so far, say why the run stopped
        summary = {**_summary(cfg, records, built, done, server_state), "stopped": str(e)}
        write_json(out / "summary.json", summary)
        plot_curves([(cfg.label, records)], out / "accuracy.png", title=f"{cfg.label} (stopped)")
        raise

    summary = _summary(cfg, records, built, cfg.rounds, server_state)
    if forgetting is not None:
        forgetting.plots(out, cfg.label, cfg.diagnostics_reference)
        summary["forgetting"] = forgetting.summary()
    write_json(out / "summary.json", summary)
    plot_curves([(cfg.label, records)], out / "accuracy.png", title=f"{cfg.label} on {cfg.dataset}")
    return summary
