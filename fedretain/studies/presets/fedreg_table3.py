"""FedReg (Xu et al., ICLR 2022) Table 3: ``fedreg-table3`` (CIFAR-100: ResNet-9 from scratch and a
pre-trained transformer fine-tuned) and ``fedreg-table3-ct`` (COVID-19 CT images on
DenseNet-121)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fedretain.studies.presets.fedreg import (
    FEDREG_BASELINES,
    FEDREG_COLUMNS,
)
from fedretain.studies.presets.plan import (
    CI,
    CI_MLP,
    CI_REASON,
    PRESETS,
    Claim,
    Data,
    Plan,
    data_keys,
    fewest,
    higher,
    highest,
    paper_floor,
    paper_numbers,
    pick,
    runs,
    runs_over,
    scale_reasons,
    standin_reason,
)

# ------------------------------------------------------------------------- FedReg Table 3


RESNET9_SETTING = "CIFAR-100 (ResNet-9)"
VIT_SETTING = "CIFAR-100 (Transformer)"
CT_SETTING = "COVID-19 CT images"
TABLE3_BASELINES = ["SGD", "FedAvg", "FedProx", "FedCurv"]  # no SCAFFOLD on CIFAR-100
TABLE3 = {  # Table 3, CIFAR-100 columns; SCAFFOLD's cells are "-" (App. B.2: not run)
    RESNET9_SETTING: {
        "SGD": (510, 1004, 1200, 0.434),
        "FedAvg": (793, None, None, 0.323),
        "FedProx": (793, None, None, 0.325),
        "FedCurv": (774, None, None, 0.316),
        "FedReg": (248, 612, 796, 0.502),
    },
    VIT_SETTING: {
        "SGD": (4, 16, 74, 0.888),
        "FedAvg": (3, 21, None, 0.883),
        "FedProx": (3, 26, None, 0.880),
        "FedCurv": (3, 18, None, 0.882),
        "FedReg": (2, 14, 53, 0.898),
    },
}
TABLE3_CT_COLUMNS = ("R_1", "final")
TABLE3_CT = {  # Table 3, COVID-19 CT images column: R_1.0 and final accuracy only
    "SGD": (4, 0.511),
    "FedAvg": (3, 0.614),
    "FedProx": (4, 0.620),
    "SCAFFOLD": (6, 0.598),
    "FedCurv": (1, 0.614),
    "FedReg": (1, 0.673),
}
# §4.1 (50,000 clients of one image each) and App. B.2 (CIFAR-100): each setting at paper scale
TABLE3_PAPER = {
    RESNET9_SETTING: {
        "model": "resnet9",
        "clients": 50000,
        "clients_per_round": 100,
        "rounds": 1200,
        "local_epochs": 10,
        "batch_size": 1,
    },
    VIT_SETTING: {  # FedReg's code: vision_transformer_pytorch's "ViT-B_32" at 384x384
        "model": "vit",
        "model.patch": 32,
        "model.size": 384,
        "clients": 50000,
        "clients_per_round": 500,
        "rounds": 100,
        "local_epochs": 5,
        "batch_size": 1,
    },
}
TABLE3_METHODS = {  # App. B.2 (CIFAR-100): learning rates and hyper-parameters
    RESNET9_SETTING: {
        "SGD": {"algorithm": "sgd", "lr": 0.1},
        "FedAvg": {"algorithm": "fedavg", "lr": 0.05},
        "FedProx": {"algorithm": "fedprox", "lr": 0.05, "algo.mu": 0.01},
        "FedCurv": {"algorithm": "fedcurv", "lr": 0.05, "algo.lambda": 1e-3},
        "FedReg": {"algorithm": "fedreg", "lr": 0.1, "algo.gamma": 0.25, "algo.eta_s": 0.1},
    },
    VIT_SETTING: {
        "SGD": {"algorithm": "sgd", "lr": 0.1},
        "FedAvg": {"algorithm": "fedavg", "lr": 0.1},
        "FedProx": {"algorithm": "fedprox", "lr": 0.1, "algo.mu": 0.001},
        "FedCurv": {"algorithm": "fedcurv", "lr": 0.1, "algo.lambda": 1e-5},
        "FedReg": {"algorithm": "fedreg", "lr": 0.1, "algo.gamma": 0.02, "algo.eta_s": 1e-2},
    },
}
# the pre-trained weights the transformer setting needs, read from the CIFAR-100 folder
VIT_WEIGHTS = ("vit_base_patch32_384.safetensors", "vit_base_patch32_384.pth")
VIT_HOW_TO_GET = (
    "save a pre-trained ViT-B/32 state dict in timm's names (FedReg's code loads "
    "`vision_transformer_pytorch`'s `ViT-B_32`, Google's weights converted, and feeds it "
    "384x384 inputs; timm's `vit_base_patch32_384` has that shape) as "
    f"`{VIT_WEIGHTS[0]}` (or a torch file as `{VIT_WEIGHTS[1]}`) in the folder the CIFAR-100 "
    "files are read from; nothing is downloaded"
)


def vit_weights(data: Data) -> Path | None:
    """The transformer setting's pre-trained weights: the first of :data:`VIT_WEIGHTS` in the
    folder ``data``'s CIFAR-100 files are read from (``--data-dir``, else ``data get``'s);
    None when there is none (or no CIFAR-100)."""
    from fedretain.data.datasets import default_folder

    if data.missing or data.name != "cifar100":
        return None
    folder = data.data_dir or default_folder("cifar100")
    if not folder:
        return None
    found = [Path(folder).expanduser() / name for name in VIT_WEIGHTS]
    return next((path for path in found if path.is_file()), None)


def ci_data(data: Data) -> dict[str, Any]:
    """The data keys of a ``ci`` plan: the paper's files where they are given, else
    scikit-learn's 8x8 digits (which need none), so that ci runs without them."""
    return {"dataset": "digits"} if data.missing else data_keys(data)


