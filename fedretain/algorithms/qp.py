"""The quadratic program GradMA uses to correct update directions on the server and the workers.

Luo, Li, Lan, Gao, "GradMA: A Gradient-Memory-based Accelerated Federated Learning with
Alleviated Catastrophic Forgetting", CVPR 2023, arXiv:2302.14307, eq. 2-4.

Given ``p ∈ R^d`` and constraint columns ``M ∈ R^{d×C}``, find the ``p̃`` closest to ``p``
with ``⟨p̃, M[:, i]⟩ ≥ 0`` for every ``i`` (eq. 2-3). Through the dual (eq. 4),

    z* = argmin_{z ≥ 0} ½ zᵀ(MᵀM)z + (Mᵀp)ᵀz,        p̃ = p + M z*,

a problem in ``C`` variables however large ``d`` is. ``½‖Mz + p‖²`` equals the dual objective
plus a constant, so the dual is the non-negative least-squares problem ``min_{z≥0} ‖Mz + p‖``,
and ``p̃ = p + Mz*`` is unique even when ``z*`` is not (zero, duplicate or parallel columns).

- :func:`solve_dual` solves the ``C×C`` dual exactly (active set) from ``G = MᵀM``, ``b = Mᵀp``.
- :func:`project` is the server-side QP on one flat vector (GradMA's ``QP(m, D)``, Alg. 3):
  reduces ``[M | p]`` to its ``(C+1)×(C+1)`` QR factor ``R`` in float64 (row chunks, bounded
  memory; ``R`` is the numerically better square root of ``[G b; bᵀ pᵀp]``) and solves the
  same non-negative least-squares problem on ``R``; returns ``(p̃, z)``.
- :func:`project_tree` does the same on parameter trees, over the whole flattened vector (the
  paper) or one QP per leaf (``per_layer=True``, as the reference code ``lkyddd/GradMA`` does
  with cvxopt).
- :func:`project_small` is the worker-side QP (Alg. 2, ``C = 3``, every local step): a
  fixed-shape exact solution by enumerating all ``2^C`` active sets, with no data-dependent
  Python branches, so it runs under ``torch.func.vmap`` over clients.

None of these functions is differentiable; all compute in float64 internally. Accuracy: from
the QR factor, :func:`project` resolves columns at an angle ``θ`` from (anti)parallel to about
``1e-16/θ`` (it matches quadprog on the primal to 1e-6 down to ``θ = 1e-8``); from ``G``,
:func:`solve_dual` and :func:`project_small` to about ``1e-16/θ²``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch
from torch import Tensor

from fedretain.core.tree import Tree, leaves

__all__ = ["project", "project_small", "project_tree", "solve_dual"]

# eigenvalues of the column-normalised Gram matrix below this fraction of the largest are
# rounding noise (its entries carry relative errors of about 1e-13 for d ~ 1e6)
_EIG_RTOL = 1e-12
# column norms at or below this are zero columns (their constraint reads 0 ≥ 0)
_TINY = 1e-150
# float64 elements of [M | p] factored at a time (4 MiB; QR is fastest on short chunks)
_CHUNK_ELEMS = 1 << 19
# Lawson–Hanson's tolerance on the gradient, columns and right-hand side being of unit norm
_NNLS_TOL = 1e-12
# largest C that project_small enumerates (2^C active sets)
_SMALL_MAX_C = 6
# rows of M that project_small converts to float64 at a time
_SMALL_CHUNK = 1 << 16
# KKT tolerance of project_small, in units where the normalised columns and max|b| are 1
_SMALL_TOL = 1e-9


def _nnls(A: np.ndarray, y: np.ndarray, tol: float) -> np.ndarray:
    """Lawson–Hanson active-set solution of ``min_{z≥0} ‖Az − y‖`` (A: r×n, float64).

    Invariant at the top of each outer iteration: ``z`` is the least-squares solution on the
    passive set ``P`` (so the gradient vanishes on ``P``). A column enters only when its
    gradient ``w_j = A_jᵀ(y − Az)`` exceeds ``tol``, so the columns of ``P`` stay independent
    (a duplicate or parallel column has ``w_j = 0`` there); it ends when no ``w_j > tol``: the
    KKT conditions hold to ``tol``.
    """
    n = A.shape[1]
    z = np.zeros(n)
    passive = np.zeros(n, dtype=bool)
    banned = np.zeros(n, dtype=bool)  # entered with a non-positive step: skip until z moves
    w = A.T @ y
    for _ in range(3 * n + 30):
        candidates = ~passive & ~banned & (w > tol)
        if not candidates.any():
            break
        j = int(np.argmax(np.where(candidates, w, -np.inf)))
        passive[j] = True
        for inner in range(n + 1):
            s = np.zeros(n)
            s[passive] = np.linalg.lstsq(A[:, passive], y, rcond=None)[0]
            if inner == 0 and s[j] <= 0.0:
                # rounding made the entering column look useful: z is unchanged, leave it out
                passive[j] = False
                banned[j] = True
                break
            if np.all(s[passive] > 0.0):
                z = s
                banned[:] = False
                break
            # move towards s until the first passive entry reaches 0, then drop it
            blocking = np.flatnonzero(passive & (s <= 0.0))
            ratios = z[blocking] / (z[blocking] - s[blocking])
            z = z + ratios.min() * (s - z)
            z[blocking[np.argmin(ratios)]] = 0.0
            passive &= z > 0.0
            z[~passive] = 0.0
        w = A.T @ (y - A @ z)
    else:  # no convergence (not seen in tests): take scipy's solution if it is better
        from scipy.optimize import nnls

        alt = nnls(A, y, maxiter=50 * n)[0]
        if np.linalg.norm(A @ alt - y) < np.linalg.norm(A @ z - y):
            z = alt
    return np.maximum(z, 0.0)


def _solve_ls(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """``argmin_{z≥0} ‖Az − y‖`` with columns scaled to unit norm and ``y`` to unit length.

    Zero columns get ``z_i = 0``; the scalings make the tolerances independent of the scale of
    ``p`` and of each column (norms from 1e-8 to 1e8 together are fine).
    """
    C = A.shape[1]
    z = np.zeros(C)
    norms = np.linalg.norm(A, axis=0)
    keep = norms > _TINY
    scale = float(np.linalg.norm(y))
    if not keep.any() or scale == 0.0:
        return z
    z[keep] = _nnls(A[:, keep] / norms[keep], y / scale, tol=_NNLS_TOL) * scale / norms[keep]
    return z


def solve_dual(gram: Tensor, b: Tensor) -> Tensor:
    """Exact ``z* = argmin_{z≥0} ½ zᵀ G z + bᵀz`` for ``G = MᵀM`` (C×C) and ``b = Mᵀp`` (C,).

    ``G`` may be singular (zero, duplicate, parallel columns, ``d < C``); ``b`` must lie in the
    range of ``G``, as ``Mᵀp`` always does. Columns are scaled to unit norm, ``G`` is factored
    as ``AᵀA`` by an eigendecomposition (eigenvalues below ``1e-12·λ_max`` dropped), and the
    equivalent non-negative least-squares problem ``min_{z≥0} ‖Az − y‖``, ``Aᵀy = −b``, is
    solved exactly by Lawson–Hanson's active-set method. When several ``z`` are optimal any one
    is returned (``p + Mz`` is the same for all). Computed and returned in float64, on the
    device of ``gram``.

    ``G`` holds ``M``'s geometry only to ``sqrt(eps)``: two columns at an angle ``θ`` from
    (anti)parallel are resolved to a relative error of about ``1e-16/θ²`` and taken as parallel
    below ``θ ≈ 1e-6``. :func:`project` works from a QR factor of ``M`` instead (``1e-16/θ``).
    """
    if gram.ndim != 2 or gram.shape[0] != gram.shape[1] or b.shape != gram.shape[:1]:
        raise ValueError(f"need gram (C, C) and b (C,), got {tuple(gram.shape)}, {tuple(b.shape)}")
    device = gram.device
    G = gram.detach().to("cpu", torch.float64).numpy()
    bb = b.detach().to("cpu", torch.float64).numpy()
    if not (np.isfinite(G).all() and np.isfinite(bb).all()):
        raise ValueError("solve_dual: gram or b has non-finite entries")
    C = G.shape[0]
    z = np.zeros(C)
    s = np.sqrt(np.maximum(np.diag(G), 0.0))
    keep = s > _TINY  # zero columns: z_i = 0
    if keep.any():
        s = s[keep]
        Gn = G[np.ix_(keep, keep)] / np.outer(s, s)
        lam, V = np.linalg.eigh(0.5 * (Gn + Gn.T))
        rank = lam > _EIG_RTOL * max(lam.max(), 0.0)
        lam, V = lam[rank], V[:, rank]
        root = np.sqrt(lam)
        A = root[:, None] * V.T  # AᵀA = Gn on its range
        y = -(V.T @ (bb[keep] / s)) / root  # Aᵀy = −b/s on the range of Gn
        z[keep] = _solve_ls(A, y) / s
    return torch.from_numpy(z).to(device)


def _chunk_rows(C: int) -> int:
    return max(2 * (C + 1), _CHUNK_ELEMS // (C + 1))


def _factor(blocks: list[tuple[Tensor, Tensor]], C: int) -> np.ndarray:
    """``R`` of ``[M | p] = QR`` (float64), by QR of row chunks stacked on the running ``R``.

    ``blocks`` are ``(p_part, M_part)`` row blocks of one problem; ``RᵀR = [M | p]ᵀ[M | p]``
    but ``R`` keeps the small singular values of ``M`` to ``eps`` rather than ``sqrt(eps)``.
    """
    R: Tensor | None = None
    step = _chunk_rows(C)
    for p, M in blocks:
        for i in range(0, p.shape[0], step):
            X = torch.cat([M[i : i + step], p[i : i + step, None]], dim=1).to(torch.float64)
            if R is not None:
                X = torch.cat([R, X.to(R.device)], dim=0)
            R = torch.linalg.qr(X, mode="r")[1]
    if R is None:
        return np.zeros((0, C + 1))
    return R.cpu().numpy()


def _solve_blocks(blocks: list[tuple[Tensor, Tensor]], C: int) -> Tensor:
    """``z*`` (float64, CPU) of the QP whose rows are split into ``blocks``."""
    if C == 0:
        return torch.zeros(0, dtype=torch.float64)
    R = _factor(blocks, C)
    if not np.isfinite(R).all():
        raise ValueError("project: p or M has non-finite entries")
    # ‖Mz + p‖ = ‖R[:, :C] z + R[:, C]‖: the dual is min_{z≥0} ‖R[:, :C] z − (−R[:, C])‖
    return torch.from_numpy(_solve_ls(R[:, :C], -R[:, C]))


def _apply(p: Tensor, M: Tensor, z: Tensor, dtype: torch.dtype) -> Tensor:
    """``p + M z`` computed in float64 in row chunks, returned in ``dtype``."""
    d, C = M.shape
    out = torch.empty(d, dtype=dtype, device=p.device)
    z = z.to(M.device, torch.float64)
    step = _chunk_rows(C)
    for i in range(0, d, step):
        chunk = p[i : i + step].to(torch.float64) + M[i : i + step].to(torch.float64) @ z
        out[i : i + step] = chunk.to(dtype)
    return out


def project(p: Tensor, M: Tensor) -> tuple[Tensor, Tensor]:
    """GradMA's QP (eq. 2-4): ``p̃ = argmin ½‖p̃ − p‖²`` s.t. ``Mᵀp̃ ≥ 0``; returns ``(p̃, z*)``.

    ``p``: (d,); ``M``: (d, C), one constraint per column. The dual ``min_{z≥0} ‖Mz + p‖`` is
    reduced to ``C+1`` rows by a QR factorisation of ``[M | p]`` in float64 (row chunks of
    about 4 MiB, so memory stays bounded) and solved exactly by Lawson–Hanson's active-set
    method. ``p̃ = p + Mz*`` is computed in float64 and returned in ``p``'s dtype; ``z*`` (C,)
    is float64. With no columns, all-zero columns or ``p`` already feasible, ``z* = 0`` and
    ``p̃`` equals ``p`` exactly (a copy).
    """
    if p.ndim != 1 or M.ndim != 2 or M.shape[0] != p.shape[0]:
        raise ValueError(f"need p (d,) and M (d, C), got {tuple(p.shape)} and {tuple(M.shape)}")
    p, M = p.detach(), M.detach()
    z = _solve_blocks([(p, M)], M.shape[1]).to(p.device)
    if not bool((z > 0).any()):
        return p.clone(), z
    return _apply(p, M, z, p.dtype), z


def _column_trees(columns: list[Tree] | Tree, names: list[str], p: Tree) -> list[Tensor]:
    """Per leaf of ``p`` (in ``leaves`` order), its columns as a (C, *leaf.shape) tensor."""
    shapes = [leaf.shape for leaf in leaves(p)]
    if isinstance(columns, list):
        cols = [leaves(col) for col in columns]
        for col in cols:
            if [c.shape for c in col] != shapes:
                raise ValueError(f"every column tree must have p's leaves {names} and shapes")
        if not cols:
            return [torch.zeros((0, *s), dtype=torch.float64) for s in shapes]
        return [torch.stack([col[k] for col in cols]) for k in range(len(shapes))]
    stacked = leaves(columns)
    if len(stacked) != len(shapes) or any(
        c.ndim != len(s) + 1 or c.shape[1:] != s or c.shape[0] != stacked[0].shape[0]
        for c, s in zip(stacked, shapes, strict=True)
    ):
        raise ValueError(f"columns tree must have p's leaves {names} with a leading axis C")
    return stacked


def _names(tree: Tree, prefix: str = "") -> list[str]:
    out: list[str] = []
    for key, value in tree.items():
        out.extend(_names(value, f"{prefix}{key}/") if isinstance(value, dict) else [prefix + key])
    return out


def _rebuild(tree: Tree, values: list[Tensor]) -> Tree:
    """A tree shaped like ``tree`` whose leaves (in order) are ``values``."""
    it = iter(values)

    def build(node: Tree) -> Tree:
        return {k: build(v) if isinstance(v, dict) else next(it) for k, v in node.items()}

    return build(tree)


def project_tree(p: Tree, columns: list[Tree] | Tree, per_layer: bool = False) -> Tree:
    """:func:`project` on parameter trees (dicts of tensors, possibly nested).

    ``columns`` is a list of C trees shaped like ``p`` or one tree whose leaves carry a leading
    axis of size C. Default (the paper): one QP over all leaves as one flattened vector (never
    concatenated: the QR factorisation runs over the leaves in turn). ``per_layer=True`` (the
    reference code): one independent QP per leaf. Returns a new tree like ``p``, each leaf in
    its own dtype.
    """
    names = _names(p)
    ps = [leaf.detach() for leaf in leaves(p)]
    cols = [c.detach() for c in _column_trees(columns, names, p)]
    C = cols[0].shape[0] if cols else 0
    flat_p = [leaf.reshape(-1) for leaf in ps]
    # (n_leaf, C) views of the columns, no copy
    flat_M = [col.reshape(C, pl.numel()).T for col, pl in zip(cols, flat_p, strict=True)]
    blocks = list(zip(flat_p, flat_M, strict=True))
    if per_layer:
        zs = [_solve_blocks([block], C) for block in blocks]
    else:
        zs = [_solve_blocks(blocks, C)] * len(blocks)
    out = [
        _apply(pl, Ml, z, leaf.dtype).reshape(leaf.shape) if bool((z > 0).any()) else leaf.clone()
        for leaf, pl, Ml, z in zip(ps, flat_p, flat_M, zs, strict=True)
    ]
    return _rebuild(p, out)


def _subset_masks(C: int, device: torch.device) -> Tensor:
    """All 2^C subsets of range(C) as a (2^C, C) float64 0/1 tensor."""
    rows = list(itertools.product((0.0, 1.0), repeat=C))
    return torch.tensor(rows, dtype=torch.float64, device=device)


def _pinv_sym(H: Tensor, rtol: float) -> Tensor:
    """Pseudo-inverse of symmetric matrices (batched) by eigendecomposition."""
    lam, Q = torch.linalg.eigh(H)
    cut = rtol * lam.abs().amax(dim=-1, keepdim=True)
    keep = lam.abs() > cut
    inv = torch.where(keep, 1.0 / torch.where(keep, lam, torch.ones_like(lam)), 0.0)
    return (Q * inv.unsqueeze(-2)) @ Q.mT


def project_small(p_flat: Tensor, M: Tensor) -> Tensor:
    """:func:`project`'s ``p̃`` for few columns (C ≤ 4 intended, at most 6), vmap-friendly.

    Enumerates every active set ``S``: solves ``G_SS z_S = −b_S`` (pseudo-inverse, so singular
    ``G`` gives no NaN), sets ``z = 0`` off ``S``, keeps the candidates with ``z ≥ 0`` and
    ``(Gz + b) ≥ 0`` off ``S`` (KKT) and takes the one with the lowest dual objective, all with
    fixed shapes and ``torch.where`` (no ``.item()``, no data-dependent branches, no scipy).
    Columns are scaled to unit norm and ``b`` to ``max|b| = 1`` first, so the tolerances do
    not depend on the scale of ``p`` or ``M``. Float64 inside; returns ``p̃`` in ``p``'s dtype.

    Working from ``G`` (one pass over ``M``, about half the time of a QR factorisation), it
    resolves two columns at an angle ``θ`` from (anti)parallel to about ``1e-16/θ²``: exact
    for ``θ ≳ 1e-5``; below ``θ ≈ 1e-6`` they count as parallel (constraints then hold to
    about ``θ‖p‖``). Exact duplicates and exact multiples are handled exactly.
    """
    return _project_small(p_flat, M)


def _project_small(p_flat: Tensor, M: Tensor) -> Tensor:
    if p_flat.ndim != 1 or M.ndim != 2 or M.shape[0] != p_flat.shape[0]:
        raise ValueError(
            f"need p (d,) and M (d, C), got {tuple(p_flat.shape)} and {tuple(M.shape)}"
        )
    C = M.shape[1]
    if C > _SMALL_MAX_C:
        raise ValueError(f"project_small enumerates 2^C active sets: C ≤ {_SMALL_MAX_C}, got {C}")
    if C == 0:
        return p_flat.clone()
    p_flat, M = p_flat.detach(), M.detach()
    d = M.shape[0]
    # G = MᵀM, b = Mᵀp in float64 over row chunks (small buffers: no big float64 copy of M)
    G = torch.zeros(C, C, dtype=torch.float64, device=M.device)
    b = torch.zeros(C, dtype=torch.float64, device=M.device)
    for i in range(0, d, _SMALL_CHUNK):
        Mc = M[i : i + _SMALL_CHUNK].to(torch.float64)
        G = G + Mc.T @ Mc
        b = b + Mc.T @ p_flat[i : i + _SMALL_CHUNK].to(torch.float64)
    # a diverged step (NaN or Inf in p or M) solves a harmless system and returns NaN, so that
    # the round's divergence check sees it (eigh would raise on a non-finite matrix)
    ok = torch.isfinite(G).all() & torch.isfinite(b).all()
    G = torch.where(ok, G, torch.eye(C, dtype=torch.float64, device=M.device))
    b = torch.where(ok, b, torch.zeros_like(b))
    norms = torch.sqrt(torch.clamp(torch.diagonal(G), min=0.0))
    live = norms > _TINY
    inv_s = torch.where(live, 1.0 / torch.where(live, norms, torch.ones_like(norms)), 0.0)
    Gn = G * inv_s.unsqueeze(1) * inv_s.unsqueeze(0)
    Gn = 0.5 * (Gn + Gn.T)
    bn = b * inv_s
    scale = bn.abs().amax()
    scale = torch.where(scale > _TINY, scale, torch.ones_like(scale))
    bn = bn / scale

    masks = _subset_masks(C, p_flat.device)  # (K, C)
    K = masks.shape[0]
    eye = torch.eye(C, dtype=torch.float64, device=p_flat.device)
    H = masks.unsqueeze(2) * masks.unsqueeze(1) * Gn + (1.0 - masks).unsqueeze(2) * eye
    z = -(_pinv_sym(H, _EIG_RTOL) @ (masks * bn).unsqueeze(-1)).squeeze(-1) * masks
    grad = z @ Gn + bn  # (K, C); Gn symmetric
    tol = _SMALL_TOL
    valid = (
        (z >= -tol).all(dim=-1)
        & ((1.0 - masks) * grad >= -tol).all(dim=-1)
        & ((masks * grad).abs() <= 1e3 * tol).all(dim=-1)
    )
    z = torch.clamp(z, min=0.0)  # every candidate is now dual-feasible
    obj = 0.5 * ((z @ Gn) * z).sum(dim=-1) + z @ bn
    # valid candidates first, then the lowest objective (a fallback if rounding rejects all)
    rank = obj + torch.where(valid, 0.0, 4.0 * (obj.abs().amax() + 1.0))
    best = torch.argmin(rank)
    onehot = (torch.arange(K, device=p_flat.device) == best).to(torch.float64)
    z_best = (onehot.unsqueeze(1) * z).sum(dim=0) * scale * inv_s
    z_best = torch.where(ok, z_best, torch.full_like(z_best, math.nan))
    pieces = [
        (
            p_flat[i : i + _SMALL_CHUNK].to(torch.float64)
            + M[i : i + _SMALL_CHUNK].to(torch.float64) @ z_best
        ).to(p_flat.dtype)
        for i in range(0, d, _SMALL_CHUNK)
    ]
    return torch.cat(pieces) if len(pieces) > 1 else pieces[0]
