"""The model registry: names, one-line descriptions, builders and their parameters."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn
from torch.func import functional_call

from fedretain.errors import ConfigError, unknown_choice
from fedretain.models._common import ProjectedModel, check_int, check_num_classes
from fedretain.models.fixup import resnet9
from fedretain.models.resnet import resnet18, resnet20
from fedretain.models.simple import cnn, cnn2, cnn_fedavg, lenet5, mlp
from fedretain.models.vgg import vgg11


@dataclass(frozen=True)
class ModelInfo:
    name: str
    description: str  # one line for `fedretain list models`
    build: Callable[..., nn.Module]  # build(input_shape, num_classes, **params) -> nn.Module


_ENTRIES = (
    ("mlp", "multi-layer perceptron on flattened inputs (hidden sizes configurable)", mlp),
    ("cnn", "FedReg's MNIST CNN: 3 conv (5x5) + 2 fc, 228k params on 1x28x28", cnn),
    ("cnn2", "PyTorch MNIST example CNN with dropout (FedCurv), 1.2M params on 1x28x28", cnn2),
    ("cnn-fedavg", "McMahan et al. 2017 FedAvg CNN, 582,026 params on 1x28x28", cnn_fedavg),
    ("lenet5", "LeNet-5 for CIFAR-10 (GradMA / FedLab), 62k params on 3x32x32", lenet5),
    ("vgg11", "VGG-11, CIFAR variant, group/batch/no norm, 9.2M params on 3x32x32", vgg11),
    ("resnet9", "FedReg's ResNet-9 with Fixup init (no norm by default), 6.6M params", resnet9),
    ("resnet18", "CIFAR ResNet-18, GroupNorm(2) by default (FedMLB / TCE), 11.2M params", resnet18),
    ("resnet20", "CIFAR ResNet-20 (He et al. 2016, option A), 0.27M params (GradMA)", resnet20),
)

MODELS: dict[str, ModelInfo] = {
    name: ModelInfo(name, description, build) for name, description, build in _ENTRIES
}


def _info(name: str) -> ModelInfo:
    if name not in MODELS:
        raise ConfigError(unknown_choice("model", name, MODELS))
    return MODELS[name]


# parameters every model takes, handled here rather than by the builders
COMMON_PARAMS: dict[str, object] = {
    # > 0: MOON's projection head of this output size between features and head (None: none)
    "projection": None,
}


def model_params(name: str) -> dict[str, object]:
    """The keyword parameters of model ``name`` and their defaults (builder's, then common)."""
    sig = inspect.signature(_info(name).build)
    params = list(sig.parameters.values())[2:]  # after input_shape, num_classes
    return {**{p.name: p.default for p in params}, **COMMON_PARAMS}


def build_model(
    name: str, input_shape: tuple[int, ...], num_classes: int, **params: Any
) -> nn.Module:
    """Build model ``name`` for inputs of ``input_shape`` ((C, H, W) or (D,)) and ``num_classes``.

    ``projection=P`` (any model) inserts MOON's projection head Linear(d, d)-ReLU-Linear(d, P)
    between the representation and a new Linear(P, num_classes) head (:class:`ProjectedModel`).

    Raises ConfigError for an unknown model, an unknown parameter, a bad parameter value or an
    input too small for the model.
    """
    info = _info(name)
    valid = model_params(name)
    for key in params:
        if key not in valid:
            raise ConfigError(f"model '{name}': " + unknown_choice("parameter", key, valid))
    projection = params.pop("projection", None)
    model = info.build(input_shape, num_classes, **params)
    if projection is None:
        return model
    dim = check_int(name, "projection", projection)
    return ProjectedModel(model, dim, check_num_classes(name, num_classes))


class _MethodCall(nn.Module):
    def __init__(self, model: nn.Module, method: str) -> None:
        super().__init__()
        self.model = model
        self.method = method

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.model, self.method)(*args, **kwargs)


def functional_method(
    model: nn.Module,
    params_and_buffers: Mapping[str, Tensor],
    method: str,
    *args: Any,
    **kwargs: Any,
) -> Any:
    """``model.<method>(*args, **kwargs)`` with ``params_and_buffers`` substituted, like
    ``torch.func.functional_call`` (which only calls ``forward``).

    E.g. ``functional_method(model, params, "features", x)`` for MOON's representation; works
    under ``torch.func.grad`` and ``vmap``.
    """
    wrapper = _MethodCall(model, method)
    tensors = {f"model.{k}": v for k, v in params_and_buffers.items()}
    return functional_call(wrapper, tensors, args, kwargs, tie_weights=False)
