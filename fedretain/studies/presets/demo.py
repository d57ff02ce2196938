"""The README's demo (``demo``: the forgetting-aware methods against the baselines on
non-IID Fashion-MNIST), the paragraph written from its numbers (:func:`demo_paragraph`), and
the tuning study that chose its hyper-parameters (``demo-tune``)."""

from __future__ import annotations

import math
from typing import Any

from fedretain.studies.presets.plan import (
    CI,
    CI_MLP,
    PRESETS,
    Claim,
    Data,
    Plan,
    Tuned,
    Values,
    data_keys,
    higher,
    lt,
    pick,
    ranking,
    runs,
    scale_reasons,
    seed_values,
    shipped_choices,
    tuning_plan,
    tuning_runs,
)
from fedretain.studies.tuning import (
    TUNING_SEED,
    VAL_FRACTION,
    Criterion,
    Grid,
    method_grids,
)

DEMO_SETTING = "Fashion-MNIST, two classes per client"
DEMO_CHANCE = 0.1  # a guess's accuracy among Fashion-MNIST's ten classes
# each method's own keys; SGD (one full-batch step per round) is the reference of R_a
DEMO_METHODS: dict[str, dict[str, Any]] = {
    "SGD": {"algorithm": "sgd"},
    "FedAvg": {"algorithm": "fedavg"},
    "FedProx": {"algorithm": "fedprox"},
    "SCAFFOLD": {"algorithm": "scaffold"},
    "FedCurv": {"algorithm": "fedcurv"},
    "FedReg": {"algorithm": "fedreg"},
    "GradMA": {"algorithm": "gradma"},
    "FedAvg+TCE": {"algorithm": "fedavg", "loss": "tce"},
    "FedAdam": {"algorithm": "fedavg", "server_opt": "adam"},
}
# the tuning grids (fedretain.studies.tuning): every method the same learning rates, and
# each method with a hyper-parameter of its own four values of it (key, values, the key's
# allowed range, whose ends are no grid edge); FedAvg, SCAFFOLD, SGD and FedAvg+TCE have no
# hyper-parameter of their own here (TCE has no threshold: its softmax runs over the client's
# label set)
DEMO_LRS = (0.01, 0.03, 0.1, 0.3, 1.0)
DEMO_GRIDS: dict[str, tuple[str, tuple[float, ...], tuple[float, float]]] = {
    # moved where a first grid's choice sat at its edge: FedProx's μ down to 0 (FedAvg's
    # clients), FedCurv's λ up to 10
    "FedProx": ("algo.mu", (0.0, 0.001, 0.01, 0.1), (0.0, math.inf)),
    "FedCurv": ("algo.lambda", (1e-2, 1e-1, 1.0, 10.0), (0.0, math.inf)),
    "FedReg": ("algo.gamma", (0.25, 0.5, 0.75, 1.0), (0.0, 1.0)),
    "GradMA": ("algo.beta1", (0.3, 0.6, 0.9, 0.97), (0.0, 1.0)),
    "FedAdam": ("server_opt.lr", (0.003, 0.01, 0.03, 0.1), (0.0, math.inf)),
}
DEMO_TUNE_COMMAND = "fedretain reproduce demo-tune --out results/demo-tune --scale small --jobs 2"


def demo_grids() -> list[Grid]:
    """Every method's tuning grid: the learning rates, and its own key's values."""
    return method_grids(DEMO_METHODS, DEMO_LRS, DEMO_GRIDS)


def demo_tuned() -> list[Tuned]:
    """The choices the demo ships (``tuned.json``'s ``demo``: the committed
    ``results/demo-tune/choices.json``)."""
    return shipped_choices("demo", DEMO_SETTING)


