"""Gradient-inversion attacks on a client's uplink: recover its training images from its update.

The server sees, in each client's uplink, how the client moved the global model
(:func:`observed_update`: ``y − x``, SCAFFOLD's ``dy``, GradMA's ``−d``). The attacker models
the client as plain SGD from the global parameters: ``steps`` steps at ``lr`` on
``CE(F(x'), y')`` (:func:`simulated_update`, differentiable in ``x'`` and ``y'``; with one step
``Δ' = −lr ∇θ CE``), and searches for inputs whose simulated update matches the observed one:

- **DLG** (Zhu, Liu, Han, "Deep Leakage from Gradients", NeurIPS 2019, arXiv:1906.08935):
  minimise ``Σ_layers ‖Δ' − Δ‖²`` over ``x'`` and a soft label ``softmax(y')``, both drawn
  from a standard normal, with L-BFGS (lr 1).
- **iDLG** (Zhao, Mopuri, Bilen, "iDLG: Improved Deep Leakage from Gradients", 2020,
  arXiv:2001.02610): for one image, the label is read off the last linear layer. Its
  weight-gradient row ``c`` is ``(p_c − 1[c = y]) h`` with ``h ≥ 0`` (a ReLU output or the
  data), so only the true class's row sums to a negative number; the update is ``Δ = −lr g``,
  so the true label is the argmax of the update's row sums (the argmin of the gradient's).
  Then ``x'`` alone is optimised as in DLG.
- **Inverting Gradients** (Geiping, Bauermeister, Dröge, Moeller, "Inverting Gradients — How
  easy is it to break privacy in federated learning?", NeurIPS 2020, arXiv:2003.14053):
  minimise ``1 − cos(Δ', Δ)`` over all layers concatenated plus ``α_TV · TV(x')``, with Adam on
  the *sign* of the gradient (lr 0.1, ×0.1 at 3/8, 5/8 and 7/8 of the iterations), ``x'``
  clamped into the data box [0, 1] after every step, several restarts keeping the lowest
  loss; the label from iDLG's rule for one image (given otherwise).

FedReg (Xu, Hong, Huang, Jiang, ICLR 2022, arXiv:2203.02645, §4.5 and App. B.4) attacks the
update of one local step per image with these two distances; :func:`target_update` runs any
registered algorithm's own client code on the target images, so the attack reads the uplink
of FedAvg, SCAFFOLD, GradMA or FedReg with MG alike, while the attacker keeps modelling the
client as plain SGD.

Choices:

- Distances are taken on ``Δ / lr`` (the gradient, for one step): the minimiser is the same,
  and L-BFGS's tolerances see the gradient's scale rather than ``lr²`` times it.
- ``iterations`` counts L-BFGS iterations (one loss evaluation each, no line search, as DLG's
  code; its 300 ``step`` calls ran up to 20 iterations each) and Adam steps. L-BFGS keeps the
  iterate of lowest loss, and stops at the first non-finite loss (DLG's L-BFGS diverges on a
  share of images).
- Every reconstruction is returned clamped into the data box, so PSNR compares like with like.
- iDLG starts ``x'`` uniform in the data box rather than from a standard normal draw: through
  DLG's sigmoid LeNet on Fashion-MNIST it then recovers every image tried (72 dB against
  22 ± 18 dB; docs/privacy.md). DLG keeps the normal draw, with which it did better there.
- The attacker's loss is plain cross-entropy whatever the task's training loss (as the papers).
- Defaults are sized for a CPU: IG runs 400 iterations and 2 restarts (Geiping et al. run
  24,000 and 8 restarts on ImageNet; FedReg 32,000); α_TV is 1e-4 (the papers use 1e-6 to
  1e-1; FedReg's EMNIST setting is Adam, L2, lr 1, α_TV 1e-8:
  ``AttackSettings(method="ig", distance="l2", lr=1.0, tv=1e-8)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedretain.core.algorithm import Algorithm, RoundInfo
from fedretain.core.client import train_client
from fedretain.core.task import Task
from fedretain.core.tree import Tree, flatten, tree_map
from fedretain.data.base import Dataset, as_float
from fedretain.errors import ConfigError, unknown_choice
from fedretain.losses.ce import ce
from fedretain.privacy.quality import psnr, ssim

__all__ = [
    "DISTANCES",
    "METHODS",
    "AttackSettings",
    "Reconstruction",
    "attack_targets",
    "head_key",
    "infer_label",
    "invert",
    "mean_std",
    "observed_update",
    "simulated_update",
    "target_update",
]

METHODS = ("dlg", "idlg", "ig")
DISTANCES = ("l2", "cosine")
INITS = ("normal", "uniform")

# per-method defaults (the dataclass's own defaults are Inverting Gradients')
_LBFGS = {"iterations": 300, "lr": 1.0, "restarts": 1, "tv": 0.0, "distance": "l2"}
METHOD_DEFAULTS: dict[str, dict[str, Any]] = {
    "dlg": {**_LBFGS, "init": "normal"},
    "idlg": {**_LBFGS, "init": "uniform"},
    "ig": {"iterations": 400, "lr": 0.1, "restarts": 2, "tv": 1e-4, "distance": "cosine"},
}


def _is_int(v: object) -> bool:
    return isinstance(v, int | np.integer) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float | np.number) and not isinstance(v, bool)


@dataclass(frozen=True)
class AttackSettings:
    """How to invert an update. The defaults are Inverting Gradients' (sized for a CPU);
    :meth:`for_method` gives another method's defaults.

    - ``method``: ``dlg``, ``idlg`` or ``ig``;
    - ``iterations``: L-BFGS iterations (DLG, iDLG) or Adam steps (IG), per restart;
    - ``lr``: the optimiser's learning rate (L-BFGS 1, Adam 0.1);
    - ``restarts``: independent random starts; the one of lowest final loss is kept;
    - ``tv``: weight α_TV of the total variation of ``x'``;
    - ``distance``: ``l2`` (DLG's) or ``cosine`` (IG's);
    - ``box``: the data box ``x'`` is clamped into (IG: every step; all: the result);
    - ``init``: where ``x'`` starts: ``normal`` (a standard normal draw, as the papers' code;
      DLG's and IG's default) or ``uniform`` (uniform in the data box; iDLG's default here);
    - ``seed``: the same seed gives the same reconstruction.
    """

    method: str = "ig"
    iterations: int = 400
    lr: float = 0.1
    restarts: int = 2
    tv: float = 1e-4
    distance: str = "cosine"
    box: tuple[float, float] = (0.0, 1.0)
    init: str = "normal"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ConfigError(unknown_choice("attack method", self.method, METHODS))
        if self.distance not in DISTANCES:
            raise ConfigError(unknown_choice("attack distance", self.distance, DISTANCES))
        if self.init not in INITS:
            raise ConfigError(unknown_choice("attack init", self.init, INITS))
        for name in ("iterations", "restarts"):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ConfigError(f"attack {name} must be an integer >= 1, got {value!r}")
        if not _is_number(self.lr) or not math.isfinite(self.lr) or self.lr <= 0:
            raise ConfigError(f"attack lr must be a finite number > 0, got {self.lr!r}")
        if not _is_number(self.tv) or not math.isfinite(self.tv) or self.tv < 0:
            raise ConfigError(f"attack tv (the TV weight) must be a number >= 0, got {self.tv!r}")
        box = self.box
        if (
            not isinstance(box, tuple | list)
            or len(box) != 2
            or not all(_is_number(b) and math.isfinite(b) for b in box)
            or not box[0] < box[1]
        ):
            raise ConfigError(f"attack box must be (low, high) with low < high, got {box!r}")
        if not _is_int(self.seed):
            raise ConfigError(f"attack seed must be an integer, got {self.seed!r}")

    @classmethod
    def for_method(cls, method: str, **overrides: Any) -> AttackSettings:
        """``method``'s defaults (DLG/iDLG: 300 L-BFGS iterations, lr 1, L2, no TV; iDLG
        starts uniform in the box; IG: the class defaults) with ``overrides``."""
        if method not in METHODS:
            raise ConfigError(unknown_choice("attack method", method, METHODS))
        names = {f.name for f in fields(cls)}
        for key in overrides:
            if key not in names:
                raise ConfigError(unknown_choice("attack setting", key, names - {"method"}))
        return cls(method=method, **{**METHOD_DEFAULTS[method], **overrides})


@dataclass(frozen=True)
class Reconstruction:
    """An attack's result: the images ``x`` (clamped into the data box), the labels it used
    or guessed (``(B,)``), and its final loss (the lowest over restarts)."""

    x: Tensor
    labels: Tensor
    loss: float
    method: str


# --------------------------------------------------------------------------- what the server sees


def observed_update(uplink: Tree, downlink: Tree) -> Tree:
    """The parameter update a client's uplink reveals: ``y − x`` for an uplink with the local
    model ``y`` (FedAvg, FedProx, FedReg, ...), ``dy`` (SCAFFOLD), ``−d`` (GradMA's
    ``d = x − y``). ``downlink`` is what the client received (its ``x``)."""
    if "y" in uplink:
        return tree_map(lambda y, x: (y - x).detach(), uplink["y"], downlink["x"])
    if "dy" in uplink:
        return tree_map(lambda d: d.detach(), uplink["dy"])
    if "d" in uplink:
        return tree_map(lambda d: (-d).detach(), uplink["d"])
    raise ConfigError(
        f"uplink with keys {tuple(uplink)} carries no model update (y, dy or d); "
        "attack an algorithm whose uplink holds its local model or update"
    )


def target_update(
    algorithm: Algorithm,
    task: Task,
    server_state: Tree,
    x: Tensor,
    y: Tensor,
    lr: float,
    steps: int = 1,
    seed: int = 0,
) -> Tree:
    """The update a client holding only ``(x, y)`` sends after ``steps`` local steps at ``lr``,
    each on the whole of ``(x, y)``: ``algorithm``'s own ``broadcast``, ``client_init`` and
    :func:`~fedretain.core.client.train_client`, then :func:`observed_update`.

    ``x`` is a batch of inputs (uint8 images are scaled to [0, 1]; one image without a batch
    axis is taken with a 0-d ``y``), ``y`` their labels.
    """
    _check_lr_steps(lr, steps)
    x, y = _as_batch(x, y)
    device = next(iter(server_state["x"].values())).device
    x, y = x.to(device), y.to(device)
    info = RoundInfo(round=0, num_clients=1, clients=(0,), lr=float(lr), seed=int(seed))
    downlink = algorithm.broadcast(server_state, info)
    client_state = algorithm.client_init(downlink["x"])
    label_mask = torch.zeros(task.num_classes, dtype=torch.bool, device=device)
    label_mask[y] = True
    data = {"x": x, "y": y, "w": torch.ones(len(y), device=device), "label_mask": label_mask}
    plan = [np.arange(len(y)) for _ in range(steps)]
    update = train_client(algorithm, task, downlink, client_state, data, plan, info, 0)
    return observed_update(update.uplink, downlink)


def _as_batch(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    x = as_float(torch.as_tensor(x))
    y = torch.as_tensor(y)
    if y.dim() == 0:
        x, y = x.unsqueeze(0), y.unsqueeze(0)
    if y.dim() != 1 or len(y) != len(x) or len(y) == 0:
        raise ConfigError(
            f"target inputs of shape {tuple(x.shape)} and labels of shape {tuple(y.shape)} do "
            "not match; pass a batch x (B, ...) with labels y (B,)"
        )
    if y.dtype.is_floating_point:
        raise ConfigError("target labels must be class indices (an integer tensor)")
    return x, y.long()


def _check_lr_steps(lr: float, steps: int) -> None:
    if not _is_number(lr) or not math.isfinite(lr) or lr <= 0:
        raise ConfigError(f"the client's lr must be a finite number > 0, got {lr!r}")
    if not _is_int(steps) or steps < 1:
        raise ConfigError(f"the client's local steps must be an integer >= 1, got {steps!r}")


# --------------------------------------------------------------------------- the attacker's model


def simulated_update(
    task: Task,
    params: Tree,
    buffers: Tree,
    x: Tensor,
    y: Tensor,
    lr: float,
    steps: int = 1,
    create_graph: bool = True,
) -> Tree:
    """The update of ``steps`` plain SGD steps at ``lr`` on the batch-mean ``CE(F(x), y)``
    from ``params`` (``y``: class indices or soft labels): ``−lr ∇θ CE`` for one step.

    With ``create_graph`` the result stays differentiable in ``x`` and ``y`` (and through
    the earlier steps), which the attacks need.
    """
    keys = list(params)
    start = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    current = start
    delta = {k: torch.zeros_like(v) for k, v in start.items()}
    with torch.enable_grad():
        for _ in range(steps):
            logits, buffers = task.forward(current, buffers, x, train=True)
            loss = ce(logits, y).mean()
            grads = torch.autograd.grad(
                loss, [current[k] for k in keys], create_graph=create_graph, allow_unused=True
            )
            step = {
                k: -lr * (torch.zeros_like(current[k]) if g is None else g)
                for k, g in zip(keys, grads, strict=True)
            }
            delta = {k: delta[k] + step[k] for k in keys}
            current = {k: current[k] + step[k] for k in keys}
    return delta


def head_key(params: Tree) -> str:
    """The weight of the model's last linear layer: the zoo's ``head.weight``, else the last
    2-D ``*weight`` parameter."""
    flat = flatten(params)
    if "head.weight" in flat and flat["head.weight"].dim() == 2:
        return "head.weight"
    candidates = [k for k, v in flat.items() if k.endswith("weight") and v.dim() == 2]
    if not candidates:
        raise ConfigError(
            "found no linear layer's weight (a 2-D '*weight' parameter) to read the label "
            "from; give the labels to the attack"
        )
    return candidates[-1]


def infer_label(update: Tree, key: str | None = None) -> int:
    """iDLG's label of a one-image update: the row of the last layer's weight update with the
    largest sum (the update is ``−lr`` times the gradient, whose true-class row alone sums
    below zero)."""
    key = key or head_key(update)
    weight = flatten(update)[key]
    if weight.dim() != 2:
        raise ConfigError(f"parameter {key!r} is not a linear layer's 2-D weight")
    return int(weight.detach().sum(dim=1).argmax())


# --------------------------------------------------------------------------- the attacks


def total_variation(x: Tensor) -> Tensor:
    """Anisotropic TV of a batch of images, as Geiping et al.: mean |dx| + mean |dy|
    (0 for inputs without two spatial axes)."""
    if x.dim() < 4:
        return x.new_zeros(())
    dx = x[..., :, 1:] - x[..., :, :-1]
    dy = x[..., 1:, :] - x[..., :-1, :]
    return dx.abs().mean() + dy.abs().mean()


def _distance(sim: list[Tensor], target: list[Tensor], kind: str) -> Tensor:
    if kind == "l2":
        return torch.stack([((s - t) ** 2).sum() for s, t in zip(sim, target, strict=True)]).sum()
    dot = torch.stack([(s * t).sum() for s, t in zip(sim, target, strict=True)]).sum()
    ns = torch.stack([(s * s).sum() for s in sim]).sum().clamp_min(1e-30)
    nt = torch.stack([(t * t).sum() for t in target]).sum().clamp_min(1e-30)
    return 1.0 - dot / (ns.sqrt() * nt.sqrt())


class _Objective:
    """``distance(Δ'/lr, Δ/lr) + α_TV · TV(x')`` for one attack."""

    def __init__(
        self,
        task: Task,
        params: Tree,
        buffers: Tree,
        update: Tree,
        lr: float,
        steps: int,
        settings: AttackSettings,
    ) -> None:
        self.task, self.params, self.buffers = task, params, buffers
        self.lr, self.steps, self.settings = lr, steps, settings
        self.keys = list(params)
        self.target = [update[k].detach().to(params[k].dtype) / lr for k in self.keys]

    def __call__(self, x: Tensor, y: Tensor, create_graph: bool = True) -> Tensor:
        delta = simulated_update(
            self.task, self.params, self.buffers, x, y, self.lr, self.steps, create_graph
        )
        sim = [delta[k] / self.lr for k in self.keys]
        loss = _distance(sim, self.target, self.settings.distance)
        if self.settings.tv:
            loss = loss + self.settings.tv * total_variation(x)
        return loss

    def value(self, x: Tensor, y: Tensor) -> float:
        with torch.enable_grad():
            return float(self(x.detach(), y.detach(), create_graph=False))


def _restart_generator(seed: int, restart: int) -> torch.Generator:
    state = np.random.SeedSequence([seed, restart]).generate_state(1)[0]
    return torch.Generator().manual_seed(int(state))


def _lbfgs(
    objective: _Objective, x: Tensor, label_logits: Tensor | None, labels: Tensor | None
) -> tuple[Tensor, Tensor, float]:
    """DLG's L-BFGS over ``x`` (and the soft-label logits when ``labels`` is None)."""
    settings = objective.settings
    variables = [x] if label_logits is None else [x, label_logits]
    opt = torch.optim.LBFGS(
        variables,
        lr=settings.lr,
        max_iter=1,
        history_size=100,
        tolerance_grad=0.0,
        tolerance_change=0.0,
    )

    def current_labels() -> Tensor:
        if labels is not None:
            return labels
        assert label_logits is not None
        return torch.softmax(label_logits, dim=-1)

    def closure() -> Tensor:
        opt.zero_grad()
        loss = objective(x, current_labels())
        loss.backward()
        return loss.detach()

    best = (math.inf, x.detach().clone(), current_labels().detach().clone())
    for _ in range(settings.iterations):
        before = (x.detach().clone(), current_labels().detach().clone())
        loss = float(opt.step(closure))  # the loss at ``before``
        if not math.isfinite(loss):
            break
        if loss < best[0]:
            best = (loss, *before)
    else:
        loss = objective.value(x, current_labels())
        if math.isfinite(loss) and loss < best[0]:
            best = (loss, x.detach().clone(), current_labels().detach().clone())
    return best[1], best[2], best[0]


