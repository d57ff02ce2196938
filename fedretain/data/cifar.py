"""CIFAR-10 and CIFAR-100, read from the "python version" pickles of the official archives.

CIFAR-10 (``cifar-10-batches-py/``): ``data_batch_1`` .. ``data_batch_5`` and ``test_batch``,
each a pickled dict with ``data`` (a ``uint8`` numpy array of shape ``(N, 3072)``: 1024 red,
then 1024 green, then 1024 blue values of a 32x32 image, row by row) and ``labels`` (a list of
N ints in 0..9); ``batches.meta`` holds ``label_names``. CIFAR-100 (``cifar-100-python/``):
``train`` and ``test``, with ``fine_labels`` (0..99) and ``coarse_labels`` (0..19); ``meta``
holds ``fine_label_names`` and ``coarse_label_names``. The files were written by Python 2, so
keys may come back as ``bytes``; both ``bytes`` and ``str`` keys are accepted.

Pickles can run code when loaded. These are read with an unpickler that refuses every global
except the three a numpy array needs (``_reconstruct``, ``ndarray``, ``dtype``), so a crafted
file is rejected with a :class:`DataError` before anything in it runs.
"""

from __future__ import annotations

import codecs
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedretain.data.base import Dataset
from fedretain.data.idx import require_dir
from fedretain.errors import ConfigError, DataError, unknown_choice

try:  # numpy >= 2
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]

_SOURCE = "https://www.cs.toronto.edu/~kriz/cifar.html"
CIFAR10_HOW_TO_GET = (
    "set data_dir=FOLDER holding cifar-10-batches-py/ (data_batch_1..5, test_batch), extracted "
    f"from cifar-10-python.tar.gz ('CIFAR-10 python version' at {_SOURCE})"
)
CIFAR100_HOW_TO_GET = (
    "set data_dir=FOLDER holding cifar-100-python/ (train, test, meta), extracted "
    f"from cifar-100-python.tar.gz ('CIFAR-100 python version' at {_SOURCE})"
)

# Every global a CIFAR batch refers to: what numpy needs to rebuild an ndarray. The files of the
# official archives name ``numpy.core.multiarray``; numpy 2 writes ``numpy._core.multiarray``.
_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    # Python 3 writes bytes in protocol-2 pickles as _codecs.encode(str, "latin1"): a pure
    # str -> bytes conversion that runs nothing
    ("_codecs", "encode"): codecs.encode,
}


class _Refused(Exception):
    """A pickle asked for a global outside :data:`_ALLOWED`."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _BatchUnpickler(pickle.Unpickler):
    """Unpickles plain data and numpy arrays; refuses every other global."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise _Refused(f"{module}.{name}") from None


def load_pickle(path: Path, how_to_get: str = "") -> Any:
    """The object pickled in ``path``, allowing only data and numpy arrays (``bytes`` keys)."""
    fix = f"; {how_to_get}" if how_to_get else ""
    try:
        with open(path, "rb") as f:
            return _BatchUnpickler(f, encoding="bytes").load()
    except _Refused as exc:
        if exc.name.startswith(("numpy.", "_codecs.")):
            why = (
                f"it asks for {exc.name}, which the original CIFAR batches never contain "
                "(was it re-pickled by a newer Python or numpy?)"
            )
        else:
            why = f"it asks for {exc.name}, which a CIFAR batch never contains"
        raise DataError(f"refusing to load {path}: {why}; use the original files{fix}") from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    except (
        pickle.UnpicklingError,
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        LookupError,
        OverflowError,
        struct.error,
        MemoryError,
        RecursionError,
    ) as exc:
        raise DataError(
            f"{path} is truncated or corrupt ({type(exc).__name__}: {exc}); "
            f"re-download or re-extract it{fix}"
        ) from exc


