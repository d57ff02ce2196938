"""``diagnostics=generator_quality``: how good the global ACGAN's generator is, over the rounds.

For a continual run with ``model=acgan`` (FedAvg+ACGAN, FedProx+ACGAN, FedCIL): every
``diagnostics.fid_every`` rounds (and at every task end) the Fréchet distance (Heusel et al.,
NeurIPS 2017, arXiv:1706.08500) between test images of the classes seen so far (at most
``diagnostics.fid_samples``) and as many images of the same labels from the global generator,
on the features of the dataset's cached classifier
(:func:`fedretain.continual.quality.feature_extractor`, trained once and cached in
``diagnostics.cache_dir``; comparable only with distances from the same extractor, never with
published Inception FIDs); after every task a PNG grid of ``diagnostics.per_class`` samples of
each seen class (``samples/task-<t>.png``). FedCIL's Fig. 5 reports both.

The generator runs in evaluation mode (BatchNorm's running statistics from the global model's
buffers), with noise seeded by (run seed, round). Results: ``generator_quality.jsonl`` (``round``,
``task``, ``fid``), ``fid.png``, and ``generator_quality`` in the summary (the last distance).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from fedretain.continual.acgan import sample
from fedretain.continual.quality import feature_extractor, frechet_distance, save_sample_grid
from fedretain.errors import ConfigError
from fedretain.experiments.diagnostics import DIAGNOSTICS
from fedretain.experiments.observers import BaseObserver, Record, RoundResult
from fedretain.files import read_jsonl, save_figure, write_jsonl

if TYPE_CHECKING:
    from fedretain.core.tree import Tree
    from fedretain.recipe.config import Config
    from fedretain.recipe.federation import Federation

__all__ = ["GeneratorQuality", "feature_net_file", "place_feature_net"]

DEFAULT_CACHE = Path.home() / ".cache" / "fedretain" / "features"


class GeneratorQuality(BaseObserver):
    """The observer (see the module docstring).

    :param fid_every: rounds between Fréchet distances (and at every task's end)
    :param fid_samples: most test images of the seen classes, compared with as many generated
    :param per_class: samples of each seen class in the PNG grid after every task
    :param feature_epochs: epochs of training the cached feature classifier
    :param cache_dir: folder of the cached feature classifier (empty: the default)
    """

    def __init__(
        self,
        fed: Federation,
        out: Path,
        fid_every: int = 5,
        fid_samples: int = 1000,
        per_class: int = 8,
        feature_epochs: int = 1,
        cache_dir: str = "",
    ) -> None:
        if fid_every < 1 or fid_samples < 2 or per_class < 1 or feature_epochs < 1:
            raise ConfigError(
                "diagnostics.fid_every, per_class and feature_epochs must be >= 1 and "
                "diagnostics.fid_samples >= 2"
            )
        self.fed, self.out, self.cfg = fed, out, fed.config
        self.fid_every = fid_every
        self.fid_samples = fid_samples
        self.per_class = per_class
        self.feature_epochs = feature_epochs
        self.cache_dir = Path(cache_dir) if cache_dir else DEFAULT_CACHE
        self.records: list[dict[str, Any]] = []
        self._extractor: torch.nn.Module | None = None

    @property
    def path(self) -> Path:
        return self.out / "generator_quality.jsonl"

    def extractor(self) -> torch.nn.Module:
        if self._extractor is None:
            fed = self.fed
            self._extractor = feature_extractor(
                fed.dataset, self.cache_dir, self.feature_epochs, seed=0, device=fed.device
            )
        return self._extractor

    def generator(self, state: Tree) -> torch.nn.Module:
        """The generator of ``state``'s global model as a module (a copy; the run's model is
        untouched)."""
        fed = self.fed
        params, buffers = fed.algorithm.global_model(state)
        gen = copy.deepcopy(fed.task.model.generator)
        state = {
            k.removeprefix("generator."): v
            for k, v in {**params, **buffers}.items()
            if k.startswith("generator.")
        }
        gen.load_state_dict(state)
        return gen.eval()

    def after_round(self, result: RoundResult) -> None:
        rnd = result.round
        done = rnd + 1
        continual = self.fed.continual
        assert continual is not None
        task_end = continual.scenario.task_end(done)
        if done % self.fid_every and not task_end and done != self.cfg.rounds:
            return
        task = continual.scenario.task_of(rnd)  # the task of the round just run
        classes = continual.seen_classes(task)
        gen = self.generator(result.after)
        if task_end:
            folder = self.out / "samples"
            folder.mkdir(parents=True, exist_ok=True)
            save_sample_grid(
                gen, classes, folder / f"task-{task}.png", self.per_class, seed=self.cfg.seed
            )
        fed = self.fed
        y = fed.dataset.y_test.numpy()
        idx = np.flatnonzero(np.isin(y, classes))
        rng = np.random.default_rng([self.cfg.seed, done])
        idx = np.sort(rng.permutation(idx)[: self.fid_samples])
        real = fed.dataset.x_test[torch.from_numpy(idx)]
        with torch.no_grad():
            fake = sample(gen, torch.from_numpy(y[idx]), seed=self.cfg.seed * 100003 + done)
        fid = frechet_distance(self.extractor(), real, fake)  # it moves them to its device
        self.records.append({"round": done, "task": task, "fid": fid})
        write_jsonl(self.path, self.records)

    def start(self, done: int, records: list[Record]) -> None:
        if not done:  # a fresh run writes the file anew
            return
        rows = read_jsonl(self.path) if self.path.exists() else []
        self.records = [r for r in rows if r["round"] <= done]
        write_jsonl(self.path, self.records)

    def finish(self, stopped: bool) -> dict[str, Any]:
        if stopped or not self.records:
            return {}
        last = self.records[-1]
        if not self.cfg.plots:
            return {"generator_quality": {"fid": last["fid"], "round": last["round"]}}
        from fedretain.experiments.plots import plt

        fig, ax = plt.subplots(figsize=(6.0, 3.8))
        ax.plot([r["round"] for r in self.records], [r["fid"] for r in self.records], "o-")
        ax.set_xlabel("round")
        ax.set_ylabel("Fréchet distance (cached classifier's features)")
        ax.grid(alpha=0.3)
        save_figure(fig, self.out / "fid.png")
        plt.close(fig)
        last = self.records[-1]
        return {"generator_quality": {"fid": last["fid"], "round": last["round"]}}


def check_generator_quality(cfg: Any) -> None:
    if not cfg.scenario or cfg.model != "acgan":
        raise ConfigError(
            "diagnostics=generator_quality measures the global ACGAN's generator in a continual "
            "run: set scenario=class_incremental model=acgan"
        )


def _cache_settings(cfg: Config) -> tuple[Path, int]:
    """The feature network's cache folder and training epochs of a run of ``cfg``."""
    own = DIAGNOSTICS.params("generator_quality")
    given = {k: v for k, v in cfg.diagnostics_params.items() if k in own}
    params = {**own, **DIAGNOSTICS.check("generator_quality", given, prefix="diagnostics")}
    cache = str(params["cache_dir"])
    return (Path(cache).expanduser() if cache else DEFAULT_CACHE), int(params["feature_epochs"])


