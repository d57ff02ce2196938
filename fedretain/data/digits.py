"""scikit-learn's handwritten digits (UCI optdigits test set): 1,797 8x8 images, 10 classes.

Read with :func:`sklearn.datasets.load_digits`, which ships the data inside scikit-learn, so
nothing is downloaded. Pixels (0..16) are scaled to ``float32`` in [0, 1], shape
``(N, 1, 8, 8)``; a stratified 80/20 train/test split, seeded by ``seed``, is deterministic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedretain.data.base import Dataset

DIGITS_HOW_TO_GET = "nothing to get: it ships with scikit-learn"


def load_digits(data_dir: Path | None = None, seed: int = 0) -> Dataset:
    """The 8x8 digits of scikit-learn, split 80/20 stratified by class; ``data_dir`` is ignored.

    :param seed: seed of the stratified 80/20 train/test split
    """
    from sklearn.datasets import load_digits as sk_load_digits
    from sklearn.model_selection import train_test_split

    bunch = sk_load_digits()
    x = (np.asarray(bunch.images, dtype=np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = np.asarray(bunch.target, dtype=np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=seed
    )
    return Dataset(
        name="digits",
        x_train=torch.from_numpy(np.ascontiguousarray(x_train)),
        y_train=torch.from_numpy(np.ascontiguousarray(y_train)),
        x_test=torch.from_numpy(np.ascontiguousarray(x_test)),
        y_test=torch.from_numpy(np.ascontiguousarray(y_test)),
        num_classes=10,
        class_names=[str(d) for d in range(10)],
    )
