"""Trees travel through Flower records exactly: values, dtypes, shapes, nested and empty keys."""

import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")
import torch
from flwr.app import ArrayRecord, RecordDict
from hypothesis import given, settings
from hypothesis import strategies as st

from fedretain.flower.records import (
    payload_to_records,
    record_to_tree,
    records_to_payload,
    tree_to_record,
)

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
    torch.complex64,
]


def assert_same(a, b):
    assert type(a) is type(b)
    if isinstance(a, dict):
        assert list(a) == list(b)  # same keys in the same order
        for k in a:
            assert_same(a[k], b[k])
    else:
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)


def test_round_trip_is_exact_with_nested_keys_dtypes_and_empty_subtrees():
    tree = {
        "fc.weight": torch.randn(3, 4),
        "block": {"conv": {"w": torch.randn(2, 1, 3, 3, dtype=torch.float64)}, "empty": {}},
        "steps": torch.tensor(7),  # 0-d int64
        "seen": torch.tensor([True, False]),
        "half": torch.randn(5).to(torch.bfloat16),  # no numpy dtype: raw bytes
        "none": torch.zeros(0, 3, dtype=torch.float16),
    }
    record = tree_to_record(tree)
    assert isinstance(record, ArrayRecord)
    assert list(record) == [
        "fc.weight",
        "block/conv/w",
        "block/empty/",
        "steps",
        "seen",
        "half",
        "none",
    ]
    assert record["fc.weight"].stype == "numpy.ndarray"  # readable by any Flower code
    assert record["half"].stype == "torch.raw" and record["half"].dtype == "bfloat16"
    assert_same(record_to_tree(record), tree)


def test_each_payload_key_is_one_named_record_and_a_bare_tensor_survives():
    payload = {"x": {"w": torch.randn(2, 2)}, "buffers": {}, "n": torch.tensor(3.5)}
    records = payload_to_records(payload)
    assert list(records) == ["x", "buffers", "n"]
    assert len(records["buffers"]) == 0 and list(records["n"]) == [""]
    content = RecordDict(records)
    assert_same(records_to_payload(content, ["x", "buffers", "n"]), payload)


def test_bad_keys_and_missing_records_are_clear_errors():
    with pytest.raises(ValueError, match="keys must be non-empty strings without '/'"):
        tree_to_record({"a/b": torch.zeros(1)})
    with pytest.raises(ValueError, match="not a tensor"):
        tree_to_record({"a": 1.0})
    with pytest.raises(ValueError, match="reserved"):
        payload_to_records({"fedretain.round": {}})
    with pytest.raises(ValueError, match="no record 'c'"):
        records_to_payload(RecordDict({"x": ArrayRecord()}), ["x", "c"])


keys = st.text("abcxyz._-", min_size=1, max_size=4)
leaves = st.builds(
    lambda dtype, shape, seed: (
        torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 10
    ).to(dtype),
    st.sampled_from(DTYPES),
    st.lists(st.integers(0, 3), max_size=3).map(tuple),
    st.integers(0, 2**16),
)
trees = st.recursive(
    st.dictionaries(keys, leaves, max_size=3),
    lambda children: st.dictionaries(keys, st.one_of(leaves, children), max_size=3),
    max_leaves=8,
)


@settings(max_examples=40, deadline=None)
@given(trees)
def test_any_tree_round_trips(tree):
    assert_same(record_to_tree(tree_to_record(tree)), tree)
