"""The model registry: names, one-line descriptions, builders and their parameters."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Mapping
from typing import Any

from torch import Tensor, nn
from torch.func import functional_call

from fedretain.errors import ConfigError, unknown_choice
from fedretain.models._common import ProjectedModel, check_int, check_num_classes
from fedretain.models.densenet import densenet121
from fedretain.models.fixup import resnet9
from fedretain.models.resnet import resnet18, resnet20
from fedretain.models.simple import cnn, cnn2, cnn_fedavg, lenet5, lenet_dlg, mlp
from fedretain.models.vgg import vgg11
from fedretain.models.vit import vit
from fedretain.registry import Registry

# every model also takes projection=P (> 0): MOON's projection head of this output size
# between features and head (None: none), handled by build_model rather than the builders
MODELS = Registry(
    "model",
    common={"projection": None},
    common_help={"projection": "output size P of MOON's projection head (none: no projection)"},
)
MODELS.add("mlp", mlp, "multi-layer perceptron on flattened inputs (hidden sizes configurable)")
MODELS.add("cnn", cnn, "FedReg's MNIST CNN: 3 conv (5x5) + 2 fc, 228k params on 1x28x28")
MODELS.add("cnn2", cnn2, "PyTorch MNIST example CNN with dropout (FedCurv), 1.2M params on 1x28x28")
MODELS.add("cnn-fedavg", cnn_fedavg, "McMahan et al. 2017 FedAvg CNN, 582,026 params on 1x28x28")
MODELS.add("lenet5", lenet5, "LeNet-5 for CIFAR-10 (GradMA / FedLab), 62k params on 3x32x32")
MODELS.add(
    "lenet-dlg", lenet_dlg, "DLG's sigmoid LeNet (Zhu et al. 2019), the gradient-inversion test bed"
)
MODELS.add("vgg11", vgg11, "VGG-11, CIFAR variant, group/batch/no norm, 9.2M params on 3x32x32")
MODELS.add(
    "resnet9", resnet9, "FedReg's ResNet-9 with Fixup init (no norm by default), 6.6M params"
)
MODELS.add(
    "resnet18", resnet18, "CIFAR ResNet-18, GroupNorm(2) by default (FedMLB / TCE), 11.2M params"
)
MODELS.add(
    "resnet20", resnet20, "CIFAR ResNet-20 (He et al. 2016, option A), 0.27M params (GradMA)"
)
MODELS.add(
    "densenet121",
    densenet121,
    "DenseNet-121 (Huang et al. 2017), BatchNorm by default, 7.0M params on 2 classes (FedReg)",
)
MODELS.add(
    "vit",
    vit,
    "vision transformer, ViT-B/16 by default (86.6M params), pre-trained weights from a file",
)


def model_params(name: str) -> dict[str, object]:
    """The keyword parameters of model ``name`` and their defaults (builder's, then common)."""
    return MODELS.params(name)


def build_model(
    name: str, input_shape: tuple[int, ...], num_classes: int, **params: Any
) -> nn.Module:
    """Build model ``name`` for inputs of ``input_shape`` ((C, H, W) or (D,)) and ``num_classes``.

    ``projection=P`` (any model) inserts MOON's projection head Linear(d, d)-ReLU-Linear(d, P)
    between the representation and a new Linear(P, num_classes) head (:class:`ProjectedModel`).

    Raises ConfigError for an unknown model, an unknown parameter, a bad parameter value or an
    input too small for the model.
    """
    info = MODELS.get(name)
    valid = model_params(name)
    for key in params:
        if key not in valid:
            raise ConfigError(f"model '{name}': " + unknown_choice("parameter", key, valid))
    projection = params.pop("projection", None)
    model = info.factory(input_shape, num_classes, **params)
    if projection is None:
        return model
    dim = check_int(name, "projection", projection)
    return ProjectedModel(model, dim, check_num_classes(name, num_classes))


# one lock per module whose parameters functional calls swap (see substituted_call)
_LOCKS: weakref.WeakKeyDictionary[nn.Module, threading.RLock] = weakref.WeakKeyDictionary()
_LOCKS_GUARD = threading.Lock()


def substituted_call(
    module: nn.Module,
    tensors: dict[str, Tensor],
    args: tuple,
    kwargs: dict | None = None,
    owner: nn.Module | None = None,
) -> Any:
    """``torch.func.functional_call(module, tensors, args, kwargs, tie_weights=False)``, one
    thread at a time per module: the call swaps ``tensors`` into the module's attributes for the
    forward pass, so two threads calling one module at once would see each other's parameters
    (the sequential engine's ``engine.workers`` gives each thread its own copy of the run's model,
    but an algorithm's own modules, such as replay's generator, are shared). ``owner``: the
    module whose attributes are swapped when ``module`` only wraps it. The backward pass needs
    no lock: autograd holds the substituted tensors themselves."""
    key = module if owner is None else owner
    lock = _LOCKS.get(key)
    if lock is None:
        with _LOCKS_GUARD:
            lock = _LOCKS.setdefault(key, threading.RLock())
    with lock:
        return functional_call(module, tensors, args, kwargs, tie_weights=False)


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
    return substituted_call(wrapper, tensors, args, kwargs, owner=model)
