"""How good a generator's images are: a Fréchet distance on the features of a small classifier
trained on the real data, and PNG grids of samples.

The Fréchet Inception Distance (Heusel, Ramsauer, Unterthiner, Nessler & Hochreiter, *GANs
Trained by a Two Time-Scale Update Rule Converge to a Local Nash Equilibrium*, NeurIPS 2017,
arXiv:1706.08500) fits a Gaussian to the features of real and of generated images and
measures ``||mu_r - mu_g||² + tr(S_r + S_g - 2 (S_r S_g)^{1/2})``. Inception-v3's ImageNet
weights cannot be downloaded here and say little about 28x28 digits, so the features come
from :class:`FeatureNet`, a plain CNN that fedretain trains on the dataset's own training set
(one epoch by default) and caches on disk (:func:`feature_extractor`); distances are
comparable between generators measured with the same extractor only, never with published
Inception FIDs.

The distance itself is torchmetrics' :class:`~torchmetrics.image.fid.FrechetInceptionDistance`
(checked against torchmetrics 1.9) with ``feature=`` our module: given an ``nn.Module`` it
needs neither torch-fidelity (only its built-in Inception does) nor any download; it calls
the module on the images exactly as they are passed to ``update`` (no rescaling for a custom
module; ``normalize`` only chooses the dtype of a dummy batch used to infer the feature size
when the module has no ``num_features`` attribute, and :class:`FeatureExtractor` has one). It
accumulates feature sums in float64 and takes the matrix square root's trace as the sum of
the square roots of the eigenvalues of ``S_r S_g``. :class:`FeatureExtractor` returns float64
features so that the result is not rounded to float32 on the way out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedretain.continual.acgan import Generator, sample
from fedretain.data.base import Dataset, as_float
from fedretain.errors import ConfigError, DataError
from fedretain.files import atomic_write_bytes, save_figure

__all__ = [
    "FEATURE_DIM",
    "FeatureExtractor",
    "FeatureNet",
    "cache_path",
    "feature_extractor",
    "frechet_distance",
    "save_sample_grid",
    "train_feature_net",
]

FEATURE_DIM = 128
"""Size of :class:`FeatureNet`'s penultimate layer, the features the distance is taken on."""

_VERSION = 1  # bump when FeatureNet or its training changes: old cache files are not reused
_BATCH = 64
_LR = 1e-3


class FeatureNet(nn.Module):
    """The classifier whose features the Fréchet distance uses.

    conv(C→32, 3, pad 1) ReLU maxpool 2, conv(32→64, 3, pad 1) ReLU maxpool 2, adaptive
    average pool to 4x4, flatten (1024), fc(1024→128) ReLU = :meth:`features`, fc(128→classes)
    = ``head``; any image size >= 4. Takes ``uint8`` images (scaled to [0, 1]) or floats in
    [0, 1].
    """

    def __init__(self, channels: int, num_classes: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, 32, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(4),
            nn.Flatten(),
            nn.Linear(64 * 16, FEATURE_DIM),
            nn.ReLU(),
        )
        self.head = nn.Linear(FEATURE_DIM, num_classes)

    def features(self, x: Tensor) -> Tensor:
        return self.body(as_float(x))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))


class FeatureExtractor(nn.Module):
    """``forward(x)``: :class:`FeatureNet` features ``(B, 128)`` in float64, the ``feature=``
    module for torchmetrics' FID. Always in evaluation mode, parameters frozen."""

    def __init__(self, net: FeatureNet) -> None:
        super().__init__()
        self.net = net
        self.num_features = net.head.in_features
        self.net.requires_grad_(False)
        super().train(False)

    def train(self, mode: bool = True) -> FeatureExtractor:
        return super().train(False)

    def forward(self, x: Tensor) -> Tensor:
        return self.net.features(x).to(torch.float64)


