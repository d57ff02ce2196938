"""FEMNIST from LEAF (https://github.com/TalwalkarLab/leaf): handwritten characters by writer.

Two layouts of the same data are read. LEAF's ``data/femnist`` scripts write ``train/*.json``
and ``test/*.json``, each::

    {"users": ["f0000_14", ...], "num_samples": [n, ...],
     "user_data": {"f0000_14": {"x": [[784 floats in 0..1], ...], "y": [int, ...]}, ...}}

Every file in both folders is read (sorted by name). TensorFlow Federated's build of it, which
``fedretain data get femnist`` fetches, is two HDF5 files, ``fed_emnist_train.h5`` and
``fed_emnist_test.h5``, each with a group ``examples/<writer>`` per writer holding ``pixels``
(n, 28, 28 floats in 0..1) and ``label`` (n ints); writers are read in sorted order (reading
it needs h5py: ``pip install "fedretain[femnist]"``). When a folder holds both, the HDF5 files
are read.

Either way an image is 28x28 with the white background at 1.0 and ``y`` one of 62 classes
(0-9, A-Z, a-z). Images become ``uint8`` ``round(x * 255)`` (``invert=True`` gives MNIST's
black background instead); ``groups`` and ``test_groups`` give each sample's writer (the same id
for the same writer in both sets).
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedretain.data.base import Dataset
from fedretain.data.idx import require_dir
from fedretain.errors import DataError
from fedretain.extras import require

FEMNIST_HOW_TO_GET = (
    "run `fedretain data get femnist` (TensorFlow Federated's HDF5 build), or set "
    "data_dir=FOLDER holding fed_emnist_train.h5 and fed_emnist_test.h5, or the train/ and test/ "
    "folders of JSON files that LEAF's data/femnist/preprocess.sh writes "
    "(https://github.com/TalwalkarLab/leaf)"
)
FEMNIST_CLASSES = list(string.digits + string.ascii_uppercase + string.ascii_lowercase)
H5_FILES = {"train": "fed_emnist_train.h5", "test": "fed_emnist_test.h5"}
_PIXELS = 28 * 28

# one writer's samples: (writer id, uint8 (n, 784) pixels, int64 (n,) labels)
Writer = tuple[str, np.ndarray, np.ndarray]


def _writer(user: str, x: np.ndarray, y: np.ndarray, bad: str, fix: str) -> Writer | None:
    """One writer's samples checked (None for a writer without any), pixels as ``uint8``."""
    if len(y) == 0:
        return None
    shape = x.shape
    if shape[1:] == (28, 28):
        x = x.reshape(len(x), _PIXELS)
    if x.ndim != 2 or x.shape[1] != _PIXELS or y.ndim != 1 or len(x) != len(y):
        raise DataError(
            f"{bad} (user {user!r}: one {_PIXELS}-value (28x28) image per label is needed; "
            f"got images of shape {shape} and {y.size} labels); {fix}"
        )
    if np.any(y != np.round(y)) or y.min() < 0 or y.max() >= len(FEMNIST_CLASSES):
        raise DataError(f"{bad} (user {user!r}: labels must be ints in 0..61); {fix}")
    pixels = np.rint(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8)
    return user, pixels, y.astype(np.int64)


