"""CIFAR ResNets with a choice of normalisation: ResNet-18 (FedMLB / TCE) and ResNet-20 (GradMA).

Both expose ``blocks`` (an ``nn.ModuleList``: the stem, then one entry per stage) and
``features(x) = pool(blocks(x))`` with ``pool`` the global average pool, so that algorithms can
run hybrid paths stage by stage (FedMLB's B0..B4).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from fedretain.models._common import (
    ZooModel,
    check_choice,
    check_input_shape,
    check_norm,
    check_num_classes,
    make_norm,
)


class ResNet(ZooModel):
    """``blocks`` (stem first), global average ``pool``, ``head``."""

    def __init__(self, blocks: list[nn.Module], head: nn.Linear) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.head = head

    def pool(self, h: Tensor) -> Tensor:
        """The last stage's map ``(B, C, H, W)`` to the representation ``(B, C)``."""
        return h.mean(dim=(-2, -1))

    def features(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return self.pool(x)


def _conv3x3(cin: int, cout: int, stride: int, bias: bool) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=bias)


class Stem(nn.Module):
    """3x3 conv, norm, ReLU (no max-pool: the CIFAR stem)."""

    def __init__(self, cin: int, cout: int, norm: str, groups: int) -> None:
        super().__init__()
        self.conv = _conv3x3(cin, cout, 1, bias=norm == "none")
        self.norm = make_norm(norm, groups, cout)
        self.relu = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.relu(self.norm(self.conv(x)))


class PadShortcut(nn.Module):
    """He et al.'s option A: subsample by ``stride`` and zero-pad the new channels (no params)."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        self.pad = (cout - cin) // 2, cout - cin - (cout - cin) // 2

    def forward(self, x: Tensor) -> Tensor:
        x = x[..., :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, *self.pad))


class BasicBlock(nn.Module):
    """``relu(norm(conv(relu(norm(conv(x))))) + shortcut(x))``.

    The shortcut is the identity when shape is kept, else a 1x1 conv + norm (``shortcut="b"``,
    option B) or subsample + zero channel padding (``shortcut="a"``, option A).
    """

    def __init__(
        self, cin: int, cout: int, stride: int, norm: str, groups: int, shortcut: str = "b"
    ) -> None:
        super().__init__()
        bias = norm == "none"
        self.conv1 = _conv3x3(cin, cout, stride, bias)
        self.norm1 = make_norm(norm, groups, cout)
        self.relu1 = nn.ReLU()
        self.conv2 = _conv3x3(cout, cout, 1, bias)
        self.norm2 = make_norm(norm, groups, cout)
        self.relu2 = nn.ReLU()
        self.shortcut: nn.Module
        if stride == 1 and cin == cout:
            self.shortcut = nn.Identity()
        elif shortcut == "a":
            self.shortcut = PadShortcut(cin, cout, stride)
        else:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=bias),
                make_norm(norm, groups, cout),
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu1(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.relu2(out + self.shortcut(x))


def _stage(
    cin: int, cout: int, n: int, stride: int, norm: str, groups: int, shortcut: str
) -> nn.Sequential:
    return nn.Sequential(
        *[
            BasicBlock(
                cin if i == 0 else cout, cout, stride if i == 0 else 1, norm, groups, shortcut
            )
            for i in range(n)
        ]
    )


def resnet18(
    input_shape: tuple[int, ...],
    num_classes: int,
    norm: str = "group",
    groups: int = 2,
) -> ResNet:
    """CIFAR ResNet-18: 3x3 stem conv (64, no max-pool), BasicBlock stages [2, 2, 2, 2] of
    64/128/256/512 channels (stride 2 from stage 2, 1x1 conv + norm projection shortcuts),
    global average pool, linear head.

    ``norm``: ``group`` (default, GroupNorm with ``groups`` groups, 2 as in FedMLB and TCE),
    ``batch`` or ``none`` (convs then get biases). ``blocks`` = [stem, stage1, ..., stage4]
    (FedMLB's B0..B4). 11,173,962 parameters on 3x32x32 with 10 classes and group or batch
    norm. Works at any input size (global pooling). Sources: He et al., *Deep Residual Learning
    for Image Recognition*, CVPR 2016; CIFAR variant as in github.com/kuangliu/pytorch-cifar;
    Kim et al., *Multi-Level Branched Regularization for Federated Learning* (FedMLB), ICML
    2022; Lee et al., TCE.

    :param norm: normalisation after each convolution: group (GroupNorm), batch (BatchNorm) or none
    :param groups: groups of each GroupNorm (norm=group)
    """
    shape = check_input_shape("resnet18", input_shape, image=True)
    num_classes = check_num_classes("resnet18", num_classes)
    widths = (64, 128, 256, 512)
    norm, groups = check_norm("resnet18", norm, groups, widths)
    blocks: list[nn.Module] = [Stem(shape[0], 64, norm, groups)]
    cin = 64
    for i, cout in enumerate(widths):
        blocks.append(_stage(cin, cout, 2, 1 if i == 0 else 2, norm, groups, "b"))
        cin = cout
    return ResNet(blocks, nn.Linear(cin, num_classes))


def resnet20(
    input_shape: tuple[int, ...],
    num_classes: int,
    norm: str = "group",
    groups: int = 2,
    shortcut: str = "a",
) -> ResNet:
    """CIFAR ResNet-20 (He et al. 2016, section 4.2): 3x3 stem conv (16), three stages of three
    BasicBlocks with 16/32/64 channels (stride 2 at stages 2 and 3), global average pool,
    linear head.

    ``shortcut``: ``a`` (default, the paper's CIFAR choice: identity, subsampled and
    zero-padded where the shape changes, parameter-free) or ``b`` (1x1 conv + norm projection).
    ``norm``: ``group`` (default, ``groups`` groups), ``batch`` or ``none``. Convs and the head
    use He (Kaiming normal) initialisation as in github.com/akamaster/pytorch_resnet_cifar10.
    ``blocks`` = [stem, stage1, stage2, stage3]. 269,722 parameters on 3x32x32 with 10 classes
    (shortcut a, group or batch norm). Works at any input size (global pooling), e.g. 64x64
    Tiny-ImageNet as in GradMA (Luo et al., CVPR 2023). Source: He et al., *Deep Residual
    Learning for Image Recognition*, CVPR 2016.

    :param norm: normalisation after each convolution: group (GroupNorm), batch (BatchNorm) or none
    :param groups: groups of each GroupNorm (norm=group)
    :param shortcut: a: parameter-free identity shortcuts, zero-padded (the paper's); b: 1x1 conv
        projections
    """
    shape = check_input_shape("resnet20", input_shape, image=True)
    num_classes = check_num_classes("resnet20", num_classes)
    widths = (16, 32, 64)
    norm, groups = check_norm("resnet20", norm, groups, widths)
    shortcut = check_choice("resnet20", "shortcut", shortcut, ("a", "b"))
    blocks: list[nn.Module] = [Stem(shape[0], 16, norm, groups)]
    cin = 16
    for i, cout in enumerate(widths):
        blocks.append(_stage(cin, cout, 3, 1 if i == 0 else 2, norm, groups, shortcut))
        cin = cout
    model = ResNet(blocks, nn.Linear(cin, num_classes))
    for m in model.modules():
        if isinstance(m, nn.Conv2d | nn.Linear):
            nn.init.kaiming_normal_(m.weight)
    return model
