"""The diagonal empirical Fisher ``Σ_n w_n (∇_θ ℓ_n)² / Σ_n w_n``, layer by layer.

:func:`fisher_diag` (FedCurv's Fisher, the forgetting diagnostics' Fisher correlation) avoids
per-sample gradients of the whole model. One forward pass records the input ``a`` of every
supported layer and adds a zero "probe" to its output; one backward pass of ``Σ_n ℓ_n`` to the
probes gives ``δ_n = ∂ℓ_n/∂out`` for every sample at once (samples are independent in eval mode,
so the gradient of the sum w.r.t. sample ``n``'s output is sample ``n``'s own). Then, per layer:

- ``nn.Linear`` with one position per sample: ``F_W = (w ⊙ δ²)ᵀ (a²) / Σw``, ``F_b = wᵀδ² / Σw``
  (one matmul, no per-sample gradient); with several positions per sample the per-sample
  gradient ``Σ_positions δᵀa`` is one batched matmul, then squared and averaged;
- ``nn.Conv2d`` (``groups = 1``, zero padding): the per-sample weight gradient is
  ``δ_n (out, L) @ unfold(a_n)ᵀ (L, in·k·k)``, one batched matmul; the bias sums ``δ`` over
  positions;
- ``nn.GroupNorm`` and ``nn.BatchNorm*`` (eval mode, running statistics) with affine
  parameters: ``∂ℓ_n/∂γ = Σ_positions δ ⊙ â`` with ``â`` the normalised input (recomputed from
  ``a``), ``∂ℓ_n/∂β = Σ_positions δ``;
- every other parameter (Fixup's scalars, other norm layers, a supported layer called twice):
  per-sample gradients from ``torch.func.vmap`` over ``grad``, for those parameters only; the
  pass then runs per sample under ``vmap`` (the same arithmetic as the batched pass).

Everything is ``torch.func`` (forward hooks only record and add the probes), so it runs inside
a surrounding ``vmap`` over clients, as on the vectorised engine. A model whose samples are
coupled in eval mode (BatchNorm without running statistics) or that shares parameters between
modules falls back to :func:`fisher_diag_per_sample`, the per-sample-gradient computation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import grad, vmap

from fedretain.core.task import Batch, Task
from fedretain.core.tree import Tree, leaves, tree_map, tree_numel, tree_zeros_like

FISHER_BYTES = 256 << 20  # what one chunk of samples may hold at once when chunk = 0
# what one sub-chunk of per-sample weight gradients (and a convolution's unfolded input) may
# hold: cache-sized, so that the unfold and the batched matmul stay in cache (FedReg's CNN on
# 600 samples, 2 threads: 0.36 s per Fisher at 8 MiB, 0.60 s at 256 MiB)
SUB_CHUNK_BYTES = 8 << 20


def _vmap_width(t: Tensor) -> int:
    """How many copies of ``t`` a surrounding ``vmap`` computes at once (1 outside ``vmap``)."""
    functorch = torch._C._functorch
    width = 1
    while functorch.is_batchedtensor(t):
        bdim = functorch.maybe_get_bdim(t)
        t = functorch.get_unwrapped(t)
        width *= t.shape[bdim]
    return width


def _weighted_sq(w: Tensor, g: Tensor) -> Tensor:
    """``Σ_n w_n g_n²`` over the leading axis of ``g``."""
    return torch.tensordot(w.to(g.dtype), g * g, dims=1)


# --------------------------------------------------------------------------- reference


def fisher_diag_per_sample(
    task: Task, params: Tree, buffers: Tree, data: Batch, chunk: int = 0
) -> Tree:
    """Diagonal empirical Fisher from per-sample gradients ``vmap(grad(ℓ))`` of every parameter.

    The generic computation (and the reference :func:`fisher_diag` is tested against):
    ``chunk`` samples at a time (``0``: about 256 MiB of gradients, shared by the clients of a
    surrounding ``vmap``).
    """
    x, y, w = data["x"], data["y"], data["w"]
    mask = data.get("label_mask")
    n = x.shape[0]
    if chunk <= 0:  # the budget is shared by the clients a vectorised engine runs together
        width = _vmap_width(leaves(params)[0]) if params else 1
        chunk = max(1, FISHER_BYTES // (4 * max(tree_numel(params), 1) * width))

    def sample_loss(p: Tree, xi: Tensor, yi: Tensor) -> Tensor:
        logits, _ = task.forward(p, buffers, xi.unsqueeze(0), train=False)
        return task.loss(logits, yi.unsqueeze(0), mask).sum()

    per_sample = vmap(grad(sample_loss), in_dims=(None, 0, 0))
    total = tree_zeros_like(params)
    for start in range(0, n, chunk):
        g = per_sample(params, x[start : start + chunk], y[start : start + chunk])
        wc = w[start : start + chunk]
        total = tree_map(lambda t, g, wc=wc: t + _weighted_sq(wc, g), total, g)
    count = w.sum().clamp_min(1.0)
    return tree_map(lambda t: t / count.to(t.dtype), total)


# --------------------------------------------------------------------------- layers


@dataclass(frozen=True)
class _Layer:
    """A layer whose Fisher comes from its input ``a`` and output gradient ``δ``."""

    name: str
    module: nn.Module
    weight: str | None  # the parameter names (None: frozen or absent)
    bias: str | None


def _kind(module: nn.Module) -> str | None:
    if isinstance(module, nn.Linear):
        return "linear"
    if (
        isinstance(module, nn.Conv2d)
        and module.groups == 1
        and module.padding_mode == "zeros"
        and (not isinstance(module.padding, str) or module.padding == "valid")
    ):
        return "conv2d"
    if isinstance(module, nn.GroupNorm) and module.affine:
        return "groupnorm"
    if (
        isinstance(module, nn.modules.batchnorm._BatchNorm)
        and module.affine
        and module.track_running_stats
    ):
        return "batchnorm"
    return None


def _coupled(model: nn.Module) -> bool:
    """Whether samples interact in eval mode (BatchNorm on batch statistics)."""
    return any(
        isinstance(m, nn.modules.batchnorm._BatchNorm) and not m.track_running_stats
        for m in model.modules()
    )


def _shares_parameters(model: nn.Module) -> bool:
    return len(list(model.named_parameters(remove_duplicate=False))) != len(
        list(model.named_parameters())
    )


def _layers(task: Task, params: Tree, buffers: Tree) -> list[_Layer]:
    out = []
    for name, module in task.model.named_modules():
        kind = _kind(module)
        if kind is None:
            continue
        names = [f"{name}.{p}" if name else p for p in ("weight", "bias")]
        weight, bias = (n if n in params else None for n in names)
        if weight is None and bias is None:
            continue
        if kind == "groupnorm" and weight is None:  # β alone: fine, but keep it simple
            continue
        if kind == "batchnorm":
            stats = [f"{name}.running_{s}" if name else f"running_{s}" for s in ("mean", "var")]
            if any(s not in buffers for s in stats):
                continue
        out.append(_Layer(name, module, weight, bias))
    return out


@contextmanager
def _hooks(layers: list[_Layer], fn: Callable) -> Iterator[None]:
    handles = [layer.module.register_forward_hook(partial(fn, layer.name)) for layer in layers]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _positions(t: Tensor, n: int, channels_last: bool) -> Tensor:
    """``t`` as ``(n, P, C)`` (Linear: features last) or ``(n, C, P)`` (conv / norm maps)."""
    if channels_last:
        return t.reshape(n, -1, t.shape[-1])
    return t.reshape(n, t.shape[1], -1)


def _sub_chunks(n: int, per_sample_numel: int, width: int) -> int:
    return max(1, min(n, SUB_CHUNK_BYTES // (4 * max(per_sample_numel, 1) * width)))


def _layer_fisher(
    layer: _Layer, a: Tensor, d: Tensor, w: Tensor, buffers: Tree, width: int
) -> dict[str, Tensor]:
    """``Σ_n w_n g_n²`` of the layer's weight and bias from inputs ``a`` and output grads ``d``."""
    m, n = layer.module, a.shape[0]
    out: dict[str, Tensor] = {}
    kind = _kind(m)
    if kind == "linear":
        a3, d3 = _positions(a, n, True), _positions(d, n, True)
        if a3.shape[1] == 1:  # one position per sample: no per-sample gradient at all
            d2 = d3[:, 0] ** 2 * w.to(d.dtype).unsqueeze(-1)
            if layer.weight:
                out[layer.weight] = d2.transpose(0, 1) @ (a3[:, 0] ** 2)
            if layer.bias:
                out[layer.bias] = d2.sum(dim=0)
            return out
        if layer.bias:
            out[layer.bias] = _weighted_sq(w, d3.sum(dim=1))
        if layer.weight:
            step = _sub_chunks(n, m.weight.numel(), width)
            total = 0
            for s in range(0, n, step):
                g = torch.bmm(d3[s : s + step].transpose(1, 2), a3[s : s + step])
                total = total + _weighted_sq(w[s : s + step], g)
            out[layer.weight] = total
        return out
    if kind == "conv2d":
        d3 = _positions(d, n, False)  # (n, out, L)
        if layer.bias:
            out[layer.bias] = _weighted_sq(w, d3.sum(dim=-1))
        if layer.weight:
            padding = 0 if m.padding == "valid" else m.padding
            k = m.weight[0].numel()
            step = _sub_chunks(n, m.weight.numel() + k * d3.shape[-1], width)
            total = 0
            for s in range(0, n, step):
                cols = F.unfold(a[s : s + step], m.kernel_size, m.dilation, padding, m.stride)
                g = torch.bmm(d3[s : s + step], cols.transpose(1, 2))  # (n, out, in·k·k)
                total = total + _weighted_sq(w[s : s + step], g)
            out[layer.weight] = total.reshape(m.weight.shape)
        return out
    # norm layers: y = â γ + β per channel (dim 1)
    d3 = _positions(d, n, False)
    if layer.bias:
        out[layer.bias] = _weighted_sq(w, d3.sum(dim=-1))
    if layer.weight:
        if kind == "groupnorm":
            hat = F.group_norm(a, m.num_groups, None, None, m.eps)
        else:
            prefix = f"{layer.name}." if layer.name else ""
            mean, var = buffers[prefix + "running_mean"], buffers[prefix + "running_var"]
            hat = F.batch_norm(a, mean, var, None, None, False, 0.0, m.eps)
        out[layer.weight] = _weighted_sq(w, (d3 * _positions(hat, n, False)).sum(dim=-1))
    return out


