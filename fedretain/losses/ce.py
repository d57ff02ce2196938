"""Cross-entropy, per example, with hard (class index) or soft (probability) targets."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def ce(logits: Tensor, y: Tensor, label_mask: Tensor | None = None) -> Tensor:
    """Per-example cross-entropy over the full softmax; ``label_mask`` is ignored.

    ``y`` holds class indices, or, when it is floating point with the shape of ``logits``,
    probabilities (soft labels, as FedReg's pseudo data uses).

    :param label_mask: ignored: the full softmax always (a per-batch argument, not a config key)
    """
    if y.dtype.is_floating_point:
        return -(y * F.log_softmax(logits, dim=-1)).sum(dim=-1)
    return F.cross_entropy(logits, y, reduction="none")


def accuracy_count(logits: Tensor, y: Tensor) -> Tensor:
    return (logits.argmax(dim=-1) == y).sum()
