"""The in-memory dataset every loader returns."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

TEST_DRAW_SEED = 20_221_128  # the draw of Dataset.with_test_samples, apart from any run's seed


@dataclass
class Dataset:
    """A train/test pair of tensors plus what the rest of fedretain needs to know about them.

    Images are stored as ``uint8`` tensors of shape ``(N, C, H, W)`` (scaled to [0, 1] by
    :func:`as_float` when a batch is used), other data as ``float32`` ``(N, D)``. Labels are
    ``int64`` ``(N,)``. ``groups`` gives, for a dataset with a natural client split (FEMNIST
    writers, Synthetic devices, an image folder with a grouping file), the integer group id of
    every training sample; ``test_groups`` the same for the test set where known.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    class_names: list[str] | None = None
    groups: np.ndarray | None = None
    test_groups: np.ndarray | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def train_labels(self) -> np.ndarray:
        return self.y_train.numpy()

    def with_test_samples(self, n: int) -> Dataset:
        """This dataset with ``n`` of its test samples (all of them for 0 or more than it
        has): a draw of fixed seed, kept in test-set order, so every run that asks for ``n``
        tests on the same samples whatever its own seed."""
        total = len(self.y_test)
        if not 0 < n < total:
            return self
        keep = np.sort(np.random.default_rng(TEST_DRAW_SEED).permutation(total)[:n])
        idx = torch.from_numpy(keep)
        groups = self.test_groups[keep] if self.test_groups is not None else None
        return replace(self, x_test=self.x_test[idx], y_test=self.y_test[idx], test_groups=groups)


def as_float(x: torch.Tensor) -> torch.Tensor:
    """Inputs as float32: ``uint8`` images are scaled to [0, 1], floats pass through."""
    if x.dtype == torch.uint8:
        return x.to(torch.float32).div_(255.0)
    return x.to(torch.float32) if x.dtype != torch.float32 else x


def as_input(x: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """A batch of inputs as a model in ``dtype`` takes it: :func:`as_float`, or for a float64
    model (a ``precision=fp64`` run) in float64, ``uint8`` images scaled to [0, 1] in float64."""
    if dtype != torch.float64:
        return as_float(x)
    return x.double().div_(255.0) if x.dtype == torch.uint8 else x.double()