def table3_settings(scale: str, data: Data) -> dict[str, dict[str, Any]]:
    """Table 3's CIFAR-100 settings at ``scale`` (name -> config keys over the plan's base);
    the transformer at ``paper`` scale only where its weights are found (:func:`vit_weights`),
    and at ``ci`` as a tiny ViT without pre-trained weights."""
    settings = {
        RESNET9_SETTING: pick(
            scale,
            paper=TABLE3_PAPER[RESNET9_SETTING],
            small={
                **TABLE3_PAPER[RESNET9_SETTING],
                "model": "lenet5",
                "clients_per_round": 20,
                "rounds": 100,
                "eval_every": 5,
            },
            ci=CI_MLP if data.missing else {"model": "lenet5"},  # digits: 8x8
        )
    }
    weights = vit_weights(data) if scale == "paper" else None
    if weights is not None:
        settings[VIT_SETTING] = {**TABLE3_PAPER[VIT_SETTING], "model.weights": str(weights)}
    elif scale == "ci":  # the setting's methods on a one-block ViT of width 16, 8x8 patches
        settings[VIT_SETTING] = {
            "model": "vit",
            "model.patch": 8,
            "model.size": 32,
            "model.dim": 16,
            "model.depth": 1,
            "model.heads": 2,
        }
    return settings


