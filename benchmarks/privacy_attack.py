"""Gradient inversion of one-step client updates: FedAvg against FedReg with MG, per model.

After FedReg (Xu et al., ICLR 2022, arXiv:2203.02645, §4.5, App. B.4): each target is a
training image held alone by a client that takes one local step (lr 0.1) from the global
model, FedReg's MNIST CNN (``cnn``, untrained by default, or after ``--pretrain`` FedAvg-like
SGD steps on other images). The attacker sees the uplink, knows the global model, and inverts
the update (``fedretain.privacy.attacks``) with the label unknown (DLG optimises it, IG reads
it off the update with iDLG's rule). Reported: mean ± std PSNR and SSIM over the targets,
the label accuracy, and two baselines against the same targets: a uniform random image and
the dataset's mean training image.

Rows: ``fedavg`` (FedAvg, FedProx, FedCurv and SGD send the same update after one step) and
``fedreg-mg`` (FedReg with MG: γ 0.4, η_s 0.03 as the paper's EMNIST privacy setting, the
rest FedReg's defaults: E 10 sign steps, η_p 0.01 η_s); methods ``ig`` (Inverting Gradients:
cosine, sign-Adam, TV 1e-4), ``dlg`` (L2, L-BFGS) and ``ig-l2`` (the paper's EMNIST attack:
Adam, L2, lr 1, TV 1e-8). The paper runs 32,000 attack iterations; the defaults here are
sized for a CPU (``--iterations``, ``--restarts``).

Models: any zoo model (``--model cnn``, the default; ``mlp`` with ``--hidden``), or
``lenet-dlg``, the LeNet of DLG's code (Zhu et al., 2019: three 5x5 convolutions of 12
channels with sigmoids, weights uniform in [-0.5, 0.5]); ``--activation`` replaces the ReLUs
of a zoo model (sigmoid, softplus, tanh), or DLG's LeNet's sigmoids (relu, ...), to measure
what a twice-differentiable activation changes (``--avg-pool``: average pooling for max
pooling as well). ``--images`` attacks chosen training images instead of ``--targets`` drawn
ones.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/privacy_attack.py
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/privacy_attack.py --targets 2 --iterations 50
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/privacy_attack.py --model lenet-dlg \
        --methods idlg --algorithms fedavg --images 0,1
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

from fedretain.algorithms import build_algorithm
from fedretain.core.task import Task
from fedretain.data.base import as_float
from fedretain.data.datasets import load_dataset
from fedretain.losses.ce import ce
from fedretain.models import build_model
from fedretain.privacy.attacks import AttackSettings, attack_targets, mean_std
from fedretain.privacy.quality import mean_image, mean_image_psnr, random_image_psnr, save_grid

LR = 0.1
ACTIVATIONS = {"relu": nn.ReLU, "sigmoid": nn.Sigmoid, "softplus": nn.Softplus, "tanh": nn.Tanh}


def make_model(
    args: argparse.Namespace, input_shape: tuple[int, ...], num_classes: int
) -> nn.Module:
    if args.model == "lenet-dlg":
        return build_model(
            "lenet-dlg", input_shape, num_classes, activation=args.activation or "sigmoid"
        )
    params = {"hidden": [int(h) for h in args.hidden.split(",")]} if args.model == "mlp" else {}
    model = build_model(args.model, input_shape, num_classes, **params)
    for parent in model.modules():
        for name, child in parent.named_children():
            if args.activation and isinstance(child, nn.ReLU):
                setattr(parent, name, ACTIVATIONS[args.activation]())
            if args.avg_pool and isinstance(child, nn.MaxPool2d):
                setattr(parent, name, nn.AvgPool2d(child.kernel_size, child.stride))
    return model


def settings_for(
    method: str, iterations: int, restarts: int, seed: int, init: str
) -> AttackSettings:
    common = {"iterations": iterations, "restarts": restarts, "seed": seed}
    if init:
        common["init"] = init
    if method == "ig-l2":  # FedReg App. B.4, EMNIST: Adam, L2 distance, lr 1, TV 1e-8
        return AttackSettings.for_method("ig", distance="l2", lr=1.0, tv=1e-8, **common)
    return AttackSettings.for_method(method, **common)


def pretrain(task: Task, state: dict, dataset, steps: int, seed: int) -> dict:
    """``steps`` SGD steps (batch 32, lr 0.05) on images outside the targets' range."""
    rng = np.random.default_rng(seed + 1)
    params = state["x"]
    for _ in range(steps):
        num = len(dataset.y_train)
        idx = torch.from_numpy(rng.choice(np.arange(num // 2, num), 32, replace=False))
        batch = {
            "x": as_float(dataset.x_train[idx]),
            "y": dataset.y_train[idx],
            "w": torch.ones(32),
        }
        grads, _, _ = task.grad(params, state["buffers"], batch)
        params = {k: params[k] - 0.05 * grads[k] for k in params}
    return {**state, "x": params}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--dataset", default="fashion-mnist")
    ap.add_argument("--model", default="cnn", help="a zoo model, or lenet-dlg")
    ap.add_argument("--hidden", default="200,200", help="the mlp's hidden sizes")
    ap.add_argument("--activation", default="", choices=["", *ACTIVATIONS], help="see above")
    ap.add_argument("--avg-pool", action="store_true", help="average pooling for max pooling")
    ap.add_argument("--targets", type=int, default=8, help="training images attacked")
    ap.add_argument("--images", default="", help="chosen training images I,J (not --targets)")
    ap.add_argument("--init", default="", help="normal or uniform (default: the method's)")
    ap.add_argument("--methods", default="ig,dlg", help="ig, dlg, idlg, ig-l2")
    ap.add_argument("--algorithms", default="fedavg,fedreg-mg")
    ap.add_argument("--iterations", type=int, default=400, help="per restart (DLG: L-BFGS)")
    ap.add_argument("--restarts", type=int, default=2, help="IG restarts (DLG: 1)")
    ap.add_argument("--pretrain", type=int, default=0, help="SGD steps before the attack")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grid", default="", help="folder for PNG grids (none when empty)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    dataset = load_dataset(args.dataset)
    half = len(dataset.y_train) // 2  # --pretrain uses the other half
    rng = np.random.default_rng(args.seed)
    indices = [int(i) for i in args.images.split(",") if i.strip()] or sorted(
        int(i) for i in rng.choice(half, args.targets, replace=False)
    )
    targets = as_float(dataset.x_train[indices])
    torch.manual_seed(args.seed)
    model = make_model(args, dataset.input_shape, dataset.num_classes)
    task = Task(model, ce, dataset.num_classes)
    algorithms = {
        "fedavg": build_algorithm("fedavg"),
        "fedreg-mg": build_algorithm("fedreg", gamma=0.4, eta_s=0.03, mg=True),
        "fedreg": build_algorithm("fedreg", gamma=0.4, eta_s=0.03),
    }
    params, buffers = task.init()
    state = algorithms["fedavg"].server_init(params, buffers)
    if args.pretrain:
        state = pretrain(task, state, dataset, args.pretrain, args.seed)
    acc, _ = task.evaluate(state["x"], state["buffers"], dataset.x_test, dataset.y_test)

    activation = args.activation or ("sigmoid" if args.model == "lenet-dlg" else "relu")
    activation += ", average pooling" if args.avg_pool else ""
    print(
        f"machine: {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{args.threads} thread(s); {args.dataset}, {args.model} ({activation}; "
        f"{args.pretrain} pretraining steps, test accuracy {acc:.3f}), one local step at lr "
        f"{LR}, targets {indices}"
    )
    rand = random_image_psnr(targets, seed=args.seed)
    mean = mean_image_psnr(mean_image(dataset), targets)
    print("| algorithm | attack | PSNR dB | SSIM | label acc. | s |")
    print("|---|---|---|---|---|---|")
    print(f"| baseline | uniform random image | {rand.mean():.2f} ± {rand.std(False):.2f} | | | |")
    print(f"| baseline | mean training image | {mean.mean():.2f} ± {mean.std(False):.2f} | | | |")
    for name in args.algorithms.split(","):
        for method in args.methods.split(","):
            restarts = args.restarts if method.startswith("ig") else 1
            settings = settings_for(method, args.iterations, restarts, args.seed, args.init)
            t0 = time.perf_counter()
            results = attack_targets(algorithms[name], task, state, dataset, indices, LR, settings)
            seconds = time.perf_counter() - t0
            p, ps = mean_std(results, "psnr")
            s, ss = mean_std(results, "ssim")
            labels = np.mean([r["label_guess"] == r["label_true"] for r in results])
            print(
                f"| {name} | {method} | {p:.2f} ± {ps:.2f} | {s:.3f} ± {ss:.3f} "
                f"| {labels:.2f} | {seconds:.0f} |"
            )
            if args.grid:
                rec = torch.stack([r["reconstruction"] for r in results])
                path = Path(args.grid) / f"{name}-{method}.png"
                save_grid(targets, rec, path, psnrs=[r["psnr"] for r in results])


if __name__ == "__main__":
    main()
