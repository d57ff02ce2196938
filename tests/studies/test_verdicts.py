"""The one rule every verdict and ranking follows: a gap counts only where it exceeds both the
seeds' spread and a practical threshold; otherwise a claim is undecided, with the reason and
what would decide it. Each test builds the results by hand, one failure shape each."""

from __future__ import annotations

from pathlib import Path

import pytest

from fedretain.metrics.spread import (
    CONTRADICTED,
    OPEN,
    SUPPORTED,
    Threshold,
    below,
    holm,
    seeds_needed,
    threshold_of,
)
from fedretain.studies.compare import RunResult
from fedretain.studies.presets import (
    Claim,
    Data,
    Plan,
    RunSpec,
    Sweep,
    Tuned,
    at_most,
    fewer,
    higher,
    highest,
    ranking,
)
from fedretain.studies.reproduce import Job, Outcome, Results, claims_section, judge
from fedretain.studies.reproduce.claims import chance_line, guard

ROUNDS = 10


def curve(final: float, reach: int | None = None, start: float = 0.1) -> list[dict]:
    """Records of a run whose accuracy is ``start`` until round ``reach`` (or round 1), then
    ``final``: its final (the mean of the last 10 % of evaluations) is ``final``."""
    at = 1 if reach is None else reach
    return [
        {"round": r, "test_accuracy": final if r >= at else start, "bytes_up": 0, "bytes_down": 0}
        for r in range(ROUNDS + 1)
    ]


def results_of(
    plan: Plan,
    finals: dict[tuple[str, str], list[float | None]],
    reach: dict[tuple[str, str], list[int | None]] | None = None,
    extra: dict[tuple[str, str], list[dict]] | None = None,
) -> Results:
    """Results of ``plan`` with each (setting, method)'s final accuracy per seed (None: the
    seed diverged), its round of reaching it, and summary keys of its own."""
    outcomes = {}
    for spec in plan.runs:
        key = spec.setting, spec.method
        final = finals[key][spec.seed]
        at = (reach or {}).get(key, [None] * 9)[spec.seed]
        job = Job("t", spec, [], Path(spec.folder), "done")
        if final is None:
            outcomes[(*key, spec.seed)] = Outcome("diverged", job, "NaN", 5)
            continue
        records = curve(final, at)
        summary = {
            "final_accuracy": final,
            "top_accuracy": max(r["test_accuracy"] for r in records),
            "rounds": ROUNDS,
            "bytes_up": 1e6,
            "bytes_down": 1e6,
            **((extra or {}).get(key, [{}] * 9)[spec.seed]),
        }
        run = RunResult(Path("."), spec.method, {}, summary, records)
        outcomes[(*key, spec.seed)] = Outcome("finished", job, run=run)
    return Results(plan, outcomes)


def plan_of(methods: list[str], seeds: int = 3, setting: str = "s", **kw) -> Plan:
    runs = [RunSpec(setting, m, s, {}) for m in methods for s in range(seeds)]
    return Plan("t", "none", {}, runs, ["final"], **kw)


def one(claim: Claim, plan: Plan, finals: dict, **kw):
    plan.claims = [claim]
    return judge(claim, plan, results_of(plan, finals, **kw))


# ---------------------------------------------------------------------------- the rule


def test_a_gap_counts_only_beyond_both_the_spread_and_the_threshold():
    accuracy = threshold_of("final")
    assert accuracy == Threshold(0.01, unit="points")
    # 17 points on every seed: supported
    assert below([0.57, 0.55, 0.59], [0.74, 0.72, 0.76], accuracy).status == SUPPORTED
    # 0.8 points on every seed: it separates, but no gap that matters
    result = below([0.600, 0.610, 0.620], [0.608, 0.618, 0.628], accuracy)
    assert result.low > 0 and result.status == CONTRADICTED
    # the demo's SCAFFOLD against FedReg: +2.6 points, interval -1.8 to +7.0: open
    result = below([0.6665, 0.6542, 0.6668], [0.7120, 0.6767, 0.6776], accuracy)
    assert result.status == OPEN and result.low < 0 < result.high
    assert result.seeds is not None and result.seeds > 3  # more seeds would settle it


def test_seeds_needed_is_where_the_interval_clears_the_tested_value():
    n = seeds_needed(0.02, 0.02)
    assert n is not None and n > 3
    from fedretain.metrics.spread import gap_factor

    assert gap_factor(n) * 0.02 < 0.02 <= gap_factor(n - 1) * 0.02
    assert seeds_needed(0.001, 1.0) is None  # more than MOST_SEEDS
    assert seeds_needed(0.0, 1.0) is None


