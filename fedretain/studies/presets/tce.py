"""TCE (Legate et al., 2023) Table 1: FedAvg with and without the truncated cross-entropy
over a learning-rate grid, GroupNorm and BatchNorm: ``tce-table1`` (the CIFAR-10 column, at
Dirichlet α = 0.1 and α = 0.01), with App. Table 2's learning rates within 2, 3 and 5 points of
each best; the table's numbers and the plan its CIFAR-100 and FEMNIST columns share
(:mod:`~fedretain.studies.presets.tce_columns`: ``tce-cifar100``, ``tce-femnist``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fedretain.studies.presets.plan import (
    CI,
    CI_REASON,
    PRESETS,
    Claim,
    Data,
    Plan,
    RunSpec,
    Sweep,
    Values,
    data_keys,
    every,
    ge,
    lt,
    paper_floor,
    pick,
    runs,
    scale_reasons,
    standin_reason,
)

TCE_VARIANTS = {
    "FedAvg (GN)": {"loss": "ce", "model.norm": "group"},
    "FedAvg+TCE (GN)": {"loss": "tce", "model.norm": "group"},
    "FedAvg+TCE (BN)": {"loss": "tce", "model.norm": "batch"},
    # not in the paper's table ("known to yield poor performance"): the claim that TCE is
    # robust to BatchNorm where FedAvg degrades needs it beside TCE (BN)
    "FedAvg (BN)": {"loss": "ce", "model.norm": "batch"},
}
TCE_CIFAR10 = {  # lr -> final accuracy of the first three TCE_VARIANTS; NC: did not converge
    0.7: ("NC", "NC", "0.805 ± 0.039"),
    0.5: ("0.777 ± 0.033", "0.751 ± 0.039", "0.832 ± 0.028"),
    0.3: ("0.770 ± 0.022", "0.836 ± 0.029", "0.836 ± 0.010"),
    0.1: ("0.790 ± 0.017", "0.846 ± 0.010", "0.841 ± 0.020"),
    0.07: ("0.751 ± 0.020", "0.832 ± 0.029", "0.859 ± 0.009"),
    0.05: ("0.742 ± 0.087", "0.834 ± 0.011", "0.852 ± 0.010"),
    0.03: ("0.787 ± 0.011", "0.859 ± 0.004", "0.850 ± 0.018"),
    0.01: ("0.742 ± 0.065", "0.825 ± 0.004", "0.845 ± 0.015"),
    0.007: ("0.739 ± 0.030", "0.751 ± 0.005", "0.747 ± 0.013"),
}
# Table 1's CIFAR-100 and FEMNIST columns, as TCE_CIFAR10. How our (extracted) copy of the
# table was read: its 27 rows come in blocks of three, FedAvg (GN), TCE (GN), TCE (BN), one
# block per learning rate from 0.7 down to 0.007; each rate's label sits on one row of its block
# (0.7, 0.5, 0.3, 0.1, 0.05 and 0.01 on TCE (GN)'s, 0.07, 0.03 and 0.007 on FedAvg's, "group
# 0.03" and "group 0.007" in one cell), norm labels are missing or garbled ("aroun" for group at
# 0.5, "batch" in the lr column at 0.01) and FedAvg's CIFAR-10 cells at 0.3 and 0.1 print as
# "0.77" and "0.79". Every block's CIFAR-10 cells equal TCE_CIFAR10[lr] row by row, so each
# row's other two cells are read as that rate's and variant's. FEMNIST's cells have no ± .
TCE_CIFAR100 = {
    0.7: ("NC", "NC", "0.350 ± 0.037"),
    0.5: ("0.223 ± 0.059", "0.382 ± 0.036", "0.354 ± 0.019"),
    0.3: ("0.324 ± 0.148", "0.438 ± 0.041", "0.309 ± 0.060"),
    0.1: ("0.365 ± 0.131", "0.451 ± 0.046", "0.397 ± 0.044"),
    0.07: ("0.486 ± 0.036", "0.429 ± 0.024", "0.478 ± 0.024"),
    0.05: ("0.456 ± 0.031", "0.484 ± 0.030", "0.506 ± 0.008"),
    0.03: ("0.486 ± 0.013", "0.520 ± 0.006", "0.513 ± 0.030"),
    0.01: ("0.429 ± 0.052", "0.524 ± 0.010", "0.479 ± 0.015"),
    0.007: ("0.440 ± 0.041", "0.501 ± 0.018", "0.524 ± 0.010"),
}
TCE_FEMNIST = {
    0.7: ("NC", "NC", "0.803"),
    0.5: ("0.695", "0.700", "0.831"),
    0.3: ("0.801", "0.787", "0.850"),
    0.1: ("0.805", "0.806", "0.850"),
    0.07: ("0.805", "0.774", "0.836"),
    0.05: ("0.829", "0.791", "0.830"),
    0.03: ("0.735", "0.732", "0.813"),
    0.01: ("0.780", "0.809", "0.791"),
    0.007: ("0.780", "0.814", "0.782"),
}
TCE_TABLES = {"cifar10": TCE_CIFAR10, "cifar100": TCE_CIFAR100, "femnist": TCE_FEMNIST}
COLUMNS = {"cifar10": "CIFAR-10", "cifar100": "CIFAR-100", "femnist": "FEMNIST"}  # their names
# App. Table 2 (§A.2): per column and variant, (best accuracy, its lr; None where the table
# gives none) and the learning rates within 2, 3 and 5 "%" of the best. The lists fit absolute
# points of accuracy, not relative percents (CIFAR-10, TCE (GN): lr 0.07's 0.832 is within "3 %"
# of 0.860, which 3 % of 0.860 would leave out). They do not all follow from Table 1's numbers:
# FEMNIST's FedAvg best reads 0.850 where Table 1's FedAvg peaks at 0.829 (lr 0.05; the row's
# own lists fit 0.829); its CIFAR-10 FedAvg lists leave out lr 0.5 (0.777), its CIFAR-100 ones
# count lr 0.03's 0.486 within 3 points of the best 0.486, not 2. A claim keeps only what both
# tables support (within_claim).
TCE_TOLERANCES = (0.02, 0.03, 0.05)
TCE_WITHIN: dict[
    str, dict[str, tuple[tuple[float, float | None], tuple[tuple[float, ...], ...]]]
] = {
    "cifar10": {
        "FedAvg (GN)": (
            (0.796, 0.1),
            ((0.1, 0.03), (0.3, 0.1, 0.03), (0.3, 0.1, 0.07, 0.03)),
        ),
        "FedAvg+TCE (GN)": (
            (0.860, 0.03),
            ((0.1, 0.03), (0.3, 0.1, 0.07, 0.05, 0.03), (0.3, 0.1, 0.07, 0.05, 0.03, 0.01)),
        ),
        "FedAvg+TCE (BN)": (
            (0.859, 0.07),
            ((0.1, 0.07, 0.05, 0.01), (0.3, 0.1, 0.07, 0.05, 0.01), (0.3, 0.1, 0.07, 0.05, 0.01)),
        ),
    },
    "cifar100": {
        "FedAvg (GN)": ((0.486, 0.07), ((0.07,), (0.07, 0.03), (0.07, 0.05, 0.03, 0.007))),
        "FedAvg+TCE (GN)": (
            (0.524, 0.01),
            ((0.01,), (0.05, 0.03, 0.01, 0.007), (0.05, 0.03, 0.01, 0.007)),
        ),
        "FedAvg+TCE (BN)": (
            (0.524, 0.007),
            ((0.05, 0.03, 0.007), (0.05, 0.03, 0.007), (0.07, 0.05, 0.03, 0.01, 0.007)),
        ),
    },
    "femnist": {
        "FedAvg (GN)": (
            (0.850, None),
            ((0.05,), (0.05, 0.07, 0.1, 0.3), (0.007, 0.01, 0.05, 0.07, 0.1, 0.3)),
        ),
        "FedAvg+TCE (GN)": (
            (0.814, None),
            (
                (0.007, 0.01, 0.1),
                (0.007, 0.01, 0.05, 0.07, 0.1, 0.3),
                (0.007, 0.01, 0.05, 0.07, 0.1, 0.3),
            ),
        ),
        "FedAvg+TCE (BN)": (
            (0.850, None),
            (
                (0.05, 0.07, 0.1, 0.3, 0.5),
                (0.05, 0.07, 0.1, 0.3, 0.5),
                (0.05, 0.07, 0.1, 0.3, 0.5, 0.7),
            ),
        ),
    },
}
# the paper's setting (§3, "Datasets and Setting" and "Validation"): 100 clients, equally sized
# Dirichlet partitions at α = 0.1, each client's data 90 % training and 10 % validation, 4,000
# rounds (every training run three times: the presets' 3 seeds)
TCE_SETTING: dict[str, Any] = {
    "clients": 100,
    "partition.alpha": 0.1,
    "val_fraction": 0.1,
    "rounds": 4000,
}
# not in our copy of the paper's text: tce-table1's choices, kept for every column (ResNet-18,
# 10 clients a round; 2 local epochs at batch 32 as experiments/tce_dirichlet.toml)
TCE_CHOSEN: dict[str, Any] = {
    "model": "resnet18",
    "clients_per_round": 10,
    "local_epochs": 2,
    "batch_size": 32,
}
TCE_ALPHA = f"α={TCE_SETTING['partition.alpha']:g}"  # the setting of every column: "α=0.1"
# FEMNIST's stand-in (tce_femnist's docstring says why not Fashion-MNIST): EMNIST, the same
# NIST handwritten characters; at paper scale its byclass split, FEMNIST's 62 classes; at small
# its balanced split (47 classes), whose test and validation passes cover 30,080 images where
# byclass's cover 186,116 (about 6x the evaluation time of a run)
EMNIST_SPLITS = {"paper": "byclass", "small": "balanced"}
EMNIST_CLASSES = {"byclass": 62, "balanced": 47}
# the claims' likeliest reasons not to hold at small scale (tce-table1's, shared)
TCE_LONG = (
    "TCE's gains in the paper come after 4,000 rounds of 2 local epochs with ResNet-18; "
    "few rounds of few local steps leave little forgetting for TCE to prevent"
)
TCE_BN = (
    "BatchNorm's running statistics are averaged over clients like the weights; with 20 "
    "rounds of 10 steps they drift less apart than over the paper's 4,000 rounds"
)


def tce_method(variant: str, lr: float) -> str:
    """The name ``variant`` at learning rate ``lr`` goes by in the plan's tables."""
    return f"{variant}, lr={lr:g}"


