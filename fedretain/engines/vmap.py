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
floating-point rounding. The compiled step functions are built once per run (the round's
``info`` is an argument, not a closure), every step's plan slice and the client states have
row-major strides, and each chunk's data is padded to the federation's largest client: torch
keeps at most 8 graphs per function and, past that, silently runs it eagerly, which ragged
clients and rounds of other step counts used to reach within a round or two.

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
from fedretain.core.tree import Tree, tree_map, tree_stack
from fedretain.engines.round import Clients, Trained, Work, local_model
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
        why = f": {algorithm.sequential_because}" if algorithm.sequential_because else ""
        return f"algorithm {algorithm.name} is not vectorisable{why}"
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
        self._largest: tuple[Clients, int] | None = None  # (clients, their largest size)
        self._step_fns: tuple[Algorithm, Any, Any] | None = None  # see _steps

    def chunk_size(self, num: int) -> int:
        """Clients per vmapped call: ``chunk`` if set, else by a memory budget (~1 GiB)."""
        if self.chunk > 0:
            return min(self.chunk, num)
        model = self.vtask.model
        per_client = 8 * sum(p.numel() * p.element_size() for p in model.parameters())
        return int(max(1, min(num, (1 << 30) // max(per_client, 1))))

    def train(self, work: Work) -> Iterator[Trained]:
        size = self.chunk_size(len(work.info.clients))
        for start in range(0, len(work.info.clients), size):
            cids = list(work.info.clients[start : start + size])
            yield self.train_chunk(work, cids)

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
    def _data(clients: Clients, cids: list[int], length: int = 0) -> Tree:
        """The chunk's client data padded to the largest client (or to ``length`` samples,
        when longer): x, y, label_mask stacked."""
        data = [clients.data(c) for c in cids]
        out = {}
        for k in ("x", "y", "w"):
            t = pad_sequence([d[k] for d in data], batch_first=True)
            if t.shape[1] < length:
                t = torch.cat([t, t.new_zeros((t.shape[0], length - t.shape[1], *t.shape[2:]))], 1)
            out[k] = t
        out["label_mask"] = torch.stack([d["label_mask"] for d in data])
        return out  # padding is zero, so its sample weight w is 0

    def _length(self, clients: Clients) -> int:
        """Compiled: every chunk's data padded to the federation's largest client, so that
        chunks of clients of other sizes reuse the compiled graphs instead of recompiling
        (past torch's limit of 8 the step would silently fall back to eager)."""
        if not self.compile:
            return 0
        if self._largest is None or self._largest[0] is not clients:
            self._largest = (clients, max(clients.size(c) for c in range(len(clients))))
        return self._largest[1]

    def _steps(self, algo: Algorithm) -> tuple[Any, Any]:
        """The vmapped local step, plain and masked: built once per algorithm (so that compiled
        graphs are reused across chunks and rounds instead of recompiled for each new closure),
        the round's ``info`` an argument."""
        if self._step_fns is not None and self._step_fns[0] is algo:
            return self._step_fns[1], self._step_fns[2]
        task = self.vtask

        def step(state: Tree, num: Tensor, d: Tree, i: Tensor, w: Tensor, info: RoundInfo):
            batch = {
                "x": d["x"][i],
                "y": d["y"][i],
                "w": w,
                "label_mask": d["label_mask"],
                "idx": i,
            }
            ctx = ClientContext(task=task, info=info, client_id=-1, num_samples=num, data=d)
            new, metrics = algo.local_step(state, batch, ctx)
            return new, metrics["loss"]

        def masked_step(
            state: Tree, num: Tensor, d: Tree, i: Tensor, w: Tensor, alive: Tensor, info: RoundInfo
        ):
            new, loss = step(state, num, d, i, w, info)
            return _keep_live(alive, new, state), torch.where(alive, loss, 0.0)

        vstep = vmap(step, in_dims=(0, 0, 0, 0, 0, None), randomness="different")
        vmasked = vmap(masked_step, in_dims=(0, 0, 0, 0, 0, 0, None), randomness="different")
        if self.compile:
            eager_step, eager_masked = vstep, vmasked

            # one code object per step kind (torch caches graphs per code object, at most 8)
            def plain(*args: Any) -> Any:
                return eager_step(*args)

            def masked(*args: Any) -> Any:
                return eager_masked(*args)

            vstep = torch.compile(plain, dynamic=False)
            vmasked = torch.compile(masked, dynamic=False)
        self._step_fns = (algo, vstep, vmasked)
        return vstep, vmasked

    def train_chunk(self, work: Work, cids: list[int]) -> Trained:
        """Local training of a chunk: stacked uplinks, mean losses (K,), stacked client states
        and, when the round keeps them, the stacked local models."""
        algo, task, clients, info = work.algorithm, self.vtask, work.clients, work.info
        downlink = work.downlink
        data = self._data(clients, cids, self._length(clients))
        idx, wts, live, all_live = self._plans(clients, algo, cids, info)
        client_states = tree_stack([work.state(c) for c in cids])
        sizes = torch.tensor([clients.size(c) for c in cids], device=clients.device)

        def ctx_of(num: Tensor, d: Tree) -> ClientContext:
            return ClientContext(task=task, info=info, client_id=-1, num_samples=num, data=d)

        def init(cs: Tree, num: Tensor, d: Tree) -> Tree:
            return algo.local_init(downlink, cs, ctx_of(num, d))

        def final(state: Tree, cs: Tree, num: Tensor, d: Tree) -> tuple[Tree, Tree]:
            return algo.local_final(state, cs, ctx_of(num, d))

        vstep, vmasked = self._steps(algo)
        state = vmap(init, randomness="different")(client_states, sizes, data)
        if self.compile:  # the same strides every step (init's may broadcast), no recompiling
            state = tree_map(lambda x: _dense(x) if isinstance(x, Tensor) else x, state)
        # step-major, so that each step's slice has the same strides whatever the step count
        idx, wts, live = (_dense(a.transpose(0, 1)) for a in (idx, wts, live))
        loss_sum = torch.zeros(len(cids), device=clients.device)
        for t in range(idx.shape[0]):
            if all_live[t]:  # every client of the chunk takes this step: no masking needed
                state, loss = vstep(state, sizes, data, idx[t], wts[t], info)
            else:
                state, loss = vmasked(state, sizes, data, idx[t], wts[t], live[t], info)
            loss_sum = loss_sum + loss
        uplinks, new_states = vmap(final, randomness="different")(state, client_states, sizes, data)
        return Trained(
            clients=cids,
            uplinks=uplinks,
            losses=loss_sum / live.sum(dim=0),
            states=new_states,
            models=local_model(state) if work.keep_models else None,
        )


def _dense(x: Tensor) -> Tensor:
    """``x`` copied with row-major strides, size-1 dimensions included (``contiguous()`` keeps
    any stride there, and a compiled graph is specialised on strides)."""
    return x.clone(memory_format=torch.contiguous_format)


def vmap_engine(fed: Any, chunk: int = 0, compile: bool = False) -> VmapEngine | SequentialEngine:
    """``engine=vmap``: the vectorised engine, or the sequential one (with a one-line notice)
    when the algorithm or the model cannot be vectorised.

    :param chunk: clients trained together per vectorised call (0: sized to memory)
    :param compile: compile the vectorised step with torch.compile: seconds in the first round,
        faster over long runs
    """
    if chunk < 0:
        raise ValueError(f"chunk must be >= 0 (0: sized to memory), got {chunk}")
    why = vectorisable(fed.algorithm, fed.task.model)
    if why:
        print(f"note: engine=vmap runs sequentially: {why}", file=sys.stderr)
        return SequentialEngine()
    return VmapEngine(fed.task, chunk, compile)
