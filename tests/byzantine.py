"""A test-only attacker: in every round, the first ``count`` of the round's clients send a
random model ``x + scale * N(0, 1)`` instead of their trained one (Blanchard et al.'s
Gaussian attack), and a small federation run under it."""

from __future__ import annotations

import torch

from fedretain.core.algorithm import Algorithm, ClientContext, transform
from fedretain.core.tree import Tree, tree_map
from fedretain.engines.round import Rounds
from fedretain.engines.sequential import SequentialEngine
from fedretain.recipe.config import Config
from fedretain.recipe.federation import build_federation


def attacked(algorithm: Algorithm, count: int = 2, scale: float = 10.0) -> Algorithm:
    """``algorithm`` with the first ``count`` clients of each round sending random models."""

    def local_final(state: Tree, client_state: Tree, ctx: ClientContext) -> tuple[Tree, Tree]:
        uplink, new_state = algorithm.local_final(state, client_state, ctx)
        if ctx.client_id in ctx.info.clients[:count]:
            noise = tree_map(lambda v: v + scale * torch.randn_like(v), state["down"]["x"])
            uplink = {**uplink, "y": noise}
        return uplink, new_state

    return transform(algorithm, local_final=local_final, hints={"vectorisable": False})


def accuracy_under_attack(cfg: Config, count: int = 2, scale: float = 10.0) -> list[float]:
    """Test accuracy after each round of ``cfg`` with ``count`` attackers per round."""
    fed = build_federation(cfg)
    algorithm = attacked(fed.algorithm, count, scale)
    rounds = Rounds(
        algorithm, fed.task, fed.clients, SequentialEngine(), on_divergence=cfg.on_divergence
    )
    state = algorithm.server_init(*fed.task.init())
    out = []
    for rnd in range(cfg.rounds):
        clients = fed.participation.clients(rnd)
        state, _ = rounds.run_round(state, rnd, cfg.lr_at(rnd), clients=clients)
        params, buffers = algorithm.global_model(state)
        x, y = fed.dataset.x_test, fed.dataset.y_test
        out.append(fed.task.evaluate(params, buffers, x, y, fed.eval_batch)[0])
    return out