def cell_accuracy(cell: str) -> float | None:
    """A cell of Table 1 as a number: ``"0.777 ± 0.033"`` -> 0.777; None for NC."""
    return None if cell == "NC" else float(cell.split("±")[0])


def tce_lrs(scale: str) -> list[float]:
    """The learning rates a TCE plan sweeps at ``scale``: the table's 9 at ``paper``."""
    return pick(
        scale,
        paper=sorted(TCE_CIFAR10, reverse=True),
        small=[0.3, 0.1, 0.03, 0.01],
        ci=[0.3, 0.03],
    )


def tce_base(scale: str, data: Data) -> dict[str, Any]:
    """The config every run of a TCE plan starts from at ``scale`` (:func:`tce_table1`'s
    docstring says each scale's); EMNIST standing in for FEMNIST reads one of its splits
    (:data:`EMNIST_SPLITS`)."""
    emnist = data.name == "emnist" and scale in EMNIST_SPLITS
    split = {"dataset.split": EMNIST_SPLITS[scale]} if emnist else {}
    base = {
        **data_keys(data),
        **split,
        "partition": "dirichlet",
        "partition.balance": True,
        "clients": TCE_SETTING["clients"],
        "clients_per_round": TCE_CHOSEN["clients_per_round"],
        "val_fraction": TCE_SETTING["val_fraction"],
        "local_epochs": TCE_CHOSEN["local_epochs"],
        "batch_size": TCE_CHOSEN["batch_size"],
        "checkpoint_every": 10,
        **pick(
            scale,
            paper={"model": TCE_CHOSEN["model"], "rounds": TCE_SETTING["rounds"], "eval_every": 10},
            small={
                "model": "resnet20",
                "engine": "sequential",
                "rounds": 20,
                "local_steps": 10,
                "eval_every": 10,
            },
            ci={
                **CI,
                "model": "resnet20",
                "engine": "sequential",
                "dataset": "digits",
                "clients": 10,
            },
        ),
    }
    if scale == "ci":
        base.pop("data_dir", None)
    return base


