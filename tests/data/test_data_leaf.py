"""FEMNIST in LEAF's JSON format."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fedretain.data.datasets import load_dataset
from fedretain.errors import ConfigError, DataError


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
    with pytest.raises(DataError, match=r"784-value \(28x28\) image per label"):
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


# ---------------------------------------------------------------- TensorFlow Federated's HDF5


def write_tff(root: Path, split: str, users: dict[str, tuple[int, int]], seed: int = 0) -> dict:
    """One of TFF's FEMNIST files: ``examples/<writer>/{pixels,label}``, pixels (n, 28, 28)
    floats in 0..1 with the same fixed pixels as :func:`user_block`, labels int32."""
    h5py = pytest.importorskip("h5py")
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    written = {}
    with h5py.File(root / f"fed_emnist_{split}.h5", "w") as f:
        for user, (n, first) in users.items():
            block = user_block(rng, n, first)
            x = np.asarray(block["x"], np.float32).reshape(n, 28, 28)
            g = f.create_group(f"examples/{user}")
            g["pixels"] = x
            g["label"] = np.asarray(block["y"], np.int32)
            written[user] = (x, block["y"])
    return written


def make_tff(root: Path) -> tuple[dict, dict]:
    # written out of order: the loader reads writers sorted, as TFF's ClientData does
    train = write_tff(root, "train", {"f2": (4, 10), "f0": (3, 0), "f1": (2, 60)})
    test = write_tff(root, "test", {"f2": (1, 5), "f0": (2, 7)}, seed=2)
    return train, test


def test_femnist_from_tff_hdf5_keeps_pixels_labels_and_writers(tmp_path: Path) -> None:
    train, test = make_tff(tmp_path)
    data = load_dataset("femnist", tmp_path)
    assert data.x_train.shape == (9, 1, 28, 28) and data.x_train.dtype == torch.uint8
    assert data.y_train.tolist() == [0, 1, 2, 60, 61, 10, 11, 12, 13]
    assert data.groups is not None and data.groups.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert data.test_groups is not None and data.test_groups.tolist() == [0, 0, 2]
    assert data.y_test.tolist() == test["f0"][1] + test["f2"][1]
    expected = np.rint(train["f1"][0][1] * 255).astype(np.uint8)  # f1's second image
    np.testing.assert_array_equal(data.x_train[4, 0].numpy(), expected)
    assert (data.x_train[:, 0, 0, 0] == 255).all() and (data.x_train[:, 0, 0, 2] == 128).all()
    inverted = load_dataset("femnist", tmp_path, invert=True)
    assert torch.equal(inverted.x_train, 255 - data.x_train)


def test_femnist_hdf5_is_read_before_leaf_json_in_the_same_folder(tmp_path: Path) -> None:
    make_tff(tmp_path)
    make_femnist(tmp_path)
    assert load_dataset("femnist", tmp_path).y_test.tolist()[:2] == [7, 8]  # f0's, from HDF5


def test_femnist_hdf5_damaged_or_half_there_says_what_to_do(tmp_path: Path) -> None:
    h5py = pytest.importorskip("h5py")
    write_tff(tmp_path, "train", {"f0": (2, 0)})
    with pytest.raises(DataError, match=r"lacks fed_emnist_test\.h5; run `fedretain data get"):
        load_dataset("femnist", tmp_path)
    (tmp_path / "fed_emnist_test.h5").write_bytes(b"not hdf5 at all")
    with pytest.raises(DataError, match=r"fed_emnist_test\.h5 is not a readable HDF5 file"):
        load_dataset("femnist", tmp_path)
    with h5py.File(tmp_path / "fed_emnist_test.h5", "w") as f:
        f["other"] = np.zeros(3)
    with pytest.raises(DataError, match=r"no group 'examples'.*data get femnist` again"):
        load_dataset("femnist", tmp_path)
    with h5py.File(tmp_path / "fed_emnist_test.h5", "w") as f:
        f["examples/f0/pixels"] = np.zeros((2, 28, 28), np.float32)
    with pytest.raises(DataError, match=r"writer 'f0' lacks 'pixels' or 'label'"):
        load_dataset("femnist", tmp_path)
    with h5py.File(tmp_path / "fed_emnist_test.h5", "w") as f:
        f["examples/f0/pixels"] = np.zeros((2, 28, 28), np.float32)
        f["examples/f0/label"] = np.array([1, 62], np.int32)
    with pytest.raises(DataError, match=r"labels must be ints in 0\.\.61"):
        load_dataset("femnist", tmp_path)
    with h5py.File(tmp_path / "fed_emnist_test.h5", "w") as f:
        f["examples/f0/pixels"] = np.zeros((3, 28, 28), np.float32)
        f["examples/f0/label"] = np.array([1, 2], np.int32)
    with pytest.raises(DataError, match=r"image per label.*\(3, 28, 28\) and 2 labels"):
        load_dataset("femnist", tmp_path)


def test_femnist_hdf5_without_h5py_names_the_install(tmp_path: Path, monkeypatch) -> None:
    make_tff(tmp_path)
    monkeypatch.setitem(sys.modules, "h5py", None)  # import h5py raises ImportError
    with pytest.raises(ConfigError, match=r'needs h5py.*pip install "fedretain\[femnist\]"'):
        load_dataset("femnist", tmp_path)
