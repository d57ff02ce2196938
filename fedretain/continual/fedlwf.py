"""FedLwF-2T: Learning without Forgetting in FL, distilling from two teachers.

Usmanova, Portet, Lalanda, Vega, "A distillation-based approach integrating continual
learning and federated learning for pervasive services", IJCAI 2021 Workshop on Continual and
Multimodal Learning for IoT, arXiv:2109.04197.

Built on LwF (Li & Hoiem, *Learning without
Forgetting*, TPAMI 2017, arXiv:1606.09282) and knowledge distillation (Hinton, Vinyals & Dean,
arXiv:1503.02531). As FedCIL's baseline (Qi, Zhao & Li, ICLR 2023, arXiv:2302.13001, App. B)
and its reference code (``train_a_batch_lwf``): from the second task on, a client's loss on
its real batch is

    alpha * CE(f(x), y) + beta * KL(q_prev || p) + (1 − alpha − beta) * KL(q_glob || p)

with ``p = softmax(f(x) / T)`` the client's, ``q_prev`` the softmax at temperature ``T`` of
the client's own model at the end of its last task (the first teacher, LwF's copy) and
``q_glob`` that of the received global model (the second teacher), ``T = 2``, ``alpha = beta =
0.33`` (``algo.alpha``, ``algo.beta``, ``algo.temperature``); in the first task the loss is the
cross-entropy alone. KL as ``nn.KLDivLoss(reduction="batchmean")``, no ``T²`` factor (as the
reference). Works on any classifier of the zoo (``model=cnn``; with ``model=acgan`` its
classifier).

Payloads: as FedAvg (downlink ``x``, ``buffers``; uplink ``y``, ``buffers``). Client state:
``task`` (the task of its last round), ``last`` (its trained model after that round), ``prev``
(its model at the end of its last task), ``has_prev`` (1 once there is one); a task boundary
is detected in ``local_init`` from the round and ``rounds_per_task`` (supplied by the
continual scenario; the method refuses to run outside one).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from fedretain.algorithms.fedavg import fedavg
from fedretain.core.algorithm import Algorithm, ClientContext, algorithm_factory, transform
from fedretain.core.optim import Optimizer
from fedretain.core.task import Batch
from fedretain.core.tree import Tree, leaves, tree_map, tree_where
from fedretain.errors import ConfigError

__all__ = ["fedlwf2t", "soft_kl"]


def soft_kl(
    teacher: Tensor, student: Tensor, temperature: float, weights: Tensor | None = None
) -> Tensor:
    """``KL(softmax(teacher / T) || softmax(student / T))``, the batch mean of per-sample sums
    (with sample ``weights``, the weighted mean: padding, of weight 0, does not count)."""
    log_q = F.log_softmax(teacher / temperature, dim=-1)
    log_p = F.log_softmax(student / temperature, dim=-1)
    per_sample = (log_q.exp() * (log_q - log_p)).sum(-1)
    if weights is None:
        return per_sample.mean()
    return (per_sample * weights).sum() / weights.sum().clamp_min(1.0)


@algorithm_factory
def fedlwf2t(
    *,
    alpha: float = 0.33,
    beta: float = 0.33,
    temperature: float = 2.0,
    weighted: bool = True,
    opt: Optimizer | None = None,
    rounds_per_task: int = 0,
) -> Algorithm:
    """FedLwF-2T over ``rounds_per_task`` rounds per task (supplied by the scenario).

    :param alpha: weight of the cross-entropy on the client's labels
    :param beta: weight of the KL to the client's last-task model (1 - alpha - beta: to the
        global model)
    :param temperature: softmax temperature T of both distillation terms
    :param weighted: average the clients' models weighted by their sample counts (false: the
        plain mean)
    """
    if not (alpha >= 0 and beta >= 0 and alpha + beta <= 1):
        raise ValueError(f"need alpha, beta >= 0 and alpha + beta <= 1, got {alpha}, {beta}")
    if not temperature > 0:
        raise ValueError(f"algo.temperature must be > 0, got {temperature}")
    base = fedavg(weighted=weighted, opt=opt)
    rule = base.hints.local_rule
    base_init = base.local_init

    def client_init(params: Tree) -> Tree:
        copy = tree_map(lambda v: v.detach().clone(), params)
        return {
            "task": torch.tensor(-1, dtype=torch.int64),
            "last": copy,
            "prev": tree_map(torch.clone, copy),
            "has_prev": torch.zeros((), device=leaves(params)[0].device),
        }

    def local_init(down: Tree, client_state: Tree, ctx: ClientContext) -> Tree:
        if rounds_per_task < 1:
            raise ConfigError(
                "fedlwf2t distils from the client's last task and runs only in a continual "
                "scenario: set scenario=class_incremental"
            )
        state = base_init(down, client_state, ctx)
        task = ctx.info.round // rounds_per_task
        cs = client_state
        # the client's last task ended (vmap-safe: no branch on the stored task)
        ended = ((cs["task"] < task) & (cs["task"] >= 0)).to(cs["has_prev"].device)
        prev = tree_where(ended, cs["last"], cs["prev"])
        has_prev = torch.where(ended, torch.ones_like(cs["has_prev"]), cs["has_prev"])
        # the weights of the three terms: CE alone in the first task (the reference's)
        a, b = (alpha, beta) if task > 0 else (1.0, 0.0)
        b_eff = b * has_prev
        lwf = {
            "prev": prev,
            "has_prev": has_prev,
            "w_ce": torch.tensor(a, device=has_prev.device),
            "w_prev": b_eff,
            "w_glob": torch.tensor(1.0 - a - b, device=has_prev.device) if task > 0 else 0 * b_eff,
        }
        return {**state, "lwf": lwf}

    def local_step(state: Tree, batch: Batch, ctx: ClientContext) -> tuple[Tree, dict]:
        lwf = state["lwf"]
        with torch.no_grad():
            t_prev, _ = ctx.task.forward(lwf["prev"], state["buffers"], batch["x"], train=False)
            t_glob, _ = ctx.task.forward(
                state["down"]["x"], state["down"]["buffers"], batch["x"], train=False
            )

        def objective(p: Tree) -> tuple[Tensor, tuple[Tensor, Tree]]:
            logits, new_buffers = ctx.task.forward(p, state["buffers"], batch["x"], train=True)
            per_example = ctx.task.loss(logits, batch["y"], batch.get("label_mask"))
            w = batch["w"]
            loss = (per_example * w).sum() / w.sum().clamp_min(1.0)
            total = (
                lwf["w_ce"] * loss
                + lwf["w_prev"] * soft_kl(t_prev, logits, temperature, w)
                + lwf["w_glob"] * soft_kl(t_glob, logits, temperature, w)
            )
            return total, (loss.detach(), new_buffers)

        grads, (loss, new_buffers) = ctx.task.grad_and_aux(objective, state["params"])
        return rule.descend(state, grads, new_buffers), {"loss": loss}

    def local_final(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
        uplink, _ = base.local_final(state, client_state, ctx)
        lwf = state["lwf"]
        new_state = {
            "task": torch.tensor(ctx.info.round // rounds_per_task, dtype=torch.int64),
            "last": tree_map(lambda v: v.detach().clone(), state["params"]),
            "prev": lwf["prev"],
            "has_prev": lwf["has_prev"],
        }
        return uplink, new_state

    return transform(
        base,
        name="fedlwf2t",
        client_init=client_init,
        local_init=local_init,
        local_step=local_step,
        local_final=local_final,
        hints={"local_rule": None},
    )
