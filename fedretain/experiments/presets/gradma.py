"""GradMA (Luo et al., CVPR 2023) Tables 1 and 2, MNIST columns: FedAvg, FedAvgM, MIFA,
MIFAM, GradMA-S and GradMA over the Dirichlet ω grid (``gradma-table1``) and the grid of
workers per round S (``gradma-table2``); top accuracy and rounds to the column's accuracy."""

from __future__ import annotations

from typing import Any

from fedretain.experiments.presets.plan import (
    CI,
    CI_MLP,
    PRESETS,
    Claim,
    Data,
    Plan,
    Values,
    data_keys,
    every,
    fewer,
    ge,
    higher,
    highest,
    lt,
    paper_floor,
    pick,
    runs_over,
    scale_reasons,
)

GRADMA_COLUMNS = ("ω=1.0", "ω=0.1", "ω=0.01", "S=5", "S=50")  # MNIST columns of Tables 1, 2
GRADMA_TOP = {  # Table 1: top test accuracy (%), mean ± std
    "FedAvg": ("98.22±0.05", "97.11±0.39", "46.19±1.29", "49.65±3.88", "68.32±4.16"),
    "FedProx": ("98.16±0.09", "97.19±0.31", "46.82±0.96", "49.89±3.67", "67.97±4.27"),
    "FedMLB": ("98.31±0.06", "97.26±0.40", "54.53±0.39", "57.22±3.07", "68.44±3.26"),
    "MOON": ("98.18±0.12", "97.11±0.31", "46.26±1.35", "50.39±5.16", "68.75±4.50"),
    "SCAFFOLD": ("97.63±0.37", "93.94±1.18", "50.86±7.46", "39.97±4.88", "49.54±2.28"),
    "GradMA-W": ("98.15±0.10", "97.01±0.23", "63.34±3.75", "65.39±0.96", "65.13±2.54"),
    "FedAvgM": ("98.29±0.18", "97.20±0.30", "53.77±0.32", "57.87±3.64", "67.80±5.58"),
    "MIFA": ("98.02±0.12", "96.88±0.56", "66.92±2.53", "56.04±3.92", "52.84±4.89"),
    "MIFAM": ("98.02±0.15", "96.90±0.44", "67.15±2.23", "55.28±6.05", "53.35±6.84"),
    "GradMA-S": ("98.38±0.09", "97.35±0.28", "74.52±1.71", "75.93±0.97", "69.09±3.83"),
    "FedProxM": ("98.26±0.08", "97.13±0.34", "54.50±0.79", "58.59±4.58", "69.00±4.42"),
    "FedMLBM": ("98.26±0.16", "97.35±0.30", "61.12±1.48", "64.12±4.17", "68.78±3.28"),
    "MOONM": ("98.21±0.13", "97.04±0.42", "62.34±8.91", "57.98±5.51", "68.82±4.43"),
    "FedDyn": ("97.92±0.12", "96.03±0.46", "59.39±2.29", "65.36±5.20", "57.68±4.30"),
    "MimeLite": ("98.19±0.07", "97.10±0.31", "54.86±13.36", "51.04±4.15", "69.41±4.15"),
    "GradMA": ("98.39±0.04", "97.34±0.35", "77.97±1.28", "75.51±1.94", "66.68±3.03"),
}
# Table 2: rounds to reach the column's accuracy (None: "-", never reached in the paper's
# rounds); SCAFFOLD and MimeLite send twice FedAvg's bytes a round (the paper's "2x")
GRADMA_ROUNDS = {
    "FedAvg": (25, 115, 493, 299, 117),
    "FedProx": (25, 120, 478, 283, 117),
    "FedMLB": (22, 115, 280, 203, 78),
    "MOON": (25, 116, 493, 283, 117),
    "SCAFFOLD": (26, None, 60, None, None),
    "GradMA-W": (30, 111, 125, 78, 172),
    "FedAvgM": (19, 116, 280, 138, 79),
    "MIFA": (42, 85, 67, 62, 89),
    "MIFAM": (39, 80, 60, 62, 80),
    "GradMA-S": (16, 43, 38, 38, 56),
    "FedProxM": (22, 115, 280, 138, 96),
    "FedMLBM": (16, 87, 191, 113, 77),
    "MOONM": (19, 115, 186, 210, 95),
    "FedDyn": (19, 73, 136, 128, 96),
    "MimeLite": (32, 115, 277, 284, 113),
    "GradMA": (18, 49, 37, 29, 105),
}
# every method of Tables 1-2, the paper's order; one lr (0.05) for all and every momentum 0.5:
# the paper's tuned values are in its Appendix 2, which our copy of the paper lacks, so no
# method is tuned (each report says so)
_MOMENTUM = {"server_opt": "sgd", "server_opt.momentum": 0.5}
GRADMA_METHODS: dict[str, dict[str, Any]] = {
    "FedAvg": {"algorithm": "fedavg"},
    "FedProx": {"algorithm": "fedprox", "algo.mu": 0.01},
    "FedMLB": {"algorithm": "fedmlb"},
    "MOON": {"algorithm": "moon", "model.projection": 256},
    "SCAFFOLD": {"algorithm": "scaffold"},
    "GradMA-W": {"algorithm": "gradma-w"},
    "FedAvgM": {"algorithm": "fedavgm", "algo.beta": 0.5},
    "MIFA": {"algorithm": "mifa"},
    "MIFAM": {"algorithm": "mifam", "algo.beta": 0.5},
    "GradMA-S": {"algorithm": "gradma-s", "algo.beta1": 0.5},
    "FedProxM": {"algorithm": "fedproxm", "algo.mu": 0.01, "algo.beta": 0.5},
    "FedMLBM": {"algorithm": "fedmlb", **_MOMENTUM},
    "MOONM": {"algorithm": "moon", "model.projection": 256, **_MOMENTUM},
    "FedDyn": {"algorithm": "feddyn"},
    "MimeLite": {"algorithm": "mimelite", "algo.beta": 0.5},
    "GradMA": {"algorithm": "gradma", "algo.beta1": 0.5},
}
# gradma-table2's methods: FedAvg, the memory family and GradMA (its S grid at 3 seeds with
# all 16 would cost about 3x; the report names the baselines it leaves out)
GRADMA_TABLE2_METHODS = ("FedAvg", "FedAvgM", "MIFA", "MIFAM", "GradMA-S", "GradMA")
GRADMA_TARGETS = {
    "ω=1.0": 0.95,
    "ω=0.1": 0.95,
    "ω=0.01": 0.45,
    "S=5": 0.40,
    "S=10": 0.45,
    "S=50": 0.50,
}


