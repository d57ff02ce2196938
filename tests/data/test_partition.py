"""Unit tests of the client partitions in fedretain.data.partition."""

from __future__ import annotations

import numpy as np
import pytest

from fedretain.data.partition import (
    PARTITIONS,
    class_counts,
    dirichlet,
    fixed,
    iid,
    make_partition,
    natural,
    partition_params,
    shards,
    summary,
    train_val_split,
)
from fedretain.errors import ConfigError, DataError

# MNIST's training-set class sizes: unequal, as real data is
MNIST_COUNTS = [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]


def labels_from_counts(counts, seed=0):
    y = np.repeat(np.arange(len(counts)), counts)
    return np.random.default_rng(seed).permutation(y)


@pytest.fixture(scope="module")
def mnist_labels():
    return labels_from_counts(MNIST_COUNTS)


@pytest.fixture(scope="module")
def balanced_labels():
    return labels_from_counts([6000] * 10)


def assert_well_formed(parts, num_clients):
    assert isinstance(parts, list)
    assert len(parts) == num_clients
    for p in parts:
        assert isinstance(p, np.ndarray)
        assert p.dtype == np.int64
        assert p.ndim == 1
        assert np.all(np.diff(p) > 0), "indices must be sorted ascending, no repeats"


def assert_exact_once(parts, n):
    flat = np.concatenate(parts)
    assert flat.size == n
    assert np.array_equal(np.sort(flat), np.arange(n))


def assert_at_most_once(parts, n):
    flat = np.concatenate(parts)
    assert np.unique(flat).size == flat.size
    assert flat.min() >= 0 and flat.max() < n


def same(a, b):
    return len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))


def sizes_of(parts):
    return np.array([p.size for p in parts])


def classes_per_client(parts, labels):
    return np.array([np.unique(labels[p]).size for p in parts])


# ------------------------------------------------------------------------------------------
# registry and make_partition


def test_registry_names_and_descriptions():
    assert set(PARTITIONS) == {"iid", "dirichlet", "shards", "fixed", "natural"}
    for name, info in PARTITIONS.items():
        assert info.name == name
        assert info.description and "\n" not in info.description
        assert callable(info.factory)


def test_partition_params():
    assert partition_params("iid") == {}
    assert partition_params("dirichlet") == {"alpha": 0.5, "min_samples": 1, "balance": False}
    assert partition_params("shards") == {
        "classes_per_client": 2,
        "sizes": "equal",
        "sigma": 2.0,
    }
    assert partition_params("fixed") == {"per_client": 24}
    assert partition_params("natural") == {}


def test_unknown_partition_name():
    with pytest.raises(ConfigError, match=r"unknown partition 'dirichlett' \(did you mean"):
        partition_params("dirichlett")
    with pytest.raises(ConfigError, match=r"choose one of: dirichlet, fixed, iid, natural"):
        make_partition("nope", np.zeros(10, dtype=np.int64), 2, 0)


def test_unknown_parameter_lists_the_valid_ones():
    y = np.zeros(10, dtype=np.int64)
    with pytest.raises(ConfigError) as e:
        make_partition("dirichlet", y, 2, 0, alhpa=0.1)
    msg = str(e.value)
    assert "partition.alhpa" in msg
    assert "partition.alpha" in msg and "partition.min_samples" in msg
    assert "partition.balance" in msg
    with pytest.raises(ConfigError, match=r"partition\.alpha.*for partition iid; valid: none"):
        make_partition("iid", y, 2, 0, alpha=0.1)


def test_make_partition_passes_params(mnist_labels):
    a = make_partition("dirichlet", mnist_labels, 20, 3, alpha=0.1, min_samples=5)
    b = dirichlet(mnist_labels, 20, 3, alpha=0.1, min_samples=5)
    assert same(a, b)
    g = np.arange(mnist_labels.size) % 7
    assert same(
        make_partition("natural", mnist_labels, 7, 0, groups=g), natural(mnist_labels, 7, 0, g)
    )


