"""The algorithm registry: one module per algorithm, one factory per module.

A new algorithm goes in ``fedretain/algorithms/<name>.py`` as ``<name>(**hparams) -> Algorithm``
and gets one line below. Hyper-parameters are the factory's keyword arguments
(``algo.<name>=value`` on the command line); ``opt`` (the local optimiser) is supplied from the
``optimizer`` component of the config. A name that is a Python keyword takes a trailing
underscore in the factory (``lambda_``) and none in configs (``algo.lambda``).

The continual methods (FedCIL, FedLwF-2T) register themselves from :mod:`fedretain.continual`;
``fedretain.registry.kind("algorithm")`` loads both packages, this one first.
An entry's ``cost`` is its run time relative to FedAvg's (1 when not given), so that a batch of
runs can start the slow ones first.
"""

from __future__ import annotations

from typing import Any

from fedretain.algorithms.aggregators import Aggregator
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
from fedretain.core.algorithm import SUPPLIED, Algorithm
from fedretain.core.optim import Optimizer
from fedretain.errors import ConfigError
from fedretain.registry import Registry

# keyword arguments of factories that are plumbing, not hyper-parameters; an entry may declare
# ``requires={"prefix.param": (predicate, why)}``: settings it cannot run without
# (``server_opt``/``aggregator`` in the signature: the algorithm's server step is a model update
# that composes with them, :mod:`fedretain.algorithms.server`; ``server_step=why`` says why one
# without them keeps its own)
# (``model`` and ``rounds_per_task``: supplied by a continual federation to the algorithms that
# take them)
ALGORITHMS = Registry(
    "algorithm",
    internal=(*SUPPLIED, "rounds_per_task"),
)
_add = ALGORITHMS.add
_add("sgd", sgd, "one full-batch local step per round (FedReg's reference)")
_add("fedavg", fedavg, "local SGD, sample-weighted model averaging (McMahan 2017)")
_add(
    "fedavgm",
    fedavgm,
    "FedAvg with server heavy-ball momentum (Hsu 2019)",
    server_step="it is fedavg with server_opt=sgd server_opt.momentum=beta",
)
_add("fedprox", fedprox, "FedAvg with a proximal term mu/2 |y - x|^2 (Li 2020)")
_add(
    "fedproxm",
    fedproxm,
    "FedProx clients with FedAvgM's server momentum",
    server_step="it is fedprox with server_opt=sgd server_opt.momentum=beta",
)
_MIFA = "its server averages a table of every client's latest update"
_add(
    "mifa",
    mifa,
    "server averages every client's latest update (Gu 2021)",
    server_step=_MIFA,
    cost=1.5,
)
_add("mifam", mifam, "MIFA with server momentum", server_step=_MIFA)
_QP = "its server projects its momentum with GradMA's QP"
_add(
    "gradma",
    gradma,
    "QP-corrected local steps and server momentum with memory (Luo 2023)",
    server_step=_QP,
    cost=8.0,
)
_add(
    "gradma-w",
    gradma_w,
    "GradMA's worker side only, FedAvg server",
    server_step="its uplink is the update d, averaged as GradMA's server does",
    cost=7.0,
)
_add("gradma-s", gradma_s, "GradMA's server side only, FedAvg workers", server_step=_QP)
_add(
    "scaffold",
    scaffold,
    "control variates against client drift, option II (Karimireddy 2020)",
    server_step="its server step also moves the control variate c (server_lr is its eta_g)",
)
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
    cost=2.0,
)
_add(
    "feddyn",
    feddyn,
    "dynamic regularisation with per-client state (Acar 2021)",
    server_step="its server corrects the mean with its state h",
)
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
_add("fedreg", fedreg, "pseudo-data regularised local steps; mg: MG (Xu 2022)", cost=6.0)
_add("mimelite", mimelite, "server momentum in local steps (Karimireddy 2021)")
_add("fedmlb", fedmlb, "hybrid paths through frozen global blocks (Kim 2022)")


def continual_only() -> tuple[str, ...]:
    """The registered algorithms that run only in a continual scenario (they require
    ``scenario``)."""
    return tuple(n for n, e in ALGORITHMS.items() if "scenario" in e.meta.get("requires", {}))


def algorithm_params(name: str) -> dict[str, Any]:
    """The hyper-parameters of an algorithm (config names: ``algo.<name>``) with their defaults."""
    return ALGORITHMS.params(name)


def build_algorithm(
    name: str,
    opt: Optimizer | None = None,
    *,
    server_opt: Optimizer | None = None,
    aggregator: Aggregator | None = None,
    model: Any = None,
    rounds_per_task: int | None = None,
    **hparams: Any,
) -> Algorithm:
    """Build a registered algorithm; unknown names and bad values give a one-line error.
    ``server_opt`` and ``aggregator`` go to algorithms whose server step takes them; ``model``
    and ``rounds_per_task`` (a continual scenario's) to those that take them (the continual
    methods, registered once :mod:`fedretain.continual` is imported)."""
    server = {"server_opt": server_opt, "aggregator": aggregator}
    supplied = {k: v for k, v in server.items() if v is not None}
    check_server_side(name, list(supplied))
    continual = {"model": model, "rounds_per_task": rounds_per_task}
    supplied.update(
        {k: v for k, v in continual.items() if v is not None and ALGORITHMS.takes(name, k)}
    )
    return ALGORITHMS.build(name, hparams, prefix="algo", opt=opt, **supplied)


def check_server_side(name: str, keys: list[str]) -> None:
    """Refuse ``server_opt`` / ``aggregator`` for an algorithm whose server step is its own."""
    for key in keys:
        if not ALGORITHMS.takes(name, key):
            why = ALGORITHMS.get(name).meta.get("server_step", "its server step is its own")
            raise ConfigError(
                f"{name} takes no {key}: {why}; {key} composes with the algorithms whose "
                "server step is a model update (fedavg, fedprox, fedreg, moon, fedcurv, ...)"
            )