def test_holm_keeps_decisions_in_order_and_stops_at_the_first_that_fails():
    # 4 claims: 0.001 <= 0.05/4, 0.01 <= 0.05/3, 0.04 > 0.05/2 stops; None never passes
    assert holm([0.01, 0.04, None, 0.001]) == [True, False, False, True]
    assert holm([0.03]) == [True] and holm([0.06]) == [False]


def test_rankings_name_only_pairs_that_pass_the_rule():
    methods = ["GradMA", "SCAFFOLD", "FedReg", "FedProx", "FedAvg"]
    plan = plan_of(methods)
    finals = {
        ("s", "GradMA"): [0.7470, 0.7211, 0.7539],
        ("s", "SCAFFOLD"): [0.7120, 0.6767, 0.6776],
        ("s", "FedReg"): [0.6665, 0.6542, 0.6668],
        # FedProx: above FedAvg on every seed by 0.0003-0.0026, within 1 point
        ("s", "FedProx"): [0.5649, 0.5508, 0.5918],
        ("s", "FedAvg"): [0.5623, 0.5505, 0.5909],
    }
    r = ranking(results_of(plan, finals).view(None), "s", methods, "final")
    assert r.order == methods
    assert r.top() == ["GradMA", "SCAFFOLD"]
    # SCAFFOLD is not ranked above FedReg (+2.6 points, interval -1.8 to +7.0), although
    # GradMA, which is indistinguishable from SCAFFOLD, is
    assert "FedReg" not in r.beats("SCAFFOLD") and "FedReg" in r.beats("GradMA")
    assert not r.apart["FedProx", "FedAvg"] and ("FedProx", "FedAvg") in r.ties()
    assert ("GradMA", "SCAFFOLD") in r.ties() and ("SCAFFOLD", "FedReg") in r.ties()
    text = r.describe()
    assert "GradMA ranks above FedReg, FedProx and FedAvg" in text
    assert "FedProx and FedAvg" in text.split("Indistinguishable:")[1]


def test_one_seed_ranks_nothing():
    plan = plan_of(["A", "B"], seeds=1)
    r = ranking(
        results_of(plan, {("s", "A"): [0.9], ("s", "B"): [0.1]}).view(None), "s", "AB", "final"
    )
    assert r.top() == ["A", "B"] and "every pair is indistinguishable" in r.describe()


# ---------------------------------------------------------------------------- the verdicts


def test_held_and_did_not_hold_need_the_spread_and_the_threshold():
    plan = plan_of(["A", "B", "C"])
    finals = {
        ("s", "A"): [0.80, 0.81, 0.82],
        ("s", "B"): [0.70, 0.71, 0.72],
        ("s", "C"): [0.705, 0.715, 0.725],  # half a point above B on every seed
    }
    held = one(Claim("A above B", higher("s", "A", "B")), plan, finals)
    assert held.verdict == "held" and held.agreeing() == "3 of 3" and held.p is not None
    assert "beyond the seeds' spread and the threshold" in held.why
    opposite = one(Claim("B above A", higher("s", "B", "A")), plan, finals)
    assert opposite.verdict == "did not hold" and "the opposite" in opposite.why
    small = one(Claim("C above B", higher("s", "C", "B")), plan, finals)
    assert small.verdict == "did not hold" and "no gap that matters" in small.why
    assert small.agreeing() == "3 of 3"  # every seed agrees, by half a point
    # "at most": C is at most B (within the threshold) holds; A at most B does not
    assert one(Claim("C <= B", at_most("s", "C", "B", "final")), plan, finals).verdict == "held"
    assert one(Claim("A <= B", at_most("s", "A", "B", "final")), plan, finals).verdict == (
        "did not hold"
    )


def test_within_the_spread_is_undecided_with_the_seeds_it_would_need():
    plan = plan_of(["A", "B"])
    finals = {("s", "A"): [0.60, 0.95, 0.80], ("s", "B"): [0.70, 0.71, 0.72]}
    j = one(Claim("A above B", higher("s", "A", "B")), plan, finals)
    assert j.verdict == "undecided" and j.means is True and j.agreeing() == "2 of 3"
    assert "within the seeds' spread (on the means it holds; held on 2 of 3" in j.why
    assert j.decide.startswith("about ") and "seeds at this gap and spread (now 3)" in j.decide


