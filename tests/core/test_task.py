"""Task evaluates a module functionally: its gradient equals autograd's on the module."""

import torch
import torch.nn.functional as F
from torch import nn

from fedretain.core.task import Task
from fedretain.losses import get_loss


def test_functional_gradient_matches_autograd():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.ReLU(), nn.Linear(5, 3))
    task = Task(model, get_loss("ce"), num_classes=3)
    params, buffers = task.init()
    x, y = torch.randn(8, 3, 4), torch.randint(0, 3, (8,))
    batch = {"x": x, "y": y, "w": torch.ones(8)}
    grads, loss, _ = task.grad(params, buffers, batch)
    ref = F.cross_entropy(model(x), y)
    ref.backward()
    assert torch.allclose(loss, ref.detach())
    for name, p in model.named_parameters():
        assert torch.allclose(grads[name], p.grad, atol=1e-6)


def test_padding_weights_remove_examples():
    torch.manual_seed(0)
    task = Task(nn.Linear(4, 3), get_loss("ce"), num_classes=3)
    params, buffers = task.init()
    x, y = torch.randn(6, 4), torch.randint(0, 3, (6,))
    w = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0])
    padded, _ = task.batch_loss(params, buffers, {"x": x, "y": y, "w": w})
    real, _ = task.batch_loss(params, buffers, {"x": x[:3], "y": y[:3], "w": torch.ones(3)})
    assert torch.allclose(padded, real)


def test_soft_labels_equal_hard_labels_when_one_hot():
    logits = torch.randn(4, 5)
    y = torch.tensor([0, 3, 1, 4])
    ce = get_loss("ce")
    assert torch.allclose(ce(logits, y, None), ce(logits, F.one_hot(y, 5).float(), None))


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


def test_autograd_and_functional_paths_agree():
    from dataclasses import replace

    from torch.func import vmap

    torch.manual_seed(0)
    task = Task(nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)), get_loss("ce"), 3)
    params, buffers = task.init()
    batch = {"x": torch.randn(5, 4), "y": torch.randint(0, 3, (5,)), "w": torch.ones(5)}
    g_auto, loss_auto, _ = task.grad(params, buffers, batch)
    g_func, loss_func, _ = replace(task, functional=True).grad(params, buffers, batch)
    assert torch.allclose(loss_auto, loss_func)
    for k in g_auto:
        assert torch.allclose(g_auto[k], g_func[k], atol=1e-6)
    # under vmap the wrapped tensors select the functional path by themselves
    stacked = {k: torch.stack([v, v]) for k, v in params.items()}
    per_client = vmap(lambda p: task.grad(p, buffers, batch)[0])(stacked)
    assert torch.allclose(per_client["0.weight"][1], g_auto["0.weight"], atol=1e-6)


def test_per_example_rows_match_the_evaluation_and_by_hand():
    torch.manual_seed(0)
    task = Task(nn.Linear(4, 3), get_loss("ce"), num_classes=3)
    params, buffers = task.init()
    x, y = torch.randn(7, 4), torch.randint(0, 3, (7,))
    correct, losses = task.per_example(params, buffers, x, y, batch_size=3)  # three batches
    logits = x @ params["weight"].T + params["bias"]
    assert torch.equal(correct, logits.argmax(1) == y)
    assert torch.allclose(losses, F.cross_entropy(logits, y, reduction="none"), atol=1e-6)
    acc, loss = task.evaluate(params, buffers, x, y)
    assert acc == int(correct.sum()) / 7 and abs(loss - float(losses.mean())) < 1e-6


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


def test_evaluation_of_images_in_channels_last_equals_the_module():
    """per_example hands oneDNN NHWC batches on a CPU: the same predictions and losses as the
    module on the plain (NCHW) batch, to float rounding, whatever the batch size."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 6, 3), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten())
    model.append(nn.Linear(6 * 3 * 3, 4))
    task = Task(model, get_loss("ce"), num_classes=4)
    params, buffers = task.init()
    x, y = torch.randn(25, 3, 8, 8), torch.randint(0, 4, (25,))
    with torch.no_grad():
        logits = model(x)
    for batch_size in (25, 10, 1):
        correct, losses = task.per_example(params, buffers, x, y, batch_size)
        assert torch.equal(correct, logits.argmax(-1) == y)
        assert torch.allclose(losses, F.cross_entropy(logits, y, reduction="none"), atol=1e-6)