def _read_json(path: Path) -> list[Writer]:
    """Every writer of one LEAF JSON file."""
    bad = f"{path} is not a LEAF JSON file"
    fix = f"re-run LEAF's preprocessing or remove the file; {FEMNIST_HOW_TO_GET}"
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataError(f"{path} is malformed or truncated JSON ({exc}); {fix}") from exc
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    if not isinstance(doc, dict) or "users" not in doc or "user_data" not in doc:
        raise DataError(f"{bad} (it needs the keys 'users' and 'user_data'); {fix}")
    users, user_data = doc["users"], doc["user_data"]
    if not isinstance(users, list) or not isinstance(user_data, dict):
        raise DataError(f"{bad} ('users' must be a list and 'user_data' an object); {fix}")
    out = []
    for user in users:
        entry: Any = user_data.get(user) if isinstance(user, str) else None
        if not isinstance(entry, dict) or "x" not in entry or "y" not in entry:
            raise DataError(
                f"{bad} (user {user!r} has no 'user_data' entry with 'x' and 'y'); {fix}"
            )
        try:
            x = np.asarray(entry["x"], dtype=np.float32)
            y = np.asarray(entry["y"], dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise DataError(
                f"{bad} (user {user!r}: 'x' or 'y' is not numeric: {exc}); {fix}"
            ) from exc
        if (one := _writer(user, x, y, bad, fix)) is not None:
            out.append(one)
    return out


def _read_h5(path: Path) -> list[Writer]:
    """Every writer of one of TensorFlow Federated's FEMNIST HDF5 files, in sorted order."""
    require("h5py", f"FEMNIST's {path.name}")
    import h5py

    bad = f"{path} is not TensorFlow Federated's FEMNIST"
    fix = f"delete {path.parent} and run `fedretain data get femnist` again"
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise DataError(f"{path} is not a readable HDF5 file ({exc}); {fix}") from exc
    out = []
    with f:
        examples = f.get("examples")
        if not isinstance(examples, h5py.Group):
            raise DataError(f"{bad} (it has no group 'examples'); {fix}")
        for user in sorted(examples.keys()):
            group = examples[user]
            if not isinstance(group, h5py.Group) or not {"pixels", "label"} <= set(group):
                raise DataError(f"{bad} (writer {user!r} lacks 'pixels' or 'label'); {fix}")
            try:
                x = np.asarray(group["pixels"][()], dtype=np.float32)
                y = np.asarray(group["label"][()], dtype=np.float64).reshape(-1)
            except (TypeError, ValueError) as exc:
                raise DataError(f"{bad} (writer {user!r}: not numeric: {exc}); {fix}") from exc
            if (one := _writer(user, x, y, bad, fix)) is not None:
                out.append(one)
    return out


def _join(
    parts: list[Writer], writers: dict[str, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One split's pixels, labels and writer ids (``writers`` numbers each new writer)."""
    if not parts:
        return (
            np.zeros((0, _PIXELS), np.uint8),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )
    ids = [np.full(len(y), writers.setdefault(user, len(writers))) for user, _, y in parts]
    return (
        np.concatenate([x for _, x, _ in parts]),
        np.concatenate([y for _, _, y in parts]),
        np.concatenate(ids).astype(np.int64),
    )


def _read_split(data_dir: Path, split: str, h5: bool) -> list[Writer]:
    if h5:
        return _read_h5(data_dir / H5_FILES[split])
    files = sorted((data_dir / split).glob("*.json"))
    if not files:
        raise DataError(f"FEMNIST: {data_dir / split} holds no *.json files; {FEMNIST_HOW_TO_GET}")
    return [one for path in files for one in _read_json(path)]


def _to_tensor(pixels: np.ndarray, invert: bool) -> torch.Tensor:
    if invert:
        pixels = 255 - pixels
    return torch.from_numpy(pixels.reshape(-1, 1, 28, 28))


def load_femnist(data_dir: Path, invert: bool = False) -> Dataset:
    """FEMNIST from TFF's HDF5 files or LEAF's JSON: 62 classes, 1x28x28 ``uint8`` images, one
    group per writer.

    :param invert: white characters on black, as MNIST (false: LEAF's black on white)
    """
    data_dir = require_dir(Path(data_dir), "FEMNIST", FEMNIST_HOW_TO_GET)
    h5 = [(data_dir / name).is_file() for name in H5_FILES.values()]
    if any(h5) and not all(h5):
        missing = [n for n, there in zip(H5_FILES.values(), h5) if not there]
        raise DataError(f"FEMNIST: {data_dir} lacks {missing[0]}; {FEMNIST_HOW_TO_GET}")
    if not all(h5):
        for sub in ("train", "test"):
            if not (data_dir / sub).is_dir():
                raise DataError(
                    f"FEMNIST not found: {data_dir / sub} does not exist; {FEMNIST_HOW_TO_GET}"
                )
    writers: dict[str, int] = {}
    x_train, y_train, g_train = _join(_read_split(data_dir, "train", all(h5)), writers)
    if len(y_train) == 0:
        raise DataError(f"FEMNIST: {data_dir} holds no training samples; {FEMNIST_HOW_TO_GET}")
    x_test, y_test, g_test = _join(_read_split(data_dir, "test", all(h5)), writers)
    return Dataset(
        name="femnist",
        x_train=_to_tensor(x_train, invert),
        y_train=torch.from_numpy(y_train),
        x_test=_to_tensor(x_test, invert),
        y_test=torch.from_numpy(y_test),
        num_classes=len(FEMNIST_CLASSES),
        class_names=list(FEMNIST_CLASSES),
        groups=g_train,
        test_groups=g_test,
    )
