"""``replay=dgr``: Deep Generative Replay with a private GAN beside the shared classifier
(FedCIL's FedAvg+DGR and FedProx+DGR baselines).

Shin, Lee, Kim & Kim, *Continual Learning with Deep Generative Replay*, NeurIPS 2017,
arXiv:1705.08690; as FedCIL's baseline (Qi, Zhao & Li, ICLR 2023, arXiv:2302.13001, App. B):
"each client consists of a GAN and a classifier. The GAN is trained additionally for
generative replay ... the classifiers are synchronized by FedProx or FedAvg." The model of
the run (``model=cnn``, any classifier of the zoo) is the shared classifier (the solver); the
GAN is FedCIL's ACGAN (:func:`fedretain.continual.acgan.acgan`, ``replay.width``,
``replay.z_dim``), kept in the client state and never sent.

The local step, on a real batch ``(x, y)`` of ``B`` samples, from the second task of the
client on (``h = 1``; ``h = 0`` before: real data alone):

- replay: ``B`` labels drawn uniformly from the client's past classes, images ``x_r`` from its
  generator of the end of its last task, labelled by its classifier of the end of its last task
  (DGR's old solver: the arg-max of its outputs), no gradient;
- the classifier (with the algorithm's penalty and correction, e.g. FedProx's) minimises
  ``(1 − h/2) CE(f(x), y) + h/2 CE(f(x_r), y_r)`` (DGR's importance ratio 1/2) with the
  algorithm's optimiser;
- the GAN takes ACGAN's discriminator and generator steps on real + replayed samples (the
  discriminator's real terms averaged over both, as in :mod:`fedretain.continual.replay`),
  fakes of the past and current classes, simultaneously, with Adam at betas (0.5, 0.99) and
  the round's learning rate, its moments kept in the client state.

Payloads: as the algorithm's (FedAvg: the classifier ``x``/``y`` and ``buffers``). Client
state: ``task``, ``gan`` (generator and discriminator parameters), ``gan_buffers``, ``gan_opt``,
``last_solver`` (the classifier after the client's last round), ``prev_gen`` / ``prev_solver``
(at the end of its last task), ``cur`` / ``past`` (class masks). The replay's noise and labels
are drawn before the round's steps, as :mod:`fedretain.continual.replay` draws them; the
vectorised engine trains the round's clients (classifiers and GANs) together, each group of
clients with the same mini-batch plan in one call.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from fedretain.continual.acgan import ADAM_BETAS, Z_DIM, discriminator_loss, generator_loss
from fedretain.continual.replay import (
    REPLAYS,
    _discriminate,
    _generate,
    _probs,
    check_scenario,
    past_classes,
    replay_draws,
    replay_generator,
    task_switch,
)
from fedretain.continual.zoo import ACGAN, acgan_model
from fedretain.core.algorithm import Algorithm, ClientContext, transform
from fedretain.core.optim import adam
from fedretain.core.task import Batch
from fedretain.core.tree import Tree, leaves, tree_map, tree_where
from fedretain.errors import ConfigError

__all__ = ["with_dgr_replay"]


def _copy(tree: Tree) -> Tree:
    return tree_map(lambda v: v.detach().clone(), tree)


def with_dgr_replay(
    algorithm: Algorithm,
    rounds_per_task: int,
    input_shape: Sequence[int],
    num_classes: int,
    width: int = 64,
    z_dim: int = Z_DIM,
) -> Algorithm:
    """``algorithm`` (FedAvg's local step) with DGR: a private ACGAN per client replays its
    past classes, labelled by its classifier of its last task; named ``<name>+dgr``.

    :param width: channel width of each client's private ACGAN
    :param z_dim: length of that generator's noise input
    """
    rule = algorithm.hints.local_rule
    if rule is None or not algorithm.follows_local_rule():
        raise ConfigError(
            f"replay=dgr rebuilds FedAvg's local step, and {algorithm.name} has its own; "
            "use algorithm=fedavg or algorithm=fedprox"
        )
    gan: ACGAN = acgan_model(input_shape, num_classes, z_dim=z_dim, width=width)
    gan_params0 = {k: v.detach().clone() for k, v in gan.named_parameters()}
    gan_buffers0 = {k: v.detach().clone() for k, v in gan.named_buffers()}
    gan_opt = adam(beta1=ADAM_BETAS[0], beta2=ADAM_BETAS[1])
    base_init, base_final = algorithm.local_init, algorithm.local_final

    def client_init(params: Tree) -> Tree:
        first = leaves(params)[0]
        dev = first.device

        def placed(v: Tensor) -> Tensor:  # on the classifier's device, in its precision
            return v.to(dev, first.dtype if v.is_floating_point() else v.dtype)

        g = tree_map(placed, gan_params0)
        zeros = torch.zeros(num_classes, device=dev)
        return {
            "task": torch.tensor(-1, dtype=torch.int64),
            "gan": g,
            "gan_buffers": tree_map(placed, gan_buffers0),
            "gan_opt": gan_opt.init(g),
            "last_solver": _copy(params),
            "prev_gen": _copy(g),
            "prev_solver": _copy(params),
            "cur": zeros,
            "past": zeros.clone(),
        }

    def local_init(down: Tree, client_state: Tree, ctx: ClientContext) -> Tree:
        if rounds_per_task < 1:
            raise ConfigError("replay=dgr runs only in a continual scenario: set scenario=...")
        state = base_init(down, client_state, ctx)
        gan.to(leaves(state["params"])[0].device)
        cs = client_state
        switch = task_switch(cs, ctx, rounds_per_task)  # a boundary since its last round
        prev_gen = tree_where(switch, cs["gan"], cs["prev_gen"])
        prev_solver = tree_where(switch, cs["last_solver"], cs["prev_solver"])
        past = past_classes(cs, ctx, rounds_per_task)
        dgr = {
            "gan": cs["gan"],
            "gan_buffers": cs["gan_buffers"],
            "gan_opt": cs["gan_opt"],
            "prev_gen": prev_gen,
            "prev_solver": prev_solver,
            "past": past,
            "cur": ctx.data["label_mask"].float(),
            "on": (past.sum() > 0).float(),
        }
        return {**state, "dgr": dgr}

    def local_draws(down: Tree, client_state: Tree, ctx: ClientContext, widths: list[int]) -> Tree:
        """Per step: replay inputs of the past classes (labelled later by the old solver) and
        fake labels of the past and current classes, with their generator inputs."""
        past = past_classes(client_state, ctx, rounds_per_task)
        on = (past.sum() > 0).float()
        cur = ctx.data["label_mask"].float()
        gen = replay_generator(ctx.info.seed, ctx.info.round, ctx.client_id)
        return replay_draws([_probs(past), _probs(cur + on * past)], widths, gan.z_dim, gen)

    def local_step(state: Tree, batch: Batch, ctx: ClientContext) -> tuple[Tree, dict]:
        dgr, drawn = state["dgr"], batch["draws"]
        h = dgr["on"]
        if not gan.training:
            gan.train(True)
        z_r = drawn["z0"]  # labels: the old solver's
        c, z_f = drawn["labels1"], drawn["z1"]
        with torch.no_grad():
            x_r, _ = _generate(gan, dgr["prev_gen"], dgr["gan_buffers"], z_r)
            old, _ = ctx.task.forward(dgr["prev_solver"], state["buffers"], x_r, train=False)
            y_r = old.argmax(-1)

        # the classifier: real and replayed samples
        def solver(p: Tree) -> tuple[Tensor, tuple[Tensor, Tree]]:
            logits, new_buffers = ctx.task.forward(p, state["buffers"], batch["x"])
            real = ctx.task.loss(logits, batch["y"], None)
            w = batch["w"]
            real = (real * w).sum() / w.sum().clamp_min(1.0)
            rep_logits, _ = ctx.task.forward(p, state["buffers"], x_r)
            total = (1 - 0.5 * h) * real + 0.5 * h * F.cross_entropy(rep_logits, y_r)
            return rule.penalised(total, p, state), (real.detach(), new_buffers)

        grads, (loss, new_buffers) = ctx.task.grad_and_aux(solver, state["params"])
        new = rule.descend(state, grads, new_buffers)

        # the private GAN: ACGAN's losses on real + replayed samples
        def gan_objective(p: Tree) -> tuple[Tensor, Tree]:
            x_f, bufs = _generate(gan, p, dgr["gan_buffers"], z_f)
            src_real, aux_real = _discriminate(gan, p, batch["x"])
            src_rep, aux_rep = _discriminate(gan, p, x_r)
            src_fake, aux_fake = _discriminate(gan, p, x_f.detach())
            d_real = discriminator_loss(src_real, aux_real, batch["y"], src_fake, aux_fake, c)
            d_rep = discriminator_loss(src_rep, aux_rep, y_r, src_fake, aux_fake, c)
            frozen = {k: v.detach() for k, v in p.items() if k.startswith("discriminator.")}
            src_g, aux_g = _discriminate(gan, frozen, x_f)
            d_loss = (1 - 0.5 * h) * d_real + 0.5 * h * d_rep
            return d_loss + generator_loss(src_g, aux_g, c), bufs

        g_grads, bufs = ctx.task.grad_and_aux(gan_objective, dgr["gan"])
        gan_params, gan_opt_state = gan_opt.update(g_grads, dgr["gan_opt"], dgr["gan"], state["lr"])
        gan_buffers = {**dgr["gan_buffers"], **{k: v.detach() for k, v in bufs.items()}}
        new_dgr = {
            **dgr,
            "gan": {k: v.detach() for k, v in gan_params.items()},
            "gan_buffers": gan_buffers,
            "gan_opt": gan_opt_state,
        }
        return {**new, "dgr": new_dgr}, {"loss": loss}

    def local_final(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
        uplink, _ = base_final(state, client_state, ctx)
        dgr = state["dgr"]
        new_state = {
            "task": torch.tensor(ctx.info.round // max(rounds_per_task, 1), dtype=torch.int64),
            "gan": dgr["gan"],
            "gan_buffers": dgr["gan_buffers"],
            "gan_opt": dgr["gan_opt"],
            "last_solver": _copy(state["params"]),
            "prev_gen": dgr["prev_gen"],
            "prev_solver": dgr["prev_solver"],
            "cur": dgr["cur"],
            "past": dgr["past"],
        }
        return uplink, new_state

    return transform(
        algorithm,
        name=f"{algorithm.name}+dgr",
        client_init=client_init,
        local_init=local_init,
        local_step=local_step,
        local_final=local_final,
        local_draws=local_draws,
        hparams={
            "replay": "dgr",
            "replay_width": width,
            "replay_z_dim": z_dim,
            "rounds_per_task": rounds_per_task,
        },
        hints={"paddable": False, "local_rule": None},  # the step is no longer the rule's
    )


REPLAYS.add(
    "dgr",
    with_dgr_replay,  # its options: replay.width, replay.z_dim
    "Deep Generative Replay: a private GAN per client, only the classifier shared (Shin 2017; "
    "FedCIL's FedAvg/FedProx+DGR baselines)",
    check=check_scenario,
)
