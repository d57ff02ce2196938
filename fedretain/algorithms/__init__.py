"""The algorithm registry: one module per algorithm, one factory per module.

A new algorithm goes in ``fedretain/algorithms/<name>.py`` as ``<name>(**hparams) -> Algorithm``
and gets one line below. Hyper-parameters are the factory's keyword arguments
(``algo.<name>=value`` on the command line); ``opt`` (the local optimiser) is supplied from the
``optimizer`` component of the config. A name that is a Python keyword takes a trailing
underscore in the factory (``lambda_``) and none in configs (``algo.lambda``).
"""

from __future__ import annotations

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
from fedretain.registry import Registry

# keyword arguments of factories that are plumbing, not hyper-parameters; an entry may declare
# ``requires={"prefix.param": (predicate, why)}``: settings it cannot run without
ALGORITHMS = Registry("algorithm", internal=("opt", "penalty", "correct"))
_add = ALGORITHMS.add
_add("sgd", sgd, "one full-batch local step per round (FedReg's reference)")
_add("fedavg", fedavg, "local SGD, sample-weighted model averaging (McMahan 2017)")
_add("fedavgm", fedavgm, "FedAvg with server heavy-ball momentum (Hsu 2019)")
_add("fedprox", fedprox, "FedAvg with a proximal term mu/2 |y - x|^2 (Li 2020)")
_add("fedproxm", fedproxm, "FedProx clients with FedAvgM's server momentum")
_add("mifa", mifa, "server averages every client's latest update (Gu 2021)")
_add("mifam", mifam, "MIFA with server momentum")
_add("gradma", gradma, "QP-corrected local steps and server momentum with memory (Luo 2023)")
_add("gradma-w", gradma_w, "GradMA's worker side only, FedAvg server")
_add("gradma-s", gradma_s, "GradMA's server side only, FedAvg workers")
_add("scaffold", scaffold, "control variates against client drift, option II (Karimireddy 2020)")
_add(
    "fedcurv",
    fedcurv,
    "diagonal-Fisher penalty towards other clients' models (Shoham 2019)",
    requires={
        "store.dtype": (
            lambda dtype: dtype != "float16",
            "its stored Fisher entries below ~6e-8 would round to 0; use store.dtype=bfloat16 "
            "(float32's range) or float32",
        )
    },
)
_add("feddyn", feddyn, "dynamic regularisation with per-client state (Acar 2021)")
_add(
    "moon",
    moon,
    "model-contrastive local training (Li, He, Song 2021)",
    requires={
        "model.projection": (
            lambda dim: dim is not None,
            "MOON contrasts projected representations and needs a projection head: set "
            "model.projection=P (e.g. 256, the paper's)",
        )
    },
)
_add("fedreg", fedreg, "pseudo-data regularised local steps; mg: MG (Xu 2022)")
_add("mimelite", mimelite, "server momentum in local steps (Karimireddy 2021)")
_add("fedmlb", fedmlb, "hybrid paths through frozen global blocks (Kim 2022)")


def algorithm_params(name: str) -> dict[str, Any]:
    """The hyper-parameters of an algorithm (config names: ``algo.<name>``) with their defaults."""
    return ALGORITHMS.params(name)


def build_algorithm(name: str, opt: Optimizer | None = None, **hparams: Any) -> Algorithm:
    """Build a registered algorithm; unknown names and bad values give a one-line error."""
    return ALGORITHMS.build(name, hparams, prefix="algo", opt=opt)
