"""The arithmetic of a preset at ``--scale paper``: the floating-point operations and local
steps of its runs, and the least and the expected time they need on one H100.

Counting runs the real code on the CPU under torch's ``FlopCounterMode`` (the matrix products
and convolutions, forward and backward; element-wise work is not counted) on random inputs of
the paper's dataset's shape (:data:`SHAPES`), so it needs none of the paper's files; nothing is
timed. For each distinct configuration of a plan (its runs without seed, learning rate and the
coefficients of element-wise terms: :data:`NOT_COUNTED`) it counts, on one federation, rounds
of one and two clients at one and two local steps (:func:`run_cost`), which separate the
server's fixed work, each client's fixed work and the work per training sample; the paper's
rounds follow from the clients' sizes (``local_epochs`` passes over a client's samples, or
``local_steps`` batches), and evaluations from one forward pass over a few test inputs scaled to
the test set. A continual run is counted in its second task (replay on), FedCIL's server
consolidation at one and two steps and extended (:data:`SERVER_LOOPS`).
``benchmarks/paper_cost.py`` writes the committed table (``paper_cost.json`` beside the
presets) that ``fedretain reproduce --list`` and docs/reproduce.md show.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils import flop_counter

from fedretain.data.base import Dataset
from fedretain.studies.presets.plan import PRESETS, Data, Plan

COST_FILE = Path(__file__).resolve().parents[1] / "presets" / "paper_cost.json"

# One H100 SXM's dense float32 peak without tensor cores (NVIDIA's H100 datasheet; TF32 on
# tensor cores, 495 TFLOP/s, would need its lower precision accepted): no float32 run is faster.
H100_FP32 = 67e12
# What the expected time assumes, until runs on the card measure them: a third of that peak
# sustained, or STEP_S a local step of the sequential engine where that is longer (small models
# at small batches launch more kernels than they compute). The one measurement so far, FedReg's
# CNN round of fedreg-table1's 5,000-client setting on an H100 (4.3-5.0 s: benchmarks/
# RESULTS.md), is 11.6 ms a step and 0.14 TFLOP/s; FedReg's step does about twice FedAvg's
# passes, hence 5 ms.
SUSTAINED = H100_FP32 / 3
STEP_S = 5e-3


@dataclass(frozen=True)
class Shape:
    """A dataset as the paper used it: input shape, classes, training and test samples."""

    input: tuple[int, ...]
    classes: int
    train: int
    test: int
    groups: int = 0  # natural groups (writers, image sources), 0: none
    source: str = ""


_MNIST = Shape((1, 28, 28), 10, 60_000, 10_000, source="LeCun et al.")
_CIFAR = (3, 32, 32)
SHAPES: dict[str, Shape] = {
    "mnist": _MNIST,
    "fashion-mnist": Shape((1, 28, 28), 10, 60_000, 10_000, source="Xiao et al."),
    "emnist-balanced": Shape((1, 28, 28), 47, 112_800, 18_800, source="Cohen et al."),
    "emnist-letters": Shape((1, 28, 28), 26, 124_800, 20_800, source="Cohen et al."),
    "emnist-byclass": Shape((1, 28, 28), 62, 697_932, 116_323, source="Cohen et al."),
    "emnist-bymerge": Shape((1, 28, 28), 47, 697_932, 116_323, source="Cohen et al."),
    "emnist-digits": Shape((1, 28, 28), 10, 240_000, 40_000, source="Cohen et al."),
    "emnist-mnist": _MNIST,
    "cifar10": Shape(_CIFAR, 10, 50_000, 10_000, source="Krizhevsky"),
    "cifar100": Shape(_CIFAR, 100, 50_000, 10_000, source="Krizhevsky"),
    # LEAF's FEMNIST: 805,263 samples of 3,550 writers, split 90/10 within each writer
    "femnist": Shape((1, 28, 28), 62, 724_737, 80_526, groups=3_550, source="LEAF"),
    "tiny-imagenet": Shape((3, 64, 64), 200, 100_000, 10_000, source="Stanford CS231n"),
    # COVID-CT (He et al., 2020): 425 training and 203 test images of its split, 2 classes
    "imagefolder": Shape((3, 224, 224), 2, 425, 203, groups=32, source="COVID-CT"),
}
EVAL_INPUTS = 8  # test inputs an evaluation's forward pass is counted on


@dataclass(frozen=True)
class RunCost:
    """One configuration's run: FLOPs and local steps in all, and what they come from."""

    flops: float  # training and evaluation, one run
    eval_flops: float  # of which the evaluations
    steps: float  # local steps (mini-batches) of all clients, one run
    rounds: int


