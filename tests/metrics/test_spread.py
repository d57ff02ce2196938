import math

import numpy as np
import pytest
from scipy import stats

from fedretain.metrics.spread import gap_factor, paired_interval, separated


def test_interval_is_scipys_paired_t_interval():
    a, b = [0.5, 0.6, 0.7], [0.4, 0.55, 0.71]
    want = stats.ttest_rel(a, b).confidence_interval(0.95)
    assert paired_interval(a, b) == pytest.approx((want.low, want.high), abs=1e-12)


def test_three_seeds_agreeing_on_the_sign_are_not_enough():
    # FedProx and FedAvg's forgetting in the demo: lower on every seed by 0.001-0.004
    fedavg, fedprox = [3.0977, 2.9434, 2.9851], [3.0951, 2.9398, 2.9837]
    assert all(a > b for a, b in zip(fedavg, fedprox, strict=True))  # every seed agrees
    assert not separated(fedavg, fedprox)
    # a gap 5x its spread separates, in either direction
    assert separated([0.70, 0.71, 0.72], [0.60, 0.615, 0.618])
    assert separated([0.60, 0.615, 0.618], [0.70, 0.71, 0.72])


def test_a_seed_of_the_other_sign_keeps_methods_within_noise():
    assert not separated([0.5, 0.6, 0.7], [0.4, 0.55, 0.71])


def test_the_same_gap_on_every_seed_separates_and_no_gap_does_not():
    assert separated([1.1, 2.1, 3.1], [1.0, 2.0, 3.0])
    assert not separated([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])


def test_fewer_than_two_paired_seeds_never_separate():
    assert paired_interval([0.9], [0.1]) is None
    assert not separated([0.9, None], [0.1, 0.2])  # the second seed is missing for a
    assert not separated([0.9, math.nan], [0.1, 0.2])  # a diverged seed is no value


def test_many_seeds_narrow_the_interval():
    rng = np.random.default_rng(0)
    a = rng.normal(0.7, 0.02, 10)
    low, high = paired_interval(a, a - 0.01 + rng.normal(0, 0.001, 10))
    assert 0.005 < low < 0.01 < high < 0.015


@pytest.mark.parametrize("seeds", [2, 3, 5])
def test_gap_factor_is_where_separation_starts(seeds):
    """The factor a report states: a mean gap just above ``gap_factor`` times the gaps'
    standard deviation separates, just below it does not (9.0, 2.5, 1.2 for 2, 3, 5 seeds)."""
    factor = gap_factor(seeds)
    assert factor == pytest.approx({2: 8.98, 3: 2.48, 5: 1.24}[seeds], abs=0.01)
    spread = np.linspace(-1.0, 1.0, seeds)  # gaps around their mean, standard deviation sd
    sd = float(np.std(spread, ddof=1))
    for scale, apart in ((1.01, True), (0.99, False)):
        gaps = spread + scale * factor * sd
        assert separated(list(gaps), [0.0] * seeds) is apart
    assert gap_factor(1) == math.inf