def test_an_every_claim_leaning_against_needs_the_seeds_of_the_one_comparison_against_it():
    # "A above every other": A leads B by 3 points on the means (noisy: many seeds would be
    # needed), C leads A by 10 (fewer seeds would show it): C alone decides the claim
    plan = plan_of(["A", "B", "C"])
    a, b, c = [0.70, 0.55, 0.64], [0.60, 0.60, 0.60], [0.82, 0.59, 0.78]
    finals = {("s", "A"): a, ("s", "B"): b, ("s", "C"): c}
    j = one(Claim("A above every other", highest("s", "A", ["B", "C"])), plan, finals)
    assert j.verdict == "undecided" and j.means is False and j.agreeing() == "0 of 3"
    against, towards = below(c, a, threshold_of("final")), below(b, a, threshold_of("final"))
    assert against.status == towards.status == OPEN
    assert against.seeds is not None and towards.seeds is not None
    assert against.seeds < towards.seeds
    assert j.decide == f"about {against.seeds} seeds at this gap and spread (now 3)"
    assert j.why.index("A > C") < j.why.index("A > B")  # the deciding comparison first
    # leaning towards it on every comparison: all must be decided, the most seeds of them
    d = [0.50, 0.62, 0.55]
    finals = {("s", "A"): a, ("s", "B"): b, ("s", "C"): d}
    j = one(Claim("A above every other", highest("s", "A", ["B", "C"])), plan, finals)
    lead = below(d, a, threshold_of("final"))
    assert j.verdict == "undecided" and j.means is True and lead.status == OPEN
    assert (
        j.decide == f"about {max(lead.seeds, towards.seeds)} seeds at this gap and spread (now 3)"
    )


def test_one_seed_decides_nothing():
    plan = plan_of(["A", "B"], seeds=1)
    j = one(Claim("A above B", higher("s", "A", "B")), plan, {("s", "A"): [0.9], ("s", "B"): [0.2]})
    assert j.verdict == "undecided" and j.why == "one seed: no spread to measure"
    assert "3 seeds" in j.decide


def test_models_at_chance_decide_nothing():
    # the demo with lr=1000: 0.1000 against 0.0999, nothing learned
    plan = plan_of(["A", "B"])
    finals = {("s", "A"): [0.1000, 0.1000, 0.1001], ("s", "B"): [0.0999, 0.0998, 0.0999]}
    j = one(Claim("A above B", higher("s", "A", "B")), plan, finals)
    assert j.verdict == "undecided" and "at chance" in j.why
    # one model at chance and the other learned: a result
    finals[("s", "A")] = [0.6, 0.61, 0.62]
    assert one(Claim("A above B", higher("s", "A", "B")), plan, finals).verdict == "held"


def test_the_results_name_every_method_at_chance_on_any_seed_whether_a_claim_reads_it_or_not():
    from fedretain.studies.reproduce.report import chance_notes

    plan = plan_of(["A", "B", "C"])  # no claim at all
    finals = {
        ("s", "A"): [0.6, 0.61, 0.62],  # learned
        ("s", "B"): [0.10, 0.11, 0.12],  # at chance on every seed
        ("s", "C"): [0.6, 0.14, None],  # at chance on one seed, one diverged
    }
    notes = " ".join(chance_notes(plan, results_of(plan, finals)))
    assert "B (3 of 3 seeds); C (1 of 2 seeds)" in notes and "A (" not in notes
    assert f"at most {chance_line(0.1):.3f}" in notes
    finals[("s", "B")] = finals[("s", "C")] = [0.6, 0.6, 0.6]
    assert chance_notes(plan, results_of(plan, finals)) == []


def test_with_two_classes_the_papers_weak_binary_models_are_at_chance_and_the_better_not():
    plan = plan_of(["A", "B"])
    plan.chance = 0.5  # FedReg's COVID-19 CT images: 0.511 to 0.673 in its Table 3
    finals = {("s", "A"): [0.611, 0.614, 0.617], ("s", "B"): [0.508, 0.511, 0.514]}
    j = one(Claim("A above B", higher("s", "A", "B")), plan, finals)
    assert j.verdict == "undecided" and "at chance" in j.why
    finals[("s", "A")] = [0.670, 0.673, 0.676]  # the paper's FedReg: no longer at chance
    assert one(Claim("A above B", higher("s", "A", "B")), plan, finals).verdict == "held"
    assert chance_line(0.1) == 1.5 * 0.1  # among ten classes, as before


