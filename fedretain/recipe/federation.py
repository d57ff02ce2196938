"""The federation a configuration describes, built once: everything a run, a Flower
client or a benchmark needs, and no engine.

    fed = build_federation(load_config("exp.toml"))
    fed.dataset, fed.clients.parts, fed.task, fed.algorithm, fed.participation.clients(0)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedretain.algorithms import build_algorithm
from fedretain.algorithms.aggregators import AGGREGATORS
from fedretain.continual import zoo as _zoo  # noqa: F401  (registers model=acgan)
from fedretain.continual.replay import replay_of
from fedretain.continual.scenario import ContinualData, scenario_of
from fedretain.core.algorithm import Algorithm
from fedretain.core.client import Clients, LocalSpec
from fedretain.core.optim import OPTIMIZERS, SERVER_OPTIMIZERS, Optimizer
from fedretain.core.task import Task
from fedretain.data.base import Dataset
from fedretain.data.datasets import load_dataset
from fedretain.data.partition import make_partition, train_val_split
from fedretain.engines.round import Engine, Rounds
from fedretain.engines.schedule import PARTICIPATIONS, Participation
from fedretain.engines.store import STORES, ClientStore
from fedretain.errors import ConfigError, DataError
from fedretain.losses import get_loss
from fedretain.models import build_model
from fedretain.recipe.config import Config, privacy_mechanism
from fedretain.registry import kind

log = logging.getLogger("fedretain")


class StaticScenario:
    """The default scenario: one task, the same clients (the partition's parts) in every
    round. A continual one (:class:`~fedretain.continual.scenario.ContinualData`, chosen with
    ``scenario=``) moves them through its tasks; both answer the same questions."""

    rounds_per_task: int | None = None  # no tasks

    def clients_for_round(self, clients: Clients, rnd: int) -> Clients:
        return clients

    def describe(self, class_names: list[str] | None = None) -> str | None:
        return None  # no task plan to show


Scenario = StaticScenario | ContinualData


@dataclass(frozen=True)
class Federation:
    """Data, clients, model and algorithm of one configuration."""

    config: Config
    dataset: Dataset
    clients: Clients  # training samples per client, local plan, seed, device
    val_parts: list[np.ndarray] | None  # per-client validation samples (val_fraction > 0)
    task: Task
    algorithm: Algorithm
    participation: Participation
    privacy: Any = None  # the config's privacy mechanism (fedretain.privacy.mechanisms) or None
    # the clients of each round: the same ones (static), or a continual scenario's task plan
    # and data (``clients`` then hold task 0's parts)
    scenario: Scenario = field(default_factory=StaticScenario)

    @property
    def continual(self) -> ContinualData | None:
        """The continual scenario, for what only a continual run has (the recorder of its
        tasks); None for a static one."""
        return self.scenario if isinstance(self.scenario, ContinualData) else None

    @property
    def parts(self) -> list[np.ndarray]:
        return self.clients.parts

    @property
    def device(self) -> torch.device:
        return self.clients.device

    @property
    def eval_batch(self) -> int:
        """The evaluation batch size: the config's ``eval_batch_size``, or by default 100 for a
        convolutional model on a CPU (1.4-1.9x faster than 1000: the activations stay in cache;
        benchmarks/RESULTS.md) and 1000 otherwise (an MLP's matmuls gain from large batches)."""
        if self.config.eval_batch_size:
            return self.config.eval_batch_size
        return 100 if self.device.type == "cpu" and self.task.convolutional else 1000

    def rounds(self, engine: Engine, out: Path | None = None) -> Rounds:
        """This federation's rounds on ``engine``: the clients of each round (a continual
        scenario's task parts), the client store (an engine's own, where it brings one:
        Flower's remote store on its SuperNodes; otherwise the config's, a disk store in
        ``out/client_state`` or in memory without ``out``) and divergence policy. The one way
        to build them: the run and the Flower deployment's strategy both do."""
        store = engine.store if engine.store is not None else client_store(self.config, out)
        return Rounds(
            self.algorithm,
            self.task,
            self.clients,
            engine,
            store,
            on_divergence=self.config.on_divergence,
            clients_at=self.clients_for_round,
        )

    def clients_for_round(self, rnd: int) -> Clients:
        """The clients of round ``rnd``, as the scenario has them: in a continual one, with
        the parts of that round's task (the data only moves forward)."""
        return self.scenario.clients_for_round(self.clients, rnd)


def resolve_device(name: str) -> torch.device:
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={name} asked for, but torch finds no CUDA GPU; use device=cpu")
    return torch.device(name)


CUBLAS_WORKSPACE = ":4096:8"  # the workspace setting cuBLAS needs for deterministic results


def use_deterministic(device: torch.device, deterministic: bool = True) -> None:
    """Torch's modes for a run on ``device`` (the config's ``deterministic``), set before the
    run's first CUDA operation, both ways (the modes belong to the process: an earlier run's
    must not carry over).

    On a CUDA device, ``deterministic=True``: deterministic algorithms (an operation without a
    deterministic implementation raises), cuDNN's deterministic kernels without benchmarking,
    ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` where it is unset (cuBLAS reads it when it creates its
    handle), and float32 convolutions and matrix products in float32 (no TF32, which cuDNN
    otherwise uses for convolutions: ~1e-3 from the CPU's numbers), so that a run repeats
    itself and agrees with the CPU to float32 rounding. ``deterministic=False``: torch's fast
    defaults (nondeterministic kernels allowed, cuDNN benchmarking and TF32 convolutions).

    A CPU device changes nothing: a CPU run gives the same numbers for the same config and seed
    by construction, and the deterministic mode would swap some CPU kernels (and refuse others),
    changing those numbers."""
    if device.type != "cuda":
        return
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
    torch.use_deterministic_algorithms(deterministic, warn_only=False)
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = not deterministic
    torch.backends.cudnn.allow_tf32 = not deterministic
    torch.backends.cuda.matmul.allow_tf32 = False  # torch's default: float32 products


@contextmanager
def modes_restored() -> Iterator[None]:
    """Torch's process-wide modes that :func:`use_deterministic` sets (and
    ``CUBLAS_WORKSPACE_CONFIG``), restored as they were on exit, however the block ends: a
    run's deterministic mode is its own, never the next run's in the same process.
    :func:`~fedretain.experiments.run.run_experiment` runs inside it."""
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    algorithms = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    flags = (cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32)
    workspace = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(algorithms, warn_only=warn_only)
        cudnn.deterministic, cudnn.benchmark, cudnn.allow_tf32, matmul.allow_tf32 = flags
        if workspace is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
        else:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = workspace


def local_optimizer(cfg: Config) -> Optimizer:
    """The config's local optimiser (``optimizer`` and ``optimizer.*``)."""
    return OPTIMIZERS.build(cfg.optimizer, cfg.optimizer_params, prefix="optimizer")


def server_side(cfg: Config) -> dict[str, Any]:
    """The config's server optimizer and aggregator, for the algorithms that take them."""
    out: dict[str, Any] = {}
    if cfg.server_opt:
        out["server_opt"] = SERVER_OPTIMIZERS.build(
            cfg.server_opt, cfg.server_opt_params, prefix="server_opt"
        )
    if cfg.aggregator != "mean" or kind("algorithm").takes(cfg.algorithm, "aggregator"):
        out["aggregator"] = AGGREGATORS.build(
            cfg.aggregator, cfg.aggregator_params, prefix="aggregator"
        )
    return out


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


def client_store(cfg: Config, out: Path | None) -> ClientStore:
    """The config's client-state store (a disk store lives in ``out/client_state``)."""
    folder = out / "client_state" if out is not None else None
    name = cfg.store if out is not None else "memory"
    return STORES.build(name, cfg.store_params, folder, prefix="store")


def build_federation(cfg: Config, data_dir: str | None = None) -> Federation:
    """Load the data, split it over the clients, build the model, the loss and the algorithm.

    ``data_dir`` overrides the config's (a Flower node may keep its data elsewhere).
    """
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    use_deterministic(device, cfg.deterministic)  # before anything runs on the device
    dataset = load_dataset(cfg.dataset, data_dir or cfg.data_dir or None, **cfg.dataset_params)
    dataset = dataset.with_test_samples(cfg.test_samples)
    continual = continual_data(cfg, dataset)
    parts = continual.parts_for_round(0) if continual is not None else make_clients(cfg, dataset)
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
    if cfg.loss == "tce" and continual is None:
        warn_single_class(parts, dataset)
    torch.manual_seed(cfg.seed)
    model = build_model(cfg.model, dataset.input_shape, dataset.num_classes, **cfg.model_params)
    dtype = torch.float64 if cfg.precision == "fp64" else torch.float32
    if dtype == torch.float64:  # drawn in float32 as in fp32 runs, then widened
        model = model.double()
    autocast = torch.bfloat16 if cfg.precision == "bf16" else None
    task = Task(model.to(device), get_loss(cfg.loss), dataset.num_classes, autocast=autocast)
    scenario = continual or StaticScenario()
    algorithm = build_algorithm(
        cfg.algorithm,
        opt=local_optimizer(cfg),
        **server_side(cfg),
        model=task.model,
        rounds_per_task=scenario.rounds_per_task,
        **cfg.algo,
    )
    algorithm = replay_of(
        cfg.replay,
        cfg.replay_params,
        algorithm,
        scenario.rounds_per_task,
        dataset.input_shape,
        dataset.num_classes,
    )
    privacy = privacy_mechanism(cfg)
    if privacy is not None:
        algorithm = privacy.apply(algorithm, task.model)
    local = LocalSpec(cfg.batch_size, cfg.local_epochs, cfg.local_steps)
    participation = PARTICIPATIONS.build(
        cfg.participation, cfg.participation_params, len(parts), cfg.clients_per_round, cfg.seed
    )
    return Federation(
        config=cfg,
        dataset=dataset,
        clients=Clients(dataset, parts, local, cfg.seed, device, dtype),
        val_parts=val_parts,
        task=task,
        algorithm=algorithm,
        participation=participation,
        privacy=privacy,
        scenario=scenario,
    )


def warn_single_class(parts: list[np.ndarray], dataset: Dataset) -> int:
    """Warn when clients hold a single class under ``loss=tce``: its softmax runs over the
    client's own classes, so their loss is 0 and they send back the global model unchanged.
    Returns how many such clients there are."""
    labels = dataset.train_labels
    if labels.dtype.kind == "f":  # regression targets: no label set
        return 0
    one = sum(len(np.unique(labels[p])) == 1 for p in parts)
    if one:
        log.warning(
            "%d of %d clients hold a single class: with loss=tce their loss is 0 (the softmax "
            "runs over their own classes), so they do not train and send back the global model "
            "unchanged; loss=ce, or a partition that gives every client two classes or more, "
            "trains them",
            one,
            len(parts),
        )
    return one


def continual_data(cfg: Config, dataset: Dataset) -> ContinualData | None:
    """The task plan and data of the config's continual scenario (None without one)."""
    scenario = scenario_of(cfg.scenario, cfg.scenario_params)
    if scenario is None:
        return None
    return ContinualData(scenario, dataset.train_labels, dataset.num_classes, cfg.clients, cfg.seed)


def describe_task_plan(cfg: Config, dataset: Dataset) -> str | None:
    """``fedretain partition``'s text for a continual config (the task plan as a table); None
    without a scenario."""
    return (continual_data(cfg, dataset) or StaticScenario()).describe()


__all__ = [
    "Federation",
    "build_federation",
    "client_store",
    "continual_data",
    "describe_task_plan",
    "local_optimizer",
    "make_clients",
    "modes_restored",
    "resolve_device",
    "use_deterministic",
]
