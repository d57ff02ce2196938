"""FedCurv (Shoham et al., 2019) Table 1: rounds to accuracy on non-IID MNIST, FedCurv over
a λ sweep beside FedAvg and FedProx at E = 10 and E = 50 local epochs."""

from __future__ import annotations

import math
from typing import Any

from fedretain.studies.presets.plan import (
    CI,
    CI_MLP,
    INF,
    PRESETS,
    Claim,
    Data,
    Plan,
    RunSpec,
    Sweep,
    Tuned,
    Values,
    data_keys,
    fewer,
    lt,
    paper_numbers,
    pick,
    runs,
    scale_reasons,
    tuning_plan,
)
from fedretain.studies.tuning import (
    TUNING_SEED,
    VAL_FRACTION,
    Criterion,
    Grid,
    grid_points,
    tuned,
    tuning_seeds,
)

FEDCURV_TABLE1 = {  # rounds to 95 %, 90 %, 85 %
    "E=50": {"FedCurv": (38, 9, 6), "FedProx": (140, 22, 16), "FedAvg": (76, 30, 22)},
    "E=10": {"FedCurv": (99, 35, 27), "FedProx": (115, 46, 33), "FedAvg": (106, 51, 43)},
}
# the paper's targets, and Fashion-MNIST's in their place (FedAvg reaches about 76 % in 60
# rounds there)
PAPER_TARGETS = (0.95, 0.90, 0.85)
STANDIN_TARGETS = (0.75, 0.70, 0.65)
# the tuning grids of λ and μ (the paper: "a multiplicative grid using a factor of 10"); the
# λ sweep of the report is the same grid, so the chosen λ is one of its runs
FEDCURV_LAMBDAS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
FEDPROX_MUS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
FEDCURV_TUNE_COMMAND = (
    "fedretain reproduce fedcurv-tune --out results/fedcurv-tune --scale small --jobs 2"
)


def fedcurv_setup(
    scale: str, data: Data
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, float], dict[str, float]]:
    """What Table 1 and its tuning share: the base config, the settings (E=10, E=50: name ->
    config keys), our targets and the paper's (label -> accuracy), labelled by ours."""
    epochs = pick(scale, paper=(10, 50), small=(2, 10), ci=(10, 50))
    base = {
        **data_keys(data),
        "partition": "shards",
        "partition.classes_per_client": 2,
        "clients": 96,
        "clients_per_round": 10,
        "batch_size": 50,
        "lr": 0.1,
        "eval_every": 1,
        "checkpoint_every": 10,
        **pick(
            scale,
            paper={"model": "cnn2", "rounds": 150},
            small={"model": "mlp", "rounds": 60},
            ci={**CI, **CI_MLP},
        ),
    }
    settings = {
        label: ({} if scale == "ci" else {"local_epochs": e})
        for label, e in zip(("E=10", "E=50"), epochs, strict=True)
    }
    mnist = data.name == "mnist"
    ours = PAPER_TARGETS if mnist else STANDIN_TARGETS
    labels = [
        f"{100 * o:g} %" if mnist else f"{100 * o:g} % (the paper's {100 * p:g} %)"
        for o, p in zip(ours, PAPER_TARGETS, strict=True)
    ]
    targets = dict(zip(labels, ours, strict=True))
    paper_targets = dict(zip(labels, PAPER_TARGETS, strict=True))
    return base, settings, targets, paper_targets


def fedcurv_grids() -> list[Grid]:
    """The grids of FedCurv's λ and FedProx's μ (six values each, one learning rate)."""
    return [
        Grid(
            "FedCurv",
            {"algorithm": "fedcurv"},
            {"algo.lambda": FEDCURV_LAMBDAS},
            {"algo.lambda": (0.0, math.inf)},
        ),
        Grid(
            "FedProx",
            {"algorithm": "fedprox"},
            {"algo.mu": FEDPROX_MUS},
            {"algo.mu": (0.0, math.inf)},
        ),
    ]


