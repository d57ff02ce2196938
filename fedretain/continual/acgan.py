"""The ACGAN that FedCIL uses for generative replay: a class-conditional generator, and a
discriminator with a real/fake ("source") head and an auxiliary classifier head.

Odena, Olah & Shlens, *Conditional Image Synthesis with Auxiliary Classifier GANs*, ICML 2017,
arXiv:1610.09585; as used by FedCIL (Qi, Zhao & Li, *Better Generative Replay for Continual
Federated Learning*, ICLR 2023, arXiv:2302.13001, §4.1), whose reference code is
github.com/daiqing98/FedCIL, ``FLAlgorithms/generator/gan.py`` (``Generator``, ``Critic``)
and ``model.py`` (losses, noise). The auxiliary head is the classifier whose accuracy FedCIL
reports (:meth:`Discriminator.classify`).

Architecture (``w = width``, 64 in the reference; ``C`` image channels):

- :class:`Generator`: ``z`` (``z_dim``, 110 by default; its first ``num_classes`` entries are
  the one-hot label, the rest N(0, 1) noise, see :func:`label_onehot_noise`) → Linear to
  ``8w x 4 x 4`` → BN, ReLU → ConvTranspose(8w→4w), (4w→2w), (2w→w), each kernel 4 stride 2
  padding 1 and followed by BN, ReLU → ConvTranspose(w→C, kernel 3, stride 1, padding 1) →
  tanh: a 32x32 image in [−1, 1].
- :class:`Discriminator`: Conv(C→w), (w→2w), (2w→4w), each kernel 4 stride 2 padding 1 and
  followed by LeakyReLU → flatten → ``source`` Linear(·, 1) (real/fake logit) and ``head``
  Linear(·, num_classes) (class logits).

Choices and differences from the reference:

- **28x28 images** (MNIST, EMNIST). The reference runs its MNIST/EMNIST models with
  ``image_size=32`` (``serverpFedCL.py``); its generator started from ``image_size // 8``
  would give 24x24 images from 28. Here the generator always starts from
  ``ceil(image_size / 8)`` (4 for 28 and 32), produces ``8 * ceil(image_size / 8)`` pixels a
  side (32) and center-crops to ``image_size``: for 28 it drops a 2-pixel border, which on
  MNIST/EMNIST is background (the characters sit in the central 20x20). The discriminator
  takes 28x28 directly (28 → 14 → 7 → 3, a 3x3x4w feature map, as the reference's
  ``(image_size // 8) ** 2`` formula gives).
- **Pixel range**. The generator outputs tanh values in [−1, 1] as in the reference;
  fedretain's images are in [0, 1] (:func:`fedretain.data.base.as_float`), and so is what the
  discriminator (and its classifier) is given: map generated images with :func:`to_unit`
  before the discriminator. :func:`sample` returns [0, 1] images.
- **LeakyReLU slope** 0.2 (the ACGAN/DCGAN value) by default; the reference's
  ``F.leaky_relu`` uses PyTorch's default 0.01: pass ``slope=0.01`` for it.
- **Losses** on logits (``binary_cross_entropy_with_logits``, ``cross_entropy``, mean over the
  batch) where the reference applies sigmoid + ``BCELoss`` and log-softmax + ``NLLLoss``: the
  same values, computed stably. Every term has weight 1, as in the reference.
- **Initialisation** as the reference's ``gaussian_intiailize``: every convolution and linear
  weight N(0, 0.02²), biases 0, BatchNorm weight 1 and bias 0 (under ``torch.manual_seed``).
- The reference's CIFAR-10 models (``Generator_CIFAR``, ``Critic_CIFAR``: a deeper critic
  with dropout) are not reproduced; the same architecture is used for 3-channel images.
- Optimiser: Adam with :data:`ADAM_BETAS` ``(0.5, 0.99)``, learning rate :data:`ADAM_LR`
  ``1e-4`` and weight decay :data:`ADAM_WEIGHT_DECAY` ``1e-5`` (the reference's ``main.py``
  defaults; its CIFAR-10 runs use betas (0.5, 0.999) and learning rate 2e-4), see :func:`adam`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Integral

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedretain.errors import ConfigError, DataError

__all__ = [
    "ADAM_BETAS",
    "ADAM_LR",
    "ADAM_WEIGHT_DECAY",
    "Z_DIM",
    "Discriminator",
    "Generator",
    "acgan",
    "adam",
    "discriminator_loss",
    "from_unit",
    "generator_loss",
    "label_onehot_noise",
    "sample",
    "to_unit",
]

ADAM_BETAS: tuple[float, float] = (0.5, 0.99)
"""Adam's (beta1, beta2) for both networks: the reference's ``--beta1 0.5 --beta2 0.99``."""

ADAM_LR: float = 1e-4
"""Adam's learning rate: FedCIL §5.3 ("The Adam optimizer is used with the learning rate 1e-4")."""