def _check_images(dataset: Dataset) -> None:
    x, y = dataset.x_train, dataset.y_train
    if x.dim() != 4:
        raise DataError(
            f"dataset {dataset.name!r} has inputs of shape {tuple(x.shape[1:])}; the feature "
            "network needs images (C, H, W)"
        )
    if y.dtype.is_floating_point or len(y) != len(x) or len(x) == 0:
        raise DataError(
            f"dataset {dataset.name!r} needs one integer class label per training image to "
            "train the feature network"
        )


def train_feature_net(
    dataset: Dataset,
    epochs: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> FeatureNet:
    """Train a :class:`FeatureNet` on ``dataset``'s training set: Adam (lr 1e-3), batches of
    64, ``epochs`` epochs. Deterministic in ``seed``; the global RNG is left as it was."""
    _check_images(dataset)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = FeatureNet(dataset.x_train.shape[1], dataset.num_classes)
    net.to(device).train()
    opt = torch.optim.Adam(net.parameters(), lr=_LR)
    rng = torch.Generator().manual_seed(seed)
    x, y = dataset.x_train, dataset.y_train
    for _ in range(epochs):
        perm = torch.randperm(len(x), generator=rng)
        for i in range(0, len(x), _BATCH):
            idx = perm[i : i + _BATCH]
            loss = F.cross_entropy(net(x[idx].to(device)), y[idx].to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return net.eval()


def _settings(dataset: Dataset, epochs: int, seed: int) -> dict[str, object]:
    x, y = dataset.x_train, dataset.y_train
    digest = hashlib.sha256()
    for t in (x, y):
        digest.update(np.ascontiguousarray(t.detach().cpu().numpy()))
    return {
        "version": _VERSION,
        "dataset": dataset.name,
        "shape": list(x.shape),
        "dtype": str(x.dtype),
        "num_classes": int(dataset.num_classes),
        "epochs": int(epochs),
        "seed": int(seed),
        "batch_size": _BATCH,
        "lr": _LR,
        "data_sha256": digest.hexdigest(),
    }


def cache_path(dataset: Dataset, cache_dir: str | Path, epochs: int = 1, seed: int = 0) -> Path:
    """The cache file of the feature network for these settings: ``<cache_dir>/featurenet-
    <dataset name>-<hash>.safetensors``, the hash over the data's content and shape, the
    number of classes, the training settings and the network's version."""
    _check_images(dataset)
    settings = _settings(dataset, epochs, seed)
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", dataset.name) or "dataset"
    return Path(cache_dir) / f"featurenet-{name}-{key}.safetensors"


def feature_extractor(
    dataset: Dataset,
    cache_dir: str | Path,
    epochs: int = 1,
    seed: int = 0,
    device: str | torch.device = "cpu",
) -> FeatureExtractor:
    """The feature extractor for ``dataset`` on ``device``: loaded from :func:`cache_path` when
    present, else trained with :func:`train_feature_net` and saved there atomically
    (safetensors, with the settings as metadata). An unreadable cache file is replaced.

    The network is trained on the CPU whatever ``device`` is: one cached network serves every
    device (the cache key does not name one), and the backward pass of its adaptive pooling has
    no deterministic CUDA kernel, which a deterministic CUDA run refuses."""
    from safetensors.torch import load_file
    from safetensors.torch import save as st_save

    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ConfigError(f"feature network epochs must be an integer >= 1, got {epochs!r}")
    path = cache_path(dataset, cache_dir, epochs, seed)
    net = FeatureNet(dataset.x_train.shape[1], dataset.num_classes)
    loaded = False
    if path.is_file():
        try:
            net.load_state_dict(load_file(str(path)))
            loaded = True
        except Exception:  # a damaged or foreign file: train again and replace it
            loaded = False
    if not loaded:
        net = train_feature_net(dataset, epochs=epochs, seed=seed)
        state = {k: v.detach().contiguous() for k, v in net.state_dict().items()}
        meta = {k: str(v) for k, v in _settings(dataset, epochs, seed).items()}
        atomic_write_bytes(path, st_save(state, metadata=meta))
    return FeatureExtractor(net.to(device).eval())


def frechet_distance(
    extractor: nn.Module, real_images: Tensor, fake_images: Tensor, batch_size: int = 500
) -> float:
    """The Fréchet distance between the extractor's features of ``real_images`` and
    ``fake_images`` (``uint8`` or float [0, 1] images, at least 2 of each), computed by
    torchmetrics' ``FrechetInceptionDistance`` with ``feature=extractor``. Rounding can make
    the distance of a set to itself a tiny negative number: it is returned as 0."""
    try:
        from torchmetrics.image.fid import FrechetInceptionDistance
    except ImportError as e:  # pragma: no cover - torchmetrics is installed with fedretain
        raise ConfigError(
            f"frechet_distance needs torchmetrics ({e}); install it with pip install torchmetrics"
        ) from None
    if len(real_images) < 2 or len(fake_images) < 2:
        raise DataError(
            f"a Fréchet distance needs at least 2 real and 2 generated images, got "
            f"{len(real_images)} and {len(fake_images)}"
        )
    try:
        device = next(extractor.parameters()).device
    except StopIteration:
        device = torch.device("cpu")
    # the metric's running sums live on the features' device (a CPU metric with CUDA features
    # failed: 'Expected all tensors to be on the same device')
    metric = FrechetInceptionDistance(feature=extractor, normalize=True).to(device)
    with torch.no_grad():
        for images, real in ((real_images, True), (fake_images, False)):
            for i in range(0, len(images), batch_size):
                metric.update(images[i : i + batch_size].to(device), real=real)
        value = float(metric.compute())
    return max(value, 0.0)


def save_sample_grid(
    generator: Generator,
    classes: Sequence[int],
    path: str | Path,
    per_class: int = 8,
    seed: int = 0,
    class_names: Sequence[str] | None = None,
) -> None:
    """A PNG of ``per_class`` samples of each of ``classes`` from ``generator``, one row per
    class (labelled with its name when ``class_names`` is given), drawn with :func:`sample`
    (``seed``) and written atomically."""
    from matplotlib.figure import Figure

    classes = [int(c) for c in classes]
    if not classes:
        raise ConfigError("save_sample_grid got no classes; pass at least one class")
    if isinstance(per_class, bool) or not isinstance(per_class, int) or per_class < 1:
        raise ConfigError(f"per_class must be an integer >= 1, got {per_class!r}")
    labels = np.repeat(np.asarray(classes, dtype=np.int64), per_class)
    images = sample(generator, torch.from_numpy(labels), seed=seed).clamp(0, 1).cpu()
    n, c, h, w = images.shape
    pad = max(1, h // 14)
    rows = len(classes)
    grid = np.ones((rows * (h + pad) + pad, per_class * (w + pad) + pad, c), np.float32)
    pics = images.permute(0, 2, 3, 1).numpy()
    for k in range(n):
        r, j = divmod(k, per_class)
        top, left = pad + r * (h + pad), pad + j * (w + pad)
        grid[top : top + h, left : left + w] = pics[k]
    picture = grid[..., 0] if c == 1 else grid[..., :3]

    def name(cls: int) -> str:
        if class_names is not None and 0 <= cls < len(class_names):
            return str(class_names[cls])
        return str(cls)

    fig = Figure(figsize=(0.5 * per_class + 1.0, 0.5 * rows + 0.4))
    ax = fig.add_subplot()
    ax.imshow(picture, cmap="gray" if c == 1 else None, vmin=0.0, vmax=1.0)
    ax.set_xticks([])
    ax.set_yticks([pad + r * (h + pad) + h / 2 for r in range(rows)])
    ax.set_yticklabels([name(cls) for cls in classes], fontsize=8)
    for side in ax.spines.values():
        side.set_visible(False)
    save_figure(fig, path)
