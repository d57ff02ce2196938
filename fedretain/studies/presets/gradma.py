"""GradMA (Luo et al., CVPR 2023) Tables 1 and 2 and Figures 5 and 6 (this module: the tables'
numbers, the plan every GradMA preset shares and the MNIST presets; the other datasets' in
:mod:`~fedretain.studies.presets.gradma_columns`, the figures' in
:mod:`~fedretain.studies.presets.gradma_figures`).

Tables 1 (top test accuracy) and 2 (rounds to the column's accuracy ac) compare FedAvg,
FedAvgM, MIFA, MIFAM, GradMA-S, GradMA and ten more baselines: ``gradma-table1`` (MNIST, the
Dirichlet ω grid), ``gradma-table2`` (MNIST, the grid of workers per round S),
``gradma-cifar10`` (CIFAR-10 with LeNet-5, the ω grid), ``gradma-cifar100`` (CIFAR-100 with
VGG-11, the S grid) and ``gradma-tinyimagenet`` (Tiny-ImageNet with ResNet-20, three (ω, S)
columns). Figures 5 and 6 sweep GradMA-S's control parameters (β1, β2) (``gradma-fig5``) and
its memory size m (``gradma-fig6``) on MNIST and CIFAR-10; they have no numbers in our copy of
the paper, so their claims are the orderings its §6.2 states.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fedretain.studies.presets.plan import (
    CI,
    CI_MLP,
    CI_REASON,
    PRESETS,
    Claim,
    Data,
    MethodKeys,
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
# Tables 1-2's other columns, the same 16 rows in the paper's order (SCAFFOLD is the tables'
# "Scaffold", FedDyn their "Feddyn"; None: "-", never reached in the paper's rounds)
GRADMA_CIFAR10_COLUMNS = ("ω=1.0", "ω=0.1", "ω=0.01")  # CIFAR-10+LeNet-5, S = 10
GRADMA_CIFAR10_TOP = {  # Table 1, CIFAR-10 columns
    "FedAvg": ("69.48±8.28", "47.86±5.26", "20.97±3.73"),
    "FedProx": ("71.58±4.66", "48.63±4.92", "20.40±3.85"),
    "FedMLB": ("69.28±6.56", "48.99±4.94", "20.81±3.26"),
    "MOON": ("71.11±7.94", "48.84±5.16", "19.39±3.99"),
    "SCAFFOLD": ("53.33±6.63", "35.91±2.14", "15.55±1.33"),
    "GradMA-W": ("72.33±3.84", "50.25±3.94", "18.99±4.06"),
    "FedAvgM": ("71.04±7.29", "51.91±4.46", "21.02±3.52"),
    "MIFA": ("71.41±5.81", "50.60±11.87", "23.78±2.04"),
    "MIFAM": ("73.48±1.37", "52.13±9.71", "24.17±1.24"),
    "GradMA-S": ("78.76±1.96", "64.60±5.87", "28.41±2.43"),
    "FedProxM": ("78.00±1.61", "51.22±5.14", "21.80±3.72"),
    "FedMLBM": ("73.70±4.62", "49.90±5.82", "21.53±2.93"),
    "MOONM": ("73.96±4.11", "50.06±6.14", "20.19±3.10"),
    "FedDyn": ("74.94±2.48", "41.93±2.22", "17.94±3.52"),
    "MimeLite": ("77.98±1.48", "53.27±1.69", "20.73±3.33"),
    "GradMA": ("79.92±0.59", "65.91±5.10", "30.81±1.78"),
}
GRADMA_CIFAR10_ROUNDS = {  # Table 2, CIFAR-10 columns (ac = 55 %, 45 %, 15 %)
    "FedAvg": (177, 882, 106),
    "FedProx": (141, 766, 197),
    "FedMLB": (245, 694, 63),
    "MOON": (96, 616, 247),
    "SCAFFOLD": (None, None, None),
    "GradMA-W": (168, 582, 136),
    "FedAvgM": (175, 605, 73),
    "MIFA": (156, 393, 54),
    "MIFAM": (152, 325, 25),
    "GradMA-S": (83, 101, 14),
    "FedProxM": (97, 631, 67),
    "FedMLBM": (185, 653, 69),
    "MOONM": (78, 766, 85),
    "FedDyn": (66, None, 83),
    "MimeLite": (92, 385, 134),
    "GradMA": (49, 130, 11),
}
# CIFAR-100+VGG-11: Table 1's header says ω = 0.1, Table 2's header ω = 1.0 for the same
# columns (a discrepancy of the paper; the presets run Table 1's ω = 0.1 and say so)
GRADMA_CIFAR100_COLUMNS = ("S=5", "S=10", "S=50")
GRADMA_CIFAR100_TOP = {  # Table 1, CIFAR-100 columns
    "FedAvg": ("56.02±0.37", "61.22±0.16", "64.78±0.43"),
    "FedProx": ("55.94±0.71", "61.25±0.09", "64.69±0.27"),
    "FedMLB": ("53.80±0.16", "59.20±0.27", "64.06±0.30"),
    "MOON": ("55.37±0.34", "60.58±0.60", "64.48±0.42"),
    "SCAFFOLD": ("32.22±0.92", "34.72±0.80", "45.70±0.76"),
    "GradMA-W": ("56.43±0.51", "61.38±0.11", "64.96±0.36"),
    "FedAvgM": ("55.85±0.28", "61.32±0.29", "64.88±0.25"),
    "MIFA": ("50.37±1.02", "58.74±0.42", "64.71±0.31"),
    "MIFAM": ("49.30±0.86", "58.91±0.24", "64.61±0.33"),
    "GradMA-S": ("59.08±0.43", "63.23±0.22", "65.63±0.35"),
    "FedProxM": ("55.63±0.31", "63.15±0.12", "64.78±0.11"),
    "FedMLBM": ("53.91±0.78", "60.44±0.34", "64.85±0.18"),
    "MOONM": ("56.01±0.25", "62.06±0.19", "65.37±0.17"),
    "FedDyn": ("52.95±1.63", "58.48±0.18", "61.71±0.25"),
    "MimeLite": ("58.00±0.51", "63.29±0.49", "64.68±0.33"),
    "GradMA": ("59.47±0.58", "63.49±0.47", "65.68±0.25"),
}
GRADMA_CIFAR100_ROUNDS = {  # Table 2, CIFAR-100 columns (ac = 30 %, 40 %, 60 %)
    "FedAvg": (437, 435, 1071),
    "FedProx": (429, 435, 1081),
    "FedMLB": (511, 548, 1404),
    "MOON": (475, 458, 1088),
    "SCAFFOLD": (806, None, None),
    "GradMA-W": (389, 420, 1027),
    "FedAvgM": (429, 397, 654),
    "MIFA": (631, 567, 1075),
    "MIFAM": (677, 547, 883),
    "GradMA-S": (297, 266, 579),
    "FedProxM": (468, 397, 665),
    "FedMLBM": (522, 522, 922),
    "MOONM": (461, 417, 697),
    "FedDyn": (441, 356, 736),
    "MimeLite": (355, 329, 675),
    "GradMA": (274, 253, 559),
}
# Tiny-ImageNet+ResNet20, (ω, S) = (0.01, 5), (1.0, 5), (1.0, 10)
GRADMA_TINY_COLUMNS = ("ω=0.01, S=5", "ω=1.0, S=5", "ω=1.0, S=10")
GRADMA_TINY_TOP = {  # Table 1, Tiny-ImageNet columns
    "FedAvg": ("7.50±0.32", "41.80±0.55", "42.90±0.12"),
    "FedProx": ("7.51±0.46", "41.82±0.29", "42.58±0.69"),
    "FedMLB": ("7.98±0.34", "42.83±0.13", "43.59±0.80"),
    "MOON": ("7.70±0.38", "41.68±0.22", "42.80±0.54"),
    "SCAFFOLD": ("7.20±0.33", "40.96±0.23", "43.02±0.30"),
    "GradMA-W": ("9.98±0.22", "43.68±0.23", "44.57±0.45"),
    "FedAvgM": ("16.96±1.08", "41.91±0.23", "42.57±0.14"),
    "MIFA": ("8.88±0.33", "41.42±0.22", "42.83±0.13"),
    "MIFAM": ("12.01±0.32", "41.94±0.06", "43.17±0.09"),
    "GradMA-S": ("20.93±1.49", "48.83±1.06", "49.65±0.72"),
    "FedProxM": ("18.30±0.79", "37.98±0.10", "45.27±0.19"),
    "FedMLBM": ("17.32±0.82", "44.62±0.32", "45.18±0.27"),
    "MOONM": ("16.78±0.95", "42.43±0.39", "42.78±0.46"),
    "FedDyn": ("17.89±0.95", "44.37±0.57", "44.86±0.15"),
    "MimeLite": ("8.29±0.29", "41.05±0.21", "41.56±0.18"),
    "GradMA": ("23.52±1.32", "49.29±0.86", "50.54±0.56"),
}
GRADMA_TINY_ROUNDS = {  # Table 2, Tiny-ImageNet columns (ac = 5 %, 30 %, 35 %)
    "FedAvg": (986, 906, 1116),
    "FedProx": (986, 906, 1091),
    "FedMLB": (791, 806, 966),
    "MOON": (986, 906, 1116),
    "SCAFFOLD": (971, 971, 1181),
    "GradMA-W": (821, 841, 936),
    "FedAvgM": (286, 821, 991),
    "MIFA": (716, 1021, 1151),
    "MIFAM": (656, 956, 1076),
    "GradMA-S": (131, 231, 251),
    "FedProxM": (291, 821, 611),
    "FedMLBM": (296, 681, 796),
    "MOONM": (291, 821, 991),
    "FedDyn": (371, 396, 406),
    "MimeLite": (1016, 871, 1071),
    "GradMA": (146, 231, 231),
}


def points(cell: str) -> float:
    """A cell of Table 1, ``"98.22±0.05"``, as its mean in points: 98.22."""
    return float(cell.split("±")[0])


@dataclass(frozen=True)
class GradmaColumns:
    """One dataset's columns of Tables 1-2: their names (the plans' settings), each method's
    top accuracy (Table 1, percent "mean±std") and rounds to ac (Table 2), each column's ac;
    ``aliases``: a setting whose numbers are another column's (MNIST's S=10 is ω=0.01)."""

    header: str  # the columns in the tables' words (the plan's source)
    names: tuple[str, ...]
    top: Mapping[str, tuple[str, ...]]
    rounds: Mapping[str, tuple[int | None, ...]]
    targets: Mapping[str, float]
    aliases: Mapping[str, str] = field(default_factory=dict)

    def index(self, setting: str) -> int:
        """The column of ``setting``."""
        return self.names.index(self.aliases.get(setting, setting))

    def lowest(self, setting: str, methods: list[str]) -> float:
        """The lowest top accuracy (a fraction) of ``methods`` in ``setting``'s column."""
        i = self.index(setting)
        return min(points(self.top[m][i]) for m in methods) / 100


