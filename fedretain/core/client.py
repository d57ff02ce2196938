"""One client's side of a round, the same on every engine: who the clients are
(:class:`Clients`: each one's samples, :class:`LocalSpec`, the run's seed and device), its
seeded mini-batches (:func:`batch_plan`), one client's local training (:func:`train_client`,
a pure function of downlink, client state, data, mini-batch plan and round), the random
numbers of its steps (:func:`local_draws`) and the client-state rules (:func:`client_state`,
:func:`keeps_old_state`, :func:`local_model`). The sequential engine, the Flower ClientApp,
the forgetting diagnostics' reference and the privacy attacks call it; the vectorised engine
runs the same algorithm functions under ``vmap``. The round (sampling, collection,
aggregation) is :mod:`fedretain.engines.round`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from fedretain.core.algorithm import Algorithm, ClientContext, RoundInfo
from fedretain.core.task import Batch, Task
from fedretain.core.tree import Tree, flatten, tree_map
from fedretain.data.base import Dataset, as_input
from fedretain.errors import DivergenceError

CPU = torch.device("cpu")
_BATCHES = 2  # the mini-batches' random stream (1: the clients sampled, engines/schedule.py)


def diverged(rnd: int, where: str) -> DivergenceError:
    """The error for NaN/Inf found in ``where`` during round ``rnd`` (0-based)."""
    hint = " (or on_divergence=skip to drop such updates)" if "client" in where else ""
    return DivergenceError(
        f"training diverged in round {rnd + 1}: NaN or Inf in {where}; "
        f"lower lr (or lr_schedule; server_opt.lr with a server optimizer), or check the data{hint}"
    )


def batch_plan(
    num_samples: int,
    batch_size: int,
    seed: int,
    rnd: int,
    client: int,
    *,
    epochs: int = 1,
    steps: int = 0,
    full_batch: bool = False,
) -> list[np.ndarray]:
    """Indices of each local mini-batch of one client in one round.

    - ``full_batch``: one batch holding every sample;
    - ``steps > 0``: exactly ``steps`` batches, taken in order from fresh permutations;
    - otherwise ``epochs`` passes, each a fresh permutation cut into batches of ``batch_size``
      (the last batch of a pass may be smaller).
    """
    if full_batch:
        return [np.arange(num_samples)]
    rng = np.random.default_rng([seed, _BATCHES, rnd, client])
    b = min(batch_size, num_samples)
    if steps > 0:
        per_pass = num_samples // b
        passes = -(-steps // per_pass)
        order = np.concatenate(
            [rng.permutation(num_samples)[: per_pass * b] for _ in range(passes)]
        )
        return [order[k * b : (k + 1) * b] for k in range(steps)]
    plan: list[np.ndarray] = []
    for _ in range(epochs):
        perm = rng.permutation(num_samples)
        plan.extend(perm[k : k + b] for k in range(0, num_samples, b))
    return plan


@dataclass(frozen=True)
class LocalSpec:
    """How each client trains in a round."""

    batch_size: int
    epochs: int = 1
    steps: int = 0  # > 0: exactly this many mini-batches instead of epochs


@dataclass(frozen=True)
class Clients:
    """The federation's clients: each one's training samples (indices into ``dataset``), how
    they train, the run's seed and the device their data goes to."""

    dataset: Dataset
    parts: list[np.ndarray]
    local: LocalSpec
    seed: int = 0
    device: torch.device = CPU
    dtype: torch.dtype = torch.float32  # of the batches' inputs: float64 in precision=fp64

    def __len__(self) -> int:
        return len(self.parts)

    def size(self, cid: int) -> int:
        return len(self.parts[cid])

    def data(self, cid: int) -> Batch:
        """The client's whole training data as one batch on the device."""
        idx = torch.from_numpy(self.parts[cid])
        y = self.dataset.y_train[idx].to(self.device)
        label_mask = torch.zeros(self.dataset.num_classes, dtype=torch.bool, device=self.device)
        if y.dtype.is_floating_point:  # regression targets: no label set
            label_mask[:] = True
        else:
            label_mask[y] = True
        return {
            "x": as_input(self.dataset.x_train[idx].to(self.device), self.dtype),
            "y": y,
            "w": torch.ones(len(idx), device=self.device),
            "label_mask": label_mask,
        }

    def plan(self, cid: int, info: RoundInfo, algorithm: Algorithm) -> list[np.ndarray]:
        """The client's seeded mini-batch indices for this round (the same on every engine)."""
        return batch_plan(
            self.size(cid),
            self.local.batch_size,
            self.seed,
            info.round,
            cid,
            epochs=self.local.epochs,
            steps=self.local.steps,
            full_batch=algorithm.hints.schedule == "full_batch",
        )


class ClientUpdate(NamedTuple):
    """One client's round: what it sends, the state it keeps, its mean loss, its last step
    state (the trained local model is ``final["params"]``, ``final["buffers"]``)."""

    uplink: Tree
    state: Tree
    loss: Tensor
    final: Tree