def percent(text: str) -> str:
    """``"98.22±0.05"`` (percent) as an accuracy: ``"0.9822 ± 0.0005"``."""
    mean, std = (float(x) / 100 for x in text.split("±"))
    return f"{mean:.4f} ± {std:.4f}"


def gradma_plan(
    scale: str,
    seeds: list[int],
    data: Data,
    settings: dict[str, dict[str, Any]],
    table: str,
    methods: dict[str, dict[str, Any]],
) -> Plan:
    """The plan both GradMA presets share, over ``settings`` (name -> config keys), without
    claims: ``methods`` (name -> config keys), the paper's numbers of those columns and the
    targets."""
    base = {
        **data_keys(data),
        "partition": "dirichlet",
        "partition.alpha": 0.01,
        "clients": 100,
        "clients_per_round": 10,
        "local_steps": 5,
        "batch_size": 64,
        "lr": 0.05,
        "model": "mlp",
        "checkpoint_every": 20,
        **pick(
            scale,
            paper={"rounds": 500, "eval_every": 1},
            small={"rounds": 200, "eval_every": 5},
            ci={**CI, **CI_MLP, "local_steps": 5},
        ),
    }
    column = {"S=10": "ω=0.01"}  # Table 2's S=10 is Table 1's ω=0.01 column
    paper = {}
    for setting in settings:
        i = GRADMA_COLUMNS.index(column.get(setting, setting))
        for method in methods:
            paper[setting, method] = {
                "top": percent(GRADMA_TOP[method][i]),
                "to:ac": GRADMA_ROUNDS[method][i],
            }
    mnist = data.name == "mnist"
    ours = {s: t if mnist or t < 0.9 else 0.80 for s, t in GRADMA_TARGETS.items() if s in settings}
    reasons = scale_reasons(
        scale,
        small="scale=small: 200 rounds (the paper's MNIST runs reach round 493), evaluated every 5",
    )
    if not mnist and any(ours[s] != GRADMA_TARGETS[s] for s in ours):
        reasons.append(f"{data.name} stands in for mnist: 80 % stands for the paper's 95 % target")
    elif not mnist:
        reasons.append(f"{data.name} stands in for mnist (the paper's targets kept)")
    return Plan(
        title=f"GradMA (Luo et al., CVPR 2023), {table}",
        source="GradMA Table 1 (top accuracy) and Table 2 (rounds to ac), MNIST+NN columns",
        base=base,
        runs=runs_over(settings, methods, seeds),
        metrics=["top", "to:ac", "final"],
        paper=paper,
        reasons=reasons,
        floors={
            s: paper_floor(
                min(
                    float(GRADMA_TOP[m][GRADMA_COLUMNS.index(column.get(s, s))].split("±")[0])
                    for m in methods
                )
                / 100,
                "lowest top accuracy of the column",
            )
            for s in settings
        },
        tuning_note=(
            "Not tuned here: every method trains at lr 0.05 with every momentum 0.5 and the "
            "library's defaults of its own hyper-parameters; the paper tuned each method in its "
            "Appendix 2, which our copy of the paper lacks, so a tuned baseline might turn a "
            "verdict."
        ),
        targets={"ac": ours},
        paper_targets={"ac": {s: t for s, t in GRADMA_TARGETS.items() if s in settings}},
    )