def tce_runs(
    settings: Mapping[str, Mapping[str, Any]], lrs: Sequence[float], seeds: Sequence[int]
) -> list[RunSpec]:
    """The sweep: every variant of :data:`TCE_VARIANTS` at every learning rate in every
    setting, one series per variant with the learning rate its x."""
    return [
        spec
        for setting, keys in settings.items()
        for lr in lrs
        for v, variant in TCE_VARIANTS.items()
        for spec in runs(
            setting, {tce_method(v, lr): {**variant, "lr": lr}}, seeds, keys, series=v, x=lr
        )
    ]


def tce_paper(column: str, lrs: Sequence[float]) -> dict[tuple[str, str], dict[str, Any]]:
    """Table 1's ``column`` (cifar10, cifar100, femnist) at ``lrs``, beside our α=0.1 runs."""
    table = TCE_TABLES[column]
    return {
        (TCE_ALPHA, tce_method(v, lr)): {"final": table[lr][i]}
        for lr in lrs
        if lr in table
        for i, v in enumerate(list(TCE_VARIANTS)[:3])
    }


def lowest(column: str) -> float:
    """The lowest converged accuracy of Table 1's ``column``."""
    return min(
        x for row in TCE_TABLES[column].values() for c in row if (x := cell_accuracy(c)) is not None
    )