# --------------------------------------------------------------------------- fast Fisher


def fisher_diag(task: Task, params: Tree, buffers: Tree, data: Batch, chunk: int = 0) -> Tree:
    """Diagonal empirical Fisher: ``Σ_i w_i (∇_θ ℓ_i)² / Σ_i w_i`` over the samples of ``data``.

    ``ℓ_i`` is the task loss of sample ``i`` alone (eval mode, the client's ``label_mask``);
    ``w`` weighs samples (padding has 0). Layer by layer from activations and output gradients
    (see the module docstring), ``chunk`` samples per forward/backward pass (``0``: sized to
    about 256 MiB, shared by the clients of a surrounding ``vmap``). Equal to
    :func:`fisher_diag_per_sample` up to floating-point rounding.
    """
    model = task.model
    if not params or _coupled(model) or _shares_parameters(model):
        return fisher_diag_per_sample(task, params, buffers, data, chunk)
    x, y, w = data["x"], data["y"], data["w"]
    mask = data.get("label_mask")
    n = x.shape[0]
    width = _vmap_width(leaves(params)[0])
    layers = _layers(task, params, buffers)

    # shape pass on one sample: which layers run (once), their per-sample output shapes
    calls: dict[str, list[tuple[torch.Size, torch.dtype, int]]] = {}

    def record(name: str, module: nn.Module, args: tuple, output: Tensor) -> None:
        calls.setdefault(name, []).append((output.shape[1:], output.dtype, args[0][0].numel()))

    with torch.no_grad(), _hooks(layers, record):
        task.forward(params, buffers, x[:1], train=False)
    fast = [layer for layer in layers if len(calls.get(layer.name, ())) == 1]
    unused = [layer for layer in layers if layer.name not in calls]
    owned = {p for layer in fast + unused for p in (layer.weight, layer.bias) if p}
    generic = [k for k in params if k not in owned]
    shapes = {layer.name: calls[layer.name][0] for layer in fast}

    if chunk <= 0:
        per_sample = sum(3 * (s.numel() + a_numel) for s, _, a_numel in shapes.values())
        per_sample += sum(params[k].numel() for k in generic)
        chunk = max(1, FISHER_BYTES // (4 * max(per_sample, 1) * width))

    def objective(
        probes: dict[str, Tensor], gen: Tree, xb: Tensor, yb: Tensor
    ) -> tuple[Tensor, dict[str, Tensor]]:
        inputs: dict[str, Tensor] = {}

        def probe(name: str, module: nn.Module, args: tuple, output: Tensor) -> Tensor:
            inputs[name] = args[0]
            return output + probes[name]

        with _hooks(fast, probe):
            logits, _ = task.forward({**params, **gen}, buffers, xb, train=False)
        return task.loss(logits, yb, mask).sum(), inputs

    gen_params = {k: params[k] for k in generic}
    if generic:  # per-sample gradients of the generic parameters: the pass runs per sample

        def per_sample_pass(probes, gen, xi, yi):
            return grad(objective, argnums=(0, 1), has_aux=True)(
                probes, gen, xi.unsqueeze(0), yi.unsqueeze(0)
            )

        run = vmap(per_sample_pass, in_dims=(0, None, 0, 0))
        lead: tuple[int, ...] = (1,)
    else:  # samples are independent: the gradient of the sum is each sample's own

        def run(probes, gen, xb, yb):
            d, inputs = grad(objective, has_aux=True)(probes, gen, xb, yb)
            return (d, {}), inputs

        lead = ()

    total = tree_zeros_like(params)
    for start in range(0, n, chunk):
        xb, yb, wb = x[start : start + chunk], y[start : start + chunk], w[start : start + chunk]
        m = xb.shape[0]
        probes = {
            name: torch.zeros((m, *lead, *s), dtype=dt, device=xb.device)
            for name, (s, dt, _) in shapes.items()
        }
        (deltas, gen_grads), inputs = run(probes, gen_params, xb, yb)
        if lead:  # (m, 1, ...) from the per-sample pass
            deltas = {k: v.flatten(0, 1) for k, v in deltas.items()}
            inputs = {k: v.flatten(0, 1) for k, v in inputs.items()}
        for layer in fast:
            contrib = _layer_fisher(
                layer, inputs[layer.name], deltas[layer.name], wb, buffers, width
            )
            for k, v in contrib.items():
                total[k] = total[k] + v
        for k, g in gen_grads.items():
            total[k] = total[k] + _weighted_sq(wb, g)
    count = w.sum().clamp_min(1.0)
    return tree_map(lambda t: t / count.to(t.dtype), total)


__all__ = ["FISHER_BYTES", "fisher_diag", "fisher_diag_per_sample"]
