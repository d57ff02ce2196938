"""Task sequences for class-incremental federated learning, and the rule that a client sees
only its current task's data.

The setting of FedCIL: Qi, Zhao & Li, *Better Generative Replay for Continual Federated
Learning*, ICLR 2023, arXiv:2302.13001, Appendix A (data) and Appendix D (desiderata):

- Every client learns ``tasks`` tasks of ``classes_per_task`` classes. It draws its
  ``tasks * classes_per_task`` classes at random without replacement and takes them in draw
  order, ``classes_per_task`` at a time, so a class never appears twice in one client's
  sequence (desideratum 1); different clients may draw the same class (desideratum 2): the
  paper's 5 clients overlap heavily on MNIST and hardly at all on EMNIST-Balanced.
- "We split instances of each class into non-overlapped parts": the training samples of a
  class are divided at random, disjointly and as evenly as possible (sizes differ by at most
  one), among the clients that drew it, whichever task each of them learns it in. Every
  sample goes to at most one (client, task); the samples of classes nobody drew are unused.
- A client keeps no data of past tasks (desideratum 3): :class:`TaskData` walks the
  federation forward through the tasks and hands out only the current task's samples;
  :class:`TaskView` is a snapshot of one task that holds nothing else.
- After task ``t`` the global model is evaluated on the test samples of
  :func:`seen_classes` ``(plan, t)``, every class any client has learnt so far
  (desideratum 5); :func:`class_indices` selects them.

The classic class-incremental benchmark instead fixes one class order for every client
(:func:`fixed_order_tasks`, e.g. ``[[0, 1], [2, 3], ...]``): the tasks are disjoint, and each
class's samples are split as above over all the clients. With per-client draws the tasks
pooled over clients overlap (a class of one client's task 0 is another's task 2), so a later
task retrains old classes elsewhere: forgetting measured there is understated and can be
negative.

:func:`class_incremental_tasks` and :func:`fixed_order_tasks` are pure functions of their
arguments built on ``np.random.default_rng(seed)``, like the partitions of
:mod:`fedretain.data.partition`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from numbers import Integral

import numpy as np

from fedretain.errors import ConfigError, DataError

__all__ = [
    "TaskData",
    "TaskPlan",
    "TaskView",
    "check_order",
    "class_incremental_tasks",
    "class_indices",
    "describe",
    "fixed_order_tasks",
    "seen_classes",
    "task_classes",
]

Classes = tuple[int, ...]


# --------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True, eq=False)
class TaskPlan:
    """Which classes and training samples every client has in every task (server side).

    ``classes[cid][t]``: the sorted classes of client ``cid``'s task ``t``;
    ``indices[cid][t]``: the sorted ``int64`` indices (into the training set) of its samples,
    read-only arrays. ``num_classes`` is the dataset's number of classes.
    """

    classes: tuple[tuple[Classes, ...], ...]
    indices: tuple[tuple[np.ndarray, ...], ...]
    num_classes: int

    def __post_init__(self) -> None:
        if not self.classes or len(self.classes) != len(self.indices):
            raise ConfigError(
                f"a TaskPlan needs the classes and indices of at least one client, got "
                f"{len(self.classes)} class lists and {len(self.indices)} index lists"
            )
        tasks = len(self.classes[0])
        for cls, idx in zip(self.classes, self.indices):
            if len(cls) != tasks or len(idx) != tasks or tasks == 0:
                raise ConfigError(
                    "every client of a TaskPlan must have the same number (>= 1) of tasks, "
                    "with one class tuple and one index array per task"
                )
        for u, per in enumerate(self.classes):
            seen: dict[int, int] = {}
            for t, cls in enumerate(per):
                if not cls:
                    raise ConfigError(
                        f"client {u}'s task {t} of the TaskPlan is empty; every task needs at "
                        "least one class"
                    )
                for c in cls:
                    if not 0 <= c < self.num_classes:
                        raise ConfigError(
                            f"class {c} of client {u}'s task {t} is out of range for "
                            f"num_classes={self.num_classes}; use class ids "
                            f"0..{self.num_classes - 1}"
                        )
                    if c in seen:
                        where = f"task {t}" if seen[c] == t else f"tasks {seen[c]} and {t}"
                        raise ConfigError(
                            f"class {c} appears twice in client {u}'s {where} of the TaskPlan; a "
                            "client learns each class once"
                        )
                    seen[c] = t

    @property
    def num_clients(self) -> int:
        return len(self.classes)

    @property
    def num_tasks(self) -> int:
        return len(self.classes[0])

    @property
    def classes_per_task(self) -> int:
        return len(self.classes[0][0])

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TaskPlan):
            return NotImplemented
        return (
            self.num_classes == other.num_classes
            and self.classes == other.classes
            and all(
                np.array_equal(a, b)
                for mine, theirs in zip(self.indices, other.indices)
                for a, b in zip(mine, theirs)
            )
        )

    def __hash__(self) -> int:
        return hash((self.num_classes, self.classes))


def _check_int(key: str, value: object, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < lo:
        raise ConfigError(f"{key} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _labels(labels: np.ndarray, num_classes: int) -> np.ndarray:
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise DataError(f"labels must be a 1-D array, got shape {arr.shape}")
    if arr.size == 0:
        raise DataError("labels is empty; class-incremental tasks need training samples")
    if not np.issubdtype(arr.dtype, np.integer):
        raise DataError(f"labels must be integer class ids, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False)
    lo, hi = int(arr.min()), int(arr.max())
    if lo < 0 or hi >= num_classes:
        bad = lo if lo < 0 else hi
        raise DataError(
            f"label {bad} is out of range for num_classes={num_classes}; labels must be "
            f"class ids 0..{num_classes - 1}"
        )
    return arr


def _read_only(a: np.ndarray) -> np.ndarray:
    a.setflags(write=False)
    return a


def class_incremental_tasks(
    labels: np.ndarray,
    num_classes: int,
    clients: int = 5,
    tasks: int = 5,
    classes_per_task: int = 2,
    seed: int = 0,
) -> TaskPlan:
    """FedCIL's task sequences (App. A): per client, ``tasks`` tasks of ``classes_per_task``
    classes drawn without replacement, each class's samples split evenly over its clients.

    Classes are drawn among those with at least one sample in ``labels``. Defaults: the
    paper's 5 clients, 5 tasks of 2 classes. Deterministic in ``seed``. Raises
    :class:`ConfigError` for bad arguments or ``tasks * classes_per_task > num_classes``, and
    :class:`DataError` when the labels cannot satisfy the plan (too few classes present, a
    class with fewer samples than clients that drew it).
    """
    num_classes = _check_int("num_classes", num_classes, 1)
    clients = _check_int("clients", clients, 1)
    tasks = _check_int("tasks", tasks, 1)
    k = _check_int("classes_per_task", classes_per_task, 1)
    seed = _check_int("seed", seed, 0)
    per_client = tasks * k
    if per_client > num_classes:
        raise ConfigError(
            f"tasks * classes_per_task = {tasks} * {k} = {per_client} classes per client, but "
            f"the dataset has {num_classes} classes and a client never learns a class twice; "
            f"use tasks * classes_per_task <= {num_classes}"
        )
    labels = _labels(labels, num_classes)
    present = np.unique(labels)
    if per_client > present.size:
        raise DataError(
            f"each client needs {per_client} distinct classes (tasks * classes_per_task) but "
            f"only {present.size} of the {num_classes} classes have training samples; use "
            f"tasks * classes_per_task <= {present.size}"
        )
    rng = np.random.default_rng(seed)
    # every client: a uniformly random ordered draw of per_client classes, cut into tasks
    order = np.argsort(rng.random((clients, present.size)), axis=1, kind="stable")
    drawn = np.sort(present[order[:, :per_client]].reshape(clients, tasks, k), axis=2)
    return _split(labels, num_classes, drawn, rng)


def _split(
    labels: np.ndarray, num_classes: int, drawn: np.ndarray, rng: np.random.Generator
) -> TaskPlan:
    """The plan of ``drawn[client, task]`` (sorted classes): each class's samples split at
    random, as evenly as possible, over the (client, task) slots that hold it."""
    clients, tasks, k = drawn.shape
    # the holders of each class, (client, task) slots numbered client * tasks + task, in a
    # random order within each class (who gets the larger parts of an uneven split)
    cls_flat = drawn.reshape(-1)
    slot_flat = np.repeat(np.arange(clients * tasks), k)
    by_class = np.lexsort((rng.random(cls_flat.size), cls_flat))
    holder_slot = slot_flat[by_class]
    holders = np.bincount(cls_flat, minlength=num_classes)
    counts = np.bincount(labels, minlength=num_classes)
    short = np.flatnonzero(holders > counts)
    if short.size:
        c = int(short[0])
        raise DataError(
            f"class {c} has {counts[c]} training samples but {holders[c]} clients learn it and "
            "each needs at least one; use fewer clients or a dataset with more samples"
        )

    # samples grouped by class in random order; the i-th part of np.array_split of a class
    # over its holders goes to its i-th holder
    n = labels.size
    perm = rng.permutation(n)
    samples = perm[np.argsort(labels[perm], kind="stable")]
    cls = labels[samples]
    pos = np.arange(n) - (np.cumsum(counts) - counts)[cls]
    h = holders[cls]
    held = h > 0
    q, r = np.divmod(counts[cls], np.maximum(h, 1))
    big = r * (q + 1)
    part = np.where(pos < big, pos // (q + 1), r + (pos - big) // np.maximum(q, 1))
    first_holder = np.cumsum(holders) - holders
    owner = np.full(n, -1, dtype=np.int64)
    owner[samples[held]] = holder_slot[first_holder[cls[held]] + part[held]]

    sel = np.flatnonzero(owner >= 0)
    grouped = sel[np.argsort(owner[sel], kind="stable")].astype(np.int64, copy=False)
    sizes = np.bincount(owner[sel], minlength=clients * tasks)
    parts = [_read_only(p.copy()) for p in np.split(grouped, np.cumsum(sizes)[:-1])]
    return TaskPlan(
        classes=tuple(
            tuple(tuple(int(c) for c in drawn[u, t]) for t in range(tasks)) for u in range(clients)
        ),
        indices=tuple(tuple(parts[u * tasks : (u + 1) * tasks]) for u in range(clients)),
        num_classes=num_classes,
    )


def check_order(
    order: object, num_classes: int | None = None, key: str = "order"
) -> tuple[Classes, ...]:
    """``order`` (a list of tasks, each a list of class ids) as sorted class tuples, after
    checking it: at least one task, every task non-empty and of the same size, integer class
    ids in ``0..num_classes - 1`` (when given), no class in two tasks. ``key`` names it in the
    one-line :class:`ConfigError`."""
    example = "e.g. [[0, 1], [2, 3]]"
    if isinstance(order, str) or not isinstance(order, Sequence) or not order:
        raise ConfigError(
            f"{key} must be a non-empty list of tasks, each a list of class ids, {example}; "
            f"got {order!r}"
        )
    where: dict[int, int] = {}
    for t, task in enumerate(order):
        if isinstance(task, str) or not isinstance(task, Sequence):
            raise ConfigError(
                f"task {t} of {key} is {task!r}, not a list of class ids; write one list per "
                f"task, {example}"
            )
        if not task:
            raise ConfigError(f"task {t} of {key} is empty; give every task at least one class")
        for c in task:
            if isinstance(c, bool) or not isinstance(c, Integral):
                raise ConfigError(
                    f"{key} has {c!r} in task {t}, which is not a class id; write integers, "
                    f"{example}"
                )
            if c < 0:
                raise ConfigError(f"class {c} in task {t} of {key} is negative; use ids >= 0")
            if num_classes is not None and c >= num_classes:
                raise ConfigError(
                    f"class {c} in task {t} of {key} is out of range for the dataset's "
                    f"{num_classes} classes; use class ids 0..{num_classes - 1}"
                )
            if int(c) in where:
                first = where[int(c)]
                tasks = f"task {t}" if first == t else f"tasks {first} and {t}"
                raise ConfigError(
                    f"class {c} appears twice in {key} ({tasks}); put each class in one task once"
                )
            where[int(c)] = t
    sizes = [len(task) for task in order]
    if len(set(sizes)) > 1:
        raise ConfigError(
            f"the tasks of {key} have {', '.join(map(str, sizes))} classes; give every task "
            "the same number of classes"
        )
    return tuple(tuple(sorted(int(c) for c in task)) for task in order)


def fixed_order_tasks(
    labels: np.ndarray,
    num_classes: int,
    order: Sequence[Sequence[int]],
    clients: int = 5,
    seed: int = 0,
) -> TaskPlan:
    """The same task sequence ``order`` for every client (``order[t]``: the classes of task
    ``t``, e.g. ``[[0, 1], [2, 3]]``), each class's training samples split at random, evenly
    and disjointly, over the clients: the tasks are disjoint, the classic class-incremental
    benchmark. Deterministic in ``seed``. Raises :class:`ConfigError` for a bad ``order``
    (:func:`check_order`) and :class:`DataError` for a class with fewer samples than clients.
    """
    num_classes = _check_int("num_classes", num_classes, 1)
    clients = _check_int("clients", clients, 1)
    seed = _check_int("seed", seed, 0)
    tasks = check_order(order, num_classes)
    labels = _labels(labels, num_classes)
    empty = sorted(set(sum(tasks, ())) - set(np.unique(labels).tolist()))
    if empty:
        raise DataError(
            f"class {empty[0]} of the task order has no training samples; leave it out of the order"
        )
    drawn = np.broadcast_to(np.array(tasks, dtype=np.int64), (clients, *np.shape(tasks)))
    return _split(labels, num_classes, drawn, np.random.default_rng(seed))


# --------------------------------------------------------------------------------------------
# questions about a plan


def _check_task(plan: TaskPlan, task: object) -> int:
    if isinstance(task, bool) or not isinstance(task, Integral) or not 0 <= task < plan.num_tasks:
        raise ConfigError(
            f"task {task!r} does not exist; the plan has {plan.num_tasks} tasks "
            f"(0..{plan.num_tasks - 1})"
        )
    return int(task)


def seen_classes(plan: TaskPlan, task: int) -> Classes:
    """The sorted classes any client has learnt in tasks ``0..task``: what the global model must
    classify after ``task``."""
    task = _check_task(plan, task)
    return tuple(sorted({c for per in plan.classes for cls in per[: task + 1] for c in cls}))


def task_classes(plan: TaskPlan, task: int) -> Classes:
    """The sorted union over clients of the classes of task ``task``."""
    task = _check_task(plan, task)
    return tuple(sorted({c for per in plan.classes for c in per[task]}))


def class_indices(labels: np.ndarray, classes: Sequence[int]) -> np.ndarray:
    """The sorted ``int64`` indices of the samples whose label is in ``classes`` (e.g. the
    test samples of :func:`seen_classes`)."""
    arr = np.asarray(labels)
    if arr.ndim != 1:
        raise DataError(f"labels must be a 1-D array, got shape {arr.shape}")
    return np.flatnonzero(np.isin(arr, np.asarray(list(classes), dtype=np.int64))).astype(np.int64)


def describe(plan: TaskPlan, class_names: Sequence[str] | None = None) -> str:
    """A table of the plan for a command line: one row per client, one column per task, each
    cell the task's classes (names when given) and its number of samples."""
    if class_names is not None and len(class_names) < plan.num_classes:
        raise ConfigError(
            f"describe got {len(class_names)} class names for {plan.num_classes} classes; "
            "pass one name per class"
        )

    def name(c: int) -> str:
        return str(class_names[c]) if class_names is not None else str(c)

    sizes = np.array([[p.size for p in per] for per in plan.indices], dtype=np.int64)
    drawn = {c for per in plan.classes for cls in per for c in cls}
    seen = [len(seen_classes(plan, t)) for t in range(plan.num_tasks)]
    lines = [
        f"{plan.num_clients} clients x {plan.num_tasks} tasks of {plan.classes_per_task} "
        f"classes; {len(drawn)} of {plan.num_classes} classes used; {int(sizes.sum())} "
        f"samples, {sizes.min()}..{sizes.max()} per client and task",
        "classes seen after each task: " + " ".join(str(s) for s in seen),
    ]
    cells = [
        [f"{','.join(name(c) for c in cls)} ({sizes[u, t]})" for t, cls in enumerate(per)]
        for u, per in enumerate(plan.classes)
    ]
    heads = [f"task {t}" for t in range(plan.num_tasks)]
    widths = [max(len(heads[t]), *(len(row[t]) for row in cells)) for t in range(plan.num_tasks)]
    label_w = len(f"client {plan.num_clients - 1}")
    lines.append(" " * label_w + "  " + "  ".join(h.ljust(w) for h, w in zip(heads, widths)))
    for u, row in enumerate(cells):
        body = "  ".join(cell.ljust(w) for cell, w in zip(row, widths))
        lines.append(f"{f'client {u}':<{label_w}}  {body}".rstrip())
    return "\n".join(line.rstrip() for line in lines)


