"""The ACGAN (Odena et al. 2017) as FedCIL uses it: shapes, losses by hand, seeded sampling."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from fedretain.continual.acgan import (
    ADAM_BETAS,
    Discriminator,
    Generator,
    acgan,
    adam,
    discriminator_loss,
    from_unit,
    generator_loss,
    label_onehot_noise,
    sample,
    to_unit,
)
from fedretain.errors import ConfigError, DataError

W = 4  # a narrow width keeps the tests fast; the reference's is 64


def test_losses_at_zero_logits():
    c = 5
    zero_d, zero_aux = torch.zeros(3), torch.zeros(3, c)
    y = torch.tensor([0, 2, 4])
    # BCE of logit 0 against 0 or 1 is log 2; CE of uniform logits over C classes is log C
    d = discriminator_loss(zero_d, zero_aux, y, zero_d.view(3, 1), zero_aux, y)
    assert d.item() == pytest.approx(2 * math.log(2) + 2 * math.log(c), rel=1e-6)
    g = generator_loss(zero_d, zero_aux, y)
    assert g.item() == pytest.approx(math.log(2) + math.log(c), rel=1e-6)


def bce(x: float, target: int) -> float:
    p = 1 / (1 + math.exp(-x))
    return -math.log(p) if target == 1 else -math.log(1 - p)


def ce(logits: list[float], y: int) -> float:
    return -logits[y] + math.log(sum(math.exp(v) for v in logits))


def test_losses_by_hand():
    d_real, d_fake = [2.0, -1.0], [0.5, -3.0]
    aux_real, y_real = [[1.0, 0.0, -1.0], [0.0, 2.0, 1.0]], [0, 2]
    aux_fake, y_fake = [[0.3, 0.1, 0.0], [-2.0, 0.0, 4.0]], [1, 1]
    want_d = (
        (bce(2.0, 1) + bce(-1.0, 1)) / 2
        + (ce(aux_real[0], 0) + ce(aux_real[1], 2)) / 2
        + (bce(0.5, 0) + bce(-3.0, 0)) / 2
        + (ce(aux_fake[0], 1) + ce(aux_fake[1], 1)) / 2
    )
    t = torch.tensor
    got_d = discriminator_loss(t(d_real), t(aux_real), t(y_real), t(d_fake), t(aux_fake), t(y_fake))
    assert got_d.item() == pytest.approx(want_d, rel=1e-6)
    want_g = (bce(0.5, 1) + bce(-3.0, 1)) / 2 + (ce(aux_fake[0], 1) + ce(aux_fake[1], 1)) / 2
    got_g = generator_loss(t(d_fake).view(2, 1), t(aux_fake), t(y_fake))
    assert got_g.item() == pytest.approx(want_g, rel=1e-6)


@pytest.mark.parametrize("size", [28, 32])
@pytest.mark.parametrize("channels", [1, 3])
def test_shapes(size, channels):
    torch.manual_seed(0)
    gen, disc = acgan((channels, size, size), num_classes=7, width=W)
    z = label_onehot_noise([0, 3, 6], gen.z_dim, 7, torch.Generator().manual_seed(0))
    x = gen(z)
    assert x.shape == (3, channels, size, size)
    assert x.min() >= -1 and x.max() <= 1
    source, logits = disc(to_unit(x))
    assert source.shape == (3,) and logits.shape == (3, 7)
    side = 3 if size == 28 else 4  # 28 -> 14 -> 7 -> 3, 32 -> 16 -> 8 -> 4
    assert disc.features(to_unit(x)).shape == (3, 4 * W * side * side)


def test_28_is_the_center_crop_of_32():
    torch.manual_seed(1)
    g28 = Generator(10, image_size=28, width=W).eval()
    torch.manual_seed(1)
    g32 = Generator(10, image_size=32, width=W).eval()
    z = label_onehot_noise(list(range(10)), 110, 10, torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(g28(z), g32(z)[:, :, 2:30, 2:30])


def test_classify_is_the_aux_head():
    torch.manual_seed(0)
    disc = Discriminator(4, channels=1, image_size=28, width=W)
    x = torch.rand(5, 1, 28, 28)
    logits = disc.classify(x)
    assert logits.shape == (5, 4)
    assert torch.equal(logits, disc(x)[1])
    assert torch.equal(logits, disc.head(disc.features(x)))
    assert disc.head.out_features == 4 and disc.source.out_features == 1


def test_reference_architecture_and_init():
    torch.manual_seed(0)
    gen, disc = Generator(10), Discriminator(10)  # the reference's defaults: width 64, z 110
    assert gen.fc.in_features == 110 and gen.fc.out_features == 4 * 4 * 512
    assert [(m.in_channels, m.out_channels) for m in (gen.deconv1, gen.deconv2, gen.deconv3)] == [
        (512, 256),
        (256, 128),
        (128, 64),
    ]
    assert (gen.deconv4.in_channels, gen.deconv4.out_channels) == (64, 1)
    convs = [disc.conv1, disc.conv2, disc.conv3]
    assert [(m.in_channels, m.out_channels) for m in convs] == [(1, 64), (64, 128), (128, 256)]
    assert all(m.kernel_size == (4, 4) and m.stride == (2, 2) for m in convs)
    for m in [*convs, disc.source, disc.head, gen.fc, gen.deconv1]:
        assert m.weight.std().item() == pytest.approx(0.02, rel=0.1)
        assert torch.count_nonzero(m.bias) == 0
    assert torch.all(gen.bn0.weight == 1)
    opt = adam(gen)
    assert opt.defaults["betas"] == ADAM_BETAS == (0.5, 0.99)


def test_onehot_noise():
    rng = torch.Generator().manual_seed(7)
    z = label_onehot_noise(torch.tensor([2, 0]), 6, 3, rng)
    assert z.shape == (2, 6)
    assert z[:, :3].tolist() == [[0, 0, 1], [1, 0, 0]]
    noise = torch.randn(2, 6, generator=torch.Generator().manual_seed(7))
    assert torch.equal(z[:, 3:], noise[:, 3:])  # the rest is the seeded N(0, 1) draw
    with pytest.raises(ConfigError, match="cannot hold the one-hot label"):
        label_onehot_noise([0], 2, 3)
    with pytest.raises(DataError, match="label 3 is out of range"):
        label_onehot_noise([3], 6, 3)


def test_sample_is_deterministic_in_seed():
    torch.manual_seed(0)
    gen = Generator(5, image_size=28, width=W)
    state = torch.get_rng_state()
    a = sample(gen, [0, 1, 4, 4], seed=3)
    b = sample(gen, [0, 1, 4, 4], seed=3)
    c = sample(gen, [0, 1, 4, 4], seed=4)
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is untouched
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.shape == (4, 1, 28, 28) and a.min() >= 0 and a.max() <= 1
    assert not a.requires_grad
    raw = sample(gen.eval(), [1, 2], seed=0, unit=False)
    assert torch.allclose(to_unit(raw), sample(gen, [1, 2], seed=0))
    assert torch.allclose(from_unit(to_unit(raw)), raw, atol=1e-6)


def test_generator_gets_gradients_only_from_generator_loss():
    torch.manual_seed(0)
    gen, disc = acgan((1, 28, 28), 3, width=W)
    labels = torch.tensor([0, 1, 2, 1])
    z = label_onehot_noise(labels, gen.z_dim, 3, torch.Generator().manual_seed(0))
    fake = to_unit(gen(z))
    d_fake, aux_fake = disc(fake)
    generator_loss(d_fake, aux_fake, labels).backward()
    for name, p in gen.named_parameters():
        assert p.grad is not None and torch.count_nonzero(p.grad) > 0, name
    gen.zero_grad(set_to_none=True)
    disc.zero_grad(set_to_none=True)
    real = torch.rand(4, 1, 28, 28)
    d_real, aux_real = disc(real)
    d_fake, aux_fake = disc(fake.detach())
    discriminator_loss(d_real, aux_real, labels, d_fake, aux_fake, labels).backward()
    assert all(p.grad is None for p in gen.parameters())
    assert all(p.grad is not None for p in disc.parameters())


def test_a_few_steps_lower_the_discriminator_loss():
    torch.manual_seed(0)
    gen, disc = acgan((1, 28, 28), 2, width=W)
    opt = adam(disc, lr=1e-3)
    real = torch.zeros(8, 1, 28, 28)
    real[4:, :, 8:20, 8:20] = 1.0
    y = torch.tensor([0] * 4 + [1] * 4)
    fake = sample(gen, y, seed=0)
    losses = []
    for _ in range(10):
        d_real, aux_real = disc(real)
        d_fake, aux_fake = disc(fake)
        loss = discriminator_loss(d_real, aux_real, y, d_fake, aux_fake, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_bad_configurations():
    with pytest.raises(ConfigError, match="z_dim=5 cannot hold"):
        Generator(10, z_dim=5)
    with pytest.raises(ConfigError, match="width must be an integer >= 1"):
        Discriminator(10, width=0)
    with pytest.raises(ConfigError, match="square images"):
        acgan((1, 28, 32), 10)
    disc = Discriminator(10, image_size=28, width=W)
    with pytest.raises(DataError, match=r"expects images of shape \(B, 1, 28, 28\)"):
        disc(torch.zeros(2, 1, 32, 32))
    with pytest.raises(DataError, match=r"expects inputs of shape \(B, 110\)"):
        Generator(10, width=W)(torch.zeros(2, 100))


def test_modules_are_plain_nn_modules():
    gen, disc = acgan((3, 32, 32), 10, width=W)
    assert isinstance(gen, nn.Module) and isinstance(disc, nn.Module)
    assert gen.channels == 3 and disc.channels == 3
