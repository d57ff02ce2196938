"""Continual scenarios: a federation whose clients move through a sequence of tasks.

A scenario is a config component (``scenario=class_incremental scenario.tasks=5
scenario.classes_per_task=2 scenario.rounds_per_task=40``), not a second runner: the run's
loop is the same, and at every task boundary the federation's clients are switched to the next
task's parts (:class:`ContinualData`), the client-state store persisting across the switch;
the global model is evaluated on the test data of every class seen by any client so far.

``class_incremental`` is FedCIL's setting (Qi, Zhao & Li, *Better Generative Replay for
Continual Federated Learning*, ICLR 2023, arXiv:2302.13001, §5.3 and App. A): every client
learns ``tasks`` tasks of ``classes_per_task`` new classes
(:func:`~fedretain.continual.tasks.class_incremental_tasks`), ``rounds_per_task`` rounds each,
so a run has ``rounds = tasks * rounds_per_task`` rounds. The paper's defaults: 5 clients, all
taking part every round (``clients=5 clients_per_round=5``), 5 tasks of 2 classes, 40 rounds
per task, 400 local iterations per round (``local_steps=400``), batch 32, Adam at 1e-4. Each
client draws its own classes, so the tasks pooled over clients overlap.

``scenario.order=[[0,1],[2,3],[4,5]]`` instead gives every client the same disjoint tasks in
that order (:func:`~fedretain.continual.tasks.fixed_order_tasks`), the classic
class-incremental benchmark; ``tasks`` and ``classes_per_task`` then follow the order.

The task of round ``r`` (0-based) is ``r // rounds_per_task``: the server and every client
compute it from the round alone (:meth:`ClassIncremental.task_of`), so an algorithm that keeps
something "from the client's last task" detects a boundary in ``local_init`` from
``ctx.info.round`` and its client state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from fedretain.continual.tasks import (
    TaskData,
    TaskPlan,
    check_order,
    class_incremental_tasks,
    describe,
    fixed_order_tasks,
    seen_classes,
    task_classes,
)
from fedretain.errors import ConfigError
from fedretain.registry import Registry

__all__ = [
    "SCENARIOS",
    "ClassIncremental",
    "ContinualData",
    "class_incremental",
    "scenario_of",
]


@dataclass(frozen=True)
class ClassIncremental:
    """The settings of a class-incremental scenario (see the module docstring); ``order``:
    every client's task sequence (sorted class tuples), None for per-client draws."""

    tasks: int = 5
    classes_per_task: int = 2
    rounds_per_task: int = 40
    order: tuple[tuple[int, ...], ...] | None = None

    @property
    def num_rounds(self) -> int:
        """``tasks * rounds_per_task``: the rounds of the whole run."""
        return self.tasks * self.rounds_per_task

    def task_of(self, rnd: int) -> int:
        """The task that round ``rnd`` (0-based) trains."""
        return min(int(rnd) // self.rounds_per_task, self.tasks - 1)

    def task_end(self, done: int) -> bool:
        """Whether ``done`` completed rounds end a task."""
        return done > 0 and done % self.rounds_per_task == 0

    def plan(self, labels: np.ndarray, num_classes: int, clients: int, seed: int) -> TaskPlan:
        """The task plan of ``clients`` clients over the training labels."""
        if self.order is not None:
            check_order(self.order, num_classes, "scenario.order")
            return fixed_order_tasks(labels, num_classes, self.order, clients, seed)
        return class_incremental_tasks(
            labels, num_classes, clients, self.tasks, self.classes_per_task, seed
        )


def class_incremental(
    tasks: int = 5,
    classes_per_task: int = 2,
    rounds_per_task: int = 40,
    order: list | None = None,
) -> ClassIncremental:
    """FedCIL's class-incremental scenario: ``tasks`` tasks of ``classes_per_task`` classes per
    client, ``rounds_per_task`` rounds each; with ``order`` (e.g. ``[[0, 1], [2, 3]]``) every
    client learns those tasks in that order, and ``tasks``, ``classes_per_task`` follow it.

    :param tasks: tasks in each client's sequence
    :param classes_per_task: new classes each task brings
    :param rounds_per_task: rounds spent on each task (rounds = tasks x rounds_per_task)
    :param order: the tasks' classes in order for every client, e.g. [[0, 1], [2, 3]] (none:
        each client draws its classes)
    """
    for key, value in (
        ("tasks", tasks),
        ("classes_per_task", classes_per_task),
        ("rounds_per_task", rounds_per_task),
    ):
        if value < 1:
            raise ValueError(f"{key} must be >= 1, got {value}")
    if order is None:
        return ClassIncremental(tasks, classes_per_task, rounds_per_task)
    fixed = check_order(order, key="scenario.order")
    return ClassIncremental(len(fixed), len(fixed[0]), rounds_per_task, fixed)


class ContinualData:
    """A scenario applied to a dataset (server side): the task plan, the
    :class:`~fedretain.continual.tasks.TaskData` that hands out the current task's parts only,
    and the test classes of each task."""

    def __init__(
        self,
        scenario: ClassIncremental,
        labels: np.ndarray,
        num_classes: int,
        clients: int,
        seed: int,
    ) -> None:
        self.scenario = scenario
        self.plan = scenario.plan(labels, num_classes, clients, seed)
        self.data = TaskData(self.plan)

    @property
    def task(self) -> int:
        """The current task of the clients' data."""
        return self.data.task

    @property
    def rounds_per_task(self) -> int:
        return self.scenario.rounds_per_task

    def clients_for_round(self, clients: Any, rnd: int) -> Any:
        """``clients`` (:class:`~fedretain.core.client.Clients`) holding round ``rnd``'s
        task's parts."""
        return replace(clients, parts=self.parts_for_round(rnd))

    def parts_for_round(self, rnd: int) -> list[np.ndarray]:
        """The clients' parts of round ``rnd``'s task (moving the data forward to it). A round
        of an earlier task starts the walk over: a new run of the same federation (a warm
        Flower ClientApp process serves the runs of one configuration one after another)."""
        task = self.scenario.task_of(rnd)
        if task < self.data.task:
            self.data = TaskData(self.plan)
        return self.data.parts_for(task)

    def seen_classes(self, task: int) -> tuple[int, ...]:
        """Every class any client has learnt in tasks ``0..task``."""
        return seen_classes(self.plan, task)

    def task_classes(self, task: int) -> tuple[int, ...]:
        """The union over clients of task ``task``'s classes."""
        return task_classes(self.plan, task)

    def describe(self, class_names: list[str] | None = None) -> str:
        """The plan as a table (``fedretain partition``), with the rounds of each task."""
        s = self.scenario
        head = (
            f"class_incremental: {s.tasks} tasks x {s.rounds_per_task} rounds = "
            f"{s.num_rounds} rounds, "
            + ("one class order for every client" if s.order else "classes drawn per client")
        )
        return head + "\n" + describe(self.plan, class_names)


SCENARIOS = Registry("scenario")


def scenario_of(name: str, params: dict[str, Any]) -> ClassIncremental | None:
    """Scenario ``name`` with its config parameters ``params`` (``scenario.*``); None for an
    empty name (no scenario)."""
    if not name:
        return None
    return SCENARIOS.build(name, params, prefix="scenario")


def _check(cfg: Any) -> None:
    """What a class-incremental run needs from the rest of the config. With ``scenario.order``
    it sets ``scenario.tasks`` and ``scenario.classes_per_task`` from the order, so that the
    resolved config (``config.toml``) states them."""
    s = scenario_of(cfg.scenario, cfg.scenario_params)
    assert s is not None
    given = cfg.scenario_params
    if s.order is not None:
        for key, value in (("tasks", s.tasks), ("classes_per_task", s.classes_per_task)):
            if given.setdefault(key, value) != value:
                raise ConfigError(
                    f"scenario.order has {value} {key.replace('_', ' ')} but scenario.{key}="
                    f"{given[key]}; set scenario.{key}={value} or leave it out (the order sets it)"
                )
    if cfg.rounds != s.num_rounds:
        raise ConfigError(
            f"scenario {cfg.scenario} runs scenario.tasks * scenario.rounds_per_task = "
            f"{s.tasks} * {s.rounds_per_task} = {s.num_rounds} rounds, but rounds={cfg.rounds}; "
            f"set rounds={s.num_rounds}"
        )
    if cfg.partition != "iid" or cfg.partition_params:
        raise ConfigError(
            f"scenario {cfg.scenario} splits the data by its task plan, so partition="
            f"{cfg.partition} does not apply; leave partition unset"
        )
    if cfg.val_fraction:
        raise ConfigError(
            f"scenario {cfg.scenario} takes no validation split (val_fraction="
            f"{cfg.val_fraction}); set val_fraction=0"
        )


SCENARIOS.add(
    "class_incremental",
    class_incremental,
    "FedCIL's class-incremental tasks: every client learns tasks x classes_per_task new "
    "classes, rounds_per_task rounds per task (Qi 2023)",
    check=_check,
)
