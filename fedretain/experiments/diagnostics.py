"""Diagnostics: observers of a run chosen by name (``diagnostics=forgetting``).

A diagnostic is an :class:`~fedretain.experiments.observers.Observer` named as registered and
built as ``factory(fed, out, **params)`` (the run's federation and results folder) with the
options of ``diagnostics.<param>=value`` it takes.
It is told of each round, writes its own files into the results folder, may add keys to the
records and adds a part to the summary. A new diagnostic is one
:class:`~fedretain.experiments.observers.BaseObserver` subclass with the hooks it needs and one
line in ``DIAGNOSTICS`` below (``docs/adding-components.md``, "How to add an observer").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from fedretain.algorithms.fedreg import pseudo_data
from fedretain.core.algorithm import RoundInfo
from fedretain.core.client import train_client
from fedretain.core.tree import Tree
from fedretain.errors import ConfigError, unknown_choice
from fedretain.experiments.observers import BaseObserver, Record, RoundResult
from fedretain.files import read_jsonl, write_jsonl
from fedretain.metrics.forgetting import Forgetting
from fedretain.recipe.config import Config
from fedretain.recipe.federation import local_optimizer
from fedretain.registry import Registry, kind

if TYPE_CHECKING:
    from pathlib import Path

    from fedretain.recipe.federation import Federation


class ForgettingObserver(BaseObserver):
    """Loss increase on earlier clients, Fisher correlation and F_ki
    (:mod:`fedretain.metrics.forgetting`), one line per round in ``forgetting.jsonl``.

    ``rounds``: rounds (1-based) with an F_ki heat map (default: the last); ``reference``: an
    algorithm whose local models are also trained from the run's global model of each round, on
    the same clients and mini-batches (FedReg App. B.3's paired comparison); nothing of it
    reaches the run (own client states, torch RNG restored); ``samples``: at most this many
    samples per client for the losses and F_ki (0: all); ``fisher``: also measure FedReg's
    Fisher correlation (off by default: it costs about twice FedAvg's local training).

    :param rounds: rounds (1-based) with an F_ki heat map (default: the last)
    :param reference: an algorithm also trained from each round's global model on the same
        clients and batches, for a paired comparison (empty: none)
    :param samples: most samples per client for the losses and F_ki (0: all)
    :param fisher: also measure FedReg's Fisher correlation (about twice FedAvg's local training)
    """

    needs_local_models = True

    def __init__(
        self,
        fed: Federation,
        out: Path,
        rounds: tuple = (),
        reference: str = "",
        samples: int = 0,
        fisher: bool = False,
    ) -> None:
        self.fed, self.out = fed, out
        self.path = out / "forgetting.jsonl"
        self.heatmaps = set(rounds or [fed.config.rounds])
        self.reference = reference
        self.measure = Forgetting(
            fed.task,
            fed.dataset,
            fed.parts,
            fed.val_parts,
            fed.eval_batch,
            pseudo=pseudo_data(fed.algorithm),  # FedReg's, with the run's settings if FedReg
            seed=fed.config.seed,
            eval_samples=samples,
            fisher=fisher,
        )
        # the reference's own default hyper-parameters: cfg.algo belongs to the run's algorithm
        self.ref_algorithm = (
            kind("algorithm").build(reference, opt=local_optimizer(fed.config))
            if reference
            else None
        )
        self.ref_states: dict[int, Tree] = {}

    def after_round(self, result: RoundResult) -> None:
        start = self.fed.algorithm.global_model(result.before)
        local = result.local_models
        ref = self.reference_models(result, start) if self.ref_algorithm else None
        self.measure.round(result.round, start, local, ref)
        write_jsonl(self.path, self.measure.records)

    def reference_models(
        self, result: RoundResult, start: tuple[Tree, Tree]
    ) -> dict[int, tuple[Tree, Tree]]:
        """The reference algorithm's local models from this round's start model, on the
        clients whose local models the round kept."""
        algo, fed, clients = self.ref_algorithm, self.fed, list(result.local_models)
        assert algo is not None
        cuda = fed.device.type == "cuda"
        rng = torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else []
        info = RoundInfo(
            result.round, len(fed.clients), tuple(clients), result.lr, fed.clients.seed
        )
        downlink = algo.broadcast(algo.server_init(*start), info)
        models = {}
        for cid in clients:
            state = self.ref_states.get(cid) or algo.client_init(downlink["x"])
            data, plan = fed.clients.data(cid), fed.clients.plan(cid, info, algo)
            update = train_client(algo, fed.task, downlink, state, data, plan, info, cid)
            if update.state:
                self.ref_states[cid] = update.state
            models[cid] = (update.final["params"], update.final.get("buffers", {}))
        torch.set_rng_state(rng[0])
        if cuda:
            torch.cuda.set_rng_state_all(rng[1])
        return models

    def start(self, done: int, records: list[Record]) -> None:
        if not done or not self.path.exists():  # a fresh run writes the file anew
            return
        kept = [r for r in read_jsonl(self.path) if r["round"] <= done]
        self.measure.records = kept
        self.measure.prev_clients = kept[-1]["clients"] if kept else []
        write_jsonl(self.path, kept)

    def finish(self, stopped: bool) -> dict[str, Any]:
        if stopped:
            return {}
        if not self.fed.config.plots:
            return {"forgetting": self.measure.summary()}
        from fedretain.experiments.plots import plot_forgetting_heatmap, plot_loss_increase

        out, label = self.out, self.fed.config.label
        rows = [r for r in self.measure.records if "loss_prev_mean" in r]
        if rows:
            plot_loss_increase(
                rows, out / "forgetting.png", title=f"{label}: forgetting", reference=self.reference
            )
        for r in self.measure.records:
            if r["round"] in self.heatmaps:
                plot_forgetting_heatmap(
                    r, out / f"forgetting-{r['round']}.png", title=f"{label}, round {r['round']}"
                )
        return {"forgetting": self.measure.summary()}


def check_forgetting(cfg: Config) -> None:
    params = cfg.diagnostics_params
    reference = params.get("reference", "")
    if reference and reference not in kind("algorithm"):
        raise ConfigError(unknown_choice("diagnostics.reference", reference, kind("algorithm")))
    for r in params.get("rounds", []):
        if not isinstance(r, int) or not 1 <= r <= cfg.rounds:
            raise ConfigError(f"diagnostics.rounds must be rounds in 1..{cfg.rounds}, got {r!r}")
    if params.get("samples", 0) < 0:
        raise ConfigError(f"diagnostics.samples must be >= 0, got {params['samples']}")


# factory(fed, out, **options) -> the observer; ``check=fn(cfg)`` validates against the whole
# config
DIAGNOSTICS = Registry("diagnostic", internal=("fed", "out"))
DIAGNOSTICS.add(
    "forgetting",
    ForgettingObserver,
    "loss increase on earlier clients, F_ki heat maps, FedReg's Fisher correlation (rounds, "
    "reference, samples, fisher)",
    check=check_forgetting,
    files=("forgetting.jsonl", "forgetting.png", "forgetting-*.png"),
)
