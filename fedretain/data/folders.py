"""Image datasets stored as folders of image files, decoded with Pillow.

``tiny-imagenet``: the layout of ``tiny-imagenet-200.zip`` (``data_dir`` may be that folder or
its parent)::

    wnids.txt                          200 class ids (WordNet ids), one a line: the class order
    words.txt                          optional: "wnid<TAB>name, other name" for class names
    train/<wnid>/images/*.JPEG         500 training images per class
    val/images/*.JPEG                  10,000 validation images, used as the test set
    val/val_annotations.txt            "file<TAB>wnid<TAB>x0<TAB>y0<TAB>x1<TAB>y1" a line

Images are RGB 64x64 (grayscale ones are converted), returned as ``uint8`` ``(N, 3, 64, 64)``.

``imagefolder``: ``train/<class>/*.{png,jpg,jpeg,bmp}`` and, optionally,
``test/<class>/...``; the classes are the sorted subfolder names of ``train/``. Without
``test/`` a stratified ``test_fraction`` of each class is held out (deterministic in ``seed``).
Images are resized to ``size x size``, RGB or grayscale. ``groups_file`` (relative to
``data_dir`` or absolute) is an optional CSV with header ``path,group`` giving, for every
training image (path relative to ``train/``), the name of its natural client group.
"""

from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from fedretain.data.base import Dataset
from fedretain.data.idx import require_dir
from fedretain.errors import ConfigError, DataError

TINY_IMAGENET_HOW_TO_GET = (
    "set data_dir=FOLDER holding tiny-imagenet-200/ (wnids.txt, train/, val/), extracted from "
    "tiny-imagenet-200.zip (http://cs231n.stanford.edu/tiny-imagenet-200.zip)"
)
IMAGEFOLDER_HOW_TO_GET = (
    "set data_dir=FOLDER holding train/<class>/*.png|jpg|jpeg|bmp and optionally "
    "test/<class>/... (one subfolder per class)"
)
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp")


def _image_files(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.iterdir()
        if p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".") and p.is_file()
    )


def _decode(path: Path, size: int, mode: str) -> np.ndarray:
    try:
        with Image.open(path) as img:
            img = img.convert(mode)
            if img.size != (size, size):
                img = img.resize((size, size), Image.Resampling.BILINEAR)
            arr = np.asarray(img, dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError, Image.DecompressionBombError) as exc:
        raise DataError(f"{path} is not a readable image ({exc}); replace or remove it") from exc
    return arr[:, :, None] if arr.ndim == 2 else arr


def read_images(paths: Sequence[Path], size: int, grayscale: bool = False) -> torch.Tensor:
    """The images at ``paths`` as ``uint8`` ``(N, C, size, size)``, decoded on a few threads."""
    channels = 1 if grayscale else 3
    out = np.empty((len(paths), size, size, channels), dtype=np.uint8)
    mode = "L" if grayscale else "RGB"

    def work(i: int) -> None:
        out[i] = _decode(paths[i], size, mode)

    if len(paths) > 64:
        with ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1)) as pool:
            list(pool.map(work, range(len(paths)), chunksize=64))
    else:
        for i in range(len(paths)):
            work(i)
    return torch.from_numpy(np.ascontiguousarray(out.transpose(0, 3, 1, 2)))