def margin(v: Values, setting: str, a: str = "GradMA", b: str = "FedAvg") -> float | None:
    """``a``'s lead over ``b`` in top accuracy (None when either is missing)."""
    x, y = v.get(setting, a, "top"), v.get(setting, b, "top")
    return None if x is None or y is None else x - y


def gradma_lead_claims(hard: str, easy: str, why: str) -> list[Claim]:
    """GradMA against FedAvg in the hardest setting (top accuracy, rounds to ac), and its lead
    there larger than in the easiest one."""
    return [
        Claim(
            f"{hard}: GradMA's top accuracy beats FedAvg's",
            higher(hard, "GradMA", "FedAvg", "top"),
            why,
        ),
        Claim(
            f"{hard}: GradMA reaches ac in fewer rounds than FedAvg",
            fewer(hard, "GradMA", "FedAvg", "to:ac"),
            why,
        ),
        Claim(
            f"GradMA's lead over FedAvg (top accuracy) is larger at {hard} than at {easy}",
            lambda v: lt(margin(v, easy), margin(v, hard), "top", f"lead at {hard} > at {easy}"),
            why,
        ),
    ]


def fedavg_falls(v: Values) -> bool | None:
    """FedAvg's top accuracy falls from ω=1.0 to ω=0.1 and from ω=0.1 to ω=0.01."""
    a, b, c = (v.get(f"ω={w}", "FedAvg", "top") for w in (1.0, 0.1, 0.01))
    return every([lt(b, a, "top", "ω=0.1 < ω=1.0"), lt(c, b, "top", "ω=0.01 < ω=0.1")])


