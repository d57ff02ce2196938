"""The optional parts of fedretain and the extra that installs each.

The core (every algorithm, the sequential, vectorised and auto engines, class-incremental FL,
``reproduce`` and ``sweep`` on one machine) needs none of them. Flower (``engine=flower``, the
``flower`` commands) and Ray (``--ray``) come with ``pip install "fedretain[flower]"``; Opacus
(``privacy=dpsgd`` and the accountant of every privacy mechanism) with ``[privacy]``;
TensorBoard (``tracking=tensorboard``) with ``[tracking]``; MLflow (``tracking=mlflow``) with
``[mlflow]``; Weights & Biases (``tracking=wandb``) with ``[wandb]``; h5py (FEMNIST as
``fedretain data get femnist`` fetches it) with ``[femnist]``. A feature whose package
is missing says so in one line, with the command, before anything runs (:func:`require`).
"""

from __future__ import annotations

import importlib.util

from fedretain.errors import ConfigError

EXTRAS = {
    "flwr": "flower",
    "ray": "flower",
    "opacus": "privacy",
    "tensorboard": "tracking",
    "mlflow": "mlflow",
    "wandb": "wandb",
    "h5py": "femnist",
}


def installed(module: str) -> bool:
    """Whether ``module`` can be found (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken or blocked package counts as missing
        return False


def require(module: str, what: str) -> None:
    """A ConfigError naming the extra that installs ``module`` when it is missing: ``what``
    is the feature that needs it (``engine=flower``)."""
    if not installed(module):
        extra = EXTRAS[module]
        raise ConfigError(
            f'{what} needs {module}, which is not installed here: pip install "fedretain[{extra}]"'
        )


__all__ = ["EXTRAS", "installed", "require"]