@dataclass(frozen=True)
class TceGrid:
    """What a TCE plan's claims read from the results over its learning rates ``lrs``: each
    variant's final accuracies, its best, the rates within some points of it."""

    lrs: tuple[float, ...]

    def finals(self, v: Values, setting: str, variant: str) -> list[float | None]:
        return [v.get(setting, tce_method(variant, lr), "final") for lr in self.lrs]

    def top(self, v: Values, setting: str, variant: str) -> float | None:
        values = self.finals(v, setting, variant)
        return None if any(x is None for x in values) else max(values)  # type: ignore[type-var]

    def near(self, v: Values, setting: str, variant: str, points: float) -> int | None:
        """How many learning rates end within ``points`` of ``variant``'s best."""
        values, best_value = self.finals(v, setting, variant), self.top(v, setting, variant)
        if best_value is None:
            return None
        return sum(x >= best_value - points for x in values)  # type: ignore[operator]

    def most_lrs(self, v: Values, setting: str = "α=0.1", norm: str = "GN") -> bool | None:
        """TCE beats FedAvg (with ``norm``) by at least 1 point at more than half the rates."""
        tce = self.finals(v, setting, f"FedAvg+TCE ({norm})")
        avg = self.finals(v, setting, f"FedAvg ({norm})")
        if any(x is None for x in tce + avg):
            return None
        # a win: TCE at least 1 point above FedAvg at that learning rate
        wins = sum(a >= b + 0.01 for a, b in zip(tce, avg, strict=True))  # type: ignore[operator]
        return lt(
            len(self.lrs) / 2, wins, "count", f"TCE's wins ({norm}, {setting}) > half the lrs"
        )

    def tce_best(self, v: Values, setting: str = "α=0.1") -> bool | None:
        """The best accuracy of the grid is TCE's (either norm) rather than FedAvg (GN)'s."""
        tce = [self.top(v, setting, "FedAvg+TCE (GN)"), self.top(v, setting, "FedAvg+TCE (BN)")]
        avg = self.top(v, setting, "FedAvg (GN)")
        if None in tce or avg is None:
            return None
        return lt(avg, max(tce), "final", "TCE's best > FedAvg's best")  # type: ignore[type-var]

    def bn_close(self, v: Values, setting: str = "α=0.1") -> bool | None:
        """TCE (BN)'s best is at most 2 points below TCE (GN)'s."""
        bn = self.top(v, setting, "FedAvg+TCE (BN)")
        gn = self.top(v, setting, "FedAvg+TCE (GN)")
        if bn is None or gn is None:
            return None
        return ge(bn, gn - 0.02, "exact", "TCE (BN) >= TCE (GN) - 2 points")

    def robust(self, v: Values, setting: str = "α=0.1") -> bool | None:
        """TCE (GN) keeps more rates within 3 points of its best than FedAvg (GN)."""
        tce = self.near(v, setting, "FedAvg+TCE (GN)", 0.03)
        avg = self.near(v, setting, "FedAvg (GN)", 0.03)
        return None if tce is None or avg is None else lt(avg, tce, "count", "TCE > FedAvg")

    def gain(self, v: Values, setting: str) -> float | None:
        """TCE (GN)'s best less FedAvg (GN)'s."""
        tce, avg = self.top(v, setting, "FedAvg+TCE (GN)"), self.top(v, setting, "FedAvg (GN)")
        return None if tce is None or avg is None else tce - avg


