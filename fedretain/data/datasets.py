"""The dataset registry: every dataset fedretain can load, by name, and how to load it.

Nothing is ever downloaded: each loader reads files already on disk (or, for ``digits`` and
``synthetic``, needs none). :func:`load_dataset` checks the name and parameters, picks the
default folder when none is given, and calls the loader; :data:`DATASETS` lists them with a
description and where to get the files.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from fedretain.data import cifar, digits, folders, idx, leaf, synthetic
from fedretain.data.base import Dataset
from fedretain.errors import ConfigError, DataError, unknown_choice


@dataclass(frozen=True)
class DatasetInfo:
    """A registered dataset: ``loader(data_dir, **params)`` returns its :class:`Dataset`."""

    name: str
    description: str
    loader: Callable[..., Dataset]
    default_dir: str | None
    how_to_get: str


DATASETS: dict[str, DatasetInfo] = {
    info.name: info
    for info in (
        DatasetInfo(
            "fashion-mnist",
            "Fashion-MNIST: 60k+10k grayscale 28x28 clothing images, 10 classes (IDX files)",
            idx.load_fashion_mnist,
            "/usr/share/datasets/fashion-mnist",
            idx.FASHION_MNIST_HOW_TO_GET,
        ),
        DatasetInfo(
            "mnist",
            "MNIST: 60k+10k grayscale 28x28 handwritten digits, 10 classes (IDX files)",
            idx.load_mnist,
            None,
            idx.MNIST_HOW_TO_GET,
        ),
        DatasetInfo(
            "emnist",
            "EMNIST: grayscale 28x28 handwritten characters; split=digits|letters|balanced|"
            "byclass|bymerge|mnist (IDX files)",
            idx.load_emnist,
            None,
            idx.EMNIST_HOW_TO_GET,
        ),
        DatasetInfo(
            "cifar10",
            "CIFAR-10: 50k+10k RGB 32x32 images, 10 classes (python pickle batches)",
            cifar.load_cifar10,
            None,
            cifar.CIFAR10_HOW_TO_GET,
        ),
        DatasetInfo(
            "cifar100",
            "CIFAR-100: 50k+10k RGB 32x32 images, 100 fine or 20 coarse classes (python pickles)",
            cifar.load_cifar100,
            None,
            cifar.CIFAR100_HOW_TO_GET,
        ),
        DatasetInfo(
            "femnist",
            "FEMNIST (LEAF): 28x28 handwritten characters, 62 classes, grouped by writer (JSON)",
            leaf.load_femnist,
            None,
            leaf.FEMNIST_HOW_TO_GET,
        ),
        DatasetInfo(
            "digits",
            "scikit-learn digits: 1,797 8x8 images, 10 classes, float in [0, 1]; no files needed",
            digits.load_digits,
            None,
            digits.DIGITS_HOW_TO_GET,
        ),
        DatasetInfo(
            "synthetic",
            "Synthetic(alpha, beta) of FedProx: generated vectors grouped by device; no files "
            "needed",
            synthetic.load_synthetic,
            None,
            synthetic.SYNTHETIC_HOW_TO_GET,
        ),
        DatasetInfo(
            "tiny-imagenet",
            "Tiny ImageNet: 100k train + 10k val RGB 64x64 images, 200 classes (JPEG folders)",
            folders.load_tiny_imagenet,
            None,
            folders.TINY_IMAGENET_HOW_TO_GET,
        ),
        DatasetInfo(
            "imagefolder",
            "Any train/<class>/*.png|jpg (+ test/<class>/) folder, resized; optional groups CSV",
            folders.load_imagefolder,
            None,
            folders.IMAGEFOLDER_HOW_TO_GET,
        ),
    )
}

# Datasets whose loader reads no files: data_dir is ignored and never required.
_NO_FILES = frozenset({"digits", "synthetic"})


def _info(name: str) -> DatasetInfo:
    try:
        return DATASETS[name]
    except (KeyError, TypeError):
        raise ConfigError(unknown_choice("dataset", name, DATASETS)) from None


def dataset_params(name: str) -> dict[str, object]:
    """The keyword parameters of dataset ``name``'s loader and their defaults (not data_dir)."""
    loader = _info(name).loader
    return {
        p.name: p.default
        for p in inspect.signature(loader).parameters.values()
        if p.name != "data_dir" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }


def _check_param(dataset: str, key: str, value: object, default: object) -> object:
    """``value`` converted to the type of ``default`` (an int for a float is fine), or raise."""
    kind = type(default)
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value  # type: ignore[arg-type]
    elif kind is str:
        ok = isinstance(value, str)
    else:
        ok = True
    if not ok:
        raise ConfigError(
            f"dataset '{dataset}' parameter '{key}' must be a {kind.__name__}, "
            f"got {value!r} ({type(value).__name__})"
        )
    return value


def load_dataset(name: str, data_dir: str | Path | None = None, **params: object) -> Dataset:
    """Load dataset ``name`` from ``data_dir`` (default: the registry's folder for it).

    Unknown names and parameters raise :class:`ConfigError` listing the valid ones; a missing
    folder or file raises :class:`DataError` saying where to get the data.
    """
    info = _info(name)
    valid = dataset_params(name)
    for key in params:
        if key not in valid:
            listed = ", ".join(valid) if valid else "none"
            close = difflib.get_close_matches(key, list(valid), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"dataset '{name}' has no parameter '{key}'{hint}; its parameters are: {listed}"
            )
    checked = {k: _check_param(name, k, v, valid[k]) for k, v in params.items()}
    if name in _NO_FILES:
        path = Path(data_dir).expanduser() if data_dir is not None else None
        return info.loader(path, **checked)
    if data_dir is None or str(data_dir) == "":
        data_dir = info.default_dir
    if data_dir is None:
        raise DataError(f"dataset {name} needs data_dir=FOLDER; {info.how_to_get}")
    return info.loader(Path(data_dir).expanduser(), **checked)
