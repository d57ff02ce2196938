"""FEMNIST in LEAF's JSON format."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from fedretain.data.datasets import load_dataset
from fedretain.errors import DataError


def user_block(rng: np.random.Generator, n: int, first_label: int) -> dict:
    x = rng.random((n, 784)).round(4)
    x[:, 0] = 1.0  # white background pixel
    x[:, 1] = 0.0
    x[:, 2] = 0.5  # round(127.5) -> 128
    return {"x": x.tolist(), "y": [(first_label + i) % 62 for i in range(n)]}


def write_leaf(folder: Path, name: str, users: dict[str, tuple[int, int]], seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    doc = {"users": [], "num_samples": [], "user_data": {}}
    for user, (n, first) in users.items():
        doc["users"].append(user)
        doc["num_samples"].append(n)
        doc["user_data"][user] = user_block(rng, n, first)
    (folder / name).write_text(json.dumps(doc))
    return doc


def make_femnist(root: Path) -> tuple[dict, dict, dict]:
    a = write_leaf(root / "train", "all_data_0_niid_train.json", {"f0": (3, 0), "f1": (2, 60)})
    b = write_leaf(root / "train", "all_data_1_niid_train.json", {"f2": (4, 10)}, seed=1)
    t = write_leaf(root / "test", "all_data_0_niid_test.json", {"f2": (1, 5), "f0": (2, 7)}, seed=2)
    return a, b, t


def test_femnist(tmp_path: Path) -> None:
    a, _, t = make_femnist(tmp_path)
    data = load_dataset("femnist", tmp_path)
    assert data.name == "femnist" and data.num_classes == 62
    assert data.class_names is not None and data.class_names[10] == "A"
    assert data.class_names[61] == "z"
    assert data.x_train.shape == (9, 1, 28, 28) and data.x_train.dtype == torch.uint8
    assert data.x_test.shape == (3, 1, 28, 28) and data.y_test.dtype == torch.int64
    assert data.y_train.tolist() == [0, 1, 2, 60, 61, 10, 11, 12, 13]
    assert data.groups is not None and data.groups.dtype == np.int64
    assert data.groups.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert data.test_groups is not None and data.test_groups.tolist() == [2, 0, 0]
    pixels = data.x_train[:, 0].reshape(9, -1)
    assert (pixels[:, 0] == 255).all() and (pixels[:, 1] == 0).all()
    assert (pixels[:, 2] == 128).all()
    expected = np.rint(np.asarray(a["user_data"]["f0"]["x"][1]) * 255).astype(np.uint8)
    np.testing.assert_array_equal(data.x_train[1, 0].numpy().ravel(), expected)
    assert data.y_test.tolist() == t["user_data"]["f2"]["y"] + t["user_data"]["f0"]["y"]


def test_femnist_invert(tmp_path: Path) -> None:
    make_femnist(tmp_path)
    plain = load_dataset("femnist", tmp_path)
    inverted = load_dataset("femnist", tmp_path, invert=True)
    assert torch.equal(inverted.x_train, 255 - plain.x_train)
    assert (inverted.x_train[:, 0, 0, 0] == 0).all()


def test_femnist_malformed_json(tmp_path: Path) -> None:
    make_femnist(tmp_path)
    bad = tmp_path / "train" / "all_data_1_niid_train.json"
    bad.write_text(bad.read_text()[:-100])
    with pytest.raises(DataError) as err:
        load_dataset("femnist", tmp_path)
    assert str(bad) in str(err.value) and "malformed" in str(err.value)


def test_femnist_missing_keys(tmp_path: Path) -> None:
    make_femnist(tmp_path)
    bad = tmp_path / "test" / "all_data_0_niid_test.json"
    bad.write_text(json.dumps({"users": ["u"], "num_samples": [1]}))
    with pytest.raises(DataError, match=r"'users' and 'user_data'") as err:
        load_dataset("femnist", tmp_path)
    assert str(bad) in str(err.value)
    bad.write_text(json.dumps({"users": ["u"], "user_data": {"u": {"x": [[0.5] * 784]}}}))
    with pytest.raises(DataError, match=r"user 'u'"):
        load_dataset("femnist", tmp_path)
    bad.write_text(json.dumps({"users": ["u"], "user_data": {"u": {"x": [[0.5] * 10], "y": [1]}}}))
    with pytest.raises(DataError, match=r"784-value images"):
        load_dataset("femnist", tmp_path)
    bad.write_text(
        json.dumps({"users": ["u"], "user_data": {"u": {"x": [[0.5] * 784], "y": [62]}}})
    )
    with pytest.raises(DataError, match=r"0..61"):
        load_dataset("femnist", tmp_path)


def test_femnist_needs_train_and_test(tmp_path: Path) -> None:
    write_leaf(tmp_path / "train", "a.json", {"u": (1, 0)})
    with pytest.raises(DataError, match=r"test does not exist"):
        load_dataset("femnist", tmp_path)
    (tmp_path / "test").mkdir()
    with pytest.raises(DataError, match=r"no \*\.json files"):
        load_dataset("femnist", tmp_path)
