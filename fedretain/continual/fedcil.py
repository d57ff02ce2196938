"""FedCIL: generative replay with model consolidation (server) and consistency enforcement
(clients).

Qi, Zhao, Li, "Better Generative Replay for Continual Federated Learning", ICLR 2023,
arXiv:2302.13001.

§4.3 of the paper; reference code github.com/daiqing98/FedCIL
(``FLAlgorithms/generator/model.py``, ``train_a_batch_all``). Runs in a continual scenario
(``scenario=class_incremental``) with ``model=acgan`` (:mod:`fedretain.continual.zoo`); the
local optimiser is the config's (the paper: Adam,
lr 1e-4, ``optimizer=adam optimizer.beta1=0.5 optimizer.beta2=0.99``).

**Clients** train their ACGAN with generative replay from their own generator of their last
task (eq. 11; :mod:`fedretain.continual.replay`, the same step as FedAvg+ACGAN) plus the
consistency terms, each with its own weight (``algo.kl_real``, ``algo.kl_generators``,
``algo.ce_global``; all 1 by default; the reference multiplies them by 0, the paper's
ablation, Table 2, finds each helps). With ``D`` the client's classifier (softmax ``p``),
``G_s`` the received global generator, ``G`` the client's own:

- ``kl_real``: ``KL(p(G_s(y)) || p(x))`` on the real batch ``(x, y)`` and global-generator
  samples of the same labels (the reference's ``kd_loss_d``; "soft labels for the real
  samples");
- ``kl_generators``: ``KL(p(G_s(a)) || p(G(a)))`` for labels ``a`` drawn from the classes the
  global model knows (the server broadcasts their mask ``classes``), samples of the global and
  of the own generator (``kd_loss_g_1``);
- ``ce_global``: ``CE(p(G_s(a)), a)``: classify the global generator's samples (``kd_loss_g_2``).

The seed text of eqs. 12-15 lost its formulas; the three terms are the reference code's, in
the roles the paper's prose gives eqs. 13-15 (no separate term stands for eq. 12). KL is
``torch.nn.KLDivLoss(reduction="batchmean")``'s, with gradients through both distributions
and the generated images detached. The terms are 0 in the first round (the global generator
is untrained), as in the reference.

**Server** (``aggregate``): the sample-weighted mean of the uploaded ACGANs (FedAvg's), then
model consolidation (eq. 10): ``algo.consolidation_steps`` steps (100 by default, the
paper's example) of ACGAN training of the merged model on class-balanced samples from every
uploaded generator, each generating ``algo.consolidation_batch`` samples per step with labels
cycling over that client's classes (its current and previous ones, uploaded as the 0/1 mask
``classes``), as the "real" data; Adam with the paper's betas (0.5, 0.99) at
``algo.consolidation_lr``, started afresh every round; the noise seeded with (run seed, round).
Only the global model changes; the paper's "ensemble of classification heads" initialisation
is not reproduced (the merged model is the plain mean).

Payloads: downlink ``x``, ``buffers``, ``classes`` (the classes any uploaded client has
learnt so far, a float 0/1 vector); uplink ``y``, ``buffers``, ``classes``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedretain.algorithms.fedavg import fedavg
from fedretain.continual.acgan import ADAM_BETAS, discriminator_loss, generator_loss
from fedretain.continual.replay import (
    _discriminate,
    _generate,
    _noise,
    generator_part,
    with_acgan_replay,
)
from fedretain.continual.zoo import ACGAN
from fedretain.core.algorithm import (
    Algorithm,
    ClientContext,
    RoundInfo,
    algorithm_factory,
    transform,
)
from fedretain.core.optim import Optimizer, adam
from fedretain.core.tree import Tree, leaves
from fedretain.errors import ConfigError

__all__ = ["Consistency", "consolidate", "fedcil", "kl"]

_STREAM = 0xC0A501


def kl(p_logits: Tensor, q_logits: Tensor) -> Tensor:
    """``KL(softmax(p) || softmax(q))``, the mean over the batch of the per-sample sums
    (``nn.KLDivLoss(reduction="batchmean")(log_softmax(q), softmax(p))``)."""
    log_p = F.log_softmax(p_logits, dim=-1)
    log_q = F.log_softmax(q_logits, dim=-1)
    return (log_p.exp() * (log_p - log_q)).sum(-1).mean()


@dataclass(frozen=True)
class Consistency:
    """FedCIL's consistency terms and their weights (see the module docstring)."""

    kl_real: float = 1.0
    kl_generators: float = 1.0
    ce_global: float = 1.0

    def losses(
        self,
        real: Tensor,
        global_same_labels: Tensor,
        global_samples: Tensor,
        own_samples: Tensor,
        labels: Tensor,
    ) -> dict[str, Tensor]:
        """The three terms from the client classifier's logits on: the real batch, the global
        generator's samples of the real labels, the global generator's samples of ``labels``
        and the own generator's samples of ``labels``."""
        return {
            "kl_real": kl(global_same_labels, real),
            "kl_generators": kl(global_samples, own_samples),
            "ce_global": F.cross_entropy(global_samples, labels),
        }

    def weighted(self, terms: dict[str, Tensor]) -> Tensor:
        return (
            self.kl_real * terms["kl_real"]
            + self.kl_generators * terms["kl_generators"]
            + self.ce_global * terms["ce_global"]
        )


