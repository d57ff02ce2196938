"""``model=vit model.weights=FILE``: pre-trained weights the tests write (safetensors and torch
files, timm's parameter names) load as they are; a head of another class count stays at its
initialisation; position embeddings for another grid are resampled; a file that does not fit
says which keys and how to fix it."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from fedretain.errors import ConfigError
from fedretain.models import build_model

SMALL = {"patch": 8, "dim": 32, "depth": 2, "heads": 4, "size": 32}
CIFAR = (3, 32, 32)


def _pretrained(num_classes: int = 10, **over: object) -> torch.nn.Module:
    torch.manual_seed(1)
    model = build_model("vit", CIFAR, num_classes, **{**SMALL, **over})
    with torch.no_grad():  # the class token starts at zero: make every tensor informative
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_safetensors_and_torch_files_load_as_they_are(tmp_path):
    source = _pretrained()
    save_file(_state(source), str(tmp_path / "w.safetensors"))
    torch.save({"state_dict": _state(source)}, tmp_path / "w.pt")
    x = torch.rand(2, *CIFAR)
    for name in ("w.safetensors", "w.pt"):
        torch.manual_seed(2)  # another initialisation, replaced by the file's
        model = build_model("vit", CIFAR, 10, **SMALL, weights=str(tmp_path / name))
        for key, value in source.state_dict().items():
            assert torch.equal(model.state_dict()[key], value), (name, key)
        torch.testing.assert_close(model(x), source(x), rtol=0, atol=0)


def test_a_head_of_another_class_count_stays_at_its_initialisation(tmp_path):
    save_file(_state(_pretrained(num_classes=1000)), str(tmp_path / "w.safetensors"))
    torch.manual_seed(3)
    fresh = build_model("vit", CIFAR, 100, **SMALL)
    torch.manual_seed(3)
    tuned = build_model("vit", CIFAR, 100, **SMALL, weights=str(tmp_path / "w.safetensors"))
    assert torch.equal(tuned.head.weight, fresh.head.weight)
    assert not torch.equal(tuned.blocks[0].attn.qkv.weight, fresh.blocks[0].attn.qkv.weight)


def test_position_embeddings_of_another_grid_are_resampled(tmp_path):
    source = _pretrained(size=16)  # a 2x2 grid of patches
    save_file(_state(source), str(tmp_path / "w.safetensors"))
    model = build_model("vit", CIFAR, 10, **SMALL, weights=str(tmp_path / "w.safetensors"))
    assert model.pos_embed.shape == (1, 4 * 4 + 1, 32)  # 32 / 8: a 4x4 grid
    assert torch.equal(model.pos_embed[:, 0], source.pos_embed[:, 0])  # the class token's
    grid = model.pos_embed[0, 1:].reshape(4, 4, 32)
    corners = source.pos_embed[0, 1:].reshape(2, 2, 32)
    # bicubic upsampling keeps the grid's mean up to its overshoot
    assert torch.allclose(grid.mean(dim=(0, 1)), corners.mean(dim=(0, 1)), atol=0.05)


def test_weights_that_do_not_fit_are_refused_with_the_keys(tmp_path):
    save_file(_state(_pretrained(dim=64, heads=4)), str(tmp_path / "w.safetensors"))
    with pytest.raises(ConfigError, match=r"does not fit this ViT \(other shapes: .*set model"):
        build_model("vit", CIFAR, 10, **SMALL, weights=str(tmp_path / "w.safetensors"))
    partial = {k: v for k, v in _state(_pretrained()).items() if not k.startswith("blocks.1")}
    save_file(partial, str(tmp_path / "p.safetensors"))
    with pytest.raises(ConfigError, match=r"missing: blocks\.1\."):
        build_model("vit", CIFAR, 10, **SMALL, weights=str(tmp_path / "p.safetensors"))
    with pytest.raises(ConfigError, match="no such file"):
        build_model("vit", CIFAR, 10, **SMALL, weights=str(tmp_path / "none.pt"))
    (tmp_path / "junk.pt").write_bytes(b"not weights")
    with pytest.raises(ConfigError, match="cannot be read as weights"):
        build_model("vit", CIFAR, 10, **SMALL, weights=str(tmp_path / "junk.pt"))
    with pytest.raises(ConfigError, match="multiple of patch"):
        build_model("vit", CIFAR, 10, patch=5, size=32, dim=32, heads=4, depth=1)
