"""Class-incremental federated learning: task sequences, the ACGAN for generative replay and
measures of a generator's quality.

The setting is FedCIL's (Qi, Zhao & Li, *Better Generative Replay for Continual Federated
Learning*, ICLR 2023, arXiv:2302.13001): every client learns a sequence of
tasks of new classes, keeps no data of past tasks, and the server's global model must classify
every class that any client has seen so far.

- :mod:`fedretain.continual.tasks`: the task plan (which classes and samples each client has in
  each task, App. A of the paper) and :class:`~fedretain.continual.tasks.TaskData`, the view
  that hands a client only its current task's samples.
- :mod:`fedretain.continual.acgan`: the conditional generator and the discriminator with an
  auxiliary classifier (Odena, Olah & Shlens, *Conditional Image Synthesis with Auxiliary
  Classifier GANs*, ICML 2017, arXiv:1610.09585), with their losses and seeded sampling.
- :mod:`fedretain.continual.quality`: a Fréchet distance on the features of a small classifier
  trained on the real data (cached on disk) and PNG grids of generated samples.
- :mod:`fedretain.continual.scenario`: ``scenario=class_incremental``, the config component
  that makes a federation continual (the task plan, the clients' parts of each round's task).
- :mod:`fedretain.continual.zoo`: ``model=acgan``, the ACGAN as a model whose forward is its
  classifier.
- the methods: :mod:`~fedretain.continual.replay` (``replay=acgan``: FedAvg/FedProx+ACGAN),
  :mod:`~fedretain.continual.dgr` (``replay=dgr``: FedAvg/FedProx+DGR),
  :mod:`~fedretain.continual.fedlwf` (``algorithm=fedlwf2t``) and
  :mod:`~fedretain.continual.fedcil` (``algorithm=fedcil``); the two algorithms are registered
  below, in the algorithm registry (:data:`fedretain.algorithms.ALGORITHMS`), and run only in a
  continual scenario (they require ``scenario``).

The run's side (task switches, evaluation on the seen classes, the accuracy matrix, average
forgetting and backward transfer) is :mod:`fedretain.experiments.continual`; the generator's
FID over the rounds is ``diagnostics=generator_quality``
(:mod:`fedretain.experiments.generator_quality`).
"""

# importing any module of this package registers every entry of the package: the two
# algorithms below, model=acgan (zoo), the scenario and the replays (replay, dgr)
import fedretain.continual.dgr
import fedretain.continual.scenario
import fedretain.continual.zoo  # noqa: F401
from fedretain.algorithms import ALGORITHMS
from fedretain.continual.fedcil import fedcil
from fedretain.continual.fedlwf import fedlwf2t

_CONTINUAL = {
    "scenario": (bool, "it learns a sequence of tasks: set scenario=class_incremental"),
    "model": (lambda m: m == "acgan", "it trains an ACGAN: set model=acgan"),
}
ALGORITHMS.add(
    "fedcil",
    fedcil,
    "ACGAN replay, server consolidation, client consistency (Qi 2023); continual only",
    requires=_CONTINUAL,
    server_step="its server consolidates the merged ACGAN on generated samples (FedCIL eq. 10)",
)
ALGORITHMS.add(
    "fedlwf2t",
    fedlwf2t,
    "distillation from the last-task model and the global model, T=2 (Usmanova 2021); "
    "continual only",
    requires={"scenario": _CONTINUAL["scenario"]},
)