# --------------------------------------------------------------------------------------------
# the data rule: a client sees only its current task


def _check_client(num_clients: int, cid: object) -> int:
    if isinstance(cid, bool) or not isinstance(cid, Integral) or not 0 <= cid < num_clients:
        raise ConfigError(
            f"client {cid!r} does not exist; there are {num_clients} clients (0..{num_clients - 1})"
        )
    return int(cid)


class TaskView:
    """One task's data and nothing else: every client's sample indices and classes of task
    :attr:`task`. It holds no reference to the plan, so no code handed a view can reach
    another task's samples. Build with :meth:`TaskData.view`."""

    __slots__ = ("_classes", "_parts", "_task")

    def __init__(self, task: int, parts: Sequence[np.ndarray], classes: Sequence[Classes]):
        self._task = int(task)
        self._parts = tuple(parts)
        self._classes = tuple(classes)

    @property
    def task(self) -> int:
        return self._task

    @property
    def num_clients(self) -> int:
        return len(self._parts)

    def current(self, cid: int) -> np.ndarray:
        """Client ``cid``'s training-sample indices of this task (sorted; a fresh copy)."""
        return self._parts[_check_client(self.num_clients, cid)].copy()

    def classes(self, cid: int) -> Classes:
        """Client ``cid``'s classes in this task."""
        return self._classes[_check_client(self.num_clients, cid)]

    def parts(self) -> list[np.ndarray]:
        """Every client's indices of this task: the ``parts`` of a ``Clients`` for it."""
        return [p.copy() for p in self._parts]


