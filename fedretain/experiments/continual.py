"""The continual side of a run (``scenario=class_incremental``): evaluation on the classes
seen so far, the accuracy matrix and its measures, plots.

:class:`ContinualRecorder` is the run's observer ``continual``
(:mod:`fedretain.experiments.observers`) and its evaluation
(:class:`~fedretain.experiments.observers.Evaluation`), in place of the whole test set:

- every evaluation takes one pass over the test set with the global model and reports, for the
  task of the last completed round ``t``, the accuracy and loss on the test samples of every
  class seen by any client in tasks ``0..t`` (these become ``test_accuracy``/``test_loss`` of
  ``metrics.jsonl``, and the record gets the ``task``) and the accuracy on each task's classes
  (``task_accuracy``, one entry per task, later tasks included); the last round of every task
  is evaluated, whatever ``eval_every``;
- the evaluation that ends a task is a row of the accuracy matrix ``R[t][j]``;
- the results: ``continual.jsonl`` (one line per evaluation: ``round``, ``task``,
  ``seen_accuracy``, ``seen_loss``, ``task_accuracy``, ``task_end``), and in ``summary.json``
  ``accuracy_matrix``, ``task_classes``, ``average_accuracy``, ``average_forgetting`` and
  ``backward_transfer`` (:mod:`fedretain.metrics.continual`: Chaudhry et al., ECCV 2018,
  arXiv:1801.10112; Lopez-Paz & Ranzato, NeurIPS 2017, arXiv:1706.08840); plots
  ``continual_accuracy.png`` (accuracy on each task's classes and on the seen classes over the
  rounds) and ``accuracy_matrix.png`` (the matrix as a heat map).

Its state (the rows so far) goes into the checkpoint under ``continual``; the task of a round
is a function of the round (the clients' data switches task inside the round: the
federation's ``clients_for_round``), so resuming inside or across a task boundary needs
nothing else.

Classes may recur across tasks when different clients draw them (FedCIL App. A), so the
classes of task ``j`` (the union over clients) may overlap those of another task.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.nn.functional as F

from fedretain.core.tree import Tree
from fedretain.data.base import as_input
from fedretain.errors import DataError
from fedretain.experiments.observers import BaseObserver, Record
from fedretain.files import save_figure, write_jsonl
from fedretain.metrics.continual import continual_summary

if TYPE_CHECKING:
    from fedretain.recipe.federation import Federation

__all__ = ["ContinualRecorder", "plot_accuracy_matrix", "plot_task_accuracy"]


class ContinualRecorder(BaseObserver):
    """Seen-class evaluation and the accuracy matrix of one continual run (``fed.continual``)."""

    def __init__(self, fed: Federation, out: Path) -> None:
        continual = fed.continual
        assert continual is not None, "a continual recorder needs a continual scenario"
        self.continual = continual
        self.scenario = continual.scenario
        self.model, self.batch_size, self.label = fed.task, fed.eval_batch, fed.config.label
        self.plots = fed.config.plots
        self.out = Path(out)
        y = np.asarray(fed.dataset.y_test)
        tasks = range(self.scenario.tasks)
        self.task_classes = [list(continual.task_classes(t)) for t in tasks]
        self.task_masks = [np.isin(y, c) for c in self.task_classes]
        self.seen_masks = [np.isin(y, continual.seen_classes(t)) for t in tasks]
        self.x_test, self.y_test = fed.dataset.x_test, fed.dataset.y_test
        self.rows: list[dict[str, Any]] = []

    def task_after(self, done: int) -> int:
        """The task of the last completed round (task 0 before any round)."""
        return self.scenario.task_of(max(done - 1, 0))

    # the evaluation --------------------------------------------------------------------------

    @torch.no_grad()
    def evaluate(self, params: Tree, buffers: Tree, done: int) -> tuple[float, float]:
        """Accuracy and loss on the seen classes after ``done`` rounds; appends the row to
        ``continual.jsonl``."""
        first = next(iter(params.values()))
        device, dtype = first.device, first.dtype
        correct, losses = [], []
        batch_size = self.batch_size
        for start in range(0, len(self.y_test), batch_size):
            xb = as_input(self.x_test[start : start + batch_size].to(device), dtype)
            yb = self.y_test[start : start + batch_size].to(device)
            logits, _ = self.model.forward(params, buffers, xb, train=False)
            correct.append(logits.argmax(dim=-1) == yb)
            losses.append(F.cross_entropy(logits.float(), yb, reduction="none"))
        hit = torch.cat(correct).cpu().numpy()  # one copy to the host, after the last batch
        ce = torch.cat(losses).double().cpu().numpy()
        t = self.task_after(done)
        seen = self.seen_masks[t]
        n = max(int(seen.sum()), 1)
        acc = float(hit[seen].sum() / n)
        loss = float(ce[seen].sum() / n)
        per_task = [float(hit[m].sum() / max(int(m.sum()), 1)) for m in self.task_masks]
        row = {
            "round": done,
            "task": t,
            "seen_accuracy": acc,
            "seen_loss": loss,
            "task_accuracy": per_task,
            "task_end": self.scenario.task_end(done),
        }
        self.rows.append(row)
        write_jsonl(self.out / "continual.jsonl", self.rows)
        return acc, loss

    def due(self, done: int) -> bool:
        """Every task's last round is evaluated (a row of the accuracy matrix)."""
        return self.scenario.task_end(done)

    # the observer's hooks --------------------------------------------------------------------

    def record(self, record: Record, state: Tree) -> Record:
        return {"task": self.task_after(record["round"])}

    def state(self) -> dict[str, Any]:
        return {"rows": self.rows}

    def load_state(self, state: dict[str, Any] | None) -> None:
        if state is None:
            raise DataError(
                "this checkpoint has no continual state (written before the scenario was "
                "set?); start the run again"
            )
        self.rows = list(state["rows"])
        write_jsonl(self.out / "continual.jsonl", self.rows)

    def finish(self, stopped: bool) -> dict[str, Any]:
        return self.results(self.label)

    # results ---------------------------------------------------------------------------------

    def matrix(self) -> list[list[float]]:
        """``R[t][j]``: one row per finished task (the evaluation that ended it)."""
        return [list(r["task_accuracy"]) for r in self.rows if r["task_end"]]

    def results(self, label: str = "") -> dict[str, Any]:
        """The summary's continual keys; draws the two plots."""
        matrix = self.matrix()
        out: dict[str, Any] = {
            "scenario": {
                "tasks": self.scenario.tasks,
                "classes_per_task": self.scenario.classes_per_task,
                "rounds_per_task": self.scenario.rounds_per_task,
            },
            "task_classes": self.task_classes,
            "accuracy_matrix": matrix,
            "tasks_finished": len(matrix),
        }
        if matrix:
            out.update(continual_summary(matrix))
        if self.rows and self.plots:
            plot_task_accuracy(
                self.rows, self.scenario.rounds_per_task, self.out / "continual_accuracy.png", label
            )
        if matrix and self.plots:
            plot_accuracy_matrix(matrix, self.out / "accuracy_matrix.png", label)
        return out