def gradma_table1(scale: str, seeds: list[int], data: Data) -> Plan:
    """GradMA (Luo et al., CVPR 2023), MNIST with 100 workers, S = 10, I = 5 local steps,
    Dirichlet ω ∈ {1.0, 0.1, 0.01}: FedAvg, FedAvgM, MIFA, MIFAM, GradMA-S, GradMA (every
    server momentum 0.5), top accuracy (Table 1) and rounds to the column's accuracy (Table 2).

    ``small``: experiments/gradma_dirichlet.toml, 200 rounds. Measured with ``--jobs 2``
    (2026-11-28, the paper's 16 methods, 3 seeds): 18,089 s of training in all, about 2.5 hours
    on 2 free cores (the committed run took longer: the machine ran other presets beside it).
    """
    settings = {f"ω={w}": {"partition.alpha": w} for w in (1.0, 0.1, 0.01)}
    plan = gradma_plan(
        scale,
        seeds,
        data,
        settings,
        "Tables 1 and 2: the Dirichlet ω grid (S = 10)",
        GRADMA_METHODS,
    )
    memory = (
        "GradMA's gain is its server memory of every worker's update under extreme skew "
        "(ω = 0.01: most workers hold one class), built up over hundreds of rounds"
    )
    plan.claims = [
        *gradma_lead_claims("ω=0.01", "ω=1.0", memory),
        Claim(
            "ω=0.01: GradMA's top accuracy is the highest of all 16 methods",
            highest("ω=0.01", "GradMA", [m for m in GRADMA_METHODS if m != "GradMA"], "top"),
            memory,
        ),
        Claim(
            "ω=0.01: GradMA-S beats MIFA and MIFAM (top accuracy)",
            highest("ω=0.01", "GradMA-S", ["MIFA", "MIFAM"], "top"),
            memory,
        ),
        Claim(
            "FedAvg's top accuracy falls as ω falls",
            fedavg_falls,
            "with few rounds FedAvg's accuracy at ω=1.0 and ω=0.1 is still rising; the gap "
            "appears at convergence",
        ),
    ]
    return plan


def gradma_table2(scale: str, seeds: list[int], data: Data) -> Plan:
    """GradMA (Luo et al., CVPR 2023), MNIST with Dirichlet ω = 0.01 and S ∈ {5, 10, 50}
    workers per round (I = 5 local steps): the same methods as ``gradma-table1``, top accuracy
    (Table 1) and rounds to the column's accuracy (Table 2).

    ``small``: 200 rounds. Measured on 2 cores with ``--jobs 2`` (2026-11-28, 3 seeds, 54
    runs): 4,896 s of training in all, 42 minutes of wall time (GradMA's runs take 150-240 s).
    """
    settings = {f"S={s}": {"clients_per_round": s} for s in (5, 10, 50)}
    if scale == "ci":
        settings = {
            k: {"clients_per_round": min(v["clients_per_round"], 5)} for k, v in settings.items()
        }
    methods = {m: GRADMA_METHODS[m] for m in GRADMA_TABLE2_METHODS}
    plan = gradma_plan(
        scale, seeds, data, settings, "Tables 1 and 2: the S grid (ω = 0.01)", methods
    )
    fewer_workers = (
        "GradMA's memory stands in for the workers not sampled; its lead shows at small S "
        "over hundreds of rounds"
    )
    plan.left_out = (
        ", ".join(m for m in GRADMA_METHODS if m not in GRADMA_TABLE2_METHODS)
        + ": the S grid at 3 seeds with all 16 methods costs about three times the CPU time of "
        "these six (S=50 trains 50 clients a round); `gradma-table1` runs all 16 at S = 10."
    )
    plan.claims = [
        *gradma_lead_claims("S=5", "S=50", fewer_workers),
        Claim(
            "S=50: GradMA's lead vanishes (FedAvg within 2 points of it, or above)",
            lambda v: ge(0.02, margin(v, "S=50"), "exact", "GradMA's lead <= 2 points"),
            "the paper attributes it to over-fitting of a simple model with many workers per round",
        ),
    ]
    return plan


PRESETS.add(
    "gradma-table1",
    gradma_table1,
    "GradMA Tables 1-2, MNIST ω grid: FedAvg, FedAvgM, MIFA, MIFAM, GradMA-S, GradMA",
    dataset="mnist",
    standin="fashion-mnist",
    seeds={"ci": 1, "small": 3, "paper": 3},
    estimate="about 2.5 h (3 seeds, --jobs 2; 18,089 s of training measured 2026-11-28)",
    paper="GradMA (Luo et al., CVPR 2023)",
)
PRESETS.add(
    "gradma-table2",
    gradma_table2,
    "GradMA Tables 1-2, MNIST S grid at ω=0.01: the same methods",
    dataset="mnist",
    standin="fashion-mnist",
    seeds={"ci": 1, "small": 3, "paper": 3},
    estimate="about 45 min (3 seeds, --jobs 2; 4,896 s of training measured 2026-11-28)",
    paper="GradMA (Luo et al., CVPR 2023)",
)