def _text(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _read_dict(path: Path, how_to_get: str) -> dict[str, Any]:
    obj = load_pickle(path, how_to_get)
    if not isinstance(obj, dict):
        raise DataError(
            f"{path} is not a CIFAR batch (it holds a {type(obj).__name__}, not a dict); "
            f"re-download or re-extract it; {how_to_get}"
        )
    return {_text(k): v for k, v in obj.items()}


def _batch(
    path: Path, label_key: str, num_classes: int, how_to_get: str
) -> tuple[np.ndarray, np.ndarray]:
    d = _read_dict(path, how_to_get)
    bad = f"{path} is not a CIFAR batch"
    fix = f"re-download or re-extract it; {how_to_get}"
    if "data" not in d or label_key not in d:
        missing = [k for k in ("data", label_key) if k not in d]
        raise DataError(f"{bad} (no key {', '.join(missing)}); {fix}")
    data = d["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise DataError(f"{bad} ('data' is not a 2-D uint8 array); {fix}")
    if data.shape[1] != 3 * 32 * 32:
        raise DataError(f"{bad} ('data' rows hold {data.shape[1]} values, not 3072); {fix}")
    try:
        labels = np.asarray(d[label_key], dtype=np.int64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{bad} ('{label_key}' is not a list of ints); {fix}") from exc
    if len(labels) != len(data):
        raise DataError(f"{bad} ({len(data)} images but {len(labels)} '{label_key}'); {fix}")
    if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
        raise DataError(f"{bad} ('{label_key}' outside 0..{num_classes - 1}); {fix}")
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32)), labels


def _locate(data_dir: Path, folder: str, marker: str, title: str, how_to_get: str) -> Path:
    data_dir = require_dir(Path(data_dir), title, how_to_get)
    if (data_dir / marker).is_file():
        return data_dir
    if (data_dir / folder / marker).is_file():
        return data_dir / folder
    raise DataError(
        f"{title} not found: neither {data_dir} nor {data_dir / folder} holds {marker}; "
        f"{how_to_get}"
    )


def _names(meta: Path, key: str, count: int, how_to_get: str) -> list[str] | None:
    if not meta.is_file():
        return None
    d = _read_dict(meta, how_to_get)
    names = d.get(key)
    if not isinstance(names, list | tuple) or len(names) != count:
        return None
    return [str(_text(n)) for n in names]


def _dataset(
    name: str,
    train: list[tuple[np.ndarray, np.ndarray]],
    test: tuple[np.ndarray, np.ndarray],
    num_classes: int,
    class_names: list[str] | None,
) -> Dataset:
    x_train = np.concatenate([x for x, _ in train]) if len(train) > 1 else train[0][0]
    y_train = np.concatenate([y for _, y in train]) if len(train) > 1 else train[0][1]
    return Dataset(
        name=name,
        x_train=torch.from_numpy(x_train),
        y_train=torch.from_numpy(y_train),
        x_test=torch.from_numpy(test[0]),
        y_test=torch.from_numpy(test[1]),
        num_classes=num_classes,
        class_names=class_names,
    )


def load_cifar10(data_dir: Path) -> Dataset:
    """CIFAR-10: 50,000 + 10,000 RGB 32x32 images of 10 classes."""
    how = CIFAR10_HOW_TO_GET
    root = _locate(data_dir, "cifar-10-batches-py", "data_batch_1", "CIFAR-10", how)
    paths = [root / f"data_batch_{i}" for i in range(1, 6)] + [root / "test_batch"]
    for path in paths:
        if not path.is_file():
            raise DataError(f"CIFAR-10: {root} has no {path.name}; {how}")
    batches = [_batch(p, "labels", 10, how) for p in paths]
    names = _names(root / "batches.meta", "label_names", 10, how)
    return _dataset("cifar10", batches[:5], batches[5], 10, names)


def load_cifar100(data_dir: Path, label_mode: str = "fine") -> Dataset:
    """CIFAR-100: 50,000 + 10,000 RGB 32x32 images, 100 fine or 20 coarse classes.

    :param label_mode: the labels: fine (100 classes) or coarse (20 superclasses)
    """
    if label_mode not in ("fine", "coarse"):
        raise ConfigError(unknown_choice("CIFAR-100 label_mode", label_mode, ("fine", "coarse")))
    how = CIFAR100_HOW_TO_GET
    root = _locate(data_dir, "cifar-100-python", "train", "CIFAR-100", how)
    if not (root / "test").is_file():
        raise DataError(f"CIFAR-100: {root} has no test; {how}")
    num_classes = 100 if label_mode == "fine" else 20
    key = f"{label_mode}_labels"
    train = _batch(root / "train", key, num_classes, how)
    test = _batch(root / "test", key, num_classes, how)
    names = _names(root / "meta", f"{label_mode}_label_names", num_classes, how)
    return _dataset("cifar100", [train], test, num_classes, names)
