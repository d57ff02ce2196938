"""Whether two methods separate beyond the spread of their seeds.

The rule every report uses: a **paired t-interval** over seeds. For the seeds where both
methods have a value, take the per-seed differences ``d_s = a_s - b_s`` and their 95 %
confidence interval for the mean, ``mean(d) ± t(0.975, n-1) · sd(d) / √n`` (Student's t, as
``scipy.stats.ttest_rel`` computes it). The methods *separate* when that interval excludes
zero. It asks more than every seed agreeing on the sign: with three seeds, ``t = 4.30``, so
the mean gap must exceed 2.5 times the differences' standard deviation (three seeds of two
equal methods agree on a sign one time in four). A gap of the same size on every seed (zero
spread) separates; fewer than two paired seeds never separate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

LEVEL = 0.95


def _paired(a: Sequence[float | None], b: Sequence[float | None]) -> np.ndarray:
    return np.array(
        [
            x - y
            for x, y in zip(a, b, strict=True)
            if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
        ],
        dtype=np.float64,
    )


def gap_factor(seeds: int) -> float:
    """How many standard deviations of the per-seed gaps the mean gap must exceed to separate
    with ``seeds`` paired seeds: ``t(0.975, n-1) / √n`` (9.0 for 2 seeds, 2.5 for 3, 1.2 for
    5); ``inf`` below two."""
    if seeds < 2:
        return math.inf
    return float(stats.t.ppf(0.5 + LEVEL / 2, seeds - 1) / math.sqrt(seeds))


def paired_interval(
    a: Sequence[float | None], b: Sequence[float | None]
) -> tuple[float, float] | None:
    """The paired 95 % t-interval of ``mean(a - b)`` over the seeds both have (lists aligned
    by seed; None or non-finite entries are skipped); None with fewer than two."""
    d = _paired(a, b)
    n = len(d)
    if n < 2:
        return None
    half = gap_factor(n) * float(d.std(ddof=1))
    mean = float(d.mean())
    return mean - half, mean + half


def separated(a: Sequence[float | None], b: Sequence[float | None]) -> bool:
    """True when ``a`` and ``b`` differ beyond their seeds' spread (the interval excludes 0)."""
    interval = paired_interval(a, b)
    return interval is not None and (interval[0] > 0 or interval[1] < 0)
