"""CIFAR-10/100 pickle batches, and the restricted unpickler that refuses crafted ones."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from fedretain.data.cifar import load_pickle
from fedretain.data.datasets import load_dataset
from fedretain.errors import ConfigError, DataError

ORIGINAL_GLOBAL = b"cnumpy.core.multiarray\n_reconstruct\n"


def dump_like_original(obj: object) -> bytes:
    """Pickle ``obj`` referring to ``numpy.core.multiarray._reconstruct``, as the archives do.

    Protocol 3 writes globals as text lines (and ``bytes`` without ``_codecs``), so numpy 2's
    module name can be swapped for the one the official Python 2 files carry.
    """
    data = pickle.dumps(obj, protocol=3)
    patched = data.replace(b"cnumpy._core.multiarray\n_reconstruct\n", ORIGINAL_GLOBAL)
    return patched


def batch(n: int, labels: list[int], key: str = "labels", seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        b"batch_label": b"training batch",
        key.encode(): labels,
        b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        b"filenames": [f"img_{i}.png".encode() for i in range(n)],
    }


def write_cifar10(root: Path, per_batch: int = 4) -> dict[str, dict]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    written = {}
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        labels = [(i + j) % 10 for j in range(per_batch)]
        written[name] = batch(per_batch, labels, seed=i)
        (folder / name).write_bytes(dump_like_original(written[name]))
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer"]
    names += [b"dog", b"frog", b"horse", b"ship", b"truck"]
    meta = {b"num_cases_per_batch": per_batch, b"label_names": names, b"num_vis": 3072}
    (folder / "batches.meta").write_bytes(dump_like_original(meta))
    return written


def test_original_pickle_names_numpy_core() -> None:
    assert ORIGINAL_GLOBAL in dump_like_original({b"data": np.zeros((1, 3072), np.uint8)})


def test_cifar10(tmp_path: Path) -> None:
    written = write_cifar10(tmp_path)
    data = load_dataset("cifar10", tmp_path)
    assert data.name == "cifar10" and data.num_classes == 10
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_train.dtype == torch.uint8
    assert data.x_test.shape == (4, 3, 32, 32) and data.y_test.dtype == torch.int64
    assert data.class_names is not None
    assert data.class_names[0] == "airplane" and data.class_names[9] == "truck"
    first = written["data_batch_1"][b"data"][0]
    # row layout: 1024 red values, then green, then blue, each 32x32 row by row
    np.testing.assert_array_equal(data.x_train[0, 0].numpy().ravel(), first[:1024])
    np.testing.assert_array_equal(data.x_train[0, 2, 31].numpy(), first[-32:])
    expected = [y for k in range(1, 6) for y in written[f"data_batch_{k}"][b"labels"]]
    assert data.y_train.tolist() == expected
    assert data.y_test.tolist() == written["test_batch"][b"labels"]
    # the batches folder itself works too
    again = load_dataset("cifar10", tmp_path / "cifar-10-batches-py")
    assert torch.equal(again.x_train, data.x_train)


def test_cifar10_str_keys_and_no_meta(tmp_path: Path) -> None:
    folder = tmp_path / "cifar-10-batches-py"
    folder.mkdir()
    for i, name in enumerate([f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]):
        d = {k.decode(): v for k, v in batch(2, [i, 9 - i], seed=i).items()}
        (folder / name).write_bytes(pickle.dumps(d, protocol=4))
    data = load_dataset("cifar10", folder)
    assert data.y_train.tolist() == [0, 9, 1, 8, 2, 7, 3, 6, 4, 5]
    assert data.class_names is None


def write_cifar100(root: Path) -> None:
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    for name, n in (("train", 6), ("test", 3)):
        d = batch(n, [99 - j for j in range(n)], key="fine_labels", seed=n)
        d[b"coarse_labels"] = [19 - j for j in range(n)]
        (folder / name).write_bytes(dump_like_original(d))
    meta = {
        b"fine_label_names": [f"fine{i}".encode() for i in range(100)],
        b"coarse_label_names": [f"coarse{i}".encode() for i in range(20)],
    }
    (folder / "meta").write_bytes(dump_like_original(meta))


def test_cifar100_fine_and_coarse(tmp_path: Path) -> None:
    write_cifar100(tmp_path)
    fine = load_dataset("cifar100", tmp_path)
    assert fine.num_classes == 100 and fine.x_train.shape == (6, 3, 32, 32)
    assert fine.y_train.tolist() == [99, 98, 97, 96, 95, 94]
    assert fine.class_names is not None and fine.class_names[99] == "fine99"
    coarse = load_dataset("cifar100", tmp_path / "cifar-100-python", label_mode="coarse")
    assert coarse.num_classes == 20 and coarse.y_test.tolist() == [19, 18, 17]
    assert coarse.class_names is not None and coarse.class_names[0] == "coarse0"
    assert torch.equal(coarse.x_train, fine.x_train)
    with pytest.raises(ConfigError, match=r"choose one of: coarse, fine"):
        load_dataset("cifar100", tmp_path, label_mode="super")


def test_crafted_pickle_is_refused_without_running(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    marker = tmp_path / "pwned"
    # The classic payload, protocol 0: os.system("touch MARKER") on load.
    payload = f"cos\nsystem\n(S'touch {marker}'\ntR.".encode()
    victim = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    victim.write_bytes(payload)
    with pytest.raises(DataError) as err:
        load_dataset("cifar10", tmp_path)
    message = str(err.value)
    assert message.startswith(f"refusing to load {victim}: it asks for os.system")
    assert "which a CIFAR batch never contains" in message
    assert not marker.exists()
    # the payload is live: a plain unpickler would have run it
    other = tmp_path / "control"
    pickle.loads(payload.replace(str(marker).encode(), str(other).encode()))
    assert other.exists()


class _Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_refused_global_nested_in_a_batch(tmp_path: Path) -> None:
    marker = tmp_path / "created"
    d = batch(2, [0, 1])
    d[b"filenames"] = [b"a.png", _Evil(marker)]
    path = tmp_path / "batch"
    path.write_bytes(pickle.dumps(d, protocol=4))
    with pytest.raises(DataError, match=r"refusing to load .*: it asks for (io|builtins)\.open"):
        load_pickle(path)
    assert not marker.exists()


def test_truncated_pickle(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(path.read_bytes()[:1500])
    with pytest.raises(DataError) as err:
        load_dataset("cifar10", tmp_path)
    assert str(path) in str(err.value) and "truncated or corrupt" in str(err.value)


def test_garbage_file_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "garbage"
    path.write_bytes(b"\x00\x01not a pickle at all")
    with pytest.raises(DataError, match=r"truncated or corrupt"):
        load_pickle(path)


def test_wrong_content_is_not_a_batch(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    (folder / "data_batch_2").write_bytes(pickle.dumps([1, 2, 3]))
    with pytest.raises(DataError, match=r"not a CIFAR batch"):
        load_dataset("cifar10", tmp_path)
    d = batch(3, [0, 1])
    (folder / "data_batch_2").write_bytes(pickle.dumps(d))
    with pytest.raises(DataError, match=r"3 images but 2 'labels'"):
        load_dataset("cifar10", tmp_path)
    d = batch(2, [0, 10])
    (folder / "data_batch_2").write_bytes(pickle.dumps(d))
    with pytest.raises(DataError, match=r"outside 0..9"):
        load_dataset("cifar10", tmp_path)


def test_missing_batch_is_named(tmp_path: Path) -> None:
    write_cifar10(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_5").unlink()
    with pytest.raises(DataError, match=r"has no data_batch_5"):
        load_dataset("cifar10", tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").unlink()
    with pytest.raises(DataError, match=r"holds data_batch_1"):
        load_dataset("cifar10", tmp_path / "cifar-10-batches-py" / "..")


def test_folder_without_batches(tmp_path: Path) -> None:
    with pytest.raises(DataError) as err:
        load_dataset("cifar100", tmp_path)
    assert "cifar-100-python" in str(err.value) and "cifar-100-python.tar.gz" in str(err.value)


def test_protocol_2_batches_written_by_python_3_load(tmp_path: Path) -> None:
    path = tmp_path / "batch"
    path.write_bytes(pickle.dumps(batch(2, [0, 1]), protocol=2))
    assert load_pickle(path)[b"labels"] == [0, 1]


def test_repickled_protocol_5_batches_are_refused_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "batch"
    path.write_bytes(pickle.dumps(batch(2, [0, 1]), protocol=5))
    with pytest.raises(DataError, match=r"_frombuffer.*re-pickled"):
        load_pickle(path)