def demo_base(scale: str, data: Data) -> dict[str, Any]:
    """The demo's setting (experiments/fmnist_pathological.toml), shared by its tuning."""
    return {
        **data_keys(data),
        "partition": "shards",
        "partition.classes_per_client": 2,
        "clients": 100,
        "clients_per_round": 10,
        "rounds": 30,
        "local_epochs": 1,
        "batch_size": 10,
        "lr": 0.05,
        "model": "mlp",
        "eval_every": 1,
        "checkpoint_every": 10,
        "targets": [0.5, 0.6, 0.7, 0.8],
        "diagnostics": ["forgetting"],
        "diagnostics.samples": 100,
        **pick(
            scale,
            paper={"model": "cnn", "rounds": 100},
            small={"batch_size": 20, "diagnostics.samples": 50},
            ci={**CI, **CI_MLP, "diagnostics.samples": 20},
        ),
    }


def demo(scale: str, seeds: list[int], data: Data) -> Plan:
    """The README's main command: FedAvg, FedProx, SCAFFOLD, FedCurv, FedReg, GradMA,
    FedAvg+TCE and FedAdam (FedAvg's clients, Adam on the server), with SGD as the reference
    of ``R_a``, on Fashion-MNIST over 100 clients of two label shards
    (experiments/fmnist_pathological.toml), 30 rounds of the MLP, 3 seeds, every run measuring
    its forgetting (``diagnostics=forgetting``, on 50 samples per client at ``small``).

    Every method's learning rate and, where it has one, its own hyper-parameter were chosen
    alike (:func:`demo_tuned`): the same grid of learning rates for every method and four
    values of its own key, each point trained with the same budget on a validation split held
    out of the clients' training data, on a tuning seed that is no evaluation seed
    (``fedretain reproduce demo-tune`` re-derives them: :func:`demo_tune`). The summary ranks
    a method above another only where their paired gap exceeds both the seeds' spread and a
    practical threshold (:mod:`fedretain.metrics.spread`).

    ``small`` (the demo): batch 20 (30 local steps a round, half of batch 10's) and the
    forgetting losses on 50 samples per client, so that 3 seeds fit 10 minutes on 2 cores
    (benchmarks/RESULTS.md, "The main job at 3 seeds"). ``paper``: FedReg's CNN, batch 10,
    100 rounds.
    """
    base = demo_base(scale, data)
    setting = DEMO_SETTING
    choices = demo_tuned()
    claims = [
        Claim(
            "FedReg forgets less than FedAvg: a lower loss increase on the previous round's "
            "clients (FedReg §4.3)",
            lambda v: lt(
                v.get(setting, "FedReg", "loss_increase"),
                v.get(setting, "FedAvg", "loss_increase"),
                "loss_increase",
                "FedReg < FedAvg",
            ),
            "γ and the learning rate are chosen for validation accuracy, not for forgetting",
            paper=FEDREG_PAPER,
        ),
        Claim(
            "FedAvg+TCE ends above FedAvg (TCE §3.2)",
            higher(setting, "FedAvg+TCE", "FedAvg"),
            "with two classes per client TCE's softmax covers only those two, so no client "
            "learns to tell its classes from the other eight; the paper's gain (α = 0.1, most "
            "clients holding several classes) comes after 4,000 rounds",
            paper=TCE_PAPER,
        ),
    ]
    gamma = next((t.chosen.get("algo.gamma") for t in choices if t.method == "FedReg"), None)
    notes = []
    if gamma == 1.0:
        notes.append(
            "FedReg's chosen γ = 1 switches its slow update off (the real batch's gradient is "
            "taken at the local model itself, only the pseudo-data correction acts): the "
            "setting of the paper's forgetting measurement (App. B.3), not of its main tables."
        )
    return Plan(
        title="The demo: forgetting-aware methods against the baselines on non-IID Fashion-MNIST",
        source="none: the demo compares the methods; its claims are FedReg's and TCE's",
        base=base,
        runs=runs(DEMO_SETTING, {m: demo_method(m, choices) for m in DEMO_METHODS}, seeds),
        # no R_0.5: SGD's final accuracy is low, every method reaches half of it in round 1
        metrics=["final", "top", "R_0.9", "R_1", "MB_up", "MB_down", "loss_increase"],
        reference="SGD",
        claims=claims,
        reasons=scale_reasons(scale),
        plots=("round", "bytes", "forgetting"),
        paragraph=demo_paragraph,
        chance=DEMO_CHANCE,
        tuning=choices,
        tuning_note=(
            "Each method's learning rate and own hyper-parameter were chosen on a validation "
            f"split, on tuning seed {TUNING_SEED}, which is no evaluation seed (`"
            f"{DEMO_TUNE_COMMAND}` re-derives them; its report, `results/demo-tune/report.md`, "
            "lists every point)."
        ),
        notes=notes,
    )


