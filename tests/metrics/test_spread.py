import pytest

from fedretain.metrics.spread import agreeing_seeds, paired_interval, separated


def test_three_seeds_interval_is_the_range_of_the_differences():
    low, high = paired_interval([0.5, 0.6, 0.7], [0.4, 0.55, 0.71])
    assert low == pytest.approx(-0.01) and high == pytest.approx(0.1)


def test_a_seed_of_the_other_sign_keeps_methods_within_noise():
    assert not separated([0.5, 0.6, 0.7], [0.4, 0.55, 0.71])
    assert separated([0.5, 0.6, 0.7], [0.4, 0.55, 0.69])
    assert separated([0.4, 0.55, 0.69], [0.5, 0.6, 0.7])  # either direction


def test_fewer_than_two_paired_seeds_never_separate():
    assert paired_interval([0.9], [0.1]) is None
    assert not separated([0.9, None], [0.1, 0.2])  # the second seed is missing for a
    assert not separated([0.9, float("nan")], [0.1, 0.2])  # a diverged seed is no value


def test_many_seeds_drawn_interval_is_reproducible_and_tight():
    a = [float(x) for x in range(10)]
    b = [x - 1 + (i % 2) * 0.1 for i, x in enumerate(a)]
    assert paired_interval(a, b) == paired_interval(a, b)
    low, high = paired_interval(a, b)
    assert 0.9 <= low < high <= 1.0


def test_agreeing_seeds_counts_the_seeds_where_a_leads():
    assert agreeing_seeds([0.5, 0.6, 0.7], [0.4, 0.55, 0.71]) == (2, 3)
