"""Accuracy-curve metrics: top accuracy, rounds to a target, and FedReg's ``R_a``."""

from __future__ import annotations

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
