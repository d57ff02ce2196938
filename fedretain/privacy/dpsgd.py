"""Sample-level DP-SGD as a transformation of an algorithm's local step.

Abadi, Chu, Goodfellow, McMahan, Mironov, Talwar, Zhang, "Deep Learning with Differential
Privacy", CCS 2016, arXiv:1607.00133. One step on a mini-batch of a client: the per-example
gradients of the task loss ``g_i`` (padding rows, ``w = 0``, contribute nothing) are each
clipped to norm ``C`` over all parameters together, with Opacus's flat clipping factor
``min(1, C / (‖g_i‖ + 1e-6))``, summed, noised with ``N(0, σ²C²)`` per coordinate and
divided by the expected batch size ``B``:

    g̃ = (Σ_i g_i · min(1, C / (‖g_i‖ + 1e-6)) + N(0, σ²C² I)) / B

:func:`with_dpsgd` rebuilds a FedAvg-style algorithm's ``local_step`` from its
:class:`~fedretain.core.local.LocalRule` with this gradient in place of the task loss's:
a penalty (FedProx's, FedDyn's) is data-independent given the client's past outputs, so its
gradient is added after the privatised one, unclipped, and ``correct`` applies as usual.
Algorithms with a local step of their own are refused, and so are those that read the raw data
outside the local step (``Algorithm.hints.reads_data_outside_step``: FedCurv, whose uplink carries a
Fisher information computed from it).

Per-example gradients come from Opacus (``per_sample="opacus"``: a ``GradSampleModule`` on a
private copy of the task's model, loaded with the step's parameters, and ``DPOptimizer``'s
``pre_step`` for clipping, noise and scaling) or from ``torch.func``
(``per_sample="functorch"``: ``vmap(grad(...))`` over the examples, with the same formulas).
Both draw the noise from the same generator in the same order (the parameters tree's), so
they give the same update for the same seed.

The noise generator is seeded from (run seed, round, client id) in ``local_init`` and its
state travels in the step state (``state["dp_rng"]``, a uint8 tensor), so ``local_step``
stays a function of its inputs and every engine running
:func:`~fedretain.core.client.train_client` (sequential, Flower) draws the same noise. A
generator cannot be stacked under ``vmap``: the transformed algorithm is not vectorisable and
the vmap engine falls back to the sequential one. BatchNorm mixes examples within a batch,
which per-example clipping cannot bound: a model with BatchNorm is refused.

Privacy accounting of the result: :mod:`fedretain.privacy.accounting`.
"""

from __future__ import annotations

import copy
import functools
import math
import threading
import warnings
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from torch.func import grad, vmap

from fedretain.core.algorithm import Algorithm, ClientContext, transform
from fedretain.core.local import Gradient, make_local_step
from fedretain.core.task import Batch, Task
from fedretain.core.tree import Tree, leaves
from fedretain.errors import ConfigError
from fedretain.registry import kind

PER_SAMPLE = ("opacus", "functorch")
RNG_KEY = "dp_rng"  # the step state's key for the noise generator's state
# a word of the noise generator's seed, keeping its stream apart from the run's other draws
_NOISE_STREAM = 0x44505347  # "DPSG"