ADAM_WEIGHT_DECAY: float = 1e-5
"""Adam's weight decay: the reference's ``--weight-decay 1e-05``."""

Z_DIM: int = 110
"""The generator's input size: the reference's ``--generator-z-size 110`` (100 + 10 classes on
MNIST; it uses 126 = 100 + 26 on EMNIST)."""

_INIT_STD = 0.02


def _check_int(key: str, value: object, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < lo:
        raise ConfigError(f"acgan: {key} must be an integer >= {lo}, got {value!r}")
    return int(value)


def _init_weights(module: nn.Module) -> None:
    """The reference's initialisation: conv/linear weights N(0, 0.02²), biases 0, BN (1, 0)."""
    for m in module.modules():
        if isinstance(m, nn.Conv2d | nn.ConvTranspose2d | nn.Linear):
            nn.init.normal_(m.weight, 0.0, _INIT_STD)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)


def to_unit(x: Tensor) -> Tensor:
    """Generator output in [−1, 1] → images in [0, 1] (fedretain's pixel range)."""
    return (x + 1.0) * 0.5


def from_unit(x: Tensor) -> Tensor:
    """Images in [0, 1] → [−1, 1] (the generator's tanh range)."""
    return x * 2.0 - 1.0


# --------------------------------------------------------------------------------------------
# the networks


