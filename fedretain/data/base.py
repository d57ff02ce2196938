"""The in-memory dataset every loader returns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


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
