"""What every engine shares: the clients' data, their persistent state, and the ledger."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from fedretain.core.algorithm import Algorithm, ClientContext, RoundInfo
from fedretain.core.task import Batch, Task
from fedretain.core.tree import Tree, leaves, tree_allfinite, tree_map
from fedretain.data.base import Dataset, as_float
from fedretain.engines.ledger import Ledger
from fedretain.engines.schedule import batch_plan, sample_clients
from fedretain.engines.store import ClientStore, MemoryStore
from fedretain.errors import FedRetainError


class DivergenceError(FedRetainError):
    """NaN or Inf appeared in a client's update or in the global model."""


@dataclass(frozen=True)
class LocalSpec:
    """How each client trains in a round."""

    batch_size: int
    epochs: int = 1
    steps: int = 0  # > 0: exactly this many mini-batches instead of epochs


class UplinkStack:
    """The round's uplinks, copied as they arrive into one preallocated stack (one copy in
    memory, in arrival order); ``stacked()`` is what ``aggregate`` receives."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.count = 0
        self.buffers: Tree | None = None

    def add(self, uplink: Tree) -> None:
        if self.buffers is None:
            self.buffers = tree_map(lambda v: v.new_empty((self.capacity, *v.shape)), uplink)
        for buf, v in zip(leaves(self.buffers), leaves(uplink), strict=True):
            buf[self.count].copy_(v)
        self.count += 1

    def stacked(self) -> Tree | None:
        if self.buffers is None or self.count == self.capacity:
            return self.buffers
        return tree_map(lambda buf: buf[: self.count], self.buffers)


EMPTY_ROUND = {"train_loss": float("nan"), "participants": 0.0, "skipped_clients": 0.0}


class EngineBase:
    """Holds the federation: client data (as index arrays), client states, the ledger."""

    name = "base"

    def __init__(
        self,
        algorithm: Algorithm,
        task: Task,
        dataset: Dataset,
        parts: list[np.ndarray],
        local: LocalSpec,
        *,
        seed: int,
        device: str | torch.device = "cpu",
        on_divergence: str = "stop",
        store: ClientStore | None = None,
    ) -> None:
        self.algorithm = algorithm
        self.task = task
        self.dataset = dataset
        self.parts = parts
        self.local = local
        self.seed = seed
        self.device = torch.device(device)
        self.on_divergence = on_divergence  # "stop" raises, "skip" drops the client's update
        self.store = store if store is not None else MemoryStore()
        self.store.device = self.device
        self.ledger = Ledger()
        # diagnostics: the round's locally trained models (params, buffers) by client
        self.keep_local_models = False
        self.local_models: dict[int, tuple[Tree, Tree]] = {}

    @property
    def num_clients(self) -> int:
        return len(self.parts)

    def client_data(self, cid: int) -> Batch:
        """The client's whole training data as one batch on the engine's device."""
        idx = torch.from_numpy(self.parts[cid])
        y = self.dataset.y_train[idx].to(self.device)
        label_mask = torch.zeros(self.dataset.num_classes, dtype=torch.bool, device=self.device)
        if y.dtype.is_floating_point:  # regression targets: no label set
            label_mask[:] = True
        else:
            label_mask[y] = True
        return {
            "x": as_float(self.dataset.x_train[idx].to(self.device)),
            "y": y,
            "w": torch.ones(len(idx), device=self.device),
            "label_mask": label_mask,
        }

    def plan(self, cid: int, info: RoundInfo) -> list[np.ndarray]:
        """The client's seeded mini-batch indices for this round (the same for every engine)."""
        return batch_plan(
            len(self.parts[cid]),
            self.local.batch_size,
            self.seed,
            info.round,
            cid,
            epochs=self.local.epochs,
            steps=self.local.steps,
            full_batch=self.algorithm.schedule == "full_batch",
        )

    def context(self, cid: int, info: RoundInfo, data: Batch) -> ClientContext:
        return ClientContext(
            task=self.task, info=info, client_id=cid, num_samples=len(self.parts[cid]), data=data
        )

    def client_state(self, cid: int, server_state: Tree) -> Tree:
        """The client's persistent state, initialised at its first participation."""
        if cid in self.store:
            return self.store[cid]
        return self.algorithm.client_init(server_state["x"])

    def keep_client_state(self, cid: int, state: Tree) -> None:
        """Store the client's new state (the store copies it)."""
        if state:
            self.store.put(cid, state)

    def remember_local_model(self, cid: int, state: Tree) -> None:
        """Keep the client's trained model of this round (only when diagnostics ask for it)."""
        if not self.keep_local_models:
            return
        if "params" not in state:
            raise FedRetainError(
                f"{self.algorithm.name} keeps no 'params' in its local state, which forgetting "
                "diagnostics read; run it without diagnostics"
            )
        self.local_models[cid] = (state["params"], state.get("buffers", {}))

    def check_payload(self, payload: Tree, declared: tuple[str, ...], what: str) -> None:
        if tuple(payload) != declared:
            raise RuntimeError(
                f"{self.algorithm.name} sent {what} keys {tuple(payload)}, declared {declared}"
            )

    def start_round(
        self, rnd: int, lr: float, per_round: int, clients: np.ndarray | None
    ) -> RoundInfo | None:
        """The round's info (``clients`` default: ``per_round`` drawn uniformly); None if empty."""
        self.local_models = {}
        if clients is None:
            clients = sample_clients(self.num_clients, per_round, self.seed, rnd)
        if len(clients) == 0:
            return None
        return RoundInfo(
            round=rnd,
            num_clients=self.num_clients,
            clients=tuple(int(c) for c in clients),
            lr=lr,
            seed=self.seed,
        )

    def finish_round(
        self,
        server_state: Tree,
        info: RoundInfo,
        stacked: Tree | None,
        kept: list[int],
        losses: list[float],
    ) -> tuple[Tree, dict[str, float]]:
        """Aggregate the kept clients' stacked uplinks (in ``kept`` order) into the server."""
        metrics = {
            "skipped_clients": float(len(info.clients) - len(kept)),
            "participants": float(len(kept)),
        }
        if stacked is None or not kept:  # every update was dropped: the global model stays
            return server_state, {**metrics, "train_loss": float("nan")}
        if len(kept) < len(info.clients):
            info = replace(info, clients=tuple(kept))
        weights = torch.tensor(
            [len(self.parts[c]) for c in kept], dtype=torch.float32, device=self.device
        )
        server_state, agg = self.algorithm.aggregate(server_state, stacked, weights, info)
        self.check_finite(server_state["x"], info.round, "the global model after aggregation")
        metrics["train_loss"] = float(np.mean(losses))
        metrics.update({k: float(v) for k, v in agg.items()})
        return server_state, metrics

    def check_finite(self, tree: Tree, rnd: int, where: str) -> None:
        if not tree_allfinite(tree):
            raise diverged(rnd, where)


def diverged(rnd: int, where: str) -> DivergenceError:
    """The error for NaN/Inf found in ``where`` during round ``rnd`` (0-based)."""
    hint = " (or on_divergence=skip to drop such updates)" if "client" in where else ""
    return DivergenceError(
        f"training diverged in round {rnd + 1}: NaN or Inf in {where}; "
        f"lower lr (or lr_schedule), or check the data{hint}"
    )