def _sign_adam(objective: _Objective, x: Tensor, labels: Tensor) -> tuple[Tensor, Tensor, float]:
    """Inverting Gradients' optimiser: Adam on the sign of the gradient, step decay, box."""
    settings = objective.settings
    low, high = settings.box
    n = settings.iterations
    opt = torch.optim.Adam([x], lr=settings.lr)
    milestones = sorted({int(n * f) for f in (3 / 8, 5 / 8, 7 / 8)} - {0})
    schedule = torch.optim.lr_scheduler.MultiStepLR(opt, milestones=milestones, gamma=0.1)
    last_good = x.detach().clone().clamp_(low, high)
    for _ in range(n):
        opt.zero_grad()
        loss = objective(x, labels)
        loss.backward()
        if not math.isfinite(float(loss.detach())):
            break
        assert x.grad is not None
        x.grad.sign_()
        opt.step()
        schedule.step()
        with torch.no_grad():
            x.clamp_(low, high)
        last_good = x.detach().clone()
    return last_good, labels, objective.value(last_good, labels)


def invert(
    task: Task,
    params: Tree,
    buffers: Tree,
    update: Tree,
    lr: float,
    shape: Sequence[int],
    *,
    labels: Tensor | None = None,
    settings: AttackSettings | None = None,
    steps: int = 1,
) -> Reconstruction:
    """Reconstruct a batch of ``shape`` (``(B, C, H, W)`` or ``(B, D)``) from ``update``, the
    observed update of a client that took ``steps`` SGD steps at ``lr`` from ``params``
    (with ``buffers``), the global model the attacker knows.

    ``labels`` (``(B,)`` class indices), when given, are used as they are. Otherwise DLG
    optimises soft labels, and iDLG and IG read the label of a single image off the update
    (:func:`infer_label`); for more images they need ``labels``.
    """
    settings = settings or AttackSettings()
    if not isinstance(settings, AttackSettings):
        raise ConfigError("settings must be an AttackSettings; build one with for_method")
    _check_lr_steps(lr, steps)
    shape = tuple(int(s) for s in shape)
    if len(shape) < 2 or min(shape) < 1:
        raise ConfigError(f"attack shape must be (B, ...) with B >= 1, got {shape}")
    missing = [k for k in params if k not in update or update[k].shape != params[k].shape]
    if missing:
        raise ConfigError(
            f"the update does not match the model's parameters ({', '.join(missing[:3])}); "
            "pass the observed update of this model"
        )
    batch, method = shape[0], settings.method
    device = next(iter(params.values())).device
    if labels is not None:
        labels = torch.as_tensor(labels, device=device).long().reshape(-1)
        if len(labels) != batch or int(labels.min()) < 0 or int(labels.max()) >= task.num_classes:
            raise ConfigError(
                f"attack labels must be {batch} class indices in [0, {task.num_classes}), "
                f"got {labels.tolist()}"
            )
    elif method in ("idlg", "ig"):
        if batch != 1:
            raise ConfigError(
                f"{method} reads the label of one image only, got a batch of {batch}; "
                "pass labels= or attack one image at a time"
            )
        labels = torch.tensor([infer_label(update, head_key(params))], device=device)
    objective = _Objective(task, params, buffers, update, float(lr), steps, settings)

    best: tuple[float, Tensor, Tensor] | None = None
    for restart in range(settings.restarts):
        gen = _restart_generator(settings.seed, restart)
        low, high = settings.box
        if settings.init == "uniform":
            x = low + (high - low) * torch.rand(shape, generator=gen)
        else:
            x = torch.randn(shape, generator=gen)
        x = x.to(device).requires_grad_(True)
        if method == "ig":
            assert labels is not None
            rec, used, loss = _sign_adam(objective, x, labels)
        else:
            logits = None
            if labels is None:
                logits = torch.randn((batch, task.num_classes), generator=gen)
                logits = logits.to(device).requires_grad_(True)
            rec, used, loss = _lbfgs(objective, x, logits, labels)
        if best is None or loss < best[0] or not math.isfinite(best[0]):
            best = (loss, rec, used)
    assert best is not None
    loss, rec, used = best
    guessed = used.argmax(dim=-1) if used.dtype.is_floating_point else used
    low, high = settings.box
    return Reconstruction(rec.clamp(low, high), guessed.long(), float(loss), method)