@pytest.mark.parametrize("name", ["iid", "dirichlet", "shards", "fixed"])
def test_more_clients_than_samples(name):
    y = np.arange(5) % 2
    with pytest.raises(DataError, match=r"more clients \(6\) than samples \(5\)"):
        make_partition(name, y, 6, 0)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "4"])
def test_num_clients_must_be_positive_int(bad):
    with pytest.raises(ConfigError, match=r"clients must be an integer >= 1"):
        make_partition("iid", np.zeros(10, dtype=np.int64), bad, 0)


def test_bad_labels():
    with pytest.raises(DataError, match=r"1-D"):
        make_partition("iid", np.zeros((4, 2), dtype=np.int64), 2, 0)
    with pytest.raises(DataError, match=r"integer class ids"):
        make_partition("iid", np.zeros(4), 2, 0)
    with pytest.raises(DataError, match=r"non-negative"):
        make_partition("iid", np.array([0, -1, 1]), 2, 0)


def test_labels_may_be_any_integer_dtype(mnist_labels):
    a = make_partition("shards", mnist_labels.astype(np.uint8), 50, 1)
    b = make_partition("shards", mnist_labels, 50, 1)
    assert same(a, b)


# ------------------------------------------------------------------------------------------
# iid


def test_iid(mnist_labels):
    parts = iid(mnist_labels, 7, 0)
    assert_well_formed(parts, 7)
    assert_exact_once(parts, mnist_labels.size)
    s = sizes_of(parts)
    assert s.max() - s.min() <= 1
    assert same(parts, iid(mnist_labels, 7, 0))
    assert not same(parts, iid(mnist_labels, 7, 1))


def test_iid_one_sample_per_client():
    parts = iid(np.zeros(5, dtype=np.int64), 5, 0)
    assert_exact_once(parts, 5)
    assert set(sizes_of(parts)) == {1}


# ------------------------------------------------------------------------------------------
# dirichlet


def test_dirichlet_exact_once_and_deterministic(mnist_labels):
    parts = dirichlet(mnist_labels, 100, 0, alpha=0.5)
    assert_well_formed(parts, 100)
    assert_exact_once(parts, mnist_labels.size)
    assert sizes_of(parts).min() >= 1
    assert same(parts, dirichlet(mnist_labels, 100, 0, alpha=0.5))
    assert not same(parts, dirichlet(mnist_labels, 100, 1, alpha=0.5))


def test_dirichlet_min_samples_at_tiny_alpha_many_clients(balanced_labels):
    # the resample-until-ok partitioners stall here; ours tops clients up from the largest
    parts = dirichlet(balanced_labels, 10_000, 0, alpha=0.001, min_samples=1)
    assert_well_formed(parts, 10_000)
    assert_exact_once(parts, balanced_labels.size)
    assert sizes_of(parts).min() >= 1


def test_dirichlet_larger_min_samples(mnist_labels):
    parts = dirichlet(mnist_labels, 1000, 4, alpha=0.01, min_samples=20)
    assert_exact_once(parts, mnist_labels.size)
    assert sizes_of(parts).min() >= 20
    # exactly as many as possible: 60000 samples, 3000 clients with 20 each
    parts = dirichlet(mnist_labels, 3000, 4, alpha=0.01, min_samples=20)
    assert_exact_once(parts, mnist_labels.size)
    assert set(sizes_of(parts)) == {20}


def test_dirichlet_min_samples_zero_allows_empty_clients(balanced_labels):
    parts = dirichlet(balanced_labels, 1000, 0, alpha=0.001, min_samples=0)
    assert_exact_once(parts, balanced_labels.size)
    assert sizes_of(parts).min() == 0


def test_dirichlet_alpha_controls_skew(mnist_labels):
    skewed = classes_per_client(dirichlet(mnist_labels, 100, 0, alpha=0.01), mnist_labels)
    mixed = classes_per_client(dirichlet(mnist_labels, 10, 0, alpha=1000.0), mnist_labels)
    assert np.median(skewed) <= 2
    assert mixed.min() == 10


