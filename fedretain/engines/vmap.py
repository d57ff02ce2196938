"""The vectorised engine: the round's clients train together under ``torch.func.vmap``.

Clients are processed in chunks; within a chunk their states are stacked on a leading axis,
their data padded to the largest client (padding has sample weight 0) and their mini-batch
plans padded to the longest plan (padded steps are masked: ``where(live, new, old)``). Each
local step is one vmapped call for the whole chunk, so per-client Python work disappears and
the matrix products get bigger. The numbers equal the sequential engine's (same seeded
mini-batches) up to floating-point summation order.

With ``compile=True`` (``vmap_compile=true``) the vmapped step goes through ``torch.compile``
(TorchInductor): elementwise work around the matrix products is fused and Python overhead
leaves the loop. It costs seconds of compilation in the first round (a C++ compiler is
needed on CPU) and pays off over longer runs; numbers agree with the eager engine to
floating-point rounding.

An algorithm with ``vectorisable=False``, or a model with BatchNorm (its running statistics
update in place, which vmap cannot stack), runs on the sequential engine instead, with a
one-line notice.
"""

from __future__ import annotations

import sys
from dataclasses import replace

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import vmap
from torch.nn.utils.rnn import pad_sequence

from fedretain.core.algorithm import Algorithm, ClientContext, RoundInfo
from fedretain.core.tree import Tree, finite_rows, tree_map, tree_stack
from fedretain.engines.base import EMPTY_ROUND, diverged
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


class VmapEngine(SequentialEngine):
    """Trains a chunk of clients per vmapped call; falls back to sequential when it must."""

    name = "vmap"

    def __init__(self, *args, chunk: int = 0, compile: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.chunk = chunk
        self.compile = compile
        self.fallback = vectorisable(self.algorithm, self.task.model)
        if self.fallback:
            print(f"note: engine=vmap runs sequentially: {self.fallback}", file=sys.stderr)
        self.vtask = replace(self.task, functional=True)

    def chunk_size(self, num: int) -> int:
        """Clients per vmapped call: ``chunk`` if set, else by a memory budget (~1 GiB)."""
        if self.chunk > 0:
            return min(self.chunk, num)
        per_client = 8 * sum(p.numel() * p.element_size() for p in self.task.model.parameters())
        return int(max(1, min(num, (1 << 30) // max(per_client, 1))))

    def _plans(self, cids: list[int], info: RoundInfo) -> tuple[Tensor, Tensor, Tensor, list[bool]]:
        """Padded batch indices (K, T, B), sample weights (K, T, B), live steps (K, T), and
        for each step whether every client takes it (known on the host, so no device sync)."""
        plans = [self.plan(c, info) for c in cids]
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
        dev = self.device
        return (
            torch.from_numpy(idx).to(dev),
            torch.from_numpy(wts).to(dev),
            torch.from_numpy(live).to(dev),
            live.all(axis=0).tolist(),
        )

    def _data(self, cids: list[int]) -> Tree:
        """The chunk's client data padded to the largest client: x, y, label_mask stacked."""
        data = [self.client_data(c) for c in cids]
        out = {k: pad_sequence([d[k] for d in data], batch_first=True) for k in ("x", "y", "w")}
        out["label_mask"] = torch.stack([d["label_mask"] for d in data])
        return out  # padding is zero, so its sample weight w is 0

    def train_chunk(
        self, cids: list[int], downlink: Tree, info: RoundInfo
    ) -> tuple[Tree, Tensor, Tree, Tree]:
        """Local training of a chunk: stacked uplinks, mean losses (K,), stacked client states
        and the stacked final step states."""
        algo, task = self.algorithm, self.vtask
        data = self._data(cids)
        idx, wts, live, all_live = self._plans(cids, info)
        client_states = tree_stack([self.client_state(c, downlink) for c in cids])
        sizes = torch.tensor([len(self.parts[c]) for c in cids], device=self.device)

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
        loss_sum = torch.zeros(len(cids), device=self.device)
        for t in range(idx.shape[1]):
            if all_live[t]:  # every client of the chunk takes this step: no masking needed
                state, loss = vstep(state, sizes, data, idx[:, t], wts[:, t])
            else:
                state, loss = vmasked(state, sizes, data, idx[:, t], wts[:, t], live[:, t])
            loss_sum = loss_sum + loss
        uplinks, new_states = vmap(final, randomness="different")(state, client_states, sizes, data)
        return uplinks, loss_sum / live.sum(dim=1), new_states, state

    def run_round(
        self,
        server_state: Tree,
        rnd: int,
        lr: float,
        per_round: int = 0,
        clients: np.ndarray | None = None,
    ) -> tuple[Tree, dict[str, float]]:
        if self.fallback:
            return super().run_round(server_state, rnd, lr, per_round, clients)
        info = self.start_round(rnd, lr, per_round, clients)
        if info is None:
            return server_state, dict(EMPTY_ROUND)
        algo = self.algorithm
        downlink = algo.broadcast(server_state, info)
        self.check_payload(downlink, algo.downlink_keys, "downlink")
        size = self.chunk_size(len(info.clients))
        parts, losses, kept = [], [], []
        for start in range(0, len(info.clients), size):
            cids = list(info.clients[start : start + size])
            uplinks, loss, states, final = self.train_chunk(cids, downlink, info)
            self.check_payload(uplinks, algo.uplink_keys, "uplink")
            # one finiteness check and one host transfer per chunk, not per client
            finite = finite_rows({"loss": loss, **uplinks}, len(cids)).tolist()
            loss_values = loss.tolist()
            model = {n: final[n] for n in ("params", "buffers") if n in final}
            rows = []
            for k, cid in enumerate(cids):
                self.ledger.record(cid, "down", downlink)
                if not finite[k]:
                    if self.on_divergence != "skip":
                        raise diverged(rnd, f"the update of client {cid}")
                    continue
                self.ledger.record(cid, "up", tree_map(lambda v, k=k: v[k], uplinks))
                self.keep_client_state(cid, tree_map(lambda v, k=k: v[k], states))
                if self.keep_local_models:
                    self.remember_local_model(cid, tree_map(lambda v, k=k: v[k], model))
                rows.append(k)
                kept.append(cid)
                losses.append(loss_values[k])
            if len(rows) < len(cids):
                keep = torch.tensor(rows, dtype=torch.int64, device=self.device)
                uplinks = tree_map(lambda v, keep=keep: v.index_select(0, keep), uplinks)
            parts.append(uplinks)
        stacked = parts[0] if len(parts) == 1 else tree_map(lambda *v: torch.cat(v), *parts)
        return self.finish_round(server_state, info, stacked, kept, losses)