@dataclass(frozen=True)
class PresetCost:
    """A preset at paper scale: its runs' FLOPs and local steps in all."""

    runs: int
    counted: int  # distinct configurations counted
    pflop: float
    steps: float  # local steps (mini-batches) of every run
    left_out: str = ""  # runs not counted and why

    @property
    def hours_peak(self) -> float:
        """At one H100's float32 peak: no run does better without TF32 or bfloat16."""
        return self.pflop * 1e15 / H100_FP32 / 3600

    @property
    def hours_expected(self) -> float:
        """At :data:`SUSTAINED`, or :data:`STEP_S` a local step where that is longer."""
        return max(self.pflop * 1e15 / SUSTAINED, self.steps * STEP_S) / 3600

    def text(self) -> str:
        """One table cell: the expected time, the floor, the FLOPs and the steps."""
        note = f"; {self.left_out}" if self.left_out else ""
        if not self.counted:
            return f"not counted{note}"
        return (
            f"about {_hours(self.hours_expected)} (at least {_hours(self.hours_peak)} at the "
            f"float32 peak; {_number(self.pflop)} PFLOP, {_number(self.steps / 1e6)} million "
            f"local steps, {self.runs} runs){note}"
        )


def _number(x: float) -> str:
    """Three significant digits, in full: 26,800, 4.46, 0.0258."""
    return f"{float(f'{x:.3g}'):,.0f}" if x >= 100 else f"{x:.3g}"


def _hours(h: float) -> str:
    if h < 1:
        return f"{max(h * 60, 1):.0f} min"
    return f"{h:.1f} h" if h < 10 else f"{h:,.0f} h"


def shape_of(keys: dict[str, Any]) -> Shape:
    """The shape of the dataset ``keys`` read (EMNIST by its split)."""
    name = str(keys["dataset"])
    if name == "emnist":
        name = f"emnist-{keys.get('dataset.split', 'balanced')}"
    if name not in SHAPES:
        raise KeyError(f"no recorded shape for dataset {name}")
    return SHAPES[name]


def _random_dataset(name: str, shape: Shape, size: int | None, tests: int) -> Dataset:
    """Random uint8 images (or features) with random labels in the shape ``shape`` gives; the
    test set holds ``tests`` inputs (only their forward pass is counted)."""
    gen = torch.Generator().manual_seed(0)
    inputs = shape.input if size is None else (shape.input[0], size, size)

    def images(n: int) -> torch.Tensor:
        return torch.randint(0, 256, (n, *inputs), dtype=torch.uint8, generator=gen)

    def labels(n: int) -> torch.Tensor:
        y = torch.arange(n) % shape.classes  # every class present, shuffled
        return y[torch.randperm(n, generator=gen)]

    groups = None
    if shape.groups:
        groups = np.random.default_rng(0).integers(0, shape.groups, shape.train)
        groups[: shape.groups] = np.arange(shape.groups)  # every group holds a sample
    return Dataset(
        name,
        images(shape.train),
        labels(shape.train),
        images(tests),
        labels(tests),
        shape.classes,
        groups=groups,
    )


class FlopCounter(flop_counter.FlopCounterMode):
    """torch's FLOP counter without its per-module tracking, whose backward hooks refuse the
    ``torch.autograd.grad`` calls on inputs that FedReg's and the attacks' steps make."""

    def __enter__(self) -> FlopCounter:
        self.flop_counts.clear()
        self.mode = flop_counter._FlopCounterMode(self)
        self.mode.__enter__()
        return self

    def __exit__(self, *args: Any) -> Any:
        done = self.mode.__exit__(*args) if self.mode is not None else None
        self.mode = None
        return done


@contextlib.contextmanager
def random_data(shape: Shape) -> Iterator[None]:
    """Within it, a federation loads random inputs of ``shape`` instead of files."""
    from fedretain.recipe import federation

    real = federation.load_dataset

    def fake(name: str, data_dir: Any = None, **params: Any) -> Dataset:
        size = params.get("size")
        return _random_dataset(name, shape, int(size) if size else None, EVAL_INPUTS)

    federation.load_dataset = fake  # type: ignore[assignment]
    try:
        yield
    finally:
        federation.load_dataset = real  # type: ignore[assignment]