def fedcurv_tune(scale: str, seeds: list[int], data: Data) -> Plan:
    """FedCurv's λ and FedProx's μ chosen per E as the paper chose them: the fewest rounds to
    the 90 % target (Fashion-MNIST: 70 %), here on a validation split held out of the clients'
    training data (the paper read the test set), with the final validation accuracy breaking
    ties; six values each (:func:`fedcurv_grids`), on the tuning seed
    (:data:`~fedretain.studies.tuning.TUNING_SEED`). ``fedcurv-table1`` runs FedProx at
    the chosen μ and reads FedCurv at the chosen λ from its sweep."""
    base, settings, targets, _ = fedcurv_setup(scale, data)
    base.update(val_fraction=VAL_FRACTION, checkpoint_every=base["rounds"])
    grids = fedcurv_grids()
    criterion = Criterion(target=list(targets.values())[1])
    specs = [
        RunSpec(setting, g.label(p), seed, {**keys, **g.overrides, **p, "seed": seed}, g.method)
        for setting, keys in settings.items()
        for g, p, seed in grid_points(grids, tuning_seeds(seeds))
    ]
    return tuning_plan(
        "Tuning FedCurv's λ and FedProx's μ for FedCurv Table 1 on a validation split",
        "none: the choice fedcurv-table1 ships",
        base,
        specs,
        grids,
        criterion,
        scale_reasons(
            scale, small="scale=small: the MLP, 60 rounds, E=10 and E=50 run 2 and 10 epochs"
        ),
    )


PRESETS.add(
    "fedcurv-tune",
    fedcurv_tune,
    "FedCurv Table 1's λ and μ, chosen per E on a validation split",
    dataset="mnist",
    standin="fashion-mnist",
    seeds={"ci": 1, "small": 1, "paper": 1},
    estimate="about 30 min (1 tuning seed, --jobs 2)",
    paper="FedCurv (Shoham et al., 2019)",
)


def fedcurv_tuned(settings: list[str], target: float) -> list[Tuned]:
    """The λ and μ the package ships per setting (``tuned.json``'s ``fedcurv-table1``: the
    committed ``results/fedcurv-tune/choices.json``), scored by rounds to ``target``."""
    chosen = tuned("fedcurv-table1")["settings"]
    out = []
    for setting in settings:
        for method, c in chosen[setting].items():
            if c["chosen"] is None:
                continue
            row = f"FedCurv λ={c['chosen']['algo.lambda']:g}" if method == "FedCurv" else method
            out.append(
                Tuned(method, c["chosen"], c["grid"], c["points"], c["edge"], setting, row, target)
            )
    return out


