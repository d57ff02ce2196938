"""Synthetic(alpha, beta): the federated data generator of FedProx (Li et al., MLSys 2020).

Nothing is read from disk. Device ``k`` of ``devices`` gets ``floor(LogNormal(4, 2)) + 50``
samples. Non-IID (the default): ``u_k ~ N(0, alpha^2)`` and ``B_k ~ N(0, beta^2)``; the device's
model has ``W_k`` (``dim x classes``) and ``b_k`` (``classes``) with entries ``~ N(u_k, 1)``,
its inputs centre ``v_k`` has entries ``~ N(B_k, 1)``, and ``x ~ N(v_k, Sigma)`` with
``Sigma = diag(j^-1.2)``, ``j = 1..dim``; ``y = argmax(softmax(x W_k + b_k))``. ``alpha`` sets how
much the local models differ, ``beta`` how much the local inputs differ. IID: one ``W``, ``b``
with entries ``~ N(0, 1)`` and ``x ~ N(0, Sigma)`` for every device. The first 90% of each
device's samples are for training, the rest for testing; ``groups`` and ``test_groups`` are the
device of each sample. A :class:`numpy.random.Generator` seeded with ``seed`` makes the draw
reproducible.

The reference is ``data/synthetic_1_1/generate_synthetic.py`` in the FedProx repository; this
is an independent implementation (``x`` is drawn with the diagonal covariance directly and the
arg-max is taken over the logits, which softmax does not reorder).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from fedretain.data.base import Dataset
from fedretain.errors import ConfigError

SYNTHETIC_HOW_TO_GET = "nothing to get: it is generated from its parameters"


def generate_synthetic(
    alpha: float = 1.0,
    beta: float = 1.0,
    devices: int = 30,
    dim: int = 60,
    classes: int = 10,
    iid: bool = False,
    seed: int = 0,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per device, ``(x float32 (n_k, dim), y int64 (n_k,))`` drawn as the module describes."""
    if alpha < 0 or beta < 0:
        raise ConfigError(f"synthetic alpha and beta are standard deviations: got {alpha}, {beta}")
    if devices < 1 or dim < 1 or classes < 2:
        raise ConfigError(
            f"synthetic needs devices >= 1, dim >= 1 and classes >= 2: got {devices}, {dim}, "
            f"{classes}"
        )
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(mean=4.0, sigma=2.0, size=devices).astype(np.int64) + 50
    sd = np.power(np.arange(1, dim + 1, dtype=np.float64), -1.2) ** 0.5  # sqrt(diag(Sigma))
    if iid:
        w_shared = rng.normal(0.0, 1.0, (dim, classes))
        b_shared = rng.normal(0.0, 1.0, classes)
        u = np.zeros(devices)
        centres = np.zeros((devices, dim))
    else:
        u = rng.normal(0.0, alpha, devices)
        big_b = rng.normal(0.0, beta, devices)
        centres = rng.normal(big_b[:, None], 1.0, (devices, dim))
    out = []
    for k in range(devices):
        if iid:
            w, b = w_shared, b_shared
        else:
            w = rng.normal(u[k], 1.0, (dim, classes))
            b = rng.normal(u[k], 1.0, classes)
        x = centres[k] + rng.standard_normal((int(sizes[k]), dim)) * sd
        y = np.argmax(x @ w + b, axis=1).astype(np.int64)
        out.append((x.astype(np.float32), y))
    return out


def load_synthetic(
    data_dir: Path | None = None,
    alpha: float = 1.0,
    beta: float = 1.0,
    devices: int = 30,
    dim: int = 60,
    classes: int = 10,
    iid: bool = False,
    seed: int = 0,
) -> Dataset:
    """Synthetic(alpha, beta) of FedProx, or its IID variant; ``data_dir`` is ignored.

    :param alpha: how much the devices' local models differ (standard deviation, >= 0)
    :param beta: how much the devices' local inputs differ (standard deviation, >= 0)
    :param devices: number of devices, each a natural client group
    :param dim: input dimension
    :param classes: number of classes
    :param iid: one model and one input distribution for every device (alpha and beta unused)
    :param seed: seed of the generator (the data, not the run)
    """
    parts = generate_synthetic(alpha, beta, devices, dim, classes, iid, seed)
    xs_train, ys_train, gs_train, xs_test, ys_test, gs_test = [], [], [], [], [], []
    for k, (x, y) in enumerate(parts):
        n_train = (9 * len(y)) // 10  # floor(0.9 n), without float rounding
        xs_train.append(x[:n_train])
        ys_train.append(y[:n_train])
        gs_train.append(np.full(n_train, k, dtype=np.int64))
        xs_test.append(x[n_train:])
        ys_test.append(y[n_train:])
        gs_test.append(np.full(len(y) - n_train, k, dtype=np.int64))
    return Dataset(
        name="synthetic",
        x_train=torch.from_numpy(np.concatenate(xs_train)),
        y_train=torch.from_numpy(np.concatenate(ys_train)),
        x_test=torch.from_numpy(np.concatenate(xs_test)),
        y_test=torch.from_numpy(np.concatenate(ys_test)),
        num_classes=classes,
        class_names=[str(c) for c in range(classes)],
        groups=np.concatenate(gs_train),
        test_groups=np.concatenate(gs_test),
    )
