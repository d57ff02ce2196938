"""Losses: per-example functions ``loss(logits, y, label_mask) -> (B,)``, safe inside vmap.

``label_mask`` is the client's local label set as a boolean vector over classes (fixed shape),
which truncated losses such as TCE use; others ignore it. A loss is chosen with ``loss=NAME``
and composes with every algorithm.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import Tensor

from fedretain.losses.ce import ce
from fedretain.losses.tce import tce
from fedretain.registry import Registry

Loss = Callable[[Tensor, Tensor, Tensor | None], Tensor]


LOSSES = Registry("loss")
LOSSES.add("ce", ce, "cross-entropy over all classes (hard or soft labels)")
LOSSES.add("tce", tce, "truncated cross-entropy: softmax over the client's label set (Legate 2022)")


def get_loss(name: str) -> Loss:
    return LOSSES.get(name).factory