def fedreg_table3(scale: str, seeds: list[int], data: Data) -> Plan:
    """FedReg (Xu et al., ICLR 2022) Table 3, CIFAR-100 columns: 50,000 clients of one image
    each (§4.1), a ResNet-9 with Fixup trained from scratch and a pre-trained transformer
    fine-tuned; SGD, FedAvg, FedProx, FedCurv and FedReg (the paper ran no SCAFFOLD on
    CIFAR-100); ``R_a`` against SGD of the same seed. Needs the CIFAR-100 files
    (``--data-dir``); the COVID-19 CT column is ``fedreg-table3-ct``.

    ``paper``: App. B.2's settings. ResNet-9: 100 clients per round, 1,200 rounds, 10 local
    epochs of batch 1, lr 0.05 (FedAvg, FedProx, FedCurv) or 0.1 (SGD, FedReg), μ 0.01,
    λ 1e-3, γ 0.25, η_s 0.1. Transformer: ViT-B/32 at 384x384, pre-trained (its weights
    file beside the CIFAR-100 files: :data:`VIT_HOW_TO_GET`; without it the setting is not
    run, and the report says what to provide), 500 clients per round, 100 rounds, 5 local
    epochs of batch 1, lr 0.1, μ 1e-3, λ 1e-5, γ 0.02, η_s 0.01. ``small``: the ResNet-9
    setting only, with LeNet-5, 20 clients per round, 100 rounds, evaluated every 5 (the
    paper's clients, 10 local epochs and learning rates); the transformer is a GPU's work.
    ``ci``: LeNet-5 (an MLP on scikit-learn's digits when the CIFAR-100 files are absent),
    and a one-block ViT of width 16 without pre-trained weights. Estimate
    (2026-11-28): FedReg, FedCurv and SGD timed for 3 rounds of the small setting with
    ``threads=1`` on CIFAR-100-sized random files (5.0, 4.2 and 0.4 s a round; FedAvg and
    FedProx about 1.5 and 1.8, scaled from FedAvg timed at 100 clients a round), 2 s an
    evaluation, extrapolate to about 40 minutes for 3 seeds with ``--jobs 2``: an upper
    bound, timed while other jobs loaded both cores.
    """
    settings = table3_settings(scale, data)
    base = {
        **(ci_data(data) if scale == "ci" else data_keys(data)),
        "partition": "iid",
        "clients": 50000,
        "batch_size": 1,
        "eval_every": 1,
        "checkpoint_every": 10,
        **pick(
            scale,
            paper={},
            small={},
            # one image a client as in the paper: the tiny files' images, or 100 of the digits
            ci={**CI, "clients": 100 if data.missing else max(2, min(50000, data.samples))},
        ),
    }
    specs = runs_over(settings, lambda s: TABLE3_METHODS[s], seeds)
    paper = paper_numbers(FEDREG_COLUMNS, {s: TABLE3[s] for s in settings})
    lenet = (
        "LeNet-5 on 20 clients a round for 100 rounds sees 2,000 of the 50,000 images: the "
        "paper's gaps open over 1,200 rounds of a deep network (ResNet-9) trained 10 epochs "
        "on each client's one image"
    )
    why = pick(
        scale,
        paper="no augmentation here (FedReg's code trains on random crops and flips), and the "
        "paper's numbers are one run each: another seed may move a gap of a few points",
        small=lenet,
        ci="2 rounds of a tiny model on a handful of images decide nothing",
    )
    finetune = (
        "the paper's gaps after fine-tuning are 0.5-2 points: fewer clients, rounds or another "
        "pre-training move them as much"
    )
    s = RESNET9_SETTING
    claims = [
        Claim(
            f"{s}: FedReg reaches R_0.5 in fewer rounds than every baseline",
            fewest(s, "FedReg", TABLE3_BASELINES, "R_0.5"),
            why,
        ),
        Claim(
            f"{s}: FedReg ends with the highest final accuracy",
            highest(s, "FedReg", TABLE3_BASELINES),
            why,
        ),
        Claim(
            f"{s}: FedAvg ends below SGD (many local steps on one image per client fail)",
            higher(s, "SGD", "FedAvg"),
            why,
        ),
    ]
    if VIT_SETTING in settings:
        claims += [
            Claim(
                f"{VIT_SETTING}: FedReg reaches R_0.9 in fewer rounds than every baseline",
                fewest(VIT_SETTING, "FedReg", TABLE3_BASELINES, "R_0.9"),
                finetune,
            ),
            Claim(
                f"{VIT_SETTING}: FedReg ends with the highest final accuracy",
                highest(VIT_SETTING, "FedReg", TABLE3_BASELINES),
                finetune,
            ),
        ]
    unrun = pick(
        scale,
        paper=f"'{VIT_SETTING}' not run: its pre-trained weights are missing; " + VIT_HOW_TO_GET,
        small=f"'{VIT_SETTING}' not run: fine-tuning a pre-trained ViT-B/32 at 384x384 over "
        "500 clients a round is a GPU's work (`--scale paper`, with its weights file)",
        ci="",
    )
    reasons = scale_reasons(
        scale,
        small="scale=small: LeNet-5 instead of ResNet-9 with Fixup, 20 clients per round "
        "instead of 100, 100 rounds of 1,200 (the paper's 50,000 one-image clients, 10 local "
        "epochs of batch 1 and learning rates)",
        ci=CI_REASON
        + (
            "; scikit-learn's 8x8 digits for the data (no CIFAR-100 files), an MLP for ResNet-9"
            if data.missing
            else "; LeNet-5 for ResNet-9"
        )
        + ", and a one-block ViT of width 16 without pre-trained weights for the transformer",
    )
    if unrun and VIT_SETTING not in settings:
        reasons.append(unrun + "; its claims are not checked")
    return Plan(
        title="FedReg (Xu et al., ICLR 2022), Table 3: CIFAR-100, ResNet-9 and a transformer",
        source="FedReg Table 3 (CIFAR-100 columns), §4.1 and App. B.2 (settings)",
        base=base,
        runs=specs,
        metrics=["R_0.5", "R_0.9", "R_1", "final", "top"],
        reference="SGD",
        paper=paper,
        claims=claims,
        reasons=reasons + standin_reason(data),
        floors={
            s: paper_floor(
                min(row[3] for row in TABLE3[s].values()), "lowest final accuracy in the setting"
            )
            for s in settings
        },
        chance=0.01,
        tuning_note=(
            "Not tuned here: every method runs the paper's own values (App. B.2: each method's "
            "learning rate, FedProx's μ, FedCurv's λ, FedReg's γ and η_s), which the paper "
            "chose by grid search at its scale."
        ),
        left_out=(
            "SCAFFOLD: Table 3 leaves its CIFAR-100 cells '-' because, App. B.2 says, 'as "
            "SCAFFOLD is too memory-consuming to run on CIFAR-100 given our computational "
            "resources, the results of SCAFFOLD on CIFAR-100 are not reported': the paper "
            "gives no learning rate for it there and no number to set ours beside."
        ),
        notes=[
            f"{VIT_SETTING}: the weights file is looked for in the folder the CIFAR-100 files "
            f"are read from ({' or '.join(VIT_WEIGHTS)}). FedReg's code resizes the 32x32 "
            "images to 512 and crops 384 at random for training (384 for testing) and starts "
            "the new 100-class head at weights 1 and bias 0; here the images are resized to "
            "384 inside the model (bilinear, no crop) and the new head keeps its own "
            "initialisation.",
            "Every run sees the images scaled to [0, 1], without augmentation: FedReg's code "
            "trains on random crops (padding 4) and horizontal flips, and normalises with "
            "CIFAR-100's mean and std.",
        ],
    )


