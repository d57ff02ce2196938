"""Class-incremental task plans (FedCIL App. A) and the rule that a client sees only its
current task's samples."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedretain.continual.tasks import (
    TaskData,
    TaskPlan,
    TaskView,
    check_order,
    class_incremental_tasks,
    class_indices,
    describe,
    fixed_order_tasks,
    seen_classes,
    task_classes,
)
from fedretain.core.client import Clients, LocalSpec
from fedretain.data.base import Dataset
from fedretain.errors import ConfigError, DataError


def balanced_labels(num_classes: int = 10, per_class: int = 100, seed: int = 0) -> np.ndarray:
    labels = np.repeat(np.arange(num_classes), per_class)
    return np.random.default_rng(seed).permutation(labels)


def check_plan(plan: TaskPlan, labels: np.ndarray, clients: int, tasks: int, k: int) -> None:
    """Every invariant of App. A that holds for any valid plan."""
    assert plan.num_clients == clients and plan.num_tasks == tasks
    assert plan.classes_per_task == k
    for u in range(clients):
        drawn = [c for cls in plan.classes[u] for c in cls]
        assert len(drawn) == tasks * k
        assert len(set(drawn)) == tasks * k  # a class never repeats within a client
        for t in range(tasks):
            cls, idx = plan.classes[u][t], plan.indices[u][t]
            assert list(cls) == sorted(cls)
            assert idx.dtype == np.int64 and idx.ndim == 1
            assert np.all(np.diff(idx) > 0)
            assert not idx.flags.writeable
            # the task's samples are exactly of the task's classes, each class present
            assert set(np.unique(labels[idx]).tolist()) == set(cls)
    flat = np.concatenate([p for per in plan.indices for p in per])
    assert np.unique(flat).size == flat.size  # every sample used at most once
    drawn_all = {c for per in plan.classes for cls in per for c in cls}
    # all samples of drawn classes are used, none of the others
    assert np.array_equal(np.sort(flat), np.flatnonzero(np.isin(labels, list(drawn_all))))
    # each class split as evenly as possible among its holders
    for c in drawn_all:
        sizes = [
            int(np.count_nonzero(labels[plan.indices[u][t]] == c))
            for u in range(clients)
            for t in range(tasks)
            if c in plan.classes[u][t]
        ]
        assert max(sizes) - min(sizes) <= 1


def test_paper_setting_mnist_like():
    labels = balanced_labels(10, 100)
    plan = class_incremental_tasks(labels, 10)  # 5 clients, 5 tasks of 2 classes
    check_plan(plan, labels, 5, 5, 2)
    # with 10 classes every client learns all of them, so every class has 5 holders of 20
    for u in range(5):
        assert sorted(c for cls in plan.classes[u] for c in cls) == list(range(10))
    sizes = [p.size for per in plan.indices for p in per]
    assert sizes == [40] * 25


def test_per_client_draw_is_unchanged():
    # pinned: the default plans (and so existing runs' numbers) stay what they were
    plan = class_incremental_tasks(balanced_labels(10, 100), 10, 3, 2, 2, seed=5)
    assert plan.classes == (((7, 8), (3, 4)), ((1, 9), (2, 6)), ((3, 9), (1, 6)))
    heads = [[a[:4].tolist() for a in per] for per in plan.indices]
    assert heads == [
        [[4, 5, 7, 22], [0, 13, 15, 19]],
        [[3, 20, 21, 31], [1, 2, 9, 17]],
        [[6, 14, 41, 44], [10, 11, 24, 29]],
    ]


def test_fixed_order_gives_every_client_the_same_disjoint_tasks():
    labels = balanced_labels(10, 100)
    order = [[9, 8, 7], [6, 5, 4], [3, 2, 1]]
    plan = fixed_order_tasks(labels, 10, order, clients=5, seed=0)
    check_plan(plan, labels, 5, 3, 3)
    expected = ((7, 8, 9), (4, 5, 6), (1, 2, 3))
    assert all(per == expected for per in plan.classes)
    assert [task_classes(plan, t) for t in range(3)] == list(expected)
    assert seen_classes(plan, 1) == (4, 5, 6, 7, 8, 9)
    assert [p.size for per in plan.indices for p in per] == [60] * 15  # 3 x 100 / 5 clients
    assert not np.isin(0, labels[np.concatenate([p for per in plan.indices for p in per])])
    assert plan == fixed_order_tasks(labels, 10, order, clients=5, seed=0)
    assert plan != fixed_order_tasks(labels, 10, order, clients=5, seed=1)


@pytest.mark.parametrize(
    ("order", "words"),
    [
        ([[1, 2], [2, 3]], "class 2 appears twice in order (tasks 0 and 1)"),
        ([[1, 1]], "class 1 appears twice in order (task 0)"),
        ([[1, 10]], "class 10 in task 0 of order is out of range for the dataset's 10 classes"),
        ([[-1]], "class -1 in task 0 of order is negative"),
        ([[1], []], "task 1 of order is empty"),
        ([[1, "2"]], "order has '2' in task 0, which is not a class id"),
        ([[1.0]], "order has 1.0 in task 0, which is not a class id"),
        ([[True]], "order has True in task 0, which is not a class id"),
        ([1, 2], "task 0 of order is 1, not a list of class ids"),
        ("1,2", "order must be a non-empty list of tasks"),
        ([], "order must be a non-empty list of tasks"),
        ([[1, 2], [3]], "the tasks of order have 2, 1 classes"),
    ],
)
def test_bad_class_orders(order, words):
    with pytest.raises(ConfigError) as e:
        fixed_order_tasks(balanced_labels(10, 5), 10, order, clients=2)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_class_order_is_checked_without_a_dataset_and_names_its_key():
    assert check_order([[3, 1], [0, 2]]) == ((1, 3), (0, 2))
    assert check_order([[99]]) == ((99,),)  # the range is checked once the dataset is known
    with pytest.raises(ConfigError, match=r"twice in scenario\.order"):
        check_order([[1], [1]], key="scenario.order")


def test_fixed_order_needs_samples_of_every_class():
    with pytest.raises(DataError, match="class 3 of the task order has no training samples"):
        fixed_order_tasks(np.repeat([0, 1, 2], 5), 4, [[0, 1], [2, 3]], clients=1)
    with pytest.raises(DataError, match="has 2 training samples but 3 clients learn it"):
        fixed_order_tasks(np.repeat([0, 1], 2), 2, [[0], [1]], clients=3)


@pytest.mark.parametrize(
    ("classes", "words"),
    [
        ((((0, 1), (1, 2)),), "class 1 appears twice in client 0's tasks 0 and 1"),
        ((((0, 0), (1, 2)),), "class 0 appears twice in client 0's task 0"),
        ((((0, 1), (2, 6)),), "class 6 of client 0's task 1 is out of range for num_classes=6"),
        ((((0, 1), ()),), "client 0's task 1 of the TaskPlan is empty"),
    ],
)
def test_task_plan_refuses_impossible_classes(classes, words):
    empty = np.array([], dtype=np.int64)
    with pytest.raises(ConfigError) as e:
        TaskPlan(classes=classes, indices=((empty, empty),), num_classes=6)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_deterministic_in_seed():
    labels = balanced_labels(26, 30)
    a = class_incremental_tasks(labels, 26, clients=4, tasks=3, classes_per_task=2, seed=3)
    b = class_incremental_tasks(labels, 26, clients=4, tasks=3, classes_per_task=2, seed=3)
    c = class_incremental_tasks(labels, 26, clients=4, tasks=3, classes_per_task=2, seed=4)
    assert a == b and hash(a) == hash(b)
    assert a != c


def test_classes_may_overlap_across_clients_but_not_within():
    labels = balanced_labels(6, 20)
    plan = class_incremental_tasks(labels, 6, clients=3, tasks=2, classes_per_task=2, seed=1)
    check_plan(plan, labels, 3, 2, 2)
    counts = np.bincount([c for per in plan.classes for cls in per for c in cls], minlength=6)
    assert counts.sum() == 12 and counts.max() >= 2  # 12 draws over 6 classes must overlap


def test_classes_are_drawn_among_present_ones():
    labels = np.repeat([0, 2, 4, 6], 10)
    plan = class_incremental_tasks(labels, 8, clients=2, tasks=2, classes_per_task=2)
    check_plan(plan, labels, 2, 2, 2)
    assert {c for per in plan.classes for cls in per for c in cls} <= {0, 2, 4, 6}


@settings(max_examples=60, deadline=None)
@given(
    num_classes=st.integers(1, 15),
    n=st.integers(1, 600),
    clients=st.integers(1, 8),
    tasks=st.integers(1, 5),
    k=st.integers(1, 4),
    seed=st.integers(0, 2**31 - 1),
)
def test_plan_property(num_classes, n, clients, tasks, k, seed):
    labels = np.random.default_rng(seed).integers(0, num_classes, n)
    present = np.unique(labels).size
    counts = np.bincount(labels, minlength=num_classes)
    call = lambda: class_incremental_tasks(labels, num_classes, clients, tasks, k, seed)  # noqa: E731
    if tasks * k > num_classes:
        with pytest.raises(ConfigError) as e:
            call()
    elif tasks * k > present:
        with pytest.raises(DataError) as e:
            call()
    elif counts[counts > 0].min() >= clients:  # no class can have more holders than samples
        check_plan(call(), labels, clients, tasks, k)
        return
    else:
        try:
            plan = call()
        except DataError as err:
            assert "\n" not in str(err) and "clients learn it" in str(err)
            return
        check_plan(plan, labels, clients, tasks, k)
        return
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"tasks": 6, "classes_per_task": 2}, ConfigError, "use tasks * classes_per_task <= 10"),
        ({"clients": 0}, ConfigError, "clients must be an integer >= 1"),
        ({"tasks": 2.0}, ConfigError, "tasks must be an integer"),
        ({"classes_per_task": True}, ConfigError, "classes_per_task must be an integer"),
        ({"seed": -1}, ConfigError, "seed must be an integer >= 0"),
    ],
)
def test_bad_arguments(kwargs, error, words):
    with pytest.raises(error) as e:
        class_incremental_tasks(balanced_labels(10, 5), 10, **kwargs)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_data_errors():
    with pytest.raises(DataError, match="only 3 of the 10 classes have training samples"):
        class_incremental_tasks(np.repeat([0, 1, 2], 5), 10, clients=1, tasks=2)
    with pytest.raises(DataError, match="out of range for num_classes=4"):
        class_incremental_tasks(np.array([0, 1, 4]), 4, clients=1, tasks=1)
    with pytest.raises(DataError, match="integer class ids"):
        class_incremental_tasks(np.array([0.0, 1.0]), 2, clients=1, tasks=1)
    with pytest.raises(DataError, match="empty"):
        class_incremental_tasks(np.array([], dtype=np.int64), 2, clients=1, tasks=1)
    # 2 classes, 1 sample each, 3 clients each drawing both: not enough samples
    with pytest.raises(DataError, match="has 1 training samples but 3 clients learn it"):
        class_incremental_tasks(np.array([0, 1]), 2, clients=3, tasks=1, classes_per_task=2)


def hand_plan() -> TaskPlan:
    """2 clients, 2 tasks of 2 classes, over labels 0..5."""

    def ro(*values):
        a = np.array(values, dtype=np.int64)
        a.setflags(write=False)
        return a

    return TaskPlan(
        classes=(((0, 1), (2, 3)), ((1, 4), (0, 5))),
        indices=((ro(0, 1), ro(2, 3)), (ro(4, 5), ro(6, 7))),
        num_classes=6,
    )


HAND_LABELS = np.array([0, 1, 2, 3, 1, 4, 0, 5])


def test_seen_and_task_classes():
    plan = hand_plan()
    assert task_classes(plan, 0) == (0, 1, 4)
    assert task_classes(plan, 1) == (0, 2, 3, 5)
    assert seen_classes(plan, 0) == (0, 1, 4)
    assert seen_classes(plan, 1) == (0, 1, 2, 3, 4, 5)
    with pytest.raises(ConfigError, match="task 2 does not exist"):
        seen_classes(plan, 2)
    assert class_indices(np.array([3, 0, 1, 3, 2]), seen_classes(plan, 0)).tolist() == [1, 2]


def test_describe_table():
    plan = hand_plan()
    text = describe(plan)
    lines = text.splitlines()
    assert lines[0].startswith("2 clients x 2 tasks of 2 classes; 6 of 6 classes used; 8 ")
    assert lines[1] == "classes seen after each task: 3 6"
    assert "task 0" in lines[2] and "task 1" in lines[2]
    assert lines[3].split() == ["client", "0", "0,1", "(2)", "2,3", "(2)"]
    assert lines[4].split() == ["client", "1", "1,4", "(2)", "0,5", "(2)"]
    named = describe(plan, class_names=list("abcdef"))
    assert "a,b (2)" in named and "b,e (2)" in named
    with pytest.raises(ConfigError, match="one name per class"):
        describe(plan, class_names=["a"])


def test_task_data_walks_forward_only():
    plan = hand_plan()
    data = TaskData(plan)
    assert data.task == 0 and data.num_tasks == 2 and data.num_clients == 2
    assert data.current(0).tolist() == [0, 1] and data.current(1).tolist() == [4, 5]
    assert data.classes(1) == (1, 4)
    parts = data.parts_for(1)
    assert [p.tolist() for p in parts] == [[2, 3], [6, 7]]
    assert data.task == 1
    data.advance_to(1)  # staying is allowed
    with pytest.raises(ConfigError, match="cannot go back from task 1 to task 0"):
        data.advance_to(0)
    with pytest.raises(ConfigError, match="task 2 does not exist"):
        data.advance_to(2)
    with pytest.raises(ConfigError, match="client 2 does not exist"):
        data.current(2)
    mine = data.current(0)
    mine[0] = 7  # a copy: a client cannot edit the server's plan
    assert data.current(0).tolist() == [2, 3] and plan.indices[0][1].tolist() == [2, 3]
    with pytest.raises(ValueError):  # and the plan's own arrays are read-only
        plan.indices[0][1][0] = 7


def reachable_indices(view) -> list[np.ndarray]:
    """A greedy client function: everything it can get out of the object it was handed,
    through the public methods and by introspecting every attribute."""
    found = [view.current(cid) for cid in range(view.num_clients)]
    found += list(view.parts())
    stack = [getattr(view, name) for name in getattr(type(view), "__slots__", ())]
    stack += list(getattr(view, "__dict__", {}).values())
    while stack:
        obj = stack.pop()
        if isinstance(obj, np.ndarray):
            found.append(obj)
        elif isinstance(obj, tuple | list):
            stack.extend(obj)
        else:
            assert not isinstance(obj, TaskPlan | TaskData), "the view leaks the plan"
    return found


@pytest.mark.parametrize("task", [0, 1, 2])
def test_view_reaches_only_its_task(task):
    labels = balanced_labels(12, 10, seed=5)
    plan = class_incremental_tasks(labels, 12, clients=3, tasks=3, classes_per_task=2, seed=2)
    data = TaskData(plan)
    data.advance_to(task)
    view = data.view()
    assert isinstance(view, TaskView) and view.task == task
    assert not hasattr(view, "advance_to") and not hasattr(view, "parts_for")
    found = np.unique(np.concatenate(reachable_indices(view)))
    mine = np.concatenate([plan.indices[u][task] for u in range(3)])
    others = np.concatenate([plan.indices[u][t] for u in range(3) for t in range(3) if t != task])
    assert np.array_equal(found, np.sort(mine))
    assert not np.isin(others, found).any()
    # the labels a client can reach are exactly its classes of this task
    for u in range(3):
        assert set(np.unique(labels[view.current(u)]).tolist()) == set(plan.classes[u][task])
        assert view.classes(u) == plan.classes[u][task]
    assert set(np.unique(labels[found]).tolist()) == set(task_classes(plan, task))
    # moving the server's TaskData on does not change a view already handed out
    if task < 2:
        data.advance_to(task + 1)
        assert np.array_equal(np.unique(np.concatenate(view.parts())), np.sort(mine))


def test_clients_built_from_a_task():
    labels = balanced_labels(6, 8, seed=1)
    n = labels.size
    x = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 1, 2, 2).contiguous()
    y = torch.from_numpy(labels)
    dataset = Dataset("toy", x, y, x, y, num_classes=6)
    plan = class_incremental_tasks(labels, 6, clients=2, tasks=3, classes_per_task=2, seed=0)
    data = TaskData(plan)
    for t in range(3):
        clients = Clients(dataset, data.parts_for(t), LocalSpec(batch_size=4))
        for cid in range(2):
            batch = clients.data(cid)
            assert set(batch["y"].tolist()) == set(plan.classes[cid][t])
            mask = batch["label_mask"].nonzero().flatten().tolist()
            assert mask == list(plan.classes[cid][t])
