"""Helpers for trees: nested ``dict[str, Tensor | Tree]``, the currency of every algorithm.

All functions are pure: they return new trees and never modify their arguments, so they are
safe inside ``torch.func`` transforms (``grad``, ``vmap``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeAlias

import torch
from torch import Tensor

Tree: TypeAlias = dict[str, Any]  # leaves are Tensors, inner nodes are dicts


def tree_map(fn: Callable[..., Tensor], tree: Tree, *rest: Tree) -> Tree:
    """Apply ``fn`` leafwise to ``tree`` and any trees of the same structure."""
    out: Tree = {}
    for key, value in tree.items():
        others = [r[key] for r in rest]
        out[key] = tree_map(fn, value, *others) if isinstance(value, dict) else fn(value, *others)
    return out


def leaves(tree: Tree) -> list[Tensor]:
    """The tensors of a tree in a fixed (insertion) order."""
    out: list[Tensor] = []
    for value in tree.values():
        out.extend(leaves(value) if isinstance(value, dict) else [value])
    return out


def flatten(tree: Tree, prefix: str = "") -> dict[str, Tensor]:
    """A flat ``{"a/b/c": tensor}`` view of a tree (for files and records)."""
    out: dict[str, Tensor] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "/"))
        else:
            out[name] = value
    return out


def unflatten(flat: dict[str, Tensor]) -> Tree:
    """Inverse of :func:`flatten`."""
    out: Tree = {}
    for name, value in flat.items():
        node = out
        *path, last = name.split("/")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    return out


def tree_sub(a: Tree, b: Tree) -> Tree:
    return tree_map(torch.sub, a, b)


def tree_zeros_like(a: Tree) -> Tree:
    return tree_map(torch.zeros_like, a)


def tree_clone(a: Tree) -> Tree:
    return tree_map(lambda x: x.detach().clone(), a)


def tree_vdot(a: Tree, b: Tree) -> Tensor:
    """Inner product over all leaves, as one scalar."""
    terms = [torch.sum(x * y) for x, y in zip(leaves(a), leaves(b), strict=True)]
    return torch.stack(terms).sum() if terms else torch.zeros(())


def tree_where(cond: Tensor, a: Tree, b: Tree) -> Tree:
    """Leafwise ``where(cond, a, b)`` with a scalar (or broadcastable) condition."""
    return tree_map(lambda x, y: torch.where(cond, x, y), a, b)


def tree_stack(trees: list[Tree]) -> Tree:
    """Stack trees of equal structure on a new leading axis."""
    if not trees:
        raise ValueError("tree_stack needs at least one tree")
    return tree_map(lambda *xs: torch.stack(xs), trees[0], *trees[1:])


def tree_unstack(tree: Tree, n: int) -> list[Tree]:
    return [tree_map(lambda x, i=i: x[i], tree) for i in range(n)]


def tree_weighted_mean(stacked: Tree, weights: Tensor) -> Tree:
    """Mean over the leading (client) axis with weights that are normalised to sum to one.

    Integer leaves (for example BatchNorm's ``num_batches_tracked``) are averaged in float and
    rounded back to their dtype.
    """
    w = weights / weights.sum()

    def mean(x: Tensor) -> Tensor:
        if x.dtype.is_floating_point:
            return torch.tensordot(w.to(x.dtype), x, dims=1)
        return torch.round(torch.tensordot(w.double(), x.double(), dims=1)).to(x.dtype)

    return tree_map(mean, stacked)


def tree_bytes(tree: Tree) -> int:
    """Bytes of every tensor in a tree, as they would cross the network."""
    return sum(x.numel() * x.element_size() for x in leaves(tree))


def tree_numel(tree: Tree) -> int:
    return sum(x.numel() for x in leaves(tree))


def finite_rows(tree: Tree, n: int) -> Tensor:
    """``(n,)`` bools: whether row ``i`` (of the leading axis) of every floating leaf is finite.

    Fast path: a row's sum is finite exactly when the row has no NaN/Inf, unless finite values
    overflow, so rows are summed first (one read) and only then checked element by element.
    """
    ok = torch.ones(n, dtype=torch.bool)
    for x in leaves(tree):
        if x.dtype.is_floating_point:
            rows = x.reshape(n, -1)
            fine = torch.isfinite(rows.sum(dim=1))
            if not bool(fine.all()):
                fine = torch.isfinite(rows).all(dim=1)
            ok = ok.to(fine.device) & fine
    return ok


def tree_allfinite(tree: Tree) -> bool:
    """Whether no floating leaf holds NaN or Inf (a finite sum is the fast path)."""
    return all(
        bool(torch.isfinite(x.sum())) or bool(torch.isfinite(x).all())
        for x in leaves(tree)
        if x.dtype.is_floating_point
    )


def ravel(tree: Tree) -> Tensor:
    """All leaves of a (flat) tree concatenated into one vector, in insertion order."""
    return torch.cat([x.reshape(-1) for x in leaves(tree)])


def unravel_like(flat: Tensor, like: Tree) -> Tree:
    """Inverse of :func:`ravel`: cut ``flat`` back into the shapes of ``like``."""
    out: Tree = {}
    start = 0
    for key, value in like.items():
        if isinstance(value, dict):
            n = tree_numel(value)
            out[key] = unravel_like(flat[start : start + n], value)
        else:
            n = value.numel()
            out[key] = flat[start : start + n].reshape(value.shape)
        start += n
    return out
