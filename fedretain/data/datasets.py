"""The dataset registry: every dataset fedretain can load, by name, and how to load it.

Nothing is downloaded here: each loader reads files already on disk (or, for ``digits`` and
``synthetic``, needs none); ``fedretain data get NAME`` (:mod:`fedretain.data.fetch`) is the
one command that fetches them. :func:`load_dataset` checks the name and parameters, picks the
default folder when none is given (the registry's, else the one ``data get`` fills, when it
exists), and calls the loader; :data:`DATASETS` lists them with a description and where to get
the files.
"""

from __future__ import annotations

from pathlib import Path

from fedretain.data import cifar, digits, fetch, folders, idx, leaf, synthetic
from fedretain.data.base import Dataset
from fedretain.errors import ConfigError, DataError
from fedretain.registry import Registry

# meta: default_dir (the folder read when data_dir is empty), how_to_get (where the files come
# from), needs_files=False (the loader reads no files: data_dir is ignored, never required)
DATASETS = Registry("dataset", internal=("data_dir",))
DATASETS.add(
    "fashion-mnist",
    idx.load_fashion_mnist,
    "Fashion-MNIST: 60k+10k grayscale 28x28 clothing images, 10 classes (IDX files)",
    default_dir="/usr/share/datasets/fashion-mnist",
    how_to_get=idx.FASHION_MNIST_HOW_TO_GET,
)
DATASETS.add(
    "mnist",
    idx.load_mnist,
    "MNIST: 60k+10k grayscale 28x28 handwritten digits, 10 classes (IDX files)",
    how_to_get=idx.MNIST_HOW_TO_GET,
)
DATASETS.add(
    "emnist",
    idx.load_emnist,
    "EMNIST: grayscale 28x28 handwritten characters; split=digits|letters|balanced|"
    "byclass|bymerge|mnist (IDX files)",
    how_to_get=idx.EMNIST_HOW_TO_GET,
)
DATASETS.add(
    "cifar10",
    cifar.load_cifar10,
    "CIFAR-10: 50k+10k RGB 32x32 images, 10 classes (python pickle batches)",
    how_to_get=cifar.CIFAR10_HOW_TO_GET,
)
DATASETS.add(
    "cifar100",
    cifar.load_cifar100,
    "CIFAR-100: 50k+10k RGB 32x32 images, 100 fine or 20 coarse classes (python pickles)",
    how_to_get=cifar.CIFAR100_HOW_TO_GET,
)
DATASETS.add(
    "femnist",
    leaf.load_femnist,
    "FEMNIST (LEAF): 28x28 handwritten characters, 62 classes, grouped by writer (TFF's HDF5 "
    "or LEAF's JSON)",
    how_to_get=leaf.FEMNIST_HOW_TO_GET,
)
DATASETS.add(
    "digits",
    digits.load_digits,
    "scikit-learn digits: 1,797 8x8 images, 10 classes, float in [0, 1]; no files needed",
    how_to_get=digits.DIGITS_HOW_TO_GET,
    needs_files=False,
)
DATASETS.add(
    "synthetic",
    synthetic.load_synthetic,
    "Synthetic(alpha, beta) of FedProx: generated vectors grouped by device; no files needed",
    how_to_get=synthetic.SYNTHETIC_HOW_TO_GET,
    needs_files=False,
)
DATASETS.add(
    "tiny-imagenet",
    folders.load_tiny_imagenet,
    "Tiny ImageNet: 100k train + 10k val RGB 64x64 images, 200 classes (JPEG folders)",
    how_to_get=folders.TINY_IMAGENET_HOW_TO_GET,
)
DATASETS.add(
    "imagefolder",
    folders.load_imagefolder,
    "Any train/<class>/*.png|jpg (+ test/<class>/) folder, resized; optional groups CSV",
    how_to_get=folders.IMAGEFOLDER_HOW_TO_GET,
)


def dataset_params(name: str) -> dict[str, object]:
    """The keyword parameters of dataset ``name``'s loader and their defaults (not data_dir)."""
    return DATASETS.params(name)


def load_dataset(name: str, data_dir: str | Path | None = None, **params: object) -> Dataset:
    """Load dataset ``name`` from ``data_dir`` (default: the registry's folder for it).

    Unknown names and parameters raise :class:`ConfigError` listing the valid ones; a missing
    folder or file raises :class:`DataError` saying where to get the data.
    """
    info = DATASETS.get(name)
    checked = DATASETS.check(name, params, prefix="dataset")
    if not info.meta.get("needs_files", True):
        path = Path(data_dir).expanduser() if data_dir is not None else None
        return info.factory(path, **checked)
    if data_dir is None or str(data_dir) == "":
        data_dir = default_folder(name)
    if data_dir is None:
        get = f" or `fedretain data get {name}`" if name in fetch.SOURCES else ""
        raise DataError(f"dataset {name} needs data_dir=FOLDER{get}; {info.meta['how_to_get']}")
    return info.factory(Path(data_dir).expanduser(), **checked)


def default_folder(name: str) -> str | None:
    """Where dataset ``name`` is read without a ``data_dir``: the registry's folder for it,
    else the one ``fedretain data get`` fills when that exists; None when neither is there."""
    own = DATASETS.get(name).meta.get("default_dir")
    fetched = fetch.fetched_dir(name)
    if (own is None or not Path(own).exists()) and fetch.present_in(name, fetched):
        return str(fetched)
    return own


def fetch_source(name: str) -> fetch.Source:
    """What ``fedretain data get NAME`` fetches, or a ConfigError saying why it fetches
    nothing for ``name`` (no files needed; none it can get: how to get them by hand)."""
    if name in fetch.SOURCES:
        return fetch.SOURCES[name]
    info = DATASETS.get(name)  # a ConfigError naming the datasets for an unknown name
    if not info.meta.get("needs_files", True):
        raise ConfigError(f"dataset {name} needs no files: nothing to get")
    raise ConfigError(f"fedretain cannot get dataset {name} by itself; {info.meta['how_to_get']}")