def test_dirichlet_balance_gives_equal_sizes(mnist_labels):
    for alpha in (0.001, 0.1, 0.5, 100.0):
        parts = dirichlet(mnist_labels, 70, 2, alpha=alpha, balance=True)
        assert_well_formed(parts, 70)
        assert_exact_once(parts, mnist_labels.size)
        s = sizes_of(parts)
        assert s.max() - s.min() <= 1, alpha


def test_dirichlet_balance_is_skewed_at_small_alpha(mnist_labels):
    parts = dirichlet(mnist_labels, 100, 0, alpha=0.01, balance=True)
    counts = class_counts(parts, mnist_labels, 10)
    top_share = counts.max(axis=1) / counts.sum(axis=1)
    assert np.median(top_share) > 0.9
    parts = dirichlet(mnist_labels, 100, 0, alpha=100.0, balance=True)
    k = classes_per_client(parts, mnist_labels)
    # nearly IID; the last clients served may find a class used up
    assert np.median(k) == 10 and k.min() >= 8


def test_dirichlet_balance_many_clients(balanced_labels):
    parts = dirichlet(balanced_labels, 10_000, 0, alpha=0.001, balance=True)
    assert_exact_once(parts, balanced_labels.size)
    assert set(sizes_of(parts)) == {6}


@pytest.mark.parametrize("alpha", [-1, 0, 0.0, float("nan"), float("inf"), "0.5", None, True])
def test_dirichlet_bad_alpha(alpha):
    y = np.arange(100) % 10
    with pytest.raises(ConfigError, match=r"partition\.alpha must be a finite number > 0, got"):
        make_partition("dirichlet", y, 10, 0, alpha=alpha)


def test_dirichlet_bad_alpha_message():
    with pytest.raises(ConfigError) as e:
        dirichlet(np.arange(100) % 10, 10, 0, alpha=-1)
    assert str(e.value) == "partition.alpha must be a finite number > 0, got -1"


@pytest.mark.parametrize("m", [-1, 1.5, "2"])
def test_dirichlet_bad_min_samples(m):
    with pytest.raises(ConfigError, match=r"partition\.min_samples must be an integer >= 0"):
        dirichlet(np.arange(100) % 10, 10, 0, min_samples=m)


def test_dirichlet_bad_balance():
    with pytest.raises(ConfigError, match=r"partition\.balance must be true or false, got 'yes'"):
        dirichlet(np.arange(100) % 10, 10, 0, balance="yes")


def test_dirichlet_not_enough_samples_for_min_samples():
    y = np.arange(50) % 5
    with pytest.raises(DataError) as e:
        dirichlet(y, 30, 0, min_samples=2)
    assert str(e.value) == (
        "cannot split 50 samples over 30 clients with at least 2 samples each; "
        "use clients <= 25 or a smaller partition.min_samples"
    )


# ------------------------------------------------------------------------------------------
# shards, equal sizes


def test_shards_one_class_per_client(mnist_labels):
    parts = shards(mnist_labels, 100, 0, classes_per_client=1)
    assert_well_formed(parts, 100)
    assert_exact_once(parts, mnist_labels.size)
    assert set(classes_per_client(parts, mnist_labels)) == {1}
    s = sizes_of(parts)
    assert (s.max() - s.min()) / s.mean() < 0.15  # near-equal shards


def test_shards_two_classes_per_client_mcmahan(mnist_labels):
    # FedAvg's pathological MNIST: 100 clients, 200 shards of ~300
    parts = shards(mnist_labels, 100, 0, classes_per_client=2)
    assert_well_formed(parts, 100)
    assert_exact_once(parts, mnist_labels.size)
    assert set(classes_per_client(parts, mnist_labels)) == {2}
    s = sizes_of(parts)
    assert s.min() >= 540 and s.max() <= 660