def test_a_degenerate_reference_decides_no_r_a():
    plan = plan_of(["SGD", "A", "B"], reference="SGD")
    finals = {
        ("s", "SGD"): [0.1189, 0.26, 0.29],  # seed 0 at chance: R_0.5's target is 0.059
        ("s", "A"): [0.5, 0.5, 0.5],
        ("s", "B"): [0.5, 0.5, 0.5],
    }
    reach = {("s", "A"): [2, 2, 2], ("s", "B"): [6, 6, 6]}
    j = one(Claim("A first", fewer("s", "A", "B", "R_0.5")), plan, finals, reach=reach)
    assert j.verdict == "undecided" and "degenerate reference" in j.why and "seed 0" in j.why
    finals[("s", "SGD")] = [0.4, 0.42, 0.41]
    assert one(
        Claim("A first", fewer("s", "A", "B", "R_0.5")), plan, finals, reach=reach
    ).verdict == ("held")


def test_an_undertrained_model_decides_no_end_of_training_claim():
    plan = plan_of(["BN", "GN"], floors={"s": (0.439, "the paper's 0.739 less 30 points")})
    finals = {("s", "BN"): [0.70, 0.71, 0.72], ("s", "GN"): [0.35, 0.40, 0.42]}
    j = one(Claim("BN above GN", higher("s", "BN", "GN")), plan, finals)
    assert j.verdict == "undecided" and "undertrained: GN (s) reaches 0.3900" in j.why
    assert "0.439" in j.why and "paper" in j.decide


def test_a_best_point_at_the_edge_of_its_grid_decides_nothing():
    runs = [RunSpec("s", f"A lr={lr}", s, {}, "A", lr) for lr in (0.01, 0.1, 1.0) for s in range(3)]
    runs += [RunSpec("s", "B", s, {}) for s in range(3)]
    plan = Plan("t", "none", {}, runs, ["final"], sweep=Sweep("lr"))
    finals = {("s", "A lr=0.01"): [0.5] * 3, ("s", "A lr=0.1"): [0.6] * 3}
    finals[("s", "A lr=1.0")] = [0.8, 0.81, 0.8]  # the best lr is the grid's largest
    finals[("s", "B")] = [0.7, 0.71, 0.7]
    claim = Claim("A's best above B", higher("s", "A lr=1.0", "B"), grid=True)
    j = one(claim, plan, finals)
    assert j.verdict == "undecided" and "exhausted grid" in j.why and "largest" in j.why
    # a tuned choice at its grid's edge: the claims that read it are undecided
    plan = plan_of(["A", "B"])
    plan.tuning = [Tuned("A", {"lr": 1.0}, {"lr": [0.1, 1.0]}, edge=["lr"])]
    j = one(
        Claim("A above B", higher("s", "A", "B")),
        plan,
        {("s", "A"): [0.8] * 3, ("s", "B"): [0.5] * 3},
    )
    assert j.verdict == "undecided" and "A's lr=1 was chosen at the edge" in j.why


def test_a_sweep_with_points_not_run_has_no_best_yet_neither_undertrained_nor_at_an_edge():
    """Only lr=1.0 of A's grid has run (at 0.30, below the floor and the grid's largest): its
    best is unknown, so nothing stands in the claim's way for that reason (the runs it reads
    decide it, or it waits on them); not undertrained, not at an edge."""
    runs = [RunSpec("s", f"A lr={lr}", s, {}, "A", lr) for lr in (0.01, 0.1, 1.0) for s in range(3)]
    runs += [RunSpec("s", "B", s, {}) for s in range(3)]
    plan = Plan(
        "t", "none", {}, runs, ["final"], sweep=Sweep("lr"), floors={"s": (0.439, "the paper's")}
    )
    finals = {("s", f"A lr={lr}"): [0.4] * 3 for lr in (0.01, 0.1)}
    finals[("s", "A lr=1.0")], finals[("s", "B")] = [0.3, 0.31, 0.3], [0.7, 0.71, 0.7]
    outcomes = dict(results_of(plan, finals).outcomes)
    for lr in (0.01, 0.1):
        for seed in range(3):
            key = ("s", f"A lr={lr}", seed)
            outcomes[key] = Outcome("not run", outcomes[key].job)
    claim = Claim("A's best above B", higher("s", "A lr=1.0", "B"), grid=True)
    plan.claims = [claim]
    assert guard(plan, claim, Results(plan, outcomes), [("s", "A lr=1.0", "final")]) == ("", "")
    # with the grid complete, the same finals are an undertrained series
    j = one(claim, plan, finals)
    assert j.verdict == "undecided" and "undertrained: A (s) reaches 0.4000 at best" in j.why


