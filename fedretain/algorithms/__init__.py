"""The algorithm registry: one module per algorithm, one factory per module.

A new algorithm goes in ``fedretain/algorithms/<name>.py`` as ``<name>(**hparams) -> Algorithm``
and gets one line in ``ALGORITHMS`` below. Hyper-parameters are the factory's keyword
arguments (``algo.<name>=value`` on the command line); ``opt`` (the local optimiser) is
supplied by the runner from the ``optimizer``, ``momentum`` and ``weight_decay`` keys.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fedretain.algorithms.fedavg import fedavg
from fedretain.algorithms.fedavgm import fedavgm
from fedretain.algorithms.fedprox import fedprox
from fedretain.algorithms.fedproxm import fedproxm
from fedretain.algorithms.gradma import gradma, gradma_s, gradma_w
from fedretain.algorithms.mifa import mifa, mifam
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
    ]
}


def algorithm_params(name: str) -> dict[str, Any]:
    """The hyper-parameters of an algorithm with their defaults."""
    if name not in ALGORITHMS:
        raise ConfigError(unknown_choice("algorithm", name, ALGORITHMS))
    sig = inspect.signature(ALGORITHMS[name].factory)
    return {
        k: p.default
        for k, p in sig.parameters.items()
        if k not in _INTERNAL and p.default is not inspect.Parameter.empty
    }


def build_algorithm(name: str, opt: Optimizer | None = None, **hparams: Any) -> Algorithm:
    """Build a registered algorithm; unknown names and bad values give a one-line error."""
    valid = algorithm_params(name)
    for key in hparams:
        if key not in valid:
            choices = ", ".join(f"algo.{k}" for k in valid) or "none"
            raise ConfigError(f"unknown key 'algo.{key}' for algorithm {name}; valid: {choices}")
    try:
        return ALGORITHMS[name].factory(opt=opt, **hparams)
    except ValueError as e:
        raise ConfigError(f"algorithm {name}: {e}") from None
