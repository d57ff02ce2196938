"""``fedretain privacy``: FedReg's privacy comparison (Xu et al., ICLR 2022, §4.5, Table 4).

Two halves, on the configuration given (its dataset, model, clients and local learning rate):

1. **Attack**: every target is one training image held by a client alone, which takes one local
   step (the worst case, FedReg App. B.4) from the initial global model; the attacker inverts
   the update that client sends (:mod:`fedretain.privacy.attacks`) and the reconstruction is
   scored by PSNR and SSIM against the true image. Methods: FedAvg (after one step FedProx's and
   SGD's updates are the same), FedReg with MG, and FedAvg with DP-SGD at each noise
   multiplier σ of a grid (clipping norm C, the client's one image as its batch).
2. **Matched noise**: σ* is the smallest σ of the grid whose mean PSNR is at most FedReg-MG's,
   i.e. DP-SGD protecting at least as well as MG by this measure (the paper tunes σ to "similar
   quality as measured by PSNR"); when no σ of the grid gets there, the largest σ, and the
   report says so.
3. **Training**: the configuration trained with FedAvg (no protection), FedReg with MG, and
   FedAvg and FedProx with DP-SGD at σ*; final accuracy and ε per run.

The targets are ``--images`` (chosen training images) or ``--targets`` drawn with the seed.
Everything goes to ``DIR``: ``attacks/<method>.json`` (per-target PSNR/SSIM),
``reconstructions/<method>.npy`` (the reconstructed images), ``grids/<method>.png`` (originals
above their reconstructions), ``runs/<method>/`` (ordinary run folders), ``psnr_vs_sigma.png``,
``privacy.json`` and ``report.md``, which lists the files. A second invocation skips what is
done and resumes interrupted runs.
"""

from __future__ import annotations

import io
import itertools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from fedretain.algorithms import build_algorithm
from fedretain.core.algorithm import Algorithm
from fedretain.data.base import as_float
from fedretain.errors import ConfigError
from fedretain.experiments.checkpoint import fingerprint
from fedretain.experiments.run import run_experiment
from fedretain.files import (
    atomic_write_bytes,
    atomic_write_text,
    read_json,
    save_figure,
    write_json,
)
from fedretain.privacy.attacks import AttackSettings, attack_targets, mean_std
from fedretain.privacy.dpsgd import DPSGD, with_dpsgd
from fedretain.privacy.quality import mean_image, mean_image_psnr, random_image_psnr, save_grid
from fedretain.recipe.config import (
    Config,
    config_from_text,
    flat_settings,
    load_config,
    make_config,
    resolved,
)
from fedretain.recipe.federation import build_federation, local_optimizer

# FedReg-MG's settings for the attack and its training run (FedReg App. B.4 uses the method's
# γ and learning rate and a smaller η_s: 0.03 on EMNIST, 0.001 on CIFAR-10)
FEDREG_MG = {"algorithm": "fedreg", "algo.mg": True, "algo.eta_s": 0.03}


