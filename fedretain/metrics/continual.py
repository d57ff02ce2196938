"""Continual-learning measures of an accuracy matrix.

``R[i][j]`` is the accuracy on the test data of task ``j``'s classes after training task ``i``
(``0 <= i, j < T``; rows for the tasks trained so far). With ``T`` rows:

- **average accuracy** ``A_T = (1/T) Σ_j R[T−1][j]`` (Chaudhry, Dokania, Ajanthan & Torr,
  *Riemannian Walk for Incremental Learning: Understanding Forgetting and Intransigence*,
  ECCV 2018, arXiv:1801.10112, eq. 1);
- **average forgetting** ``F_T = (1/(T−1)) Σ_{j<T−1} max_{l<T−1} (R[l][j] − R[T−1][j])``
  over ``l >= j`` (the same paper, eqs. 2-3: the largest drop of task ``j``'s accuracy from
  any earlier point after it was learnt to the end); 0 for one task;
- **backward transfer** ``BWT = (1/(T−1)) Σ_{j<T−1} (R[T−1][j] − R[j][j])`` (Lopez-Paz &
  Ranzato, *Gradient Episodic Memory for Continual Learning*, NeurIPS 2017, arXiv:1706.08840,
  §5): negative values are forgetting; 0 for one task.

The functions take the matrix as a list of rows (each row has one entry per task, later tasks'
entries included and ignored) and return floats.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["average_accuracy", "average_forgetting", "backward_transfer", "continual_summary"]

Matrix = Sequence[Sequence[float]]


def _rows(matrix: Matrix) -> int:
    t = len(matrix)
    if t == 0:
        raise ValueError("an accuracy matrix needs at least one row (one finished task)")
    for i, row in enumerate(matrix):
        if len(row) < t:
            raise ValueError(f"row {i} of the accuracy matrix has {len(row)} entries, need {t}")
    return t


def average_accuracy(matrix: Matrix) -> float:
    """``A_T``: the mean over the ``T`` learnt tasks of the last row."""
    t = _rows(matrix)
    return float(sum(matrix[t - 1][j] for j in range(t)) / t)


def average_forgetting(matrix: Matrix) -> float:
    """``F_T``: the mean over tasks ``j < T−1`` of ``max_{j <= l < T−1} R[l][j] − R[T−1][j]``."""
    t = _rows(matrix)
    if t == 1:
        return 0.0
    last = matrix[t - 1]
    drops = [max(matrix[l][j] for l in range(j, t - 1)) - last[j] for j in range(t - 1)]
    return float(sum(drops) / (t - 1))


def backward_transfer(matrix: Matrix) -> float:
    """``BWT``: the mean over tasks ``j < T−1`` of ``R[T−1][j] − R[j][j]``."""
    t = _rows(matrix)
    if t == 1:
        return 0.0
    return float(sum(matrix[t - 1][j] - matrix[j][j] for j in range(t - 1)) / (t - 1))


def continual_summary(matrix: Matrix) -> dict[str, float]:
    """The three measures by name (``average_accuracy``, ``average_forgetting``,
    ``backward_transfer``)."""
    return {
        "average_accuracy": average_accuracy(matrix),
        "average_forgetting": average_forgetting(matrix),
        "backward_transfer": backward_transfer(matrix),
    }
