"""DenseNet-121 (Huang, Liu, van der Maaten, Weinberger, *Densely Connected Convolutional
Networks*, CVPR 2017, Table 1): FedReg's model for the COVID-19 CT images (Table 3)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from fedretain.models._common import (
    ZooModel,
    chain,
    check_choice,
    check_input_shape,
    check_norm,
    check_num_classes,
    conv_out,
    make_norm,
    spatial_out,
)

GROWTH = 32  # k: the channels each layer adds
BLOCKS_121 = (6, 12, 24, 16)  # layers per dense block
STEM = 64  # channels of the first convolution
BOTTLENECK = 4  # a layer's 1x1 convolution gives BOTTLENECK * GROWTH channels


class DenseLayer(nn.Module):
    """norm-ReLU-conv1x1 (4k) -norm-ReLU-conv3x3 (k); its k channels join its input's."""

    def __init__(self, channels: int, norm: str, groups: int) -> None:
        super().__init__()
        width = BOTTLENECK * GROWTH
        self.body = nn.Sequential(
            make_norm(norm, groups, channels),
            nn.ReLU(),
            nn.Conv2d(channels, width, 1, bias=False),
            make_norm(norm, groups, width),
            nn.ReLU(),
            nn.Conv2d(width, GROWTH, 3, padding=1, bias=False),
        )

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([x, self.body(x)], dim=1)


def transition(channels: int, norm: str, groups: int) -> nn.Sequential:
    """norm-ReLU-conv1x1 halving the channels, then 2x2 average pooling."""
    return nn.Sequential(
        make_norm(norm, groups, channels),
        nn.ReLU(),
        nn.Conv2d(channels, channels // 2, 1, bias=False),
        nn.AvgPool2d(2),
    )


class DenseNet(ZooModel):
    """``body`` (stem, dense blocks and transitions, a last norm and ReLU), global average
    pool (``pool="avg"``) or the feature map flattened, ``head``."""

    def __init__(self, body: nn.Sequential, head: nn.Linear, pool: str) -> None:
        super().__init__()
        self.body = body
        self.head = head
        self.pool = pool

    def features(self, x: Tensor) -> Tensor:
        out = self.body(x)
        return out.mean(dim=(-2, -1)) if self.pool == "avg" else out.flatten(1)


def densenet121(
    input_shape: tuple[int, ...],
    num_classes: int,
    norm: str = "batch",
    groups: int = 32,
    pool: str = "avg",
) -> DenseNet:
    """DenseNet-121 for ImageNet-sized inputs: conv 7x7/2 (64) -norm-ReLU- max-pool 3x3/2,
    dense blocks of 6, 12, 24 and 16 layers (growth 32, bottleneck 128) with transitions
    halving the channels and the side between them, a last norm and ReLU (1,024 channels),
    global average pool and the linear head: 7,978,856 parameters with 1,000 classes (as the
    paper's Table 1 and torchvision's ``densenet121``), 6,955,906 with 2. Convolutions have no
    bias. Inputs of any side >= 29 (224x224 in the paper; 1-channel CT slices work too).
    FedReg's CT model (its code's ``densenet_norm_``) is ``norm=group groups=4 pool=flatten``:
    GroupNorm(4) throughout and the 1024x7x7 map flattened into Linear(50,176, 2), 7,054,210
    parameters on 3x224x224.

    :param norm: normalisation before each convolution: batch (BatchNorm, the paper's: runs on
        the sequential engine), group (GroupNorm, vectorisable) or none
    :param groups: groups of each GroupNorm (norm=group): must divide 32
    :param pool: avg (global average pool, the paper's) or flatten (the last feature map
        flattened into the head, FedReg's CT model)
    """
    name = "densenet121"
    shape = check_input_shape(name, input_shape, image=True)
    num_classes = check_num_classes(name, num_classes)
    norm, groups = check_norm(name, norm, groups, [GROWTH, STEM])
    pool = check_choice(name, "pool", pool, ("avg", "flatten"))
    side = chain(
        lambda n: conv_out(n, 7, 2, 3),
        lambda n: conv_out(n, 3, 2, 1),
        *[lambda n: conv_out(n, 2, 2)] * (len(BLOCKS_121) - 1),
    )
    h, w = spatial_out(name, shape, side)
    layers: list[nn.Module] = [
        nn.Conv2d(shape[0], STEM, 7, stride=2, padding=3, bias=False),
        make_norm(norm, groups, STEM),
        nn.ReLU(),
        nn.MaxPool2d(3, stride=2, padding=1),
    ]
    channels = STEM
    for i, count in enumerate(BLOCKS_121):
        for _ in range(count):
            layers.append(DenseLayer(channels, norm, groups))
            channels += GROWTH
        if i < len(BLOCKS_121) - 1:
            layers.append(transition(channels, norm, groups))
            channels //= 2
    layers += [make_norm(norm, groups, channels), nn.ReLU()]
    width = channels if pool == "avg" else channels * h * w
    model = DenseNet(nn.Sequential(*layers), nn.Linear(width, num_classes), pool)
    for m in model.modules():  # He initialisation of the convolutions, a zero bias of the head
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight)
    nn.init.zeros_(model.head.bias)
    return model