def fedcurv_table1(scale: str, seeds: list[int], data: Data) -> Plan:
    """FedCurv (Shoham et al., 2019) Table 1: rounds to 95/90/85 % on non-IID MNIST (96
    devices of two label blocks each), FedCurv over a λ sweep with FedAvg and FedProx beside
    it, at E = 10 and E = 50 local epochs.

    The text conversion lost the paper's batch size, participation, learning rate and λ; we
    use batch 50, 10 of 96 devices per round, lr 0.1. λ and FedProx's μ are chosen per E as
    the paper chose them, the fewest rounds to 90 %, on a validation split and a tuning seed
    (``fedretain reproduce fedcurv-tune``: :func:`fedcurv_tune`); the claims read FedCurv at
    the chosen λ (one point of the sweep) and FedProx at the chosen μ. ``paper``: the PyTorch
    example CNN (``cnn2``), 150 rounds. ``small``: the MLP, 60 rounds, E = 10 and E = 50 run
    2 and 10 epochs; Fashion-MNIST's targets are 75/70/65 % (FedAvg reaches about 76 % in 60
    rounds there), and the reports' headers say so.
    """
    base, settings, targets, paper_targets = fedcurv_setup(scale, data)
    lambdas = pick(scale, paper=FEDCURV_LAMBDAS, small=FEDCURV_LAMBDAS, ci=(1e-4, 1e-2, 1.0))
    choices = fedcurv_tuned(list(settings), list(targets.values())[1])
    lam = {t.setting: t.chosen["algo.lambda"] for t in choices if t.method == "FedCurv"}
    mu = {t.setting: t.chosen["algo.mu"] for t in choices if t.method == "FedProx"}
    specs = []
    for label, keys in settings.items():
        methods = {
            "FedAvg": {"algorithm": "fedavg"},
            "FedProx": {"algorithm": "fedprox", "algo.mu": mu[label]},
        }
        specs += runs(label, methods, seeds, keys)
        for x in sorted({*lambdas, lam[label]}):  # the sweep: one series, λ its x
            point = {f"FedCurv λ={x:g}": {"algorithm": "fedcurv", "algo.lambda": x}}
            specs += runs(label, point, seeds, keys, series="FedCurv", x=x)
    t90, t95 = (f"to:{k}" for k in list(targets)[1::-1])

    def curv(setting: str) -> str:
        return f"FedCurv λ={lam[setting]:g}"

    def speedup(setting: str, v: Values) -> float | None:
        a, b = v.get(setting, curv(setting), t90), v.get(setting, "FedAvg", t90)
        if a is None or b is None or a == INF or b == INF:
            return None
        return b / max(a, 1)

    tuned_why = (
        "the penalty pays off when many local epochs pull the devices' models apart; λ and μ "
        "are chosen on validation with a tuning seed, so the evaluation seeds may favour "
        "another value"
    )
    claims = [
        Claim(
            f"{e}: FedCurv (λ chosen) reaches 90 % in fewer rounds than FedAvg",
            fewer(e, curv(e), "FedAvg", t90),
            tuned_why,
        )
        for e in ("E=50", "E=10")
    ]
    claims += [
        Claim(
            "FedCurv's speed-up over FedAvg (rounds to 90 %) is larger at E=50 than at E=10",
            lambda v: lt(speedup("E=10", v), speedup("E=50", v), "ratio", "E=50 > E=10"),
            tuned_why,
        ),
        Claim(
            "E=50: FedProx (μ chosen) reaches 90 % in fewer rounds than FedAvg",
            fewer("E=50", "FedProx", "FedAvg", t90),
            tuned_why,
        ),
        Claim(
            "E=50: FedProx reaches 95 % in more rounds than FedAvg (stiffness costs it late)",
            fewer("E=50", "FedAvg", "FedProx", t95),
            tuned_why,
        ),
    ]
    reasons = scale_reasons(
        scale,
        small="scale=small: the MLP instead of the PyTorch example CNN, 60 rounds, E=10 and "
        "E=50 run 2 and 10 local epochs",
    )
    if data.name != "mnist":
        reasons.append(
            f"{data.name} stands in for mnist: rounds to 75/70/65 % stand for the paper's "
            "95/90/85 % (the columns say both)"
        )
    labels = [f"to:{k}" for k in targets]
    return Plan(
        title="FedCurv (Shoham et al., 2019), Table 1: rounds to accuracy on non-IID MNIST",
        source="FedCurv Table 1 (its λ, batch size, participation and lr were lost in the text)",
        base=base,
        runs=specs,
        metrics=[*labels, "final", "top"],
        paper=paper_numbers(labels, FEDCURV_TABLE1),
        claims=claims,
        reasons=reasons,
        targets=targets,
        paper_targets=paper_targets,
        sweep=Sweep("λ", log=True, baseline="FedAvg"),
        tuning=choices,
        tuning_note=(
            "FedCurv's λ and FedProx's μ were chosen per E by the fewest rounds to the 90 % "
            f"target (here {100 * list(targets.values())[1]:g} %) on a validation split, on "
            f"tuning seed {TUNING_SEED}, which is no evaluation seed (`{FEDCURV_TUNE_COMMAND}`; "
            "its report, `results/fedcurv-tune/report.md`, lists every point); the one "
            "learning rate (0.1) is the same for every method, as in the paper."
        ),
        notes=[
            "The paper's FedCurv numbers (at its tuned λ) sit on the row of the λ chosen on "
            "validation (see Tuning), not on the λ whose test accuracy is highest."
        ],
    )


PRESETS.add(
    "fedcurv-table1",
    fedcurv_table1,
    "FedCurv Table 1: a λ sweep of FedCurv beside FedAvg and FedProx at E=10 and E=50",
    dataset="mnist",
    standin="fashion-mnist",
    seeds={"ci": 1, "small": 3, "paper": 3},
    estimate="about 45 min (3 seeds, --jobs 2)",
    paper="FedCurv (Shoham et al., 2019)",
)
