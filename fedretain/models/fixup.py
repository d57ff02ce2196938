"""FedReg's ResNet-9 with Fixup initialisation (no normalisation layers by default).

Architecture (github.com/Zoesgithub/FedReg, ``FedUtils/models/cifar10/resnet9.py``, built on
``fixup/cifar/models/fixup_resnet_cifar.py``)::

    prep    conv3x3(C→64)                      scalar bias, scale, scalar bias, ReLU
    layer1  conv3x3(64→128)   ReLU maxpool2    + 1 Fixup residual block (128)
    layer2  conv3x3(128→256)  ReLU maxpool2
    layer3  conv3x3(256→512)  ReLU maxpool2    + 1 Fixup residual block (512)
    global max pool (FedReg's MaxPool2d(4) on the 4x4 map of a 32x32 input), + scalar bias,
    linear head

Fixup (Zhang, Dauphin & Ma, *Fixup Initialization: Residual Learning Without Normalization*,
ICLR 2019): a scalar bias before each conv and activation and a scalar multiplier per residual
branch; the classification layer and the last conv of each residual branch start at zero; the
first conv of each branch is He-initialised (fan-out) and scaled by L^(-1/(2m-2)) with L = 2
residual branches of m = 2 layers, i.e. by 2^(-1/2); the convs outside the branches are
He-initialised (fan-out). Because the head starts at zero, at initialisation only the head
receives a gradient; every parameter gets one after a few SGD steps.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from fedretain.models._common import (
    ZooModel,
    chain,
    check_input_shape,
    check_norm,
    check_num_classes,
    make_norm,
    pool_out,
    spatial_out,
)


def _scalar(value: float) -> nn.Parameter:
    return nn.Parameter(torch.full((1,), value))


def _he_fan_out(conv: nn.Conv2d, gain: float = 1.0) -> None:
    k = conv.weight.shape[0] * math.prod(conv.weight.shape[2:])
    nn.init.normal_(conv.weight, mean=0.0, std=gain * math.sqrt(2.0 / k))


class ConvUnit(nn.Module):
    """conv3x3, then ReLU and an optional max-pool.

    Fixup (``norm="none"``): ``relu(conv(x + bias_a) * scale + bias_b)``; otherwise
    ``relu(norm(conv(x)))``.
    """

    def __init__(self, cin: int, cout: int, pool: bool, norm: str, groups: int) -> None:
        super().__init__()
        self.fixup = norm == "none"
        self.conv = nn.Conv2d(cin, cout, 3, padding=1, bias=False)
        self.norm = make_norm(norm, groups, cout)
        if self.fixup:
            self.bias_a = _scalar(0.0)
            self.scale = _scalar(1.0)
            self.bias_b = _scalar(0.0)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2) if pool else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        if self.fixup:
            out = self.conv(x + self.bias_a) * self.scale + self.bias_b
        else:
            out = self.norm(self.conv(x))
        return self.pool(self.relu(out))


class ResidualBlock(nn.Module):
    """Stride-1 BasicBlock ``relu(x + branch(x))``.

    Fixup: ``branch = conv2(relu(conv1(x + b1a) + b1b) + b2a) * scale + b2b``; otherwise
    ``branch = norm2(conv2(relu(norm1(conv1(x)))))``.
    """

    def __init__(self, channels: int, norm: str, groups: int) -> None:
        super().__init__()
        self.fixup = norm == "none"
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm1 = make_norm(norm, groups, channels)
        self.relu1 = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.norm2 = make_norm(norm, groups, channels)
        self.relu2 = nn.ReLU()
        if self.fixup:
            self.bias1a = _scalar(0.0)
            self.bias1b = _scalar(0.0)
            self.bias2a = _scalar(0.0)
            self.scale = _scalar(1.0)
            self.bias2b = _scalar(0.0)

    def forward(self, x: Tensor) -> Tensor:
        if self.fixup:
            out = self.relu1(self.conv1(x + self.bias1a) + self.bias1b)
            out = self.conv2(out + self.bias2a) * self.scale + self.bias2b
        else:
            out = self.norm2(self.conv2(self.relu1(self.norm1(self.conv1(x)))))
        return self.relu2(out + x)


class ResNet9(ZooModel):
    """``blocks`` = [prep, layer1, layer2, layer3]; ``features = pool(blocks(x))``."""

    def __init__(self, in_channels: int, num_classes: int, norm: str, groups: int) -> None:
        super().__init__()
        self.fixup = norm == "none"
        u = ConvUnit
        self.blocks = nn.ModuleList(
            [
                u(in_channels, 64, False, norm, groups),
                nn.Sequential(u(64, 128, True, norm, groups), ResidualBlock(128, norm, groups)),
                nn.Sequential(u(128, 256, True, norm, groups)),
                nn.Sequential(u(256, 512, True, norm, groups), ResidualBlock(512, norm, groups)),
            ]
        )
        if self.fixup:
            self.bias_out = _scalar(0.0)
        self.head = nn.Linear(512, num_classes)
        if self.fixup:
            self._fixup_init()

    def _fixup_init(self) -> None:
        residual = [m for m in self.modules() if isinstance(m, ResidualBlock)]
        num_branches, layers_per_branch = len(residual), 2
        branch_gain = num_branches ** (-1.0 / (2 * layers_per_branch - 2))
        for m in self.modules():
            if isinstance(m, ConvUnit):
                _he_fan_out(m.conv)
            elif isinstance(m, ResidualBlock):
                _he_fan_out(m.conv1, branch_gain)
                nn.init.zeros_(m.conv2.weight)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)

    def pool(self, h: Tensor) -> Tensor:
        """Global max pool (plus the Fixup scalar bias that FedReg adds before the head)."""
        out = h.amax(dim=(-2, -1))
        return out + self.bias_out if self.fixup else out

    def features(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return self.pool(x)


def resnet9(
    input_shape: tuple[int, ...],
    num_classes: int,
    norm: str = "none",
    groups: int = 2,
) -> ResNet9:
    """FedReg's ResNet-9 (Xu et al., *Acceleration of Federated Learning with Alleviated
    Forgetting in Local Training*, ICLR 2022; github.com/Zoesgithub/FedReg) with Fixup
    initialisation (Zhang et al., ICLR 2019).

    ``norm`` defaults to ``none``, which is FedReg's model: Fixup scalar biases/multipliers,
    zero-initialised head and last residual convs, no normalisation layers. ``group``
    (GroupNorm with ``groups`` groups) or ``batch`` give the same topology as a plain ResNet-9
    with a norm after every conv, PyTorch's default initialisation and no Fixup scalars.
    ``blocks`` = [prep, layer1, layer2, layer3]. 6,568,673 parameters on 3x32x32 with 10
    classes (Fixup). The global max pool replaces FedReg's MaxPool2d(4) (identical on 32x32),
    so inputs from 8x8 up work.

    :param norm: none (FedReg's Fixup ResNet-9), group (GroupNorm) or batch (BatchNorm) after every
        conv
    :param groups: groups of each GroupNorm (norm=group)
    """
    shape = check_input_shape("resnet9", input_shape, image=True)
    num_classes = check_num_classes("resnet9", num_classes)
    norm, groups = check_norm("resnet9", norm, groups, (64, 128, 256, 512))
    spatial_out("resnet9", shape, chain(pool_out, pool_out, pool_out))
    return ResNet9(shape[0], num_classes, norm, groups)