def table1_within(column: str, variant: str) -> tuple[int, ...]:
    """How many of Table 1's learning rates end within 2, 3 and 5 points of ``variant``'s best
    in ``column`` (computed from the table; App. Table 2 prints its own lists)."""
    i = list(TCE_VARIANTS).index(variant)
    values = [x for row in TCE_TABLES[column].values() if (x := cell_accuracy(row[i])) is not None]
    # the table's 3 decimals: a value exactly at the tolerance counts as within it
    return tuple(sum(x >= max(values) - t - 1e-9 for x in values) for t in TCE_TOLERANCES)


def table2_within(column: str, variant: str) -> tuple[int, ...]:
    """How many learning rates App. Table 2 lists within 2, 3 and 5 points of the best."""
    return tuple(len(rates) for rates in TCE_WITHIN[column][variant][1])


def points(tolerances: Sequence[float]) -> str:
    """``(0.02, 0.05)`` -> ``"2 and 5"``."""
    names = [f"{100 * t:g}" for t in tolerances]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def within_claim(
    column: str, norm: str, grid: TceGrid, setting: str = TCE_ALPHA
) -> tuple[Claim | None, list[str]]:
    """App. Table 2's claim for TCE with ``norm`` against FedAvg (GN) in ``column``, kept to
    what both tables support: at a tolerance where App. Table 2's counts and Table 1's numbers
    both give TCE more rates within it of its best, TCE keeps more; where either gives as many
    (neither fewer), at least as many; a tolerance where one gives TCE fewer is left out (the
    notes returned say which). None when no tolerance is left."""
    tce, avg = f"FedAvg+TCE ({norm})", "FedAvg (GN)"
    t2 = (table2_within(column, tce), table2_within(column, avg))
    t1 = (table1_within(column, tce), table1_within(column, avg))
    more, same, notes = [], [], []
    for i, t in enumerate(TCE_TOLERANCES):
        if t2[0][i] > t2[1][i] and t1[0][i] > t1[1][i]:
            more.append(t)
        elif t2[0][i] >= t2[1][i] and t1[0][i] >= t1[1][i]:
            same.append(t)
            if t2[0][i] > t2[1][i] or t1[0][i] > t1[1][i]:
                notes.append(
                    f"{COLUMNS[column]}, TCE ({norm}) within {points([t])} points of its best: "
                    f"App. Table 2 lists {t2[0][i]} learning rates against FedAvg (GN)'s "
                    f"{t2[1][i]}, Table 1's numbers give {t1[0][i]} against {t1[1][i]}; the "
                    "claim says at least as many, what both support."
                )
        else:
            notes.append(
                f"App. Table 2 and Table 1 disagree on {COLUMNS[column]} within {points([t])} "
                f"points of each's best: App. Table 2 lists {t2[0][i]} learning rates of TCE "
                f"({norm}) against {t2[1][i]} of FedAvg (GN), Table 1's numbers give "
                f"{t1[0][i]} against {t1[1][i]}; the claim on App. Table 2 leaves that "
                "tolerance out."
            )
    if not more and not same:
        return None, notes

    def check(v: Values) -> bool | None:
        out = []
        for t in TCE_TOLERANCES:
            if t in more or t in same:
                a, b = grid.near(v, setting, tce, t), grid.near(v, setting, avg, t)
                label = f"TCE ({norm}) vs FedAvg (GN) within {points([t])} points"
                out.append(lt(b, a, "count", label) if t in more else ge(a, b, "count", label))
        return every(out)

    if more:
        said = f"more learning rates than FedAvg (GN) within {points(more)} points of each's best"
        said += f", and at least as many within {points(same)}" if same else ""
    else:
        said = f"at least as many learning rates as FedAvg (GN) within {points(same)} points of "
        said += "each's best"
    counts = "/".join(map(str, t2[0])) + " against " + "/".join(map(str, t2[1]))
    text = f"{setting}: TCE ({norm}) keeps {said} (App. Table 2: {counts} within 2/3/5 points)"
    return Claim(text, check, TCE_LONG, grid=True), notes


