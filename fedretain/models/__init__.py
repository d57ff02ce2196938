"""The model zoo: ``build_model(name, input_shape, num_classes, **params)``.

Every model maps ``x`` to logits ``(B, num_classes)``, exposes ``features(x) -> (B, d)`` and its
final linear layer ``head`` (parameters ``head.weight`` / ``head.bias``) with
``forward(x) == head(features(x))``; ResNets also expose their stages as ``blocks`` (stem first)
and ``pool`` with ``features(x) == pool(blocks(x))``. All work under
``torch.func.functional_call``, ``grad`` and ``vmap`` (BatchNorm variants: not under ``vmap``).
Every model also takes ``projection=P``: MOON's projection head between ``features`` and a new
``head`` (then ``features(x)`` is the projection output; see ``ProjectedModel``).
"""

from fedretain.models.registry import (
    MODELS,
    build_model,
    functional_method,
    model_params,
)

__all__ = ["MODELS", "build_model", "functional_method", "model_params"]