PRESETS.add(
    "fedreg-table3",
    fedreg_table3,
    "FedReg Table 3 (CIFAR-100): SGD, FedAvg, FedProx, FedCurv, FedReg; ResNet-9 and a ViT",
    dataset="cifar100",
    seeds={"ci": 1, "small": 3, "paper": 3},
    estimate="about 40 min (3 seeds, --jobs 2; 3 rounds timed under load, 2026-11-28)",
    paper="FedReg (Xu et al., ICLR 2022)",
)


# the COVID-19 CT column: an image folder with a groups file (fedretain.data.folders)
CT_GROUPS = "groups.csv"
CT_LAYOUT = (
    "the COVID-CT images (He, 2020) as an image folder: `train/CT_COVID/` and "
    "`train/CT_NonCOVID/` holding the training split's images, `test/CT_COVID/` and "
    f"`test/CT_NonCOVID/` the test split's, and `{CT_GROUPS}` (header `path,group`, a row per "
    "training image, its path relative to `train/`) naming each training image's client: the "
    "COVID-19 images by their source (32 sources, 32 clients), the non-COVID images spread "
    "over those clients in proportion to each client's COVID-19 images (§4.1)"
)
CT_PAPER = {  # §4.1 (32 clients, one per image source) and App. B.2 (CT images)
    "clients": 32,
    "clients_per_round": 10,
    "rounds": 10,
    "local_epochs": 20,
    "batch_size": 10,
    "model": "densenet121",
    "model.norm": "group",  # App. B.2: group normalisation; FedReg's code: 4 groups
    "model.groups": 4,
    "model.pool": "flatten",  # FedReg's code flattens the last 7x7 map into the head
    "dataset.size": 224,
}
CT_METHODS = {  # App. B.2 (CT images): learning rates and hyper-parameters
    "SGD": {"algorithm": "sgd", "lr": 1e-4},
    "FedAvg": {"algorithm": "fedavg", "lr": 1e-3},
    "FedProx": {"algorithm": "fedprox", "lr": 1e-3, "algo.mu": 1.0},
    "SCAFFOLD": {"algorithm": "scaffold", "lr": 5e-4},
    "FedCurv": {"algorithm": "fedcurv", "lr": 1e-3, "algo.lambda": 1e-4},
    "FedReg": {"algorithm": "fedreg", "lr": 5e-3, "algo.gamma": 0.5, "algo.eta_s": 1e-6},
}
CT_SMALL = {"dataset.size": 32, "local_epochs": 2}


