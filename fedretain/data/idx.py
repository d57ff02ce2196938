"""IDX files and the datasets stored in them: MNIST, Fashion-MNIST and EMNIST.

The IDX format (http://yann.lecun.com/exdb/mnist/) is a 4-byte magic number, ``0x0000TTNN``
where ``TT`` is the element type (``0x08``: unsigned byte, the only one these datasets use) and
``NN`` the number of dimensions, then ``NN`` big-endian ``uint32`` sizes, then the elements in
C order. Labels are ``0x00000801`` (one dimension), images ``0x00000803`` (count, rows,
columns). Each file may be gzip-compressed (``NAME.gz``) or not (``NAME``); both names are
looked for. A dataset folder holds four of them::

    train-images-idx3-ubyte[.gz]  train-labels-idx1-ubyte[.gz]
    t10k-images-idx3-ubyte[.gz]   t10k-labels-idx1-ubyte[.gz]

EMNIST names them ``emnist-{split}-train-images-idx3-ubyte[.gz]`` and so on, either in the
folder itself or in its ``gzip/`` subfolder (as in the official archive), and stores every
image transposed; the loader turns them upright.
"""

from __future__ import annotations

import gzip
import math
import string
import struct
import zlib
from collections import OrderedDict
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from fedretain.data.base import Dataset
from fedretain.errors import ConfigError, DataError, unknown_choice

IDX_LABELS_MAGIC = 0x00000801
IDX_IMAGES_MAGIC = 0x00000803

_MAX_BYTES = 1 << 36  # 64 GiB: larger sizes in a header mean a damaged file
_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")
_TEST_FILES = ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
_FOUR = ", ".join(f"{n}.gz" for n in (*_FILES, *_TEST_FILES))

FASHION_MNIST_HOW_TO_GET = (
    "install it with `apt-get install dataset-fashion-mnist` or set data_dir=FOLDER holding "
    f"{_FOUR} (from https://github.com/zalandoresearch/fashion-mnist)"
)
MNIST_HOW_TO_GET = (
    f"set data_dir=FOLDER holding the four MNIST files {_FOUR} "
    "(from http://yann.lecun.com/exdb/mnist/ or one of its mirrors)"
)
EMNIST_HOW_TO_GET = (
    "set data_dir=FOLDER holding emnist-SPLIT-train-images-idx3-ubyte.gz and its three sibling "
    "files (the gzip/ folder of the EMNIST archive from "
    "https://www.nist.gov/itl/products-and-services/emnist-dataset)"
)

FASHION_MNIST_CLASSES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]

_DIGITS = list(string.digits)
# EMNIST's class orders, as in the emnist-*-mapping.txt files of the official archive.
_BYCLASS = _DIGITS + list(string.ascii_uppercase) + list(string.ascii_lowercase)
_MERGED = _DIGITS + list(string.ascii_uppercase) + list("abdefghnqrt")
EMNIST_CLASSES: dict[str, list[str]] = {
    "digits": _DIGITS,
    "mnist": _DIGITS,
    "letters": [f"{u}/{l}" for u, l in zip(string.ascii_uppercase, string.ascii_lowercase)],
    "balanced": _MERGED,
    "bymerge": _MERGED,
    "byclass": _BYCLASS,
}


def require_dir(path: Path, title: str, how_to_get: str) -> Path:
    """``path`` if it is a folder, else a :class:`DataError` saying how to get the data."""
    if not path.exists():
        raise DataError(f"{title} not found: {path} does not exist; {how_to_get}")
    if not path.is_dir():
        raise DataError(f"{title} not found: {path} is not a folder; {how_to_get}")
    return path


def find_idx(folders: list[Path], name: str, title: str, how_to_get: str) -> Path:
    """The first of ``FOLDER/NAME.gz``, ``FOLDER/NAME`` that exists, over ``folders``."""
    for folder in folders:
        for candidate in (folder / f"{name}.gz", folder / name):
            if candidate.is_file():
                return candidate
    where = " or ".join(str(f) for f in folders)
    raise DataError(f"{title}: {where} has no {name}.gz (nor {name}); {how_to_get}")


def _corrupt(path: Path, why: str, how_to_get: str) -> DataError:
    fix = f"; {how_to_get}" if how_to_get else ""
    return DataError(f"{path} is truncated or corrupt ({why}); re-install or re-download it{fix}")