def plot_task_accuracy(
    rows: list[dict[str, Any]], rounds_per_task: int, path: str | Path, title: str = ""
) -> None:
    """Accuracy on each task's classes and on the seen classes against the round."""
    from fedretain.experiments.plots import plt  # matplotlib (Agg): only where a run ends

    fig, ax = plt.subplots(figsize=(6.8, 4.2))
    xs = [r["round"] for r in rows]
    tasks = len(rows[0]["task_accuracy"])
    for j in range(tasks):
        ax.plot(xs, [r["task_accuracy"][j] for r in rows], linewidth=1.0, label=f"task {j}")
    ax.plot(xs, [r["seen_accuracy"] for r in rows], "k-", linewidth=2.0, label="seen classes")
    for t in range(1, tasks):
        ax.axvline(t * rounds_per_task, color="grey", linestyle=":", linewidth=0.8)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if title:
        ax.set_title(title)
    save_figure(fig, path)
    plt.close(fig)


def plot_accuracy_matrix(matrix: list[list[float]], path: str | Path, title: str = "") -> None:
    """The accuracy matrix ``R[t][j]`` as a heat map (rows: after task t; columns: task j)."""
    from fedretain.experiments.plots import plt

    r = np.asarray(matrix, dtype=float)
    fig, ax = plt.subplots(figsize=(1.8 + 0.7 * r.shape[1], 1.4 + 0.6 * r.shape[0]))
    im = ax.imshow(r, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
    for i in range(r.shape[0]):
        for j in range(r.shape[1]):
            color = "white" if r[i, j] < 0.5 else "black"
            ax.text(j, i, f"{r[i, j]:.2f}", ha="center", va="center", fontsize=7, color=color)
    ax.set_xticks(range(r.shape[1]), [str(j) for j in range(r.shape[1])])
    ax.set_yticks(range(r.shape[0]), [str(i) for i in range(r.shape[0])])
    ax.set_xlabel("accuracy on the classes of task j")
    ax.set_ylabel("after task t")
    fig.colorbar(im, ax=ax)
    if title:
        ax.set_title(title, fontsize=9)
    save_figure(fig, path)
    plt.close(fig)