def test_shards_equal_sizes_on_balanced_data(balanced_labels):
    parts = shards(balanced_labels, 100, 0, classes_per_client=2)
    assert set(sizes_of(parts)) == {600}
    assert set(classes_per_client(parts, balanced_labels)) == {2}


def test_shards_pairs_vary(balanced_labels):
    # clients get varied class pairs, not a fixed pattern
    parts = shards(balanced_labels, 100, 0, classes_per_client=2)
    pairs = {tuple(np.unique(balanced_labels[p])) for p in parts}
    assert len(pairs) >= 15


@pytest.mark.parametrize("k", [1, 2, 3, 5, 10])
def test_shards_exactly_k_classes(mnist_labels, k):
    parts = shards(mnist_labels, 40, 7, classes_per_client=k)
    assert_exact_once(parts, mnist_labels.size)
    assert set(classes_per_client(parts, mnist_labels)) == {k}


def test_shards_many_clients(balanced_labels):
    parts = shards(balanced_labels, 10_000, 0, classes_per_client=2)
    assert_exact_once(parts, balanced_labels.size)
    assert set(classes_per_client(parts, balanced_labels)) == {2}
    assert set(sizes_of(parts)) == {6}


def test_shards_dominant_class_at_most_k():
    # class 1 has 3 samples: only 3 of the 10 clients can see two classes
    y = labels_from_counts([97, 3])
    parts = shards(y, 10, 0, classes_per_client=2)
    assert_exact_once(parts, 100)
    k = classes_per_client(parts, y)
    assert k.max() <= 2
    assert (k == 2).sum() == 3


def test_shards_determinism(mnist_labels):
    a = shards(mnist_labels, 50, 0)
    assert same(a, shards(mnist_labels, 50, 0))
    assert not same(a, shards(mnist_labels, 50, 1))


def test_shards_labels_with_gaps():
    y = labels_from_counts([0, 50, 0, 50, 50])  # classes 1, 3, 4 present
    parts = shards(y, 6, 0, classes_per_client=3)
    assert_exact_once(parts, 150)
    assert set(classes_per_client(parts, y)) == {3}


@pytest.mark.parametrize("k", [0, 11, -1, 2.0, "2"])
def test_shards_bad_classes_per_client(mnist_labels, k):
    with pytest.raises(
        ConfigError, match=r"partition\.classes_per_client must be an integer between 1 and 10"
    ):
        shards(mnist_labels, 10, 0, classes_per_client=k)


def test_shards_bad_sizes_and_sigma(mnist_labels):
    with pytest.raises(ConfigError) as e:
        shards(mnist_labels, 10, 0, sizes="powerlaw")
    assert str(e.value) == (
        "unknown partition.sizes 'powerlaw' (did you mean 'power_law'?); "
        "choose one of: equal, power_law"
    )
    with pytest.raises(ConfigError, match=r"partition\.sigma must be a finite number > 0"):
        shards(mnist_labels, 10, 0, sizes="power_law", sigma=0)


def test_shards_too_many_shards():
    y = np.arange(30) % 3
    with pytest.raises(DataError) as e:
        shards(y, 20, 0, classes_per_client=2)
    assert str(e.value) == (
        "cannot cut 30 samples into 40 shards (num_clients * classes_per_client = 20 * 2); "
        "use fewer clients or a smaller partition.classes_per_client"
    )


def test_shards_too_few_clients_for_the_classes(mnist_labels):
    with pytest.raises(DataError) as e:
        shards(mnist_labels, 3, 0, classes_per_client=2)
    assert str(e.value) == (
        "3 clients with classes_per_client=2 can hold at most 6 of the 10 classes and every "
        "sample must be assigned; use at least 5 clients or a larger "
        "partition.classes_per_client"
    )


# ------------------------------------------------------------------------------------------
# shards, power-law sizes


def test_power_law_classes_and_exact_once(mnist_labels):
    parts = shards(mnist_labels, 100, 0, classes_per_client=2, sizes="power_law")
    assert_well_formed(parts, 100)
    assert_exact_once(parts, mnist_labels.size)
    for u, p in enumerate(parts):
        assert set(np.unique(mnist_labels[p])) == {u % 10, (u + 1) % 10}


