"""FedReg: local steps regularised by pseudo and perturbed data, against forgetting.

Xu, Hong, Huang, Jiang, "Acceleration of Federated Learning with Alleviated
Forgetting in Local Training", ICLR 2022, arXiv:2203.02645 (§3, Algorithm D.1);
``../shared/ALGORITHMS.md`` has the equations.

Per real mini-batch ``(x, y)``, with the received global model ``θ_g`` in eval mode, two
independent copies of ``x`` take ``E = steps`` fast-gradient-sign steps
``x ← x + η sign(∇_x CE(f_θg(x), y))`` (ascent, as printed in eq. 2):

- pseudo data ``D_s``: step ``η_s``, soft label ``y_s = softmax(f_θg(x_s))``;
- perturbed data ``D_p``: step ``η_p`` (default ``0.01 η_s``), the true label ``y``.

Each local step (plain SGD) on that batch:

1. ``θ_γ = γθ + (1−γ)θ_g``; ``g = ∇L(θ_γ; x, y)``; ``θ ← θ − η g``;
2. ``θ_β = ½(θ + θ_g)``; ``Δ = θ − θ_g``;
3. ``g_s = ∇ softCE(θ_β; D_s)``; ``w_s = max(0, ⟨Δ, g_s⟩ / ‖g_s‖²)``;
4. ``g_p = ∇ CE(θ_β; D_p)``; ``w_p = max(0, ⟨Δ − w_s g_s, g_p⟩ / ‖g_p‖²)``;
5. ``θ ← θ − w_s g_s − w_p g_p``.

Inner products run over all parameters flattened together; a zero ``‖g‖²`` gives weight 0
(``torch.where``, no Python branch). **FedReg with MG** (``mg=True``, §3.3, eq. 12) replaces
``g`` by ``g − v g'``, ``v = ⟨g, g'⟩ / ‖g'‖²``, with ``g'`` the gradient at ``θ_γ`` on the pseudo
inputs with uniform labels ``1/n`` (the paper's privacy variant).

Choices:

- ``L`` on the real batch is the task's loss (so ``loss=tce`` composes); every loss on
  generated data, and the sign steps, use plain cross-entropy (soft labels for ``D_s``, uniform
  ones for ``g'``), as the paper writes them.
- The pseudo and perturbed data depend only on ``(x, y)`` and ``θ_g``: they are generated once
  for all the client's data in ``local_init`` (Algorithm D.1, line 4; each sample's sign steps
  are independent of the others' in eval mode) and each local step looks its batch up by
  ``batch["idx"]``. Both copies run through the model together as one batch of ``2n`` rows.
- Gradients (``g``, ``g'``, ``g_s``, ``g_p``) are taken in training mode, as the reference code;
  BatchNorm statistics follow the real batch only (the pseudo-data passes leave them alone).
- The server takes the unweighted mean of the client models (``weighted=False``), as FedReg's
  code (``Zoesgithub/FedReg``, ``FedUtils/fed/fedreg.py``) does.
- Near the received model ``g_s`` is small (the soft labels are ``θ_g``'s own predictions),
  and the projection amplifies rounding differences, about 1.3x per local step in the
  conformance setting: the vectorised and sequential engines agree to rounding over a few
  steps but drift apart over many, as two runs on different hardware would.
- The reference code steps *down* the loss (``x − η sign(∇)``) and clamps each batch to its
  value range; ``direction="descent"`` gives the first, ``clamp=True`` the second (to the
  range of the client's data, as the generation runs over all of it at once).

Defaults are the paper's MNIST (two classes) setting (App. B.2): ``γ = 0.4``, ``η_s = 0.2``,
``η_p = 0.01 η_s``, ``E = 10``; its other settings: MNIST one class γ 0.3, η_s 0.2; EMNIST
γ 0.4, η_s 0.05; CIFAR-10 γ 0.5, η_s 0.1; CIFAR-100 (ResNet-9) γ 0.25, η_s 0.1.

Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, ``buffers``): FedAvg's bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
from torch import Tensor

from fedretain.algorithms.aggregators import Aggregator
from fedretain.algorithms.fedavg import fedavg
from fedretain.core.algorithm import Algorithm, ClientContext, algorithm_factory, transform
from fedretain.core.local import advance
from fedretain.core.optim import Optimizer, sgd
from fedretain.core.task import Batch, Task
from fedretain.core.tree import Tree, tree_map, tree_sub, tree_vdot
from fedretain.losses.ce import ce

DIRECTIONS = ("ascent", "descent")


def safe_ratio(num: Tensor, den: Tensor) -> Tensor:
    """``num / den``, and 0 where ``den == 0`` (no Python branch, no NaN)."""
    nonzero = den > 0
    return torch.where(nonzero, num / torch.where(nonzero, den, torch.ones_like(den)), 0.0)


def projection_weight(direction: Tree, g: Tree) -> Tensor:
    """``max(0, ⟨direction, g⟩ / ‖g‖²)`` over all leaves together (0 when ``g = 0``)."""
    return safe_ratio(tree_vdot(direction, g), tree_vdot(g, g)).clamp_min(0.0)


def remove_component(g: Tree, g_prime: Tree) -> Tree:
    """``g − v g'`` with ``v = ⟨g, g'⟩ / ‖g'‖²`` (eq. 12): ``g`` made orthogonal to ``g'``."""
    v = safe_ratio(tree_vdot(g, g_prime), tree_vdot(g_prime, g_prime))
    return tree_map(lambda a, b: a - v * b, g, g_prime)


def mean_ce(
    task: Task, params: Tree, buffers: Tree, x: Tensor, y: Tensor, w: Tensor, train: bool = True
) -> Tensor:
    """Weighted mean cross-entropy (hard or soft labels); ``w = 0`` marks padding."""
    logits, _ = task.forward(params, buffers, x, train)
    return (ce(logits, y) * w).sum() / w.sum().clamp_min(1.0)


def sign_steps(
    task: Task,
    params: Tree,
    buffers: Tree,
    x: Tensor,
    y: Tensor,
    w: Tensor,
    eta: Tensor | float,
    steps: int,
    sign: float = 1.0,
    bounds: tuple[Tensor, Tensor] | None = None,
) -> Tensor:
    """``steps`` fast-gradient-sign steps ``x ← x + sign · eta · sign(∇_x CE(f(x), y))`` in eval
    mode; ``eta`` is a float or a per-row tensor broadcastable to ``x``. Returns a new tensor."""

    def loss_of(inp: Tree) -> tuple[Tensor, dict]:
        logits, _ = task.forward(params, buffers, inp["x"], train=False)
        return (ce(logits, y) * w).sum(), {}

    for _ in range(steps):
        gx, _ = task.grad_and_aux(loss_of, {"x": x})
        x = x + sign * eta * torch.sign(gx["x"])
        if bounds is not None:  # the reference code's clamp to the data's value range
            x = torch.minimum(torch.maximum(x, bounds[0]), bounds[1])
    return x


def pseudo_and_perturbed(
    task: Task,
    params: Tree,
    buffers: Tree,
    batch: Batch,
    eta_s: float,
    eta_p: float,
    steps: int,
    sign: float = 1.0,
    clamp: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """``(x_s, y_s, x_p)`` for a batch: pseudo inputs with soft labels and perturbed inputs.

    Both start from their own copy of ``batch["x"]`` (stacked into one ``2B`` batch, so each
    sign step is one forward and backward pass); ``batch`` is not modified.
    """
    x, y, w = batch["x"], batch["y"], batch["w"]
    b = x.shape[0]
    rates = torch.cat([x.new_full((b,), eta_s), x.new_full((b,), eta_p)])
    rates = rates.reshape((2 * b,) + (1,) * (x.dim() - 1))
    both = sign_steps(
        task,
        params,
        buffers,
        torch.cat([x, x]),
        torch.cat([y, y]),
        torch.cat([w, w]),
        rates,
        steps,
        sign,
        (x.min(), x.max()) if clamp else None,
    )
    x_s, x_p = both[:b], both[b:]
    logits, _ = task.forward(params, buffers, x_s, train=False)
    y_s = torch.softmax(logits, dim=-1).detach()
    return x_s, y_s, x_p


@dataclass(frozen=True)
class PseudoData:
    """How FedReg makes pseudo data: ``steps`` sign steps of size ``eta_s`` up the loss
    (``eta_p``: its perturbed data's, made alongside), soft labels from the model they start
    from. The defaults are FedReg's."""

    eta_s: float = 0.2
    eta_p: float = 0.002
    steps: int = 10

    def __call__(
        self, task: Task, params: Tree, buffers: Tree, batch: Batch
    ) -> tuple[Tensor, Tensor]:
        """Pseudo inputs and their soft labels for the rows of ``batch`` under the model
        ``(params, buffers)``."""
        x_s, y_s, _ = pseudo_and_perturbed(
            task, params, buffers, batch, self.eta_s, self.eta_p, int(self.steps)
        )
        return x_s, y_s


@dataclass(frozen=True)
class FedReg(Algorithm):
    """FedReg's :class:`~fedretain.core.algorithm.Algorithm`, which also says how it makes
    its pseudo data (``pseudo``)."""

    pseudo: PseudoData = PseudoData()


def pseudo_data(algorithm: Algorithm) -> PseudoData:
    """The pseudo data ``algorithm`` makes if it is FedReg (kept by transformations of it);
    otherwise FedReg's defaults."""
    return algorithm.pseudo if isinstance(algorithm, FedReg) else PseudoData()


def regularised_step(
    task: Task,
    opt: Optimizer,
    state: Tree,
    batch: Batch,
    x_s: Tensor,
    y_s: Tensor,
    x_p: Tensor,
    *,
    gamma: float,
    mg: bool = False,
) -> tuple[Tree, dict[str, Tensor]]:
    """Steps 1-5 on a real batch, given its pseudo data ``(x_s, y_s)`` and perturbed inputs
    ``x_p`` (labels ``batch["y"]``); ``state`` is a step state of
    :func:`fedretain.core.local.make_local_init`."""
    theta_g = state["down"]["x"]
    w = batch["w"]

    # 1. gradient on the real batch at the slowly-updated parameters θ_γ, SGD step on θ
    theta_gamma = tree_map(lambda p, g: gamma * p + (1.0 - gamma) * g, state["params"], theta_g)

    def real(p: Tree) -> tuple[Tensor, tuple[Tensor, Tree]]:
        loss, new_buffers = task.batch_loss(p, state["buffers"], batch)
        return loss, (loss.detach(), new_buffers)

    g, (loss, new_buffers) = task.grad_and_aux(real, theta_gamma)
    if mg:
        uniform = x_s.new_full((x_s.shape[0], task.num_classes), 1.0 / task.num_classes)
        g_u, _ = task.grad_and_aux(
            lambda p: (mean_ce(task, p, new_buffers, x_s, uniform, w), {}), theta_gamma
        )
        g = remove_component(g, g_u)
    state = advance(opt, state, g, new_buffers)

    # 2.-5. remove the parts of the drift that raise the pseudo and perturbed data's losses
    theta = state["params"]
    theta_beta = tree_map(lambda p, g: 0.5 * (p + g), theta, theta_g)
    delta = tree_sub(theta, theta_g)
    g_s, _ = task.grad_and_aux(
        lambda p: (mean_ce(task, p, new_buffers, x_s, y_s, w), {}), theta_beta
    )
    w_s = projection_weight(delta, g_s)
    g_p, _ = task.grad_and_aux(
        lambda p: (mean_ce(task, p, new_buffers, x_p, batch["y"], w), {}), theta_beta
    )
    w_p = projection_weight(tree_map(lambda d, s: d - w_s * s, delta, g_s), g_p)
    theta = tree_map(lambda p, s, q: p - w_s * s - w_p * q, theta, g_s, g_p)
    return {**state, "params": theta}, {"loss": loss, "w_s": w_s, "w_p": w_p}


@algorithm_factory
def fedreg(
    *,
    gamma: float = 0.4,
    eta_s: float = 0.2,
    eta_p: float | None = None,
    steps: int = 10,
    mg: bool = False,
    direction: str = "ascent",
    clamp: bool = False,
    weighted: bool = False,
    opt: Optimizer | None = None,
    server_opt: Optimizer | None = None,
    aggregator: Aggregator | None = None,
) -> Algorithm:
    """FedReg (``mg=True``: FedReg with MG); ``eta_p`` defaults to ``0.01 * eta_s``.

    :param gamma: γ in [0, 1]: the real batch's gradient is taken at γθ + (1−γ)θ_g
    :param eta_s: sign-step size η_s (>= 0) that makes the pseudo data
    :param eta_p: sign-step size η_p (>= 0) that makes the perturbed data (none: 0.01 η_s)
    :param steps: sign steps E that make the pseudo and perturbed data
    :param mg: FedReg with MG: the gradient made orthogonal to the pseudo data's, against gradient
        inversion
    :param direction: the sign steps go up the loss (ascent, as the paper prints) or down (descent,
        as the reference code)
    :param clamp: clamp the generated inputs to the range of the client's data, as the reference
        code
    :param weighted: average the clients' models weighted by their sample counts (false: the plain
        mean, as FedReg's code)
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"algo.gamma must be in [0, 1], got {gamma}")
    if not eta_s >= 0:
        raise ValueError(f"algo.eta_s must be >= 0, got {eta_s}")
    if eta_p is None:
        eta_p = 0.01 * eta_s
    if isinstance(eta_p, bool) or not isinstance(eta_p, int | float) or not eta_p >= 0:
        raise ValueError(f"algo.eta_p must be a number >= 0 (default 0.01 * eta_s), got {eta_p!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ValueError(f"algo.steps must be an integer >= 0, got {steps!r}")
    if direction not in DIRECTIONS:
        raise ValueError(
            f"algo.direction must be one of {', '.join(DIRECTIONS)}, got {direction!r}"
        )
    opt = opt or sgd()
    if not opt.is_plain_sgd:
        raise ValueError(
            "fedreg takes plain local SGD steps: set optimizer=sgd, optimizer.momentum=0, "
            "optimizer.weight_decay=0"
        )
    sign = 1.0 if direction == "ascent" else -1.0
    base = fedavg(weighted=weighted, opt=opt, server_opt=server_opt, aggregator=aggregator)

    def local_init(down: Tree, client_state: Tree, ctx: ClientContext) -> Tree:
        # Algorithm D.1, line 4: pseudo and perturbed copies of all the client's data, once
        x_s, y_s, x_p = pseudo_and_perturbed(
            ctx.task, down["x"], down["buffers"], ctx.data, eta_s, eta_p, steps, sign, clamp
        )
        state = base.local_init(down, client_state, ctx)
        return {**state, "generated": {"x_s": x_s, "y_s": y_s, "x_p": x_p}}

    def local_step(state: Tree, batch: Batch, ctx: ClientContext) -> tuple[Tree, dict]:
        gen, i = state["generated"], batch["idx"]
        return regularised_step(
            ctx.task,
            opt,
            state,
            batch,
            gen["x_s"][i],
            gen["y_s"][i],
            gen["x_p"][i],
            gamma=gamma,
            mg=mg,
        )

    algorithm = transform(
        base,
        name="fedreg",
        local_init=local_init,
        local_step=local_step,
        hparams={"eta_p": eta_p},  # its default derived from eta_s
        hints={"reads_data_outside_step": True},  # the pseudo and perturbed data, in local_init
    )
    return FedReg(
        **{f.name: getattr(algorithm, f.name) for f in fields(algorithm)},
        pseudo=PseudoData(eta_s, eta_p, steps),
    )
