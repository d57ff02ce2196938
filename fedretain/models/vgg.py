"""VGG-11 for small images (the CIFAR variant: conv stack, then a single linear head)."""

from __future__ import annotations

from torch import Tensor, nn

from fedretain.models._common import (
    ZooModel,
    check_input_shape,
    check_norm,
    check_num_classes,
    make_norm,
    pool_out,
)

VGG11 = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


class VGG(ZooModel):
    """Conv stack ``body``, global average pool, ``head``."""

    def __init__(self, body: nn.Sequential, head: nn.Linear) -> None:
        super().__init__()
        self.body = body
        self.head = head

    def features(self, x: Tensor) -> Tensor:
        return self.body(x).mean(dim=(-2, -1))


def vgg11(
    input_shape: tuple[int, ...],
    num_classes: int,
    norm: str = "group",
    groups: int = 2,
) -> VGG:
    """VGG-11 (configuration "A"): [64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M].

    Each 3x3 convolution (padding 1, with bias) is followed by the normalisation chosen by
    ``norm`` (``group``: GroupNorm(groups, channels); ``batch``: BatchNorm2d; ``none``) and a
    ReLU. Max-pools that would take the spatial size below 1 are dropped, so inputs smaller
    than 32x32 work (28x28 keeps four pools, 8x8 three); the conv stack is followed by a global
    average pool (the identity on the 1x1 map of a 32x32 input, so on CIFAR this is exactly the
    usual "flatten 512 → linear" CIFAR classifier) and the linear head; 9,231,114 parameters on
    3x32x32 with 10 classes and group or batch norm. Sources: Simonyan & Zisserman, *Very Deep
    Convolutional Networks for Large-Scale Image Recognition*, ICLR 2015; the CIFAR variant as
    in github.com/kuangliu/pytorch-cifar ``models/vgg.py``.

    :param norm: normalisation after each convolution: group (GroupNorm), batch (BatchNorm) or none
    :param groups: groups of each GroupNorm (norm=group)
    """
    shape = check_input_shape("vgg11", input_shape, image=True)
    num_classes = check_num_classes("vgg11", num_classes)
    channels = [v for v in VGG11 if isinstance(v, int)]
    norm, groups = check_norm("vgg11", norm, groups, channels)
    layers: list[nn.Module] = []
    c, h, w = shape
    for v in VGG11:
        if v == "M":
            if min(h, w) >= 2:
                layers.append(nn.MaxPool2d(2))
                h, w = pool_out(h), pool_out(w)
        else:
            assert isinstance(v, int)
            layers += [nn.Conv2d(c, v, 3, padding=1), make_norm(norm, groups, v), nn.ReLU()]
            c = v
    return VGG(nn.Sequential(*layers), nn.Linear(c, num_classes))