class Generator(nn.Module):
    """Class-conditional generator: ``forward(z)`` maps ``(B, z_dim)`` inputs (one-hot label
    first, see :func:`label_onehot_noise`) to ``(B, channels, image_size, image_size)``
    images in [−1, 1]. See the module docstring for the layers and the 28x28 crop."""

    def __init__(
        self,
        num_classes: int,
        z_dim: int = Z_DIM,
        channels: int = 1,
        image_size: int = 32,
        width: int = 64,
    ) -> None:
        super().__init__()
        self.num_classes = _check_int("num_classes", num_classes, 1)
        self.z_dim = _check_int("z_dim", z_dim, 1)
        self.channels = _check_int("channels", channels, 1)
        self.image_size = _check_int("image_size", image_size, 8)
        self.width = _check_int("width", width, 1)
        if self.z_dim < self.num_classes:
            raise ConfigError(
                f"acgan: z_dim={z_dim} cannot hold the one-hot label of {num_classes} classes; "
                f"use z_dim >= {num_classes} (the reference uses 100 + num_classes)"
            )
        self.base = math.ceil(self.image_size / 8)
        self.crop = (8 * self.base - self.image_size) // 2
        w = self.width
        self.fc = nn.Linear(self.z_dim, self.base * self.base * 8 * w)
        self.bn0 = nn.BatchNorm2d(8 * w)
        self.deconv1 = nn.ConvTranspose2d(8 * w, 4 * w, kernel_size=4, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(4 * w)
        self.deconv2 = nn.ConvTranspose2d(4 * w, 2 * w, kernel_size=4, stride=2, padding=1)
        self.bn2 = nn.BatchNorm2d(2 * w)
        self.deconv3 = nn.ConvTranspose2d(2 * w, w, kernel_size=4, stride=2, padding=1)
        self.bn3 = nn.BatchNorm2d(w)
        self.deconv4 = nn.ConvTranspose2d(w, self.channels, kernel_size=3, stride=1, padding=1)
        _init_weights(self)

    def forward(self, z: Tensor) -> Tensor:
        if z.dim() != 2 or z.shape[1] != self.z_dim:
            raise DataError(
                f"acgan generator expects inputs of shape (B, {self.z_dim}), got "
                f"{tuple(z.shape)}; build them with label_onehot_noise"
            )
        g = self.fc(z).view(z.shape[0], 8 * self.width, self.base, self.base)
        g = F.relu(self.bn0(g))
        g = F.relu(self.bn1(self.deconv1(g)))
        g = F.relu(self.bn2(self.deconv2(g)))
        g = F.relu(self.bn3(self.deconv3(g)))
        g = torch.tanh(self.deconv4(g))
        if self.crop:
            c, s = self.crop, self.image_size
            g = g[:, :, c : c + s, c : c + s]
        return g


def _conv_side(side: int) -> int:
    return (side + 2 * 1 - 4) // 2 + 1  # kernel 4, stride 2, padding 1


class Discriminator(nn.Module):
    """ACGAN discriminator: ``forward(x)`` returns ``(source_logit (B,), class_logits (B, C))``
    for images ``x`` of shape ``(B, channels, image_size, image_size)`` in [0, 1];
    ``classify(x) == head(features(x))`` is the auxiliary classifier (the model whose accuracy
    is reported). ``source`` is the real/fake head, ``head`` the class head."""

    def __init__(
        self,
        num_classes: int,
        channels: int = 1,
        image_size: int = 32,
        width: int = 64,
        slope: float = 0.2,
    ) -> None:
        super().__init__()
        self.num_classes = _check_int("num_classes", num_classes, 1)
        self.channels = _check_int("channels", channels, 1)
        self.image_size = _check_int("image_size", image_size, 8)
        self.width = _check_int("width", width, 1)
        if not isinstance(slope, int | float) or isinstance(slope, bool) or not slope >= 0:
            raise ConfigError(f"acgan: slope must be a number >= 0, got {slope!r}")
        self.slope = float(slope)
        w = self.width
        self.conv1 = nn.Conv2d(self.channels, w, kernel_size=4, stride=2, padding=1)
        self.conv2 = nn.Conv2d(w, 2 * w, kernel_size=4, stride=2, padding=1)
        self.conv3 = nn.Conv2d(2 * w, 4 * w, kernel_size=4, stride=2, padding=1)
        side = _conv_side(_conv_side(_conv_side(self.image_size)))
        self.num_features = 4 * w * side * side
        self.source = nn.Linear(self.num_features, 1)
        self.head = nn.Linear(self.num_features, self.num_classes)
        _init_weights(self)

    def features(self, x: Tensor) -> Tensor:
        """The flattened output of the convolutions, ``(B, num_features)``."""
        expected = (self.channels, self.image_size, self.image_size)
        if x.dim() != 4 or tuple(x.shape[1:]) != expected:
            raise DataError(
                f"acgan discriminator expects images of shape (B, {', '.join(map(str, expected))})"
                f", got {tuple(x.shape)}"
            )
        h = F.leaky_relu(self.conv1(x), self.slope)
        h = F.leaky_relu(self.conv2(h), self.slope)
        h = F.leaky_relu(self.conv3(h), self.slope)
        return h.flatten(1)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        h = self.features(x)
        return self.source(h).squeeze(1), self.head(h)

    def classify(self, x: Tensor) -> Tensor:
        """Class logits ``(B, num_classes)`` of the auxiliary classifier."""
        return self.head(self.features(x))


def acgan(
    input_shape: Sequence[int],
    num_classes: int,
    z_dim: int = Z_DIM,
    width: int = 64,
    slope: float = 0.2,
) -> tuple[Generator, Discriminator]:
    """The generator and discriminator for square images of ``input_shape`` ``(C, H, H)`` (a
    dataset's ``input_shape``)."""
    shape = tuple(input_shape)
    if len(shape) != 3 or shape[1] != shape[2]:
        raise ConfigError(
            f"acgan needs square images of shape (C, H, H), got input shape {shape}; use an "
            "image dataset (MNIST, EMNIST, CIFAR-10)"
        )
    channels, size = int(shape[0]), int(shape[1])
    return (
        Generator(num_classes, z_dim=z_dim, channels=channels, image_size=size, width=width),
        Discriminator(num_classes, channels=channels, image_size=size, width=width, slope=slope),
    )


def adam(
    module: nn.Module, lr: float = ADAM_LR, weight_decay: float = ADAM_WEIGHT_DECAY
) -> torch.optim.Adam:
    """Adam over ``module``'s parameters with the reference's betas :data:`ADAM_BETAS`."""
    return torch.optim.Adam(module.parameters(), lr=lr, betas=ADAM_BETAS, weight_decay=weight_decay)


# --------------------------------------------------------------------------------------------
# inputs and sampling


def _as_label_tensor(labels: Tensor | Sequence[int], num_classes: int) -> Tensor:
    y = torch.as_tensor(labels)
    if y.dim() != 1 or (y.numel() and (y.dtype.is_floating_point or y.dtype == torch.bool)):
        raise DataError(
            f"labels must be a 1-D sequence of integer class ids, got {tuple(y.shape)} {y.dtype}"
        )
    y = y.to(torch.int64)
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= num_classes):
        bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
        raise DataError(f"label {bad} is out of range for num_classes={num_classes}")
    return y


