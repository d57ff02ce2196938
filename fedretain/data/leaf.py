"""FEMNIST from LEAF (https://github.com/TalwalkarLab/leaf): handwritten characters by writer.

LEAF's ``data/femnist`` scripts write ``train/*.json`` and ``test/*.json``, each::

    {"users": ["f0000_14", ...], "num_samples": [n, ...],
     "user_data": {"f0000_14": {"x": [[784 floats in 0..1], ...], "y": [int, ...]}, ...}}

``x`` is a 28x28 image, row by row, with the white background at 1.0; ``y`` is one of 62 classes
(0-9, A-Z, a-z). Every file in both folders is read (sorted by name). Images become ``uint8``
``round(x * 255)`` (``invert=True`` gives MNIST's black background instead); ``groups`` and
``test_groups`` give each sample's writer (the same id for the same writer in both sets).
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

FEMNIST_HOW_TO_GET = (
    "set data_dir=FOLDER holding the train/ and test/ folders of JSON files that LEAF's "
    "data/femnist/preprocess.sh writes (https://github.com/TalwalkarLab/leaf)"
)
FEMNIST_CLASSES = list(string.digits + string.ascii_uppercase + string.ascii_lowercase)
_PIXELS = 28 * 28


def _read_file(path: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """``(user, x float32 (n, 784), y int64 (n,))`` for every user of one LEAF JSON file."""
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
        if len(y) == 0:
            continue
        if x.ndim != 2 or x.shape[1] != _PIXELS or y.ndim != 1 or len(x) != len(y):
            raise DataError(
                f"{bad} (user {user!r}: 'x' must be a list of {_PIXELS}-value images, one per "
                f"label in 'y'; got x of shape {x.shape} and {y.size} labels); {fix}"
            )
        if np.any(y != np.round(y)) or y.min() < 0 or y.max() >= len(FEMNIST_CLASSES):
            raise DataError(f"{bad} (user {user!r}: labels must be ints in 0..61); {fix}")
        out.append((user, x, y.astype(np.int64)))
    return out


def _read_split(folder: Path, writers: dict[str, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    files = sorted(folder.glob("*.json"))
    if not files:
        raise DataError(f"FEMNIST: {folder} holds no *.json files; {FEMNIST_HOW_TO_GET}")
    xs, ys, gs = [], [], []
    for path in files:
        for user, x, y in _read_file(path):
            gid = writers.setdefault(user, len(writers))
            xs.append(x)
            ys.append(y)
            gs.append(np.full(len(y), gid, dtype=np.int64))
    if not xs:
        return (
            np.zeros((0, _PIXELS), np.float32),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )
    return np.concatenate(xs), np.concatenate(ys), np.concatenate(gs)


def _to_uint8(x: np.ndarray, invert: bool) -> torch.Tensor:
    pixels = np.rint(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8)
    if invert:
        pixels = 255 - pixels
    return torch.from_numpy(pixels.reshape(-1, 1, 28, 28))


def load_femnist(data_dir: Path, invert: bool = False) -> Dataset:
    """FEMNIST from LEAF JSON: 62 classes, 1x28x28 ``uint8`` images, one group per writer.

    :param invert: white characters on black, as MNIST (false: LEAF's black on white)
    """
    data_dir = require_dir(Path(data_dir), "FEMNIST", FEMNIST_HOW_TO_GET)
    for sub in ("train", "test"):
        if not (data_dir / sub).is_dir():
            raise DataError(
                f"FEMNIST not found: {data_dir / sub} does not exist; {FEMNIST_HOW_TO_GET}"
            )
    writers: dict[str, int] = {}
    x_train, y_train, g_train = _read_split(data_dir / "train", writers)
    if len(y_train) == 0:
        raise DataError(f"FEMNIST: {data_dir / 'train'} holds no samples; {FEMNIST_HOW_TO_GET}")
    x_test, y_test, g_test = _read_split(data_dir / "test", writers)
    return Dataset(
        name="femnist",
        x_train=_to_uint8(x_train, invert),
        y_train=torch.from_numpy(y_train),
        x_test=_to_uint8(x_test, invert),
        y_test=torch.from_numpy(y_test),
        num_classes=len(FEMNIST_CLASSES),
        class_names=list(FEMNIST_CLASSES),
        groups=g_train,
        test_groups=g_test,
    )