@dataclass(frozen=True)
class DPSGD:
    """DP-SGD's settings: noise multiplier σ, clipping norm C, expected batch size B (the
    divisor of the noised sum: the local batch size) and how per-example gradients are
    computed (``"opacus"`` or ``"functorch"``)."""

    noise_multiplier: float
    max_grad_norm: float
    expected_batch_size: int
    per_sample: str = "opacus"

    def __post_init__(self) -> None:
        sigma, clip, size = self.noise_multiplier, self.max_grad_norm, self.expected_batch_size
        if not _real(sigma) or not math.isfinite(sigma) or sigma < 0:
            raise ConfigError(
                f"DP-SGD noise_multiplier must be a finite number >= 0, got {sigma!r}"
            )
        if not _real(clip) or not math.isfinite(clip) or clip <= 0:
            raise ConfigError(f"DP-SGD max_grad_norm must be a finite number > 0, got {clip!r}")
        if isinstance(size, bool) or not isinstance(size, int | np.integer) or size < 1:
            raise ConfigError(
                f"DP-SGD expected_batch_size must be an integer >= 1 (the local batch size), "
                f"got {size!r}"
            )
        if self.per_sample not in PER_SAMPLE:
            raise ConfigError(
                f"DP-SGD per_sample must be one of {', '.join(PER_SAMPLE)}, got {self.per_sample!r}"
            )

    def hparams(self) -> dict[str, Any]:
        """The settings as an algorithm records them."""
        return {
            "dp_noise_multiplier": float(self.noise_multiplier),
            "dp_max_grad_norm": float(self.max_grad_norm),
            "dp_expected_batch_size": int(self.expected_batch_size),
            "dp_per_sample": self.per_sample,
        }


def _real(value: object) -> bool:
    return isinstance(value, int | float | np.number) and not isinstance(value, bool)


# --------------------------------------------------------------------------- the transformation


def with_dpsgd(algorithm: Algorithm, dp: DPSGD) -> Algorithm:
    """``algorithm`` with DP-SGD's clipped, noised per-example gradients in its local step.

    The name is kept; ``hparams`` gain ``dp_*`` entries; ``vectorisable`` becomes False.
    Raises ConfigError for an algorithm whose local step is its own (or that reads the raw
    data outside it) and, in ``local_init``, for a model with BatchNorm.
    """
    name = algorithm.name
    if "dp_noise_multiplier" in algorithm.hparams:
        raise ConfigError(f"{name} already trains with DP-SGD; apply it once")
    rule = algorithm.hints.local_rule
    if rule is None or not algorithm.follows_local_rule():
        raise ConfigError(
            f"DP-SGD cannot privatise {name}'s own local step; it composes with the algorithms "
            f"whose local step is FedAvg's: {', '.join(composable_algorithms())}"
        )
    if algorithm.hints.reads_data_outside_step:
        raise ConfigError(
            f"DP-SGD cannot make {name} private: what it sends is also computed from the raw "
            "client data outside its local step (e.g. a Fisher information); DP-SGD composes "
            f"with {', '.join(composable_algorithms())}"
        )
    base_init = algorithm.local_init

    def local_init(down: Tree, client_state: Tree, ctx: ClientContext) -> Tree:
        check_model(ctx.task.model)
        state = base_init(down, client_state, ctx)
        device = leaves(state["params"])[0].device
        gen = noise_generator(ctx.info.seed, ctx.info.round, ctx.client_id, device)
        return {**state, RNG_KEY: gen.get_state()}

    step = make_local_step(rule.opt, rule.penalty, rule.correct, gradient=dp_gradient(dp))
    return transform(
        algorithm,
        local_init=local_init,
        local_step=step,
        hparams=dp.hparams(),
        hints={
            "vectorisable": False,
            "sequential_because": "DP-SGD draws each client's noise from its own generator, "
            "which vmap cannot stack",
            "local_rule": None,  # the local step is no longer the rule's
        },
    )


@functools.cache
def composable_algorithms() -> tuple[str, ...]:
    """The registered algorithms ``privacy=dpsgd`` accepts (built with their defaults): those
    :func:`with_dpsgd` accepts, less the full-batch ones (``sgd``: one step on all of a client's
    data, where DP-SGD divides by the expected mini-batch size), which a run refuses."""
    import fedretain.continual  # noqa: F401  (registers the continual algorithms: all are read)
    from fedretain.algorithms import build_algorithm

    names = []
    for name in kind("algorithm"):
        try:
            algo = build_algorithm(name)
        except Exception:  # a factory that needs settings: leave it out
            continue
        full_batch = algo.hints.schedule == "full_batch"
        if algo.follows_local_rule() and not algo.hints.reads_data_outside_step and not full_batch:
            names.append(name)
    return tuple(names)