def label_onehot_noise(
    labels: Tensor | Sequence[int],
    z_dim: int,
    num_classes: int,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Generator inputs ``(B, z_dim)`` on the CPU: N(0, 1) noise drawn with ``generator`` (the
    global RNG when None) whose first ``num_classes`` entries are replaced by the one-hot
    ``labels``, as the reference's ``generate_noise_with_classes``."""
    z_dim = _check_int("z_dim", z_dim, 1)
    num_classes = _check_int("num_classes", num_classes, 1)
    if z_dim < num_classes:
        raise ConfigError(
            f"acgan: z_dim={z_dim} cannot hold the one-hot label of {num_classes} classes; "
            f"use z_dim >= {num_classes}"
        )
    y = _as_label_tensor(labels, num_classes).cpu()
    z = torch.randn(y.numel(), z_dim, generator=generator)
    z[:, :num_classes] = F.one_hot(y, num_classes).to(z.dtype)
    return z


def sample(
    generator: Generator, labels: Tensor | Sequence[int], seed: int = 0, unit: bool = True
) -> Tensor:
    """Images of ``labels`` from ``generator``, a function of ``(weights, labels, seed)``: the
    noise comes from a ``torch.Generator`` seeded with ``seed`` (the global RNG is untouched).
    No gradients; on the generator's device, in its precision; in [0, 1] (``unit=False``: the
    raw [−1, 1]).

    The generator is used in its current mode: in training mode BatchNorm normalises with the
    batch's statistics (and updates its running averages), as the reference's replay does;
    call ``generator.eval()`` first for images that do not depend on the rest of the batch.
    """
    rng = torch.Generator().manual_seed(int(seed))
    z = label_onehot_noise(labels, generator.z_dim, generator.num_classes, rng)
    weight = next(generator.parameters())
    with torch.no_grad():
        x = generator(z.to(weight.device, weight.dtype))
    return to_unit(x) if unit else x


# --------------------------------------------------------------------------------------------
# losses


def _bce(logit: Tensor, target: float) -> Tensor:
    logit = logit.reshape(-1)
    return F.binary_cross_entropy_with_logits(logit, torch.full_like(logit, target))


def discriminator_loss(
    d_real_logit: Tensor,
    aux_real: Tensor,
    y_real: Tensor,
    d_fake_logit: Tensor,
    aux_fake: Tensor,
    y_fake: Tensor,
) -> Tensor:
    """ACGAN's discriminator loss (FedCIL eqs. 4-6; the reference's ``_c_loss``):
    ``BCE(d_real, 1) + CE(aux_real, y_real) + BCE(d_fake, 0) + CE(aux_fake, y_fake)``.

    ``d_*_logit``: real/fake logits ``(B,)`` or ``(B, 1)``; ``aux_*``: class logits
    ``(B, C)``; ``y_real`` the true labels, ``y_fake`` the labels the fakes were generated
    for. BCE with logits and CE, each a mean over its batch; all weights 1. Compute the fake
    logits on detached generator output so that only the discriminator is trained.
    """
    return (
        _bce(d_real_logit, 1.0)
        + F.cross_entropy(aux_real, y_real)
        + _bce(d_fake_logit, 0.0)
        + F.cross_entropy(aux_fake, y_fake)
    )


def generator_loss(d_fake_logit: Tensor, aux_fake: Tensor, c: Tensor) -> Tensor:
    """ACGAN's generator loss (FedCIL eqs. 1-3; the reference's ``_g_loss``):
    ``BCE(d_fake, 1) + CE(aux_fake, c)``, the non-saturating GAN loss plus the auxiliary
    classification of the fakes as their conditioning labels ``c``; means over the batch,
    weights 1."""
    return _bce(d_fake_logit, 1.0) + F.cross_entropy(aux_fake, c)
