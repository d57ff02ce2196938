"""The server step of model-averaging algorithms, composable: an aggregator over the round's
uplinked models, then a server optimizer on the pseudo-gradient ``g = x − agg(y)``.

``FedAvg`` is the mean and ``x ← agg(y)``; FedAvgM is the mean and server SGD with momentum;
FedAdam, FedYogi and FedAdagrad are the mean and an adaptive server optimizer (Reddi et al.,
ICLR 2021); ``aggregator=median`` with ``server_opt=adam`` is as valid. Every algorithm built on
:func:`~fedretain.algorithms.fedavg.fedavg` takes ``server_opt`` and ``aggregator`` this way;
the optimizer's state is the server state's ``server_opt`` entry.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from torch import Tensor

from fedretain.algorithms.aggregators import Aggregator
from fedretain.core.optim import Optimizer, identity
from fedretain.core.tree import Tree, tree_map, tree_weighted_mean

log = logging.getLogger("fedretain")


def mean_weights(weights: Tensor, weighted: bool) -> Tensor:
    """The averaging weights: sample counts, or all ones for the unweighted mean."""
    return weights if weighted else weights.new_ones(weights.shape)


@dataclass(frozen=True)
class ServerStep:
    """``aggregator`` (None: the mean) and the server optimiser ``opt`` (``none``, the
    default: ``x ← agg(y)``)."""

    weighted: bool = True
    aggregator: Aggregator | None = None
    opt: Optimizer = field(default_factory=identity)

    def init(self, params: Tree, buffers: Tree) -> Tree:
        state = {"x": params, "buffers": buffers}
        if not self.opt.is_identity:
            state["server_opt"] = self.opt.init(params)
        return state

    def __call__(self, server_state: Tree, models: Tree, weights: Tensor) -> Tree:
        """The new server state from the stacked uplinked ``models`` (``y``, ``buffers``)."""
        w = mean_weights(weights, self.weighted)
        agg = (self.aggregator or tree_weighted_mean)(models, w)
        if agg is None:  # the aggregator declined this round: the model stays
            return server_state
        return {**server_state, **self.apply(server_state, agg["y"]), "buffers": agg["buffers"]}

    def apply(self, server_state: Tree, target: Tree) -> Tree:
        """``x`` (and the optimizer's state) after one server step towards ``target``."""
        if self.opt.is_identity:
            return {"x": target}
        x = server_state["x"]
        g = tree_map(lambda x, a: x - a, x, target)
        return self.step(server_state, x, g)

    def step(self, server_state: Tree, x: Tree, g: Tree) -> Tree:
        """``x`` (and the optimizer's state) after one step on the pseudo-gradient ``g``."""
        if self.opt.is_identity:
            return {"x": tree_map(lambda x, g: x - g, x, g)}
        new_x, opt_state = self.opt.update(g, server_state["server_opt"], x, self.opt.lr)
        return {"x": new_x, "server_opt": opt_state}


__all__ = ["ServerStep", "mean_weights"]