def test_power_law_sizes_heavy_tailed(mnist_labels):
    s = sizes_of(shards(mnist_labels, 200, 0, classes_per_client=2, sizes="power_law"))
    assert s.max() / np.median(s) > 10
    s_iid = sizes_of(shards(mnist_labels, 200, 0, classes_per_client=2))
    assert s_iid.max() / np.median(s_iid) < 1.2


def test_power_law_sigma_controls_tail(mnist_labels):
    light = sizes_of(shards(mnist_labels, 200, 0, sizes="power_law", sigma=0.1))
    heavy = sizes_of(shards(mnist_labels, 200, 0, sizes="power_law", sigma=3.0))
    assert light.max() / np.median(light) < heavy.max() / np.median(heavy)


def test_power_law_few_clients(mnist_labels):
    # 9 clients, 2 classes each: client 8 holds classes 8 and 9, so all 10 are covered
    parts = shards(mnist_labels, 9, 0, classes_per_client=2, sizes="power_law")
    assert_exact_once(parts, mnist_labels.size)


def test_power_law_determinism(mnist_labels):
    a = shards(mnist_labels, 30, 0, sizes="power_law")
    assert same(a, shards(mnist_labels, 30, 0, sizes="power_law"))
    assert not same(a, shards(mnist_labels, 30, 1, sizes="power_law"))


def test_power_law_too_few_clients(mnist_labels):
    with pytest.raises(DataError) as e:
        shards(mnist_labels, 5, 0, classes_per_client=2, sizes="power_law")
    assert str(e.value) == (
        "shards with sizes=power_law: 5 clients with classes_per_client=2 cover only 6 of the "
        "10 classes and every sample must be assigned; use at least 9 clients or a larger "
        "partition.classes_per_client"
    )


def test_power_law_class_too_small():
    y = labels_from_counts([100, 3, 100])
    with pytest.raises(DataError) as e:
        shards(y, 12, 0, classes_per_client=2, sizes="power_law")
    assert str(e.value) == (
        "shards with sizes=power_law: class 1 has 3 samples but 8 clients hold it and each "
        "needs one; use fewer clients or a smaller partition.classes_per_client"
    )


# ------------------------------------------------------------------------------------------
# fixed


def test_fixed_single_class_clients(mnist_labels):
    parts = fixed(mnist_labels, 1000, 0, per_client=24)
    assert_well_formed(parts, 1000)
    assert_at_most_once(parts, mnist_labels.size)
    assert set(sizes_of(parts)) == {24}
    assert set(classes_per_client(parts, mnist_labels)) == {1}


def test_fixed_spreads_clients_in_proportion_to_class_size():
    counts = np.array([5000, 2500, 1000, 500, 100])
    y = labels_from_counts(counts)
    parts = fixed(y, 182, 0, per_client=10)
    client_class = np.array([y[p[0]] for p in parts])
    per_class = np.bincount(client_class, minlength=5)
    quota = 182 * counts / counts.sum()
    assert np.all(np.abs(per_class - quota) <= 1.5)


