"""Shared pieces of the model zoo: the base class, parameter checks, norm layers, size arithmetic.

Every zoo model is a :class:`ZooModel`: ``forward(x) = head(features(x))`` with ``head`` the final
``nn.Linear``, registered under the name ``head`` so that its parameters are always
``head.weight`` and ``head.bias`` (the last two entries of ``named_parameters()``).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

from torch import Tensor, nn

from fedretain.errors import ConfigError, unknown_choice

NORMS = ("group", "batch", "none")


class ZooModel(nn.Module):
    """Base class: ``forward(x) == head(features(x))``."""

    head: nn.Linear

    def features(self, x: Tensor) -> Tensor:
        """The penultimate representation, shape ``(B, head.in_features)``."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


class ProjectedModel(ZooModel):
    """A zoo model with MOON's projection head between its representation and its classifier.

    ``encoder`` (the zoo model with its head removed) -> ``projection`` =
    Linear(d, d)-ReLU-Linear(d, dim) -> ``head`` = Linear(dim, num_classes); ``features(x)`` is
    the projection output (MOON's ``z``). Li, He, Song, *Model-Contrastive Federated Learning*,
    CVPR 2021, arXiv:2103.16257, §3.2 (the official code's ``ModelFedCon``).
    """

    def __init__(self, encoder: ZooModel, dim: int, num_classes: int) -> None:
        super().__init__()
        d = encoder.head.in_features
        encoder.head = nn.Identity()  # type: ignore[assignment]  # encoder(x) == its features
        self.encoder = encoder
        self.projection = nn.Sequential(nn.Linear(d, d), nn.ReLU(), nn.Linear(d, dim))
        self.head = nn.Linear(dim, num_classes)

    def features(self, x: Tensor) -> Tensor:
        return self.projection(self.encoder.features(x))


# --------------------------------------------------------------------------- checks


def _as_int(value: object) -> int | None:
    """``value`` as an int when it is an integer (Python or NumPy/torch scalar), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None


def check_num_classes(model: str, num_classes: object) -> int:
    n = _as_int(num_classes)
    if n is None or n < 1:
        raise ConfigError(
            f"model '{model}': num_classes must be a positive integer, got {num_classes!r}"
        )
    return n


def check_input_shape(model: str, input_shape: object, image: bool) -> tuple[int, ...]:
    """``input_shape`` as a tuple of positive ints; ``(C, H, W)`` when ``image``."""
    try:
        dims = [_as_int(d) for d in input_shape]  # type: ignore[attr-defined]
    except TypeError:
        dims = []
    if not dims or any(d is None or d < 1 for d in dims):
        raise ConfigError(
            f"model '{model}': input_shape must be a non-empty tuple of positive integers, "
            f"got {input_shape!r}"
        )
    shape = tuple(d for d in dims if d is not None)
    if image and len(shape) != 3:
        raise ConfigError(
            f"model '{model}' needs image inputs of shape (C, H, W), got input shape {shape}; "
            "use 'mlp' for vector inputs"
        )
    return shape


def check_int(model: str, param: str, value: object, minimum: int = 1) -> int:
    n = _as_int(value)
    if n is None or n < minimum:
        raise ConfigError(
            f"model '{model}': {param} must be an integer >= {minimum}, got {value!r}"
        )
    return n


def check_choice(model: str, param: str, value: object, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ConfigError(f"model '{model}': " + unknown_choice(param, value, choices))
    return value


def check_norm(
    model: str, norm: object, groups: object, channels: Sequence[int]
) -> tuple[str, int]:
    """Validated ``(norm, groups)``; for GroupNorm ``groups`` must divide every channel count."""
    norm = check_choice(model, "norm", norm, NORMS)
    g = check_int(model, "groups", groups)
    if norm == "group":
        bad = sorted({c for c in channels if c % g})
        if bad:
            raise ConfigError(
                f"model '{model}': groups={g} does not divide the channel counts {bad}; "
                "choose a divisor of every channel count (e.g. 1, 2, 4)"
            )
    return norm, g


def make_norm(norm: str, groups: int, channels: int) -> nn.Module:
    """GroupNorm(groups, channels) / BatchNorm2d(channels) / Identity."""
    if norm == "group":
        return nn.GroupNorm(groups, channels)
    if norm == "batch":
        return nn.BatchNorm2d(channels)
    return nn.Identity()


# --------------------------------------------------------------------------- sizes


def conv_out(n: int, kernel: int, stride: int = 1, padding: int = 0) -> int:
    """Output side of a convolution (or floor-mode pooling) on a side of ``n``."""
    return (n + 2 * padding - kernel) // stride + 1


def pool_out(n: int) -> int:
    """Output side of ``MaxPool2d(2)``."""
    return conv_out(n, 2, 2)


def spatial_out(
    model: str,
    input_shape: tuple[int, ...],
    side: Callable[[int], int],
) -> tuple[int, int]:
    """Apply ``side`` (the side-length map of the model's feature extractor) to H and W.

    Raises ConfigError naming the model, the input shape, the smallest square input that fits
    and 'mlp' when the result is empty.
    """
    h, w = side(input_shape[1]), side(input_shape[2])
    if h >= 1 and w >= 1:
        return h, w
    least = next((n for n in range(1, 4097) if side(n) >= 1), None)
    need = f" (needs at least {least}x{least})" if least else ""
    raise ConfigError(
        f"input shape {tuple(input_shape)} is too small for model '{model}'{need}; "
        "use a model that fits small inputs, e.g. 'mlp'"
    )


def chain(*maps: Callable[[int], int]) -> Callable[[int], int]:
    """Compose side-length maps left to right; any empty side stays empty."""

    def side(n: int) -> int:
        for f in maps:
            if n < 1:
                return n
            n = f(n)
        return n

    return side
