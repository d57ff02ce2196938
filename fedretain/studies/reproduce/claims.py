"""The paper's claims checked on our numbers: the report's Claims section.

A claim's check compares values (:func:`~fedretain.studies.presets.lt`,
:func:`~fedretain.studies.presets.ge`). :func:`judge` runs it on the means over the seeds
and on each seed, pairs up each comparison seed by seed and decides it with
:func:`fedretain.metrics.spread.below` (the seeds' spread and the metric's practical
threshold), then replays the check on those decisions. A claim is

- ``held`` when every comparison it rests on passes both rules;
- ``did not hold`` when a comparison it needs is contradicted beyond the spread (the opposite
  holds, or the gap stays below the threshold that matters);
- ``undecided``, with its reason and what would decide it, otherwise: one seed, a run without
  a result, every model compared at chance, an undertrained model, a degenerate reference of
  ``R_a``, a grid whose best point sits at its edge, no side reaching its target, or a gap
  within the seeds' spread (with the seeds the observed gap and spread would need).

Each claim's decision carries a p-value; :func:`fedretain.metrics.spread.holm` corrects them
for the number of claims the report tests.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from fedretain.metrics.spread import (
    MOST_SEEDS,
    OPEN,
    SUPPORTED,
    THRESHOLDS,
    Below,
    below,
    family_of,
    gap_factor,
    holm,
    threshold_of,
)
from fedretain.studies.presets import INF, Claim, Compared, Data, Plan, comparisons, replayed
from fedretain.studies.reproduce.markdown import row, table
from fedretain.studies.reproduce.results import Results, series_of

HELD, NOT_HELD, UNDECIDED = "held", "did not hold", "undecided"
NOT_RUN = "not run"  # a run it needs was never run (nor diverged or failed): nothing to judge yet
AT_CHANCE = 1.5  # among ten classes, a final accuracy at most this many times a guess's


def chance_line(chance: float) -> float:
    """The final accuracy at or below which a model is at chance, for a guess's ``chance``:
    half a guess's accuracy above it among ten classes (0.15), less where fewer are wrong to
    guess (two classes: 0.639, not 0.75, which the papers' binary models do not reach)."""
    return chance * (1 + (AT_CHANCE - 1) * (1 - chance) / 0.9)


END_METRICS = ("final", "last", "top", "avg_acc")  # what an undertrained model cannot settle
ATTACK = ("psnr", "ssim", "sigma", "epsilon")  # a privacy attack's measures, not the model's


def verdict(result: bool | None) -> str:
    """A check's result in words."""
    return {True: HELD, False: NOT_HELD, None: UNDECIDED}[result]


@dataclass
class Judged:
    """A claim's verdict (``held``, ``did not hold``, ``undecided``), why, and what would
    decide it; the check on the means (``means``) and on each seed (``seeds``); each
    comparison it makes, decided over the seeds (``compared``, with what was compared); the
    p-value of its decision (None when undecided); the (setting, method, metric) it read."""

    verdict: str
    why: str
    decide: str = ""
    means: bool | None = None
    seeds: list[bool | None] = field(default_factory=list)
    compared: list[tuple[Compared, Below]] = field(default_factory=list)
    p: float | None = None
    read: list[tuple[str, str, str]] = field(default_factory=list)
    within: bool = False  # undecided because a gap is within the seeds' spread

    def agreeing(self) -> str:
        """On how many seeds the claim holds on that seed's values: "2 of 3"."""
        return f"{sum(s is True for s in self.seeds)} of {len(self.seeds)}"


def amount(metric: str, x: float) -> str:
    """A gap in the unit of ``metric``'s family: points of accuracy, rounds, dB, ..."""
    fam = family_of(metric)
    if fam == "accuracy":
        return f"{100 * x:+.2f} points"
    if fam == "rounds":
        return f"{x:+.1f} rounds"
    if fam == "psnr":
        return f"{x:+.2f} dB"
    return f"{x:+.3g}"


def threshold_text(metric: str, tau: float) -> str:
    """The threshold a comparison was held to, in its unit ("1 point", "3.2 rounds")."""
    if tau <= 0:
        return "no threshold beyond the claim's own margin"
    fam = family_of(metric)
    if fam == "accuracy":
        return f"{100 * tau:.3g} point" + ("" if abs(100 * tau - 1) < 1e-9 else "s")
    return amount(metric, tau).lstrip("+")


def compared_text(c: Compared, b: Below) -> str:
    """One comparison over the seeds: what, the gap in the claim's favour, its interval."""
    what = f"{c.label}: " if c.label else ""
    if b.n == 0:
        return f"{what}no paired value"
    # lt: the claim wants b - a (Below.gap) above the threshold; ge: a - b not below -τ,
    # shown as how far b exceeds a, which must stay below the threshold
    name = "gap" if c.want else "excess"
    text = f"{what}{name} {amount(c.metric, b.gap)}"
    if b.low is not None and b.high is not None:
        if b.sd <= 1e-9 * max(1.0, abs(b.gap)):  # the same on every seed, up to rounding
            text += " on every seed"
        else:
            text += f", 95 % interval {amount(c.metric, b.low)} to {amount(c.metric, b.high)}"
        text += f"; threshold {threshold_text(c.metric, b.tau)}"
    return text


def outcome(c: Compared, b: Below, seeds: int) -> bool | None:
    """What the seeds decided of one comparison, in the claim's terms (open, None, unless
    every one of the ``seeds`` has its values: a seed without a result never drops out)."""
    if b.status == OPEN or b.n < seeds:
        return None
    supported = b.status == SUPPORTED
    return supported if c.want else not supported


def leaning(c: Compared, b: Below) -> bool:
    """An open comparison's outcome, in the claim's terms, were more seeds to decide it the
    way its mean gap leans (toward the threshold or away from it)."""
    supported = b.gap >= b.tau
    return supported if c.want else not supported


def deciders(
    claim: Claim, mean: Any, compared: list[tuple[Compared, Below]], seeds: int
) -> tuple[list[int], list[int], bool]:
    """The open comparisons that would decide an undecided ``claim`` (indices into
    ``compared``), the other open ones, and whether any one of the first would: those each of
    which, decided the way it leans, decides the claim alone ("every baseline" is decided by
    the one baseline leaning above it), the fewest seeds first; else every open one (all must
    be decided), the most seeds first."""
    fixed = [outcome(c, b, seeds) for c, b in compared]
    opened = [i for i, o in enumerate(fixed) if o is None]

    def decides(i: int) -> bool:
        outs = [leaning(*compared[i]) if j == i else o for j, o in enumerate(fixed)]
        with replayed(outs):
            return claim.check(mean) is not None

    def seeds_of(i: int) -> float:
        k = compared[i][1].seeds
        return math.inf if k is None else k

    alone = sorted((i for i in opened if decides(i)), key=seeds_of)  # the quickest first
    if alone:
        return alone, [i for i in opened if i not in alone], True
    return sorted(opened, key=seeds_of, reverse=True), [], False


def finite(x: float | None, last: int) -> float | None:
    """A rounds-to value for the spread: never reached counts as one round after the last."""
    return last + 1.0 if x == INF else x


# ----------------------------------------------------------------------------- the guards


SHOWN = 3  # runs without a result named one by one; more are counted by what became of them


def unfinished_of(results: Results, read: list[tuple[str, str, str]]) -> dict[str, str]:
    """The runs a claim asked for that have no result, each with its state: "SCAFFOLD
    diverged in round 53 (seed 1)" -> "diverged"."""
    pairs = dict.fromkeys((s, m) for s, m, _ in read)
    return {
        f"{method} {o.short()} (seed {seed})": o.state
        for setting, method in pairs
        for seed, o in results.unfinished(setting, method)
    }


def no_result(found: dict[str, str]) -> str:
    """The runs a claim asked for that have no result (:func:`unfinished_of`): "SCAFFOLD
    diverged in round 53 (seed 1)"; beyond :data:`SHOWN` of them, their count by state and the
    first few."""
    if len(found) <= SHOWN:
        return "no result from " + ", ".join(found) if found else ""
    states = Counter(found.values())
    counts = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
    first = ", ".join(list(found)[:SHOWN])
    return f"no result from {len(found)} runs ({counts}): {first}, ..."


def what_decides(found: dict[str, str]) -> str:
    """What decides a claim waiting on the runs ``found`` (:func:`unfinished_of`)."""
    if set(found.values()) == {"not run"}:
        return "run the report's command (its finished runs are skipped)"
    if "diverged" in found.values():
        return "results from those runs (a smaller lr for a diverged one)"
    return "results from those runs"


def final_of(results: Results, setting: str, method: str) -> float | None:
    return results.view(None).get(setting, method, "final")


def at_chance(plan: Plan, results: Results, read: list[tuple[str, str, str]]) -> str:
    """Every model the claim compares at chance (its final accuracy), whatever the metric
    compared (an attack's measures aside)."""
    pairs = list(dict.fromkeys((s, m) for s, m, metric in read if metric not in ATTACK))
    finals = [final_of(results, s, m) for s, m in pairs]
    line = chance_line(plan.chance)
    if not pairs or any(f is None or f > line for f in finals):
        return ""
    best = max(f for f in finals if f is not None)
    return (
        f"every model it compares is at chance (final accuracy at most {best:.4f}, against "
        f"{plan.chance:g} for a guess)"
    )


def undertrained(plan: Plan, results: Results, read: list[tuple[str, str, str]]) -> str:
    """A model the claim compares at the end of training whose final accuracy (its series'
    best, in a sweep) is below its setting's floor. A series with a member that has no result
    yet (not run, diverged, failed) has no known best: it is not judged here."""
    low = []
    for setting, method, metric in dict.fromkeys(read):
        if metric not in END_METRICS or setting not in plan.floors:
            continue
        floor, why = plan.floors[setting]
        line = series_of(plan, setting, method)
        members = [m for m in plan.methods(setting) if series_of(plan, setting, m) == line]
        finals = [f for m in members if (f := final_of(results, setting, m)) is not None]
        if finals and len(finals) == len(members) and max(finals) < floor:
            low.append((f"{line} ({setting}) reaches {max(finals):.4f} at best", floor, why))
    if not low:
        return ""
    floor, why = low[0][1], low[0][2]
    listed = "; ".join(dict.fromkeys(text for text, _, _ in low))
    return f"undertrained: {listed}, below the floor {floor:.3f} ({why})"


def degenerate(plan: Plan, results: Results, read: list[tuple[str, str, str]]) -> str:
    """``R_a`` read against a reference that barely learned: on some seed ``a`` times its
    final accuracy is at chance, or a method reaches it with the initial model (round 0)."""
    metrics = {m for _, _, m in read if m.startswith("R_")}
    if not metrics or not plan.reference:
        return ""
    line = chance_line(plan.chance)
    for setting in dict.fromkeys(s for s, _, m in read if m.startswith("R_")):
        for seed in results.seeds:
            ref = results.at(setting, plan.reference, seed, "final")
            if ref is None:
                continue
            for metric in sorted(metrics):
                a = float(metric[2:])
                if a * ref <= line:
                    return (
                        f"a degenerate reference: {plan.reference}'s final accuracy on seed "
                        f"{seed} ({setting}) is {ref:.4f}, so {metric}'s target ({a * ref:.4f}) "
                        "is at chance"
                    )
        for s, method, metric in read:
            if s == setting and metric.startswith("R_"):
                reached = [results.at(setting, method, seed, metric) for seed in results.seeds]
                if 0 in reached:
                    return (
                        f"a degenerate reference: {method} reaches {metric}'s target with the "
                        f"initial model (round 0; {setting})"
                    )
    return ""


def exhausted(plan: Plan, claim: Claim, results: Results, read: list[tuple[str, str, str]]) -> str:
    """A best point at the edge of its grid: a swept series' best (for a claim on the best
    point; not while a point of the series has no result), a tuned choice, or a privacy study
    whose noise grid never matched."""
    pairs = list(dict.fromkeys((s, m) for s, m, _ in read))
    for setting, method in pairs:
        for t in plan.tuning:
            if t.edge and t.runs_as() == method and t.setting in ("", setting):
                keys = ", ".join(f"{k}={t.chosen[k]:g}" for k in t.edge)
                return f"an exhausted grid: {t.method}'s {keys} was chosen at the edge of its grid"
    for setting, method in pairs:
        why = results.exhausted(setting, method)
        if why:
            return f"an exhausted grid: {why}"
    if not (claim.grid and plan.sweep):
        return ""
    mean = results.view(None)
    for setting in dict.fromkeys(s for s, _ in pairs):
        lines = dict.fromkeys(series_of(plan, setting, m) for s, m in pairs if s == setting)
        for line in lines:
            points = {
                r.x: r.method
                for r in plan.runs
                if r.setting == setting and r.line == line and r.x is not None
            }
            scored = {x: mean.get(setting, m, "final") for x, m in points.items()}
            scored = {x: f for x, f in scored.items() if f is not None}
            if len(points) < 2 or len(scored) < len(points):  # a point without result: no best
                continue
            x = max(scored, key=lambda k: scored[k])
            if x in (min(points), max(points)):
                side = "largest" if x == max(points) else "smallest"
                return (
                    f"an exhausted grid: {line}'s best {plan.sweep.key} at {setting} is the "
                    f"grid's {side} ({x:g})"
                )
    return ""


def guard(
    plan: Plan, claim: Claim, results: Results, read: list[tuple[str, str, str]]
) -> tuple[str, str]:
    """Why a claim is undecided before any gap is read, and what would decide it ("", "" when
    nothing stands in the way). A run without a result is not one of them: a claim that fails
    on the comparisons that have their values did not hold, whatever the missing run gives."""
    if len(results.seeds) < 2:
        found = unfinished_of(results, read)
        if found:
            return no_result(found), what_decides(found)
        return "one seed: no spread to measure", "3 seeds (`--seeds 3`)"
    chance = at_chance(plan, results, read)
    if chance:
        return chance, "runs long enough for the models to learn (`--scale paper`)"
    ref = degenerate(plan, results, read)
    if ref:
        return ref, f"a reference ({plan.reference}) that learns: more rounds (`--scale paper`)"
    low = undertrained(plan, results, read)
    if low:
        return low, "models trained near the paper's accuracy (`--scale paper`, the paper's data)"
    edge = exhausted(plan, claim, results, read)
    if edge:
        return edge, "a grid that extends past the chosen point"
    return "", ""


# ------------------------------------------------------------------------------ judging


def judge(claim: Claim, plan: Plan, results: Results) -> Judged:
    """Check ``claim`` on the means and on each seed, decide each comparison it makes over the
    seeds, and combine the decisions as the check combines values (see the module)."""
    mean = results.view(None)
    with comparisons() as at_means:
        means = claim.check(mean)
    seeds, per_seed = [], []
    for seed in results.seeds:
        with comparisons() as made:
            seeds.append(claim.check(results.view(seed)))
        per_seed.append(made if len(made) == len(at_means) else None)
    read = list(mean.read)
    base = Judged(UNDECIDED, "", means=means, seeds=seeds, read=read)
    why, decide = guard(plan, claim, results, read)
    if why:
        base.why, base.decide = why, decide
        return base
    found = unfinished_of(results, read)
    missing = no_result(found)
    if means is None and not missing:
        base.why = "no side reached its target" if at_means else "a value it needs is missing"
        base.decide = "runs long enough to reach the target"
        return base
    last = max((r.summary.get("rounds", 0) for r in results.runs.values()), default=0)
    compared = []
    for i, c in enumerate(at_means):
        a = [finite(m[i].a, last) if m is not None else None for m in per_seed]
        b = [finite(m[i].b, last) if m is not None else None for m in per_seed]
        compared.append((c, below(a, b, threshold_of(c.metric, plan.thresholds))))
    n = len(seeds)
    with replayed([outcome(c, b, n) for c, b in compared]):
        result = claim.check(mean)
    base.compared = compared
    decisive = [(c, b) for c, b in compared if outcome(c, b, n) is result]
    if result is not None and not decisive:  # the check's own logic, not a comparison, decided
        result = None
    if result is None and missing:
        base.why, base.decide = missing, what_decides(found)
        if set(found.values()) == {"not run"}:  # nothing went wrong: the runs are still to do
            base.verdict = NOT_RUN
        return base
    if result is None:
        deciding, others, any_one = deciders(claim, mean, compared, n)
        opened = [compared[i] for i in deciding + others]
        needed = [compared[i][1].seeds for i in deciding]
        known = [k for k in needed if k is not None]
        if any_one:  # any one of them decides it: the fewest seeds
            count = min(known, default=None)
        else:  # all must be decided: the most seeds, none where one is out of reach
            count = max(known) if known and len(known) == len(needed) else None
        lean = "holds" if means else "does not hold"
        detail = "; ".join(compared_text(c, b) for c, b in opened[:2])
        base.within = True
        base.why = (
            f"within the seeds' spread (on the means it {lean}; held on {base.agreeing()} "
            f"seeds; {detail})"
        )
        if any(b.n < len(seeds) for _, b in opened):
            base.decide = "a value on every seed (some seeds' comparisons do not pair up)"
        elif count is None:
            base.decide = (
                f"more than {MOST_SEEDS} seeds at this gap and spread: a larger gap or a "
                "sturdier measure"
            )
        else:
            base.decide = f"about {count} seeds at this gap and spread (now {len(seeds)})"
        return base
    if result:
        c, b = max(decisive, key=lambda cb: cb[1].p or 0.0)
        base.verdict, base.p = HELD, max(b.p or 0.0 for _, b in decisive)
        base.why = (
            f"on {base.agreeing()} seeds, beyond the seeds' spread and the threshold "
            f"({compared_text(c, b)})"
        )
    else:
        c, b = min(decisive, key=lambda cb: cb[1].p if cb[1].p is not None else 1.0)
        base.verdict, base.p = NOT_HELD, min(b.p if b.p is not None else 1.0 for _, b in decisive)
        opposite = b.high is not None and (
            b.high < 0 if c.want else b.low is not None and b.low > 0
        )
        how = "the opposite, beyond the seeds' spread" if opposite else "no gap that matters"
        base.why = f"{how} (held on {base.agreeing()} seeds; {compared_text(c, b)})"
    return base


def judge_all(plan: Plan, results: Results) -> tuple[list[Judged], list[bool]]:
    """Every claim of ``plan`` judged, and whether each decision survives Holm's correction
    over the number of claims."""
    judged = [judge(claim, plan, results) for claim in plan.claims]
    return judged, holm([j.p for j in judged])


# ------------------------------------------------------------------------------ the text


def rule_text(plan: Plan, seeds: int) -> str:
    """The report's statement of the rule every verdict and ranking follows."""
    own = {**THRESHOLDS, **plan.thresholds}
    shown = ("accuracy", "rounds", "loss", "psnr", "count", "ratio")
    listed = "; ".join(f"{k}: {own[k].describe()}" for k in shown if k in own)
    factor = gap_factor(seeds)
    spread = (
        f"with {seeds} seeds the mean gap must exceed {factor:.1f} times the gaps' standard "
        "deviation"
        if math.isfinite(factor)
        else "one seed never separates"
    )
    return (
        "The rule: a claim holds only when every comparison it makes passes two tests, the "
        "seeds' spread (the paired 95 % t-interval of the gap over the seeds excludes zero, "
        f"`fedretain.metrics.spread`; {spread}) and a practical threshold, the smallest gap "
        f"that matters ({listed}); it did not hold when a comparison it needs is contradicted "
        "beyond the spread (the opposite holds, or the whole interval lies below the "
        "threshold); otherwise it is undecided, with the reason and what would decide it. A "
        "target never reached counts as one round after the last round run. The Holm column "
        "corrects each decision's p-value for the number of claims the report tests."
    )


def likely_reason(plan: Plan, claim: Claim, j: Judged) -> str:
    """Why a claim did not hold or stays undecided within the spread: the plan's differences
    from the paper and the claim's own most likely reason."""
    if j.verdict in (HELD, NOT_RUN) or (j.verdict == UNDECIDED and not j.compared):
        return ""
    parts = [claim.why_not] if claim.why_not else []
    if plan.reasons:  # the differences listed above, by their first words
        parts.insert(0, ", ".join(r.split(":")[0] for r in plan.reasons) + " (above)")
    return "; ".join(parts)


def cell_of(j: Judged) -> str:
    return f"**{j.verdict}**" + (f": {j.why}" if j.why else "")


def counts_of(judged: list[Judged]) -> dict[str, int]:
    """How many claims got each verdict."""
    return {v: sum(j.verdict == v for j in judged) for v in (HELD, NOT_HELD, UNDECIDED, NOT_RUN)}


def claims_section(
    plan: Plan, results: Results, data: Data
) -> tuple[list[str], list[dict[str, Any]]]:
    """The Claims section (each claim with its verdict, the seeds agreeing, the Holm-corrected
    decision, the likely reason and what would decide it) and each claim as a record for
    ``claims.json`` (the claims ledger reads them)."""
    n = len(plan.claims)
    head = ["#", "claim", "verdict", "seeds agreeing", f"Holm ({n} claims)", "likely reason"]
    head.append("what would decide it")
    lines = ["## Claims", "", *table(head)]
    records: list[dict[str, Any]] = []
    if data.missing:
        for i, claim in enumerate(plan.claims, 1):
            lines.append(row([str(i), claim.text, "not run (data missing)", "", "", "", ""]))
            records.append(
                {"claim": claim.text, "verdict": "not run", "why": "data missing", "decide": ""}
            )
        return [*lines, ""], records
    judged, kept = judge_all(plan, results)
    for i, (claim, j, holds) in enumerate(zip(plan.claims, judged, kept, strict=True), 1):
        holm_cell = ("yes" if holds else "no") if j.p is not None else "-"
        decide = j.decide if j.verdict in (UNDECIDED, NOT_RUN) else ""
        lines.append(
            row(
                [
                    str(i),
                    claim.text,
                    cell_of(j),
                    j.agreeing(),
                    holm_cell,
                    likely_reason(plan, claim, j),
                    decide,
                ]
            )
        )
        records.append(
            {
                "claim": claim.text,
                "paper": claim.paper,
                "verdict": j.verdict,
                "why": j.why,
                "seeds_agreeing": j.agreeing(),
                "holm": None if j.p is None else bool(holds),
                "p": j.p,
                "decide": decide,
            }
        )
    counted = counts_of(judged)
    within = sum(j.within for j in judged)
    decided, k = counted[HELD] + counted[NOT_HELD], sum(kept)
    holm = (
        f"{k} of the {decided} decided {'stays' if k == 1 else 'stay'} beyond the spread after "
        f"Holm's correction over the {n} claims"
        if decided
        else "none is decided, so Holm's correction has nothing to keep"
    )
    lines += [
        "",
        f"This report tests {n} claims: {counted[HELD]} held, {counted[NOT_HELD]} did not "
        f"hold, {counted[UNDECIDED]} undecided ({within} within the seeds' spread, "
        f"{counted[UNDECIDED] - within} for another reason)"
        + (f", {counted[NOT_RUN]} not run yet" if counted[NOT_RUN] else "")
        + f"; {holm}. "
        "'Seeds agreeing': on how many seeds the claim holds on that seed's own values.",
        "",
        rule_text(plan, len(results.seeds)),
        "",
    ]
    return lines, records


__all__ = [
    "HELD",
    "NOT_HELD",
    "NOT_RUN",
    "UNDECIDED",
    "Judged",
    "amount",
    "claims_section",
    "counts_of",
    "judge",
    "judge_all",
    "rule_text",
    "verdict",
]