# --------------------------------------------------------------------------- measuring


def attack_targets(
    algorithm: Algorithm,
    task: Task,
    server_state: Tree,
    dataset: Dataset,
    indices: Sequence[int],
    lr: float,
    attack_settings: AttackSettings,
    steps: int = 1,
) -> list[dict[str, Any]]:
    """Attack each training image ``dataset.x_train[i]`` of ``indices`` alone: the client
    holds that one image, runs ``algorithm`` for ``steps`` steps at ``lr``
    (:func:`target_update`), and the attacker inverts the update it sends from the global
    model of ``server_state``, with the label unknown. The client's run seed is drawn from
    (``attack_settings.seed``, index), so seeded client randomness differs between targets.

    One dict per index: ``index``, ``psnr``, ``ssim``, ``label_guess``, ``label_true``,
    ``loss`` and ``reconstruction`` (the image, ``(C, H, W)`` in [0, 1]).
    """
    params, buffers = server_state["x"], server_state["buffers"]
    results = []
    for i in indices:
        i = int(i)
        if not 0 <= i < len(dataset.y_train):
            raise ConfigError(
                f"target index {i} is out of range: {dataset.name} has "
                f"{len(dataset.y_train)} training images"
            )
        x = as_float(dataset.x_train[i : i + 1])
        y = dataset.y_train[i : i + 1]
        # each target's client gets its own run seed, so seeded client randomness (DP-SGD's
        # noise) differs between targets as between clients
        seed = int(np.random.SeedSequence([attack_settings.seed, i]).generate_state(1)[0])
        update = target_update(algorithm, task, server_state, x, y, lr, steps=steps, seed=seed)
        rec = invert(
            task, params, buffers, update, lr, x.shape, settings=attack_settings, steps=steps
        )
        target = x.to(rec.x.device)
        results.append(
            {
                "index": i,
                "psnr": float(psnr(rec.x, target)[0]),
                "ssim": float(ssim(rec.x, target)[0]) if rec.x.dim() == 4 else math.nan,
                "label_guess": int(rec.labels[0]),
                "label_true": int(y[0]),
                "loss": rec.loss,
                "reconstruction": rec.x[0].detach().cpu(),
            }
        )
    return results


def mean_std(results: Sequence[dict[str, Any]], key: str = "psnr") -> tuple[float, float]:
    """Mean and (population) standard deviation of ``key`` over ``results``; ``inf`` values
    (perfect reconstructions) make the mean ``inf``."""
    values = np.array([float(r[key]) for r in results], dtype=np.float64)
    if values.size == 0:
        raise ConfigError(f"no results to summarise for {key!r}")
    if np.isinf(values).any():
        return float(values.mean()), math.nan
    return float(values.mean()), float(values.std())