def feature_net_file(cfg: Config) -> tuple[str, bytes] | None:
    """The feature network a run of ``cfg`` measures its FIDs with (None without
    ``diagnostics=generator_quality``): its cache file's name and bytes, trained here once
    when not cached yet. A study on Ray ships it to every run (:func:`place_feature_net`), so
    that every FID of its report comes from one extractor, not one trained on each node's CPU."""
    from fedretain.continual.quality import cache_path
    from fedretain.data.datasets import load_dataset

    if "generator_quality" not in cfg.diagnostics:
        return None
    cache, epochs = _cache_settings(cfg)
    dataset = load_dataset(cfg.dataset, cfg.data_dir or None, **cfg.dataset_params)
    feature_extractor(dataset, cache, epochs, seed=0)  # made and cached where missing
    path = cache_path(dataset, cache, epochs, seed=0)
    return path.name, path.read_bytes()


def place_feature_net(cfg: Config, net: tuple[str, bytes]) -> Path:
    """Put the study's feature network ``net`` (:func:`feature_net_file`) where a run of
    ``cfg`` on this node looks for it, replacing one trained here; returns its path."""
    from fedretain.files import atomic_write_bytes

    name, data = net
    path = _cache_settings(cfg)[0] / name
    if not (path.is_file() and path.read_bytes() == data):
        atomic_write_bytes(path, data)
    return path


DIAGNOSTICS.add(
    "generator_quality",
    GeneratorQuality,
    "FID of the global ACGAN generator every fid_every rounds and sample grids per task "
    "(continual runs with model=acgan)",
    check=check_generator_quality,
    files=("generator_quality.jsonl", "fid.png", "samples/"),
)
