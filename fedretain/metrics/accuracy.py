"""Accuracy-curve metrics: top accuracy, rounds to a target, and FedReg's ``R_a``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any


def top_accuracy(records: Sequence[dict[str, Any]]) -> float:
    return max((r["test_accuracy"] for r in records), default=float("nan"))


def rounds_to(records: Iterable[dict[str, Any]], target: float) -> int | None:
    """The first evaluated round whose test accuracy reaches ``target``; None if never."""
    for r in records:
        if r["test_accuracy"] >= target:
            return int(r["round"])
    return None


def rounds_to_targets(records: Sequence[dict[str, Any]], targets: Iterable[float]) -> dict:
    """``{"0.5": round or None, ...}`` for each accuracy target."""
    return {f"{t:g}": rounds_to(records, t) for t in targets}


def r_a(records: Sequence[dict[str, Any]], reference_final: float, a: float) -> int | None:
    """FedReg's ``R_a``: the first round reaching ``a`` x the reference run's final accuracy.

    The reference is a run in the same setting, SGD in the paper (Xu et al., ICLR 2022, §4).
    """
    return rounds_to(records, a * reference_final)


TAIL = 0.10  # "final": the mean over the last 10 % of a run's evaluations


def evaluations(records: Sequence[dict[str, Any]]) -> list[float]:
    """The test accuracies of a run's evaluations after training began (round 0, the initial
    model, left out; all of them if there is no other)."""
    trained = [r["test_accuracy"] for r in records if r.get("round", 1) > 0]
    return trained or [r["test_accuracy"] for r in records]


def final_accuracy(records: Sequence[dict[str, Any]], tail: float = TAIL) -> float:
    """The sturdier final accuracy: the mean test accuracy over the last ``tail`` fraction of
    the run's evaluations (at least the last one), so that a curve swinging several points
    from one evaluation to the next is not read off one evaluation."""
    accs = evaluations(records)
    if not accs:
        return float("nan")
    k = tail_count(len(accs), tail)
    return sum(accs[-k:]) / k


def tail_count(evaluated: int, tail: float = TAIL) -> int:
    """How many of ``evaluated`` evaluations :func:`final_accuracy` averages."""
    return max(1, math.ceil(tail * evaluated - 1e-9))
