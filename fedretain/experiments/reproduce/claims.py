"""The paper's claims checked on our numbers: on the means over the seeds, on each seed, and
whether every gap a claim rests on exceeds the seeds' spread
(:func:`fedretain.metrics.spread.separated`); the report's Claims section."""

from __future__ import annotations

from dataclasses import dataclass

from fedretain.experiments.presets import INF, Claim, Data, Plan, comparisons
from fedretain.experiments.reproduce.markdown import row, table
from fedretain.experiments.reproduce.results import Results
from fedretain.metrics.spread import gap_factor, separated


def spread_rule(seeds: int) -> str:
    """The report's sentence stating the seeds' spread rule for ``seeds`` seeds (>= 2)."""
    return (
        "Beyond the seeds' spread: every comparison the claim makes has a paired 95 % t-interval "
        f"of its gap over the seeds that excludes zero (`fedretain.metrics.spread`; with {seeds} "
        f"seeds the mean gap must exceed {gap_factor(seeds):.1f} times its standard deviation "
        "over the seeds; one seed never separates; a target never reached counts as one round "
        "after the last round run)."
    )


def verdict(result: bool | None) -> str:
    return {True: "held", False: "did not hold", None: "undecided"}[result]


@dataclass
class Judged:
    """A claim checked on the means and on each seed: ``overall`` and ``seeds`` (verdicts),
    ``separated`` (whether every comparison it makes exceeds the seeds' spread; None when it
    makes none) and ``read`` (the setting and method pairs its check asked for)."""

    overall: bool | None
    seeds: list[bool | None]
    separated: bool | None
    read: list[tuple[str, str]]


def judge(claim: Claim, results: Results) -> Judged:
    """Check ``claim`` on the means and on each seed; pair up the comparisons its check makes
    seed by seed (``a < b`` at the means: the same ``a < b`` on each seed) and test each with
    :func:`fedretain.metrics.spread.separated`."""
    mean = results.view(None)
    with comparisons() as at_means:
        overall = claim.check(mean)
    seeds, per_seed = [], []
    for seed in results.seeds:
        with comparisons() as made:
            seeds.append(claim.check(results.view(seed)))
        per_seed.append(made if len(made) == len(at_means) else [(None, None)] * len(at_means))
    last = max((r.summary.get("rounds", 0) for r in results.runs.values()), default=0)

    def finite(x: float | None) -> float | None:  # never reached: one round after the last
        return last + 1.0 if x == INF else x

    apart = None
    if at_means:
        apart = all(
            separated([finite(m[i][0]) for m in per_seed], [finite(m[i][1]) for m in per_seed])
            for i in range(len(at_means))
        )
    return Judged(overall, seeds, apart, list(mean.read))


def verdict_cell(j: Judged) -> str:
    """The verdict on the means, how many seeds it held on, and whether its gaps exceed the
    seeds' spread: never a bare "held"."""
    n, k = len(j.seeds), sum(s is True for s in j.seeds)
    text = f"**{verdict(j.overall)}**"
    if n == 1:
        return text + (" (one seed: no spread to measure)" if j.overall is not None else "")
    count = f"held on {k} of {n} seeds"
    if j.overall is None:
        return f"{text} ({count})"
    if j.separated is None:
        spread = "the seeds' spread not measured (no paired comparison)"
    else:
        spread = "beyond the seeds' spread" if j.separated else "within the seeds' spread"
    if j.overall is True and j.separated:
        return f"{text} on {k} of {n} seeds, {spread}"
    if j.overall is True:
        return f"{text} on the means only, {spread} ({count})"
    return f"{text} on the means, {spread} ({count})"


def no_result(results: Results, read: list[tuple[str, str]]) -> str:
    """The runs a claim asked for that have no result: "SCAFFOLD diverged in round 53 (seed
    1)"."""
    parts = [
        f"{method} {o.short()} (seed {seed})"
        for setting, method in read
        for seed, o in results.unfinished(setting, method)
    ]
    return "no result from " + ", ".join(dict.fromkeys(parts)) if parts else ""


def likely_reason(plan: Plan, claim: Claim, j: Judged, results: Results) -> str:
    """Why a claim did not hold (or is undecided): the runs without a result, the plan's
    differences from the paper, the claim's own most likely reason."""
    if j.overall is True:
        return ""
    parts = [claim.why_not] if claim.why_not else []
    if plan.reasons:  # the differences listed above, by their first words
        parts.insert(0, ", ".join(r.split(":")[0] for r in plan.reasons) + " (above)")
    if j.overall is None:
        parts.insert(0, no_result(results, j.read) or "no side reached its target")
    return "; ".join(parts)


def claims_section(plan: Plan, results: Results, data: Data) -> list[str]:
    """Each claim with its verdict (and per seed, with several seeds), the likely reason where
    it did not hold, and how many held."""
    many = len(results.seeds) > 1
    head = ["#", "claim", "verdict"] + (["per seed"] if many else []) + ["likely reason"]
    lines = ["## Claims", "", *table(head)]
    held = apart = 0
    for i, claim in enumerate(plan.claims, 1):
        if data.missing:
            cells = [str(i), claim.text, "not run (data missing)"] + ([""] if many else []) + [""]
            lines.append(row(cells))
            continue
        j = judge(claim, results)
        held += j.overall is True
        apart += j.overall is True and bool(j.separated) and many
        cells = [str(i), claim.text, verdict_cell(j)]
        if many:
            cells.append(", ".join(verdict(s) for s in j.seeds))
        cells.append(likely_reason(plan, claim, j, results))
        lines.append(row(cells))
    lines.append("")
    if not data.missing:
        spread = f", {apart} of them beyond the seeds' spread" if many else ""
        lines += [
            f"{held} of {len(plan.claims)} claims held on the means over the seeds{spread} "
            "('undecided': a run it needs has no result, or no side reached the target). "
            + (
                spread_rule(len(results.seeds))
                if many
                else "With one seed the seeds' spread is not measured."
            ),
            "",
        ]
    return lines


__all__ = ["Judged", "claims_section", "judge", "spread_rule", "verdict", "verdict_cell"]
