"""The README's demo (``demo``: the forgetting-aware methods against the baselines on
non-IID Fashion-MNIST), the paragraph written from its numbers (:func:`demo_paragraph`), and
the tuning study that chose its hyper-parameters (``demo-tune``)."""

from __future__ import annotations

import math
from typing import Any

from fedretain.experiments.presets.plan import (
    CI,
    CI_MLP,
    PRESETS,
    Claim,
    Data,
    Plan,
    RunSpec,
    Values,
    data_keys,
    higher,
    lt,
    pick,
    ranks,
    runs,
    scale_reasons,
    seed_values,
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
# (key, grid) of each compared method with a hyper-parameter of its own, three points each;
# the local learning rate is the setting's (0.05), the same for every method, as the papers
# fix it per setting, so no method gains from a learning rate the others do not get. FedAvg,
# SCAFFOLD and FedAvg+TCE have no hyper-parameter of their own here (TCE has no threshold:
# its softmax runs over the client's label set).
DEMO_GRIDS: dict[str, tuple[str, tuple[float, ...]]] = {
    "FedProx": ("algo.mu", (0.001, 0.01, 0.1)),
    "FedCurv": ("algo.lambda", (1e-4, 1e-3, 1e-2)),
    "FedReg": ("algo.gamma", (0.4, 0.7, 1.0)),
    "GradMA": ("algo.beta1", (0.1, 0.5, 0.9)),
    "FedAdam": ("server_opt.lr", (0.003, 0.01, 0.03)),
}
# chosen by `fedretain reproduce demo-tune --scale small` (its report lists every point; one
# seed, validation accuracies: FedProx 0.5487/0.5468/0.5408, FedCurv 0.5485/0.5482/0.5520,
# FedReg 0.5188/0.5950/0.6632, GradMA 0.5973/0.6752/0.7452, FedAdam 0.6240/0.6530/0.5763);
# FedProx's and FedCurv's points are within 0.4 points of each other (their choice is noise),
# and FedProx, FedCurv, FedReg and GradMA chose an edge of their grid
DEMO_TUNED: dict[str, float] = {
    "FedProx": 0.001,
    "FedCurv": 1e-2,
    "FedReg": 1.0,
    "GradMA": 0.9,
    "FedAdam": 0.01,
}
DEMO_TUNE_COMMAND = "fedretain reproduce demo-tune --scale small --jobs 2"


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

    Every method runs at the setting's learning rate (0.05) and, where it has one, with its own
    hyper-parameter chosen alike (:data:`DEMO_TUNED`): a grid of three points per method on a
    validation split held out of the clients' training data, the same rounds and seeds per
    point; ``fedretain reproduce demo-tune --scale small``
    re-derives them (:func:`demo_tune`). The summary ranks methods only where they separate
    beyond the seeds' spread (:mod:`fedretain.metrics.spread`).

    ``small`` (the demo): batch 20 (30 local steps a round, half of batch 10's) and the
    forgetting losses on 50 samples per client, so that 3 seeds fit 10 minutes on 2 cores:
    838 CPU-seconds in all (4.7 CPU-minutes per seed), measured with ``--jobs 2`` on a
    2-core machine shared with other work (13 min 41 s there, at 102 % CPU), so about 7 min
    on 2 free cores; FedReg's and GradMA's runs (about 1.5 CPU-minutes each) go first.
    ``paper``: FedReg's CNN, batch 10, 100 rounds.
    """
    base = demo_base(scale, data)
    setting = DEMO_SETTING
    claims = [
        Claim(
            "FedReg forgets less than FedAvg: a lower loss increase on the previous round's "
            "clients (FedReg §4.3)",
            lambda v: lt(
                v.get(setting, "FedReg", "loss_increase"), v.get(setting, "FedAvg", "loss_increase")
            ),
            "γ is chosen for validation accuracy, not for forgetting (the choice, γ = 1, is also "
            "the paper's for its forgetting measurement, App. B.3)",
        ),
        Claim(
            "FedAvg+TCE ends above FedAvg (TCE §3.2)",
            higher(setting, "FedAvg+TCE", "FedAvg"),
            "with two classes per client TCE's softmax covers only those two, so no client "
            "learns to tell its classes from the other eight; the paper's gain (α = 0.1, most "
            "clients holding several classes) comes after 4,000 rounds",
        ),
    ]
    return Plan(
        title="The demo: forgetting-aware methods against the baselines on non-IID Fashion-MNIST",
        source="none: the demo compares the methods; its claims are FedReg's and TCE's",
        base=base,
        runs=runs(DEMO_SETTING, {m: demo_method(m) for m in DEMO_METHODS}, seeds),
        # no R_0.5: SGD's final accuracy is low, every method reaches half of it in round 1
        metrics=["final", "top", "R_0.9", "R_1", "MB_up", "MB_down", "loss_increase"],
        reference="SGD",
        claims=claims,
        reasons=scale_reasons(scale),
        plots=("round", "bytes", "forgetting"),
        paragraph=demo_paragraph,
        notes=[
            "Hyper-parameters: "
            + "; ".join(f"{m} {DEMO_GRIDS[m][0]}={x:g}" for m, x in DEMO_TUNED.items())
            + f", each chosen on a validation split from a grid of three (`{DEMO_TUNE_COMMAND}`"
            " re-derives them); every method trains at the setting's learning rate, 0.05."
        ],
    )


def demo_method(method: str) -> dict[str, Any]:
    """The demo's keys of ``method``: its own and its tuned value."""
    keys = dict(DEMO_METHODS[method])
    if method in DEMO_TUNED:
        keys[DEMO_GRIDS[method][0]] = DEMO_TUNED[method]
    return keys


def _listed(group: list[str], values: dict[str, float], bold: bool = False) -> str:
    """``group``'s methods with their values, ``"FedAvg (0.6120), FedProx (0.6080)"``."""
    names = [f"**{m}**" if bold else m for m in group]
    return ", ".join(f"{n} ({values[m]:.4f})" for n, m in zip(names, group, strict=True))


def _noise(group: list[str]) -> str:
    """How a rank's methods relate (:func:`ranks`: each is within noise of the rank's best)."""
    if len(group) < 2:
        return ""
    return ", within noise of each other" if len(group) == 2 else f", within noise of {group[0]}"


def demo_paragraph(v: Values, plan: Plan) -> str:
    """A paragraph written from the demo's numbers (means over the seeds): which methods led,
    by how much over FedAvg, at what communication cost, which forgot least. Methods are
    ranked only where they separate beyond the seeds' spread
    (:func:`fedretain.metrics.spread.separated`), "within noise" otherwise; nothing is ranked
    when no method learned beyond chance."""
    from fedretain.metrics.spread import paired_interval

    setting = plan.settings()[0]
    methods = plan.methods(setting)

    def of(metric: str) -> dict[str, float]:
        values = {m: v.get(setting, m, metric) for m in methods}
        return {m: x for m, x in values.items() if x is not None}

    final, top, forgetting = of("final"), of("top"), of("loss_increase")
    if not final:
        return "No run finished."
    n = max(len(seed_values(v, setting, m, "final")) for m in final)
    rule = (
        f"Means over {n} seed(s); a gap counts only where it exceeds the seeds' spread (the "
        "paired 95 % t-interval of the gap over the seeds excludes zero, "
        "`fedretain.metrics.spread`), else the methods are within noise."
    )
    best = max(final.values())
    if best < 2 * DEMO_CHANCE:
        return (
            f"No method learned beyond chance: the best final accuracy is {best:.4f}, against "
            f"{DEMO_CHANCE:.2f} for a guess among the ten classes; nothing is ranked. {rule}"
        )
    mb = {
        m: (v.get(setting, m, "MB_up") or 0.0) + (v.get(setting, m, "MB_down") or 0.0)
        for m in final
    }
    groups = ranks(v, setting, final, "final")
    if len(groups) == 1:
        text = (
            f"All {len(final)} methods ended within noise of each other (final accuracy "
            f"{min(final.values()):.4f} to {best:.4f})."
        )
    else:
        lead = groups[0]
        if len(lead) == 1:
            text = f"**{lead[0]}** led with a final accuracy of {final[lead[0]]:.4f}"
            text += f" (top {top[lead[0]]:.4f})" if lead[0] in top else ""
        else:
            text = f"{_listed(lead, final, bold=True)} led{_noise(lead)}"
        avg = final.get("FedAvg")
        if avg is not None and "FedAvg" not in lead:
            gaps = []
            for m in lead:
                low, high = paired_interval(
                    seed_values(v, setting, m, "final"), seed_values(v, setting, "FedAvg", "final")
                ) or (math.nan, math.nan)
                gap = f"{100 * (final[m] - avg):.2f} points above FedAvg's {avg:.4f}"
                gap += f" (95 % interval over the seeds {100 * low:.2f} to {100 * high:.2f})"
                if mb.get("FedAvg"):
                    gap += (
                        f", at {mb[m] / mb['FedAvg']:.2f}x FedAvg's communication "
                        f"({mb[m]:.1f} MB against {mb['FedAvg']:.1f} MB, up and down)"
                    )
                gaps.append(gap if len(lead) == 1 else f"{m} {gap}")
            text += ", " + "; ".join(gaps)
        text += ". Then came " + "; then ".join(_listed(g, final) + _noise(g) for g in groups[1:])
        text += "."
    trained = {m: x for m, x in forgetting.items() if m != "SGD"}
    if trained:
        worst = ranks(v, setting, trained, "loss_increase", lower=True)
        least = worst[0]
        text += " Forgetting (the loss increase on the previous round's clients): "
        if len(worst) == 1:
            text += (
                f"every method with local training within noise of the others "
                f"({min(trained.values()):.4f} to {max(trained.values()):.4f})"
            )
        else:
            text += f"{_listed(least, trained, bold=True)} forgot least{_noise(least)}"
            if "FedAvg" in trained and "FedAvg" not in least:
                text += f" (FedAvg: {trained['FedAvg']:.4f})"
            text += f"; {_listed(worst[-1], trained)} forgot most{_noise(worst[-1])}"
        if "SGD" in forgetting:  # one full-batch step per round hardly leaves the global model
            sgd = forgetting["SGD"]
            text += f"; SGD's one full-batch step per round barely moves it ({sgd:.4f})"
        text += "."
    if mb.get("FedAvg"):
        dearest = max(mb, key=lambda m: mb[m])
        if mb[dearest] > mb["FedAvg"] * 1.01:
            text += f" {dearest} sent the most, {mb[dearest] / mb['FedAvg']:.2f}x FedAvg's bytes."
    return f"{text} {rule}"


PRESETS.add(
    "demo",
    demo,
    "the README's main command: 8 methods head to head on non-IID Fashion-MNIST, with forgetting",
    dataset="fashion-mnist",
    seeds={"ci": 1, "small": 3, "paper": 3},
    estimate="about 7 min (3 seeds, --jobs 2)",
)


def demo_tune(scale: str, seeds: list[int], data: Data) -> Plan:
    """The demo's tuning study: each compared method's grid of :data:`DEMO_GRIDS` (three
    points each; the same rounds, clients, local work and seeds for every point) trained on
    the clients' data less a held-out validation split, the value of the best final
    validation accuracy chosen (:mod:`fedretain.experiments.tuning`). The report lists every
    point's validation score and the chosen values, which the demo ships as
    :data:`DEMO_TUNED`. No forgetting diagnostic, the test set evaluated only at the end.
    """
    from functools import partial

    from fedretain.experiments.tuning import VAL_FRACTION, Grid, grid_points, tuning_paragraph

    base = {k: x for k, x in demo_base(scale, data).items() if not k.startswith("diagnostics")}
    rounds = base["rounds"]
    base.update(val_fraction=VAL_FRACTION, eval_every=rounds, checkpoint_every=rounds)
    grids = [Grid(m, DEMO_METHODS[m], *DEMO_GRIDS[m]) for m in DEMO_GRIDS]
    return Plan(
        title="Tuning the demo's methods alike on a validation split",
        source="none: the choice the demo ships (its hyper-parameters)",
        base=base,
        runs=[
            RunSpec(
                DEMO_SETTING, g.label(x), seed, {**g.overrides, g.key: x, "seed": seed}, g.method, x
            )
            for g, x, seed in grid_points(grids, seeds)
        ],
        metrics=["final", "wall_s"],
        reasons=scale_reasons(scale),
        paragraph=partial(tuning_paragraph, grids),
        notes=[
            "The table's accuracy is the test set's, shown only; the choice reads the "
            "validation split (the summary)."
        ],
    )


PRESETS.add(
    "demo-tune",
    demo_tune,
    "the demo's hyper-parameters: a grid of three per method, chosen on a validation split",
    dataset="fashion-mnist",
    seeds={"ci": 1, "small": 1, "paper": 3},
    estimate="about 7 min (1 seed, --jobs 2)",
)
