"""Where a CNN round's time goes, kernel by kernel, against the machine's matmul peak.

Three tables, one invocation, for one zoo CNN at the engine workload's batch (10 samples):

1. **Profile** of the sequential engine's local training (``train_client`` on ``--clients``
   clients of the engine workload: 60 random samples, 5 epochs, batch 10, plain SGD) under
   ``torch.profiler``: self CPU time grouped into convolution forward / backward, linear
   (matmuls), pooling, ReLU, loss, the SGD update and the rest.
2. **Layers**: each convolution and linear layer of the model alone at its input shape in the
   model (captured by forward hooks): forward, weight gradient and input gradient timed
   separately (``F.conv2d``/``F.linear`` and ``aten.convolution_backward``/matmuls), analytic
   FLOPs (2 x multiply-adds) and GFLOP/s as a share of the fp32 matmul peak measured first.
3. **Alternatives** (``--alternatives``): one step's gradients for 10 clients of 10 samples,
   per-client loop vs ``torch.func.vmap``, with the model as it is (oneDNN convolutions,
   grouped under vmap), with its convolutions lowered to ``unfold`` + one matmul per layer (one
   batched GEMM across the clients under vmap), or with its max pools computed on an NHWC copy.

    .venv/bin/python benchmarks/cnn_kernels.py --model cnn-fedavg --threads 2 --alternatives
    .venv/bin/python benchmarks/cnn_kernels.py --model cnn --shape 3,32,32 --threads 2

Machines drift between runs (up to 2.7x): compare rows within one invocation. Results:
RESULTS.md, "CNN kernels".
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine_speed import peak_matmul_gflops

SAMPLES, EPOCHS, BATCH, LR = 60, 5, 10, 0.05
PEAK_SIDES = (512, 1024, 2048, 4096)  # the best of these: in-cache sizes run a little faster

# profiler op name -> row of the profile table (first match wins; everything else is "other")
GROUPS = (
    ("convolution_backward", "convolution backward"),
    ("convolution", "convolution forward"),
    ("addmm", "linear (matmul)"),
    ("aten::mm", "linear (matmul)"),
    ("max_pool", "max pool (forward and backward)"),
    ("threshold_backward", "ReLU"),
    ("relu", "ReLU"),
    ("clamp_min", "ReLU"),
    ("nll_loss", "loss"),
    ("log_softmax", "loss"),
    ("_softmax", "loss"),
    ("lerp", "SGD update"),
    ("addcmul", "SGD update"),
    ("aten::add", "SGD update and gradient sums"),
)


def timed(fn: Callable[[], object], repeat: int) -> float:
    """Median seconds of ``fn`` over ``repeat`` calls, after one warm-up call."""
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def build(model_name: str, shape: tuple[int, ...]) -> nn.Module:
    from fedretain.models import build_model

    torch.manual_seed(0)
    return build_model(model_name, shape, 10)


def profile_table(model_name: str, shape: tuple[int, ...], clients: int) -> list[tuple]:
    """(group, self CPU ms, share) over the local training of ``clients`` clients."""
    from fedretain.algorithms import build_algorithm
    from fedretain.core.client import Clients, LocalSpec
    from fedretain.core.task import Task
    from fedretain.data.base import Dataset
    from fedretain.engines.round import Rounds
    from fedretain.engines.sequential import SequentialEngine
    from fedretain.losses import get_loss

    g = torch.Generator().manual_seed(0)
    x = torch.randn(clients * SAMPLES, *shape, generator=g)
    y = torch.randint(0, 10, (clients * SAMPLES,), generator=g)
    ds = Dataset("bench", x, y, x[:10], y[:10], num_classes=10)
    parts = [np.arange(c * SAMPLES, (c + 1) * SAMPLES) for c in range(clients)]
    task = Task(build(model_name, shape), get_loss("ce"), 10)
    algo = build_algorithm("fedavg")
    rounds = Rounds(
        algo, task, Clients(ds, parts, LocalSpec(BATCH, EPOCHS), seed=0), SequentialEngine()
    )
    state = algo.server_init(*task.init())
    state, _ = rounds.run_round(state, 0, LR, clients)  # warm-up
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        rounds.run_round(state, 1, LR, clients)
        wall = time.perf_counter() - t0
    totals: dict[str, float] = defaultdict(float)
    other: dict[str, float] = {}
    for ev in prof.key_averages():
        if not ev.key.startswith("aten::"):
            continue
        group = next((row for pat, row in GROUPS if pat in ev.key), None)
        if group is None:
            other[ev.key] = ev.self_cpu_time_total / 1e3
        else:
            totals[group] += ev.self_cpu_time_total / 1e3
    top = sorted(other, key=other.get, reverse=True)[:4]
    totals[f"other ({', '.join(k.removeprefix('aten::') for k in top)}, ...)"] = sum(other.values())
    total = sum(totals.values())
    rows = [(k, v, v / total) for k, v in sorted(totals.items(), key=lambda kv: -kv[1])]
    rows.append(("all aten ops (self CPU ms)", total, 1.0))
    rows.append(("round wall ms, under the profiler", wall * 1e3, float("nan")))
    return rows


def layer_inputs(model: nn.Module, shape: tuple[int, ...]) -> list[tuple[str, nn.Module, Tensor]]:
    """Every Conv2d and Linear of ``model`` with a batch of its input inside the model."""
    found: list[tuple[str, nn.Module, Tensor]] = []
    hooks = [
        m.register_forward_hook(lambda m, a, out, n=n: found.append((n, m, a[0].detach())))
        for n, m in model.named_modules()
        if isinstance(m, (nn.Conv2d, nn.Linear))
    ]
    with torch.no_grad():
        model(torch.randn(BATCH, *shape))
    for h in hooks:
        h.remove()
    return found


def layer_table(model: nn.Module, shape: tuple[int, ...], peak: float) -> list[tuple]:
    """(layer, pass, ms, GFLOP, GFLOP/s, share of peak) per layer and pass."""
    rows = []
    first = True
    for name, m, x in layer_inputs(model, shape):
        w, b = m.weight.detach(), m.bias.detach()
        if isinstance(m, nn.Conv2d):
            out = F.conv2d(x, w, b, m.stride, m.padding)
            macs = out.numel() * w[0].numel()
            dy = torch.randn_like(out)

            def fwd(x=x, w=w, b=b, m=m) -> Tensor:
                return F.conv2d(x, w, b, m.stride, m.padding)

            def bwd(dy=dy, x=x, w=w, m=m, mask=(False, True, True)) -> object:
                return torch.ops.aten.convolution_backward(
                    dy,
                    x,
                    w,
                    [w.shape[0]],
                    m.stride,
                    m.padding,
                    (1, 1),
                    False,
                    (0, 0),
                    1,
                    list(mask),
                )

            passes = [("forward", fwd), ("weight gradient", bwd)]
            if not first:  # the first layer's input needs no gradient
                passes.append(
                    (
                        "input gradient",
                        lambda dy=dy, x=x, w=w, m=m: bwd(dy, x, w, m, (True, False, False)),
                    )
                )
        else:
            macs = x.shape[0] * w.numel()
            dy = torch.randn(x.shape[0], w.shape[0])
            passes = [
                ("forward", lambda x=x, w=w, b=b: F.linear(x, w, b)),
                ("weight gradient", lambda x=x, dy=dy: dy.t() @ x),
                ("input gradient", lambda w=w, dy=dy: dy @ w),
            ]
        first = False
        for label, fn in passes:
            s = timed(fn, 50)
            gflop = 2 * macs / 1e9
            rows.append(
                (f"{name} {tuple(w.shape)}", label, s * 1e3, gflop, gflop / s, gflop / s / peak)
            )
    return rows


def conv_unfold(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """A stride-1, unpadded convolution as ``unfold`` + one matmul over the whole batch."""
    n, (o, c, k, _) = x.shape[0], w.shape
    ho, wo = x.shape[2] - k + 1, x.shape[3] - k + 1
    cols = F.unfold(x, k).transpose(0, 1).reshape(c * k * k, n * ho * wo)
    return (w.reshape(o, -1) @ cols + b[:, None]).reshape(o, n, ho, wo).transpose(0, 1)


def pool_nhwc(pool: nn.MaxPool2d, x: Tensor) -> Tensor:
    """``pool(x)`` computed on an NHWC copy (PyTorch's CPU max-pool kernel for channels-last
    inputs is about 10x faster than its NCHW one at batch 10), returned in NCHW. A permuted
    copy rather than ``memory_format=torch.channels_last``, which vmap does not support."""
    return F.max_pool2d(
        x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2), pool.kernel_size
    ).contiguous()


ALTERNATIVES = ("oneDNN convolutions", "unfold + matmul", "max pool on an NHWC copy")


def alternatives_table(model: nn.Module, shape: tuple[int, ...]) -> list[tuple]:
    """(variant, ms per step of 10 clients, x the loop as it is) for each of ``ALTERNATIVES``,
    per-client loop and ``torch.func.vmap`` (one batched GEMM per lowered layer)."""
    from torch.func import functional_call, grad, vmap

    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    if any(m.stride != (1, 1) or m.padding != (0, 0) for m in convs):
        raise SystemExit(
            "--alternatives covers stride-1, unpadded convolutions (cnn, cnn-fedavg, cnn2)"
        )
    clients = 10
    params = {k: v.detach() for k, v in model.named_parameters()}
    stacked = {k: v.expand(clients, *v.shape).clone() for k, v in params.items()}
    g = torch.Generator().manual_seed(0)
    x = torch.randn(clients, BATCH, *shape, generator=g)
    y = torch.randint(0, 10, (clients, BATCH), generator=g)
    conv, pool = nn.Conv2d._conv_forward, nn.MaxPool2d.forward

    def loss(p: dict[str, Tensor], x: Tensor, y: Tensor, variant: str) -> Tensor:
        if variant == ALTERNATIVES[1]:
            nn.Conv2d._conv_forward = lambda self, x, w, b: conv_unfold(x, w, b)
        if variant == ALTERNATIVES[2]:
            nn.MaxPool2d.forward = pool_nhwc
        try:
            return F.cross_entropy(functional_call(model, p, (x,)), y)
        finally:
            nn.Conv2d._conv_forward, nn.MaxPool2d.forward = conv, pool

    for variant in ALTERNATIVES[1:]:
        assert torch.allclose(
            loss(params, x[0], y[0], variant), loss(params, x[0], y[0], ALTERNATIVES[0]), atol=1e-5
        )
    times = {}
    for variant in ALTERNATIVES:
        times[f"loop, {variant}"] = timed(
            lambda v=variant: [grad(loss)(params, x[c], y[c], v) for c in range(clients)], 10
        )
    for variant in ALTERNATIVES:
        times[f"vmap, {variant}"] = timed(
            lambda v=variant: vmap(grad(loss), (0, 0, 0, None))(stacked, x, y, v), 10
        )
    base = times[f"loop, {ALTERNATIVES[0]}"]
    return [(name, s * 1e3, base / s) for name, s in times.items()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="cnn-fedavg")
    ap.add_argument("--shape", default="1,28,28", help="input shape C,H,W")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--clients", type=int, default=10, help="clients in the profiled round")
    ap.add_argument(
        "--alternatives", action="store_true", help="also time the kernels' alternatives"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    shape = tuple(int(s) for s in args.shape.split(","))
    peak = peak_matmul_gflops(PEAK_SIDES)
    print(
        f"model {args.model} on {shape}, batch {BATCH}, {args.threads} threads, "
        f"torch {torch.__version__}"
    )
    print(f"fp32 matmul peak: {peak:.0f} GFLOP/s\n")

    print(
        f"Profile: local training of {args.clients} clients x {SAMPLES // BATCH * EPOCHS} steps\n"
    )
    print("| kernels | self CPU ms | share |\n|---|---|---|")
    for group, ms, share in profile_table(args.model, shape, args.clients):
        print(f"| {group} | {ms:.0f} | {share:.0%} |")

    print("\nLayers alone at batch 10\n")
    print(
        "| layer (weight shape) | pass | ms | GFLOP | GFLOP/s | of peak |\n"
        "|---|---|---|---|---|---|"
    )
    for layer, label, ms, gflop, rate, share in layer_table(build(args.model, shape), shape, peak):
        print(f"| {layer} | {label} | {ms:.3f} | {gflop:.4f} | {rate:.0f} | {share:.0%} |")

    if args.alternatives:
        print("\nAlternatives: one step's gradients of 10 clients\n")
        print("| variant | ms | x loop |\n|---|---|---|")
        for name, ms, speed in alternatives_table(build(args.model, shape), shape):
            print(f"| {name} | {ms:.1f} | {speed:.2f} |")


if __name__ == "__main__":
    main()