def test_a_run_without_a_result_leaves_undecided_only_what_rests_on_it():
    plan = plan_of(["A", "B", "C"])
    finals = {("s", "A"): [0.8, None, 0.8], ("s", "B"): [0.5] * 3, ("s", "C"): [0.9] * 3}
    j = one(Claim("A above B", higher("s", "A", "B")), plan, finals)
    assert j.verdict == "undecided" and "no result from A diverged" in j.why
    assert "results from those runs" in j.decide
    # the two seeds A has do not decide it alone: a diverged seed never drops out
    assert all(b.n == 2 for _, b in j.compared)
    # B is not the highest whatever A's missing seed gives: C is above it on every seed
    from fedretain.studies.presets import highest

    j = one(Claim("B highest", highest("s", "B", ["A", "C"])), plan, finals)
    assert j.verdict == "did not hold" and "B > C" in j.why


def test_many_runs_without_a_result_are_counted_not_listed_and_are_not_within_the_spread():
    plan = plan_of(["A", "B"])
    finals = {("s", "A"): [None] * 3, ("s", "B"): [0.5, None, None]}
    plan.claims = [Claim("A above B", higher("s", "A", "B"))]
    j = judge(plan.claims[0], plan, results_of(plan, finals))
    assert j.verdict == "undecided" and not j.within
    assert j.why.startswith("no result from 5 runs (5 diverged): B diverged in round 5 (seed 1),")
    assert j.why.endswith(", ...") and j.why.count("(seed ") == 3
    assert "a smaller lr for a diverged one" in j.decide
    lines, _ = claims_section(plan, results_of(plan, finals), Data("x", "", "x"))
    summary = next(line for line in lines if line.startswith("This report tests 1 claims"))
    assert "1 undecided (0 within the seeds' spread, 1 for another reason)" in summary


def test_a_claim_whose_missing_runs_were_never_run_is_not_run_yet_not_undecided():
    plan = plan_of(["A", "B"])
    finals = {("s", "A"): [0.8, 0.8, 0.8], ("s", "B"): [0.5, 0.5, 0.5]}
    outcomes = dict(results_of(plan, finals).outcomes)
    job = outcomes[("s", "B", 1)].job
    for seed in (1, 2):  # B's last two seeds are still to run
        outcomes[("s", "B", seed)] = Outcome("not run", job)
    results = Results(plan, outcomes)
    plan.claims = [Claim("A above B", higher("s", "A", "B"))]
    lines, records = claims_section(plan, results, Data("x", "", "x"))
    assert records[0]["verdict"] == "not run" and "B not run (seed 1)" in records[0]["why"]
    assert "run the report's command" in records[0]["decide"]
    summary = next(line for line in lines if line.startswith("This report tests 1 claims"))
    assert (
        "0 undecided (0 within the seeds' spread, 0 for another reason), 1 not run yet" in summary
    )
    # one of them diverged: something went wrong, and the claim is undecided
    outcomes[("s", "B", 2)] = Outcome("diverged", job, "NaN", 5)
    _, records = claims_section(plan, Results(plan, outcomes), Data("x", "", "x"))
    assert records[0]["verdict"] == "undecided" and "smaller lr" in records[0]["decide"]


def test_the_section_counts_verdicts_and_adds_the_holm_column():
    plan = plan_of(["A", "B", "C"])
    finals = {
        ("s", "A"): [0.80, 0.81, 0.82],
        ("s", "B"): [0.70, 0.71, 0.72],
        ("s", "C"): [0.60, 0.95, 0.80],
    }
    plan.claims = [
        Claim("A above B", higher("s", "A", "B")),
        Claim("C above B", higher("s", "C", "B")),
        Claim("B above A", higher("s", "B", "A")),
    ]
    lines, records = claims_section(plan, results_of(plan, finals), Data("x", "", "x"))
    assert "Holm (3 claims)" in lines[2]
    summary = next(line for line in lines if line.startswith("This report tests 3 claims"))
    assert "1 held, 1 did not hold, 1 undecided (1 within the seeds' spread" in summary
    assert [r["verdict"] for r in records] == ["held", "undecided", "did not hold"]
    assert records[0]["holm"] is True and records[1]["holm"] is None
    assert records[1]["decide"].startswith("about ")
    rule = next(line for line in lines if line.startswith("The rule"))
    assert "accuracy: 1 point" in rule and "rounds: 10 % (at least 1 round)" in rule


@pytest.mark.parametrize("metric", ["final", "top", "R_0.5", "to:90%", "loss_increase", "psnr"])
def test_every_metric_a_claim_compares_has_a_threshold(metric):
    assert threshold_of(metric).of(0.5, 0.6) >= 0
