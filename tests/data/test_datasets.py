"""The dataset registry and the IDX loaders (MNIST, Fashion-MNIST, EMNIST).

IDX files are written here byte by byte in the real format (big-endian header, optional gzip).
"""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from fedretain.data.base import Dataset
from fedretain.data.datasets import DATASETS, dataset_params, load_dataset
from fedretain.data.idx import read_idx
from fedretain.errors import ConfigError, DataError
from fedretain.registry import Entry

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
EXPECTED_NAMES = {
    "fashion-mnist",
    "mnist",
    "emnist",
    "cifar10",
    "cifar100",
    "femnist",
    "digits",
    "synthetic",
    "tiny-imagenet",
    "imagefolder",
}


def idx_bytes(array: np.ndarray, magic: int | None = None) -> bytes:
    array = np.ascontiguousarray(array, dtype=np.uint8)
    if magic is None:
        magic = 0x00000800 | array.ndim
    header = struct.pack(">I", magic) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.tobytes()


def write_idx(path: Path, array: np.ndarray, magic: int | None = None) -> Path:
    data = idx_bytes(array, magic)
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def write_mnist_like(
    folder: Path,
    names: tuple[str, str, str, str] = (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    ),
    n_train: int = 12,
    n_test: int = 5,
    classes: int = 10,
    label_offset: int = 0,
    gz: bool = True,
    seed: int = 0,
) -> dict[str, np.ndarray]:
    """Four IDX files holding random images and labels; returns what was written."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    arrays = {
        "x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "y_train": (np.arange(n_train) % classes + label_offset).astype(np.uint8),
        "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "y_test": (np.arange(n_test) % classes + label_offset).astype(np.uint8),
    }
    suffix = ".gz" if gz else ""
    for name, key in zip(names, ("x_train", "y_train", "x_test", "y_test")):
        write_idx(folder / f"{name}{suffix}", arrays[key])
    return arrays


# --- registry ---------------------------------------------------------------------------------


def test_registry_names_and_fields() -> None:
    assert set(DATASETS) == EXPECTED_NAMES
    for name, info in DATASETS.items():
        assert isinstance(info, Entry)
        assert info.name == name
        assert info.description and "\n" not in info.description
        assert info.meta["how_to_get"] and "\n" not in info.meta["how_to_get"]
        assert callable(info.factory)
    assert DATASETS.get("fashion-mnist").meta["default_dir"] == str(FASHION_DIR)
    assert "default_dir" not in DATASETS.get("mnist").meta


def test_dataset_params() -> None:
    assert dataset_params("fashion-mnist") == {}
    assert dataset_params("emnist") == {"split": "balanced"}
    assert dataset_params("cifar100") == {"label_mode": "fine"}
    assert dataset_params("femnist") == {"invert": False}
    assert dataset_params("digits") == {"seed": 0}
    assert dataset_params("synthetic") == {
        "alpha": 1.0,
        "beta": 1.0,
        "devices": 30,
        "dim": 60,
        "classes": 10,
        "iid": False,
        "seed": 0,
    }
    assert dataset_params("imagefolder") == {
        "size": 32,
        "grayscale": False,
        "test_fraction": 0.2,
        "seed": 0,
        "groups_file": "",
    }


def test_unknown_dataset_lists_choices() -> None:
    for call in (lambda: load_dataset("fashion_mnist"), lambda: dataset_params("fashion_mnist")):
        with pytest.raises(ConfigError) as err:
            call()
        message = str(err.value)
        assert "fashion_mnist" in message
        assert "did you mean 'fashion-mnist'" in message
        assert "choose one of" in message and "cifar10" in message and "synthetic" in message


def test_unknown_param_names_it_and_valid_ones() -> None:
    with pytest.raises(ConfigError) as err:
        load_dataset("synthetic", alhpa=0.5)
    message = str(err.value)
    assert "alhpa" in message and "did you mean 'dataset.alpha'" in message
    assert "dataset.devices" in message
    with pytest.raises(ConfigError, match=r"unknown key 'dataset\.split'.*valid: none"):
        load_dataset("fashion-mnist", split="x")


def test_param_types_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"devices"):
        load_dataset("synthetic", devices="3")
    with pytest.raises(ConfigError, match=r"iid"):
        load_dataset("synthetic", iid=1)
    data = load_dataset("synthetic", devices=3, dim=5, alpha=0, beta=1)  # int for float: fine
    assert data.x_train.shape[1] == 5


def test_no_file_datasets_ignore_data_dir(tmp_path: Path) -> None:
    a = load_dataset("synthetic", devices=3)
    b = load_dataset("synthetic", tmp_path / "nowhere", devices=3)
    assert torch.equal(a.x_train, b.x_train)
    assert load_dataset("digits", data_dir=tmp_path / "nowhere").num_classes == 10


def test_dataset_without_default_needs_data_dir() -> None:
    with pytest.raises(DataError) as err:
        load_dataset("mnist")
    assert "needs data_dir=" in str(err.value) and "train-images-idx3-ubyte" in str(err.value)


def test_missing_folder_names_path_and_how_to_get(tmp_path: Path) -> None:
    missing = tmp_path / "x"
    with pytest.raises(DataError) as err:
        load_dataset("fashion-mnist", missing)
    message = str(err.value)
    assert message.startswith(f"Fashion-MNIST not found: {missing} does not exist")
    assert "apt-get install dataset-fashion-mnist" in message
    assert "train-images-idx3-ubyte.gz" in message
    for name in EXPECTED_NAMES - {"digits", "synthetic"}:
        with pytest.raises(DataError, match=r"does not exist") as err:
            load_dataset(name, missing)
        assert str(missing) in str(err.value), name
        assert DATASETS.get(name).meta["how_to_get"] in str(err.value), name


def test_missing_file_is_named(tmp_path: Path) -> None:
    write_mnist_like(tmp_path)
    (tmp_path / "t10k-labels-idx1-ubyte.gz").unlink()
    with pytest.raises(DataError, match=r"has no t10k-labels-idx1-ubyte.gz") as err:
        load_dataset("mnist", tmp_path)
    assert str(tmp_path) in str(err.value)


# --- IDX reading ------------------------------------------------------------------------------


def test_fashion_mnist_from_small_files(tmp_path: Path) -> None:
    written = write_mnist_like(tmp_path)
    data = load_dataset("fashion-mnist", str(tmp_path))
    assert isinstance(data, Dataset)
    assert data.name == "fashion-mnist"
    assert data.x_train.shape == (12, 1, 28, 28) and data.x_train.dtype == torch.uint8
    assert data.x_test.shape == (5, 1, 28, 28)
    assert data.y_train.dtype == torch.int64 and data.y_test.dtype == torch.int64
    np.testing.assert_array_equal(data.x_train[:, 0].numpy(), written["x_train"])
    np.testing.assert_array_equal(data.y_test.numpy(), written["y_test"])
    assert data.num_classes == 10
    assert data.class_names is not None
    assert data.class_names[0] == "T-shirt/top" and data.class_names[9] == "Ankle boot"
    assert data.groups is None and data.input_shape == (1, 28, 28)


def test_uncompressed_idx_files(tmp_path: Path) -> None:
    written = write_mnist_like(tmp_path, gz=False)
    data = load_dataset("mnist", tmp_path)
    assert data.class_names == [str(d) for d in range(10)]
    np.testing.assert_array_equal(data.x_test[:, 0].numpy(), written["x_test"])


def test_read_idx_other_ranks(tmp_path: Path) -> None:
    array = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    np.testing.assert_array_equal(read_idx(write_idx(tmp_path / "a.gz", array)), array)
    labels = np.array([3, 1, 4], dtype=np.uint8)
    np.testing.assert_array_equal(read_idx(write_idx(tmp_path / "l", labels), ndim=1), labels)


def test_a_file_read_again_comes_back_as_a_fresh_copy_and_a_changed_file_is_read_anew(
    tmp_path: Path,
) -> None:
    path = write_idx(tmp_path / "a.gz", np.arange(24, dtype=np.uint8).reshape(2, 3, 4))
    first = read_idx(path, 3)
    first[:] = 0  # the caller's copy: the cached array stays as read
    assert read_idx(path, 3).sum() == sum(range(24))
    write_idx(path, np.full((2, 3, 4), 7, dtype=np.uint8))  # rewritten: another inode or time
    assert (read_idx(path, 3) == 7).all()
    with pytest.raises(DataError, match="bad IDX magic"):
        read_idx(path, 1)  # the cache does not skip the rank check


def test_test_samples_is_a_fixed_draw_in_test_set_order() -> None:
    n = 50
    x = torch.arange(n, dtype=torch.float32).reshape(n, 1)
    ds = Dataset("t", x, torch.zeros(n, dtype=torch.long), x.clone(), torch.arange(n), 50)
    ds.test_groups = np.arange(n) * 10
    cut = ds.with_test_samples(20)
    assert len(cut.y_test) == 20 and cut.x_train is ds.x_train
    kept = cut.y_test.numpy()
    assert (np.diff(kept) > 0).all() and len(set(kept)) == 20  # a subset, in order
    np.testing.assert_array_equal(cut.x_test[:, 0].numpy(), kept)  # images with their labels
    np.testing.assert_array_equal(cut.test_groups, kept * 10)
    torch.manual_seed(123)
    np.random.seed(123)  # the draw is its own: no global seed changes it
    np.testing.assert_array_equal(ds.with_test_samples(20).y_test.numpy(), kept)
    assert ds.with_test_samples(0) is ds and ds.with_test_samples(50) is ds


def emnist_names(split: str) -> tuple[str, str, str, str]:
    p = f"emnist-{split}-"
    return (
        p + "train-images-idx3-ubyte",
        p + "train-labels-idx1-ubyte",
        p + "test-images-idx3-ubyte",
        p + "test-labels-idx1-ubyte",
    )


def test_emnist_is_transposed_upright(tmp_path: Path) -> None:
    written = write_mnist_like(tmp_path, emnist_names("balanced"), classes=47)
    image = np.zeros((28, 28), dtype=np.uint8)
    image[0, :] = 255  # the file's first row ...
    written["x_train"][0] = image
    write_idx(tmp_path / "emnist-balanced-train-images-idx3-ubyte.gz", written["x_train"])
    data = load_dataset("emnist", tmp_path)
    assert data.num_classes == 47 and data.class_names is not None
    assert len(data.class_names) == 47 and data.class_names[36] == "a"
    first = data.x_train[0, 0].numpy()
    assert (first[:, 0] == 255).all() and first[:, 1:].max() == 0  # ... is the first column
    np.testing.assert_array_equal(data.x_test[:, 0].numpy(), written["x_test"].transpose(0, 2, 1))
    assert data.x_train.is_contiguous()


def test_emnist_letters_shift_labels_and_gzip_subfolder(tmp_path: Path) -> None:
    written = write_mnist_like(
        tmp_path / "gzip", emnist_names("letters"), n_train=30, classes=26, label_offset=1
    )
    assert written["y_train"].min() == 1 and written["y_train"].max() == 26
    data = load_dataset("emnist", tmp_path, split="letters")
    assert data.num_classes == 26
    np.testing.assert_array_equal(data.y_train.numpy(), written["y_train"].astype(np.int64) - 1)
    assert data.y_train.min() == 0 and data.y_train.max() == 25


def test_emnist_letters_with_label_zero_is_refused(tmp_path: Path) -> None:
    write_mnist_like(tmp_path, emnist_names("letters"), classes=26, label_offset=0)
    with pytest.raises(DataError, match=r"below 1"):
        load_dataset("emnist", tmp_path, split="letters")


@pytest.mark.parametrize(
    ("split", "classes"),
    [("digits", 10), ("byclass", 62), ("bymerge", 47), ("mnist", 10)],
)
def test_emnist_split_class_counts(tmp_path: Path, split: str, classes: int) -> None:
    write_mnist_like(tmp_path, emnist_names(split), n_train=classes + 3, classes=classes)
    data = load_dataset("emnist", tmp_path, split=split)
    assert data.num_classes == classes and len(data.class_names or []) == classes
    assert int(data.y_train.max()) == classes - 1


def test_emnist_unknown_split(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"choose one of: balanced, byclass"):
        load_dataset("emnist", tmp_path, split="letter")


def test_label_out_of_range_is_refused(tmp_path: Path) -> None:
    write_mnist_like(tmp_path, classes=11)
    with pytest.raises(DataError, match=r"label 10 .* outside 0..9"):
        load_dataset("mnist", tmp_path)


def test_truncated_gzip_idx(tmp_path: Path) -> None:
    write_mnist_like(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(path.read_bytes()[:-200])
    with pytest.raises(DataError) as err:
        load_dataset("mnist", tmp_path)
    message = str(err.value)
    assert str(path) in message and "truncated or corrupt" in message and "re-" in message


def test_truncated_uncompressed_idx(tmp_path: Path) -> None:
    write_mnist_like(tmp_path, gz=False)
    path = tmp_path / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(DataError, match=r"truncated or corrupt") as err:
        load_dataset("mnist", tmp_path)
    assert str(path) in str(err.value)


def test_idx_with_extra_bytes_is_corrupt(tmp_path: Path) -> None:
    data = idx_bytes(np.zeros((2, 3, 3), np.uint8)) + b"\0"
    (tmp_path / "x").write_bytes(data)
    (tmp_path / "x.gz").write_bytes(gzip.compress(data))
    for path in (tmp_path / "x", tmp_path / "x.gz"):
        with pytest.raises(DataError, match=r"more data bytes .*than sizes \(2, 3, 3\) need"):
            read_idx(path, 3)


def test_idx_with_implausible_sizes(tmp_path: Path) -> None:
    header = struct.pack(">IIII", 0x00000803, 4_000_000_000, 28, 28)
    (tmp_path / "x").write_bytes(header)
    (tmp_path / "x.gz").write_bytes(gzip.compress(header))
    with pytest.raises(DataError, match=r"fewer data bytes \(0\)"):
        read_idx(tmp_path / "x", 3)
    with pytest.raises(DataError, match=r"implausible sizes"):
        read_idx(tmp_path / "x.gz", 3)


def test_idx_bad_magic(tmp_path: Path) -> None:
    write_mnist_like(tmp_path)
    labels = np.zeros(12, np.uint8)
    path = write_idx(tmp_path / "train-labels-idx1-ubyte.gz", labels, magic=0x00000803)
    with pytest.raises(
        DataError, match=r"bad IDX magic number 0x00000803, expected 0x00000801"
    ) as err:
        load_dataset("mnist", tmp_path)
    assert str(path) in str(err.value)
    write_idx(path, labels, magic=0x12340801)
    with pytest.raises(DataError, match=r"bad IDX magic number"):
        load_dataset("mnist", tmp_path)


def test_not_gzip_but_named_gz(tmp_path: Path) -> None:
    write_mnist_like(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte.gz"
    path.write_bytes(b"<html>404 Not Found</html>" * 20)
    with pytest.raises(DataError, match=r"not a valid gzip file") as err:
        load_dataset("mnist", tmp_path)
    assert str(path) in str(err.value) and "truncated or corrupt" in str(err.value)


def test_empty_idx_file(tmp_path: Path) -> None:
    path = tmp_path / "empty"
    path.write_bytes(b"")
    with pytest.raises(DataError, match=r"shorter than an IDX header"):
        read_idx(path)


def test_image_and_label_counts_must_match(tmp_path: Path) -> None:
    write_mnist_like(tmp_path)
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(11, np.uint8))
    with pytest.raises(DataError, match=r"12 images but .* 11 labels"):
        load_dataset("mnist", tmp_path)


# --- the real Fashion-MNIST (Debian package dataset-fashion-mnist) ----------------------------


@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="dataset-fashion-mnist is not installed")
def test_real_fashion_mnist() -> None:
    data = load_dataset("fashion-mnist")
    assert data.x_train.shape == (60000, 1, 28, 28) and data.x_test.shape == (10000, 1, 28, 28)
    assert data.x_train.dtype == torch.uint8 and data.y_train.dtype == torch.int64
    assert data.num_classes == 10 and len(data.class_names or []) == 10
    assert torch.bincount(data.y_train).tolist() == [6000] * 10
    assert torch.bincount(data.y_test).tolist() == [1000] * 10
    assert int(data.x_train.max()) == 255 and int(data.x_train.min()) == 0
