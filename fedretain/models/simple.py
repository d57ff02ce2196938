"""Small models without normalisation: MLP, the MNIST CNNs of FedReg / FedCurv / FedAvg, LeNet-5.

Each is a :class:`ZooModel` with a ``body`` (``nn.Sequential``, everything up to the penultimate
representation) and a ``head`` (the final ``nn.Linear``), built in that order so that, under the
same ``torch.manual_seed``, the initial weights equal those of the plain ``nn.Sequential`` with
the same layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial

from torch import Tensor, nn

from fedretain.errors import ConfigError
from fedretain.models._common import (
    ZooModel,
    chain,
    check_input_shape,
    check_int,
    check_num_classes,
    conv_out,
    pool_out,
    spatial_out,
)


class SequentialModel(ZooModel):
    """``features = body(x)``; ``forward = head(body(x))``."""

    def __init__(self, body: nn.Sequential, head: nn.Linear) -> None:
        super().__init__()
        self.body = body
        self.head = head

    def features(self, x: Tensor) -> Tensor:
        return self.body(x)


def _conv(k: int) -> partial[int]:
    return partial(conv_out, kernel=k)


# --------------------------------------------------------------------------- mlp


def mlp(
    input_shape: tuple[int, ...],
    num_classes: int,
    hidden: Sequence[int] | int = (200, 200, 200),
) -> SequentialModel:
    """Multi-layer perceptron: Flatten, then Linear + ReLU per hidden size, then the head.

    ``hidden=(200, 200)`` on 1x28x28 is the "2NN" of McMahan et al., *Communication-Efficient
    Learning of Deep Networks from Decentralized Data*, AISTATS 2017 (199,210 parameters);
    the default three hidden layers of 200 have 239,410. ``hidden=()`` is multinomial logistic
    regression. Works on any input shape (it flattens).

    :param hidden: sizes of the hidden layers, e.g. [200, 200] ([]: logistic regression)
    """
    shape = check_input_shape("mlp", input_shape, image=False)
    num_classes = check_num_classes("mlp", num_classes)
    if isinstance(hidden, int) and not isinstance(hidden, bool):
        hidden = (hidden,)
    if isinstance(hidden, str) or not isinstance(hidden, Sequence):
        raise ConfigError(f"model 'mlp': hidden must be a list of layer sizes, got {hidden!r}")
    sizes = [check_int("mlp", "hidden", h) for h in hidden]
    layers: list[nn.Module] = [nn.Flatten()]
    width = math.prod(shape)
    for h in sizes:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    return SequentialModel(nn.Sequential(*layers), nn.Linear(width, num_classes))


# --------------------------------------------------------------------------- cnn (FedReg)


def cnn(input_shape: tuple[int, ...], num_classes: int) -> SequentialModel:
    """FedReg's MNIST CNN.

    conv(C→32, 5) ReLU, conv(32→32, 5), maxpool 2, ReLU, conv(32→64, 5), maxpool 2, ReLU,
    flatten (576 on 28x28), fc(576→256) ReLU, fc(256→classes); 228,010 parameters on 1x28x28
    with 10 classes. Source: Xu et al., *Acceleration of Federated Learning with Alleviated
    Forgetting in Local Training* (FedReg), ICLR 2022; code github.com/Zoesgithub/FedReg,
    ``FedUtils/models/mnist/cnn.py``.
    """
    shape = check_input_shape("cnn", input_shape, image=True)
    num_classes = check_num_classes("cnn", num_classes)
    side = chain(_conv(5), _conv(5), pool_out, _conv(5), pool_out)
    h, w = spatial_out("cnn", shape, side)
    body = nn.Sequential(
        nn.Conv2d(shape[0], 32, 5),
        nn.ReLU(),
        nn.Conv2d(32, 32, 5),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Conv2d(32, 64, 5),
        nn.MaxPool2d(2),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * h * w, 256),
        nn.ReLU(),
    )
    return SequentialModel(body, nn.Linear(256, num_classes))


# --------------------------------------------------------------------------- cnn2 (PyTorch example)


def cnn2(input_shape: tuple[int, ...], num_classes: int) -> SequentialModel:
    """The CNN of the PyTorch MNIST example, used by FedCurv.

    conv(C→32, 3) ReLU, conv(32→64, 3) ReLU, maxpool 2, Dropout(0.25), flatten (9216 on 28x28),
    fc(9216→128) ReLU, Dropout(0.5), fc(128→classes); 1,199,882 parameters on 1x28x28 with 10
    classes. Sources: github.com/pytorch/examples ``mnist/main.py``; Shoham et al., *Overcoming
    Forgetting in Federated Learning on Non-IID Data* (FedCurv), NeurIPS-W 2019.

    Dropout is random in training mode: under ``torch.func.vmap`` call with
    ``randomness="different"`` (one mask per client) or ``"same"``; the default ``"error"``
    refuses. ``forward(x) == head(features(x))`` holds exactly in eval mode (in training mode
    each call draws new masks).
    """
    shape = check_input_shape("cnn2", input_shape, image=True)
    num_classes = check_num_classes("cnn2", num_classes)
    side = chain(_conv(3), _conv(3), pool_out)
    h, w = spatial_out("cnn2", shape, side)
    body = nn.Sequential(
        nn.Conv2d(shape[0], 32, 3),
        nn.ReLU(),
        nn.Conv2d(32, 64, 3),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.25),
        nn.Flatten(),
        nn.Linear(64 * h * w, 128),
        nn.ReLU(),
        nn.Dropout(0.5),
    )
    return SequentialModel(body, nn.Linear(128, num_classes))


# --------------------------------------------------------------------------- cnn-fedavg


def cnn_fedavg(input_shape: tuple[int, ...], num_classes: int) -> SequentialModel:
    """The CNN of McMahan et al., AISTATS 2017 (FedAvg).

    conv(C→32, 5) ReLU maxpool 2, conv(32→64, 5) ReLU maxpool 2, flatten (1024 on 28x28, no
    padding), fc(1024→512) ReLU, fc(512→classes); 582,026 parameters on 1x28x28 with 10
    classes. Layers are in exactly the order of ``nn.Sequential(Conv2d(1, 32, 5), ReLU(),
    MaxPool2d(2), Conv2d(32, 64, 5), ReLU(), MaxPool2d(2), Flatten(), Linear(1024, 512), ReLU(),
    Linear(512, 10))`` and initialise identically to it under the same seed. Source: McMahan et
    al., *Communication-Efficient Learning of Deep Networks from Decentralized Data*.
    """
    shape = check_input_shape("cnn-fedavg", input_shape, image=True)
    num_classes = check_num_classes("cnn-fedavg", num_classes)
    side = chain(_conv(5), pool_out, _conv(5), pool_out)
    h, w = spatial_out("cnn-fedavg", shape, side)
    body = nn.Sequential(
        nn.Conv2d(shape[0], 32, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(64 * h * w, 512),
        nn.ReLU(),
    )
    return SequentialModel(body, nn.Linear(512, num_classes))


# --------------------------------------------------------------------------- lenet5


def lenet5(input_shape: tuple[int, ...], num_classes: int) -> SequentialModel:
    """LeNet-5 as used for CIFAR-10 by GradMA / FedLab.

    conv(C→6, 5) ReLU maxpool 2, conv(6→16, 5) ReLU maxpool 2, flatten (400 on 32x32),
    fc(→120) ReLU, fc(120→84) ReLU, fc(84→classes); 62,006 parameters on 3x32x32 with 10
    classes. Sources: LeCun et al., *Gradient-Based Learning Applied to Document Recognition*,
    1998; Luo et al., *GradMA: A Gradient-Memory-based Accelerated Federated Learning with
    Alleviated Catastrophic Forgetting*, CVPR 2023; FedLab's CIFAR CNN.
    """
    shape = check_input_shape("lenet5", input_shape, image=True)
    num_classes = check_num_classes("lenet5", num_classes)
    side = chain(_conv(5), pool_out, _conv(5), pool_out)
    h, w = spatial_out("lenet5", shape, side)
    body = nn.Sequential(
        nn.Conv2d(shape[0], 6, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(16 * h * w, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
    )
    return SequentialModel(body, nn.Linear(84, num_classes))


# --------------------------------------------------------------------------- DLG's LeNet

ACTIVATIONS = {"sigmoid": nn.Sigmoid, "relu": nn.ReLU, "softplus": nn.Softplus, "tanh": nn.Tanh}


def lenet_dlg(
    input_shape: tuple[int, ...], num_classes: int, activation: str = "sigmoid"
) -> SequentialModel:
    """The LeNet of DLG's code (Zhu et al., *Deep Leakage from Gradients*, NeurIPS 2019), on
    which DLG and iDLG report pixel-exact reconstructions: conv(C→12, 5, stride 2), conv(12→12,
    5, stride 2), conv(12→12, 5) (padding 2), each followed by a sigmoid, and a linear head;
    every weight and bias uniform in [-0.5, 0.5], as that code initialises them. 6,738
    parameters + the head on 1x28x28.

    :param activation: after each convolution: sigmoid (DLG's), relu, softplus or tanh
    """
    shape = check_input_shape("lenet-dlg", input_shape, image=True)
    num_classes = check_num_classes("lenet-dlg", num_classes)
    if activation not in ACTIVATIONS:
        raise ConfigError(
            f"model.activation must be one of {', '.join(ACTIVATIONS)}, got {activation!r}"
        )
    act = ACTIVATIONS[activation]
    side = chain(*(partial(conv_out, kernel=5, stride=s, padding=2) for s in (2, 2, 1)))
    h, w = spatial_out("lenet-dlg", shape, side)
    body = nn.Sequential(
        nn.Conv2d(shape[0], 12, 5, padding=2, stride=2),
        act(),
        nn.Conv2d(12, 12, 5, padding=2, stride=2),
        act(),
        nn.Conv2d(12, 12, 5, padding=2, stride=1),
        act(),
        nn.Flatten(),
    )
    model = SequentialModel(body, nn.Linear(12 * h * w, num_classes))
    for p in model.parameters():
        nn.init.uniform_(p, -0.5, 0.5)
    return model