def test_fixed_uses_every_class_capacity_at_the_maximum(mnist_labels):
    most = sum(c // 24 for c in MNIST_COUNTS)
    parts = fixed(mnist_labels, most, 0)
    assert_at_most_once(parts, mnist_labels.size)
    assert set(classes_per_client(parts, mnist_labels)) == {1}
    with pytest.raises(DataError) as e:
        fixed(mnist_labels, most + 1, 0)
    assert str(e.value) == (
        f"partition=fixed with per_client=24: these 60000 labels fill at most {most} "
        f"single-class clients, asked for {most + 1}; use clients <= {most} or a smaller "
        "partition.per_client"
    )


def test_fixed_determinism_and_client_order(mnist_labels):
    a = fixed(mnist_labels, 100, 0)
    assert same(a, fixed(mnist_labels, 100, 0))
    assert not same(a, fixed(mnist_labels, 100, 1))
    # client ids are not sorted by class
    client_class = np.array([mnist_labels[p[0]] for p in a])
    assert np.any(np.diff(client_class) < 0)


@pytest.mark.parametrize("pc", [0, -1, 2.5])
def test_fixed_bad_per_client(mnist_labels, pc):
    with pytest.raises(ConfigError, match=r"partition\.per_client must be an integer >= 1"):
        fixed(mnist_labels, 10, 0, per_client=pc)


# ------------------------------------------------------------------------------------------
# natural


def test_natural_one_client_per_group():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 500)
    g = rng.integers(100, 140, 500)  # ids need not start at 0
    ids = np.unique(g)
    parts = natural(y, ids.size, 0, groups=g)
    assert_well_formed(parts, ids.size)
    assert_exact_once(parts, 500)
    for gid, p in zip(ids, parts):
        assert np.array_equal(p, np.flatnonzero(g == gid))
    # seed does not matter when every group is a client
    assert same(parts, natural(y, ids.size, 5, groups=g))


def test_natural_fewer_clients_choose_groups_by_seed():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 10, 500)
    g = rng.integers(0, 40, 500)
    parts = natural(y, 10, 0, groups=g)
    assert_well_formed(parts, 10)
    assert_at_most_once(parts, 500)
    chosen = [np.unique(g[p]) for p in parts]
    assert all(c.size == 1 for c in chosen)
    chosen = np.concatenate(chosen)
    assert np.all(np.diff(chosen) > 0)  # ascending group id
    for gid, p in zip(chosen, parts):
        assert np.array_equal(p, np.flatnonzero(g == gid))  # whole groups
    assert same(parts, natural(y, 10, 0, groups=g))
    assert not same(parts, natural(y, 10, 1, groups=g))


def test_natural_string_group_ids():
    y = np.zeros(6, dtype=np.int64)
    g = np.array(["w2", "w1", "w2", "w3", "w1", "w1"])
    parts = natural(y, 3, 0, groups=g)
    assert [p.tolist() for p in parts] == [[1, 4, 5], [0, 2], [3]]


def test_natural_without_groups():
    with pytest.raises(DataError) as e:
        make_partition("natural", np.zeros(10, dtype=np.int64), 2, 0)
    assert str(e.value) == (
        "partition=natural needs a dataset with a natural client split (femnist, synthetic, "
        "imagefolder with groups_file)"
    )


def test_natural_too_many_clients():
    g = np.arange(10) % 4
    with pytest.raises(DataError) as e:
        make_partition("natural", np.zeros(10, dtype=np.int64), 5, 0, groups=g)
    assert str(e.value) == (
        "partition=natural: the dataset has 4 groups (natural clients), asked for "
        "clients=5; use clients <= 4"
    )
    with pytest.raises(DataError, match=r"has 4 groups"):
        make_partition("natural", np.zeros(10, dtype=np.int64), 11, 0, groups=g)


def test_natural_groups_shape_mismatch():
    with pytest.raises(DataError, match=r"one group id per training sample"):
        natural(np.zeros(10, dtype=np.int64), 2, 0, groups=np.zeros(9, dtype=np.int64))


# ------------------------------------------------------------------------------------------
# train_val_split, class_counts, summary


def test_train_val_split_ninety_ten(mnist_labels):
    parts = iid(mnist_labels, 10, 0)
    train, val = train_val_split(parts, 0.1, 0)
    assert_well_formed(train, 10)
    assert_well_formed(val, 10)
    for p, t, v in zip(parts, train, val):
        assert v.size == round(p.size * 0.1)
        assert np.intersect1d(t, v).size == 0
        assert np.array_equal(np.union1d(t, v), p)
    a, b = train_val_split(parts, 0.1, 0)
    assert same(a, train) and same(b, val)
    c, _ = train_val_split(parts, 0.1, 1)
    assert not same(c, train)


