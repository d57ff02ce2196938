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
``engine.compile_mode`` is torch.compile's mode (under ``engine=vmap`` a mode other than
``default`` compiles whatever ``engine.compile`` says; under ``auto`` it applies where the rule
compiles): ``reduce-overhead`` records each compiled step as a CUDA graph on CUDA and replays
it, one launch instead of one per kernel (on a CPU torch skips the graphs: as ``default``); the
last step's outputs are copied out of the graphs' memory pool before the next chunk replays
over it.

An algorithm whose hints say ``vectorisable=False``, or a model with BatchNorm (its running
statistics update in place, which vmap cannot stack), runs on the sequential engine instead, with a
one-line notice (:func:`vmap_engine`).

**Several devices** (``engine.devices``, :func:`parse_devices`): ``all`` (every visible CUDA
GPU) or a list such as ``["cuda:0", "cuda:1"]`` splits each round's clients over the devices;
unset, the round runs on the run's device alone, exactly as without the option. The round's
clients are cut into chunks as on one device, sized for one device's share (``engine.chunk``,
at most the share; else by memory), and the chunks go to the devices in turn: chunk ``i`` to
device ``i mod D``, so that a *wave* of ``D`` consecutive chunks, one per device, is a
contiguous block of the round's order. For each wave the engine (1) copies each chunk's client
states, data, mini-batch plans and the round's downlink (once per device and round) to its
device, (2) issues every device's local steps, and only then (3) moves the results (uplinks,
losses, client states, local models) back to the run's device and yields them in the round's
order. CUDA kernels are asynchronous, so the devices compute at the same time while the host
issues the next device's steps and, in (3), waits for the first; copies onto a CUDA device are
``non_blocking`` (ordered on the streams; host memory is only read), copies to the CPU block,
as the host reads them at once. A device's results are kept until its wave is gathered, so at
most one chunk per device is in flight. Each client's numbers are those of the one-device run
up to summation order; on a CPU with a fixed ``engine.chunk`` (at most the share) they are the
very same, chunks and order included. CUDA devices need ``device=cuda`` for the run (where the
results are gathered, and whose deterministic settings apply to every GPU); ``cpu`` entries are
allowed anywhere (tests). With ``compile=True`` each device compiles its own graphs.

An algorithm whose local steps must not be padded (``hints.paddable`` False: the generative-replay
methods, whose generators' BatchNorm normalises with the batch's statistics) trains each group
of a chunk's clients with the same plan shape (step count and every step's width) in its own
vmapped calls, unpadded and unmasked; the groups' results are merged back in the chunk's order.
A model's BatchNorm is refused unless it sits in a part its forward never runs (the model's
``outside_forward``: an ACGAN's generator), which only such a step runs, keeping its statistics
per client.