def fedreg_table3_ct(scale: str, seeds: list[int], data: Data) -> Plan:
    """FedReg (Xu et al., ICLR 2022) Table 3, COVID-19 CT images column: telling COVID-19 CT
    images from others with DenseNet-121 over 32 clients, one per image source; SGD, FedAvg,
    FedProx, SCAFFOLD, FedCurv and FedReg; ``R_1.0`` against SGD of the same seed. Needs
    :data:`CT_LAYOUT` (``--data-dir imagefolder=FOLDER``); nothing is downloaded.

    ``paper``: App. B.2's settings: DenseNet-121 with GroupNorm (4 groups, as FedReg's code)
    and its 7x7 map flattened into the head, 224x224 images, 10 of the 32 clients per round,
    10 rounds, 20 local epochs of batch 10, lr 1e-4 (SGD), 1e-3 (FedAvg, FedProx, FedCurv),
    5e-4 (SCAFFOLD) or 5e-3 (FedReg), μ 1, λ 1e-4, γ 0.5, η_s 1e-6. ``small``: 32x32 images
    and 2 local epochs, the rest as the paper's. ``ci``: LeNet-5 on 32x32 images, 2 of the
    groups drawn as clients (an MLP on scikit-learn's digits without the folder). Estimate
    (2026-11-28): on a random image folder of the COVID-CT split's size (425 training images
    in 32 groups), FedReg and FedAvg timed for 3 rounds of the small setting with
    ``threads=1`` (about 206 and 32 s a round: FedReg's pseudo data cost 10 sign steps over
    every image) extrapolate to about 90 minutes for 3 seeds with ``--jobs 2``: an upper
    bound, timed while other jobs loaded both cores.
    """
    files = {**data_keys(data), "dataset.groups_file": CT_GROUPS, "partition": "natural"}
    tiny = (  # ci: the image folder where given (2 of its groups), else the 8x8 digits
        {"dataset": "digits", "partition": "iid", "clients": 10, **CI_MLP}
        if data.missing
        else {**files, "clients": 2, "model": "lenet5", "dataset.size": 32}
    )
    base = {
        "eval_every": 1,
        "checkpoint_every": 10,
        **pick(
            scale,
            paper={**files, **CT_PAPER},
            small={**files, **CT_PAPER, **CT_SMALL},
            ci={**CI, "batch_size": CT_PAPER["batch_size"], **tiny},
        ),
    }
    reasons = scale_reasons(
        scale,
        small="scale=small: 32x32 images instead of 224x224 (so the flattened last map is "
        "1x1 instead of 7x7) and 2 local epochs instead of 20: a round of FedReg on "
        "DenseNet-121 takes minutes of a CPU core even so",
        ci=CI_REASON
        + (
            "; scikit-learn's 8x8 digits over 10 clients for the data (no image folder), an MLP"
            if data.missing
            else "; LeNet-5 on 32x32 images, 2 of the groups drawn as clients"
        ),
    )
    why = pick(
        scale,
        paper="the paper's numbers are one run each, after 10 rounds, on a test set of a few "
        "hundred images: a gap of 5 points is within what another seed can move",
        small="2 local epochs on 32x32 images instead of 20 on 224x224: less local drift for "
        "FedReg to correct, and less detail in the images",
        ci="2 rounds of a tiny model on a handful of images decide nothing",
    )
    return Plan(
        title="FedReg (Xu et al., ICLR 2022), Table 3: COVID-19 CT images, DenseNet-121",
        source="FedReg Table 3 (COVID-19 CT images column), §4.1 and App. B.2 (settings)",
        base=base,
        runs=runs(CT_SETTING, CT_METHODS, seeds),
        metrics=["R_1", "final", "top"],
        reference="SGD",
        paper=paper_numbers(TABLE3_CT_COLUMNS, {CT_SETTING: TABLE3_CT}),
        claims=[
            Claim(
                f"{CT_SETTING}: FedReg ends with the highest final accuracy (§4.2: 'further "
                "exhibits the superiority of FedReg in medical image processing applications')",
                highest(CT_SETTING, "FedReg", FEDREG_BASELINES),
                why,
            )
        ],
        reasons=reasons,
        chance=0.5,
        tuning_note=(
            "Not tuned here: every method runs the paper's own values (App. B.2: each method's "
            "learning rate, FedProx's μ, FedCurv's λ, FedReg's γ and η_s), which the paper "
            "chose by grid search at its scale."
        ),
        notes=[
            f"Data: {CT_LAYOUT}. The classes are the sorted names of `train/`'s subfolders; "
            "any two names work.",
            "The paper splits the images into training and test data as He (2020) provides; "
            "FedReg's code evaluates a validation and a test folder apart and the paper does not "
            "say which one its table reports: `test/` is the test split here.",
            "Every image is resized to a square (bilinear) and scaled to [0, 1]: FedReg's code "
            "trains on random resized crops (scale 0.5-1) and horizontal flips, and normalises "
            "with ImageNet's mean and std.",
            "Two classes: the report counts a final accuracy of at most 0.75 (1.5 times a "
            "guess's 0.5) as at chance, and the paper's column (0.511-0.673) lies below it; a "
            "claim is decided only where our models end above it.",
        ],
    )


PRESETS.add(
    "fedreg-table3-ct",
    fedreg_table3_ct,
    "FedReg Table 3 (COVID-19 CT): SGD, FedAvg, FedProx, SCAFFOLD, FedCurv, FedReg; DenseNet-121",
    dataset="imagefolder",
    seeds={"ci": 1, "small": 3, "paper": 3},
    estimate="at most 90 min (3 seeds, --jobs 2; 3 rounds timed under load, 2026-11-28)",
    paper="FedReg (Xu et al., ICLR 2022)",
)
