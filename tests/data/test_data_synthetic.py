"""FedProx's Synthetic(alpha, beta) generator."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

from fedretain.data.datasets import load_dataset
from fedretain.data.synthetic import generate_synthetic
from fedretain.errors import ConfigError


def dominance(data) -> float:
    """Mean over devices of the share of a device's most common training label."""
    y, g = data.y_train.numpy(), data.groups
    return float(np.mean([np.bincount(y[g == k]).max() / np.sum(g == k) for k in np.unique(g)]))


def test_shapes_and_types() -> None:
    data = load_dataset("synthetic", devices=7, dim=12, classes=5)
    assert data.name == "synthetic" and data.num_classes == 5
    assert data.x_train.dtype == torch.float32 and data.x_train.shape[1] == 12
    assert data.x_test.dtype == torch.float32 and data.input_shape == (12,)
    assert data.y_train.dtype == torch.int64 and int(data.y_train.max()) < 5
    assert data.groups is not None and data.test_groups is not None
    assert data.groups.dtype == np.int64 and set(data.groups.tolist()) == set(range(7))
    assert len(data.groups) == len(data.y_train) and len(data.test_groups) == len(data.y_test)


def test_deterministic_in_seed() -> None:
    a = load_dataset("synthetic", devices=5, seed=3)
    b = load_dataset("synthetic", devices=5, seed=3)
    c = load_dataset("synthetic", devices=5, seed=4)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    assert not torch.equal(a.x_train[:50], c.x_train[:50])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_device_sizes_and_ninety_ten_split(seed: int) -> None:
    devices = 20
    data = load_dataset("synthetic", devices=devices, seed=seed)
    train = np.bincount(data.groups, minlength=devices)
    test = np.bincount(data.test_groups, minlength=devices)
    sizes = train + test
    assert (sizes >= 50).all()
    np.testing.assert_array_equal(train, (9 * sizes) // 10)
    # floor(LogNormal(4, 2)) + 50: the first draws of the seeded generator
    expected = np.random.default_rng(seed).lognormal(4, 2, devices).astype(np.int64) + 50
    np.testing.assert_array_equal(sizes, expected)
    # the first 90% of each device's draws are the training samples, in order
    parts = generate_synthetic(devices=devices, seed=seed)
    k = 1
    x, y = parts[k]
    np.testing.assert_array_equal(data.x_train[data.groups == k].numpy(), x[: train[k]])
    np.testing.assert_array_equal(data.y_test[data.test_groups == k].numpy(), y[train[k] :])


def test_beta_spreads_device_inputs_and_sigma_is_the_covariance() -> None:
    parts = generate_synthetic(alpha=0.0, beta=5.0, devices=40, seed=0)
    means = np.array([x.mean() for x, _ in parts])  # ~ B_k, which is N(0, beta^2)
    assert 3.5 < means.std() < 7.0
    tight = generate_synthetic(alpha=0.0, beta=0.0, devices=40, seed=0)
    assert np.array([x.mean() for x, _ in tight]).std() < 0.5
    x = max((x for x, _ in parts), key=len)
    assert len(x) > 1000
    var = x.var(axis=0)
    expected = np.arange(1, 61) ** -1.2
    np.testing.assert_allclose(var, expected, rtol=0.25)


def test_labels_are_a_linear_model_of_inputs_per_device() -> None:
    parts = generate_synthetic(devices=10, seed=1)
    k = max(range(len(parts)), key=lambda i: len(parts[i][1]))
    x, y = parts[k][0][:400].astype(np.float64), parts[k][1][:400]
    assert len(np.unique(y)) >= 3
    with threadpool_limits(1):  # 400x60 is tiny: many BLAS threads only slow it down
        clf = LogisticRegression(C=1e3, max_iter=1000).fit(x, y)
    assert clf.score(x, y) > 0.97
    # each device has its own model: the fit fails on the other devices' samples
    others = [p for i, p in enumerate(parts) if i != k]
    x_other = np.concatenate([p[0] for p in others])
    y_other = np.concatenate([p[1] for p in others])
    assert clf.score(x_other, y_other) < 0.6


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_heterogeneity_grows_with_alpha_beta(seed: int) -> None:
    low = dominance(load_dataset("synthetic", alpha=0.0, beta=0.0, seed=seed))
    high = dominance(load_dataset("synthetic", alpha=10.0, beta=10.0, seed=seed))
    iid = dominance(load_dataset("synthetic", iid=True, seed=seed))
    assert high > low + 0.05
    assert high > 0.9
    assert iid < 0.5 < low


def test_iid_devices_share_one_distribution() -> None:
    data = load_dataset("synthetic", iid=True, devices=10, seed=0)
    y, g = data.y_train.numpy(), data.groups
    overall = np.bincount(y, minlength=10) / len(y)
    big = [k for k in range(10) if np.sum(g == k) >= 300]
    assert big
    for k in big:
        share = np.bincount(y[g == k], minlength=10) / np.sum(g == k)
        assert 0.5 * np.abs(share - overall).sum() < 0.15


def test_bad_parameters() -> None:
    with pytest.raises(ConfigError, match=r"standard deviations"):
        load_dataset("synthetic", alpha=-1.0)
    with pytest.raises(ConfigError, match=r"devices >= 1"):
        load_dataset("synthetic", devices=0)