class _Counted:
    """One federation's rounds, counted one at a time at a chosen number of local steps."""

    def __init__(self, keys: dict[str, Any]) -> None:
        from fedretain.experiments.run import build_rounds
        from fedretain.recipe.config import load_config
        from fedretain.studies.reproduce.jobs import as_args

        keys = {**keys, "device": "cpu", "engine": "sequential"}
        self.fed, self.rounds = build_rounds(load_config(None, as_args(keys)))
        self.state = self.fed.algorithm.server_init(*self.fed.task.init())
        # in a continual scenario from the last round of the first task: the counted rounds
        # are the second task's, where replay and distillation of the first are on
        self.rnd = (self.fed.scenario.rounds_per_task or 1) - 1
        self.by_round = self.rounds.clients_at

    def steps(self, steps: int) -> None:
        """Every later round trains ``steps`` local steps a client."""
        local = replace(self.fed.clients.local, steps=steps)
        self.rounds.clients = replace(self.rounds.clients, local=local)
        by_round = self.by_round  # the scenario's clients of each round
        self.rounds.clients_at = lambda rnd: replace(by_round(rnd), local=local)

    def round(self, clients: list[int], count: bool = True) -> float:
        """The FLOPs of the next round of ``clients`` (0 when not counted)."""
        lr = self.fed.config.lr
        with FlopCounter(display=False) if count else contextlib.nullcontext() as counter:
            self.state, _ = self.rounds.run_round(
                self.state, self.rnd, lr, clients=np.asarray(clients)
            )
        self.rnd += 1
        return float(counter.get_total_flops()) if counter is not None else 0.0

    def eval_flops(self) -> float:
        """FLOPs of one evaluation's forward pass per test input."""
        ds = self.fed.dataset
        params, buffers = self.fed.task.init()
        with FlopCounter(display=False) as counter:
            self.fed.task.evaluate(params, buffers, ds.x_test, ds.y_test, len(ds.y_test))
        return float(counter.get_total_flops()) / max(len(ds.y_test), 1)


# server loops whose steps a round repeats: counted at 1 and 2 steps, the paper's number
# follows (the cost is linear in them); key -> its default
SERVER_LOOPS = {"fedcil": ("algo.consolidation_steps", 100)}


def run_cost(keys: dict[str, Any]) -> RunCost:
    """The FLOPs and local steps of one run of ``keys`` (flat config keys at paper scale);
    a server loop (FedCIL's consolidation) counted at 1 and 2 steps and extended."""
    loop = SERVER_LOOPS.get(str(keys.get("algorithm")))
    if loop is None:
        return _run_cost(keys)
    key, default = loop
    steps = int(keys.get(key, default))
    one, two = _run_cost({**keys, key: 1}), _run_cost({**keys, key: 2})
    return RunCost(
        flops=one.flops + (steps - 1) * (two.flops - one.flops),
        eval_flops=one.eval_flops,
        steps=one.steps,
        rounds=one.rounds,
    )