def _consolidation_generator(seed: int, rnd: int) -> torch.Generator:
    words = np.random.SeedSequence([seed, _STREAM, rnd]).generate_state(2)
    return torch.Generator().manual_seed((int(words[0]) << 31) | (int(words[1]) >> 1))


def consolidate(
    model: ACGAN,
    params: Tree,
    buffers: Tree,
    generators: list[Tree],
    classes: list[Tensor],
    info: RoundInfo,
    steps: int,
    batch: int,
    opt: Optimizer,
    lr: float,
) -> tuple[Tree, Tree]:
    """Eq. 10: ``steps`` ACGAN steps of the merged model ``(params, buffers)`` on class-balanced
    samples of the uploaded ``generators`` (generator trees), client ``k`` generating ``batch``
    samples of its ``classes[k]`` (0/1 masks) per step. Returns the new parameters and
    buffers; nothing else is read or changed."""
    if steps == 0 or not generators:
        return params, buffers
    gen = _consolidation_generator(info.seed, info.round)
    device = next(iter(params.values())).device
    num_classes = classes[0].numel()
    own = [torch.nonzero(c > 0).flatten().cpu() for c in classes]
    opt_state = opt.init(params)
    lr_t = torch.tensor(lr, device=device)
    was_training = model.training
    model.train(True)
    for _ in range(steps):
        xs, ys = [], []
        for g, cls in zip(generators, own, strict=True):
            if cls.numel() == 0:
                continue
            # class-balanced: labels cycle over the client's classes (random start per step)
            start = int(torch.randint(cls.numel(), (1,), generator=gen))
            y = cls[(start + torch.arange(batch)) % cls.numel()]
            with torch.no_grad():
                x, _ = _generate(
                    model, g, buffers, _noise(y, num_classes, model.z_dim, gen).to(device)
                )
            xs.append(x)
            ys.append(y.to(device))
        if not xs:
            break
        x_real, y_real = torch.cat(xs), torch.cat(ys)
        known = torch.cat(own).unique()
        c = known[torch.randint(known.numel(), (x_real.shape[0],), generator=gen)]
        z = _noise(c, num_classes, model.z_dim, gen).to(device)
        c = c.to(device)

        with torch.enable_grad():
            p = {k: v.detach().requires_grad_(True) for k, v in params.items()}
            x_f, bufs = _generate(model, p, buffers, z)
            src_r, aux_r = _discriminate(model, p, x_real)
            src_f, aux_f = _discriminate(model, p, x_f.detach())
            frozen = {k: v.detach() for k, v in p.items() if k.startswith("discriminator.")}
            src_g, aux_g = _discriminate(model, frozen, x_f)
            loss = discriminator_loss(src_r, aux_r, y_real, src_f, aux_f, c)
            loss = loss + generator_loss(src_g, aux_g, c)
            grads = torch.autograd.grad(loss, list(p.values()), allow_unused=True)
        grads_t = {
            k: torch.zeros_like(v) if g is None else g
            for (k, v), g in zip(p.items(), grads, strict=True)
        }
        params, opt_state = opt.update(grads_t, opt_state, params, lr_t)
        params = {k: v.detach() for k, v in params.items()}
        buffers = {**buffers, **{k: v.detach() for k, v in bufs.items()}}
    model.train(was_training)
    return params, buffers