def tce_table1(scale: str, seeds: list[int], data: Data) -> Plan:
    """TCE (Legate et al., 2023) Table 1: FedAvg with and without the truncated cross-entropy
    over a learning-rate grid, GroupNorm and BatchNorm, at Dirichlet α = 0.1 (the table) and
    α = 0.01 (its Figure 3a: TCE's gain grows as α falls). 100 equal clients, 10 per round,
    10 % of each client's data held out for validation.

    ``paper``: CIFAR-10 (when its files are given; else Fashion-MNIST stands in), ResNet-18,
    4,000 rounds, 2 local epochs at batch 32 (experiments/tce_dirichlet.toml's), the 9
    learning rates. ``small``: ResNet-20 (the smallest normalised model here) on the
    sequential engine (vmap was twice as slow for it), 4 learning rates, 20 rounds of 10
    local steps, evaluated every 10 rounds (a test pass over 10,000 images takes 6-13 s on one
    core). ``ci``: scikit-learn's 8x8 digits. Beside the paper's three variants, FedAvg with
    BatchNorm, for the claim that TCE is robust to BN where FedAvg degrades. Measured on
    2 cores with ``--jobs 2``: the 32 runs of 1 seed took 53 minutes on 2026-11-26 (6,072 s of
    training in all, 170-240 s a run); the last 34 α = 0.01 runs took 400-490 s a run on
    2026-11-29 (the same work per round at both α; the machines drift): 3 to 6 hours for
    the 96 runs of 3 seeds.
    """
    lrs = tce_lrs(scale)
    base = tce_base(scale, data)
    settings = {"α=0.1": {"partition.alpha": 0.1}, "α=0.01": {"partition.alpha": 0.01}}
    specs = tce_runs(settings, lrs, seeds)
    paper = tce_paper("cifar10", lrs)
    grid = TceGrid(tuple(lrs))
    long = TCE_LONG
    claims = [
        Claim(
            "α=0.1: TCE (GN) beats FedAvg (GN) by at least 1 point at most learning rates",
            grid.most_lrs,
            long,
        ),
        Claim(
            "α=0.1: the best accuracy of the grid is TCE's (against FedAvg (GN)'s best, as in "
            "the paper's table; FedAvg (BN), which it has not, is left out)",
            grid.tce_best,
            long,
            grid=True,
        ),
        Claim(
            "α=0.1: TCE with BatchNorm is at most 2 points below TCE with GroupNorm (best lr "
            "each; the paper: comparable)",
            grid.bn_close,
            long,
            grid=True,
        ),
        Claim(
            "α=0.1: TCE (GN) keeps more learning rates within 3 points of its best than FedAvg",
            grid.robust,
            long,
            grid=True,
        ),
        Claim(
            "TCE's gain over FedAvg (best lr each, GN) is larger at α=0.01 than at α=0.1 (Fig. 3a)",
            lambda v: lt(
                grid.gain(v, "α=0.1"), grid.gain(v, "α=0.01"), "final", "gain at α=0.01 > α=0.1"
            ),
            long,
            grid=True,
        ),
    ]
    claims += [
        Claim(
            f"{s}: with BatchNorm, TCE beats FedAvg by at least 1 point at most learning rates "
            "(FedAvg degrades with BN on heterogeneous clients; TCE is robust to it, §4)",
            lambda v, s=s: grid.most_lrs(v, s, "BN"),
            TCE_BN,
        )
        for s in settings
    ]
    # App. Table 2's CIFAR-10 rows (added to the report only: the runs are the same). With
    # GroupNorm both tables support only claim 4's 3 points; with BatchNorm, a claim of its own.
    within, notes = within_claim("cifar10", "BN", grid)
    claims += [within] if within else []
    notes = [
        "At α=0.01 many clients hold a single class (`fedretain partition --config` on a run's "
        "config.toml counts them). TCE's softmax over a client's own classes then runs over one "
        "class: its loss is 0 whatever the model, so such a client sends back the global "
        "weights unchanged (plain SGD, no weight decay; BatchNorm's running statistics still "
        "move) and each round averages those copies in. That is the loss as defined (eq. 3 of "
        "the TCE paper, `fedretain.losses.tce`); cross-entropy has no such blind spot, and it "
        "is a likely reason why TCE (GN) trails FedAvg (GN) at α=0.01 here.",
        "App. Table 2's CIFAR-10 rows with GroupNorm: both tables give TCE (GN) more learning "
        "rates than FedAvg (GN) only within 3 points of each's best, claim 4.",
        *within_claim("cifar10", "GN", grid)[1],
        *notes,
    ]
    reasons = scale_reasons(
        scale,
        small="scale=small: ResNet-20 instead of ResNet-18, 20 rounds of 10 local steps instead "
        "of 4,000 of 2 epochs, 4 of the 9 learning rates",
        ci=CI_REASON + "; scikit-learn's 8x8 digits for the data",
    )
    if scale != "ci":
        reasons += standin_reason(data)
    return Plan(
        title="TCE (Legate et al., 2023), Table 1: FedAvg with and without TCE, lr x normalisation",
        source="TCE Table 1 (CIFAR-10 column; α = 0.01 is its Figure 3a, without numbers)",
        base=base,
        runs=specs,
        metrics=["final", "top"],
        paper=paper,
        claims=claims,
        reasons=reasons,
        notes=notes,
        sweep=Sweep("lr", log=True),
        tuning_note=(
            "The learning rate is the table's own sweep (at small, 4 of the paper's 9 values); "
            "there is no other hyper-parameter. A claim on a variant's best learning rate needs "
            "that best inside the grid, not at its edge."
        ),
        # the table's end-of-training claims compare trained models only
        floors=dict.fromkeys(
            settings, paper_floor(lowest("cifar10"), "lowest converged accuracy at α=0.1")
        ),
    )


PRESETS.add(
    "tce-table1",
    tce_table1,
    "TCE Table 1: FedAvg +/- TCE over learning rates, GroupNorm and BatchNorm, α = 0.1 and 0.01",
    dataset="cifar10",
    standin="fashion-mnist",
    seeds={"ci": 1, "small": 3, "paper": 3},
    estimate=(
        "about 3-6 h (3 seeds, --jobs 2; 170-240 s a run measured 2026-11-26, "
        "400-490 s on 2026-11-29)"
    ),
    paper="TCE (Legate et al., 2023)",
)
