"""Whether two methods separate beyond the spread of their seeds.

The rule every report uses: a **paired bootstrap** over seeds. For the seeds where both
methods have a value, take the per-seed differences ``d_s = a_s - b_s``; resample the seeds
with replacement (every resample up to six seeds, else 10,000 drawn with a fixed generator)
and take the 2.5th and 97.5th percentiles of the resampled mean difference (the inverted
CDF: values that occur). The methods *separate* when that 95 % interval excludes zero. With
three seeds the interval is ``[min d_s, max d_s]``, so a gap separates only when every seed
agrees on its sign; fewer than two paired seeds never separate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

LEVEL = 0.95
EXACT_UP_TO = 6  # seeds: enumerate every resample (6**6 = 46,656) instead of drawing
DRAWS = 10_000


def _paired(a: Sequence[float | None], b: Sequence[float | None]) -> np.ndarray:
    return np.array(
        [
            x - y
            for x, y in zip(a, b, strict=True)
            if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
        ],
        dtype=np.float64,
    )


def paired_interval(
    a: Sequence[float | None], b: Sequence[float | None]
) -> tuple[float, float] | None:
    """The paired bootstrap 95 % interval of ``mean(a - b)`` over the seeds both have (lists
    aligned by seed; None or non-finite entries are skipped); None with fewer than two."""
    d = _paired(a, b)
    n = len(d)
    if n < 2:
        return None
    if n <= EXACT_UP_TO:
        idx = np.stack(np.meshgrid(*[np.arange(n)] * n, indexing="ij"), axis=-1).reshape(-1, n)
        means = d[idx].mean(axis=1)
    else:
        rng = np.random.default_rng(0)
        means = d[rng.integers(0, n, size=(DRAWS, n))].mean(axis=1)
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail], method="inverted_cdf")
    return float(low), float(high)


def separated(a: Sequence[float | None], b: Sequence[float | None]) -> bool:
    """True when ``a`` and ``b`` differ beyond their seeds' spread (the interval excludes 0)."""
    interval = paired_interval(a, b)
    return interval is not None and (interval[0] > 0 or interval[1] < 0)


def agreeing_seeds(a: Sequence[float | None], b: Sequence[float | None]) -> tuple[int, int]:
    """``(k, n)``: of the ``n`` seeds both have, ``k`` have ``a > b``."""
    d = _paired(a, b)
    return int((d > 0).sum()), len(d)