FEDREG_PAPER = "FedReg (Xu et al., ICLR 2022)"
TCE_PAPER = "TCE (Legate et al., 2023)"


def demo_method(method: str, choices: list[Tuned]) -> dict[str, Any]:
    """The demo's keys of ``method``: its own and its tuned values."""
    chosen = next((t.chosen for t in choices if t.method == method), {})
    return {**DEMO_METHODS[method], **chosen}


def demo_paragraph(v: Values, plan: Plan) -> str:
    """A paragraph written from the demo's numbers (means over the seeds): which methods rank
    above which, by how much over FedAvg, at what communication cost, which forgot least. A
    method ranks above another only where their paired gap exceeds both the seeds' spread and
    the metric's practical threshold (:func:`~fedretain.studies.presets.ranking`); every
    other pair is named indistinguishable; nothing is ranked when no method learned beyond
    chance."""
    from fedretain.metrics.spread import paired_interval, threshold_of

    setting = plan.settings()[0]
    methods = plan.methods(setting)

    def of(metric: str) -> dict[str, float]:
        values = {m: v.get(setting, m, metric) for m in methods}
        return {m: x for m, x in values.items() if x is not None}

    final, forgetting = of("final"), of("loss_increase")
    if not final:
        return "No run finished."
    n = max(len(seed_values(v, setting, m, "final")) for m in final)
    accuracy = threshold_of("final", plan.thresholds).describe()
    loss = threshold_of("loss_increase", plan.thresholds).describe()
    rule = (
        f"Means over {n} seed(s); a method ranks above another only where their paired gap "
        "exceeds both the seeds' spread (the paired 95 % t-interval of the gap over the seeds "
        f"excludes zero, `fedretain.metrics.spread`) and a practical threshold ({accuracy} of "
        f"accuracy, {loss} of the loss increase); every other pair is indistinguishable."
    )
    best = max(final.values())
    if best < 2 * plan.chance:
        return (
            f"No method learned beyond chance: the best final accuracy is {best:.4f}, against "
            f"{plan.chance:.2f} for a guess among the ten classes; nothing is ranked. {rule}"
        )
    mb = {
        m: (v.get(setting, m, "MB_up") or 0.0) + (v.get(setting, m, "MB_down") or 0.0)
        for m in final
    }
    order = ranking(v, setting, final, "final", thresholds=plan.thresholds)
    text = (
        "Final accuracy (the mean over the last 10 % of the evaluations): "
        + ", ".join(f"{m} {x:.4f}" for m, x in order.means.items())
        + ". "
    )
    lead = order.top()
    if len(lead) < len(order.order):
        text += f"No method ranks above {_listed(lead)}. "
    text += order.describe()
    avg = final.get("FedAvg")
    gaps = []
    for m in lead:
        if avg is None or not order.apart.get((m, "FedAvg")):
            continue
        low, high = paired_interval(
            seed_values(v, setting, m, "final"), seed_values(v, setting, "FedAvg", "final")
        ) or (math.nan, math.nan)
        gap = (
            f"{m} is {100 * (final[m] - avg):.2f} points above FedAvg's {avg:.4f} (95 % "
            f"interval over the seeds {100 * low:.2f} to {100 * high:.2f})"
        )
        if mb.get("FedAvg"):
            gap += (
                f" at {mb[m] / mb['FedAvg']:.2f}x FedAvg's communication ({mb[m]:.1f} MB against "
                f"{mb['FedAvg']:.1f} MB, up and down)"
            )
        gaps.append(gap)
    if gaps:
        text += " " + "; ".join(gaps) + "."
    trained = {m: x for m, x in forgetting.items() if m != "SGD"}
    if trained:
        forgot = ranking(
            v, setting, trained, "loss_increase", lower=True, thresholds=plan.thresholds
        )
        text += (
            " Forgetting (the loss increase on the previous round's clients, lower is better; "
            + ", ".join(f"{m} {x:.4f}" for m, x in forgot.means.items())
            + "): "
        )
        least = forgot.top()
        if len(least) < len(forgot.order):
            text += f"no method forgot less than {_listed(least)}; "
        text += forgot.describe().replace("ranks above", "forgot less than")
        if "SGD" in forgetting:  # one full-batch step per round hardly leaves the global model
            text += (
                f" SGD's one full-batch step per round barely moves the model "
                f"({forgetting['SGD']:.4f})."
            )
    if mb.get("FedAvg"):
        dearest = max(mb, key=lambda m: mb[m])
        if mb[dearest] > mb["FedAvg"] * 1.01:
            text += f" {dearest} sent the most, {mb[dearest] / mb['FedAvg']:.2f}x FedAvg's bytes."
    return f"{text} {rule}"