@algorithm_factory
def fedcil(
    *,
    kl_real: float = 1.0,
    kl_generators: float = 1.0,
    ce_global: float = 1.0,
    consolidation_steps: int = 100,
    consolidation_batch: int = 32,
    consolidation_lr: float = 1e-4,
    weighted: bool = True,
    opt: Optimizer | None = None,
    model: nn.Module | None = None,
    rounds_per_task: int = 0,
) -> Algorithm:
    """FedCIL on ``model`` (an :class:`~fedretain.continual.zoo.ACGAN`) in a scenario of
    ``rounds_per_task`` rounds per task (both supplied by the federation). Built without them
    (the registry's listings), its functions refuse to run with a one-line ConfigError.

    :param kl_real: weight of the KL between the global generator's predictions and the real batch's
    :param kl_generators: weight of the KL between the local and the global generators'
        samples' predictions
    :param ce_global: weight of the cross-entropy on the global generator's samples
    :param consolidation_steps: server consolidation steps per round (FedCIL eq. 10)
    :param consolidation_batch: samples each uploaded generator makes per consolidation step
    :param consolidation_lr: learning rate of the server's consolidation
    :param weighted: average the clients' models weighted by their sample counts (false: the
        plain mean)
    """
    outside = (
        "fedcil learns a sequence of tasks with an ACGAN: set scenario=class_incremental "
        "and model=acgan"
    )
    if model is not None and not isinstance(model, ACGAN):
        raise ConfigError(outside)
    for key, value in (("kl_real", kl_real), ("kl_generators", kl_generators)):
        if value < 0:
            raise ValueError(f"algo.{key} must be >= 0, got {value}")
    if ce_global < 0 or consolidation_steps < 0 or consolidation_batch < 1:
        raise ValueError(
            "algo.ce_global and algo.consolidation_steps must be >= 0, "
            "algo.consolidation_batch >= 1"
        )
    if not consolidation_lr > 0:
        raise ValueError(f"algo.consolidation_lr must be > 0, got {consolidation_lr}")
    consistency = Consistency(kl_real, kl_generators, ce_global)
    base = fedavg(weighted=weighted, opt=opt)
    algo = with_acgan_replay(base, rounds_per_task, consistency, suffix="")
    server_opt = adam(beta1=ADAM_BETAS[0], beta2=ADAM_BETAS[1])
    base_server_init, base_aggregate = base.server_init, base.aggregate
    base_final = algo.local_final

    def server_init(params: Tree, buffers: Tree) -> Tree:
        state = base_server_init(params, buffers)
        head = params.get("discriminator.head.bias")
        classes = torch.zeros(0 if head is None else head.shape[0], device=leaves(params)[0].device)
        return {**state, "classes": classes}

    def broadcast(server_state: Tree, info: RoundInfo) -> Tree:
        return {
            "x": server_state["x"],
            "buffers": server_state["buffers"],
            "classes": server_state["classes"],
        }

    def local_final(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
        uplink, new_state = base_final(state, client_state, ctx)
        rep = state["replay"]
        learnt = torch.clamp(rep["cur"] + rep["past"], max=1.0)
        return {**uplink, "classes": learnt}, new_state

    def aggregate(
        server_state: Tree, uplinks: Tree, weights: Tensor, info: RoundInfo
    ) -> tuple[Tree, dict]:
        if not isinstance(model, ACGAN):
            raise ConfigError(outside)
        merged, metrics = base_aggregate(server_state, uplinks, weights, info)
        k = uplinks["classes"].shape[0]
        generators = [{n: v[i] for n, v in generator_part(uplinks["y"]).items()} for i in range(k)]
        classes = [uplinks["classes"][i] for i in range(k)]
        x, buffers = consolidate(
            model,
            merged["x"],
            merged["buffers"],
            generators,
            classes,
            info,
            consolidation_steps,
            consolidation_batch,
            server_opt,
            consolidation_lr,
        )
        seen = torch.clamp(server_state["classes"] + uplinks["classes"].sum(0), max=1.0)
        return {**merged, "x": x, "buffers": buffers, "classes": seen}, metrics

    return transform(
        algo,
        name="fedcil",
        server_init=server_init,
        broadcast=broadcast,
        local_final=local_final,
        aggregate=aggregate,
        downlink_keys=("x", "buffers", "classes"),
        uplink_keys=("y", "buffers", "classes"),
    )
