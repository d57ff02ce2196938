"""Property-based tests of the client partitions: exact assignment or a clear DataError."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedretain.data.partition import class_counts, make_partition, train_val_split
from fedretain.errors import DataError

SETTINGS = settings(max_examples=50, deadline=None)


@st.composite
def label_arrays(draw):
    """1..20 classes, 1..3000 samples, class frequencies from balanced to very skewed."""
    num_classes = draw(st.integers(1, 20))
    n = draw(st.integers(1, 3000))
    skew = draw(st.floats(0.05, 20.0))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(num_classes, skew))
    p = np.where(np.isfinite(p), p, 0) + 1e-12
    return rng.choice(num_classes, size=n, p=p / p.sum()).astype(np.int64)


client_counts = st.one_of(st.integers(1, 12), st.integers(1, 400))
alphas = st.floats(-3.0, 2.0).map(lambda e: 10.0**e)  # 1e-3 .. 1e2, log-uniform
seeds = st.integers(0, 2**31 - 1)


def check_parts(parts, num_clients, n, exact=True):
    assert len(parts) == num_clients
    for p in parts:
        assert p.dtype == np.int64 and p.ndim == 1
        assert np.all(np.diff(p) > 0)
    flat = np.concatenate(parts)
    if exact:
        assert np.array_equal(np.sort(flat), np.arange(n))
    else:
        assert np.unique(flat).size == flat.size


def expect(possible, call):
    """Run ``call``: it must succeed when ``possible``, else raise a one-line DataError."""
    if possible:
        return call()
    with pytest.raises(DataError) as e:
        call()
    assert "\n" not in str(e.value)
    return None


@SETTINGS
@given(labels=label_arrays(), num_clients=client_counts, seed=seeds)
def test_iid_property(labels, num_clients, seed):
    n = labels.size
    parts = expect(num_clients <= n, lambda: make_partition("iid", labels, num_clients, seed))
    if parts is not None:
        check_parts(parts, num_clients, n)
        sizes = [p.size for p in parts]
        assert max(sizes) - min(sizes) <= 1


@SETTINGS
@given(
    labels=label_arrays(),
    num_clients=client_counts,
    seed=seeds,
    alpha=alphas,
    min_samples=st.integers(0, 3),
    balance=st.booleans(),
)
def test_dirichlet_property(labels, num_clients, seed, alpha, min_samples, balance):
    n = labels.size
    possible = num_clients <= n and num_clients * min_samples <= n
    parts = expect(
        possible,
        lambda: make_partition(
            "dirichlet",
            labels,
            num_clients,
            seed,
            alpha=alpha,
            min_samples=min_samples,
            balance=balance,
        ),
    )
    if parts is not None:
        check_parts(parts, num_clients, n)
        sizes = np.array([p.size for p in parts])
        assert sizes.min() >= min_samples
        if balance:
            assert sizes.max() - sizes.min() <= 1
        again = make_partition(
            "dirichlet",
            labels,
            num_clients,
            seed,
            alpha=alpha,
            min_samples=min_samples,
            balance=balance,
        )
        assert all(np.array_equal(a, b) for a, b in zip(parts, again))


@SETTINGS
@given(labels=label_arrays(), num_clients=client_counts, seed=seeds, data=st.data())
def test_shards_equal_property(labels, num_clients, seed, data):
    n = labels.size
    counts = np.bincount(labels)
    counts = counts[counts > 0]
    num_classes = counts.size
    k = data.draw(st.integers(1, num_classes), label="classes_per_client")
    num_shards = num_clients * k
    possible = num_shards <= n and num_shards >= num_classes
    parts = expect(
        possible,
        lambda: make_partition("shards", labels, num_clients, seed, classes_per_client=k),
    )
    if parts is not None:
        check_parts(parts, num_clients, n)
        ncls = np.array([np.unique(labels[p]).size for p in parts])
        assert ncls.max() <= k
        if np.minimum(counts, num_clients).sum() >= num_shards:
            assert np.all(ncls == k)  # distinct classes whenever the class sizes allow


@SETTINGS
@given(
    labels=label_arrays(),
    num_clients=client_counts,
    seed=seeds,
    sigma=st.floats(0.1, 4.0),
    data=st.data(),
)
def test_shards_power_law_property(labels, num_clients, seed, sigma, data):
    n = labels.size
    classes, counts = np.unique(labels, return_counts=True)
    num_classes = classes.size
    k = data.draw(st.integers(1, num_classes), label="classes_per_client")
    clients = np.arange(num_clients)
    holders = np.array([np.sum((c - clients) % num_classes < k) for c in range(num_classes)])
    possible = num_clients <= n and num_clients + k - 1 >= num_classes
    possible = possible and bool(np.all(counts >= holders))
    parts = expect(
        possible,
        lambda: make_partition(
            "shards",
            labels,
            num_clients,
            seed,
            classes_per_client=k,
            sizes="power_law",
            sigma=sigma,
        ),
    )
    if parts is not None:
        check_parts(parts, num_clients, n)
        rank = np.searchsorted(classes, labels)  # class index among those present
        for u, p in enumerate(parts):
            assert set(np.unique(rank[p])) == {(u + j) % num_classes for j in range(k)}


@SETTINGS
@given(
    labels=label_arrays(),
    num_clients=st.integers(1, 200),
    seed=seeds,
    per_client=st.integers(1, 40),
)
def test_fixed_property(labels, num_clients, seed, per_client):
    n = labels.size
    most = int((np.bincount(labels) // per_client).sum())
    possible = num_clients <= n and num_clients <= most
    parts = expect(
        possible,
        lambda: make_partition("fixed", labels, num_clients, seed, per_client=per_client),
    )
    if parts is not None:
        check_parts(parts, num_clients, n, exact=False)
        for p in parts:
            assert p.size == per_client
            assert np.unique(labels[p]).size == 1


@SETTINGS
@given(
    sizes=st.lists(st.integers(0, 60), min_size=1, max_size=30),
    val_fraction=st.one_of(st.just(0.0), st.floats(0.0, 0.99)),
    seed=seeds,
)
def test_train_val_split_property(sizes, val_fraction, seed):
    rng = np.random.default_rng(seed)
    perm = rng.permutation(sum(sizes)).astype(np.int64)
    parts = [np.sort(a) for a in np.split(perm, np.cumsum(sizes)[:-1])]
    train, val = train_val_split(parts, val_fraction, seed)
    assert len(train) == len(val) == len(parts)
    for p, t, v in zip(parts, train, val):
        assert t.dtype == np.int64 and v.dtype == np.int64
        assert np.all(np.diff(t) > 0) and np.all(np.diff(v) > 0)
        assert np.intersect1d(t, v).size == 0
        assert np.array_equal(np.sort(np.concatenate([t, v])), p)
        if p.size >= 1:
            assert t.size >= 1
        if p.size >= 2 and val_fraction > 0:
            assert v.size >= 1
        if val_fraction == 0:
            assert v.size == 0
    again = train_val_split(parts, val_fraction, seed)
    assert all(np.array_equal(a, b) for a, b in zip(train + val, again[0] + again[1]))


@SETTINGS
@given(labels=label_arrays(), num_clients=st.integers(1, 50), seed=seeds, alpha=alphas)
def test_class_counts_sums(labels, num_clients, seed, alpha):
    if num_clients > labels.size:
        return
    num_classes = int(labels.max()) + 1
    parts = make_partition("dirichlet", labels, num_clients, seed, alpha=alpha, min_samples=0)
    counts = class_counts(parts, labels, num_classes)
    assert counts.shape == (num_clients, num_classes)
    assert np.array_equal(counts.sum(axis=1), [p.size for p in parts])
    assert np.array_equal(counts.sum(axis=0), np.bincount(labels, minlength=num_classes))


@SETTINGS
@given(st.integers(1, 2000), st.integers(1, 60), seeds, st.data())
def test_natural_property(n, num_groups, seed, data):
    rng = np.random.default_rng(seed)
    groups = rng.integers(0, num_groups, size=n)
    groups = np.unique(groups, return_inverse=True)[1]  # ids 0..G-1, every group non-empty
    g = int(groups.max()) + 1
    labels = rng.integers(0, 5, size=n)
    num_clients = data.draw(st.integers(1, g + 3))
    parts = expect(
        num_clients <= g,
        lambda: make_partition("natural", labels, num_clients, seed, groups=groups),
    )
    if parts is None:
        return
    check_parts(parts, num_clients, n, exact=num_clients == g)
    for p in parts:  # each client is one whole group
        assert len(np.unique(groups[p])) == 1
        assert len(p) == int((groups == groups[p[0]]).sum())