class TaskData:
    """The federation's data, one task at a time: :meth:`current` gives a client's samples of
    the current task only, and the task only moves forward (:meth:`advance_to`), since a
    client keeps no data of past tasks. The :class:`TaskPlan` stays with the server; there is
    no accessor for other tasks' samples. Hand clients a :meth:`view`, which cannot advance.

    For task ``t``, ``Clients(dataset, task_data.parts_for(t), local, seed)`` is the
    federation of that task.
    """

    __slots__ = ("_plan", "_task")

    def __init__(self, plan: TaskPlan, task: int = 0) -> None:
        if not isinstance(plan, TaskPlan):
            raise ConfigError(f"TaskData needs a TaskPlan, got {type(plan).__name__}")
        self._plan = plan
        self._task = _check_task(plan, task)

    @property
    def task(self) -> int:
        """The current task."""
        return self._task

    @property
    def num_tasks(self) -> int:
        return self._plan.num_tasks

    @property
    def num_clients(self) -> int:
        return self._plan.num_clients

    def advance_to(self, task: int) -> None:
        """Move to ``task`` (the current one or a later one); going back raises ConfigError."""
        task = _check_task(self._plan, task)
        if task < self._task:
            raise ConfigError(
                f"cannot go back from task {self._task} to task {task}: clients keep no data "
                "of past tasks; build a new TaskData from the plan to start over"
            )
        self._task = task

    def current(self, cid: int) -> np.ndarray:
        """Client ``cid``'s training-sample indices of the current task (sorted; a fresh copy,
        so nothing a client does to it reaches the plan)."""
        return self._plan.indices[_check_client(self.num_clients, cid)][self._task].copy()

    def classes(self, cid: int) -> Classes:
        """Client ``cid``'s classes in the current task."""
        return self._plan.classes[_check_client(self.num_clients, cid)][self._task]

    def parts(self) -> list[np.ndarray]:
        """Every client's indices of the current task."""
        return [self.current(cid) for cid in range(self.num_clients)]

    def parts_for(self, task: int) -> list[np.ndarray]:
        """:meth:`advance_to` ``task``, then :meth:`parts`: the ``parts`` of the ``Clients`` of
        that task."""
        self.advance_to(task)
        return self.parts()

    def view(self) -> TaskView:
        """A snapshot of the current task for code that must not see any other task."""
        return TaskView(
            self._task,
            [_read_only(p) for p in self.parts()],
            [self.classes(cid) for cid in range(self.num_clients)],
        )
