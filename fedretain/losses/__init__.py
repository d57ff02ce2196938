"""Losses: per-example functions ``loss(logits, y, label_mask) -> (B,)``, safe inside vmap.

``label_mask`` is the client's local label set as a boolean vector over classes (fixed shape),
which truncated losses such as TCE use; others ignore it. A loss is chosen with ``loss=NAME``
and composes with every algorithm.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import Tensor

from fedretain.errors import ConfigError, unknown_choice
from fedretain.losses.ce import ce
from fedretain.losses.tce import tce

Loss = Callable[[Tensor, Tensor, Tensor | None], Tensor]


@dataclass(frozen=True)
class LossInfo:
    name: str
    description: str
    fn: Loss


LOSSES: dict[str, LossInfo] = {
    "ce": LossInfo("ce", "cross-entropy over all classes (hard or soft labels)", ce),
    "tce": LossInfo(
        "tce", "truncated cross-entropy: softmax over the client's label set (Legate 2022)", tce
    ),
}


def get_loss(name: str) -> Loss:
    if name not in LOSSES:
        raise ConfigError(unknown_choice("loss", name, LOSSES))
    return LOSSES[name].fn
