"""A vision transformer (Dosovitskiy et al., *An Image is Worth 16x16 Words*, ICLR 2021), with
pre-trained weights a user points to: FedReg's fine-tuned transformer on CIFAR-100 (Table 3).

The parameters are named as timm's ``VisionTransformer`` names them (``cls_token``,
``pos_embed``, ``patch_embed.proj``, ``blocks.N.norm1``, ``blocks.N.attn.qkv``,
``blocks.N.attn.proj``, ``blocks.N.norm2``, ``blocks.N.mlp.fc1``, ``blocks.N.mlp.fc2``,
``norm``, ``head``), so a state dict saved from a timm ViT of the same shape (``vit_base_
patch16_224``: the defaults here) loads as it is: ``model.weights=FILE`` (a ``.safetensors``
file, or a file ``torch.save`` wrote: a state dict, or a dict holding one under ``state_dict``
or ``model``). A head of another number of classes is left at its new initialisation (the
usual fine-tuning); position embeddings for another grid are resampled (bicubic, the class
token's kept), as timm does; any other mismatch is a ConfigError naming the keys. Nothing is
downloaded.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedretain.errors import ConfigError
from fedretain.models._common import ZooModel, check_input_shape, check_int, check_num_classes


class Attention(nn.Module):
    """Multi-head self-attention: one ``qkv`` projection, softmax(q kᵀ/√d) v, ``proj``."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        return self.proj((attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, d))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm1(x)), then x + mlp(norm2(x))."""

    def __init__(self, dim: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, hidden)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, channels: int, dim: int, patch: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(channels, dim, patch, stride=patch)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class ViT(ZooModel):
    """Patches (and the class token) with position embeddings, ``blocks``, ``norm``; the
    features are the class token's; inputs resized to ``size`` first when they differ."""

    def __init__(
        self,
        channels: int,
        size: int,
        patch: int,
        dim: int,
        depth: int,
        heads: int,
        hidden: int,
        num_classes: int,
    ) -> None:
        super().__init__()
        self.size = size
        self.patch_embed = PatchEmbed(channels, dim, patch)
        grid = size // patch
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.randn(1, grid * grid + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[Block(dim, heads, hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def features(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.size or x.shape[-2] != self.size:
            x = F.interpolate(x, size=(self.size, self.size), mode="bilinear", align_corners=False)
        x = self.patch_embed(x)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.norm(self.blocks(x))[:, 0]


def read_weights(path: Path) -> dict[str, Tensor]:
    """A state dict from ``path``: safetensors, or what ``torch.save`` wrote (tensors only)."""
    if not path.is_file():
        raise ConfigError(f"model.weights={path}: no such file; give a .safetensors or torch file")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:
        raise ConfigError(f"model.weights={path} cannot be read as weights: {e}") from None
    for key in ("state_dict", "model"):
        if isinstance(state, dict) and isinstance(state.get(key), dict):
            state = state[key]
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ConfigError(f"model.weights={path} holds no state dict of tensors")
    return state


def resample_pos_embed(pos: Tensor, tokens: int) -> Tensor:
    """Position embeddings (1, 1 + g², D) resampled to (1, tokens, D): the grid bicubically."""
    cls, grid = pos[:, :1], pos[:, 1:]
    old, new = math.isqrt(grid.shape[1]), math.isqrt(tokens - 1)
    grid = grid.reshape(1, old, old, -1).permute(0, 3, 1, 2)
    grid = F.interpolate(grid, size=(new, new), mode="bicubic", align_corners=False)
    return torch.cat([cls, grid.permute(0, 2, 3, 1).reshape(1, new * new, -1)], dim=1)


def load_weights(model: ViT, path: Path) -> None:
    """``path``'s weights into ``model`` (see the module's docstring)."""
    state = read_weights(path)
    own = model.state_dict()
    pos, want = state.get("pos_embed"), own["pos_embed"]
    if pos is not None and pos.shape != want.shape and pos.shape[-1] == want.shape[-1]:
        state["pos_embed"] = resample_pos_embed(pos, want.shape[1])
    head = {
        k for k in ("head.weight", "head.bias") if k in state and state[k].shape != own[k].shape
    }
    wrong = [
        f"{k} {tuple(state[k].shape)} (the model's: {tuple(own[k].shape)})"
        for k in sorted(set(state) & set(own) - head)
        if state[k].shape != own[k].shape
    ]
    missing = sorted(set(own) - set(state) - {"head.weight", "head.bias"})
    if wrong or missing:
        detail = "; ".join(
            ([f"other shapes: {', '.join(wrong[:4])}"] if wrong else [])
            + ([f"missing: {', '.join(missing[:4])}"] if missing else [])
        )
        raise ConfigError(
            f"model.weights={path} does not fit this ViT ({detail}); set model.dim, depth, "
            "heads, mlp_ratio and patch to the pre-trained model's"
        )
    keep = {k: v for k, v in state.items() if k in own and k not in head}
    with torch.no_grad():
        for k, v in keep.items():
            own[k].copy_(v.to(own[k].dtype))


def vit(
    input_shape: tuple[int, ...],
    num_classes: int,
    patch: int = 16,
    dim: int = 768,
    depth: int = 12,
    heads: int = 12,
    mlp_ratio: int = 4,
    size: int = 224,
    weights: str = "",
) -> ViT:
    """A ViT: the defaults are ViT-B/16 at 224x224 (86,567,656 parameters with 1,000 classes,
    as timm's ``vit_base_patch16_224``); inputs of another side are resized to ``size``
    (bilinear) inside the model.

    :param patch: side of the square patches (``size`` must be a multiple)
    :param dim: width of the tokens
    :param depth: transformer blocks
    :param heads: attention heads (must divide dim)
    :param mlp_ratio: the MLP's hidden width over dim
    :param size: the side the inputs are resized to
    :param weights: a .safetensors or torch file of pre-trained weights (timm's names); empty:
        none (random initialisation)
    """
    name = "vit"
    shape = check_input_shape(name, input_shape, image=True)
    num_classes = check_num_classes(name, num_classes)
    patch, dim, depth = (
        check_int(name, k, v) for k, v in (("patch", patch), ("dim", dim), ("depth", depth))
    )
    heads, mlp_ratio, size = (
        check_int(name, k, v)
        for k, v in (("heads", heads), ("mlp_ratio", mlp_ratio), ("size", size))
    )
    if size % patch or dim % heads:
        raise ConfigError(
            f"model 'vit': size={size} must be a multiple of patch={patch} and dim={dim} of "
            f"heads={heads}"
        )
    model = ViT(shape[0], size, patch, dim, depth, heads, mlp_ratio * dim, num_classes)
    if weights:
        load_weights(model, Path(weights).expanduser())
    return model