@dataclass(frozen=True)
class Study:
    """The settings of one privacy comparison (the CLI's options)."""

    targets: int = 8
    images: tuple[int, ...] = ()  # chosen training images (dataset indices); else `targets` drawn
    attack: str = "ig"
    iterations: int = 300
    restarts: int = 1
    tv: float = 1e-4
    steps: int = 1  # the attacked client's local steps (> 1: differentiated through)
    sigmas: tuple[float, ...] = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)
    max_grad_norm: float = 1.0
    fedreg: dict[str, Any] = field(default_factory=lambda: dict(FEDREG_MG))
    train: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.steps < 1:
            raise ConfigError(f"--steps must be >= 1, got {self.steps}")
        if self.targets < 1:
            raise ConfigError(f"--targets must be >= 1, got {self.targets}")
        object.__setattr__(self, "images", tuple(self.images))  # a list from a preset or JSON
        if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in self.images):
            raise ConfigError(
                f"--images must be training-image indices >= 0, got {list(self.images)}"
            )
        if len(set(self.images)) != len(self.images):
            raise ConfigError(f"--images lists an index twice: {list(self.images)}; list each once")
        for key in ("iterations", "restarts"):
            if getattr(self, key) < 1:
                raise ConfigError(f"--{key} must be >= 1, got {getattr(self, key)}")
        if not (self.max_grad_norm > 0 and math.isfinite(self.max_grad_norm)):
            raise ConfigError(f"--max-grad-norm must be a number > 0, got {self.max_grad_norm}")
        if not self.sigmas or any(not (s > 0 and math.isfinite(s)) for s in self.sigmas):
            raise ConfigError(
                f"--sigmas must be finite noise multipliers > 0, got {self.sigmas}; "
                "e.g. --sigmas 0.01,0.1,1"
            )
        if list(self.sigmas) != sorted(self.sigmas):
            raise ConfigError(f"--sigmas must be increasing, got {self.sigmas}")

    def attack_settings(self) -> AttackSettings:
        return (
            AttackSettings.for_method(
                self.attack, iterations=self.iterations, restarts=self.restarts, seed=self.seed
            )
            if self.attack != "ig"
            else AttackSettings(
                iterations=self.iterations, restarts=self.restarts, tv=self.tv, seed=self.seed
            )
        )


def _dp_name(sigma: float, algorithm: str = "fedavg") -> str:
    return f"{algorithm}+dpsgd-{sigma:g}"


# FedReg's Table 4 as a study fills it: row -> (its training run, the attack on its uplink).
# After one local step FedProx's update is FedAvg's (its proximal term is still zero), so
# FedProx with DP-SGD shares FedAvg with DP-SGD's attack.
TABLE_ROWS = ("FedAvg", "FedReg with MG", "FedAvg with DP-SGD", "FedProx with DP-SGD")