def test_train_val_split_small_clients():
    parts = [np.array([3], dtype=np.int64), np.array([1, 5], dtype=np.int64)]
    parts.append(np.arange(10, 15, dtype=np.int64))
    parts.append(np.empty(0, dtype=np.int64))
    train, val = train_val_split(parts, 0.1, 0)
    assert [t.size for t in train] == [1, 1, 4, 0]
    assert [v.size for v in val] == [0, 1, 1, 0]
    train, val = train_val_split(parts, 0.9, 0)
    assert [t.size for t in train] == [1, 1, 1, 0]
    assert [v.size for v in val] == [0, 1, 4, 0]


def test_train_val_split_zero_fraction():
    parts = [np.arange(5, dtype=np.int64), np.arange(5, 9, dtype=np.int64)]
    train, val = train_val_split(parts, 0.0, 0)
    assert same(train, parts)
    assert [v.size for v in val] == [0, 0]
    assert all(v.dtype == np.int64 for v in val)


def test_train_val_split_no_clients():
    assert train_val_split([], 0.1, 0) == ([], [])


@pytest.mark.parametrize("f", [-0.1, 1.0, 1.5, float("nan"), "0.1"])
def test_train_val_split_bad_fraction(f):
    with pytest.raises(ConfigError, match=r"val_fraction must be a number in \[0, 1\), got"):
        train_val_split([np.arange(4, dtype=np.int64)], f, 0)


def test_class_counts(mnist_labels):
    parts = shards(mnist_labels, 20, 0)
    counts = class_counts(parts, mnist_labels, 10)
    assert counts.shape == (20, 10)
    assert counts.dtype == np.int64
    assert np.array_equal(counts.sum(axis=1), sizes_of(parts))
    assert np.array_equal(counts.sum(axis=0), MNIST_COUNTS)
    for u, p in enumerate(parts):
        assert np.array_equal(counts[u], np.bincount(mnist_labels[p], minlength=10))


def test_class_counts_extra_classes_and_out_of_range():
    y = np.array([0, 1, 1, 2])
    parts = [np.array([0, 1]), np.array([2, 3])]
    assert class_counts(parts, y, 5).tolist() == [[1, 1, 0, 0, 0], [0, 1, 1, 0, 0]]
    with pytest.raises(DataError, match=r"label 2 is out of range for num_classes=2"):
        class_counts(parts, y, 2)


def test_summary(mnist_labels):
    parts = dirichlet(mnist_labels, 100, 0, alpha=0.1)
    text = summary(parts, mnist_labels, 10)
    lines = text.splitlines()
    assert lines[0] == "100 clients, 60000 of 60000 samples assigned"
    assert lines[1].startswith("samples per client: min ")
    assert "median" in lines[1] and "mean" in lines[1] and "max" in lines[1]
    assert lines[2].startswith("classes per client: min ")
    held = dict(
        kv.split(": ") for kv in lines[3].removeprefix("clients holding k classes: ").split(", ")
    )
    ncls = (class_counts(parts, mnist_labels, 10) > 0).sum(axis=1)
    assert {int(k): int(v) for k, v in held.items()} == {
        int(k): int((ncls == k).sum()) for k in np.unique(ncls)
    }
    assert sum(line.lstrip().startswith("client ") for line in lines) == 10
    assert lines[-1] == "  ... 90 more clients"


def test_summary_many_classes_and_few_clients():
    y = np.arange(620) % 62
    parts = iid(y, 3, 0)
    text = summary(parts, y, 62)
    assert text.startswith("3 clients")
    assert "more clients" not in text
    assert "\nclients holding k classes: more than 10: 3\n" in text
    assert sum(line.lstrip().startswith("client ") for line in text.splitlines()) == 3
    assert summary([], y, 62).startswith("0 clients")


def test_fixed_per_client_larger_than_every_class():
    labels = np.repeat(np.arange(3), [5, 7, 4])
    with pytest.raises(DataError, match=r"per_client=8 exceeds the largest class \(7 samples\)"):
        make_partition("fixed", labels, 2, 0, per_client=8)
