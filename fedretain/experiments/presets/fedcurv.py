"""FedCurv (Shoham et al., 2019) Table 1: rounds to accuracy on non-IID MNIST, FedCurv over
a λ sweep beside FedAvg and FedProx at E = 10 and E = 50 local epochs."""

from __future__ import annotations

from collections.abc import Callable

from fedretain.experiments.presets.plan import (
    CI,
    CI_MLP,
    INF,
    PRESETS,
    Claim,
    Data,
    Plan,
    Sweep,
    Values,
    best,
    data_keys,
    fewer,
    lt,
    paper_numbers,
    pick,
    runs,
    scale_reasons,
)

FEDCURV_TABLE1 = {  # rounds to 95 %, 90 %, 85 %
    "E=50": {"FedCurv": (38, 9, 6), "FedProx": (140, 22, 16), "FedAvg": (76, 30, 22)},
    "E=10": {"FedCurv": (99, 35, 27), "FedProx": (115, 46, 33), "FedAvg": (106, 51, 43)},
}


def fedcurv_table1(scale: str, seeds: list[int], data: Data) -> Plan:
    """FedCurv (Shoham et al., 2019) Table 1: rounds to 95/90/85 % on non-IID MNIST (96
    devices of two label blocks each), FedCurv over a λ sweep with FedAvg (and FedProx)
    beside it, at E = 10 and E = 50 local epochs.

    The text conversion lost the paper's batch size, participation, learning rate and λ; we
    use batch 50, 10 of 96 devices per round, lr 0.1, and sweep λ. ``paper``: the PyTorch
    example CNN (``cnn2``), 150 rounds. ``small``: the MLP, 60 rounds, E = 10 and E = 50 run
    2 and 10 epochs; Fashion-MNIST's targets are 75/70/65 % (FedAvg reaches about 76 % in
    60 rounds there). Measured on 2 cores with ``--jobs 2`` (2026-11-26): 3,359 s of training
    in all, about 30 minutes for 2 seeds (3 timed rounds per run had estimated 20).
    """
    lambdas = pick(
        scale,
        paper=[1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0],
        small=[1e-4, 1e-3, 1e-2, 1e-1, 1.0],
        ci=[1e-4, 1e-2, 1.0],
    )
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
    baselines = {
        "FedAvg": {"algorithm": "fedavg"},
        "FedProx": {"algorithm": "fedprox", "algo.mu": 0.01},
    }
    specs = []
    for label, e in zip(("E=10", "E=50"), epochs, strict=True):
        keys = {} if scale == "ci" else {"local_epochs": e}
        specs += runs(label, baselines, seeds, keys)
        for lam in lambdas:  # the sweep: one series, λ its x
            point = {f"FedCurv λ={lam:g}": {"algorithm": "fedcurv", "algo.lambda": lam}}
            specs += runs(label, point, seeds, keys, series="FedCurv", x=lam)
    mnist = data.name == "mnist"
    targets = {"95%": 0.95, "90%": 0.90, "85%": 0.85}
    if not mnist:  # Fashion-MNIST's two-class shards: FedAvg reaches about 76 % in 60 rounds
        targets = {"95%": 0.75, "90%": 0.70, "85%": 0.65}
    curv = [f"FedCurv λ={lam:g}" for lam in lambdas]

    def best_curv(setting: str) -> Callable[[Values], float | None]:
        return lambda v: best(v, setting, curv, "to:90%", lower=True)

    def speedup(setting: str, v: Values) -> float | None:
        a, b = best_curv(setting)(v), v.get(setting, "FedAvg", "to:90%")
        if a is None or b is None or a == INF or b == INF:
            return None
        return b / max(a, 1)

    def larger_at_50(v: Values) -> bool | None:
        fifty, ten = speedup("E=50", v), speedup("E=10", v)
        return None if fifty is None or ten is None else lt(ten, fifty)

    tuned = (
        "the paper tuned λ (and FedProx's μ) per E for the fewest rounds to 90 %; the penalty "
        "pays off when many local epochs pull the devices' models apart"
    )
    claims = [
        Claim(
            f"{e}: FedCurv (best λ) reaches 90 % in fewer rounds than FedAvg",
            lambda v, e=e: lt(best_curv(e)(v), v.get(e, "FedAvg", "to:90%")),
            tuned,
        )
        for e in ("E=50", "E=10")
    ]
    claims += [
        Claim(
            "FedCurv's speed-up over FedAvg (rounds to 90 %) is larger at E=50 than at E=10",
            larger_at_50,
            tuned,
        ),
        Claim(
            "E=50: FedProx reaches 90 % in fewer rounds than FedAvg",
            fewer("E=50", "FedProx", "FedAvg", "to:90%"),
            tuned,
        ),
        Claim(
            "E=50: FedProx reaches 95 % in more rounds than FedAvg (stiffness costs it late)",
            fewer("E=50", "FedAvg", "FedProx", "to:95%"),
            tuned,
        ),
    ]
    reasons = scale_reasons(
        scale,
        small="scale=small: the MLP instead of the PyTorch example CNN, 60 rounds, E=10 and "
        "E=50 run 2 and 10 local epochs",
    )
    if not mnist:
        reasons.append(
            f"{data.name} stands in for mnist: rounds to 75/70/65 % stand for the paper's "
            "95/90/85 %"
        )
    return Plan(
        title="FedCurv (Shoham et al., 2019), Table 1: rounds to accuracy on non-IID MNIST",
        source="FedCurv Table 1 (its λ, batch size, participation and lr were lost in the text)",
        base=base,
        runs=specs,
        metrics=["to:95%", "to:90%", "to:85%", "final", "top"],
        paper=paper_numbers(("to:95%", "to:90%", "to:85%"), FEDCURV_TABLE1),
        claims=claims,
        reasons=reasons,
        targets=targets,
        paper_targets={"95%": 0.95, "90%": 0.90, "85%": 0.85},
        sweep=Sweep("λ", log=True, baseline="FedAvg"),
        notes=[
            "The paper's FedCurv numbers (at its tuned λ) sit on the row of our best λ "
            "(the highest final accuracy)."
        ],
    )


PRESETS.add(
    "fedcurv-table1",
    fedcurv_table1,
    "FedCurv Table 1: a λ sweep of FedCurv beside FedAvg and FedProx at E=10 and E=50",
    dataset="mnist",
    standin="fashion-mnist",
    seeds={"ci": 1, "small": 2, "paper": 3},
    estimate="about 30 min (2 seeds, --jobs 2)",
)