GRADMA_TABLES = {  # the paper's dataset -> its columns
    "mnist": GradmaColumns(
        "MNIST+NN columns",
        GRADMA_COLUMNS,
        GRADMA_TOP,
        GRADMA_ROUNDS,
        GRADMA_TARGETS,
        {"S=10": "ω=0.01"},  # Table 2's S=10 is Table 1's ω=0.01 column
    ),
    "cifar10": GradmaColumns(
        "CIFAR-10+LeNet-5 columns (S = 10)",
        GRADMA_CIFAR10_COLUMNS,
        GRADMA_CIFAR10_TOP,
        GRADMA_CIFAR10_ROUNDS,
        {"ω=1.0": 0.55, "ω=0.1": 0.45, "ω=0.01": 0.15},  # Table 2's ac
    ),
    "cifar100": GradmaColumns(
        "CIFAR-100+VGG-11 columns (ω = 0.1)",
        GRADMA_CIFAR100_COLUMNS,
        GRADMA_CIFAR100_TOP,
        GRADMA_CIFAR100_ROUNDS,
        {"S=5": 0.30, "S=10": 0.40, "S=50": 0.60},  # Table 2's ac
    ),
    "tiny-imagenet": GradmaColumns(
        "Tiny-Imagenet+Resnet20 columns, (ω, S)",
        GRADMA_TINY_COLUMNS,
        GRADMA_TINY_TOP,
        GRADMA_TINY_ROUNDS,
        {"ω=0.01, S=5": 0.05, "ω=1.0, S=5": 0.30, "ω=1.0, S=10": 0.35},  # Table 2's ac
    ),
}
# the paper's setting (§6.1): 100 workers, synchronization interval I = 5 local steps, the
# training set split across the workers by a Dirichlet process Dp(ω); each dataset's model
GRADMA_SETTING: dict[str, Any] = {"partition": "dirichlet", "clients": 100, "local_steps": 5}
GRADMA_MODELS = {
    "mnist": "mlp",
    "cifar10": "lenet5",
    "cifar100": "vgg11",
    "tiny-imagenet": "resnet20",
}
GRADMA_CLASSES = {"mnist": 10, "cifar10": 10, "cifar100": 100, "tiny-imagenet": 200}
# not in our copy's text (its Appendix .2 has the hyper-parameters): batch 64 is the reference
# code's default (github.com/lkyddd/GradMA, LightFed/experiments/horizontal/*/param_config.py);
# lr 0.05 for every method, untuned (gradma_plan's tuning note)
GRADMA_CHOSEN: dict[str, Any] = {"batch_size": 64, "lr": 0.05}
# rounds at paper scale, not in our copy's text either: CIFAR-10's 1,000 is the reference
# code's README command (GradMA on CIFAR-10, LeNet-5); the others the hundred above Table 2's
# largest count of the dataset (MNIST 493, CIFAR-100 1,404, Tiny-ImageNet 1,181), which the
# paper's runs reached
GRADMA_PAPER_ROUNDS = {"mnist": 500, "cifar10": 1000, "cifar100": 1500, "tiny-imagenet": 1200}
# small scale per dataset; CIFAR-100 and Tiny-ImageNet train LeNet-5 instead of the paper's
# model (gradma_plan's reasons say why)
GRADMA_SMALL: dict[str, dict[str, Any]] = {
    "mnist": {"rounds": 200, "eval_every": 5},
    "cifar10": {"rounds": 100, "eval_every": 5},
    "cifar100": {"model": "lenet5", "rounds": 60, "eval_every": 10},
    "tiny-imagenet": {"model": "lenet5", "rounds": 60, "eval_every": 10},
}
GRADMA_SMALL_REASONS = {
    "mnist": "scale=small: 200 rounds (the paper's MNIST runs reach round 493), evaluated every 5",
    "cifar10": "scale=small: 100 rounds (the paper's CIFAR-10 runs reach round 882), evaluated "
    "every 5",
    "cifar100": "scale=small: LeNet-5 instead of VGG-11 (9.2M parameters: a round of VGG-11 on "
    "one core takes minutes, and GradMA's 100-row server memory of it 3.7 GB), 60 rounds (the "
    "paper's CIFAR-100 runs reach round 1,404), evaluated every 10",
    "tiny-imagenet": "scale=small: LeNet-5 instead of ResNet-20 (a round of 10 workers of "
    "ResNet-20 on 64x64 images takes over 2 minutes on one core), 60 rounds (the paper's "
    "Tiny-ImageNet runs reach round 1,181), evaluated every 10",
}


