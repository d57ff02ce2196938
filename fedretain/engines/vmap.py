"""The vectorised engine: the round's clients train together under ``torch.func.vmap``.

Clients are processed in chunks; within a chunk their states are stacked on a leading axis,
their data padded to the largest client (padding has sample weight 0) and their mini-batch
plans padded to the longest plan (padded steps are masked: ``where(live, new, old)``). Each
local step is one vmapped call for the whole chunk, so per-client Python work disappears and
the matrix products get bigger. The numbers equal the sequential engine's (same seeded
mini-batches) up to floating-point summation order.

With ``compile=True`` (``engine.compile=true``) the vmapped step goes through ``torch.compile``
(TorchInductor): elementwise work around the matrix products is fused and Python overhead
leaves the loop. It costs seconds of compilation in the first round (a C++ compiler is
needed on CPU) and pays off over longer runs; numbers agree with the eager engine to
floating-point rounding.

An algorithm with ``vectorisable=False``, or a model with BatchNorm (its running statistics
update in place, which vmap cannot stack), runs on the sequential engine instead, with a
one-line notice (:func:`vmap_engine`).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import vmap
from torch.nn.utils.rnn import pad_sequence

from fedretain.core.algorithm import Algorithm, ClientContext, RoundInfo
from fedretain.core.task import Task
from fedretain.core.tree import Tree, tree_stack
from fedretain.engines.round import Clients, OpenRound, Rounds, Trained, local_model
from fedretain.engines.sequential import SequentialEngine


def _keep_live(alive: Tensor, new: Tree, old: Tree) -> Tree:
    """``where(alive, new, old)`` leafwise, skipping what the step passed through unchanged.

    A local step returns ``{**state, ...}``: the downlink and the client state are the very same
    objects, and selecting them would materialise a per-client copy of the global model at
    every step.
    """
    out: Tree = {}
    for key, value in new.items():
        before = old[key]
        if value is before:
            out[key] = value
        elif isinstance(value, dict):
            out[key] = _keep_live(alive, value, before)
        else:
            out[key] = torch.where(alive, value, before)
    return out


def vectorisable(algorithm: Algorithm, model: nn.Module) -> str | None:
    """Why this pair cannot run under vmap, or None when it can."""
    if not algorithm.vectorisable:
        return f"algorithm {algorithm.name} is not vectorisable"
    if any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return "BatchNorm updates its running statistics in place, which vmap cannot stack"
    return None


class VmapEngine:
    """Trains a chunk of clients per vmapped call."""

    name = "vmap"
    choice = ""  # engine=auto: why this engine was chosen
    store = None  # the run's store keeps the client states
    remote = False

    def __init__(self, task: Task, chunk: int = 0, compile: bool = False) -> None:
        self.chunk = chunk
        self.compile = compile
        self.vtask = replace(task, functional=True)

    def chunk_size(self, num: int) -> int:
        """Clients per vmapped call: ``chunk`` if set, else by a memory budget (~1 GiB)."""
        if self.chunk > 0:
            return min(self.chunk, num)
        model = self.vtask.model
        per_client = 8 * sum(p.numel() * p.element_size() for p in model.parameters())
        return int(max(1, min(num, (1 << 30) // max(per_client, 1))))

    def train(self, rounds: Rounds, rnd: OpenRound) -> Iterator[Trained]:
        size = self.chunk_size(len(rnd.info.clients))
        for start in range(0, len(rnd.info.clients), size):
            cids = list(rnd.info.clients[start : start + size])
            yield self.train_chunk(rounds, rnd, cids)

    def close(self) -> None:
        """Nothing to release."""

    def _plans(
        self, clients: Clients, algo: Algorithm, cids: list[int], info: RoundInfo
    ) -> tuple[Tensor, Tensor, Tensor, list[bool]]:
        """Padded batch indices (K, T, B), sample weights (K, T, B), live steps (K, T), and
        for each step whether every client takes it (known on the host, so no device sync)."""
        plans = [clients.plan(c, info, algo) for c in cids]
        steps = max(len(p) for p in plans)
        width = max(len(b) for p in plans for b in p)
        idx = np.zeros((len(cids), steps, width), dtype=np.int64)
        wts = np.zeros((len(cids), steps, width), dtype=np.float32)
        live = np.zeros((len(cids), steps), dtype=bool)
        for k, plan in enumerate(plans):
            for t, b in enumerate(plan):
                idx[k, t, : len(b)] = b
                wts[k, t, : len(b)] = 1.0
                live[k, t] = True
        dev = clients.device
        return (
            torch.from_numpy(idx).to(dev),
            torch.from_numpy(wts).to(dev),
            torch.from_numpy(live).to(dev),
            live.all(axis=0).tolist(),
        )

    @staticmethod
    def _data(clients: Clients, cids: list[int]) -> Tree:
        """The chunk's client data padded to the largest client: x, y, label_mask stacked."""
        data = [clients.data(c) for c in cids]
        out = {k: pad_sequence([d[k] for d in data], batch_first=True) for k in ("x", "y", "w")}
        out["label_mask"] = torch.stack([d["label_mask"] for d in data])
        return out  # padding is zero, so its sample weight w is 0

    def train_chunk(self, rounds: Rounds, rnd: OpenRound, cids: list[int]) -> Trained:
        """Local training of a chunk: stacked uplinks, mean losses (K,), stacked client states
        and, when the round keeps them, the stacked local models."""
        algo, task, clients, info = rounds.algorithm, self.vtask, rounds.clients, rnd.info
        downlink = rnd.downlink
        data = self._data(clients, cids)
        idx, wts, live, all_live = self._plans(clients, algo, cids, info)
        client_states = tree_stack([rounds.client_state(c, downlink) for c in cids])
        sizes = torch.tensor([clients.size(c) for c in cids], device=clients.device)

        def ctx_of(num: Tensor, d: Tree) -> ClientContext:
            return ClientContext(task=task, info=info, client_id=-1, num_samples=num, data=d)

        def init(cs: Tree, num: Tensor, d: Tree) -> Tree:
            return algo.local_init(downlink, cs, ctx_of(num, d))

        def step(state: Tree, num: Tensor, d: Tree, i: Tensor, w: Tensor):
            batch = {
                "x": d["x"][i],
                "y": d["y"][i],
                "w": w,
                "label_mask": d["label_mask"],
                "idx": i,
            }
            new, metrics = algo.local_step(state, batch, ctx_of(num, d))
            return new, metrics["loss"]

        def masked_step(state: Tree, num: Tensor, d: Tree, i: Tensor, w: Tensor, alive: Tensor):
            new, loss = step(state, num, d, i, w)
            return _keep_live(alive, new, state), torch.where(alive, loss, 0.0)

        def final(state: Tree, cs: Tree, num: Tensor, d: Tree) -> tuple[Tree, Tree]:
            return algo.local_final(state, cs, ctx_of(num, d))

        vstep = vmap(step, randomness="different")
        vmasked = vmap(masked_step, randomness="different")
        if self.compile:  # one graph per step kind; recompiled only when shapes change
            vstep = torch.compile(vstep, dynamic=False)
            vmasked = torch.compile(vmasked, dynamic=False)
        state = vmap(init, randomness="different")(client_states, sizes, data)
        loss_sum = torch.zeros(len(cids), device=clients.device)
        for t in range(idx.shape[1]):
            if all_live[t]:  # every client of the chunk takes this step: no masking needed
                state, loss = vstep(state, sizes, data, idx[:, t], wts[:, t])
            else:
                state, loss = vmasked(state, sizes, data, idx[:, t], wts[:, t], live[:, t])
            loss_sum = loss_sum + loss
        uplinks, new_states = vmap(final, randomness="different")(state, client_states, sizes, data)
        return Trained(
            clients=cids,
            uplinks=uplinks,
            losses=loss_sum / live.sum(dim=1),
            states=new_states,
            models=local_model(state) if rnd.keep_models else None,
        )


def vmap_engine(fed: Any, chunk: int = 0, compile: bool = False) -> VmapEngine | SequentialEngine:
    """``engine=vmap``: the vectorised engine, or the sequential one (with a one-line notice)
    when the algorithm or the model cannot be vectorised."""
    if chunk < 0:
        raise ValueError(f"chunk must be >= 0 (0: sized to memory), got {chunk}")
    why = vectorisable(fed.algorithm, fed.task.model)
    if why:
        print(f"note: engine=vmap runs sequentially: {why}", file=sys.stderr)
        return SequentialEngine()
    return VmapEngine(fed.task, chunk, compile)
