"""GradMA's QP (fedretain/algorithms/qp.py) against independent solvers and the KKT conditions.

Reference: ``quadprog`` on the primal ``min ½‖x‖² − pᵀx`` s.t. ``Mᵀx ≥ 0`` (identity Hessian, so
degenerate constraint columns are fine for it); where it refuses an instance, scipy's NNLS on
the matrix ``M`` itself, ``min_{z≥0} ‖Mz + p‖``. The KKT conditions are checked directly too,
which by convexity proves optimality on their own.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import nnls

from fedretain.algorithms.qp import project, project_small, project_tree, solve_dual

quadprog = pytest.importorskip("quadprog")

KINDS = [
    "random",
    "zero_col",
    "dup_col",
    "pos_parallel",
    "neg_parallel",
    "feasible",
    "p_zero",
    "wide",
    "mixed_scale",
    "all_zero",
]


def instance(seed: int, d: int, C: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """A random ``(p, M)`` with the degeneracy ``kind`` (float64 numpy)."""
    rng = np.random.default_rng(seed)
    if kind == "wide":
        d = max(1, min(d, C - 1)) if C > 1 else d
    M = rng.standard_normal((d, C))
    p = rng.standard_normal(d)
    j, k = (0, 1) if C > 1 else (0, 0)
    if kind == "zero_col":
        M[:, j] = 0.0
    elif kind == "dup_col" and C > 1:
        M[:, k] = M[:, j]
    elif kind == "pos_parallel" and C > 1:
        M[:, k] = 2.5 * M[:, j]
    elif kind == "neg_parallel" and C > 1:
        M[:, k] = -0.4 * M[:, j]
    elif kind == "feasible":
        M *= np.sign(M.T @ p)[None, :]  # every ⟨p, M_i⟩ > 0
    elif kind == "p_zero":
        p[:] = 0.0
    elif kind == "mixed_scale":
        M *= 10.0 ** rng.choice([-8.0, 0.0, 8.0], size=C)[None, :]
    elif kind == "all_zero":
        M[:] = 0.0
    return p, M


def reference(p: np.ndarray, M: np.ndarray) -> np.ndarray:
    """The projection by quadprog, or by scipy's NNLS where quadprog refuses.

    Columns are scaled to unit norm first (the feasible set is unchanged): given columns of
    norms 1e-8 and 1e8 together, quadprog returns points up to 2% farther from p than the optimum.
    """
    norms = np.linalg.norm(M, axis=0)
    unit = M[:, norms > 0] / norms[norms > 0]  # same constraints; quadprog needs them scaled
    if unit.shape[1] == 0:
        return p.copy()
    try:
        return quadprog.solve_qp(np.eye(len(p)), p, unit, np.zeros(unit.shape[1]))[0]
    except ValueError:
        z, _ = nnls(M, -p)
        return p + M @ z


def assert_kkt(p: np.ndarray, M: np.ndarray, pt: np.ndarray, z: np.ndarray, tol: float) -> None:
    """Stationarity, primal/dual feasibility and complementary slackness, scale-free."""
    scale = max(np.linalg.norm(p), 1e-300)
    norms = np.linalg.norm(M, axis=0)
    unit = M / np.where(norms > 0, norms, 1.0)
    assert np.isfinite(pt).all() and np.isfinite(z).all()
    assert (z >= 0).all()
    assert np.linalg.norm(pt - (p + M @ z)) <= tol * scale
    slack = unit.T @ pt  # ⟨p̃, M_i⟩ / ‖M_i‖
    assert (slack >= -tol * scale).all()
    active = z * norms > 1e-9 * scale
    assert (np.abs(slack[active]) <= tol * scale).all()


def close(a: np.ndarray, b: np.ndarray, p: np.ndarray, tol: float = 1e-6) -> bool:
    return bool(np.linalg.norm(a - b) <= tol * max(np.linalg.norm(p), 1.0))


instances = st.tuples(
    st.integers(0, 2**31 - 1), st.integers(5, 60), st.integers(1, 12), st.sampled_from(KINDS)
)


@settings(max_examples=40, deadline=None)
@given(instances)
def test_project_matches_quadprog_and_kkt(args):
    p, M = instance(*args)
    pt, z = project(torch.from_numpy(p), torch.from_numpy(M))
    pt, z = pt.numpy(), z.numpy()
    assert z.dtype == np.float64 and z.shape == (M.shape[1],)
    assert_kkt(p, M, pt, z, 1e-8)
    assert close(pt, reference(p, M), p)


@settings(max_examples=40, deadline=None)
@given(instances.filter(lambda a: a[2] <= 4))
def test_project_small_equals_project(args):
    p, M = instance(*args)
    small = project_small(torch.from_numpy(p), torch.from_numpy(M)).numpy()
    full = project(torch.from_numpy(p), torch.from_numpy(M))[0].numpy()
    assert np.isfinite(small).all()
    assert close(small, full, p)
    assert close(small, reference(p, M), p)


@settings(max_examples=40, deadline=None)
@given(instances)
def test_solve_dual_matches_scipy_nnls(args):
    p, M = instance(*args)
    G, b = M.T @ M, M.T @ p
    z = solve_dual(torch.from_numpy(G), torch.from_numpy(b)).numpy()
    z_ref, _ = nnls(M, -p)
    assert (z >= 0).all()
    assert close(p + M @ z, p + M @ z_ref, p)
    f = lambda v: 0.5 * v @ G @ v + b @ v  # noqa: E731
    assert f(z) <= f(z_ref) + 1e-9 * max(p @ p, 1.0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("d,C", [(3, 1), (7, 2), (4, 3), (2, 5), (30, 4), (40, 10)])
def test_degenerate_cases_all_solvers(kind, d, C):
    p, M = instance(d * 100 + C, d, C, kind)
    pt, z = project(torch.from_numpy(p), torch.from_numpy(M))
    assert_kkt(p, M, pt.numpy(), z.numpy(), 1e-8)
    assert close(pt.numpy(), reference(p, M), p)
    if C <= 4:
        small = project_small(torch.from_numpy(p), torch.from_numpy(M)).numpy()
        assert close(small, pt.numpy(), p)


def test_feasible_p_is_returned_unchanged():
    p, M = instance(1, 20, 5, "feasible")
    pt, z = project(torch.from_numpy(p), torch.from_numpy(M))
    assert torch.equal(pt, torch.from_numpy(p)) and torch.equal(z, torch.zeros(5, dtype=z.dtype))
    small = project_small(torch.from_numpy(p), torch.from_numpy(M[:, :3]))
    assert torch.allclose(small, torch.from_numpy(p), rtol=0, atol=1e-15)


@pytest.mark.parametrize("fn", ["project", "small"])
def test_no_columns_zero_columns_and_zero_p(fn):
    p = torch.randn(9, generator=torch.Generator().manual_seed(0))
    solve = (lambda p, M: project(p, M)[0]) if fn == "project" else project_small
    assert torch.equal(solve(p, torch.zeros(9, 0)), p)
    assert torch.equal(solve(p, torch.zeros(9, 3)), p)
    assert torch.equal(solve(torch.zeros(9), torch.randn(9, 3)), torch.zeros(9))


def test_one_column_closed_form():
    # p̃ = p − min(0, ⟨p, m⟩) m / ‖m‖²: ⟨p, m⟩ = −1.5, ‖m‖² = 2, z = 0.75
    p = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    m = torch.tensor([0.0, 1.0, 1.0], dtype=torch.float64)
    pt, z = project(p, m[:, None])
    assert torch.allclose(pt, torch.tensor([1.0, -1.25, 1.25], dtype=torch.float64))
    assert torch.allclose(z, torch.tensor([0.75], dtype=torch.float64))


def test_duplicate_and_parallel_columns_reduce_to_one_constraint():
    p, M = instance(3, 25, 2, "random")
    one = reference(p, M[:, :1])
    for other in (M[:, 0], 3.0 * M[:, 0], 1e-6 * M[:, 0]):
        M2 = np.stack([M[:, 0], other], axis=1)
        assert close(project(torch.from_numpy(p), torch.from_numpy(M2))[0].numpy(), one, p)
    # a negative multiple makes it an equality: ⟨p̃, m⟩ = 0
    M3 = np.stack([M[:, 0], -2.0 * M[:, 0]], axis=1)
    pt = project(torch.from_numpy(p), torch.from_numpy(M3))[0].numpy()
    m = M[:, 0]
    assert close(pt, p - (p @ m) / (m @ m) * m, p)


@pytest.mark.parametrize("a", [1e-8, 1.0, 1e8])
@pytest.mark.parametrize("c", [1e-8, 1e8])
def test_scale_invariance(a, c):
    p, M = instance(5, 30, 6, "random")
    base = project(torch.from_numpy(p), torch.from_numpy(M))[0].numpy()
    pt, z = project(torch.from_numpy(a * p), torch.from_numpy(c * M))
    assert np.isfinite(pt.numpy()).all() and np.isfinite(z.numpy()).all()
    assert np.linalg.norm(pt.numpy() - a * base) <= 1e-9 * a * np.linalg.norm(p)
    small = project_small(torch.from_numpy(a * p), torch.from_numpy(c * M[:, :3])).numpy()
    ref = project(torch.from_numpy(p), torch.from_numpy(M[:, :3]))[0].numpy()
    assert np.linalg.norm(small - a * ref) <= 1e-9 * a * np.linalg.norm(p)


def test_float32_in_float32_out():
    p, M = instance(7, 50, 4, "random")
    p32, M32 = torch.from_numpy(p).float(), torch.from_numpy(M).float()
    pt, z = project(p32, M32)
    assert pt.dtype == torch.float32 and z.dtype == torch.float64
    ref = reference(p32.double().numpy(), M32.double().numpy())
    assert np.linalg.norm(pt.double().numpy() - ref) <= 1e-6 * np.linalg.norm(p)
    small = project_small(p32, M32[:, :3])
    assert small.dtype == torch.float32
    ref3 = reference(p32.double().numpy(), M32[:, :3].double().numpy())
    assert np.linalg.norm(small.double().numpy() - ref3) <= 1e-6 * np.linalg.norm(p)


def test_project_chunks_rows(monkeypatch):
    import fedretain.algorithms.qp as qp

    p, M = instance(11, 57, 5, "random")
    whole = project(torch.from_numpy(p), torch.from_numpy(M))[0]
    monkeypatch.setattr(qp, "_CHUNK_ELEMS", 13)  # 2 rows per chunk
    assert torch.allclose(project(torch.from_numpy(p), torch.from_numpy(M))[0], whole)


def test_vmap_project_small_equals_loop():
    kinds = ["random", "dup_col", "neg_parallel", "feasible", "zero_col"]
    pairs = [instance(20 + i, 50, 3, kind) for i, kind in enumerate(kinds)]
    P = torch.from_numpy(np.stack([p for p, _ in pairs])).float()
    Ms = torch.from_numpy(np.stack([M for _, M in pairs])).float()
    batched = torch.func.vmap(project_small)(P, Ms)
    looped = torch.stack([project_small(P[i], Ms[i]) for i in range(5)])
    assert batched.shape == (5, 50) and batched.dtype == torch.float32
    assert torch.allclose(batched, looped, rtol=1e-6, atol=1e-6)
    for i, (p, M) in enumerate(pairs):  # float64: casting to float32 perturbs the degeneracies
        expected = project(torch.from_numpy(p), torch.from_numpy(M))[0]
        assert torch.allclose(project_small(torch.from_numpy(p), torch.from_numpy(M)), expected)
        assert torch.allclose(looped[i].double(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("theta", [1e-2, 1e-4, 1e-6, 1e-8])
def test_nearly_parallel_columns(theta, sign):
    # M_2 = ±M_1 + θ‖M_1‖u (u ⟂ M_1): for the minus sign the feasible set is a wedge of angle θ,
    # which tends to half of the hyperplane ⟨x, M_1⟩ = 0, not all of it, as θ → 0
    rng = np.random.default_rng(int(theta**-0.5))
    M = rng.standard_normal((40, 3))
    m = M[:, 0] / np.linalg.norm(M[:, 0])
    u = rng.standard_normal(40)
    u -= (u @ m) * m
    u /= np.linalg.norm(u)
    M[:, 1] = sign * M[:, 0] + theta * np.linalg.norm(M[:, 0]) * u
    p = rng.standard_normal(40) - 3.0 * m - 3.0 * u  # outside the wedge, across its edge
    pt, z = project(torch.from_numpy(p), torch.from_numpy(M))
    # on the edge z ~ 1/θ, and p + Mz cancels to about 1e-15/θ: the float64 floor
    tol = max(1e-8, 1e-14 / theta)
    assert_kkt(p, M, pt.numpy(), z.numpy(), tol)
    assert close(pt.numpy(), reference(p, M), p, tol=max(1e-6, tol))  # the QR factor keeps θ
    small = project_small(torch.from_numpy(p), torch.from_numpy(M)).numpy()
    # the Gram matrix keeps θ² only: exact down to θ ≈ 1e-5, then constraints hold to ~θ
    unit = M / np.linalg.norm(M, axis=0)
    assert np.isfinite(small).all() and (unit.T @ small >= -10 * theta * np.linalg.norm(p)).all()
    if theta >= 1e-4:
        assert close(small, pt.numpy(), p, tol=1e-6)
    if sign < 0:  # the wedge's edge: both constraints active, far from the hyperplane's answer
        assert np.abs(unit[:, :2].T @ pt.numpy()).max() <= tol * np.linalg.norm(p)
        assert not close(pt.numpy(), p - (p @ m) * m, p, tol=0.1)


def test_project_small_rejects_many_columns():
    with pytest.raises(ValueError, match="C ≤"):
        project_small(torch.zeros(10), torch.zeros(10, 7))


def test_bad_shapes_raise():
    with pytest.raises(ValueError):
        project(torch.zeros(4), torch.zeros(5, 2))
    with pytest.raises(ValueError):
        solve_dual(torch.eye(3), torch.zeros(2))
    with pytest.raises(ValueError, match="non-finite"):
        solve_dual(torch.eye(2), torch.tensor([float("nan"), 0.0]))


# ---------------------------------------------------------------- trees


def tree_instance(seed: int, C: int = 3):
    g = torch.Generator().manual_seed(seed)
    shapes = {"conv": {"weight": (4, 3), "bias": (4,)}, "fc": (6,)}

    def rand_tree(lead=()):
        return {
            "conv": {k: torch.randn(*lead, *s, generator=g) for k, s in shapes["conv"].items()},
            "fc": torch.randn(*lead, *shapes["fc"], generator=g),
        }

    p = rand_tree()
    stacked = rand_tree((C,))
    as_list = [
        {"conv": {k: v[i] for k, v in stacked["conv"].items()}, "fc": stacked["fc"][i]}
        for i in range(C)
    ]
    return p, stacked, as_list


def flat(tree) -> torch.Tensor:
    return torch.cat([tree["conv"]["weight"].reshape(-1), tree["conv"]["bias"], tree["fc"]])


def leaf_pairs(p, cols):
    return [
        (p["conv"]["weight"].reshape(-1), cols["conv"]["weight"].reshape(len(cols["fc"]), -1).T),
        (p["conv"]["bias"], cols["conv"]["bias"].T),
        (p["fc"], cols["fc"].T),
    ]


def test_project_tree_whole_vector_is_project_on_the_flat_vector():
    p, stacked, as_list = tree_instance(0)
    out = project_tree(p, stacked)
    assert out["conv"]["weight"].shape == (4, 3) and out["conv"]["weight"].dtype == torch.float32
    M = torch.stack([flat(c) for c in as_list], dim=1)
    expected = project(flat(p), M)[0]
    assert torch.allclose(flat(out), expected, atol=1e-6)
    assert torch.allclose(flat(project_tree(p, as_list)), flat(out))


def test_project_tree_per_layer_is_one_qp_per_leaf():
    p, stacked, as_list = tree_instance(1)
    out = project_tree(p, stacked, per_layer=True)
    expected = torch.cat([project(pl, Ml)[0] for pl, Ml in leaf_pairs(p, stacked)])
    assert torch.allclose(flat(out), expected, atol=1e-6)
    assert torch.allclose(flat(project_tree(p, as_list, per_layer=True)), flat(out))


def test_per_layer_and_whole_vector_differ_and_each_meets_its_constraints():
    p, stacked, _ = tree_instance(2)
    whole = project_tree(p, stacked)
    layer = project_tree(p, stacked, per_layer=True)
    assert (flat(whole) - flat(layer)).norm() > 1e-2
    M = torch.cat([Ml for _, Ml in leaf_pairs(p, stacked)])
    assert (M.T @ flat(whole) >= -1e-5).all()  # global constraints
    layer_slacks = [Ml.T @ pl for pl, Ml in leaf_pairs(layer, stacked)]
    assert all((s >= -1e-5).all() for s in layer_slacks)  # every layer's own constraints
    assert (M.T @ flat(layer) >= -1e-5).all()  # layer-wise feasible implies globally feasible
    # the whole-vector answer does not meet the layer-wise constraints here
    whole_slacks = torch.cat([Ml.T @ pl for pl, Ml in leaf_pairs(whole, stacked)])
    assert (whole_slacks < -1e-3).any()
    # and it is the closer of the two to p
    assert (flat(whole) - flat(p)).norm() < (flat(layer) - flat(p)).norm()


def test_project_tree_without_columns_copies_p():
    p, _, _ = tree_instance(3)
    for cols in ([], {"conv": {"weight": torch.zeros(0, 4, 3), "bias": torch.zeros(0, 4)},
                      "fc": torch.zeros(0, 6)}):  # fmt: skip
        for per_layer in (False, True):
            out = project_tree(p, cols, per_layer=per_layer)
            assert torch.equal(flat(out), flat(p))
            assert out["fc"] is not p["fc"]


def test_project_tree_flat_dict_and_mixed_dtypes():
    g = torch.Generator().manual_seed(4)
    p = {"a": torch.randn(5, generator=g), "b": torch.randn(2, 2, generator=g).double()}
    cols = {"a": torch.randn(2, 5, generator=g), "b": torch.randn(2, 2, 2, generator=g).double()}
    out = project_tree(p, cols)
    assert out["a"].dtype == torch.float32 and out["b"].dtype == torch.float64
    pf = torch.cat([p["a"].double(), p["b"].reshape(-1)])
    M = torch.cat([cols["a"].double(), cols["b"].reshape(2, -1)], dim=1).T
    expected = project(pf, M)[0]
    assert torch.allclose(torch.cat([out["a"].double(), out["b"].reshape(-1)]), expected, atol=1e-6)


def test_project_tree_rejects_mismatched_columns():
    p, stacked, as_list = tree_instance(5)
    with pytest.raises(ValueError):
        project_tree(p, [{"conv": as_list[0]["conv"], "fc": torch.zeros(7)}])
    with pytest.raises(ValueError):
        project_tree(p, {"conv": stacked["conv"], "fc": torch.zeros(2, 6)})


@pytest.mark.parametrize("where", ["p", "M"])
def test_a_diverged_step_gives_nan_for_the_divergence_check_not_an_error(where):
    """NaN or Inf in the gradient or the memory (a step at too large a learning rate) comes back
    as NaN, which the round's divergence check reports, instead of eigh failing on it; also
    under vmap."""
    rng = np.random.default_rng(0)
    p = torch.tensor(rng.normal(size=20))
    M = torch.tensor(rng.normal(size=(20, 3)))
    (p if where == "p" else M)[3] = math.inf
    assert torch.isnan(project_small(p, M)).all()
    batch = torch.stack([p, torch.tensor(rng.normal(size=20))])
    out = torch.vmap(project_small, in_dims=(0, None))(batch, M)
    assert torch.isnan(out[0]).all()
    assert torch.isfinite(out[1]).all() == (where == "p")
