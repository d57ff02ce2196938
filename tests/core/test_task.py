"""Task evaluates a module functionally: its gradient equals autograd's on the module.

The comparisons of two paths run in float64, where they agree to rounding (1e-16: the same
computation), and in float32 with a bound 10x or more over the float32 differences seen on
AVX-512 and AVX2 kernels with 1 and 2 threads (noted at each bound).
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from fedretain.core.task import Task
from fedretain.losses import get_loss

# Worst differences seen (AVX-512 and AVX2 kernels, 1 and 2 threads): float64 2.2e-16;
# float32 2.4e-7 (a loss near 2 off by two float32 roundings: NHWC against NCHW convolution,
# weighted sum against mean), gradients 1.2e-8. The bounds keep >= 10x.
TOL = {torch.float64: 1e-12, torch.float32: 3e-6}
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32])


@DTYPES
def test_functional_gradient_matches_autograd(dtype):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.ReLU(), nn.Linear(5, 3)).to(dtype)
    task = Task(model, get_loss("ce"), num_classes=3)
    params, buffers = task.init()
    x, y = torch.randn(8, 3, 4, dtype=dtype), torch.randint(0, 3, (8,))
    batch = {"x": x, "y": y, "w": torch.ones(8, dtype=dtype)}
    grads, loss, _ = task.grad(params, buffers, batch)
    ref = F.cross_entropy(model(x), y)
    ref.backward()
    assert torch.allclose(loss, ref.detach(), rtol=0, atol=TOL[dtype])
    for name, p in model.named_parameters():
        assert torch.allclose(grads[name], p.grad, rtol=0, atol=TOL[dtype])


@DTYPES
def test_padding_weights_remove_examples(dtype):
    torch.manual_seed(0)
    task = Task(nn.Linear(4, 3).to(dtype), get_loss("ce"), num_classes=3)
    params, buffers = task.init()
    x, y = torch.randn(6, 4, dtype=dtype), torch.randint(0, 3, (6,))
    w = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0], dtype=dtype)
    padded, _ = task.batch_loss(params, buffers, {"x": x, "y": y, "w": w})
    ones = torch.ones(3, dtype=dtype)
    real, _ = task.batch_loss(params, buffers, {"x": x[:3], "y": y[:3], "w": ones})
    assert torch.allclose(padded, real, rtol=0, atol=TOL[dtype])


@DTYPES
def test_soft_labels_equal_hard_labels_when_one_hot(dtype):
    logits = torch.randn(4, 5, dtype=dtype)
    y = torch.tensor([0, 3, 1, 4])
    ce = get_loss("ce")
    soft = F.one_hot(y, 5).to(dtype)
    assert torch.allclose(ce(logits, y, None), ce(logits, soft, None), rtol=0, atol=TOL[dtype])


def test_batchnorm_statistics_update_functionally():
    model = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.Linear(4, 2))
    task = Task(model, get_loss("ce"), num_classes=2)
    params, buffers = task.init()
    before = {k: v.clone() for k, v in buffers.items()}
    batch = {"x": torch.randn(16, 3) * 5 + 2, "y": torch.randint(0, 2, (16,)), "w": torch.ones(16)}
    _, _, new_buffers = task.grad(params, buffers, batch)
    assert not torch.equal(new_buffers["1.running_mean"], before["1.running_mean"])
    assert torch.equal(buffers["1.running_mean"], before["1.running_mean"])  # input untouched
    acc, loss = task.evaluate(params, new_buffers, batch["x"], batch["y"])
    assert 0 <= acc <= 1 and loss > 0


@DTYPES
def test_autograd_and_functional_paths_agree(dtype):
    from dataclasses import replace

    from torch.func import vmap

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).to(dtype)
    task = Task(model, get_loss("ce"), 3)
    params, buffers = task.init()
    x, y = torch.randn(5, 4, dtype=dtype), torch.randint(0, 3, (5,))
    batch = {"x": x, "y": y, "w": torch.ones(5, dtype=dtype)}
    g_auto, loss_auto, _ = task.grad(params, buffers, batch)
    g_func, loss_func, _ = replace(task, functional=True).grad(params, buffers, batch)
    tol = TOL[dtype]
    assert torch.allclose(loss_auto, loss_func, rtol=0, atol=tol)
    for k in g_auto:
        assert torch.allclose(g_auto[k], g_func[k], rtol=0, atol=tol)
    # under vmap the wrapped tensors select the functional path by themselves
    stacked = {k: torch.stack([v, v]) for k, v in params.items()}
    per_client = vmap(lambda p: task.grad(p, buffers, batch)[0])(stacked)
    assert torch.allclose(per_client["0.weight"][1], g_auto["0.weight"], rtol=0, atol=tol)


@DTYPES
def test_per_example_rows_match_the_evaluation_and_by_hand(dtype):
    torch.manual_seed(0)
    task = Task(nn.Linear(4, 3).to(dtype), get_loss("ce"), num_classes=3)
    params, buffers = task.init()
    x, y = torch.randn(7, 4, dtype=dtype), torch.randint(0, 3, (7,))
    correct, losses = task.per_example(params, buffers, x, y, batch_size=3)  # three batches
    logits = x @ params["weight"].T + params["bias"]
    assert torch.equal(correct, logits.argmax(1) == y)
    ref = F.cross_entropy(logits, y, reduction="none")
    assert torch.allclose(losses, ref, rtol=0, atol=TOL[dtype])
    acc, loss = task.evaluate(params, buffers, x, y)
    assert acc == int(correct.sum()) / 7 and abs(loss - float(losses.mean())) < TOL[dtype]


def test_bf16_autocast_trains_in_bfloat16_and_evaluates_in_float32():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3))
    fp32 = Task(model, get_loss("ce"), num_classes=3)
    bf16 = Task(model, get_loss("ce"), num_classes=3, autocast=torch.bfloat16)
    params, buffers = fp32.init()
    x, y = torch.randn(8, 1, 6, 6), torch.randint(0, 3, (8,))
    batch = {"x": x, "y": y, "w": torch.ones(8)}
    logits, _ = bf16.forward(params, buffers, x)
    ref, _ = fp32.forward(params, buffers, x)
    assert logits.dtype == torch.float32
    # the forward ran in bfloat16: its logits are bfloat16 values, off float32's by rounding
    assert torch.equal(logits, logits.bfloat16().float()) and not torch.equal(logits, ref)
    assert torch.allclose(logits, ref, rtol=0.05, atol=0.05)
    g_bf, loss_bf, _ = bf16.grad(params, buffers, batch)
    g_32, loss_32, _ = fp32.grad(params, buffers, batch)
    for k in params:
        assert g_bf[k].dtype == torch.float32 and not torch.equal(g_bf[k], g_32[k])
    # per leaf, sums of bfloat16 terms that cancel (a bias's gradient) can be off by 25 %; the
    # whole gradient points the same way
    flat_bf, flat_32 = (torch.cat([g[k].flatten() for k in params]) for g in (g_bf, g_32))
    assert F.cosine_similarity(flat_bf, flat_32, dim=0) > 0.98
    assert abs(float(loss_bf) - float(loss_32)) < 0.05
    # evaluation stays float32: the same numbers as without autocast
    assert bf16.evaluate(params, buffers, x, y) == fp32.evaluate(params, buffers, x, y)


@DTYPES
def test_evaluation_of_images_in_channels_last_equals_the_module(dtype):
    """per_example hands oneDNN NHWC batches on a CPU: the same predictions and losses as the
    module on the plain (NCHW) batch, to float rounding, whatever the batch size."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten())
    model = model.append(nn.Linear(6 * 3 * 3, 4)).to(dtype)
    task = Task(model, get_loss("ce"), num_classes=4)
    params, buffers = task.init()
    x, y = torch.randn(25, 3, 8, 8, dtype=dtype), torch.randint(0, 4, (25,))
    with torch.no_grad():
        logits = model(x)
    for batch_size in (25, 10, 1):
        correct, losses = task.per_example(params, buffers, x, y, batch_size)
        assert torch.equal(correct, logits.argmax(-1) == y)
        ref = F.cross_entropy(logits, y, reduction="none")
        assert torch.allclose(losses, ref, rtol=0, atol=TOL[dtype])