_CHUNK = 1 << 24


def _read_upto(stream: BinaryIO, n: int) -> bytes:
    data = stream.read(n)
    return data if data is not None else b""


# the last few files read, decoded, by (device, inode, size, modification time): a process
# that runs many experiments on one dataset (a preset, a sweep, the tests) decompresses its
# files once (Fashion-MNIST's 0.4 s a load); files over _CACHED_BYTES are not kept
_CACHE: OrderedDict[tuple[int, int, int, int], np.ndarray] = OrderedDict()
_CACHE_ENTRIES = 4
_CACHED_BYTES = 64 << 20


def read_idx(path: Path, ndim: int | None = None, how_to_get: str = "") -> np.ndarray:
    """The ``uint8`` array stored in the IDX file ``path`` (``.gz`` or not, by its name), a
    fresh copy the caller may change.

    ``ndim`` (1 for labels, 3 for images) is checked when given. A file whose magic number,
    sizes or length do not fit raises :class:`DataError` naming it. A file read again,
    unchanged (same inode, size and modification time), comes from a small in-process cache.
    """
    path = Path(path)
    try:
        st = path.stat()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    cached = _CACHE.get(key)
    if cached is None or (ndim is not None and cached.ndim != ndim):
        cached = _read_idx_file(path, ndim, how_to_get)
        if cached.nbytes <= _CACHED_BYTES:
            _CACHE[key] = cached
            while len(_CACHE) > _CACHE_ENTRIES:
                _CACHE.popitem(last=False)
        else:
            return cached
    _CACHE.move_to_end(key)
    return cached.copy()


def _read_idx_file(path: Path, ndim: int | None, how_to_get: str) -> np.ndarray:
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as stream:
            header = _read_upto(stream, 4)
            if len(header) < 4:
                raise _corrupt(path, "it is shorter than an IDX header", how_to_get)
            zero, kind, dims = struct.unpack(">HBB", header)
            magic = struct.unpack(">I", header)[0]
            if zero != 0 or kind != 0x08 or (ndim is not None and dims != ndim):
                want = {1: IDX_LABELS_MAGIC, 3: IDX_IMAGES_MAGIC}.get(ndim or 0)
                expected = f", expected 0x{want:08x}" if want else ""
                raise _corrupt(path, f"bad IDX magic number 0x{magic:08x}{expected}", how_to_get)
            raw_shape = _read_upto(stream, 4 * dims)
            if len(raw_shape) < 4 * dims:
                raise _corrupt(path, "its header ends early", how_to_get)
            shape = struct.unpack(f">{dims}I", raw_shape)
            count = math.prod(shape)
            if opener is open:
                have = path.stat().st_size - 4 - 4 * dims
                if have != count:
                    more = "fewer" if have < count else "more"
                    raise _corrupt(
                        path,
                        f"{more} data bytes ({have}) than sizes {shape} need ({count})",
                        how_to_get,
                    )
            elif count > _MAX_BYTES:
                raise _corrupt(path, f"implausible sizes {shape} in its header", how_to_get)
            # read in chunks: memory grows with the data really there, never with what a
            # (possibly corrupt) header claims
            data = bytearray()
            while len(data) <= count:
                chunk = _read_upto(stream, min(_CHUNK, count + 1 - len(data)))
                if not chunk:
                    break
                data += chunk
            if len(data) != count:
                more = "fewer" if len(data) < count else "more"
                shown = len(data) if len(data) < count else f"> {count}"
                raise _corrupt(
                    path,
                    f"{more} data bytes ({shown}) than sizes {shape} need ({count})",
                    how_to_get,
                )
            out = np.frombuffer(data, dtype=np.uint8)
    except DataError:
        raise
    except gzip.BadGzipFile as exc:
        raise _corrupt(path, f"not a valid gzip file: {exc}", how_to_get) from exc
    except (EOFError, zlib.error) as exc:
        raise _corrupt(
            path, f"compressed data ends early or is damaged: {exc}", how_to_get
        ) from exc
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return out.reshape(shape)


