"""``Task``: a model and a per-example loss, evaluated functionally.

Parameters and buffers live in trees outside the module and are passed in with
``torch.func.functional_call``; the module itself is only the program. A batch is a dict
with ``x`` (float inputs), ``y`` (labels), ``w`` (per-example weights: 1 for real examples,
0 for padding), ``label_mask`` (the client's local label set, a boolean vector over classes)
and, in local training, ``idx`` (the rows of the client's ``ctx.data`` the batch was taken
from, so that algorithms can look up data they prepared once per round, as FedReg does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import grad

from fedretain.core.tree import Tree, tree_clone
from fedretain.data.base import as_input
from fedretain.losses import Loss
from fedretain.losses.ce import ce
from fedretain.models.registry import substituted_call

Batch = dict[str, Tensor]
CONVOLUTIONS = (
    nn.Conv1d,
    nn.Conv2d,
    nn.Conv3d,
    nn.ConvTranspose1d,
    nn.ConvTranspose2d,
    nn.ConvTranspose3d,
)


def _float32(out: Any) -> Any:
    """``out`` with its tensors (alone, in lists or in tuples) in float32."""
    if isinstance(out, Tensor):
        return out.float()
    if isinstance(out, list | tuple):
        return type(out)(_float32(o) for o in out)
    return out


@dataclass(frozen=True)
class Task:
    model: nn.Module
    loss: Loss
    num_classes: int
    # differentiate with torch.func.grad (needed under vmap) instead of torch.autograd.grad,
    # which is faster per step for one client at a time
    functional: bool = False
    # the model's training forward (and so its backward) under torch.autocast in this dtype
    # (config precision=bf16); parameters, gradients and evaluation stay float32
    autocast: torch.dtype | None = None

    @cached_property
    def convolutional(self) -> bool:
        """Whether the model has a convolution, transposed or not (evaluation then feeds it NHWC
        batches on a CPU and takes smaller batches by default; ``engine=auto`` keeps it off
        the vectorised engine on a CPU)."""
        return any(isinstance(m, CONVOLUTIONS) for m in self.model.modules())

    def init(self) -> tuple[Tree, Tree]:
        """The module's current parameters and buffers, as detached copies."""
        params = {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        buffers = dict(self.model.named_buffers())
        return tree_clone(params), tree_clone(buffers)

    def forward(
        self, params: Tree, buffers: Tree, x: Tensor, train: bool = True
    ) -> tuple[Tensor, Tree]:
        """Logits and the buffers after the call (BatchNorm statistics update in training).

        In training with :attr:`autocast` set, the call runs under ``torch.autocast`` and the
        logits come back in float32."""
        if self.model.training != train:  # train() walks every module: only on a change
            self.model.train(train)
        if buffers and train:
            buffers = {k: v.clone() for k, v in buffers.items()}
        tensors = {**params, **buffers}
        if train:
            return self.train_call(self.model, tensors, (x,)), buffers
        return substituted_call(self.model, tensors, (x,)), buffers

    def train_call(
        self, module: nn.Module, tensors: Tree, args: tuple, kwargs: dict | None = None
    ) -> Any:
        """``functional_call`` of a training forward through ``module`` (the model or modules
        sharing its parameters): under ``torch.autocast`` when :attr:`autocast` is set, its
        tensors (or lists and tuples of them) then returned in float32."""
        if self.autocast is None:
            return substituted_call(module, tensors, args, kwargs)
        with torch.autocast(args[0].device.type, dtype=self.autocast):
            out = substituted_call(module, tensors, args, kwargs)
        return _float32(out)

    def batch_loss(
        self, params: Tree, buffers: Tree, batch: Batch, train: bool = True
    ) -> tuple[Tensor, Tree]:
        """Weighted mean loss over the batch (padding has weight 0) and the new buffers."""
        logits, new_buffers = self.forward(params, buffers, batch["x"], train)
        per_example = self.loss(logits, batch["y"], batch.get("label_mask"))
        w = batch["w"]
        return (per_example * w).sum() / w.sum().clamp_min(1.0), new_buffers

    def grad_and_aux(
        self, fn: Callable[[Tree], tuple[Tensor, Any]], params: Tree
    ) -> tuple[Tree, Any]:
        """Gradient of the scalar ``fn(params)[0]`` in ``params``, and ``fn``'s second output.

        A pure function of its inputs either way; with ``functional=True`` it is
        ``torch.func.grad(fn, has_aux=True)``, safe under ``vmap``.
        """
        if self.functional or torch._C._functorch.is_functorch_wrapped_tensor(
            next(iter(params.values()))
        ):
            return grad(fn, has_aux=True)(params)
        with torch.enable_grad():
            leaves_ = {k: v.detach().requires_grad_(True) for k, v in params.items()}
            value, aux = fn(leaves_)
            grads = torch.autograd.grad(value, list(leaves_.values()), allow_unused=True)
        out = {
            k: torch.zeros_like(v) if g is None else g
            for (k, v), g in zip(leaves_.items(), grads, strict=True)
        }
        return out, aux

    def grad(self, params: Tree, buffers: Tree, batch: Batch) -> tuple[Tree, Tensor, Tree]:
        """Gradient of :meth:`batch_loss` in ``params``, the loss, and the new buffers."""

        def objective(p: Tree) -> tuple[Tensor, tuple[Tensor, Tree]]:
            loss, new_buffers = self.batch_loss(p, buffers, batch)
            return loss, (loss.detach(), new_buffers)

        grads, (loss, new_buffers) = self.grad_and_aux(objective, params)
        return grads, loss, new_buffers

    @torch.no_grad()
    def per_example(
        self, params: Tree, buffers: Tree, x: Tensor, y: Tensor, batch_size: int = 1000
    ) -> tuple[Tensor, Tensor]:
        """Per example: whether the full softmax's top class is right, and its cross-entropy.

        One pass over many clients' samples; callers split the rows (the forgetting
        diagnostics measure each model on every client's samples at once).
        """
        first = next(iter(params.values()))
        device = first.device
        correct, losses = [], []
        for start in range(0, len(y), batch_size):
            xb = as_input(x[start : start + batch_size].to(device), first.dtype)
            if self.convolutional and xb.dim() == 4 and device.type == "cpu":
                # oneDNN's NHWC kernels: 1.1-1.35x on 3-channel images (benchmarks/RESULTS.md)
                xb = xb.contiguous(memory_format=torch.channels_last)
            yb = y[start : start + batch_size].to(device)
            logits, _ = self.forward(params, buffers, xb, train=False)
            correct.append(logits.argmax(dim=-1) == yb)
            losses.append(ce(logits, yb))
        if not losses:
            return torch.zeros(0, dtype=torch.bool), torch.zeros(0)
        return torch.cat(correct), torch.cat(losses)

    @torch.no_grad()
    def evaluate(
        self, params: Tree, buffers: Tree, x: Tensor, y: Tensor, batch_size: int = 1000
    ) -> tuple[float, float]:
        """Accuracy and mean cross-entropy of the full softmax over ``(x, y)``.

        Evaluation always uses the full softmax, whatever the training loss. The loss is
        summed per batch of ``batch_size`` and the batches' sums in double precision.
        """
        correct, losses = self.per_example(params, buffers, x, y, batch_size)
        total_loss = sum(float(part.sum()) for part in losses.split(batch_size))
        n = max(len(y), 1)
        return int(correct.sum()) / n, total_loss / n
