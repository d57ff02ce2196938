"""The algorithm registry: one module per algorithm, one factory per module.

A new algorithm goes in ``fedretain/algorithms/<name>.py`` as ``<name>(**hparams) -> Algorithm``
and gets one line in ``ALGORITHMS`` below. Hyper-parameters are the factory's keyword
arguments (``algo.<name>=value`` on the command line); ``opt`` (the local optimiser) is
supplied by the runner from the ``optimizer``, ``momentum`` and ``weight_decay`` keys. A name that
is a Python keyword takes a trailing underscore in the factory (``lambda_``) and none in configs
(``algo.lambda``).
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedretain.algorithms.fedavg import fedavg
from fedretain.algorithms.fedavgm import fedavgm
from fedretain.algorithms.fedcurv import fedcurv
from fedretain.algorithms.feddyn import feddyn
from fedretain.algorithms.fedmlb import fedmlb
from fedretain.algorithms.fedprox import fedprox
from fedretain.algorithms.fedproxm import fedproxm
from fedretain.algorithms.fedreg import fedreg
from fedretain.algorithms.gradma import gradma, gradma_s, gradma_w
from fedretain.algorithms.mifa import mifa, mifam
from fedretain.algorithms.mimelite import mimelite
from fedretain.algorithms.moon import moon
from fedretain.algorithms.scaffold import scaffold
from fedretain.algorithms.sgd import sgd
from fedretain.core.algorithm import Algorithm
from fedretain.core.optim import Optimizer
from fedretain.errors import ConfigError, unknown_choice

# keyword arguments of factories that are plumbing, not hyper-parameters
_INTERNAL = {"opt", "penalty", "correct"}


@dataclass(frozen=True)
class AlgorithmInfo:
    name: str
    description: str
    factory: Callable[..., Algorithm]


ALGORITHMS: dict[str, AlgorithmInfo] = {
    info.name: info
    for info in [
        AlgorithmInfo("sgd", "one full-batch local step per round (FedReg's reference)", sgd),
        AlgorithmInfo(
            "fedavg", "local SGD, sample-weighted model averaging (McMahan 2017)", fedavg
        ),
        AlgorithmInfo("fedavgm", "FedAvg with server heavy-ball momentum (Hsu 2019)", fedavgm),
        AlgorithmInfo("fedprox", "FedAvg with a proximal term mu/2 |y - x|^2 (Li 2020)", fedprox),
        AlgorithmInfo("fedproxm", "FedProx clients with FedAvgM's server momentum", fedproxm),
        AlgorithmInfo("mifa", "server averages every client's latest update (Gu 2021)", mifa),
        AlgorithmInfo("mifam", "MIFA with server momentum", mifam),
        AlgorithmInfo(
            "gradma", "QP-corrected local steps and server momentum with memory (Luo 2023)", gradma
        ),
        AlgorithmInfo("gradma-w", "GradMA's worker side only, FedAvg server", gradma_w),
        AlgorithmInfo("gradma-s", "GradMA's server side only, FedAvg workers", gradma_s),
        AlgorithmInfo(
            "scaffold",
            "control variates against client drift, option II (Karimireddy 2020)",
            scaffold,
        ),
        AlgorithmInfo(
            "fedcurv",
            "diagonal-Fisher penalty towards other clients' models (Shoham 2019)",
            fedcurv,
        ),
        AlgorithmInfo("feddyn", "dynamic regularisation with per-client state (Acar 2021)", feddyn),
        AlgorithmInfo("moon", "model-contrastive local training (Li, He, Song 2021)", moon),
        AlgorithmInfo("fedreg", "pseudo-data regularised local steps; mg: MG (Xu 2022)", fedreg),
        AlgorithmInfo("mimelite", "server momentum in local steps (Karimireddy 2021)", mimelite),
        AlgorithmInfo("fedmlb", "hybrid paths through frozen global blocks (Kim 2022)", fedmlb),
    ]
}


def _key(param: str) -> str:
    """The config name of a factory keyword: ``lambda_`` (a Python keyword + "_") is ``lambda``."""
    stem = param.removesuffix("_")
    return stem if stem != param and keyword.iskeyword(stem) else param


def _keywords(name: str) -> dict[str, str]:
    """Config name -> factory keyword, for the hyper-parameters of algorithm ``name``."""
    if name not in ALGORITHMS:
        raise ConfigError(unknown_choice("algorithm", name, ALGORITHMS))
    sig = inspect.signature(ALGORITHMS[name].factory)
    return {
        _key(k): k
        for k, p in sig.parameters.items()
        if k not in _INTERNAL and p.default is not inspect.Parameter.empty
    }


def algorithm_params(name: str) -> dict[str, Any]:
    """The hyper-parameters of an algorithm (config names: ``algo.<name>``) with their defaults."""
    keywords = _keywords(name)
    sig = inspect.signature(ALGORITHMS[name].factory)
    return {key: sig.parameters[kw].default for key, kw in keywords.items()}


def build_algorithm(name: str, opt: Optimizer | None = None, **hparams: Any) -> Algorithm:
    """Build a registered algorithm; unknown names and bad values give a one-line error."""
    valid = _keywords(name)
    for key in hparams:
        if key not in valid:
            choices = ", ".join(f"algo.{k}" for k in valid) or "none"
            raise ConfigError(f"unknown key 'algo.{key}' for algorithm {name}; valid: {choices}")
    try:
        return ALGORITHMS[name].factory(opt=opt, **{valid[k]: v for k, v in hparams.items()})
    except ValueError as e:
        raise ConfigError(f"algorithm {name}: {e}") from None
