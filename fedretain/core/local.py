"""Default local training: SGD-like steps with optional ``penalty`` and ``correct`` hooks.

Most algorithms are FedAvg plus a term added to the local loss (``penalty(params, state)``:
FedProx, FedCurv, FedDyn) or a change to the gradient (``correct(grads, state)``: SCAFFOLD,
GradMA-W). A penalty is a plain callable (differentiated by autograd together with the task
loss) or a :class:`ClosedFormPenalty`, whose gradient is given in closed form and added leafwise
to the task loss's gradient, with no autograd through the penalty; one whose gradient is a
:class:`Pull` toward an anchor (FedProx, FedDyn) is folded into plain SGD's update. The step
state built by :func:`local_init` keeps the received downlink under ``"down"`` and the
client's persistent state under ``"client"``, so hooks read what they need
(``state["down"]["x"]``, ``state["client"]["c_i"]``) without extra plumbing. A ``gradient``
hook replaces the task loss's autograd gradient (DP-SGD's clipped, noised per-example
gradients).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from fedretain.core.algorithm import ClientContext, LocalInitFn, LocalStepFn
from fedretain.core.optim import Optimizer
from fedretain.core.task import Batch
from fedretain.core.tree import Tree, leaves, tree_map

Correct = Callable[[Tree, Tree], Tree]
ANCHOR = "anchor"  # the step state's key of a Pull's anchor
# gradient(state, batch, ctx) -> (grads, loss, new_buffers, state): the task loss's gradient
# in state["params"] (in place of autograd's), the loss to report, the buffers after the
# forward pass, and the step state carrying what the hook keeps (a noise generator's state)
Gradient = Callable[[Tree, Batch, ClientContext], tuple[Tree, Tensor, Tree, Tree]]


@dataclass(frozen=True)
class Pull:
    """A quadratic pull toward an anchor: gradient ``coef * (params − anchor)``.

    ``anchor(state)`` is computed once per client and round by :func:`make_local_init` from the
    step state (FedProx: the global model ``x``; FedDyn: ``x + g_i / α``) and kept under
    ``state["anchor"]``. With plain SGD the local step folds the pull into the update,
    ``lerp(p, anchor, lr * coef) − lr * g``: two tensor operations per leaf where adding the
    gradient and stepping take three or four.
    """

    coef: float
    anchor: Callable[[Tree], Tree]

    def anchor_of(self, state: Tree) -> Tree:
        """The anchor kept in ``state`` (computed here if a step state was built without it)."""
        return state[ANCHOR] if ANCHOR in state else self.anchor(state)

    def grad(self, params: Tree, state: Tree) -> Tree:
        """``coef * (params − anchor)``."""
        return tree_map(lambda p, c: self.coef * (p - c), params, self.anchor_of(state))

    def add_grad(self, grads: Tree, params: Tree, state: Tree) -> Tree:
        """``grads + coef * (params − anchor)``."""
        return tree_map(
            lambda g, p, c: torch.add(g, p - c, alpha=self.coef),
            grads,
            params,
            self.anchor_of(state),
        )

    def sgd(self, state: Tree, grads: Tree) -> Tree:
        """The parameters after plain SGD on ``grads`` plus the pull:
        ``p − lr (g + coef (p − c)) = lerp(p, c, lr coef) − lr g``."""
        lr = state["lr"]
        w = lr * self.coef
        return tree_map(
            # out of place: vmap has no batching rule for addcmul_
            lambda p, c, g: torch.addcmul(torch.lerp(p, c, w), g, lr, value=-1.0),
            state["params"],
            self.anchor_of(state),
            grads,
        )


@dataclass(frozen=True)
class ClosedFormPenalty:
    """A penalty term with its gradient in closed form.

    ``value(params, state)`` is the scalar term; ``grad(params, state)`` its gradient in
    ``params`` (a tree like ``params``; None: autograd through ``value``, unless ``pull`` gives
    it); ``add_grad(grads, params, state)``, optional, is ``grads + grad(params, state)`` in
    fewer tensor operations (the local step's hot path uses it); ``pull``, optional, says the
    gradient is a :class:`Pull`'s (then ``grad`` and ``add_grad`` follow from it). Calling the
    object gives the value, so it can stand wherever a plain penalty callable is expected.
    """

    value: Callable[[Tree, Tree], Tensor]
    grad: Callable[[Tree, Tree], Tree] | None = None
    add_grad: Callable[[Tree, Tree, Tree], Tree] | None = None
    pull: Pull | None = None

    def __post_init__(self) -> None:
        if self.pull is not None and self.grad is None:
            object.__setattr__(self, "grad", self.pull.grad)
            object.__setattr__(self, "add_grad", self.pull.add_grad)

    def added(self, grads: Tree, params: Tree, state: Tree) -> Tree:
        """``grads`` plus the penalty's gradient (``add_grad`` when given)."""
        if self.add_grad is not None:
            return self.add_grad(grads, params, state)
        assert self.grad is not None
        return tree_map(torch.add, grads, self.grad(params, state))

    def __call__(self, params: Tree, state: Tree) -> Tensor:
        return self.value(params, state)


# a plain callable (autograd) or a ClosedFormPenalty (its own gradient)
Penalty = Callable[[Tree, Tree], Tensor] | ClosedFormPenalty


@dataclass(frozen=True)
class LocalRule:
    """How a FedAvg-style ``local_step`` was built: ``step`` is
    :func:`fedretain.core.local.make_local_step` of ``(opt, penalty, correct)`` (None: a rule
    not made into a step, whose :meth:`penalised` and :meth:`descend` another step uses).

    The rule's chain is written once, here: an objective adds the penalty where autograd
    differentiates it (:meth:`penalised`), and :meth:`descend` adds a closed-form penalty's
    gradient, applies the correction and takes the optimiser's step. The default local step and
    the replay steps (:mod:`fedretain.continual.replay`, :mod:`fedretain.continual.dgr`) each
    give it their own objective. Transformations of the local step (DP-SGD,
    :func:`fedretain.privacy.dpsgd.with_dpsgd`) rebuild it from the rule. An algorithm made from
    :func:`fedretain.algorithms.fedavg.fedavg` by replacing ``local_step`` with its own (FedReg,
    MOON, ...) inherits the rule but not its step:
    :meth:`~fedretain.core.algorithm.Algorithm.follows_local_rule` tells the two apart.
    """

    opt: Optimizer
    penalty: Penalty | None = None
    correct: Correct | None = None
    step: LocalStepFn | None = None

    @functools.cached_property
    def closed_form(self) -> bool:
        """Whether the penalty's gradient is given in closed form (not autograd's)."""
        return getattr(self.penalty, "grad", None) is not None

    @functools.cached_property
    def autograd_penalty(self) -> Penalty | None:
        """The penalty autograd differentiates with the objective (None: none, or its
        gradient is in closed form)."""
        return None if self.closed_form else self.penalty

    def penalised(self, total: Tensor, params: Tree, state: Tree) -> Tensor:
        """``total`` plus the penalty where autograd differentiates it: an objective's last
        term."""
        penalty = self.autograd_penalty
        return total if penalty is None else total + penalty(params, state)

    def descend(self, state: Tree, grads: Tree, buffers: Tree) -> Tree:
        """The step state after the rule's step on the objective's ``grads`` (with the penalty
        where :meth:`penalised` added it): a closed-form penalty's gradient added, the gradient
        passed through ``correct``, the optimiser's step (:func:`advance`)."""
        if self.closed_form:
            grads = self.penalty.added(grads, state["params"], state)  # type: ignore[union-attr]
        if self.correct is not None:
            grads = self.correct(grads, state)
        return advance(self.opt, state, grads, buffers)


def make_local_init(opt: Optimizer, penalty: Penalty | None = None) -> LocalInitFn:
    """Start local training from the received global model ``down["x"]`` (with the anchor of
    ``penalty``'s :class:`Pull`, if it has one, under ``state["anchor"]``)."""
    pull = getattr(penalty, "pull", None)

    def local_init(down: Tree, client_state: Tree, ctx: ClientContext) -> Tree:
        x = down["x"]
        dev = leaves(x)[0].device  # on the model's device: vmap stacks it with the params
        state = {
            "params": x,
            "buffers": down["buffers"],
            "opt": opt.init(x),
            "down": down,
            "client": client_state,
            "lr": torch.tensor(ctx.info.lr, dtype=leaves(x)[0].dtype, device=dev),
            "lr_sum": torch.zeros((), dtype=leaves(x)[0].dtype, device=dev),
        }
        return state if pull is None else {**state, ANCHOR: pull.anchor(state)}

    return local_init


def make_local_step(
    opt: Optimizer,
    penalty: Penalty | None = None,
    correct: Correct | None = None,
    gradient: Gradient | None = None,
) -> LocalStepFn:
    """One optimiser step on ``task loss + penalty``, with the gradient passed through ``correct``.

    A penalty with a closed-form gradient (``penalty.grad``) is not differentiated: autograd
    runs on the task loss alone and the penalty's gradient is added leafwise. The reported
    ``loss`` is the task loss alone (before the penalty).

    ``gradient`` (see :data:`Gradient`) replaces the task loss's gradient; the penalty's
    gradient (autograd or closed form) is then computed apart and added to it, and ``correct``
    applies as usual.
    """
    rule = LocalRule(opt, penalty, correct)
    autograd_penalty = rule.autograd_penalty
    pull = getattr(penalty, "pull", None)
    fold = pull if pull is not None and correct is None and opt.is_plain_sgd else None

    def local_step(state: Tree, batch: Batch, ctx: ClientContext) -> tuple[Tree, dict]:
        def objective(p: Tree) -> tuple[Tensor, tuple[Tensor, Tree]]:
            loss, new_buffers = ctx.task.batch_loss(p, state["buffers"], batch)
            return rule.penalised(loss, p, state), (loss.detach(), new_buffers)

        if gradient is None:
            grads, (loss, new_buffers) = ctx.task.grad_and_aux(objective, state["params"])
        else:
            grads, loss, new_buffers, state = gradient(state, batch, ctx)
            if autograd_penalty is not None:
                extra = penalty_grad(ctx, autograd_penalty, state)
                grads = tree_map(torch.add, grads, extra)
        if fold is not None:  # plain SGD with the pull folded into its update
            return advance(opt, state, grads, new_buffers, fold.sgd(state, grads)), {"loss": loss}
        return rule.descend(state, grads, new_buffers), {"loss": loss}

    return local_step


def penalty_grad(ctx: ClientContext, penalty: Penalty, state: Tree) -> Tree:
    """Autograd's gradient of ``penalty(params, state)`` in ``state["params"]``."""

    def value(p: Tree) -> tuple[Tensor, None]:
        return penalty(p, state), None

    return ctx.task.grad_and_aux(value, state["params"])[0]


def advance(
    opt: Optimizer, state: Tree, direction: Tree, buffers: Tree, params: Tree | None = None
) -> Tree:
    """The step state after one optimiser step along ``direction`` (adds lr to ``lr_sum``);
    ``params``, if given, are the step's result already (a stateless optimiser's, computed
    by the caller)."""
    if params is None:
        params, opt_state = opt.update(direction, state["opt"], state["params"], state["lr"])
    else:
        opt_state = state["opt"]
    return {
        **state,
        "params": params,
        "buffers": buffers,
        "opt": opt_state,
        "lr_sum": state["lr_sum"] + state["lr"],
    }


__all__ = [
    "Batch",
    "ClosedFormPenalty",
    "Correct",
    "Gradient",
    "LocalRule",
    "Penalty",
    "Pull",
    "advance",
    "make_local_init",
    "make_local_step",
    "penalty_grad",
]
