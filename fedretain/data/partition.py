"""Client partitions: which training samples each federated client holds.

A partition is a list with one ``int64`` array of sample indices per client, sorted ascending.
Every partitioner is a pure function of ``(labels, num_clients, seed, **params)`` built on
``np.random.default_rng(seed)``: the same inputs give the same partition. No sample is given
to two clients. All of them are vectorised numpy (loops run over classes or clients, never over
samples) and terminate by construction: none resamples until a condition holds.

The schemes and where they come from:

``iid``
    A random permutation cut into near-equal parts (sizes differ by at most one).
``dirichlet``
    Dirichlet label skew (Hsu, Qi & Brown 2019; used by GradMA, Luo et al. CVPR 2023, and by
    TCE). By default (``balance=False``) each class is split over the clients with proportions
    drawn from ``Dir(alpha * 1_N)``, the per-class form of Yurochkin et al. 2019 and NIID-Bench
    (Li et al. 2022), also in PFLlib and FL-bench; client sizes then vary. Instead of resampling
    until every client has ``min_samples`` samples (which stalls at small ``alpha``), the
    shortfall is taken from the largest clients. ``balance=True`` is Hsu et al.'s per-client
    form: every client gets ``n // N`` or ``n // N + 1`` samples with its class mix drawn from
    ``Dir(alpha * C * prior)`` (``Dir(alpha * 1_C)`` for balanced classes), TCE's equal-size
    setting.
``shards``
    Pathological label skew. ``sizes="equal"``: McMahan et al. 2017 (FedAvg) sort MNIST by label,
    cut it into ``2 * N`` shards of 300 and give every client two; FedReg (Xu et al., ICLR 2022)
    uses the same split. Here the shards are cut inside classes (so a shard never straddles
    two classes) with near-equal sizes, and dealt so that a client's shards come from distinct
    classes whenever that is possible. ``sizes="power_law"``: Li et al. 2020 (FedProx,
    ``data/mnist/generate_niid.py``): client ``u`` holds classes ``(u + j) mod C`` for
    ``j < classes_per_client`` and client sizes follow a log-normal (power-law-like) law.
``fixed``
    FedReg's EMNIST setting (Xu et al., ICLR 2022): every client holds ``per_client`` samples
    (default 24) of one single class; not every sample is used.
``natural``
    The dataset's own client split (LEAF FEMNIST writers, Synthetic devices, ...): one client
    per group id.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from fedretain.errors import ConfigError, DataError, unknown_choice
from fedretain.registry import Registry

Partition = list[np.ndarray]

# arguments of a partition function that are not its parameters
_ARGS = ("labels", "num_clients", "seed", "groups")

_SIZES = ("equal", "power_law")


# --------------------------------------------------------------------------------------------
# validation helpers


def _as_labels(labels: np.ndarray) -> np.ndarray:
    """Labels as a 1-D ``int64`` array of non-negative class ids."""
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise DataError(f"labels must be a 1-D array, got shape {arr.shape}")
    if arr.size and not (np.issubdtype(arr.dtype, np.integer) or arr.dtype == np.bool_):
        raise DataError(f"labels must be integer class ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise DataError(f"labels must be non-negative class ids, got {arr.min()}")
    return arr


def _check_num_clients(num_clients: int) -> int:
    if isinstance(num_clients, bool) or not isinstance(num_clients, Integral) or num_clients < 1:
        raise ConfigError(f"clients must be an integer >= 1, got {num_clients!r}")
    return int(num_clients)


def _check_not_more_clients(num_clients: int, n: int) -> None:
    if num_clients > n:
        raise DataError(f"more clients ({num_clients}) than samples ({n}); use clients <= {n}")


def _int_param(key: str, value: object, lo: int, hi: int | None = None) -> int:
    ok = isinstance(value, Integral) and not isinstance(value, bool)
    if ok and value >= lo and (hi is None or value <= hi):
        return int(value)
    valid = f">= {lo}" if hi is None else f"between {lo} and {hi}"
    raise ConfigError(f"partition.{key} must be an integer {valid}, got {value!r}")


def _positive_param(key: str, value: object) -> float:
    ok = isinstance(value, Real) and not isinstance(value, bool)
    if ok and math.isfinite(value) and value > 0:
        return float(value)
    raise ConfigError(f"partition.{key} must be a finite number > 0, got {value!r}")


def _bool_param(key: str, value: object) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    raise ConfigError(f"partition.{key} must be true or false, got {value!r}")


# --------------------------------------------------------------------------------------------
# building blocks


def _group(owner: np.ndarray, num_clients: int) -> Partition:
    """Turn ``owner[i]`` (client of sample ``i``, -1 for none) into sorted index arrays."""
    sel = np.flatnonzero(owner >= 0)
    order = sel[np.argsort(owner[sel], kind="stable")].astype(np.int64, copy=False)
    counts = np.bincount(owner[sel], minlength=num_clients)
    return np.split(order, np.cumsum(counts)[:-1])


def _by_class(labels: np.ndarray, rng: np.random.Generator):
    """Present classes, their sizes and the sample indices grouped by class in random order.

    Returns ``(classes, counts, starts, order)``: ``order[starts[c]:starts[c] + counts[c]]`` are
    the samples of ``classes[c]``, shuffled.
    """
    classes, inv = np.unique(labels, return_inverse=True)
    perm = rng.permutation(labels.size)
    order = perm[np.argsort(inv[perm], kind="stable")]
    counts = np.bincount(inv, minlength=classes.size)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    return classes, counts, starts, order


def _split_counts(props: np.ndarray, totals: np.ndarray) -> np.ndarray:
    """Integer counts along the last axis that sum to ``totals``, close to ``props * totals``.

    Rounds the cumulative sums, so counts are non-negative and each total is met exactly.
    """
    totals = np.asarray(totals)
    cum = np.rint(np.cumsum(props, axis=-1) * totals[..., None]).astype(np.int64)
    cum = np.minimum(cum, totals[..., None])
    cum[..., -1] = totals
    return np.diff(cum, axis=-1, prepend=0)


def _dirichlet(rng: np.random.Generator, alpha: float, dim: int, size: int) -> np.ndarray:
    """``size`` draws from ``Dir(alpha * 1_dim)``; a draw that underflows becomes one-hot."""
    p = rng.dirichlet(np.full(dim, alpha), size=size)
    bad = ~np.all(np.isfinite(p), axis=1) | (p.sum(axis=1) <= 0)
    if bad.any():
        p[bad] = 0.0
        p[np.flatnonzero(bad), rng.integers(dim, size=int(bad.sum()))] = 1.0
    return p


def _apportion(
    weights: np.ndarray,
    total: int,
    lo: np.ndarray,
    hi: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    """Split ``total`` seats over classes in proportion to ``weights`` (D'Hondt), lo <= s <= hi.

    D'Hondt gives seats to the largest quotients ``weights[c] / j``; it minimises the largest
    ``weights[c] / seats[c]`` (for shards: the largest shard). Ties are broken with ``rng``.
    Needs ``sum(lo) <= total <= sum(hi)``.
    """
    hi = hi.astype(np.int64)
    cls = np.repeat(np.arange(weights.size), hi)
    starts = np.cumsum(hi) - hi
    j = np.arange(cls.size) - starts[cls] + 1
    quot = weights[cls] / j
    quot[j <= lo[cls]] = np.inf
    chosen = np.lexsort((rng.random(cls.size), -quot))[:total]
    return np.bincount(cls[chosen], minlength=weights.size)


# --------------------------------------------------------------------------------------------
# partitions


def iid(labels: np.ndarray, num_clients: int, seed: int) -> Partition:
    """A random permutation of the samples cut into near-equal parts (np.array_split)."""
    labels = _as_labels(labels)
    num_clients = _check_num_clients(num_clients)
    _check_not_more_clients(num_clients, labels.size)
    rng = np.random.default_rng(seed)
    perm = rng.permutation(labels.size).astype(np.int64)
    return [np.sort(p) for p in np.array_split(perm, num_clients)]


def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    seed: int,
    alpha: float = 0.5,
    min_samples: int = 1,
    balance: bool = False,
) -> Partition:
    """Dirichlet label skew; smaller ``alpha`` is more skewed.

    ``balance=False``: each class's samples are split over the clients with proportions drawn
    from ``Dir(alpha * 1_N)``. Then every client short of ``min_samples`` samples is topped up
    with random samples taken from the largest clients (water-filling from the top, never
    bringing a donor below ``min_samples``), so the guarantee costs no resampling.

    ``balance=True``: client sizes are ``n // N`` or ``n // N + 1``; each client's class mix is
    drawn from ``Dir(alpha * C * prior)`` (``prior``: the class frequencies, so this is
    ``Dir(alpha * 1_C)`` for balanced classes; Hsu et al. weight by the prior too) and filled,
    clients in a random order, from what remains of each class; a client whose classes run out
    is completed from the classes with most samples left. ``min_samples`` then holds whenever
    ``n >= N * min_samples``.

    :param alpha: concentration of the Dirichlet draw: smaller is more skewed (0.1: strongly
        non-IID)
    :param min_samples: fewest training samples any client gets
    :param balance: equal client sizes, each client's class mix drawn from the Dirichlet (false:
        each class split over the clients)
    """
    labels = _as_labels(labels)
    num_clients = _check_num_clients(num_clients)
    alpha = _positive_param("alpha", alpha)
    min_samples = _int_param("min_samples", min_samples, 0)
    balance = _bool_param("balance", balance)
    n = labels.size
    _check_not_more_clients(num_clients, n)
    if num_clients * min_samples > n:
        raise DataError(
            f"cannot split {n} samples over {num_clients} clients with at least {min_samples} "
            f"samples each; use clients <= {n // min_samples} or a smaller "
            "partition.min_samples"
        )
    rng = np.random.default_rng(seed)
    _, counts, starts, order = _by_class(labels, rng)
    if balance:
        owner = _dirichlet_balanced(num_clients, alpha, counts, starts, order, rng)
    else:
        owner = np.empty(n, dtype=np.int64)
        clients = np.arange(num_clients)
        for c in range(counts.size):
            p = _dirichlet(rng, alpha, num_clients, 1)[0]
            k = _split_counts(p, np.int64(counts[c]))
            owner[order[starts[c] : starts[c] + counts[c]]] = np.repeat(clients, k)
        if min_samples > 0:
            _top_up(owner, num_clients, min_samples, rng)
    return _group(owner, num_clients)


def _top_up(owner: np.ndarray, num_clients: int, m: int, rng: np.random.Generator) -> None:
    """Move random samples from the largest clients to those with fewer than ``m`` (in place)."""
    sizes = np.bincount(owner, minlength=num_clients)
    need = np.maximum(m - sizes, 0)
    deficit = int(need.sum())
    if deficit == 0:
        return
    # samples grouped by client, random order inside a client
    perm = rng.permutation(owner.size)
    grouped = perm[np.argsort(owner[perm], kind="stable")]
    client = owner[grouped]
    pos = np.arange(owner.size) - (np.cumsum(sizes) - sizes)[client]
    # taking the pos-th sample of a client leaves it sizes - pos - 1 >= m samples: movable
    # when pos < sizes - m; its key sizes - pos is the donor's size before giving it, so the
    # largest keys first is water-filling from the largest clients down
    movable = pos < sizes[client] - m
    cand = grouped[movable]
    key = (sizes[client] - pos)[movable]
    take = cand[np.lexsort((rng.random(cand.size), -key))[:deficit]]
    receivers = np.repeat(np.flatnonzero(need), need[need > 0])
    owner[rng.permutation(take)] = receivers


def _dirichlet_balanced(
    num_clients: int,
    alpha: float,
    counts: np.ndarray,
    starts: np.ndarray,
    order: np.ndarray,
    rng: np.random.Generator,
) -> np.ndarray:
    n = int(counts.sum())
    num_classes = counts.size
    sizes = np.full(num_clients, n // num_clients, dtype=np.int64)
    sizes[rng.permutation(num_clients)[: n % num_clients]] += 1
    # Dir(alpha * C * prior): Dir(alpha * 1_C) for balanced classes, and in general clients
    # ask for each class in proportion to its share, so demand matches supply on average
    conc = alpha * num_classes * counts / n
    mix = rng.dirichlet(conc, size=num_clients)
    bad = ~np.all(np.isfinite(mix), axis=1) | (mix.sum(axis=1) <= 0)
    if bad.any():  # underflow at tiny alpha: one class, drawn by the prior
        mix[bad] = 0.0
        mix[np.flatnonzero(bad), rng.choice(num_classes, int(bad.sum()), p=counts / n)] = 1.0
    want = _split_counts(mix, sizes)  # (N, C)
    visit = rng.permutation(num_clients)
    # clients in visiting order take what they want of each class while it lasts
    want_v = want[visit]
    before = np.cumsum(want_v, axis=0) - want_v
    got_v = np.clip(counts[None, :] - before, 0, want_v)  # (N, C), rows in visiting order
    owner = np.empty(n, dtype=np.int64)
    left = counts - got_v.sum(axis=0)
    leftovers = []
    for c in range(num_classes):
        idx = order[starts[c] : starts[c] + counts[c]]
        used = counts[c] - left[c]
        owner[idx[:used]] = np.repeat(visit, got_v[:, c])
        leftovers.append(idx[used:])
    # shortfalls are filled from the classes with most samples left, largest first
    short_v = sizes[visit] - got_v.sum(axis=1)
    by_left = np.lexsort((rng.random(num_classes), -left))
    pool = np.concatenate([leftovers[c] for c in by_left])
    owner[pool] = np.repeat(visit, short_v)
    return owner


def shards(
    labels: np.ndarray,
    num_clients: int,
    seed: int,
    classes_per_client: int = 2,
    sizes: str = "equal",
    sigma: float = 2.0,
) -> Partition:
    """Pathological label skew: every client sees ``classes_per_client`` classes.

    ``sizes="equal"`` (McMahan et al. 2017): the label-sorted samples are cut into
    ``N * classes_per_client`` shards of near-equal size, each inside one class (classes get
    shards in proportion to their size, D'Hondt, at most ``N`` each where possible), and every
    client is dealt ``classes_per_client`` shards, largest remaining classes first with random
    ties, which gives each client distinct classes whenever the class sizes allow it. So
    ``classes_per_client=1`` gives every client exactly one class.

    ``sizes="power_law"`` (FedProx's generator, generalised): client ``u`` holds classes
    ``(u + j) mod C`` for ``j < classes_per_client`` (``C``: classes present, in label order);
    client weights are drawn from LogNormal(0, ``sigma``); each client first gets one sample of
    each of its classes and the rest of every class is split among its holders in proportion to
    their weights. Client sizes are heavy-tailed.

    Every sample is assigned exactly once in both cases.

    :param classes_per_client: classes each client holds
    :param sizes: client sizes: equal (McMahan et al.'s shards) or power_law (FedProx's heavy-tailed
        sizes)
    :param sigma: sizes=power_law: the LogNormal(0, sigma) of the clients' weights
    """
    labels = _as_labels(labels)
    num_clients = _check_num_clients(num_clients)
    n = labels.size
    num_classes = int(np.unique(labels).size)
    k = _int_param("classes_per_client", classes_per_client, 1, max(num_classes, 1))
    if sizes not in _SIZES:
        raise ConfigError(unknown_choice("partition.sizes", sizes, _SIZES))
    sigma = _positive_param("sigma", sigma)
    _check_not_more_clients(num_clients, n)
    rng = np.random.default_rng(seed)
    if sizes == "equal":
        return _shards_equal(labels, num_clients, k, rng)
    return _shards_power_law(labels, num_clients, k, sigma, rng)


def _shards_equal(
    labels: np.ndarray, num_clients: int, k: int, rng: np.random.Generator
) -> Partition:
    n = labels.size
    num_shards = num_clients * k
    classes, counts, starts, order = _by_class(labels, rng)
    num_classes = classes.size
    if num_shards > n:
        raise DataError(
            f"cannot cut {n} samples into {num_shards} shards (num_clients * "
            f"classes_per_client = {num_clients} * {k}); use fewer clients or a smaller "
            "partition.classes_per_client"
        )
    if num_shards < num_classes:
        raise DataError(
            f"{num_clients} clients with classes_per_client={k} can hold at most {num_shards} "
            f"of the {num_classes} classes and every sample must be assigned; use at least "
            f"{-(-num_classes // k)} clients or a larger partition.classes_per_client"
        )
    # shards per class: at most one per client keeps a client's classes distinct
    lo, hi = np.ones(num_classes), np.minimum(counts, num_clients)
    if hi.sum() < num_shards:
        # some clients must get two shards of one class: give every class as many shards as
        # it can spread over distinct clients, the rest to the large classes
        lo, hi = hi, counts
    per_class = _apportion(counts.astype(float), num_shards, lo, hi, rng)
    # shard of every sample in class order (np.array_split within each class)
    cls = np.repeat(np.arange(num_classes), counts)
    pos = np.arange(n) - starts[cls]
    q, r = np.divmod(counts, per_class)
    q, r = q[cls], r[cls]
    local = np.where(pos < r * (q + 1), pos // (q + 1), r + (pos - r * (q + 1)) // np.maximum(q, 1))
    shard_start = np.cumsum(per_class) - per_class
    shard_of = shard_start[cls] + local
    # deal: each client takes its classes from those with most shards left (random ties);
    # while max(left) <= clients left this keeps every later client's classes distinct
    left = per_class.astype(np.int64).copy()
    nxt = shard_start.astype(np.int64).copy()
    shard_owner = np.empty(num_shards, dtype=np.int64)
    if k == 1:  # one shard each: nothing to keep distinct
        shard_owner = rng.permutation(num_shards)
    else:
        noise = rng.random((num_clients, num_classes))
        for u in range(num_clients):
            if np.count_nonzero(left) >= k:
                picks = np.argpartition(-np.where(left > 0, left + noise[u], -1.0), k - 1)[:k]
                shard_owner[nxt[picks]] = u
                nxt[picks] += 1
                left[picks] -= 1
            else:  # only when some class has more shards than clients: repeat the largest
                for _ in range(k):
                    c = int(np.argmax(np.where(left > 0, left + noise[u], -1.0)))
                    shard_owner[nxt[c]] = u
                    nxt[c] += 1
                    left[c] -= 1
    relabel = rng.permutation(num_clients)
    owner = np.empty(n, dtype=np.int64)
    owner[order] = relabel[shard_owner[shard_of]]
    return _group(owner, num_clients)


def _shards_power_law(
    labels: np.ndarray, num_clients: int, k: int, sigma: float, rng: np.random.Generator
) -> Partition:
    classes, counts, starts, order = _by_class(labels, rng)
    num_classes = classes.size
    if num_clients + k - 1 < num_classes:
        raise DataError(
            f"shards with sizes=power_law: {num_clients} clients with classes_per_client={k} "
            f"cover only {num_clients + k - 1} of the {num_classes} classes and every sample "
            f"must be assigned; use at least {num_classes - k + 1} clients or a larger "
            "partition.classes_per_client"
        )
    clients = np.arange(num_clients)
    weight = rng.lognormal(0.0, sigma, num_clients)
    owner = np.empty(labels.size, dtype=np.int64)
    for c in range(num_classes):
        holders = clients[(c - clients) % num_classes < k]
        if counts[c] < holders.size:
            raise DataError(
                f"shards with sizes=power_law: class {classes[c]} has {counts[c]} samples but "
                f"{holders.size} clients hold it and each needs one; use fewer clients or a "
                "smaller partition.classes_per_client"
            )
        w = weight[holders]
        extra = _split_counts(w / w.sum(), np.int64(counts[c] - holders.size))
        owner[order[starts[c] : starts[c] + counts[c]]] = np.concatenate(
            (holders, np.repeat(holders, extra))
        )
    return _group(owner, num_clients)


def fixed(labels: np.ndarray, num_clients: int, seed: int, per_client: int = 24) -> Partition:
    """Every client holds ``per_client`` samples of one single class (FedReg's EMNIST clients).

    Clients are spread over the classes in proportion to class sizes (D'Hondt, random ties),
    never more than a class can fill; samples are drawn without replacement and the rest of
    the data is left out.

    :param per_client: samples each client holds, all of one class
    """
    labels = _as_labels(labels)
    num_clients = _check_num_clients(num_clients)
    per_client = _int_param("per_client", per_client, 1)
    rng = np.random.default_rng(seed)
    classes, counts, starts, order = _by_class(labels, rng)
    cap = counts // per_client
    most = int(cap.sum())
    if most == 0:
        raise DataError(
            f"partition=fixed: per_client={per_client} exceeds the largest class "
            f"({int(counts.max())} samples); use partition.per_client <= {int(counts.max())}"
        )
    if num_clients > most:
        raise DataError(
            f"partition=fixed with per_client={per_client}: these {labels.size} labels fill at "
            f"most {most} single-class clients, asked for {num_clients}; use clients <= "
            f"{most} or a smaller partition.per_client"
        )
    per_class = _apportion(counts.astype(float), num_clients, np.zeros(classes.size), cap, rng)
    cls = np.repeat(np.arange(classes.size), counts)
    pos = np.arange(labels.size) - starts[cls]
    first_client = np.cumsum(per_class) - per_class
    used = pos < per_class[cls] * per_client
    relabel = rng.permutation(num_clients)
    owner = np.full(labels.size, -1, dtype=np.int64)
    owner[order[used]] = relabel[first_client[cls[used]] + pos[used] // per_client]
    return _group(owner, num_clients)


def natural(
    labels: np.ndarray, num_clients: int, seed: int, groups: np.ndarray | None = None
) -> Partition:
    """One client per group id of the dataset (FEMNIST writers, Synthetic devices).

    With as many clients as groups, client ``i`` is the ``i``-th group in ascending id order
    and every sample is assigned once (``seed`` is unused). With fewer clients, ``num_clients``
    groups are chosen at random with ``seed`` (as LEAF samples users) and kept in ascending id
    order; the other groups' samples are left out.
    """
    labels = _as_labels(labels)
    num_clients = _check_num_clients(num_clients)
    if groups is None:
        raise DataError(
            "partition=natural needs a dataset with a natural client split (femnist, "
            "synthetic, imagefolder with groups_file)"
        )
    groups = np.asarray(groups)
    if groups.shape != labels.shape:
        raise DataError(
            f"partition=natural: groups has shape {groups.shape} but labels {labels.shape}; "
            "the dataset must give one group id per training sample"
        )
    ids, inv = np.unique(groups, return_inverse=True)
    num_groups = ids.size
    if num_clients > num_groups:
        raise DataError(
            f"partition=natural: the dataset has {num_groups} groups (natural clients), asked "
            f"for clients={num_clients}; use clients <= {num_groups}"
        )
    if num_clients == num_groups:
        client_of_group = np.arange(num_groups)
    else:
        rng = np.random.default_rng(seed)
        chosen = np.sort(rng.choice(num_groups, size=num_clients, replace=False))
        client_of_group = np.full(num_groups, -1, dtype=np.int64)
        client_of_group[chosen] = np.arange(num_clients)
    return _group(client_of_group[inv.reshape(-1)], num_clients)


# --------------------------------------------------------------------------------------------
# registry


PARTITIONS = Registry("partition", internal=_ARGS)
PARTITIONS.add("iid", iid, "uniformly random, near-equal client sizes")
PARTITIONS.add(
    "dirichlet",
    dirichlet,
    "per-class Dir(alpha) label skew, min_samples guaranteed; balance=true: equal sizes",
)
PARTITIONS.add(
    "shards",
    shards,
    "classes_per_client label shards: equal sizes (FedAvg) or power_law (FedProx)",
)
PARTITIONS.add("fixed", fixed, "per_client samples of a single class per client (FedReg EMNIST)")
PARTITIONS.add("natural", natural, "one client per natural group: FEMNIST writer, Synthetic device")


def partition_params(name: str) -> dict[str, object]:
    """The keyword parameters of a partition with their defaults."""
    return PARTITIONS.params(name)


def make_partition(
    name: str,
    labels: np.ndarray,
    num_clients: int,
    seed: int,
    *,
    groups: np.ndarray | None = None,
    **params: object,
) -> Partition:
    """Partition ``labels`` over ``num_clients`` clients with the scheme ``name``.

    Unknown names and parameters, and bad parameter values, raise :class:`ConfigError`;
    requests the data cannot satisfy raise :class:`DataError`. ``groups`` is used by
    ``natural`` only.
    """
    valid = partition_params(name)
    for key in params:
        if key not in valid:
            choices = ", ".join(f"partition.{k}" for k in valid) or "none"
            raise ConfigError(
                f"unknown key 'partition.{key}' for partition {name}; valid: {choices}"
            )
    labels = _as_labels(labels)
    num_clients = _check_num_clients(num_clients)
    if name != "natural":  # natural's own check names the number of groups
        _check_not_more_clients(num_clients, labels.size)
    fn = PARTITIONS.get(name).factory
    if name == "natural":
        return fn(labels, num_clients, seed, groups=groups, **params)
    return fn(labels, num_clients, seed, **params)


# --------------------------------------------------------------------------------------------
# helpers on partitions


def train_val_split(
    parts: Partition, val_fraction: float, seed: int
) -> tuple[Partition, Partition]:
    """Split every client's samples at random into train and validation parts.

    A client of ``s`` samples gets ``round(s * val_fraction)`` validation samples, clipped to
    ``[1, s - 1]`` when ``s >= 2`` and ``val_fraction > 0`` (so it keeps at least one of each);
    a client with one sample keeps it for training. Deterministic in ``seed``.
    """
    ok = isinstance(val_fraction, Real) and not isinstance(val_fraction, bool)
    if not (ok and 0 <= val_fraction < 1):
        raise ConfigError(f"val_fraction must be a number in [0, 1), got {val_fraction!r}")
    if not parts:
        return [], []
    num_clients = len(parts)
    sizes = np.array([np.size(p) for p in parts], dtype=np.int64)
    flat = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
    if val_fraction > 0:
        n_val = np.floor(sizes * float(val_fraction) + 0.5).astype(np.int64)
        n_val = np.where(sizes >= 2, np.clip(n_val, 1, np.maximum(sizes - 1, 1)), 0)
    else:
        n_val = np.zeros(num_clients, dtype=np.int64)
    rng = np.random.default_rng(seed)
    client = np.repeat(np.arange(num_clients), sizes)
    order = np.lexsort((rng.random(flat.size), client))  # random order inside each client
    pos = np.empty(flat.size, dtype=np.int64)
    pos[order] = np.arange(flat.size) - (np.cumsum(sizes) - sizes)[client[order]]
    is_val = pos < n_val[client]
    train = [np.sort(a) for a in np.split(flat[~is_val], np.cumsum(sizes - n_val)[:-1])]
    val = [np.sort(a) for a in np.split(flat[is_val], np.cumsum(n_val)[:-1])]
    return train, val


def class_counts(parts: Partition, labels: np.ndarray, num_classes: int) -> np.ndarray:
    """``(clients, classes)`` int64 matrix of how many samples of each class a client holds."""
    labels = _as_labels(labels)
    num_clients = len(parts)
    if not parts:
        return np.zeros((0, num_classes), dtype=np.int64)
    sizes = np.array([p.size for p in parts], dtype=np.int64)
    flat = np.concatenate([np.asarray(p, dtype=np.int64) for p in parts])
    y = labels[flat]
    if y.size and y.max() >= num_classes:
        raise DataError(f"label {y.max()} is out of range for num_classes={num_classes}")
    client = np.repeat(np.arange(num_clients), sizes)
    counts = np.bincount(client * num_classes + y, minlength=num_clients * num_classes)
    return counts.reshape(num_clients, num_classes).astype(np.int64)


def summary(parts: Partition, labels: np.ndarray, num_classes: int, rows: int = 10) -> str:
    """A few lines describing a partition: sizes, classes per client, first clients' classes."""
    counts = class_counts(parts, labels, num_classes)
    num_clients = counts.shape[0]
    sizes = counts.sum(axis=1)
    n = int(np.asarray(labels).size)
    lines = [f"{num_clients} clients, {int(sizes.sum())} of {n} samples assigned"]
    if num_clients == 0:
        return lines[0]
    ncls = (counts > 0).sum(axis=1)
    lines.append(
        f"samples per client: min {sizes.min()} / median {np.median(sizes):g} / "
        f"mean {sizes.mean():.1f} / max {sizes.max()}"
    )
    lines.append(
        f"classes per client: min {ncls.min()} / median {np.median(ncls):g} / max {ncls.max()}"
    )
    by = np.bincount(ncls)  # clients holding k classes (one class: a truncated softmax is 0)
    held = [f"{k}: {int(c)}" for k, c in enumerate(by[:11]) if c]
    held += [f"more than 10: {int(by[11:].sum())}"] if by[11:].sum() else []
    lines.append("clients holding k classes: " + ", ".join(held))
    shown = min(rows, num_clients)
    width = len(str(num_clients - 1))
    if num_classes <= 20:
        cw = max(len(str(int(counts[:shown].max(initial=0)))), len(str(num_classes - 1)))
        lines.append(f"class histograms of the first {shown} clients:")
        head = " ".join(f"{c:>{cw}}" for c in range(num_classes))
        lines.append(f"  {'class':>{width + 8}} {head}")
        for u in range(shown):
            row = " ".join(f"{v:>{cw}}" for v in counts[u])
            lines.append(f"  client {u:>{width}}: {row}")
    else:
        lines.append(f"largest classes (class:count) of the first {shown} clients:")
        for u in range(shown):
            top = np.argsort(-counts[u], kind="stable")[: min(8, int(ncls[u]))]
            cells = " ".join(f"{c}:{counts[u, c]}" for c in top)
            more = " ..." if ncls[u] > 8 else ""
            lines.append(f"  client {u:>{width}}: {cells}{more}")
    if shown < num_clients:
        lines.append(f"  ... {num_clients - shown} more clients")
    return "\n".join(lines)