Random numbers: a vectorisable algorithm whose local step needs its own (the generative-replay
methods' labels and noise) draws them before the round's steps on the host
(``Algorithm.local_draws``, client by client as the sequential engine does) and gets them
stacked, step by step, as ``batch["draws"]``; DP-SGD, whose noise has the model's size per step,
runs sequentially. A model with dropout draws in its step, from the
default generator of the device the chunk runs on (``randomness="different"``: one mask per
client). Over CPU devices that is the one generator, drawn in the one-device run's order: the
same masks. Over several CUDA devices each GPU draws from its own generator (all seeded alike
by the run's seed), so the masks, and with them the numbers, differ from the one-device run's,
reproducibly for the same devices and chunk size. The one-device engine's masks depend on the
chunk size in the same way (a chunk's clients draw together, step by step).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import vmap
from torch.nn.utils.rnn import pad_sequence

from fedretain.core.algorithm import Algorithm, ClientContext, RoundInfo
from fedretain.core.client import Clients, local_model
from fedretain.core.task import Task
from fedretain.core.tree import Tree, tree_map, tree_stack
from fedretain.engines.round import Trained, Work
from fedretain.engines.sequential import SequentialEngine
from fedretain.errors import ConfigError

CPU_BUDGET = 1 << 30  # bytes
# torch.compile's modes (engine.compile_mode); the last two replay the step as CUDA graphs
COMPILE_MODES = ("default", "max-autotune-no-cudagraphs", "reduce-overhead", "max-autotune")
CUDA_GRAPH_MODES = COMPILE_MODES[2:]


def memory_budget(device: torch.device, share: float = 1.0) -> int:
    """Bytes a chunk of clients may take: 1 GiB on a CPU; on a GPU an eighth of its memory (10
    GB on an 80 GB H100: a ResNet-18 of 11 M parameters trains 27 clients per call there, where
    1 GiB allowed 3), times ``share``, the part of the GPU the run holds (the config's
    ``gpu_share``: four runs on one GPU plan for a quarter each). The GPU's size, not what is
    free at the time, so that the same config gives the same chunks, and numbers, every run."""
    if device.type != "cuda":
        return CPU_BUDGET
    return int(int(torch.cuda.get_device_properties(device).total_memory) // 8 * share)


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
    hints = algorithm.hints
    if not hints.vectorisable:
        why = f": {hints.sequential_because}" if hints.sequential_because else ""
        return f"algorithm {algorithm.name} is not vectorisable{why}"
    if algorithm.local_draws is not None and hints.paddable:
        return f"algorithm {algorithm.name} draws random numbers per step but allows padding"
    # modules the model's forward never runs (an ACGAN's generator): only a local step that
    # calls them itself does, keeping their statistics per client (generative replay)
    outside = {
        id(m)
        for name in getattr(model, "outside_forward", ())
        for m in model.get_submodule(name).modules()
    }
    if any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) and id(m) not in outside
        for m in model.modules()
    ):
        return "BatchNorm updates its running statistics in place, which vmap cannot stack"
    return None


class VmapEngine:
    """Trains a chunk of clients per vmapped call."""

    name = "vmap"
    choice = ""  # engine=auto: why this engine was chosen
    store = None  # the run's store keeps the client states
    remote = False

    def __init__(
        self,
        task: Task,
        chunk: int = 0,
        compile: bool = False,
        devices: Sequence[torch.device] | None = None,
        compile_mode: str = "default",
        share: float = 1.0,
    ) -> None:
        self.chunk = chunk
        self.share = share  # of the GPU: memory_budget
        self.compile = compile
        self.compile_mode = compile_mode
        # several devices: the round's clients split over them (module docstring); None: the
        # run's device alone
        self.devices = list(devices) if devices else None
        self.vtask = replace(task, functional=True)
        self._largest: tuple[Clients, int] | None = None  # (clients, their largest size)
        self._step_fns: tuple[Algorithm, Any, Any] | None = None  # see _steps

    def chunk_size(self, num: int) -> int:
        """Clients per vmapped call: ``chunk`` if set, else by a memory budget
        (:func:`memory_budget`) at 8 copies of the model per client."""
        if self.chunk > 0:
            return min(self.chunk, num)
        params = list(self.vtask.model.parameters())
        per_client = 8 * sum(p.numel() * p.element_size() for p in params)
        device = self.devices[0] if self.devices else params[0].device
        budget = memory_budget(device, self.share)
        return int(max(1, min(num, budget // max(per_client, 1))))

    def train(self, work: Work) -> Iterator[Trained]:
        if self.devices is not None:
            yield from self._train_split(work, self.devices)
            return
        size = self.chunk_size(len(work.info.clients))
        for start in range(0, len(work.info.clients), size):
            cids = list(work.info.clients[start : start + size])
            yield self.train_chunk(work, cids)

    def waves(self, clients: Sequence[int]) -> list[list[tuple[torch.device, list[int]]]]:
        """The round's ``clients`` over :attr:`devices`: chunks sized for one device's share,
        chunk ``i`` on device ``i mod D``; each wave (one chunk per device) a contiguous block of
        the round's order."""
        devices = self.devices or []
        clients = list(clients)
        size = self.chunk_size(-(-len(clients) // max(len(devices), 1)))
        chunks = [clients[s : s + size] for s in range(0, len(clients), size)]
        return [
            list(zip(devices, chunks[first : first + len(devices)], strict=False))
            for first in range(0, len(chunks), len(devices))
        ]

    def _train_split(self, work: Work, devices: list[torch.device]) -> Iterator[Trained]:
        """The round over several devices, one wave at a time: every device's chunk copied
        over, then every device's steps issued, then the results gathered on the run's device
        in the round's order (see the module docstring)."""
        home = work.clients.device
        downlinks: dict[torch.device, Tree] = {}  # the round's downlink on each device
        for wave in self.waves(work.info.clients):
            chunks = []
            for device, cids in wave:
                with _current(device):
                    if device not in downlinks:
                        downlinks[device] = _moved(work.downlink, device)
                    chunks.append(self._inputs(work, cids, device, downlinks[device]))
            issued = []
            for chunk in chunks:  # asynchronous on CUDA: the devices work at the same time
                with _current(chunk.device):
                    issued.append(self._compute(work, chunk))
            for trained in issued:
                yield _gathered(trained, home)

    def close(self) -> None:
        """Nothing to release."""

    @staticmethod
    def _plans(
        clients: Clients, plans: list[list[np.ndarray]]
    ) -> tuple[Tensor, Tensor, Tensor, list[bool]]:
        """The chunk's mini-batch ``plans`` as padded batch indices (K, T, B), sample weights
        (K, T, B), live steps (K, T), and for each step whether every client takes it (known on
        the host, so no device sync); on the clients' device."""
        steps = max(len(p) for p in plans)
        width = max(len(b) for p in plans for b in p)
        idx = np.zeros((len(plans), steps, width), dtype=np.int64)
        wts = np.zeros((len(plans), steps, width), dtype=np.float32)
        live = np.zeros((len(plans), steps), dtype=bool)
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

        def step(
            state: Tree, num: Tensor, d: Tree, i: Tensor, w: Tensor, dr: Tree, info: RoundInfo
        ):
            batch = {
                "x": d["x"][i],
                "y": d["y"][i],
                "w": w,
                "label_mask": d["label_mask"],
                "idx": i,
            }
            if dr:
                batch["draws"] = dr
            ctx = ClientContext(task=task, info=info, client_id=-1, num_samples=num, data=d)
            new, metrics = algo.local_step(state, batch, ctx)
            return new, metrics["loss"]

        def masked_step(
            state: Tree,
            num: Tensor,
            d: Tree,
            i: Tensor,
            w: Tensor,
            dr: Tree,
            alive: Tensor,
            info: RoundInfo,
        ):
            new, loss = step(state, num, d, i, w, dr, info)
            return _keep_live(alive, new, state), torch.where(alive, loss, 0.0)

        vstep = vmap(step, in_dims=(0, 0, 0, 0, 0, 0, None), randomness="different")
        vmasked = vmap(masked_step, in_dims=(0, 0, 0, 0, 0, 0, 0, None), randomness="different")
        if self.compile:
            eager_step, eager_masked = vstep, vmasked

            # one code object per step kind (torch caches graphs per code object, at most 8)
            def plain(*args: Any) -> Any:
                return eager_step(*args)

            def masked(*args: Any) -> Any:
                return eager_masked(*args)

            vstep = torch.compile(plain, dynamic=False, mode=self.compile_mode)
            vmasked = torch.compile(masked, dynamic=False, mode=self.compile_mode)
        self._step_fns = (algo, vstep, vmasked)
        return vstep, vmasked

    def train_chunk(self, work: Work, cids: list[int]) -> Trained:
        """Local training of a chunk: stacked uplinks, mean losses (K,), stacked client states
        and, when the round keeps them, the stacked local models."""
        return self._compute(work, self._inputs(work, cids, work.clients.device, work.downlink))

    def _inputs(self, work: Work, cids: list[int], device: torch.device, downlink: Tree) -> _Chunk:
        """A chunk's inputs on ``device``: client data, mini-batch plans, stacked client states
        and their sizes (``downlink``: the round's, already on ``device``)."""
        clients, algo = work.clients, work.algorithm
        here = clients if device == clients.device else replace(clients, device=device)
        data = self._data(here, cids, self._length(clients))
        plans = [clients.plan(c, work.info, algo) for c in cids]
        idx, wts, live, all_live = self._plans(here, plans)
        states = [work.state(c) for c in cids]
        client_states = _moved(tree_stack(states), device)
        sizes = torch.tensor([clients.size(c) for c in cids], device=device)
        widths = [tuple(len(b) for b in plan) for plan in plans]
        draws = _moved(_stacked_draws(work, cids, states, widths), device)
        return _Chunk(
            cids,
            device,
            downlink,
            data,
            idx,
            wts,
            live,
            all_live,
            client_states,
            sizes,
            widths,
            draws,
        )

    def _compute(self, work: Work, chunk: _Chunk) -> Trained:
        """Local training of a chunk on its device (:meth:`train_chunk`). An algorithm whose
        steps must not be padded (``hints.paddable`` False) trains each group of clients with
        the same plan shape together, the results merged back in the chunk's order."""
        if work.algorithm.hints.paddable:
            return self._compute_group(work, chunk)
        groups: dict[tuple[int, ...], list[int]] = {}
        for k, shape in enumerate(chunk.widths):
            groups.setdefault(shape, []).append(k)
        if len(groups) == 1:
            return self._compute_group(work, chunk)
        parts = [(rows, self._compute_group(work, chunk.rows(rows))) for rows in groups.values()]
        return _merged(parts, chunk.cids)

    def _compute_group(self, work: Work, chunk: _Chunk) -> Trained:
        """Local training of a chunk, or of a group of it with one plan shape."""
        algo, task, info = work.algorithm, self.vtask, work.info
        cids, downlink, data, sizes = chunk.cids, chunk.downlink, chunk.data, chunk.sizes
        client_states, all_live = chunk.client_states, chunk.all_live

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
        idx, wts, live = (_dense(a.transpose(0, 1)) for a in (chunk.idx, chunk.wts, chunk.live))
        loss_sum = torch.zeros(len(cids), device=chunk.device)
        # unpadded (hints.paddable False): the group's common widths, step by step
        exact = None if algo.hints.paddable else chunk.widths[0]
        for t in range(idx.shape[0] if exact is None else len(exact)):
            i, w, dr = idx[t], wts[t], {}
            if exact is not None:  # the step's own width, and its draws
                n = exact[t]
                i, w = i[:, :n], w[:, :n]
                dr = tree_map(lambda v, t=t, n=n: _dense(v[:, t, :n]), chunk.draws)
            if all_live[t]:  # every client of the chunk takes this step: no masking needed
                state, loss = vstep(state, sizes, data, i, w, dr, info)
            else:
                state, loss = vmasked(state, sizes, data, i, w, dr, live[t], info)
            loss_sum = loss_sum + loss
        if self.compile and self.compile_mode in CUDA_GRAPH_MODES and chunk.device.type == "cuda":
            # the last step's outputs live in the CUDA graphs' memory pool, which the next
            # chunk's replays overwrite: what the round keeps (client states, local models) is
            # copied out
            state = tree_map(lambda x: x.clone() if isinstance(x, Tensor) else x, state)
        uplinks, new_states = vmap(final, randomness="different")(state, client_states, sizes, data)
        return Trained(
            clients=cids,
            uplinks=uplinks,
            losses=loss_sum / live.sum(dim=0),
            states=new_states,
            models=local_model(state) if work.keep_models else None,
        )


@dataclass
class _Chunk:
    """A chunk's inputs on its device (:meth:`VmapEngine._inputs`)."""

    cids: list[int]
    device: torch.device
    downlink: Tree
    data: Tree
    idx: Tensor  # (K, T, B) batch indices
    wts: Tensor  # (K, T, B) sample weights
    live: Tensor  # (K, T) live steps
    all_live: list[bool]  # per step: whether every client takes it
    client_states: Tree
    sizes: Tensor
    widths: list[tuple[int, ...]]  # per client: the samples of each of its steps
    draws: Tree  # (K, T, W, ...) the local steps' random numbers ({}: none)

    def rows(self, rows: list[int]) -> _Chunk:
        """The chunk's clients ``rows`` (a group with one plan shape: no padded steps)."""
        index = torch.tensor(rows, device=self.device)
        steps = len(self.widths[rows[0]])

        def pick(tree: Any) -> Any:
            if isinstance(tree, Tensor):
                return tree.index_select(0, index)
            return tree_map(lambda v: v.index_select(0, index), tree)

        return _Chunk(
            cids=[self.cids[k] for k in rows],
            device=self.device,
            downlink=self.downlink,
            data=pick(self.data),
            idx=pick(self.idx)[:, :steps],
            wts=pick(self.wts)[:, :steps],
            live=pick(self.live)[:, :steps],
            all_live=[True] * steps,
            client_states=pick(self.client_states),
            sizes=pick(self.sizes),
            widths=[self.widths[k] for k in rows],
            draws=pick(self.draws),
        )


def _stacked_draws(
    work: Work, cids: list[int], states: list[Tree], widths: list[tuple[int, ...]]
) -> Tree:
    """The chunk's ``Algorithm.local_draws``, drawn client by client on the host as the
    sequential engine draws them, stacked (K, T, W, ...) with zeros where a client has fewer
    steps or narrower ones; ``{}`` for an algorithm that draws none."""
    algo, clients = work.algorithm, work.clients
    if algo.local_draws is None:
        return {}
    drawn = []
    for cid, state, shape in zip(cids, states, widths, strict=True):
        data = clients.data(cid)
        ctx = ClientContext(
            task=work.task, info=work.info, client_id=cid, num_samples=len(data["y"]), data=data
        )
        drawn.append(algo.local_draws(work.downlink, state, ctx, list(shape)))
    steps = max(len(w) for w in widths)
    width = max(max(w) for w in widths)

    def padded(v: Tensor) -> Tensor:
        out = v.new_zeros((steps, width, *v.shape[2:]))
        out[: v.shape[0], : v.shape[1]] = v
        return out

    return tree_stack([tree_map(padded, d) for d in drawn])


def _merged(parts: list[tuple[list[int], Trained]], cids: list[int]) -> Trained:
    """Groups' results (each with its rows of the chunk) as one, in the chunk's order."""
    order = torch.tensor([k for rows, _ in parts for k in rows])
    inverse = torch.argsort(order)

    def joined(trees: list[Tree | None]) -> Tree | None:
        if trees[0] is None:
            return None
        return tree_map(lambda *vs: torch.cat(vs).index_select(0, inverse.to(vs[0].device)), *trees)

    trained = [t for _, t in parts]
    losses = joined([{"loss": t.losses} for t in trained])
    return Trained(
        clients=cids,
        uplinks=joined([t.uplinks for t in trained]),
        losses=None if losses is None else losses["loss"],
        states=joined([t.states for t in trained]),
        models=joined([t.models for t in trained]),
    )


def _current(device: torch.device) -> contextlib.AbstractContextManager[Any]:
    """``device`` as torch's current CUDA device (for what a step allocates without naming a
    device); nothing for a CPU."""
    if device.type == "cuda":
        return torch.cuda.device(device)
    return contextlib.nullcontext()


def _to(x: Tensor, device: torch.device) -> Tensor:
    """``x`` on ``device`` (itself when it is there). A copy onto a CUDA device is
    ``non_blocking``: it is ordered on the CUDA streams, and its source is only read; a copy to
    the CPU blocks, as the host may read it at once."""
    return x.to(device, non_blocking=device.type == "cuda")


def _moved(tree: Tree, device: torch.device) -> Tree:
    """``tree`` on ``device``, leaf by leaf (:func:`_to`)."""
    return tree_map(lambda v: _to(v, device), tree)


def _gathered(trained: Trained, home: torch.device) -> Trained:
    """A chunk's results moved to the run's device ``home``."""
    assert trained.uplinks is not None and trained.losses is not None
    return Trained(
        clients=trained.clients,
        uplinks=_moved(trained.uplinks, home),
        losses=_to(trained.losses, home),
        states=None if trained.states is None else _moved(trained.states, home),
        models=None if trained.models is None else _moved(trained.models, home),
    )


def _dense(x: Tensor) -> Tensor:
    """``x`` copied with row-major strides, size-1 dimensions included (``contiguous()`` keeps
    any stride there, and a compiled graph is specialised on strides)."""
    return x.clone(memory_format=torch.contiguous_format)


def parse_devices(devices: Any, home: torch.device) -> list[torch.device] | None:
    """``engine.devices`` as a list of devices, or None (unset: the run's device ``home``
    alone). ``all``: every visible CUDA GPU; a list (or comma-separated text) of ``cpu``,
    ``cuda`` and ``cuda:N`` entries. CUDA entries need CUDA and a run on ``device=cuda``.
    Anything else is a one-line :class:`~fedretain.errors.ConfigError` naming the fix."""
    if devices is None:
        return None
    usage = 'write engine.devices=all or a list such as ["cuda:0", "cuda:1"]'
    if isinstance(devices, str) and devices.strip().lower() == "all":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ConfigError(
                "engine.devices=all asks for every CUDA GPU, but torch finds none; leave "
                "engine.devices unset to train on the run's device"
            )
        out = [_device(f"cuda:{k}", usage) for k in range(count)]
    else:
        names = devices
        if isinstance(devices, str):  # cpu,cuda:0 from the command line; "" names nothing
            names = devices.split(",") if devices.strip() else []
        if not isinstance(names, list | tuple) or not names:
            raise ConfigError(
                f"engine.devices={devices!r} names no device; {usage}, or leave it unset "
                "for the run's device"
            )
        out = [_device(name, usage) for name in names]
    if home.type == "cpu" and any(d.type == "cuda" for d in out):
        raise ConfigError(
            "engine.devices lists CUDA devices but the run's device is the CPU; add "
            "device=cuda (the results are gathered there, and its deterministic settings "
            "cover every GPU)"
        )
    return out


def _device(name: Any, usage: str) -> torch.device:
    """One entry of ``engine.devices``: ``cpu``, ``cuda`` or ``cuda:N`` (checked against the
    GPUs torch sees)."""
    text = name.strip().lower() if isinstance(name, str) else ""
    kind, _, index = text.partition(":")
    if kind not in ("cpu", "cuda") or (index and (kind == "cpu" or not index.isdigit())):
        raise ConfigError(
            f"engine.devices: {name!r} is not a device (cpu, cuda or cuda:N); {usage}"
        )
    if kind == "cpu":
        return torch.device(kind)
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ConfigError(
            f"engine.devices lists {name}, but torch finds no CUDA GPU; list cpu entries "
            "only, or leave engine.devices unset to train on the run's device"
        )
    k = int(index) if index else torch.cuda.current_device()
    if k >= count:
        raise ConfigError(
            f"engine.devices lists {kind}:{k}, but torch finds {count} CUDA GPU(s) (cuda:0 to "
            f"cuda:{count - 1}); list only those, or write engine.devices=all for every one"
        )
    return torch.device(kind, k)


def check_compile_mode(mode: str) -> None:
    """A ValueError (a one-line config error) unless ``mode`` is one of torch.compile's."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"compile_mode must be one of {', '.join(COMPILE_MODES)}, got {mode!r}")


def vmap_engine(
    fed: Any,
    chunk: int = 0,
    compile: bool = False,
    devices: str | list[str] | None = None,
    compile_mode: str = "default",
) -> VmapEngine | SequentialEngine:
    """``engine=vmap``: the vectorised engine, or the sequential one (with a one-line notice)
    when the algorithm or the model cannot be vectorised.

    :param chunk: clients trained together per vectorised call (0: sized to memory); with
        several devices, per call on each device
    :param compile: compile the vectorised step with torch.compile: seconds in the first round,
        faster over long runs
    :param devices: the devices each round's clients are split over: all (every CUDA GPU) or
        a list such as ["cuda:0", "cuda:1"] (CUDA ones with device=cuda; cpu entries too);
        none: the run's device alone
    :param compile_mode: torch.compile's mode; other than default it compiles: reduce-overhead
        replays each step as a CUDA graph on CUDA (no kernel-launch cost; as default on a CPU),
        max-autotune also tunes the kernels (minutes of compilation)
    """
    if chunk < 0:
        raise ValueError(f"chunk must be >= 0 (0: sized to memory), got {chunk}")
    check_compile_mode(compile_mode)
    compile = compile or compile_mode != "default"
    split = parse_devices(devices, fed.device)
    why = vectorisable(fed.algorithm, fed.task.model)
    if why:
        unused = "; engine.devices is unused: it trains on the run's device" if split else ""
        print(f"note: engine=vmap runs sequentially: {why}{unused}", file=sys.stderr)
        return SequentialEngine()
    return VmapEngine(fed.task, chunk, compile, split, compile_mode, fed.config.gpu_share)