def _lines(path: Path) -> list[str]:
    try:
        return [line.rstrip("\r\n") for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read {path} ({exc}); re-extract the dataset") from exc


def load_tiny_imagenet(data_dir: Path) -> Dataset:
    """Tiny ImageNet: 100,000 train + 10,000 validation (as test) RGB 64x64 images, 200 classes."""
    how = TINY_IMAGENET_HOW_TO_GET
    data_dir = require_dir(Path(data_dir), "Tiny ImageNet", how)
    root = data_dir if (data_dir / "wnids.txt").is_file() else data_dir / "tiny-imagenet-200"
    if not (root / "wnids.txt").is_file():
        raise DataError(
            f"Tiny ImageNet not found: neither {data_dir} nor {root} holds wnids.txt; {how}"
        )
    wnids = [w.strip() for w in _lines(root / "wnids.txt") if w.strip()]
    if not wnids or len(set(wnids)) != len(wnids):
        raise DataError(f"{root / 'wnids.txt'} is empty or repeats a class id; {how}")
    index = {w: i for i, w in enumerate(wnids)}

    train_paths: list[Path] = []
    train_labels: list[int] = []
    for i, wnid in enumerate(wnids):
        folder = root / "train" / wnid / "images"
        if not folder.is_dir():
            raise DataError(f"Tiny ImageNet: {folder} does not exist; {how}")
        files = _image_files(folder)
        train_paths += files
        train_labels += [i] * len(files)

    annotations = root / "val" / "val_annotations.txt"
    if not annotations.is_file():
        raise DataError(f"Tiny ImageNet: {annotations} does not exist; {how}")
    test_paths: list[Path] = []
    test_labels: list[int] = []
    for n, line in enumerate(_lines(annotations), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) < 2 or fields[1] not in index:
            raise DataError(
                f"{annotations} line {n} is not 'file<TAB>wnid...' with a wnid of wnids.txt; {how}"
            )
        path = root / "val" / "images" / fields[0]
        if not path.is_file():
            raise DataError(f"Tiny ImageNet: {path} (listed in {annotations}) is missing; {how}")
        test_paths.append(path)
        test_labels.append(index[fields[1]])

    class_names = list(wnids)
    words = root / "words.txt"
    if words.is_file():
        names = {}
        for line in _lines(words):
            wnid, _, text = line.partition("\t")
            if text:
                names[wnid.strip()] = text.split(",")[0].strip()
        class_names = [names.get(w, w) for w in wnids]

    return Dataset(
        name="tiny-imagenet",
        x_train=read_images(train_paths, 64),
        y_train=torch.tensor(train_labels, dtype=torch.int64),
        x_test=read_images(test_paths, 64),
        y_test=torch.tensor(test_labels, dtype=torch.int64),
        num_classes=len(wnids),
        class_names=class_names,
    )


def _group_order(names: set[str]) -> list[str]:
    """Group names in sorted order: numerically when every name is an integer."""
    try:
        return sorted(names, key=int)
    except ValueError:
        return sorted(names)


def _read_groups(path: Path, train_dir: Path, rel_paths: list[str]) -> list[str]:
    """The group name of each of ``rel_paths`` according to the CSV ``path``."""
    fix = "it must be a CSV with header 'path,group' and one row per training image"
    if not path.is_file():
        raise DataError(f"imagefolder: groups_file {path} does not exist; {fix}")
    mapping: dict[str, str] = {}
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if reader.fieldnames is None or not {"path", "group"} <= set(reader.fieldnames):
                raise DataError(f"{path} has no 'path,group' header; {fix}")
            for row in reader:
                if row["path"] is None or row["group"] is None:
                    raise DataError(f"{path} line {reader.line_num} has too few fields; {fix}")
                key = PurePosixPath(row["path"].strip().replace("\\", "/")).as_posix()
                group = row["group"].strip()
                if mapping.get(key, group) != group:
                    raise DataError(f"{path} gives {key} two groups ({mapping[key]}, {group})")
                mapping[key] = group
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DataError(f"cannot read {path} ({exc}); {fix}") from exc
    missing = [p for p in rel_paths if p not in mapping]
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise DataError(
            f"{path} gives no group for training image {missing[0]}{more} "
            f"(paths are relative to {train_dir}); {fix}"
        )
    return [mapping[p] for p in rel_paths]


def _scan(folder: Path, classes: list[str] | None) -> tuple[list[str], list[Path], list[int]]:
    subdirs = sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
    if classes is None:
        classes = subdirs
    else:
        unknown = sorted(set(subdirs) - set(classes))
        if unknown:
            raise DataError(
                f"imagefolder: {folder / unknown[0]} is a class that train/ does not have; "
                "give test/ the same class subfolders as train/"
            )
    index = {c: i for i, c in enumerate(classes)}
    paths: list[Path] = []
    labels: list[int] = []
    for name in subdirs:
        files = _image_files(folder / name)
        paths += files
        labels += [index[name]] * len(files)
    return classes, paths, labels


def load_imagefolder(
    data_dir: Path,
    size: int = 32,
    grayscale: bool = False,
    test_fraction: float = 0.2,
    seed: int = 0,
    groups_file: str = "",
) -> Dataset:
    """Images from ``train/<class>/`` (and ``test/<class>/``) resized to ``size x size``.

    :param size: side in pixels the images are resized to
    :param grayscale: one grayscale channel (false: RGB)
    :param test_fraction: per class, the fraction of train/ held out as test set when there is no
        test/
    :param seed: seed of that held-out split
    :param groups_file: CSV path,group naming each training image's natural client group (relative
        to data_dir or absolute; empty: none)
    """
    if size < 1:
        raise ConfigError(f"imagefolder size must be at least 1, got {size}")
    if not 0.0 <= test_fraction < 1.0:
        raise ConfigError(f"imagefolder test_fraction must be in [0, 1), got {test_fraction}")
    how = IMAGEFOLDER_HOW_TO_GET
    data_dir = require_dir(Path(data_dir), "image folder", how)
    train_dir = data_dir / "train"
    if not train_dir.is_dir():
        raise DataError(f"image folder not found: {train_dir} does not exist; {how}")
    classes, paths, labels = _scan(train_dir, None)
    if not paths:
        raise DataError(f"imagefolder: {train_dir} holds no images in class subfolders; {how}")
    y = np.asarray(labels, dtype=np.int64)

    groups = None
    if groups_file:
        gpath = Path(groups_file).expanduser()
        gpath = gpath if gpath.is_absolute() else data_dir / gpath
        rel = [p.relative_to(train_dir).as_posix() for p in paths]
        groups = np.asarray(_read_groups(gpath, train_dir, rel), dtype=object)

    test_dir = data_dir / "test"
    if test_dir.is_dir():
        _, test_paths, test_labels = _scan(test_dir, classes)
        train_paths = paths
        y_train, y_test = y, np.asarray(test_labels, dtype=np.int64)
        test_group_names = None
        train_group_names = groups
    else:
        rng = np.random.default_rng(seed)
        test_mask = np.zeros(len(paths), dtype=bool)
        for c in range(len(classes)):
            members = np.flatnonzero(y == c)
            n_test = min(round(len(members) * test_fraction), max(len(members) - 1, 0))
            test_mask[rng.permutation(members)[:n_test]] = True
        train_idx = np.flatnonzero(~test_mask)
        test_idx = np.flatnonzero(test_mask)
        train_paths = [paths[i] for i in train_idx]
        test_paths = [paths[i] for i in test_idx]
        y_train, y_test = y[train_idx], y[test_idx]
        train_group_names = groups[train_idx] if groups is not None else None
        test_group_names = groups[test_idx] if groups is not None else None

    group_ids = test_group_ids = None
    if train_group_names is not None:
        order = _group_order(set(train_group_names))
        rest = _group_order(
            set(test_group_names if test_group_names is not None else []) - set(order)
        )
        number = {g: i for i, g in enumerate(order + rest)}
        group_ids = np.asarray([number[g] for g in train_group_names], dtype=np.int64)
        if test_group_names is not None:
            test_group_ids = np.asarray([number[g] for g in test_group_names], dtype=np.int64)

    return Dataset(
        name="imagefolder",
        x_train=read_images(train_paths, size, grayscale),
        y_train=torch.from_numpy(np.asarray(y_train, dtype=np.int64)),
        x_test=read_images(test_paths, size, grayscale),
        y_test=torch.from_numpy(np.asarray(y_test, dtype=np.int64)),
        num_classes=len(classes),
        class_names=classes,
        groups=group_ids,
        test_groups=test_group_ids,
    )
