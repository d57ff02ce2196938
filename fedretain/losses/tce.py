"""Truncated cross-entropy (TCE): the softmax denominator runs over the client's label set only.

Legate, Caccia, Belilovsky, "Reducing Forgetting in Federated Learning with Truncated
Cross-Entropy", NeurIPS 2022 Workshop on Distribution Shifts (OpenReview mmxN1WUET3), eq. 3;
extended as "Re-Weighted Softmax Cross-Entropy to Control Forgetting in Federated Learning",
CoLLAs 2023, arXiv:2304.05260.

Per example ``−log( e^{z_y} / Σ_{c∈C(Y_k)} e^{z_c} )`` with ``C(Y_k)`` the labels of client
``k``'s whole local training set, given as the fixed-shape boolean ``label_mask`` over classes
(built once per client by the engines). Classes outside the set get ``−inf`` logits
(``masked_fill``), so their logits receive exactly zero gradient: a client no longer pushes
down the classes it does not hold. Training uses it; evaluation always uses the full softmax.
No Python sets, no data-dependent branches: it runs inside ``torch.func.vmap``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedretain.losses.ce import ce


def tce(logits: Tensor, y: Tensor, label_mask: Tensor | None = None) -> Tensor:
    """Per-example truncated cross-entropy, shape ``logits.shape[:-1]``.

    ``label_mask`` is a boolean vector over classes (or one per example, broadcastable to
    ``logits``); ``None`` gives the full cross-entropy. An example's own label always counts as
    present, so a label outside the mask gives the loss of the mask plus that class rather than
    ``inf``. Soft labels (``y`` floating point with the shape of ``logits``, as FedReg's pseudo
    data) keep every class they put mass on, and absent classes contribute nothing.

    :param label_mask: classes the softmax runs over, supplied per batch (not a config key); None:
        all
    """
    if label_mask is None:
        return ce(logits, y)
    if y.dtype.is_floating_point:  # soft labels
        keep = label_mask | (y > 0)
        logp = F.log_softmax(logits.masked_fill(~keep, float("-inf")), dim=-1)
        return -(y * logp.masked_fill(~keep, 0.0)).sum(dim=-1)
    classes = torch.arange(logits.shape[-1], device=logits.device)
    keep = label_mask | (classes == y.unsqueeze(-1))
    logp = F.log_softmax(logits.masked_fill(~keep, float("-inf")), dim=-1)
    return -torch.gather(logp, -1, y.unsqueeze(-1)).squeeze(-1)
