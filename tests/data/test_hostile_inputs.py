"""Hostile files: whatever bytes a loader is given, it answers with one DataError line.

Property-based (hypothesis): truncations and random mutations of valid IDX, CIFAR pickle and
LEAF JSON files, and random TOML text for the config reader.
"""

import gzip
import json
import pickle
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fedretain.data.cifar import load_pickle
from fedretain.data.idx import read_idx
from fedretain.data.leaf import load_femnist
from fedretain.errors import ConfigError, DataError
from fedretain.recipe.config import load_config

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _idx_bytes() -> bytes:
    images = np.arange(3 * 4 * 5, dtype=np.uint8).reshape(3, 4, 5)
    return struct.pack(">I", 0x803) + struct.pack(">III", 3, 4, 5) + images.tobytes()


def _cifar_bytes() -> bytes:
    batch = {b"data": np.zeros((2, 3072), dtype=np.uint8), b"labels": [0, 1]}
    return pickle.dumps(batch, protocol=2)


def _leaf_text() -> str:
    return json.dumps(
        {"users": ["a"], "num_samples": [1], "user_data": {"a": {"x": [[0.5] * 784], "y": [3]}}}
    )


def _mutate(data: bytes, cut: int, flips: list[tuple[int, int]]) -> bytes:
    out = bytearray(data[: cut % (len(data) + 1)])
    for pos, value in flips:
        if out:
            out[pos % len(out)] = value
    return bytes(out)


MUTATION = (
    st.integers(0, 10_000),
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=4),
)


def _one_line(e: Exception) -> None:
    assert str(e) and "\n" not in str(e)


def test_valid_fixtures_load(tmp_path):
    (tmp_path / "ok-idx3-ubyte").write_bytes(_idx_bytes())
    assert read_idx(tmp_path / "ok-idx3-ubyte").shape == (3, 4, 5)
    (tmp_path / "batch").write_bytes(_cifar_bytes())
    assert load_pickle(tmp_path / "batch")[b"labels"] == [0, 1]


@SETTINGS
@given(*MUTATION, st.booleans())
def test_mutated_idx_loads_or_fails_with_one_line(tmp_path, cut, flips, gz):
    data = _mutate(_idx_bytes(), cut, flips)
    path = tmp_path / ("f-idx3-ubyte.gz" if gz else "f-idx3-ubyte")
    path.write_bytes(gzip.compress(data) if gz else data)
    try:
        arr = read_idx(path)
    except DataError as e:
        _one_line(e)
    else:
        assert arr.size == int(np.prod(arr.shape))


@SETTINGS
@given(*MUTATION)
def test_mutated_cifar_pickle_fails_with_one_line(tmp_path, cut, flips):
    path = tmp_path / "data_batch_1"
    path.write_bytes(_mutate(_cifar_bytes(), cut, flips))
    try:
        load_pickle(path)
    except DataError as e:
        _one_line(e)


@SETTINGS
@given(st.integers(0, 400), st.text(max_size=5))
def test_mutated_leaf_json_fails_with_one_line(tmp_path, cut, junk):
    for split in ("train", "test"):
        (tmp_path / split).mkdir(exist_ok=True)
        (tmp_path / split / "all_data.json").write_text(_leaf_text()[:cut] + junk)
    try:
        load_femnist(tmp_path)
    except DataError as e:
        _one_line(e)


@SETTINGS
@given(st.text(max_size=60))
def test_random_toml_is_valid_or_one_line(tmp_path, text):
    path = tmp_path / "exp.toml"
    path.write_text(text)
    try:
        load_config(path)
    except ConfigError as e:
        _one_line(e)


def test_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, (f"touch {marker}",))

    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": Evil()}))
    with pytest.raises(DataError, match=r"(os|posix)\.system"):
        load_pickle(path)
    assert not marker.exists()
