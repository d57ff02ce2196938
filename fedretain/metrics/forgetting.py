"""Forgetting diagnostics (``diagnostics=forgetting``): how much local training overwrites.

Two measurements per round ``t`` (1-based, as in the papers), from the global model the round
started from (``θ(t−1)``) and the locally trained models ``θ(t,j)`` of the round's clients
``C(t)``:

- **loss increase** (FedReg, ICLR 2022, App. B.1): for every client ``i`` of the previous round
  ``C(t−1)``, ``loss(t−1)(i)`` = mean loss on its training data under ``θ(t−1)``, and
  ``loss(t)(i)`` = the same averaged over the round's local models ``θ(t,j)``, ``j ∈ C(t)``.
  ``loss(t) > loss(t−1)`` means this round's local training forgot what client ``i`` taught.
  With a reference algorithm (``diagnostics.reference=fedavg``), the reference's local models,
  trained from the same ``θ(t−1)`` on the same clients and mini-batches, give ``loss_ref(t)``:
  FedReg's App. B.3 compares methods this way, from one trajectory, so that both start from
  the same ``loss(t−1)`` (the paper also sets FedReg's γ = 1 there).
- **Fisher correlation** (FedReg, App. B.3): for every client ``i ∈ C(t)``, the Pearson
  correlation between the diagonal empirical Fisher of its local model ``θ(t,i)`` on FedReg's
  pseudo data (made from ``i``'s data with ``θ(t−1)``, soft labels) and on the training data
  of the clients of the previous 10 rounds. High values mean the pseudo data stand in for the
  data the model must not forget. Both sets are capped at ``fisher_samples`` samples, and the
  trained local model is used (the paper takes it after one local step). Measured only with
  ``fisher=True`` (``diagnostics.fisher=true``): it makes FedReg's pseudo data and two Fisher
  matrices per client: on 10 rounds of the main job, 12.3 s against 2.0 s for the rest of the
  diagnostic and 5.5 s for FedAvg's local training.
- **F_ki** (TCE, section 2): for ``k, i ∈ C(t)``,
  ``F_ki = Acc_k(θ(t,i)) − Acc_k(θ(t−1))`` on client ``k``'s validation data (training data
  when the run has no validation split), and ``F_k = mean_{i≠k} F_ki``: negative values are
  knowledge of client ``k`` destroyed by client ``i``'s local training.

Losses and accuracies use the full softmax (cross-entropy), whatever the training loss, on every
sample of a client or, with ``diagnostics.samples=N``, on a fixed subset of at most N (on a CPU
the CNN's diagnostics cost more than its round otherwise); each model is evaluated once per
round, on the concatenated samples of every client it is measured on. :class:`Forgetting`
returns one record per round; the run's diagnostic (:mod:`fedretain.experiments.diagnostics`)
writes them and draws them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedretain.core.fisher import fisher_diag
from fedretain.core.task import Batch, Task
from fedretain.core.tree import Tree, ravel
from fedretain.data.base import Dataset, as_input

# (task, params, buffers, batch) -> pseudo inputs and their soft labels, made from the batch
PseudoDataFn = Callable[[Task, Tree, Tree, Batch], tuple[Tensor, Tensor]]


class Forgetting:
    """Collects the measurements round by round; the engine supplies the local models.

    ``pseudo`` makes the pseudo data of the Fisher correlation (FedReg's, with the run's
    settings when it is FedReg: :func:`fedretain.algorithms.fedreg.pseudo_data`); needed only
    with ``fisher=True``.
    """

    def __init__(
        self,
        task: Task,
        dataset: Dataset,
        parts: list[np.ndarray],
        val_parts: list[np.ndarray] | None,
        batch_size: int = 1000,
        pseudo: PseudoDataFn | None = None,
        fisher_samples: int = 256,
        seed: int = 0,
        eval_samples: int = 0,
        fisher: bool = False,
    ) -> None:
        self.task = task
        self.dataset = dataset
        self.parts = parts
        self.val_parts = val_parts
        self.batch_size = batch_size
        self.prev_clients: list[int] = []
        self.records: list[dict[str, Any]] = []
        if fisher and pseudo is None:
            raise ValueError("the Fisher correlation needs pseudo data: pass pseudo")
        self.pseudo = pseudo
        self.fisher = fisher
        self.fisher_samples = fisher_samples
        self.rng = np.random.default_rng(seed)
        # losses and accuracies on at most eval_samples of each client's samples (0: all),
        # the same subset every round
        self.eval_parts = [self._subset(p, eval_samples) for p in parts]
        self.eval_val_parts = (
            None if val_parts is None else [self._subset(p, eval_samples) for p in val_parts]
        )

    def _subset(self, idx: np.ndarray, n: int) -> np.ndarray:
        if n <= 0 or len(idx) <= n:
            return idx
        return np.sort(self.rng.choice(idx, n, replace=False))

    def _batch(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        if len(idx) > self.fisher_samples:
            idx = np.sort(self.rng.choice(idx, self.fisher_samples, replace=False))
        i = torch.from_numpy(idx)
        first = next(iter(self.task.model.parameters()))
        x = as_input(self.dataset.x_train[i], first.dtype).to(first.device)
        return {
            "x": x,
            "y": self.dataset.y_train[i].to(first.device),
            "w": torch.ones(len(i), dtype=first.dtype, device=first.device),
        }

    def _fisher_corr(
        self,
        start_model: tuple[Tree, Tree],
        local: tuple[Tree, Tree],
        own: np.ndarray,
        prev: np.ndarray,
    ) -> float:
        assert self.pseudo is not None
        real = self._batch(own)
        x_s, y_s = self.pseudo(self.task, start_model[0], start_model[1], real)
        on_pseudo = fisher_diag(self.task, local[0], local[1], {"x": x_s, "y": y_s, "w": real["w"]})
        on_prev = fisher_diag(self.task, local[0], local[1], self._batch(prev))
        a, b = ravel(on_pseudo).double(), ravel(on_prev).double()
        a, b = a - a.mean(), b - b.mean()
        return float((a @ b) / (a.norm() * b.norm()).clamp_min(1e-300))

    def _measure(
        self, model: tuple[Tree, Tree], segments: list[np.ndarray]
    ) -> list[tuple[float, float]]:
        """Accuracy and mean loss of ``model`` on each segment of training-set rows, from one
        pass over their concatenation."""
        if not segments:
            return []
        idx = torch.from_numpy(np.concatenate(segments))
        correct, losses = self.task.per_example(
            model[0],
            model[1],
            self.dataset.x_train[idx],
            self.dataset.y_train[idx],
            self.batch_size,
        )
        out = []
        for c, loss in zip(
            correct.split([len(s) for s in segments]),
            losses.double().split([len(s) for s in segments]),
            strict=True,
        ):
            n = max(len(c), 1)
            out.append((int(c.sum()) / n, float(loss.sum()) / n))
        return out

    def round(
        self,
        rnd: int,
        start_model: tuple[Tree, Tree],
        local_models: dict[int, tuple[Tree, Tree]],
        reference: dict[int, tuple[Tree, Tree]] | None = None,
    ) -> dict[str, Any]:
        """Measure round ``rnd`` (0-based) from the global model it started from and the
        clients' trained models (and a reference algorithm's, trained from the same global
        model on the same clients); returns (and keeps) the round's record."""
        clients = list(local_models)
        record: dict[str, Any] = {"round": rnd + 1, "clients": clients}
        prev = self.prev_clients if clients else []
        on = self.eval_val_parts if self.eval_val_parts is not None else self.eval_parts
        # every model on the previous clients' samples (losses) and this round's (F_ki)
        segments = [self.eval_parts[i] for i in prev] + [on[k] for k in clients]

        def measure(model: tuple[Tree, Tree]) -> tuple[list[float], list[float]]:
            """Losses on the previous clients, accuracies on this round's."""
            m = self._measure(model, segments)
            return [loss for _, loss in m[: len(prev)]], [acc for acc, _ in m[len(prev) :]]

        before, base = measure(start_model)
        local = {i: measure(m) for i, m in local_models.items()}
        if prev:
            after = [float(np.mean([local[j][0][n] for j in clients])) for n in range(len(prev))]
            record.update(
                prev_clients=list(prev),
                loss_prev=before,
                loss_now=after,
                loss_prev_mean=float(np.mean(before)),
                loss_now_mean=float(np.mean(after)),
                loss_increase_mean=float(np.mean(after) - np.mean(before)),
            )
            if self.fisher:
                history = [c for r in self.records[-10:] for c in r["clients"]]
                prev_data = np.concatenate([self.parts[c] for c in dict.fromkeys(history)])
                corr = [
                    self._fisher_corr(start_model, local_models[j], self.parts[j], prev_data)
                    for j in clients
                ]
                record.update(fisher_corr=corr, fisher_corr_mean=float(np.mean(corr)))
            if reference:
                segs = [self.eval_parts[i] for i in prev]
                ref_losses = [
                    [loss for _, loss in self._measure(m, segs)] for m in reference.values()
                ]
                ref = [float(np.mean([r[n] for r in ref_losses])) for n in range(len(prev))]
                record.update(
                    loss_now_ref=ref,
                    loss_now_ref_mean=float(np.mean(ref)),
                    loss_increase_ref_mean=float(np.mean(ref) - np.mean(before)),
                )
        f = np.array([[local[i][1][a] - base[a] for i in clients] for a in range(len(clients))])
        n = len(clients)
        f_k = [(f[a].sum() - f[a, a]) / (n - 1) if n > 1 else float("nan") for a in range(n)]
        record.update(
            F=f.tolist(),
            F_k=[float(v) for v in f_k],
            F_on="validation" if self.val_parts is not None else "train",
        )
        self.prev_clients = clients
        self.records.append(record)
        return record

    def summary(self) -> dict[str, Any]:
        """Means over the rounds: loss increase (and the reference's), F_k."""
        rows = [r for r in self.records if "loss_prev_mean" in r]

        def mean(key: str) -> float | None:
            values = [r[key] for r in rows if key in r]
            return float(np.mean(values)) if values else None

        f_k = [v for r in self.records for v in r["F_k"] if np.isfinite(v)]  # n > 1 rounds
        out = {
            "loss_increase_mean": mean("loss_increase_mean"),
            "F_k_mean": float(np.mean(f_k)) if f_k else None,
        }
        if any("loss_increase_ref_mean" in r for r in rows):
            out["loss_increase_ref_mean"] = mean("loss_increase_ref_mean")
        return out
