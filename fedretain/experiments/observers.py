"""Observers of a run: one interface for everything that follows a run besides training.

An :class:`Observer` is told of the run's life (:class:`~fedretain.experiments.run.Run` calls
the hooks, in this order):

- ``load_state(state)`` (a resumed run only): what its ``state()`` returned into the
  checkpoint (None where the checkpoint holds nothing under its name);
- ``start(done, records)``: the run starts at round ``done`` with the records so far (``0``
  and ``[]`` for a fresh run; a resumed run's rounds up to its checkpoint);
- per round: ``before_round(rnd, clients)`` (``rnd`` 0-based, the round's clients), then
  ``after_round(result)``, a :class:`RoundResult` (the server state before and after, the
  clients, learning rate and metrics, the local models where asked for, whether the round is
  recorded);
- per evaluated round: ``record(record, state)`` returns the keys it adds to the round's
  record, a row of ``metrics.jsonl`` (``record`` holds the run's own keys and what the
  observers before this one added; it is read, not changed); ``state`` is the server state
  the record evaluates (round 0's: the initial one);
- ``state()`` at each checkpoint: its JSON state (None: nothing to keep), saved under its name;
- ``finish(stopped)`` when the run ends: the keys it adds to ``summary.json`` (``stopped``:
  the run stopped early, after a diverged round);
- ``close()`` once, also when the run fails: release what it holds (a writer, a terminal).

An observer implements only what it needs: :class:`BaseObserver` does nothing in every hook.
``needs_local_models`` asks the engine to keep each round's locally trained models
(``RoundResult.local_models``). An observer is told everything it needs in these hooks; it is
built from the federation (its config, data, model and algorithm) and the results folder,
never from the run, so that it can be tested with hand-made facts.

The run's observers have names (the checkpoint keeps each state under it): the built-in ones
(the continual recorder ``continual``, ``lost_replies``, the privacy ``accountant``, the
``tracker``, the ``progress`` bar: ``BUILT_IN`` and ``SHOWN_BY`` in
:mod:`fedretain.experiments.run`, each a factory returning the observer or None) and the
config's diagnostics (``diagnostics=NAME``, registered in ``kind("diagnostic")``, built as
``factory(fed, out, **options)``), which hear of the run after the first three and before the
tracker and the progress bar, so that those see every key of a record.

The test accuracy and loss of a record come from the run's :class:`Evaluation`: the test set
(:class:`WholeTestSet`), unless an observer is an evaluation itself (it has ``evaluate`` and
``due``); the continual recorder is one, on the classes seen so far.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from fedretain.errors import DataError

if TYPE_CHECKING:
    from fedretain.core.tree import Tree
    from fedretain.privacy.mechanisms import Accountant
    from fedretain.recipe.federation import Federation

__all__ = [
    "AccountantObserver",
    "BaseObserver",
    "Evaluation",
    "LostReplies",
    "Observer",
    "RoundResult",
    "WholeTestSet",
]

Record = dict[str, Any]


@dataclass(frozen=True)
class RoundResult:
    """What an observer is told of a round that has run: ``round`` (0-based), its clients,
    learning rate and metrics, the server state ``before`` and ``after`` it, the clients'
    locally trained models (``(params, buffers)`` by client; only when an observer has
    ``needs_local_models``) and whether the run records the round (``evaluated``)."""

    round: int
    clients: list[int]
    lr: float
    metrics: dict[str, float]
    before: Tree
    after: Tree
    local_models: dict[int, tuple[Tree, Tree]] = field(default_factory=dict)
    evaluated: bool = False


class Observer(Protocol):
    """The hooks of an observer of a run (see the module docstring)."""

    needs_local_models: bool

    def load_state(self, state: dict[str, Any] | None) -> None: ...

    def start(self, done: int, records: list[Record]) -> None: ...

    def before_round(self, rnd: int, clients: list[int]) -> None: ...

    def after_round(self, result: RoundResult) -> None: ...

    def record(self, record: Record, state: Tree) -> Record: ...

    def state(self) -> dict[str, Any] | None: ...

    def finish(self, stopped: bool) -> dict[str, Any]: ...

    def close(self) -> None: ...


class BaseObserver:
    """An observer that does nothing: subclass it and override the hooks you need."""

    needs_local_models = False

    def load_state(self, state: dict[str, Any] | None) -> None:
        pass

    def start(self, done: int, records: list[Record]) -> None:
        pass

    def before_round(self, rnd: int, clients: list[int]) -> None:
        pass

    def after_round(self, result: RoundResult) -> None:
        pass

    def record(self, record: Record, state: Tree) -> Record:
        return {}

    def state(self) -> dict[str, Any] | None:
        return None

    def finish(self, stopped: bool) -> dict[str, Any]:
        return {}

    def close(self) -> None:
        pass


@runtime_checkable
class Evaluation(Protocol):
    """The test accuracy and loss of the global model after ``done`` rounds."""

    def evaluate(self, params: Tree, buffers: Tree, done: int) -> tuple[float, float]: ...

    def due(self, done: int) -> bool:
        """Whether round ``done`` needs an evaluation besides the config's ``eval_every`` and
        the last round (a continual task's end)."""
        ...


class WholeTestSet:
    """The default evaluation: the whole test set of the federation's dataset."""

    def __init__(self, fed: Federation) -> None:
        self.fed = fed

    def evaluate(self, params: Tree, buffers: Tree, done: int) -> tuple[float, float]:
        fed = self.fed
        x, y = fed.dataset.x_test, fed.dataset.y_test
        return fed.task.evaluate(params, buffers, x, y, fed.eval_batch)

    def due(self, done: int) -> bool:
        return False


def _noise_multiplier(mechanism: str, params: dict[str, Any]) -> float | None:
    """The mechanism's ``noise_multiplier`` (its default where the config sets none)."""
    from fedretain.registry import kind

    defaults = kind("privacy").params(mechanism) if mechanism in kind("privacy") else {}
    noise = {**defaults, **params}.get("noise_multiplier")
    return float(noise) if isinstance(noise, int | float) else None


class AccountantObserver(BaseObserver):
    """A run's privacy accounting (:mod:`fedretain.privacy.mechanisms`): every round goes to
    the accountant; each record gets ``epsilon`` and ``delta``, the summary ``privacy``
    (the mechanism and the last ε, δ)."""

    def __init__(self, accountant: Accountant, mechanism: str, noise: float | None = None) -> None:
        self.accountant, self.mechanism, self.noise = accountant, mechanism, noise

    @classmethod
    def of(cls, fed: Federation) -> AccountantObserver | None:
        """The accountant of the federation's privacy mechanism (None without one)."""
        if fed.privacy is None:
            return None
        cfg = fed.config
        return cls(
            fed.privacy.accountant(fed.clients, fed.algorithm, cfg.clients_per_round),
            cfg.privacy,
            _noise_multiplier(cfg.privacy, cfg.privacy_params),
        )

    def start(self, done: int, records: list[Record]) -> None:
        if self.noise == 0:  # clipping only: the accountant's ε is infinite
            print(
                "warning: privacy.noise_multiplier=0: no noise, so ε is infinite "
                "(no privacy guarantee)",
                file=sys.stderr,
            )

    def after_round(self, result: RoundResult) -> None:
        self.accountant.after_round(result.round, result.clients, result.lr)

    def record(self, record: Record, state: Tree) -> Record:
        return self.accountant.metrics()

    def state(self) -> dict[str, Any] | None:
        return self.accountant.state()

    def load_state(self, state: dict[str, Any] | None) -> None:
        if state is None:
            raise DataError(
                "this checkpoint has no privacy accounting (written without privacy=?); "
                "start the run again"
            )
        self.accountant.load_state(state)

    def finish(self, stopped: bool) -> dict[str, Any]:
        return {"privacy": {"mechanism": self.mechanism, **self.accountant.metrics()}}


class LostReplies(BaseObserver):
    """On an engine that can lose replies (``engine.remote``, Flower): each record's
    ``lost_replies``, the replies lost since the previous record."""

    def __init__(self) -> None:
        self.lost = 0.0

    def after_round(self, result: RoundResult) -> None:
        self.lost += result.metrics.get("lost_replies", 0.0)

    def record(self, record: Record, state: Tree) -> Record:
        lost, self.lost = self.lost, 0.0
        return {"lost_replies": int(lost)}

    def state(self) -> dict[str, Any] | None:
        return {"lost": self.lost}  # since the last record: a checkpoint between records

    def load_state(self, state: dict[str, Any] | None) -> None:
        self.lost = (state or {}).get("lost", 0.0)  # none: a checkpoint written before
