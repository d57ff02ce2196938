"""Generator quality: the Fréchet distance on a cached feature network, and sample grids."""

from __future__ import annotations

import os

import numpy as np
import pytest
import scipy.linalg
import torch

from fedretain.continual import quality
from fedretain.continual.acgan import Generator
from fedretain.continual.quality import (
    FEATURE_DIM,
    FeatureExtractor,
    cache_path,
    feature_extractor,
    frechet_distance,
    save_sample_grid,
    train_feature_net,
)
from fedretain.data.base import Dataset
from fedretain.errors import DataError


def toy_dataset(n: int = 192, seed: int = 0, name: str = "toy") -> Dataset:
    """4 classes of 1x28x28 noise images, each with a bright square in its own quadrant."""
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % 4
    x = torch.randint(0, 60, (n, 1, 28, 28), generator=g, dtype=torch.uint8)
    for c in range(4):
        r, q = divmod(c, 2)
        x[y == c, :, 4 + 12 * r : 12 + 12 * r, 4 + 12 * q : 12 + 12 * q] = 220
    return Dataset(name, x, y, x, y, num_classes=4)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cache = tmp_path_factory.mktemp("features")
    dataset = toy_dataset()
    return dataset, cache, feature_extractor(dataset, cache)


def noisy(images: torch.Tensor, scale: float, seed: int = 1) -> torch.Tensor:
    x = images.float() / 255
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(seed))
    return (x + scale * noise).clamp(0, 1)


def test_extractor(setup):
    dataset, _, extractor = setup
    assert isinstance(extractor, FeatureExtractor) and not extractor.training
    extractor.train()
    assert not extractor.training  # never leaves evaluation mode
    assert extractor.num_features == FEATURE_DIM
    feats = extractor(dataset.x_train[:5])
    assert feats.shape == (5, FEATURE_DIM) and feats.dtype == torch.float64
    # uint8 images and the same images as floats in [0, 1] give the same features
    assert torch.allclose(feats, extractor(dataset.x_train[:5].float() / 255))
    assert all(not p.requires_grad for p in extractor.parameters())


def test_fd_of_a_set_with_itself_is_zero(setup):
    dataset, _, extractor = setup
    assert frechet_distance(extractor, dataset.x_train, dataset.x_train) == pytest.approx(
        0.0, abs=1e-8
    )


def test_fd_grows_with_noise_and_shift(setup):
    dataset, _, extractor = setup
    real = dataset.x_train
    fds = [frechet_distance(extractor, real, noisy(real, s)) for s in (0.05, 0.2, 0.5)]
    assert 0 < fds[0] < fds[1] < fds[2]
    shifted = (real.float() / 255 + 0.3).clamp(0, 1)
    assert frechet_distance(extractor, real, shifted) > fds[0]


def test_fd_matches_scipy(setup):
    dataset, _, extractor = setup
    real, fake = dataset.x_train, noisy(dataset.x_train[:150], 0.3, seed=2)
    with torch.no_grad():
        a, b = extractor(real).numpy(), extractor(fake).numpy()
    mu_a, mu_b = a.mean(0), b.mean(0)
    s_a, s_b = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    # tr (S_a S_b)^{1/2} = tr (S_a^{1/2} S_b S_a^{1/2})^{1/2}, symmetric PSD: by eigh (the
    # features' covariances are singular: dead ReLU units)
    w, v = scipy.linalg.eigh(s_a)
    half = (v * np.sqrt(np.clip(w, 0, None))) @ v.T
    inner = scipy.linalg.eigvalsh(half @ s_b @ half)
    trace_root = np.sqrt(np.clip(inner, 0, None)).sum()
    want = float(((mu_a - mu_b) ** 2).sum() + np.trace(s_a) + np.trace(s_b) - 2 * trace_root)
    got = frechet_distance(extractor, real, fake, batch_size=64)
    assert got == pytest.approx(want, rel=1e-4, abs=1e-8)


def test_cache_is_reused(setup, monkeypatch):
    dataset, cache, extractor = setup
    path = cache_path(dataset, cache)
    assert path.is_file() and path.suffix == ".safetensors" and "toy" in path.name
    mtime = os.stat(path).st_mtime_ns

    def no_training(*args, **kwargs):
        raise AssertionError("the cached feature network should have been loaded")

    monkeypatch.setattr(quality, "train_feature_net", no_training)
    again = feature_extractor(dataset, cache)
    assert os.stat(path).st_mtime_ns == mtime
    for (k, v), (k2, v2) in zip(extractor.state_dict().items(), again.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)


def test_cache_key_follows_data_and_settings(setup):
    dataset, cache, _ = setup
    path = cache_path(dataset, cache)
    assert cache_path(dataset, cache, seed=1) != path
    assert cache_path(dataset, cache, epochs=2) != path
    assert cache_path(toy_dataset(seed=5), cache) != path  # same shape, other content
    assert cache_path(toy_dataset(name="other"), cache).name.startswith("featurenet-other-")


def test_training_is_deterministic_and_replaces_a_damaged_cache(setup, tmp_path):
    dataset, _, extractor = setup
    path = cache_path(dataset, tmp_path)
    path.write_bytes(b"not a safetensors file")
    rebuilt = feature_extractor(dataset, tmp_path)
    assert path.stat().st_size > 1000
    for v, v2 in zip(extractor.state_dict().values(), rebuilt.state_dict().values()):
        assert torch.equal(v, v2)  # the same seed trains the same network


def test_errors(setup):
    dataset, _, extractor = setup
    with pytest.raises(DataError, match="at least 2 real and 2 generated"):
        frechet_distance(extractor, dataset.x_train[:1], dataset.x_train)
    vectors = Dataset("vec", torch.zeros(4, 3), torch.zeros(4, dtype=torch.long), None, None, 2)
    with pytest.raises(DataError, match="needs images"):
        train_feature_net(vectors)


def test_sample_grid_png(tmp_path):
    torch.manual_seed(0)
    gen = Generator(4, image_size=28, width=4)
    path = tmp_path / "grid" / "samples.png"
    save_sample_grid(gen, [0, 2, 3], path, per_class=5, seed=1, class_names=list("abcd"))
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(path.parent.glob(".*.tmp"))  # written atomically, nothing left over
    rgb = Generator(2, channels=3, image_size=32, width=4)
    save_sample_grid(rgb, [1], tmp_path / "rgb.png", per_class=2)
    assert (tmp_path / "rgb.png").read_bytes()[:4] == b"\x89PNG"
