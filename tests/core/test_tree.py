import torch

from fedretain.core.tree import (
    finite_rows,
    flatten,
    tree_allfinite,
    tree_bytes,
    tree_map,
    tree_stack,
    tree_unstack,
    tree_vdot,
    tree_weighted_mean,
    tree_where,
    unflatten,
)

TREE = {"a": torch.ones(2, 3), "b": {"c": torch.arange(4.0), "d": torch.zeros(())}}


def test_map_keeps_structure_and_does_not_mutate():
    out = tree_map(lambda x: x + 1, TREE)
    assert set(out) == {"a", "b"} and set(out["b"]) == {"c", "d"}
    assert torch.equal(TREE["a"], torch.ones(2, 3))
    assert torch.equal(out["b"]["c"], torch.arange(1.0, 5.0))


def test_flatten_roundtrip():
    flat = flatten(TREE)
    assert set(flat) == {"a", "b/c", "b/d"}
    back = unflatten(flat)
    assert torch.equal(back["b"]["c"], TREE["b"]["c"])


def test_stack_unstack_and_weighted_mean():
    trees = [tree_map(lambda x, k=k: x * k, TREE) for k in (1.0, 3.0)]
    stacked = tree_stack(trees)
    assert stacked["a"].shape == (2, 2, 3)
    assert torch.equal(tree_unstack(stacked, 2)[1]["a"], 3 * torch.ones(2, 3))
    mean = tree_weighted_mean(stacked, torch.tensor([1.0, 3.0]))  # (1·1 + 3·3)/4 = 2.5
    assert torch.allclose(mean["a"], torch.full((2, 3), 2.5))


def test_weighted_mean_of_integer_buffers_stays_integer():
    stacked = {"n": torch.tensor([2, 4])}
    mean = tree_weighted_mean(stacked, torch.tensor([1.0, 1.0]))
    assert mean["n"].dtype == torch.int64 and int(mean["n"]) == 3


def test_vdot_where_and_bytes():
    assert float(tree_vdot(TREE, TREE)) == 6 + (0 + 1 + 4 + 9)
    other = tree_map(torch.zeros_like, TREE)
    assert torch.equal(tree_where(torch.tensor(False), TREE, other)["a"], torch.zeros(2, 3))
    assert tree_bytes(TREE) == (6 + 4 + 1) * 4


def test_finiteness_checks_see_nan_inf_and_survive_overflowing_sums():
    big = torch.full((2, 4), 3e38)  # every value finite, every row sum overflows
    assert tree_allfinite({"a": big})
    assert finite_rows({"a": big}, 2).tolist() == [True, True]
    bad = big.clone()
    bad[1, 2] = float("nan")
    assert not tree_allfinite({"a": {"b": bad}})
    assert finite_rows({"a": bad, "n": torch.zeros(2, dtype=torch.int64)}, 2).tolist() == [
        True,
        False,
    ]
    inf_minus_inf = torch.tensor([[float("inf"), -float("inf")], [1.0, 2.0]])
    assert finite_rows({"a": inf_minus_inf}, 2).tolist() == [False, True]