def train_client(
    algorithm: Algorithm,
    task: Task,
    downlink: Tree,
    client_state: Tree,
    data: Batch,
    plan: list[np.ndarray],
    info: RoundInfo,
    cid: int,
    debug: bool = False,
) -> ClientUpdate:
    """Local training of one client: ``local_init``, one ``local_step`` per mini-batch of
    ``plan``, ``local_final``. Pure: nothing outside its arguments is read or changed.

    With ``debug`` (``engine=debug``), an error raised in any stage carries a note naming the
    round, the client and the stage (``local_step 3 of 40``), and the first NaN or Inf in the
    state a stage returns stops the client with a :class:`DivergenceError` naming them and the
    value's key."""
    ctx = ClientContext(task=task, info=info, client_id=cid, num_samples=len(data["y"]), data=data)
    device = data["y"].device
    stage: str | int = "local_draws"  # where an error arose: a name, or the step's index
    try:
        draws = local_draws(algorithm, downlink, client_state, ctx, plan, device)
        stage = "local_init"
        state = algorithm.local_init(downlink, client_state, ctx)
        if debug:
            _finite({"state": state}, info, cid, stage, len(plan))
        losses = []
        for t, idx in enumerate(plan):
            stage = t
            i = torch.from_numpy(idx).to(device)
            batch = {"x": data["x"][i], "y": data["y"][i], "w": data["w"][i], "idx": i}
            batch["label_mask"] = data["label_mask"]
            if draws is not None:
                batch["draws"] = tree_map(lambda v, t=t, n=idx.size: v[t, :n], draws)
            state, metrics = algorithm.local_step(state, batch, ctx)
            if debug:
                _finite({"loss": metrics["loss"], "state": state}, info, cid, t, len(plan))
            losses.append(metrics["loss"])
        stage = "local_final"
        uplink, new_state = algorithm.local_final(state, client_state, ctx)
        if debug:
            _finite({"uplink": uplink, "client_state": new_state}, info, cid, stage, len(plan))
    except Exception as e:
        if debug and not isinstance(e, _Located):
            e.add_note(f"engine=debug: {_where(info, cid, stage, len(plan))}")
        raise
    return ClientUpdate(uplink, new_state, torch.stack(losses).mean(), state)


def _where(info: RoundInfo, cid: int, stage: str | int, steps: int) -> str:
    """``round 3, client 7, local_step 12 of 40`` (1-based round and step)."""
    name = f"local_step {stage + 1} of {steps}" if isinstance(stage, int) else stage
    return f"round {info.round + 1}, client {cid}, {name}"


class _Located(DivergenceError):
    """engine=debug's NaN/Inf, already naming its round, client and stage."""


def _finite(tree: Tree, info: RoundInfo, cid: int, stage: str | int, steps: int) -> None:
    """engine=debug: raise at the first NaN or Inf in ``tree``, naming where it arose."""
    for key, value in flatten(tree).items():
        floating = isinstance(value, Tensor) and value.is_floating_point()
        if floating and not bool(torch.isfinite(value).all()):
            kind = "NaN" if bool(torch.isnan(value).any()) else "Inf"
            raise _Located(
                f"engine=debug: {_where(info, cid, stage, steps)} gave {kind} in {key}; "
                "lower lr, or check the data and the algorithm's step"
            )


def local_draws(
    algorithm: Algorithm,
    downlink: Tree,
    client_state: Tree,
    ctx: ClientContext,
    plan: list[np.ndarray],
    device: torch.device,
) -> Tree | None:
    """The random numbers of a client's local steps (``Algorithm.local_draws``) on ``device``,
    one row per step of ``plan``; None for an algorithm that draws none."""
    if algorithm.local_draws is None:
        return None
    draws = algorithm.local_draws(downlink, client_state, ctx, [len(b) for b in plan])
    return tree_map(lambda v: v.to(device), draws)


def client_state(algorithm: Algorithm, stored: Tree | None, downlink: Tree) -> Tree:
    """The state a client trains from: the one it kept, or ``client_init`` at its first
    participation (the rule of every engine and of Flower's ClientApp)."""
    return stored if stored else algorithm.client_init(downlink["x"])


def keeps_old_state(new_state: Tree) -> bool:
    """Whether a client keeps its old state after a round: when the algorithm returns an
    empty new one (the rule of every engine and of Flower's ClientApp)."""
    return not new_state


def local_model(final: Tree) -> Tree | None:
    """The trained local model (``params``, ``buffers``) of a final step state, if it has one."""
    if "params" not in final:
        return None
    return {"params": final["params"], "buffers": final.get("buffers", {})}


__all__ = [
    "CPU",
    "ClientUpdate",
    "Clients",
    "LocalSpec",
    "batch_plan",
    "client_state",
    "diverged",
    "keeps_old_state",
    "local_draws",
    "local_model",
    "train_client",
]