def percent(text: str) -> str:
    """``"98.22±0.05"`` (percent) as an accuracy: ``"0.9822 ± 0.0005"``."""
    mean, std = (float(x) / 100 for x in text.split("±"))
    return f"{mean:.4f} ± {std:.4f}"


def gradma_base(scale: str, data: Data, dataset: str, digits: bool = False) -> dict[str, Any]:
    """The config every run of a GradMA plan on ``dataset`` (the paper's: a key of
    :data:`GRADMA_TABLES`) starts from at ``scale``: §6.1's setting (:data:`GRADMA_SETTING`)
    at Dirichlet ω = 0.01 and S = 10, the dataset's model and rounds at ``paper``
    (:data:`GRADMA_PAPER_ROUNDS`), :data:`GRADMA_SMALL` at ``small``; at ``ci`` a tiny MLP,
    on scikit-learn's 8x8 digits where ``digits``."""
    base = {
        **data_keys(data),
        "partition": GRADMA_SETTING["partition"],
        "partition.alpha": 0.01,
        "clients": GRADMA_SETTING["clients"],
        "clients_per_round": 10,
        "local_steps": GRADMA_SETTING["local_steps"],
        **GRADMA_CHOSEN,
        "model": GRADMA_MODELS[dataset],
        "checkpoint_every": 20,
        **pick(
            scale,
            paper={"rounds": GRADMA_PAPER_ROUNDS[dataset], "eval_every": 1},
            small=GRADMA_SMALL[dataset],
            ci={**CI, **CI_MLP, "local_steps": GRADMA_SETTING["local_steps"]},
        ),
    }
    if scale == "ci" and digits:
        base["dataset"] = "digits"
        base.pop("data_dir", None)
    return base


