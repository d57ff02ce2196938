"""The central abstraction: an FL algorithm is a bundle of pure functions; engines run it.

State is always returned, never kept on an object: the engine owns the server state, the
per-client states (only for clients that have taken part) and the payloads, which it counts
in its ledger. The same :class:`Algorithm` runs on the sequential engine, the vectorised
engine and Flower.

Conventions every algorithm follows:

- the server state holds the global model as ``"x"`` (trainable parameters) and
  ``"buffers"`` (BatchNorm statistics and the like, averaged as FedAvg does);
- payloads (``broadcast``'s downlink and ``local_final``'s uplink) are named trees whose
  top-level keys are declared in ``downlink_keys`` / ``uplink_keys``;
- ``local_step`` has no data-dependent Python branches, no ``.item()`` and no in-place
  updates, so that clients can be stacked with ``torch.func.vmap``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from torch import Tensor

from fedretain.core.task import Batch, Task
from fedretain.core.tree import Tree
from fedretain.registry import config_key


@dataclass(frozen=True)
class RoundInfo:
    """What every function of a round may know about it."""

    round: int  # 0-based index of the round being run
    num_clients: int  # N, all clients
    clients: tuple[int, ...]  # the round's sampled client ids
    lr: float  # the local learning rate of this round
    seed: int  # the run's seed


@dataclass(frozen=True)
class ClientContext:
    """One client in one round: the task, the round, and the client's whole training data.

    ``data`` is a batch (``x``, ``y``, ``w``, ``label_mask``) of all the client's training
    examples, for the algorithms that need a full pass (MimeLite's full gradient, FedCurv's
    Fisher).
    """

    task: Task
    info: RoundInfo
    client_id: int
    num_samples: int
    data: Batch


InitFn = Callable[[Tree, Tree], Tree]
ClientInitFn = Callable[[Tree], Tree]
BroadcastFn = Callable[[Tree, RoundInfo], Tree]
LocalInitFn = Callable[[Tree, Tree, ClientContext], Tree]
LocalStepFn = Callable[[Tree, Batch, ClientContext], tuple[Tree, dict[str, Tensor]]]
LocalFinalFn = Callable[[Tree, Tree, ClientContext], tuple[Tree, Tree]]
DrawFn = Callable[[Tree, Tree, ClientContext, list[int]], Tree]
AggregateFn = Callable[[Tree, Tree, Tensor, RoundInfo], tuple[Tree, dict[str, Tensor]]]


@dataclass(frozen=True)
class Hints:
    """What engines and transformations may rely on about an algorithm, beside its math.

    - ``schedule``: ``"minibatch"`` (local epochs or steps of ``batch_size``) or
      ``"full_batch"`` (one step on the client's whole data, as the SGD baseline).
    - ``vectorisable``: whether the vectorised engine may stack its clients;
      ``sequential_because`` says why not, when a transformation keeping the name made it so.
    - ``paddable``: whether the vectorised engine may pad the local steps (False: the local
      step must not see padding, its batch statistics, a generator's BatchNorm, would include
      the padded samples, so only clients whose mini-batch plans have the same shape train
      together); an algorithm with ``local_draws`` sets it False.
    - ``reads_data_outside_step``: whether ``local_init`` or ``local_final`` reads the client's
      training data (``ctx.data``: a full gradient, a Fisher information), so that a
      transformation of the local step alone does not cover what the client sends.
    - ``local_rule`` (:class:`~fedretain.core.local.LocalRule`, set by ``fedavg``): the
      optimiser and hooks ``local_step`` was built from, for transformations of the local step
      (DP-SGD, the replays); None when the local step is the algorithm's own.
    """

    schedule: str = "minibatch"
    vectorisable: bool = True
    sequential_because: str = ""
    paddable: bool = True
    reads_data_outside_step: bool = False
    local_rule: Any = None  # a fedretain.core.local.LocalRule, or None


@dataclass(frozen=True)
class Algorithm:
    """An FL algorithm as pure functions.

    - ``server_init(params, buffers) -> server_state`` (with ``"x"`` and ``"buffers"``)
    - ``client_init(params) -> client_state`` for a client's first participation (``{}``
      when the algorithm keeps no per-client state)
    - ``broadcast(server_state, info) -> downlink``
    - ``local_init(downlink, client_state, ctx) -> step_state``
    - ``local_step(step_state, batch, ctx) -> (step_state, metrics)``: one mini-batch
    - ``local_final(step_state, client_state, ctx) -> (uplink, new_client_state)``
    - ``aggregate(server_state, uplinks, weights, info) -> (server_state, metrics)`` where
      ``uplinks`` are stacked on a leading client axis in the order of ``info.clients`` and
      ``weights`` are the clients' training-sample counts.

    ``local_draws`` (None: none) is for a local step that uses random numbers of its own (a
    generator's noise, sampled labels): ``local_draws(downlink, client_state, ctx, widths)``
    draws them for the client's whole round before its first step, on the host, from a
    generator seeded by the run's seed, the round and the client, so that the numbers are the
    same on every engine (a vmapped step cannot draw from a per-client generator). It returns a
    tree of CPU tensors with one row per step and ``max(widths)`` columns (``widths[t]``: the
    samples of step ``t``; the columns past it are zero); the engine hands step ``t`` its rows
    as ``batch["draws"]``, cut to the step's width.

    ``hparams`` are the settings it was built with, as configs name them (stamped by
    :func:`algorithm_factory`, extended by :func:`transform`); ``hints`` (:class:`Hints`) what
    engines and transformations may rely on beyond the functions.
    """

    name: str
    server_init: InitFn
    client_init: ClientInitFn
    broadcast: BroadcastFn
    local_init: LocalInitFn
    local_step: LocalStepFn
    local_final: LocalFinalFn
    aggregate: AggregateFn
    downlink_keys: tuple[str, ...]
    uplink_keys: tuple[str, ...]
    hparams: dict[str, Any] = field(default_factory=dict)
    local_draws: DrawFn | None = None  # the local steps' random numbers, drawn beforehand
    hints: Hints = Hints()

    def follows_local_rule(self) -> bool:
        """Whether ``local_step`` is the one ``local_rule`` built (not replaced since)."""
        rule = self.hints.local_rule
        return rule is not None and rule.step is self.local_step

    def global_model(self, server_state: Tree) -> tuple[Tree, Tree]:
        """The model to evaluate: parameters and buffers."""
        return server_state["x"], server_state["buffers"]


# what fedretain hands an algorithm's factory (objects, not settings): never in its hparams
SUPPLIED = ("opt", "penalty", "correct", "server_opt", "aggregator", "model")

F = TypeVar("F", bound=Callable[..., Algorithm])


def algorithm_factory(factory: F) -> F:
    """Stamp the :class:`Algorithm` that ``factory`` returns with the settings it was called
    with: its ``hparams`` are each keyword argument with a default (given or defaulted) that is
    not an object fedretain supplies (:data:`SUPPLIED`), under its config name (``lambda_`` is
    ``lambda``): the names ``fedretain list algorithm --params`` shows (and a continual
    method's ``rounds_per_task``), nothing else (not the settings of the algorithm it is built
    on). A keyword left None records the value the
    factory derives for it, when the factory records one (FedReg's ``eta_p``). Transformations
    applied afterwards add theirs (:func:`transform`)."""
    sig = inspect.signature(factory)
    settable = [
        name
        for name, p in sig.parameters.items()
        if p.default is not inspect.Parameter.empty
        and name not in SUPPLIED
        and p.kind is not inspect.Parameter.VAR_KEYWORD
    ]

    @functools.wraps(factory)
    def build(*args: Any, **kwargs: Any) -> Algorithm:
        algo = factory(*args, **kwargs)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        given = {config_key(k): bound.arguments[k] for k in settable}
        derived = {k: algo.hparams[k] for k, v in given.items() if v is None and k in algo.hparams}
        return replace(algo, hparams={**given, **derived})

    return build  # type: ignore[return-value]


def transform(
    algorithm: Algorithm,
    *,
    hparams: dict[str, Any] | None = None,
    hints: dict[str, Any] | None = None,
    **fields: Any,
) -> Algorithm:
    """``algorithm`` as a transformation or a variant changes it (a privacy mechanism, a
    replay, FedProx from FedAvg): ``fields`` replace its functions, name or payload keys,
    ``hparams`` are added to its settings (the transformation's own beside the algorithm's)
    and ``hints`` replace the named fields of its :class:`Hints`. A new ``local_step`` leaves
    the local rule behind unless it is the rule's (:meth:`Algorithm.follows_local_rule`)."""
    return replace(
        algorithm,
        **fields,
        hparams={**algorithm.hparams, **(hparams or {})},
        hints=replace(algorithm.hints, **(hints or {})),
    )
