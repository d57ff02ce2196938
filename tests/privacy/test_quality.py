"""PSNR, SSIM, their baselines and the reconstruction grid, against values computed by hand."""

import math

import numpy as np
import pytest
import torch
from PIL import Image

from fedretain.data.base import Dataset
from fedretain.errors import ConfigError
from fedretain.privacy.quality import (
    mean_image,
    mean_image_psnr,
    psnr,
    random_image_psnr,
    save_grid,
    ssim,
)


def images(n: int = 3, side: int = 28, seed: int = 0) -> torch.Tensor:
    return torch.rand((n, 1, side, side), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("side", [28, 4])
def test_identical_images_have_ssim_one_and_infinite_psnr(side):
    x = images(side=side)
    assert torch.allclose(ssim(x, x), torch.ones(3), atol=1e-5)
    assert torch.isinf(psnr(x, x)).all()
    other = images(side=side, seed=1)
    assert (ssim(other, x) < 0.5).all()


def test_psnr_of_a_known_mse_is_ten_log10_of_its_inverse():
    target = torch.zeros(2, 1, 5, 5)
    rec = target.clone()
    rec[0] += 0.1  # MSE 0.01: 20 dB
    rec[1, 0, 0, 0] = 1.0  # MSE 1/25: 10 log10(25) dB
    got = psnr(rec, target)
    assert got.shape == (2,)
    assert got[0].item() == pytest.approx(20.0, abs=1e-4)
    assert got[1].item() == pytest.approx(10 * math.log10(25), abs=1e-4)


def test_psnr_per_image_against_numpy():
    a, b = images(seed=2), images(seed=3)
    mse = ((a.numpy() - b.numpy()) ** 2).reshape(3, -1).mean(axis=1)
    assert np.allclose(psnr(a, b).numpy(), 10 * np.log10(1.0 / mse), atol=1e-4)
    # a single image without a batch axis, and uint8 images scaled to [0, 1]
    assert psnr(a[0], b[0]).item() == pytest.approx(float(10 * np.log10(1 / mse[0])), abs=1e-4)
    u8 = (a * 255).round().to(torch.uint8)
    assert psnr(u8, u8.float() / 255).isinf().all()


def test_random_image_baseline_is_seeded_and_near_the_uniform_expectation():
    grey = torch.full((4, 1, 28, 28), 0.5)
    first = random_image_psnr(grey, seed=5)
    assert torch.equal(first, random_image_psnr(grey, seed=5))
    assert not torch.equal(first, random_image_psnr(grey, seed=6))
    # E|U - 1/2|^2 = 1/12 for U uniform on [0, 1]
    assert first.mean().item() == pytest.approx(10 * math.log10(12), abs=0.3)


def test_mean_image_and_its_psnr():
    x = torch.tensor([[[[0, 255]]], [[[255, 255]]]], dtype=torch.uint8)  # (2, 1, 1, 2)
    ds = Dataset("tiny", x, torch.tensor([0, 1]), x, torch.tensor([0, 1]), num_classes=2)
    mean = mean_image(ds, chunk=1)
    assert torch.allclose(mean, torch.tensor([[[0.5, 1.0]]]))
    target = torch.tensor([[[[0.0, 1.0]]]])  # MSE (0.25 + 0) / 2 = 1/8
    assert mean_image_psnr(ds, target).item() == pytest.approx(10 * math.log10(8), abs=1e-4)
    assert mean_image_psnr(mean, target).item() == pytest.approx(10 * math.log10(8), abs=1e-4)


def test_save_grid_writes_a_readable_png(tmp_path):
    orig, rec = images(4), images(4, seed=9)
    path = tmp_path / "grid" / "attack.png"
    save_grid(orig, rec, path, psnrs=psnr(rec, orig))
    with Image.open(path) as img:
        img.load()
        assert img.format == "PNG"
        width, height = img.size
    assert width > height > 0  # four columns, two rows
    assert [p.name for p in path.parent.iterdir()] == ["attack.png"]  # no temporary left
    colour = torch.rand(2, 3, 8, 8)
    save_grid(colour, colour, tmp_path / "colour.png", psnrs=[math.inf, 12.0])
    assert (tmp_path / "colour.png").stat().st_size > 0


def test_bad_inputs_give_one_line_config_errors(tmp_path):
    cases = [
        lambda: psnr(images(2), images(3)),
        lambda: ssim(torch.rand(2, 16), torch.rand(2, 16)),
        lambda: ssim(torch.rand(1, 1, 2, 2), torch.rand(1, 1, 2, 2)),
        lambda: save_grid(images(2), images(2), tmp_path / "x.png", psnrs=[1.0]),
        lambda: mean_image_psnr(torch.zeros(1, 4, 4), images(1)),
    ]
    for case in cases:
        with pytest.raises(ConfigError) as err:
            case()
        assert "\n" not in str(err.value)
    assert not (tmp_path / "x.png").exists()


def ssim_by_the_formula(x: np.ndarray, y: np.ndarray, window: int = 7) -> float:
    """Wang et al. (2004) in float64: mean over every ``window``² patch inside the image of
    (2μxμy + C1)(2σxy + C2) / ((μx² + μy² + C1)(σx² + σy² + C2)), sample (co)variances,
    C1 = (0.01)², C2 = (0.03)² (data range 1)."""
    view = np.lib.stride_tricks.sliding_window_view
    px = view(x.astype(np.float64), (window, window)).reshape(-1, window * window)
    py = view(y.astype(np.float64), (window, window)).reshape(-1, window * window)
    mx, my = px.mean(axis=1), py.mean(axis=1)
    n = window * window
    vx, vy = px.var(axis=1, ddof=1), py.var(axis=1, ddof=1)
    cxy = ((px - mx[:, None]) * (py - my[:, None])).sum(axis=1) / (n - 1)
    c1, c2 = 0.01**2, 0.03**2
    s = (2 * mx * my + c1) * (2 * cxy + c2) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    return float(s.mean())


def test_ssim_is_the_standard_one_of_the_paper_formula():
    gen = torch.Generator().manual_seed(11)
    # a dark-background 28x28 image with a bright blob, and three distortions of it
    target = torch.zeros(1, 1, 28, 28)
    target[..., 6:22, 8:20] = torch.rand((1, 1, 16, 12), generator=gen) * 0.5 + 0.5
    noisy = (target + 0.05 * torch.randn(target.shape, generator=gen)).clamp(0, 1)
    shifted = torch.roll(target, shifts=(1, 2), dims=(2, 3))
    other = torch.rand(target.shape, generator=gen)
    recs = torch.cat([noisy, shifted, other, target])
    targets = target.expand_as(recs)
    got = ssim(recs, targets)
    expected = [ssim_by_the_formula(r[0].numpy(), t[0].numpy()) for r, t in zip(recs, targets)]
    assert np.allclose(got.numpy(), expected, atol=1e-4), (got, expected)
    assert expected[0] > 0.8 > expected[2] and expected[3] == pytest.approx(1.0)
    # small images use the largest odd window that fits: 5x5 on 6x6, 3x3 on 4x4
    for side, window in ((6, 5), (4, 3)):
        a, b = images(2, side=side, seed=5), images(2, side=side, seed=6)
        expected = [ssim_by_the_formula(p[0].numpy(), q[0].numpy(), window) for p, q in zip(a, b)]
        assert np.allclose(ssim(a, b).numpy(), expected, atol=1e-4)


def test_ssim_of_colour_images_averages_the_channels():
    a, b = images(1, side=9, seed=1).expand(1, 3, 9, 9).clone(), images(1, side=9, seed=2)
    b = torch.cat([b, b * 0.5, b.flip(-1)], dim=1)
    per_channel = [ssim_by_the_formula(a[0, c].numpy(), b[0, c].numpy()) for c in range(3)]
    assert ssim(a, b).item() == pytest.approx(float(np.mean(per_channel)), abs=1e-4)