def gradma_plan(
    scale: str,
    seeds: list[int],
    data: Data,
    settings: dict[str, dict[str, Any]],
    table: str,
    methods: MethodKeys | Callable[[str], MethodKeys],
    dataset: str = "mnist",
) -> Plan:
    """The plan every GradMA table preset shares, over ``settings`` (name -> config keys, each
    a column of ``dataset``'s in :data:`GRADMA_TABLES`), without claims: ``methods`` (name ->
    config keys, or a function of the setting giving them), the paper's numbers of those
    columns and the targets. MNIST's plans run on its data (or the stand-in) at every scale;
    the others on scikit-learn's 8x8 digits at ``ci``."""
    columns = GRADMA_TABLES[dataset]
    digits = dataset != "mnist"
    base = gradma_base(scale, data, dataset, digits)

    def methods_of(setting: str) -> MethodKeys:
        return methods(setting) if callable(methods) else methods

    paper = {}
    for setting in settings:
        i = columns.index(setting)
        for method in methods_of(setting):
            paper[setting, method] = {
                "top": percent(columns.top[method][i]),
                "to:ac": columns.rounds[method][i],
            }
    ci_digits = scale == "ci" and digits
    standin = data.name != data.paper and not ci_digits
    wanted = {s: t for s, t in columns.targets.items() if s in settings}
    ours = {s: t if not standin or t < 0.9 else 0.80 for s, t in wanted.items()}
    reasons = scale_reasons(
        scale,
        small=GRADMA_SMALL_REASONS[dataset],
        ci=CI_REASON + "; scikit-learn's 8x8 digits for the data" if digits else CI_REASON,
    )
    if standin and ours != wanted:
        reasons.append(
            f"{data.name} stands in for {data.paper}: 80 % stands for the paper's 95 % target"
        )
    elif standin:
        reasons.append(f"{data.name} stands in for {data.paper} (the paper's targets kept)")
    return Plan(
        title=f"GradMA (Luo et al., CVPR 2023), {table}",
        source=f"GradMA Table 1 (top accuracy) and Table 2 (rounds to ac), {columns.header}",
        base=base,
        runs=runs_over(settings, methods, seeds),
        metrics=["top", "to:ac", "final"],
        paper=paper,
        reasons=reasons,
        floors={
            s: paper_floor(
                columns.lowest(s, list(methods_of(s))), "lowest top accuracy of the column"
            )
            for s in settings
        },
        chance=0.1 if ci_digits else 1 / GRADMA_CLASSES[dataset],
        tuning_note=(
            "Not tuned here: every method trains at lr 0.05 with every momentum 0.5 and the "
            "library's defaults of its own hyper-parameters; the paper tuned each method in its "
            "Appendix 2, which our copy of the paper lacks, so a tuned baseline might turn a "
            "verdict."
        ),
        targets={"ac": ours},
        paper_targets={"ac": wanted},
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
