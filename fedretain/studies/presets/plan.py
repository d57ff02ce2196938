"""What a preset builds, and the helpers every preset builds it with: :class:`Plan` (its
runs, each a :class:`RunSpec`, and the paper's claims, each a :class:`Claim`), :class:`Data`,
:class:`Sweep`, the registry :data:`PRESETS`, the checks a claim is made of (:func:`fewer`,
:func:`higher`, :func:`highest`, :func:`lt`, :func:`ge`, ...) and the ranking of a paragraph
(:func:`ranking`), the keys every ``ci`` plan shares (:data:`CI`), the builders of a plan's
runs (:func:`runs`, :func:`runs_over`), of a tuning study's plan (:func:`tuning_plan`),
paper numbers (:func:`paper_numbers`), floors (:func:`paper_floor`) and deviations
(:func:`scale_reasons`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from fedretain.errors import ConfigError
from fedretain.registry import Registry

# every preset has ci, small and paper; medium only where a preset defines it (fedcil-table1)
SCALES = ("ci", "small", "medium", "paper")
INF = math.inf  # a rounds-to metric that never reached its target


class Values(Protocol):
    """The results as a claim sees them: one seed's, or the means over the seeds."""

    def get(self, setting: str, method: str, metric: str) -> float | None:
        """``metric`` of ``method`` in ``setting``; None when the run is missing. Rounds-to
        metrics are ``INF`` when the target was never reached."""
        ...


Check = Callable[[Values], bool | None]


