"""Whether two methods separate beyond the spread of their seeds, by a gap that matters.

The rule every report uses has two parts.

- **The seeds' spread**: a paired t-interval over seeds. For the seeds where both methods
  have a value, take the per-seed differences ``d_s = a_s - b_s`` and their 95 % confidence
  interval for the mean, ``mean(d) ± t(0.975, n-1) · sd(d) / √n`` (Student's t, as
  ``scipy.stats.ttest_rel`` computes it). The methods *separate* when that interval excludes
  zero. It asks more than every seed agreeing on the sign: with three seeds, ``t = 4.30``, so
  the mean gap must exceed 2.5 times the differences' standard deviation (three seeds of two
  equal methods agree on a sign one time in four). A gap of the same size on every seed (zero
  spread) separates; fewer than two paired seeds never separate.
- **A practical threshold** per metric (:data:`THRESHOLDS`, :func:`threshold_of`): the
  smallest gap that matters, 1 point of accuracy, 10 % of rounds, 1 dB of PSNR, ...; three
  near-identical trajectories can separate by 0.8 points, which is no difference anyone would
  act on.

:func:`below` applies both to one claimed comparison ``a < b``: it is *supported* when the
interval of ``b - a`` excludes zero and its mean reaches the threshold, *contradicted* when
the whole interval lies below the threshold (``a`` is not below ``b`` by a gap that matters),
and *open* otherwise, with the number of seeds the observed gap and spread would need to
decide it. :func:`above` is the ranking rule: one method ranks above another only when
:func:`below` supports it. :func:`holm` corrects a report's claims for their number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

LEVEL = 0.95
MOST_SEEDS = 1000  # "seeds needed" beyond this reads "more than 1000"


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


# ------------------------------------------------------------------- the practical threshold


@dataclass(frozen=True)
class Threshold:
    """The smallest gap that matters: ``absolute`` (in the metric's unit) or ``relative`` to
    the larger magnitude of the two compared values, whichever is larger."""

    absolute: float = 0.0
    relative: float = 0.0
    unit: str = ""

    def of(self, a: float, b: float) -> float:
        return max(self.absolute, self.relative * max(abs(a), abs(b)))

    def describe(self) -> str:
        """The threshold in words: "1 point", "10 % (at least 1 round)", "none"."""
        parts = []
        if self.relative:
            parts.append(f"{100 * self.relative:g} %")
        if self.absolute:
            amount = (
                f"{100 * self.absolute:g} point{'s' if self.absolute != 0.01 else ''}"
                if self.unit == "points"
                else f"{self.absolute:g} {self.unit}".strip()
            )
            parts.append(f"at least {amount}" if self.relative else amount)
        if not parts:
            return "none (the claim's own margin)"
        return parts[0] + (f" ({parts[1]})" if len(parts) > 1 else "")


# by metric family; a preset may declare its own (Plan.thresholds)
THRESHOLDS: dict[str, Threshold] = {
    "accuracy": Threshold(0.01, unit="points"),  # accuracy, forgetting, backward transfer
    "rounds": Threshold(1.0, 0.10, unit="round"),  # rounds to a target
    "loss": Threshold(0.0, 0.10),  # a loss increase
    "bytes": Threshold(0.0, 0.10),
    "psnr": Threshold(1.0, unit="dB"),
    "ssim": Threshold(0.05),
    "count": Threshold(1.0),  # a count of grid points
    "ratio": Threshold(0.0, 0.10),  # a speed-up
    "exact": Threshold(),  # a claim's own margin (a lead "within 2 points")
}
FAMILY = {
    "final": "accuracy",
    "last": "accuracy",
    "top": "accuracy",
    "avg_acc": "accuracy",
    "forgetting": "accuracy",
    "bwt": "accuracy",
    "loss_increase": "loss",
    "loss_increase_ref": "loss",
    "MB_up": "bytes",
    "MB_down": "bytes",
    "psnr": "psnr",
    "ssim": "ssim",
}


def family_of(metric: str) -> str:
    """The family of a metric (a family's name is its own family)."""
    if metric in THRESHOLDS:
        return metric
    if metric.startswith(("R_", "to:")):
        return "rounds"
    if metric not in FAMILY:
        raise ValueError(f"no practical threshold for metric {metric!r}")
    return FAMILY[metric]


def threshold_of(metric: str, own: dict[str, Threshold] | None = None) -> Threshold:
    """The practical threshold of ``metric`` (a metric or a family): ``own``'s (a preset's,
    by metric or by family) or :data:`THRESHOLDS`'."""
    own = own or {}
    if metric in own:
        return own[metric]
    fam = family_of(metric)
    return own.get(fam, THRESHOLDS[fam])


# ------------------------------------------------------------------- one claimed comparison

SUPPORTED, CONTRADICTED, OPEN = "supported", "contradicted", "open"


@dataclass(frozen=True)
class Below:
    """What the seeds say of a claimed ``a < b``: ``status`` (:data:`SUPPORTED`,
    :data:`CONTRADICTED` or :data:`OPEN`), the paired gap ``b - a`` (its mean over ``n``
    seeds, its standard deviation and 95 % interval, None with fewer than two seeds), the
    threshold ``tau`` it is held to, ``p`` (of the decision: a gap of zero for a supported
    comparison, a gap of ``tau`` for a contradicted one; two-sided, Student's t) and, for an
    open one, ``seeds``: how many seeds the observed gap and spread would need to decide it
    (None: more than :data:`MOST_SEEDS`, or unknown with one seed)."""

    status: str
    n: int
    gap: float
    sd: float
    low: float | None
    high: float | None
    tau: float
    p: float | None = None
    seeds: int | None = None


def _p(margin: float, sd: float, n: int) -> float:
    """Two-sided p of a mean ``margin`` away from the tested value, ``n`` gaps of standard
    deviation ``sd`` (0 for a margin with no spread at all)."""
    if sd == 0:
        return 0.0 if margin > 0 else 1.0
    t = margin / (sd / math.sqrt(n))
    return float(2 * stats.t.sf(abs(t), n - 1))


def seeds_needed(margin: float, sd: float) -> int | None:
    """The fewest seeds at which a mean gap ``margin`` away from the tested value, with gaps
    of standard deviation ``sd``, clears the 95 % interval (None beyond
    :data:`MOST_SEEDS`)."""
    if margin <= 0:
        return None
    for n in range(2, MOST_SEEDS + 1):
        if gap_factor(n) * sd < margin:
            return n
    return None


def below(
    a: Sequence[float | None], b: Sequence[float | None], threshold: Threshold = Threshold()
) -> Below:
    """The claimed comparison ``a < b`` (lists aligned by seed) under both rules: supported
    when the paired interval of ``b - a`` excludes zero and its mean reaches the threshold,
    contradicted when the whole interval lies below the threshold, else open."""
    pairs = [
        (x, y)
        for x, y in zip(a, b, strict=True)
        if x is not None and y is not None and math.isfinite(x) and math.isfinite(y)
    ]
    n = len(pairs)
    if n == 0:
        return Below(OPEN, 0, math.nan, math.nan, None, None, math.nan)
    xs, ys = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    d = ys - xs
    mean = float(d.mean())
    tau = threshold.of(float(xs.mean()), float(ys.mean()))
    if n < 2:
        return Below(OPEN, 1, mean, math.nan, None, None, tau)
    sd = float(d.std(ddof=1))
    half = gap_factor(n) * sd
    low, high = mean - half, mean + half
    if low > 0 and mean >= tau:
        return Below(SUPPORTED, n, mean, sd, low, high, tau, p=_p(mean, sd, n))
    if high < tau:
        return Below(CONTRADICTED, n, mean, sd, low, high, tau, p=_p(tau - mean, sd, n))
    margin = mean if mean >= tau else tau - mean
    return Below(OPEN, n, mean, sd, low, high, tau, seeds=seeds_needed(margin, sd))


def above(
    a: Sequence[float | None], b: Sequence[float | None], threshold: Threshold = Threshold()
) -> bool:
    """The ranking rule: ``a`` ranks above ``b`` (higher is better) only when their paired gap
    exceeds both the seeds' spread and the threshold."""
    return below(b, a, threshold).status == SUPPORTED


def holm(pvalues: Sequence[float | None], level: float = 1 - LEVEL) -> list[bool]:
    """Holm's step-down correction over ``pvalues`` (one per claim a report tests; None: a
    claim with no decision, which counts among the tests and is never rejected): whether each
    stays below ``level`` after it."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: math.inf if pvalues[i] is None else pvalues[i])
    out = [False] * m
    for k, i in enumerate(order):
        p = pvalues[i]
        if p is None or p > level / (m - k):
            break
        out[i] = True
    return out