def _run_cost(keys: dict[str, Any]) -> RunCost:
    """The FLOPs and local steps of one run of ``keys`` (flat config keys at paper scale).

    On one federation: a round of two clients (not counted: it fills what a method keeps
    between rounds), then each client alone and both at one local step, and the first at two.
    A round of ``S`` clients then costs ``server + sum(fixed(n_i) + per_sample * samples_i)``
    with the clients' fixed work linear in their size ``n_i`` (FedReg's perturbed data,
    FedCurv's Fisher information); the two clients are the median-sized and the smallest
    with a full batch, so that the count stays cheap where a few clients are large."""
    shape = shape_of(keys)
    keys = {k: v for k, v in keys.items() if k not in ("model.weights", "data_dir")}
    with random_data(shape):
        run = _Counted(keys)
        cfg = run.fed.config
        batch = cfg.batch_size
        sizes = np.array([len(p) for p in run.fed.clients.parts])
        full = np.flatnonzero(sizes >= batch)
        pool = full if len(full) else np.arange(len(sizes))
        by_size = pool[np.argsort(sizes[pool], kind="stable")]
        big, small = int(by_size[len(by_size) // 2]), int(by_size[0])
        if big == small and len(sizes) > 1:
            small = int(next(c for c in range(len(sizes)) if c != big))
        run.steps(1)
        run.round([big, small], count=False)
        one, alone, pair = run.round([big]), run.round([small]), run.round([big, small])
        run.steps(2)
        two = run.round([big])
        per_eval_input = run.eval_flops()
    n_big, n_small = int(sizes[big]), int(sizes[small])
    per_sample = (two - one) / min(batch, n_big)  # one more batch of min(batch, n) samples
    server = max(one + alone - pair, 0.0)
    fixed_big = one - server - per_sample * min(batch, n_big)
    fixed_small = alone - server - per_sample * min(batch, n_small)
    slope = (fixed_big - fixed_small) / (n_big - n_small) if n_big != n_small else 0.0
    fixed = np.maximum(fixed_small + slope * (sizes - n_small), 0.0)
    if cfg.local_steps > 0:  # a fixed number of batches, each of min(batch, size) samples
        client_steps = np.full(len(sizes), float(cfg.local_steps))
        client_samples = cfg.local_steps * np.minimum(batch, sizes)
    else:
        client_steps = cfg.local_epochs * np.maximum(1, np.ceil(sizes / batch))
        client_samples = cfg.local_epochs * sizes.astype(float)
    per_client = float(np.mean(fixed + per_sample * client_samples))
    train = cfg.rounds * (server + cfg.clients_per_round * per_client)
    evaluations = cfg.rounds // max(cfg.eval_every, 1) + 1
    evals = evaluations * per_eval_input * shape.test
    return RunCost(
        flops=float(train + evals),
        eval_flops=float(evals),
        steps=cfg.rounds * cfg.clients_per_round * float(client_steps.mean()),
        rounds=cfg.rounds,
    )


# keys that change no matrix product: the seed, the names, and the coefficients of element-wise
# terms (learning rates, FedProx's μ, FedCurv's λ, GradMA's β1/β2, momentum, the loss on logits)
NOT_COUNTED = frozenset(
    {
        "seed",
        "name",
        "threads",
        "data_dir",
        "lr",
        "loss",
        "algo.mu",
        "algo.lambda",
        "algo.beta1",
        "algo.beta2",
        "server_opt.lr",
        "server_opt.momentum",
    }
)


def cost_key(keys: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """What a run's FLOPs depend on: its keys but :data:`NOT_COUNTED`."""
    return tuple(sorted((k, repr(v)) for k, v in keys.items() if k not in NOT_COUNTED))


def paper_plan(name: str) -> Plan:
    """Preset ``name``'s plan at paper scale, on the paper's data (not read: only its name),
    with every setting a user's file adds (the pre-trained transformer of FedReg's Table 3:
    an empty file stands for its weights, which :func:`run_cost` does not load)."""
    import tempfile

    from fedretain.studies.presets.fedreg_table3 import VIT_WEIGHTS

    entry = PRESETS.get(name)
    dataset = entry.meta["dataset"]
    seeds = list(range(entry.meta["seeds"]["paper"]))
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / VIT_WEIGHTS[0]).touch()
        data = Data(dataset, folder, dataset, samples=SHAPES.get(dataset, _MNIST).train)
        return entry.factory("paper", seeds, data)


def preset_cost(name: str, echo: Any = None) -> PresetCost:
    """Preset ``name`` at paper scale: every run's FLOPs and steps, counted once per distinct
    configuration. A privacy study (an attack's optimisation, not rounds) is left out."""
    plan = paper_plan(name)
    counted: dict[tuple[tuple[str, str], ...], RunCost] = {}
    flops = steps = 0.0
    studies = [s for s in plan.runs if s.study]
    for spec in plan.runs:
        if spec.study:
            continue
        keys = {**plan.base, **spec.overrides}
        key = cost_key(keys)
        if key not in counted:
            counted[key] = run_cost(keys)
            if echo:
                pflop = counted[key].flops / 1e15
                echo(f"{name}: {spec.setting} / {spec.method}: {pflop:.3g} PFLOP")
        flops += counted[key].flops
        steps += counted[key].steps
    left = f"{len(studies)} privacy studies (attacks, not rounds) not counted" if studies else ""
    return PresetCost(
        runs=len(plan.runs),
        counted=len(counted),
        pflop=float(flops) / 1e15,
        steps=float(steps),
        left_out=left,
    )


def read_costs(path: Path = COST_FILE) -> dict[str, PresetCost]:
    """The committed table: preset -> its cost at paper scale (empty when not written)."""
    import json

    if not path.is_file():
        return {}
    raw = json.loads(path.read_text())
    fields = ("runs", "counted", "pflop", "steps", "left_out")
    return {
        name: PresetCost(**{k: value[k] for k in fields if k in value})
        for name, value in raw["presets"].items()
    }


def as_json(costs: dict[str, PresetCost]) -> dict[str, Any]:
    """The committed table's content, with the rates it assumes."""
    return {
        "rates": {
            "h100_fp32_flops": H100_FP32,
            "sustained_flops": SUSTAINED,
            "step_s": STEP_S,
        },
        "presets": {
            name: {**asdict(c), "hours_peak": c.hours_peak, "hours_expected": c.hours_expected}
            for name, c in costs.items()
        },
    }


__all__ = [
    "COST_FILE",
    "H100_FP32",
    "SHAPES",
    "PresetCost",
    "RunCost",
    "as_json",
    "preset_cost",
    "read_costs",
    "run_cost",
]