@dataclass(frozen=True)
class RunSpec:
    """One run: a method in a setting with a seed; ``overrides`` are flat config keys over the
    plan's base. ``series`` and ``x``: the line and the value of a sweep (λ, lr).

    With ``study`` (the options of :class:`~fedretain.studies.privacy.Study`) the job is a
    ``fedretain privacy`` study on that config instead of one run; it fills the table rows
    ``rows`` (:data:`~fedretain.studies.privacy.TABLE_ROWS`)."""

    setting: str
    method: str
    seed: int
    overrides: dict[str, Any]
    series: str = ""
    x: float | None = None
    study: dict[str, Any] | None = None
    rows: tuple[str, ...] = ()

    @property
    def folder(self) -> str:
        return f"{slug(self.setting)}/{slug(self.method)}/seed{self.seed}"

    @property
    def line(self) -> str:
        return self.series or self.method


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, checked on our numbers; ``why_not``: the most likely reason when
    it does not hold (after the plan's deviations from the paper); ``grid``: it reads the best
    point of a swept series (its verdict needs that best inside the grid, not at an edge);
    ``paper``: whose claim it is, where not the preset's paper (the demo's)."""

    text: str
    check: Check
    why_not: str = ""
    grid: bool = False
    paper: str = ""


@dataclass(frozen=True)
class Tuned:
    """A method's hyper-parameters chosen on a validation split (:mod:`fedretain.experiments.
    tuning`): the chosen value of each key, each key's grid, each point's validation score
    (``points``: the keys' values and the score) and the keys chosen at an edge of their grid
    that is not the edge of what the key allows (``edge``: a wider grid might choose
    otherwise)."""

    method: str
    chosen: dict[str, float]
    grid: dict[str, list[float]]
    points: list[dict[str, float]] = field(default_factory=list)
    edge: list[str] = field(default_factory=list)
    setting: str = ""  # the setting it was chosen for ("": every setting)
    row: str = ""  # the plan's method whose runs use the choice (default: ``method``)
    target: float | None = None  # the scores count rounds to this validation accuracy

    def runs_as(self) -> str:
        return self.row or self.method


@dataclass(frozen=True)
class Sweep:
    """A hyper-parameter swept over runs (``RunSpec.x``): the report draws final accuracy
    against it per series; with a ``baseline`` method, also says from which value the series
    departs from it."""

    key: str
    log: bool = True
    baseline: str = ""


@dataclass(frozen=True)
class Data:
    """The dataset a plan runs on: ``paper``'s own, or a stand-in (``note`` says why), or none
    (``missing`` says which files are missing and how to get them)."""

    name: str
    data_dir: str
    paper: str
    note: str = ""
    missing: str = ""
    samples: int = 0  # training samples (0: unknown)


@dataclass
class Plan:
    """Everything ``fedretain reproduce`` needs for one preset at one scale."""

    title: str
    source: str  # where the paper's numbers are
    base: dict[str, Any]  # flat config keys every run starts from
    runs: list[RunSpec]
    metrics: list[str]  # table columns: final, top, R_0.5, to:<label>, MB_up, loss_increase...
    reference: str = ""  # the method whose final accuracy R_a is measured against
    paper: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    claims: list[Claim] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)  # deviations from the paper here
    targets: dict[str, float | dict[str, float]] = field(default_factory=dict)  # ours
    paper_targets: dict[str, float | dict[str, float]] = field(default_factory=dict)
    sweep: Sweep | None = None
    plots: tuple[str, ...] = ("round",)  # round, bytes, forgetting, continual
    setting_metrics: dict[str, list[str]] = field(default_factory=dict)  # instead of metrics
    paragraph: Callable[[Values, Plan], str] | None = None
    notes: list[str] = field(default_factory=list)
    # settings whose report relates each accuracy change between evaluations to how many
    # classes the clients of those rounds held (what drives swings on one-class clients)
    coverage: tuple[str, ...] = ()
    # the smallest gaps that matter where the preset sets its own (by metric or family,
    # fedretain.metrics.spread.THRESHOLDS otherwise)
    thresholds: dict[str, Any] = field(default_factory=dict)
    # setting -> (accuracy, why): a final accuracy below it is an undertrained model, whose
    # end-of-training comparisons decide nothing (paper_floor: the paper's less a margin)
    floors: dict[str, tuple[float, str]] = field(default_factory=dict)
    chance: float = 0.1  # a guess's accuracy (1 / classes)
    tuning: list[Tuned] = field(default_factory=list)  # how the methods' values were chosen
    # a tuning plan's choices (fedretain.studies.tuning.choices), written beside its
    # report as choices.json
    choices: Callable[[Values, Plan], dict[str, Any]] | None = None
    tuning_note: str = ""  # where they come from (a tuning preset and its report)
    left_out: str = ""  # the baselines of the paper's table this plan does not run, and why

    def settings(self) -> list[str]:
        return list(dict.fromkeys(r.setting for r in self.runs))

    def methods(self, setting: str) -> list[str]:
        rows = (r.rows or (r.method,) for r in self.runs if r.setting == setting)
        return list(dict.fromkeys(m for row in rows for m in row))

    def metrics_of(self, setting: str) -> list[str]:
        return self.setting_metrics.get(setting, self.metrics)

    def target(self, label: str, setting: str, paper: bool = False) -> float | None:
        value = (self.paper_targets if paper else self.targets).get(label)
        return value.get(setting) if isinstance(value, dict) else value


# name -> preset function (scale, seeds, data) -> Plan; meta: dataset (the paper's), standin
# (what runs when its files are absent), seeds (default count per scale), estimate (small)
PRESETS = Registry("preset")


def slug(text: str) -> str:
    """A folder name: ``"FedCurv λ=1e-4"`` -> ``fedcurv-lambda-1e-4``."""
    for greek, latin in {"λ": "lambda", "α": "alpha", "ω": "omega", "γ": "gamma"}.items():
        text = text.replace(greek, latin)
    return re.sub(r"[^a-z0-9.+]+", "-", text.lower()).strip("-")


def pick(scale: str, **by_scale: Any) -> Any:
    """The value given for ``scale`` (a ConfigError for a scale the preset does not define)."""
    if scale not in by_scale:
        raise ConfigError(f"unknown scale '{scale}'; choose one of: {', '.join(SCALES)}")
    return by_scale[scale]


# ---------------------------------------------------------------------------- claim helpers


@dataclass(frozen=True)
class Compared:
    """One comparison a claim's check makes: it asserts ``a < b`` (``want``) or that ``a`` is
    not below ``b`` by a gap that matters (``not want``: :func:`ge`), on ``metric`` (whose
    practical threshold it is held to); ``label`` names what is compared."""

    a: float | None
    b: float | None
    metric: str
    want: bool = True
    label: str = ""


# the comparisons the claim being checked makes, while :func:`comparisons` collects them
_COMPARED: ContextVar[list[Compared] | None] = ContextVar("compared", default=None)
# while :func:`replayed` runs a check: each comparison's outcome over the seeds, in order
_REPLAY: ContextVar[Iterator[bool | None] | None] = ContextVar("replay", default=None)


@contextmanager
def comparisons() -> Iterator[list[Compared]]:
    """Collect, in order, every comparison a claim's check makes (its :func:`lt` and
    :func:`ge` calls): run on each seed's values, they pair up seed by seed for
    :func:`fedretain.metrics.spread.below`."""
    seen: list[Compared] = []
    token = _COMPARED.set(seen)
    try:
        yield seen
    finally:
        _COMPARED.reset(token)


@contextmanager
def replayed(outcomes: Sequence[bool | None]) -> Iterator[None]:
    """Within it, the i-th comparison a check makes returns ``outcomes[i]`` (what the seeds
    decided of it: True, False or None for open) instead of comparing two values, so that the
    check combines the seeds' decisions as it combines values (``every``, ``at_most``, ...)."""
    token = _REPLAY.set(iter(outcomes))
    try:
        yield
    finally:
        _REPLAY.reset(token)


def _compare(a: float | None, b: float | None, metric: str, want: bool, label: str) -> bool | None:
    seen = _COMPARED.get()
    if seen is not None:
        seen.append(Compared(a, b, metric, want, label))
    replay = _REPLAY.get()
    if replay is not None:
        return next(replay, None)
    if a is None or b is None or (a == INF and b == INF):
        return None
    return a < b if want else a >= b


def lt(a: float | None, b: float | None, metric: str, label: str = "") -> bool | None:
    """The claim asserts ``a < b`` on ``metric`` (a metric, or a threshold family of
    :data:`fedretain.metrics.spread.THRESHOLDS`: ``count``, ``ratio``, ``exact``...): on one
    seed's values or the means, a < b (undecided when a value is missing or both never reached
    their target); over the seeds, it holds when the gap exceeds the seeds' spread and the
    metric's practical threshold."""
    return _compare(a, b, metric, True, label)


def ge(a: float | None, b: float | None, metric: str, label: str = "") -> bool | None:
    """The claim asserts ``a`` is not below ``b``: on one seed's values or the means a >= b;
    over the seeds, it holds when ``b - a`` stays below the practical threshold beyond the
    seeds' spread (no gap that matters in ``b``'s favour)."""
    return _compare(a, b, metric, False, label)


def every(results: Iterable[bool | None]) -> bool | None:
    """All of ``results`` hold: False when one does not, else undecided when one is."""
    results = list(results)
    if any(r is False for r in results):
        return False
    return None if any(r is None for r in results) else True


def fewer(setting: str, a: str, b: str, metric: str) -> Check:
    """``a`` reaches ``metric`` (a rounds-to metric) in fewer rounds than ``b``."""
    return lambda v: lt(v.get(setting, a, metric), v.get(setting, b, metric), metric, f"{a} < {b}")


def higher(setting: str, a: str, b: str, metric: str = "final") -> Check:
    """``a``'s ``metric`` is above ``b``'s."""
    return lambda v: lt(v.get(setting, b, metric), v.get(setting, a, metric), metric, f"{a} > {b}")


def at_most(setting: str, a: str, b: str, metric: str) -> Check:
    """``a``'s ``metric`` is at most ``b``'s (not above it by a gap that matters)."""
    return lambda v: ge(v.get(setting, b, metric), v.get(setting, a, metric), metric, f"{a} <= {b}")


def fewest(setting: str, a: str, others: list[str], metric: str) -> Check:
    """``a``'s ``metric`` (a rounds-to metric) is below every one of ``others``'."""
    return lambda v: every(
        lt(v.get(setting, a, metric), v.get(setting, o, metric), metric, f"{a} < {o}")
        for o in others
    )


def highest(setting: str, a: str, others: list[str], metric: str = "final") -> Check:
    """``a``'s ``metric`` is above every one of ``others``'."""
    return lambda v: every(
        lt(v.get(setting, o, metric), v.get(setting, a, metric), metric, f"{a} > {o}")
        for o in others
    )


def seed_values(v: Values, setting: str, method: str, metric: str) -> list[float | None]:
    """``metric`` of ``method`` seed by seed (aligned by seed, None where a seed has no
    result) when ``v`` holds the means over the seeds; else ``[v.get(...)]`` (one value)."""
    per_seed = getattr(v, "per_seed", None)
    if per_seed is not None:
        return per_seed(setting, method, metric)
    return [v.get(setting, method, metric)]


@dataclass
class Ranking:
    """Methods ordered by their means of ``metric`` (best first), and which pairs rank apart
    (:func:`fedretain.metrics.spread.above`: the paired gap exceeds both the seeds' spread and
    the metric's practical threshold). Every other pair is indistinguishable."""

    metric: str
    means: dict[str, float]  # best first
    apart: dict[tuple[str, str], bool]  # (better, worse) -> ranks above

    @property
    def order(self) -> list[str]:
        return list(self.means)

    def beats(self, a: str) -> list[str]:
        """The methods ``a`` ranks above, best first."""
        return [b for b in self.order if self.apart.get((a, b))]

    def top(self) -> list[str]:
        """The methods no other method ranks above."""
        return [m for m, place in self.places().items() if place == 1]

    def places(self) -> dict[str, int]:
        """Each method's place: one more than the number of methods that rank above it (so
        the methods no other ranks above share the first place). A place follows the rule,
        not the means: a method with a lower mean but a wide spread can share the first place
        while one with a higher mean ranks below a leader."""
        return {m: 1 + sum(bool(self.apart.get((o, m))) for o in self.order) for m in self.order}

    def tied_with(self, a: str) -> list[str]:
        """The methods indistinguishable from ``a``, best first."""
        return [b for b in self.order if b != a and not self.apart[a, b] and not self.apart[b, a]]

    def describe(self) -> str:
        """Every pair in words: which methods rank above which, and the indistinguishable
        pairs."""
        above = [f"{m} ranks above {joined(self.beats(m))}" for m in self.order if self.beats(m)]
        ties = [f"{a} and {b}" for a, b in self.ties()]
        if not above:
            return "No pair of methods ranks apart: every pair is indistinguishable."
        text = "; ".join(above) + "."
        if ties:
            text += " Indistinguishable: " + "; ".join(ties) + "."
        return text

    def ties(self) -> list[tuple[str, str]]:
        """The indistinguishable pairs, better mean first."""
        order = self.order
        return [
            (a, b)
            for i, a in enumerate(order)
            for b in order[i + 1 :]
            if not self.apart[a, b] and not self.apart[b, a]
        ]


def joined(names: Sequence[str]) -> str:
    """``["a", "b", "c"]`` -> ``"a, b and c"``."""
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def ranking(
    v: Values,
    setting: str,
    methods: Iterable[str],
    metric: str,
    lower: bool = False,
    thresholds: Mapping[str, Any] | None = None,
) -> Ranking:
    """``methods`` ranked by ``metric`` (means over the seeds, best first; ``lower``: lower is
    better), with the pairs that rank apart by the report's one rule. Methods without a mean
    are left out; with one seed no pair ranks apart."""
    from fedretain.metrics.spread import above, threshold_of

    means = {m: x for m in methods if (x := v.get(setting, m, metric)) is not None}
    order = sorted(means, key=lambda m: means[m], reverse=not lower)
    threshold = threshold_of(metric, dict(thresholds or {}))
    sign = -1.0 if lower else 1.0

    def signed(m: str) -> list[float | None]:
        return [None if x is None else sign * x for x in seed_values(v, setting, m, metric)]

    apart = {
        (a, b): a != b and above(signed(a), signed(b), threshold) for a in order for b in order
    }
    return Ranking(metric, {m: means[m] for m in order}, apart)


UNDERTRAINED = 0.30  # a model this far below the paper's accuracy is in another regime
NO_GUARANTEE = 10.0  # a DP epsilon above this promises nothing one would call privacy


def paper_floor(accuracy: float, what: str) -> tuple[float, str]:
    """A setting's floor (``Plan.floors``): the paper's ``accuracy`` (``what`` says which)
    less :data:`UNDERTRAINED` (30 points: a stand-in dataset or a shorter run explains a
    few points, not thirty)."""
    return (
        round(accuracy - UNDERTRAINED, 4),
        f"the paper's {what}, {accuracy:.3f}, less {100 * UNDERTRAINED:.0f} points",
    )


def tuning_plan(
    title: str,
    source: str,
    base: dict[str, Any],
    specs: list[RunSpec],
    grids: list[Any],
    criterion: Any,
    reasons: list[str],
) -> Plan:
    """A tuning study's plan (:mod:`fedretain.studies.tuning`): its runs, every point's
    validation score in the summary, the choices written beside the report (``choices.json``);
    the table's accuracy is the test set's, shown only."""
    from functools import partial

    from fedretain.studies.tuning import choices, tuning_paragraph

    return Plan(
        title=title,
        source=source,
        base=base,
        runs=specs,
        metrics=["final", "wall_s"],
        reasons=reasons,
        plots=(),  # a curve per grid point would crowd one axis: the scores are the result
        paragraph=partial(tuning_paragraph, grids, criterion),
        choices=lambda v, plan: choices(grids, criterion, v, plan.settings()),
        notes=[
            "The table's accuracy is the test set's, shown only; the choice reads the "
            "validation split (the summary)."
        ],
    )


def tuning_runs(setting: str, grids: list[Any], seeds: list[int]) -> list[RunSpec]:
    """A tuning study's runs: every point of every grid in ``setting``, on the tuning seeds
    (:func:`fedretain.studies.tuning.tuning_seeds`: none an evaluation seed)."""
    from fedretain.studies.tuning import grid_points, tuning_seeds

    return [
        RunSpec(setting, g.label(p), seed, {**g.overrides, **p, "seed": seed}, g.method)
        for g, p, seed in grid_points(grids, tuning_seeds(seeds))
    ]


def shipped_choices(preset: str, setting: str, path: Path | None = None) -> list[Tuned]:
    """The choices the package ships for ``preset`` in ``setting`` (``tuned.json``: its tuning
    study's committed ``choices.json``); a ConfigError when it ships none."""
    from fedretain.studies.tuning import TUNED_FILE, tuned

    entry = tuned(preset, path or TUNED_FILE)
    try:
        chosen = entry["settings"][setting]
    except (KeyError, TypeError):
        raise ConfigError(f"no tuned values for preset {preset} in setting {setting}") from None
    return [
        Tuned(m, c["chosen"], c["grid"], c["points"], c["edge"])
        for m, c in chosen.items()
        if c["chosen"] is not None
    ]


def data_keys(data: Data) -> dict[str, Any]:
    """The config keys of ``data``: its dataset, and its folder where one was given."""
    return {"dataset": data.name, **({"data_dir": data.data_dir} if data.data_dir else {})}


def standin_reason(data: Data) -> list[str]:
    """The deviation a stand-in dataset makes (none when ``data`` is the paper's)."""
    return [] if data.name == data.paper else [f"{data.name} stands in for {data.paper}"]


# ci: a smoke test of seconds per run
CI = {
    "rounds": 2,
    "clients_per_round": 2,
    "local_steps": 2,
    "eval_every": 1,
    "checkpoint_every": 1,
    "plots": False,  # each run's own PNGs (the report draws its own)
    "test_samples": 500,  # a convolutional model's 10,000 test images took most of a ci run
}
CI_MLP = {"model": "mlp", "model.hidden": [16]}
CI_REASON = "scale=ci: 2 rounds of 2 clients taking 2 local steps, a tiny model, 500 test samples"


def scale_reasons(scale: str, small: str = "", ci: str = CI_REASON) -> list[str]:
    """A plan's deviations from the paper at ``scale``: none at ``paper``, ``small`` at
    ``small`` (none when empty), ``ci`` at ``ci``; a ConfigError for another scale."""
    return pick(scale, paper=[], small=[small] if small else [], ci=[ci])


# ---------------------------------------------------------------------------- run builders


MethodKeys = Mapping[str, Mapping[str, Any]]  # method -> its config keys


def runs(
    setting: str,
    methods: MethodKeys,
    seeds: Sequence[int],
    common: Mapping[str, Any] | None = None,
    *,
    series: str = "",
    x: float | None = None,
) -> list[RunSpec]:
    """Every method of ``methods`` on every seed in ``setting``, method by method, seed by
    seed; a run's overrides are ``common``, then its method's keys, then ``seed``. ``series``
    and ``x``: the sweep's line and value of every one of these runs."""
    common = common or {}
    return [
        RunSpec(setting, method, seed, {**common, **keys, "seed": seed}, series, x)
        for method, keys in methods.items()
        for seed in seeds
    ]


def runs_over(
    settings: Mapping[str, Mapping[str, Any]],
    methods: MethodKeys | Callable[[str], MethodKeys],
    seeds: Sequence[int],
) -> list[RunSpec]:
    """:func:`runs` of every setting of ``settings`` (name -> its config keys, which the
    method's keys override), setting by setting; ``methods`` is the same in every setting,
    or a function of the setting's name."""
    return [
        spec
        for setting, keys in settings.items()
        for spec in runs(setting, methods(setting) if callable(methods) else methods, seeds, keys)
    ]


def paper_numbers(
    columns: Sequence[str], numbers: Mapping[str, Mapping[str, Sequence[Any]]]
) -> dict[tuple[str, str], dict[str, Any]]:
    """The paper's numbers by (setting, method) from ``numbers`` (setting -> method -> one
    table row), each row's values named by ``columns``."""
    return {
        (setting, method): dict(zip(columns, row, strict=True))
        for setting, rows in numbers.items()
        for method, row in rows.items()
    }