_CHECKED: weakref.WeakSet[nn.Module] = weakref.WeakSet()


def check_model(model: nn.Module) -> None:
    """Refuse a model with BatchNorm: its statistics mix the examples of a batch, so a
    per-example gradient bound says nothing about one example's influence."""
    if model in _CHECKED:
        return
    bn = [n for n, m in model.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if bn:
        raise ConfigError(
            f"DP-SGD needs per-example gradients, which BatchNorm ({bn[0]}) mixes across the "
            "batch; use GroupNorm instead: model.norm=group (vgg11, resnet18, resnet20)"
        )
    _CHECKED.add(model)


def noise_seed(seed: int, rnd: int, client: int) -> int:
    """The noise generator's seed for one client in one round (below 2**63)."""
    words = np.random.SeedSequence([seed, _NOISE_STREAM, rnd, client]).generate_state(2)
    return (int(words[0]) << 31) | (int(words[1]) >> 1)


def noise_generator(seed: int, rnd: int, client: int, device: torch.device) -> torch.Generator:
    """A generator on ``device`` seeded from (run seed, round, client id)."""
    gen = torch.Generator(device=device)
    gen.manual_seed(noise_seed(seed, rnd, client))
    return gen


def _restore(state: Tensor, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    gen.set_state(state.cpu())
    return gen


def dp_gradient(dp: DPSGD) -> Gradient:
    """The :data:`~fedretain.core.local.Gradient` hook of DP-SGD: the privatised gradient of
    the task loss, its weighted mean loss, the buffers unchanged, the generator advanced."""

    def gradient(state: Tree, batch: Batch, ctx: ClientContext) -> tuple[Tree, Tensor, Tree, Tree]:
        params, buffers = state["params"], state["buffers"]
        gen = _restore(state[RNG_KEY], leaves(params)[0].device)
        if dp.per_sample == "opacus":
            grads, losses = opacus_update(ctx.task, params, buffers, batch, dp, gen)
        else:
            per_example, losses = per_example_grads(ctx.task, params, buffers, batch)
            grads = clip_and_noise(per_example, dp, gen)
        w = batch["w"]
        loss = (losses * w).sum() / w.sum().clamp_min(1.0)
        return grads, loss.detach(), buffers, {**state, RNG_KEY: gen.get_state()}

    return gradient


# --------------------------------------------------------------------------- functorch path


def per_example_grads(task: Task, params: Tree, buffers: Tree, batch: Batch) -> tuple[Tree, Tensor]:
    """Per-example gradients of ``w_i · loss_i`` (a leading example axis on every leaf) and
    the per-example losses, by ``vmap(grad(...))`` over the batch."""
    label_mask = batch.get("label_mask")

    def one(p: Tree, x: Tensor, y: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        logits, _ = task.forward(p, buffers, x.unsqueeze(0))
        loss = task.loss(logits, y.unsqueeze(0), label_mask)[0]
        return loss * w, loss.detach()

    per_example = vmap(grad(one, has_aux=True), in_dims=(None, 0, 0, 0), randomness="different")
    return per_example(params, batch["x"], batch["y"], batch["w"])


def clip_and_noise(per_example: Tree, dp: DPSGD, generator: torch.Generator) -> Tree:
    """Opacus's ``clip_and_accumulate``, ``add_noise`` and ``scale_grad`` on per-example
    gradients: flat clipping over all leaves, noise per leaf in the tree's order."""
    names = list(per_example)
    norms = torch.stack(
        [per_example[n].reshape(len(per_example[n]), -1).norm(2, dim=-1) for n in names], dim=1
    ).norm(2, dim=1)
    factor = (dp.max_grad_norm / (norms + 1e-6)).clamp(max=1.0)
    std = dp.noise_multiplier * dp.max_grad_norm
    out = {}
    for n in names:
        g = per_example[n]
        summed = torch.einsum("i,i...", factor.to(g.dtype), g)
        if std == 0:
            noise = torch.zeros_like(summed)
        else:
            noise = torch.normal(
                mean=0,
                std=std,
                size=summed.shape,
                device=summed.device,
                generator=generator,
                dtype=summed.dtype,
            )
        out[n] = (summed + noise) / dp.expected_batch_size
    return out


# --------------------------------------------------------------------------- Opacus path


class _OpacusCopy:
    """A private copy of a task's model wrapped in Opacus's ``GradSampleModule``."""

    def __init__(self, model: nn.Module) -> None:
        from opacus import GradSampleModule

        private = copy.deepcopy(model)
        try:
            self.module = GradSampleModule(private, batch_first=True, loss_reduction="sum")
        except NotImplementedError as err:
            raise ConfigError(
                f"Opacus cannot compute per-example gradients of this model ({err}); "
                "use per_sample=functorch"
            ) from err
        self.params = dict(private.named_parameters())
        self.buffers = dict(private.named_buffers())
        self.lock = threading.Lock()

    def update(
        self, task: Task, params: Tree, buffers: Tree, batch: Batch, dp: DPSGD, gen: torch.Generator
    ) -> tuple[Tree, Tensor]:
        from opacus.optimizers import DPOptimizer

        with self.lock:
            own = [self.params[n] for n in params]
            with torch.no_grad():
                for n, value in params.items():
                    self.params[n].copy_(value)
                for n, value in buffers.items():
                    self.buffers[n].copy_(value)
            for p in self.params.values():
                p.grad = None
                p.grad_sample = None
            if not self.module._module.training:  # the copy may be of a model in eval mode
                self.module.train()
            with torch.enable_grad(), warnings.catch_warnings():
                # the inputs need no gradient: the first layer's backward hook fires anyway
                warnings.filterwarnings("ignore", "Full backward hook is firing")
                logits = self.module(batch["x"])
                losses = task.loss(logits, batch["y"], batch.get("label_mask"))
                (losses * batch["w"]).sum().backward()
            for p in own:  # a parameter the forward pass did not use: zero gradients
                if p.grad_sample is None:
                    p.grad_sample = p.new_zeros((len(batch["w"]), *p.shape))
            optimizer = DPOptimizer(
                torch.optim.SGD(own, lr=0.0),
                noise_multiplier=dp.noise_multiplier,
                max_grad_norm=dp.max_grad_norm,
                expected_batch_size=dp.expected_batch_size,
                loss_reduction="mean",  # divide the noised sum by expected_batch_size
                generator=gen,
            )
            optimizer.pre_step()
            grads = {n: p.grad.detach().clone() for n, p in zip(params, own, strict=True)}
            optimizer.zero_grad(set_to_none=True)
        return grads, losses.detach()


_COPIES: weakref.WeakKeyDictionary[nn.Module, _OpacusCopy] = weakref.WeakKeyDictionary()
_COPIES_LOCK = threading.Lock()


def opacus_update(
    task: Task, params: Tree, buffers: Tree, batch: Batch, dp: DPSGD, gen: torch.Generator
) -> tuple[Tree, Tensor]:
    """The privatised gradient by Opacus (``GradSampleModule`` and ``DPOptimizer.pre_step``)
    at ``params``, and the per-example losses."""
    with _COPIES_LOCK:
        worker = _COPIES.get(task.model)
        if worker is None:
            worker = _COPIES[task.model] = _OpacusCopy(task.model)
    return worker.update(task, params, buffers, batch, dp, gen)


__all__ = [
    "DPSGD",
    "PER_SAMPLE",
    "RNG_KEY",
    "check_model",
    "clip_and_noise",
    "composable_algorithms",
    "dp_gradient",
    "noise_generator",
    "noise_seed",
    "opacus_update",
    "per_example_grads",
    "with_dpsgd",
]