def table_rows(result: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """:data:`TABLE_ROWS` of a finished study (``privacy.json``): each row's run and attack
    names, the DP-SGD rows at the matched noise σ*."""
    sigma = result["sigma_matched"]
    return {
        "FedAvg": ("fedavg", "fedavg"),
        "FedReg with MG": ("fedreg-mg", "fedreg-mg"),
        "FedAvg with DP-SGD": (_dp_name(sigma), _dp_name(sigma)),
        "FedProx with DP-SGD": (_dp_name(sigma, "fedprox"), _dp_name(sigma)),
    }


def study_args(study: Study) -> list[str]:
    """``study`` as ``fedretain privacy``'s options (those that differ from the defaults)."""
    args = []
    default = Study()
    for key in ("targets", "attack", "iterations", "restarts", "steps", "max_grad_norm", "seed"):
        if getattr(study, key) != getattr(default, key):
            args += [f"--{key.replace('_', '-')}", str(getattr(study, key))]
    if study.images:
        args += ["--images", ",".join(str(i) for i in study.images)]
    if study.sigmas != default.sigmas:
        args += ["--sigmas", ",".join(f"{s:g}" for s in study.sigmas)]
    if not study.train:
        args.append("--no-train")
    return args


def _target_indices(num: int, study: Study, dataset: str) -> list[int]:
    """The chosen ``study.images`` (checked against the ``num`` training images), else
    ``study.targets`` indices drawn with ``study.seed``."""
    if study.images:
        outside = [i for i in study.images if i >= num]
        if outside:
            raise ConfigError(
                f"--images {','.join(map(str, outside))} out of range: {dataset} has {num} "
                f"training images; pass indices 0 to {num - 1}"
            )
        return list(study.images)
    rng = np.random.default_rng([study.seed, 0x505356])
    return sorted(int(i) for i in rng.choice(num, size=min(study.targets, num), replace=False))


class PrivacyStudy:
    """One comparison in ``out`` for the configuration ``cfg``."""

    def __init__(self, cfg: Config, out: str | Path, study: Study) -> None:
        if cfg.stop_after:
            raise ConfigError(
                "stop_after pauses a run, and a privacy study runs its attacks and trainings "
                "whole; drop stop_after (a killed study continues from its finished parts)"
            )
        self.cfg, self.out, self.study = cfg, Path(out), study
        self.fed = build_federation(cfg)
        dataset = self.fed.dataset
        self.indices = _target_indices(len(dataset.y_train), study, dataset.name)
        self.attacks: dict[str, dict[str, Any]] = {}

    # ----------------------------------------------------------------------------- attacks

    def _algorithm(self, method: str) -> Algorithm:
        opt = local_optimizer(self.cfg)
        if method == "fedavg":
            return build_algorithm("fedavg", opt)
        if method == "fedreg-mg":
            params = {k.removeprefix("algo."): v for k, v in self.study.fedreg.items() if "." in k}
            return build_algorithm("fedreg", opt, **params)
        sigma = float(method.rpartition("-")[2])
        dp = DPSGD(sigma, self.study.max_grad_norm, expected_batch_size=1)
        return with_dpsgd(build_algorithm("fedavg", opt), dp)

    def files(self, method: str) -> dict[str, Path]:
        """Where ``method``'s attack is written: its per-target ``json``, the ``reconstructions``
        (``.npy``, (targets, C, H, W) in [0, 1], in the order of the targets) and the ``grid``
        (PNG: originals on top, reconstructions below)."""
        return {
            "json": self.out / "attacks" / f"{method}.json",
            "reconstructions": self.out / "reconstructions" / f"{method}.npy",
            "grid": self.out / "grids" / f"{method}.png",
        }

    def attack(self, method: str) -> dict[str, Any]:
        """Per-target PSNR/SSIM of the attack on ``method``'s one-step update (cached; the
        reconstructions and their grid are written before the JSON that marks it done)."""
        files = self.files(method)
        path = files["json"]
        if path.exists() and files["reconstructions"].exists():
            result = read_json(path)
            if result["indices"] == self.indices and result["study"] == self._key():
                self.attacks[method] = result
                return result
        fed = self.fed
        torch.manual_seed(self.cfg.seed)
        server = fed.algorithm.server_init(*fed.task.init())
        algorithm = self._algorithm(method)
        rows = attack_targets(
            algorithm,
            fed.task,
            algorithm.server_init(server["x"], server["buffers"]),
            fed.dataset,
            self.indices,
            self.cfg.lr,
            self.study.attack_settings(),
            steps=self.study.steps,
        )
        reconstructions = torch.stack([r.pop("reconstruction") for r in rows])
        buffer = io.BytesIO()
        np.save(buffer, reconstructions.numpy())
        atomic_write_bytes(files["reconstructions"], buffer.getvalue())
        if reconstructions.dim() == 4:  # images: draw them
            originals = torch.stack([self._image(i) for i in self.indices])
            save_grid(originals, reconstructions, files["grid"], psnrs=[r["psnr"] for r in rows])
        psnr, psnr_std = mean_std(rows, "psnr")
        ssim, ssim_std = mean_std(rows, "ssim")
        result = {
            "method": method,
            "indices": self.indices,
            "study": self._key(),
            "psnr": psnr,
            "psnr_std": psnr_std,
            "ssim": ssim,
            "ssim_std": ssim_std,
            "label_accuracy": float(np.mean([r["label_guess"] == r["label_true"] for r in rows])),
            "targets": rows,
        }
        write_json(path, result)
        self.attacks[method] = result
        return result

    def _image(self, i: int) -> torch.Tensor:
        return as_float(self.fed.dataset.x_train[i])

    def _key(self) -> dict[str, Any]:
        s = self.study
        return {
            "attack": s.attack,
            "iterations": s.iterations,
            "restarts": s.restarts,
            "tv": s.tv,
            "steps": s.steps,
            "max_grad_norm": s.max_grad_norm,
            "fedreg": s.fedreg,
            "seed": s.seed,
            "ssim": "standard",  # Wang et al. as scikit-image computes it (7x7, no padding)
            "lr": self.cfg.lr,
            "model": self.cfg.model,
            "model_params": self.cfg.model_params,
            "dataset": self.cfg.dataset,
            "config_seed": self.cfg.seed,
        }

    def baselines(self) -> dict[str, Any]:
        """PSNR of a uniform random image and of the mean training image against each target
        (means, and the per-target values)."""
        targets = torch.stack([self._image(i) for i in self.indices])
        random = random_image_psnr(targets, self.study.seed)
        mean = mean_image_psnr(mean_image(self.fed.dataset), targets)
        return {
            "random": float(random.mean()),
            "mean_image": float(mean.mean()),
            "per_target": {"random": random.tolist(), "mean_image": mean.tolist()},
        }

    def matched_sigma(self) -> tuple[float, bool]:
        """σ*: the smallest σ whose mean PSNR is at most FedReg-MG's (matched: True), else the
        largest σ of the grid (False)."""
        target = self.attacks["fedreg-mg"]["psnr"]
        for sigma in self.study.sigmas:
            if self.attacks[_dp_name(sigma)]["psnr"] <= target:
                return sigma, True
        return self.study.sigmas[-1], False

    # ----------------------------------------------------------------------------- training

    def train(self, name: str, overrides: dict[str, Any]) -> dict[str, Any]:
        """Run (or resume, or reuse) the training run ``runs/<name>``; a folder holding a run
        of other settings is refused."""
        folder = self.out / "runs" / name
        base = flat_settings(resolved(self.cfg))
        base = {k: v for k, v in base.items() if not k.startswith(("algo.", "privacy."))}
        cfg = make_config({**base, "name": name, **overrides})
        if (folder / "summary.json").exists():
            done = config_from_text((folder / "config.toml").read_text())
            if fingerprint(done) != fingerprint(cfg):
                raise ConfigError(
                    f"{folder} holds a run of other settings; use another --out or delete it"
                )
            return read_json(folder / "summary.json")
        resume = (folder / "checkpoint" / "meta.json").exists()
        return run_experiment(cfg, folder, progress=False, resume=resume)

    def runs(self, sigma: float) -> dict[str, dict[str, Any]]:
        dp = {
            "privacy": "dpsgd",
            "privacy.noise_multiplier": sigma,
            "privacy.max_grad_norm": self.study.max_grad_norm,
        }
        plan = {
            "fedavg": {"algorithm": "fedavg"},
            "fedreg-mg": dict(self.study.fedreg),
            _dp_name(sigma): {"algorithm": "fedavg", **dp},
            _dp_name(sigma, "fedprox"): {"algorithm": "fedprox", **dp},
        }
        return {name: self.train(name, overrides) for name, overrides in plan.items()}

    # ----------------------------------------------------------------------------- all of it

    def run(self) -> dict[str, Any]:
        methods = ["fedavg", "fedreg-mg", *(_dp_name(s) for s in self.study.sigmas)]
        for method in methods:
            self.attack(method)
        sigma, matched = self.matched_sigma()
        result: dict[str, Any] = {
            "config": self.cfg.label,
            "study": {**asdict(self.study), "sigmas": list(self.study.sigmas)},
            "targets": self.indices,
            "baselines": self.baselines(),
            "attacks": {
                m: {
                    **{k: v for k, v in a.items() if k != "targets"},
                    "per_target_psnr": [t["psnr"] for t in a["targets"]],
                }
                for m, a in self.attacks.items()
            },
            "sigma_matched": sigma,
            "matched": matched,
        }
        if self.study.train:
            result["runs"] = {
                name: {
                    "final_accuracy": s["final_accuracy"],
                    "top_accuracy": s["top_accuracy"],
                    "epsilon": s.get("privacy", {}).get("epsilon"),
                    "rounds": s["rounds"],
                }
                for name, s in self.runs(sigma).items()
            }
        write_json(self.out / "privacy.json", result)
        plot_psnr_vs_sigma(result, self.out / "psnr_vs_sigma.png")
        atomic_write_text(self.out / "report.md", report(result, self.out))
        return result


def plot_psnr_vs_sigma(result: dict[str, Any], path: Path) -> None:
    """Mean PSNR (± std) of the attack against DP-SGD's σ, with FedAvg, FedReg-MG and the
    baselines as horizontal lines."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    sigmas = result["study"]["sigmas"]
    attacks = result["attacks"]
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    means = [attacks[_dp_name(s)]["psnr"] for s in sigmas]
    stds = [attacks[_dp_name(s)]["psnr_std"] for s in sigmas]
    ax.errorbar(sigmas, means, yerr=stds, marker="o", label="FedAvg + DP-SGD", capsize=3)
    lines = [
        (attacks["fedavg"]["psnr"], "FedAvg", "C1"),
        (attacks["fedreg-mg"]["psnr"], "FedReg with MG", "C2"),
        (result["baselines"]["random"], "random image", "0.5"),
        (result["baselines"]["mean_image"], "mean image", "0.3"),
    ]
    for value, label, color in lines:
        ax.axhline(value, color=color, linestyle="--", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("DP-SGD noise multiplier σ")
    ax.set_ylabel("PSNR of the reconstruction (dB)")
    ax.legend(fontsize=8)
    save_figure(fig, path)


def _pm(mean: float, std: float, digits: int = 2) -> str:
    if not math.isfinite(mean):
        return str(mean)
    return f"{mean:.{digits}f} ± {std:.{digits}f}" if math.isfinite(std) else f"{mean:.{digits}f}"


def _wins(attacks: dict[str, Any], base: dict[str, Any]) -> str:
    """ ", above both baselines on k of n targets" (per-target values, when recorded)."""
    rows, per = attacks["fedavg"].get("per_target_psnr"), base.get("per_target")
    if not rows or not per:
        return ""
    wins = sum(
        p > max(r, m) for p, r, m in zip(rows, per["random"], per["mean_image"], strict=True)
    )
    return f", above both baselines of the same image on {wins} of {len(rows)} targets"


def report(result: dict[str, Any], out: Path) -> str:
    """The Table-4-style report, its sentences generated from the numbers."""
    study, attacks, base = result["study"], result["attacks"], result["baselines"]
    sigma, matched = result["sigma_matched"], result["matched"]
    lines = [
        f"# Privacy: gradient inversion against FedReg with MG and DP-SGD ({result['config']})",
        "",
        f"Attack: {study['attack']}, {study['iterations']} iterations, {study['restarts']} "
        f"restart(s), on {study.get('steps', 1)} local step(s) of a client holding one training "
        f"image, from the "
        f"initial global model; {len(result['targets'])} targets (training images "
        f"{', '.join(map(str, result['targets']))}). DP-SGD: clipping norm "
        f"{study['max_grad_norm']}, the image as the batch.",
        "",
        "| method | PSNR (dB) | SSIM | label recovered |",
        "|---|---|---|---|",
    ]
    for method, a in attacks.items():
        lines.append(
            f"| {method} | {_pm(a['psnr'], a['psnr_std'])} | {_pm(a['ssim'], a['ssim_std'], 3)} "
            f"| {a['label_accuracy']:.2f} |"
        )
    lines += [
        f"| random image (baseline) | {base['random']:.2f} | | |",
        f"| mean training image (baseline) | {base['mean_image']:.2f} | | |",
        "",
    ]
    fa, mg = attacks["fedavg"]["psnr"], attacks["fedreg-mg"]["psnr"]
    floor = max(base["random"], base["mean_image"])
    lines.append(
        f"The attack on FedAvg's update reaches {fa:.2f} dB, "
        f"{'above' if fa > floor else 'not above'} the better baseline ({floor:.2f} dB)"
        + _wins(attacks, base)
        + f". FedReg with MG {'lowers' if mg < fa else 'does not lower'} it to {mg:.2f} dB."
    )
    dp = [attacks[_dp_name(s)]["psnr"] for s in study["sigmas"]]
    monotone = all(a >= b for a, b in itertools.pairwise(dp))
    trend = "falls monotonically" if monotone else "does not fall monotonically"
    pairs = ", ".join(f"{s:g}: {p:.2f}" for s, p in zip(study["sigmas"], dp, strict=True))
    lines.append(f"Under DP-SGD the PSNR {trend} as σ grows ({pairs}).")
    lines.append(
        f"Matched noise: σ* = {sigma:g}"
        + (
            f", the smallest σ of the grid whose PSNR is at most FedReg-MG's ({mg:.2f} dB)."
            if matched
            else f": no σ of the grid brings the PSNR down to FedReg-MG's ({mg:.2f} dB); the "
            "largest σ is used, so DP-SGD protects less than MG here."
        )
    )
    lines += ["", "![PSNR against sigma](psnr_vs_sigma.png)", ""]
    if "runs" in result:
        runs = result["runs"]
        lines += [
            "## Accuracy of the models trained with each method",
            "",
            "| method | final accuracy | top accuracy | ε (δ from the config) | rounds |",
            "|---|---|---|---|---|",
        ]
        for name, r in runs.items():
            eps = "-" if r["epsilon"] is None else f"{r['epsilon']:.3g}"
            lines.append(
                f"| {name} | {r['final_accuracy']:.4f} | {r['top_accuracy']:.4f} | {eps} "
                f"| {r['rounds']} |"
            )
        mg_acc = runs["fedreg-mg"]["final_accuracy"]
        dp_runs = {k: v["final_accuracy"] for k, v in runs.items() if "dpsgd" in k}
        best_dp = max(dp_runs, key=dp_runs.get)
        kept = mg_acc > dp_runs[best_dp]
        lines += [
            "",
            f"FedReg with MG {'kept more' if kept else 'did not keep more'} accuracy than the "
            f"baselines with DP-SGD at {'matched' if matched else 'the largest'} noise: "
            f"{mg_acc:.4f} against {dp_runs[best_dp]:.4f} ({best_dp}); FedAvg without "
            f"protection reached {runs['fedavg']['final_accuracy']:.4f}. FedReg's Table 4 "
            "(EMNIST): FedReg with MG 0.986, FedAvg with DP-SGD 0.882, FedProx with DP-SGD "
            "0.881. SGD with DP-SGD and FedCurv with DP-SGD are not run: DP-SGD here clips "
            "mini-batch steps (SGD's one full-batch step is refused) and FedCurv's uplink "
            "carries a Fisher computed from raw data, which DP-SGD does not cover.",
        ]
    lines += ["", "## Reconstructions", "", "Originals on top, reconstructions below:", ""]
    for method in attacks:
        if (out / "grids" / f"{method}.png").exists():
            lines.append(f"- {method}: ![{method}](grids/{method}.png)")
    lines += ["", "## Files", ""]
    files = [
        ("privacy.json", "every number of this report"),
        ("psnr_vs_sigma.png", "the attack's PSNR against DP-SGD's σ"),
        *((f"attacks/{m}.json", f"{m}: PSNR, SSIM and label per target") for m in attacks),
        *(
            (f"reconstructions/{m}.npy", f"{m}: the reconstructions, (targets, C, H, W)")
            for m in attacks
        ),
        *((f"grids/{m}.png", f"{m}: originals and reconstructions") for m in attacks),
        *((f"runs/{name}/", "a training run's folder") for name in result.get("runs", {})),
    ]
    lines += [f"- `{name}`: {what}" for name, what in files if (out / name).exists()]
    return "\n".join(lines) + "\n"


def run_privacy(
    config: str | None, overrides: Sequence[str], out: str | Path, study: Study
) -> dict[str, Any]:
    """``fedretain privacy``: the comparison for ``config`` + ``overrides`` in ``out``."""
    cfg = load_config(config, list(overrides))
    return PrivacyStudy(cfg, out, study).run()


__all__ = [
    "FEDREG_MG",
    "TABLE_ROWS",
    "PrivacyStudy",
    "Study",
    "report",
    "run_privacy",
    "study_args",
    "table_rows",
]