def _listed(names: list[str]) -> str:
    """``["a", "b", "c"]`` -> ``"a, b or c"``."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


PRESETS.add(
    "demo",
    demo,
    "the README's main command: 8 methods head to head on non-IID Fashion-MNIST, with forgetting",
    dataset="fashion-mnist",
    seeds={"ci": 1, "small": 3, "paper": 3},
    estimate="about 9 min (3 seeds, --jobs 2; 8 min 44 s measured 2026-11-28)",
    paper="the demo",
)


def demo_tune(scale: str, seeds: list[int], data: Data) -> Plan:
    """The demo's tuning study: every method's grid (:func:`demo_grids`: the learning rates
    :data:`DEMO_LRS` for all, and four values of its own key, :data:`DEMO_GRIDS`; the same
    rounds, clients, local work and seeds for every point) trained on the clients' data less
    a held-out validation split, on the tuning seed (:data:`~fedretain.studies.tuning.
    TUNING_SEED`), and the point of the best validation accuracy (the mean over the last 10 %
    of the evaluations) chosen (:mod:`fedretain.studies.tuning`). The report lists every
    point's score and writes the choices to ``choices.json``, which the package ships in
    ``presets/tuned.json`` (the demo reads them there). No forgetting diagnostic; the test set
    is evaluated only at the end.
    """
    base = {k: x for k, x in demo_base(scale, data).items() if not k.startswith("diagnostics")}
    rounds = base["rounds"]
    base.update(val_fraction=VAL_FRACTION, eval_every=1, checkpoint_every=rounds)
    grids = demo_grids()
    return tuning_plan(
        "Tuning the demo's methods alike on a validation split",
        "none: the choice the demo ships (its learning rates and hyper-parameters)",
        base,
        tuning_runs(DEMO_SETTING, grids, seeds),
        grids,
        Criterion(),
        scale_reasons(scale),
    )


PRESETS.add(
    "demo-tune",
    demo_tune,
    "the demo's learning rates and hyper-parameters, chosen alike on a validation split",
    dataset="fashion-mnist",
    seeds={"ci": 1, "small": 1, "paper": 1},
    estimate="about 80 min (1 tuning seed, --jobs 2; 9,259 s of training measured 2026-11-28)",
    paper="the demo",
)
