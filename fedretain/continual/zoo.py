"""``model=acgan``: FedCIL's ACGAN as a model of the zoo.

One module holding the class-conditional :class:`~fedretain.continual.acgan.Generator`
(parameters ``generator.*``, BatchNorm buffers ``generator.*``) and the
:class:`~fedretain.continual.acgan.Discriminator` (``discriminator.*``), whose ``forward`` is
the discriminator's auxiliary classifier: evaluation, FedAvg's averaging and every tool that
reads a model's logits work unchanged, and a plain ``algorithm=fedavg model=acgan`` trains
(and averages) the classifier alone. Generative replay (``replay=acgan``,
:mod:`fedretain.continual.replay`) and FedCIL train both halves, calling :meth:`ACGAN.generate`
and :meth:`ACGAN.discriminate` through
:func:`~fedretain.models.registry.functional_method`.

Odena, Olah & Shlens, *Conditional Image Synthesis with Auxiliary Classifier GANs*, ICML 2017,
arXiv:1610.09585; Qi, Zhao & Li, *Better Generative Replay for Continual Federated
Learning*, ICLR 2023, arXiv:2302.13001.

The model registers itself in :data:`fedretain.models.MODELS` when this module is imported
(the continual package sits above the model zoo, so the zoo cannot import it); the registry's
``model`` kind lists this module among its providers.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from fedretain.continual.acgan import Z_DIM, acgan
from fedretain.models.registry import MODELS

__all__ = ["ACGAN", "acgan_model"]


class ACGAN(nn.Module):
    """Generator + discriminator; ``forward(x)`` is the auxiliary classifier's logits."""

    # the forward never runs the generator: its BatchNorm does not stop the vectorised engine
    # (a replay, the only caller, keeps the generator's statistics per client)
    outside_forward = ("generator",)

    def __init__(self, generator: nn.Module, discriminator: nn.Module) -> None:
        super().__init__()
        self.generator = generator
        self.discriminator = discriminator

    @property
    def head(self) -> nn.Module:
        """The class head (the zoo's convention: ``forward(x) == head(features(x))``)."""
        return self.discriminator.head

    @property
    def z_dim(self) -> int:
        return int(self.generator.z_dim)

    def features(self, x: Tensor) -> Tensor:
        return self.discriminator.features(x)

    def forward(self, x: Tensor) -> Tensor:
        return self.discriminator.classify(x)

    def generate(self, z: Tensor) -> Tensor:
        """Images in [−1, 1] from generator inputs (one-hot label first)."""
        return self.generator(z)

    def discriminate(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Real/fake logits ``(B,)`` and class logits ``(B, C)`` of images in [0, 1]."""
        return self.discriminator(x)


def acgan_model(
    input_shape: Sequence[int],
    num_classes: int,
    z_dim: int = Z_DIM,
    width: int = 64,
    slope: float = 0.2,
) -> ACGAN:
    """FedCIL's ACGAN for square images ``(C, H, H)``; ``width`` 64 is the reference's.

    :param z_dim: length of the generator's noise input
    :param width: channel width of the generator and the discriminator (64: the reference's)
    :param slope: negative slope of the LeakyReLUs
    """
    generator, discriminator = acgan(
        input_shape, num_classes, z_dim=z_dim, width=width, slope=slope
    )
    return ACGAN(generator, discriminator)


if "acgan" not in MODELS:
    MODELS.add(
        "acgan",
        acgan_model,
        "FedCIL's ACGAN (generator + discriminator); forward is its auxiliary classifier",
    )