def _read_pair(
    folders: list[Path], images: str, labels: str, title: str, how_to_get: str
) -> tuple[np.ndarray, np.ndarray]:
    image_path = find_idx(folders, images, title, how_to_get)
    label_path = find_idx(folders, labels, title, how_to_get)
    x = read_idx(image_path, 3, how_to_get)
    y = read_idx(label_path, 1, how_to_get)
    if len(x) != len(y):
        raise DataError(
            f"{title}: {image_path} holds {len(x)} images but {label_path} holds {len(y)} "
            f"labels; one of them is truncated or from another dataset: re-install or "
            f"re-download them ({how_to_get})"
        )
    return x, y


def _check_labels(y: np.ndarray, num_classes: int, path_hint: str, title: str) -> None:
    if y.size and int(y.max()) >= num_classes:
        raise DataError(
            f"{title}: label {int(y.max())} in {path_hint} is outside 0..{num_classes - 1}; "
            "the files are corrupt or belong to another dataset (or EMNIST split)"
        )


def _load_idx_dataset(
    data_dir: Path,
    name: str,
    title: str,
    how_to_get: str,
    class_names: list[str],
    folders: list[Path] | None = None,
    files: tuple[str, str, str, str] | None = None,
    transpose: bool = False,
    label_offset: int = 0,
) -> Dataset:
    data_dir = require_dir(Path(data_dir), title, how_to_get)
    folders = folders or [data_dir]
    train_images, train_labels, test_images, test_labels = files or (*_FILES, *_TEST_FILES)
    x_train, y_train = _read_pair(folders, train_images, train_labels, title, how_to_get)
    x_test, y_test = _read_pair(folders, test_images, test_labels, title, how_to_get)
    num_classes = len(class_names)
    arrays = []
    for x, y, label_file in ((x_train, y_train, train_labels), (x_test, y_test, test_labels)):
        if transpose:
            x = np.ascontiguousarray(x.transpose(0, 2, 1))
        y = y.astype(np.int64)
        if label_offset:
            if y.size and int(y.min()) < label_offset:
                raise DataError(
                    f"{title}: label {int(y.min())} in {label_file} is below {label_offset}; "
                    "the files are corrupt or belong to another EMNIST split"
                )
            y -= label_offset
        _check_labels(y, num_classes, label_file, title)
        arrays.append((torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)))
    (xt, yt), (xs, ys) = arrays
    return Dataset(
        name=name,
        x_train=xt,
        y_train=yt,
        x_test=xs,
        y_test=ys,
        num_classes=num_classes,
        class_names=list(class_names),
    )


def load_fashion_mnist(data_dir: Path) -> Dataset:
    """Fashion-MNIST (Zalando): 60,000 + 10,000 grayscale 28x28 images of 10 clothing kinds."""
    return _load_idx_dataset(
        data_dir, "fashion-mnist", "Fashion-MNIST", FASHION_MNIST_HOW_TO_GET, FASHION_MNIST_CLASSES
    )


def load_mnist(data_dir: Path) -> Dataset:
    """MNIST: 60,000 + 10,000 grayscale 28x28 handwritten digits."""
    return _load_idx_dataset(data_dir, "mnist", "MNIST", MNIST_HOW_TO_GET, _DIGITS)


def load_emnist(data_dir: Path, split: str = "balanced") -> Dataset:
    """EMNIST, one of its splits: digits, letters, balanced, byclass, bymerge or mnist.

    Images are transposed back upright; the letters split's labels 1..26 become 0..25.

    :param split: the EMNIST split: digits, letters, balanced, byclass, bymerge or mnist
    """
    if split not in EMNIST_CLASSES:
        raise ConfigError(unknown_choice("EMNIST split", split, EMNIST_CLASSES))
    data_dir = require_dir(Path(data_dir), "EMNIST", EMNIST_HOW_TO_GET)
    prefix = f"emnist-{split}-"
    files = tuple(prefix + f.replace("t10k", "test") for f in (*_FILES, *_TEST_FILES))
    return _load_idx_dataset(
        data_dir,
        "emnist",
        f"EMNIST ({split})",
        EMNIST_HOW_TO_GET,
        EMNIST_CLASSES[split],
        folders=[data_dir, data_dir / "gzip"],
        files=files,  # type: ignore[arg-type]
        transpose=True,
        label_offset=1 if split == "letters" else 0,
    )
