"""One FL round on every engine, beside a plain PyTorch loop and the machine's matmul peak.

Workload (the engine benchmark of fedretain): 100 clients x 60 samples (random 1x28x28,
10 classes), 5 local epochs of plain SGD, batch 10 (30 steps per client), lr 0.05, FedAvg
weighted by samples. Models: ``cnn-fedavg`` (McMahan et al.'s CNN, 582k parameters, ~740
GFLOP per round) and ``mlp`` 784-200-200-200-10 (~43 GFLOP). Each variant runs in its own
process; its peak RSS is summed over the process and all its descendants (Flower's Ray
workers included), sampled every 0.2 s from /proc.

    .venv/bin/python benchmarks/engine_speed.py                      # default table
    .venv/bin/python benchmarks/engine_speed.py --model mlp --variants loop,vmap-10,vmap-50,loop
    .venv/bin/python benchmarks/engine_speed.py --model mlp --variant vmap-10 --rounds 3  # one

Variants: ``loop`` (one nn.Module + torch.optim.SGD over the same mini-batch orders: the plain
reference), ``sequential`` (fedretain's reference engine; ``engine`` is an alias;
``sequential-w<N>`` with ``engine.workers=N``: N clients at a time on threads), ``vmap-<K>``
(the vectorised engine, K clients per vmapped call; ``vmap-0`` sizes chunks to memory;
``vmap-<K>-compiled`` with ``torch.compile``) and
``flower`` (Flower's simulation engine, 2 workers x 1 CPU), ``pfl`` (pfl-research 0.6.0's
simulator, PyTorch backend, one process, the same plain-torch model, run with ``--pfl-python``:
default ``$PFL_PYTHON``, else ``pflenv/bin/python``, an environment made with ``python -m venv
pflenv && pflenv/bin/pip install torch==2.13.0 'pfl[pytorch]==0.6.0'``; pfl iterates each
client's data in order, without the loop's shuffled batch plans); ``loop-cl`` is the loop with
channels-last activations and weights; a suffix ``+jemalloc``, ``+jemalloc-tuned`` or
``+tcmalloc`` runs a variant with that allocator under ``LD_PRELOAD`` (Debian packages
``libjemalloc2``, ``libtcmalloc-minimal4``; see ``ALLOCATORS``). Columns: median seconds of the
timed rounds (after one warm-up round), GFLOP/s (3 x analytic forward FLOPs / s), percent of
the fp32 matmul peak measured at the start of the same invocation, speed-up over the first
``loop`` row, start-up seconds (set-up plus the warm-up round minus a median round: data,
model, engine or Flower/Ray start, first-call compilation) and peak RSS. Machines drift
between runs (up to 2.7x): compare rows within one invocation only. Results: RESULTS.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import subprocess
import sys
import threading
import time

import numpy as np
import torch
import torch.nn.functional as F

CLIENTS, SAMPLES, EPOCHS, BATCH, LR = 100, 60, 5, 10, 0.05
MODELS = {"cnn-fedavg": {}, "mlp": {"hidden": [200, 200, 200]}}
DEFAULT_VARIANTS = (
    "loop,sequential,sequential-w2,vmap-10,vmap-25,vmap-10-compiled,vmap-25-compiled,flower"
)
PFL_PYTHON = os.environ.get("PFL_PYTHON", "pflenv/bin/python")


def flops_per_round(model: str) -> float:
    """Analytic: 3 x forward FLOPs (conv/linear MACs x 2) x samples x epochs x clients."""
    if model == "cnn-fedavg":
        macs = 24 * 24 * 32 * 25 + 8 * 8 * 64 * 32 * 25 + 1024 * 512 + 512 * 10
    else:
        macs = 784 * 200 + 200 * 200 + 200 * 200 + 200 * 10
    return 3.0 * 2 * macs * CLIENTS * SAMPLES * EPOCHS


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(CLIENTS * SAMPLES, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (CLIENTS * SAMPLES,), generator=g)
    return x, y


class TreeRss:
    """Peak RSS (MB) of this process plus all its descendants, sampled from /proc."""

    def __init__(self, period: float = 0.2) -> None:
        self.period, self.peak = period, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _sample() -> float:
        children: dict[int, list[int]] = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        s = f.read()
                    children.setdefault(int(s[s.rfind(")") + 2 :].split()[1]), []).append(int(d))
                except (OSError, ValueError, IndexError):
                    pass
        total, stack = 0, [os.getpid()]
        while stack:
            pid = stack.pop()
            stack.extend(children.get(pid, []))
            try:
                with open(f"/proc/{pid}/status") as f:
                    total += next(int(ln.split()[1]) for ln in f if ln.startswith("VmRSS:"))
            except (OSError, StopIteration):
                pass
        return total / 1024.0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(self.period)

    def __enter__(self) -> TreeRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def run_engine(
    model_name: str,
    rounds: int,
    vmap_chunk: int | None = None,
    compile: bool = False,
    workers: int = 1,
) -> list[float]:
    """Times of the warm-up round (set-up included) and then ``rounds`` rounds."""
    t_setup = time.perf_counter()
    from fedretain.algorithms import build_algorithm
    from fedretain.core.client import Clients, LocalSpec
    from fedretain.core.task import Task
    from fedretain.data.base import Dataset
    from fedretain.engines.round import Rounds
    from fedretain.engines.sequential import SequentialEngine
    from fedretain.engines.vmap import VmapEngine
    from fedretain.losses import get_loss
    from fedretain.models import build_model

    x, y = make_data()
    ds = Dataset("bench", x, y, x[:10], y[:10], num_classes=10)
    parts = [np.arange(c * SAMPLES, (c + 1) * SAMPLES) for c in range(CLIENTS)]
    torch.manual_seed(0)
    model = build_model(model_name, (1, 28, 28), 10, **MODELS[model_name])
    task = Task(model, get_loss("ce"), 10)
    algo = build_algorithm("fedavg")
    clients = Clients(ds, parts, LocalSpec(BATCH, EPOCHS), seed=0)
    if vmap_chunk is None:
        engine = Rounds(algo, task, clients, SequentialEngine(workers))
    else:
        engine = Rounds(algo, task, clients, VmapEngine(task, vmap_chunk, compile))
    state = algo.server_init(*task.init())
    times = []
    for r in range(rounds + 1):
        t0 = t_setup if r == 0 else time.perf_counter()
        state, _ = engine.run_round(state, r, LR, CLIENTS)
        times.append(time.perf_counter() - t0)
    return times


def run_loop(model_name: str, rounds: int, channels_last: bool = False) -> list[float]:
    t_setup = time.perf_counter()
    from fedretain.core.client import batch_plan
    from fedretain.models import build_model

    x, y = make_data()
    torch.manual_seed(0)
    model = build_model(model_name, (1, 28, 28), 10, **MODELS[model_name])
    if channels_last:  # NHWC activations and convolution weights
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    params = list(model.parameters())
    global_params = [p.detach().clone() for p in params]
    times = []
    for r in range(rounds + 1):
        t0 = t_setup if r == 0 else time.perf_counter()
        acc = [torch.zeros_like(p) for p in global_params]
        for c in range(CLIENTS):
            with torch.no_grad():
                for p, g in zip(params, global_params, strict=True):
                    p.copy_(g)
            xc, yc = x[c * SAMPLES : (c + 1) * SAMPLES], y[c * SAMPLES : (c + 1) * SAMPLES]
            for idx in batch_plan(SAMPLES, BATCH, 0, r, c, epochs=EPOCHS):
                i = torch.from_numpy(idx)
                opt.zero_grad(set_to_none=True)
                F.cross_entropy(model(xc[i]), yc[i]).backward()
                opt.step()
            with torch.no_grad():
                for a, p in zip(acc, params, strict=True):
                    a.add_(p, alpha=1.0 / CLIENTS)
        global_params = acc
        times.append(time.perf_counter() - t0)
    return times


def plain_model(model_name: str) -> torch.nn.Module:
    """The zoo model as plain torch layers (for pfl), same shapes and initialisation order."""
    from torch import nn

    torch.manual_seed(0)
    if model_name == "cnn-fedavg":
        return nn.Sequential(
            nn.Conv2d(1, 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
            nn.MaxPool2d(2), nn.Flatten(), nn.Linear(1024, 512), nn.ReLU(), nn.Linear(512, 10),
        )  # fmt: skip
    widths = [784, *MODELS[model_name]["hidden"], 10]
    layers: list[nn.Module] = [nn.Flatten()]
    for i, (a, b) in enumerate(itertools.pairwise(widths)):
        layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(widths) - 2 else [])
    return nn.Sequential(*layers)


def time_pfl(
    net: torch.nn.Module,
    data: dict[int, list[torch.Tensor]],
    cohort: int,
    rounds: int,
    t_setup: float,
    lr: float = LR,
    epochs: int = EPOCHS,
    batch: int = BATCH,
) -> list[float]:
    """Round times in pfl-research 0.6.0's simulator (PyTorch backend, one process): FedAvg
    (central SGD with lr 1 on the averaged update) over ``cohort`` of the users ``data`` holds
    (user -> [inputs, labels]), local SGD (``lr``, ``epochs``, ``batch``), ``net`` mapping
    inputs to logits. The first time is the warm-up round counted from ``t_setup``, then
    ``rounds`` rounds. pfl iterates each user's data in order and weights users equally."""
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.dataset import Dataset
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
    from pfl.metrics import Metrics
    from pfl.model.pytorch import PyTorchModel

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def loss(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> torch.Tensor:
            return F.cross_entropy(self(x), y.long())

        def metrics(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> dict:
            return {}  # no evaluation is timed

    class Timer(TrainingProcessCallback):
        def __init__(self) -> None:
            self.stamps: list[float] = []

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            self.stamps.append(time.perf_counter())
            return False, Metrics()

    fed = FederatedDataset(
        lambda u: Dataset(data[u], user_id=u), get_user_sampler("minimize_reuse", list(data))
    )
    wrapped = Net()
    model = PyTorchModel(
        wrapped,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(wrapped.parameters(), lr=1.0),
    )
    timer = Timer()
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=rounds + 1,
            evaluation_frequency=10**9,
            train_cohort_size=cohort,
            val_cohort_size=None,
        ),
        backend=SimulatedBackend(training_data=fed, val_data=fed),
        model=model,
        model_train_params=NNTrainHyperParams(
            local_learning_rate=lr, local_num_epochs=epochs, local_batch_size=batch
        ),
        model_eval_params=NNEvalHyperParams(local_batch_size=batch),
        callbacks=[timer],
    )
    return [timer.stamps[0] - t_setup, *np.diff(timer.stamps).tolist()]


def run_pfl(model_name: str, rounds: int) -> list[float]:
    """The engine workload in pfl-research's simulator: every client every round."""
    t_setup = time.perf_counter()
    x, y = make_data()
    data = {
        c: [x[c * SAMPLES : (c + 1) * SAMPLES], y[c * SAMPLES : (c + 1) * SAMPLES]]
        for c in range(CLIENTS)
    }
    return time_pfl(plain_model(model_name), data, CLIENTS, rounds, t_setup)


def run_flower(model_name: str, rounds: int) -> tuple[list[float], float, float]:
    """The same round shape on Flower's simulation engine (2 workers x 1 CPU): Fashion-MNIST,
    100 clients of 60 samples (``partition=fixed``), every client in every round. Returns the
    round times (warm-up first), Flower's start-up seconds and the process tree's peak RSS."""
    from fedretain.flower import time_simulation
    from fedretain.recipe.config import make_config

    values = {
        "dataset": "fashion-mnist",
        "partition": "fixed",
        "partition.per_client": SAMPLES,
        "clients": CLIENTS,
        "clients_per_round": CLIENTS,
        "local_epochs": EPOCHS,
        "batch_size": BATCH,
        "lr": LR,
        "model": model_name,
        "threads": 1,
        "engine": "flower",
        "engine.client_cpus": 1.0,
        **{f"model.{k}": v for k, v in MODELS[model_name].items()},
    }
    res = time_simulation(make_config(values), rounds=rounds + 1)
    return res["round_s"], res["startup_s"], res["peak_rss_mb"]


def peak_matmul_gflops(sides: tuple[int, ...] = (4096,)) -> float:
    """The best fp32 rate (GFLOP/s) of square matmuls of these sides: per side, the median of
    5 timings of about 2 GFLOP each (one call at 4096) after a warm-up. The tables of
    RESULTS.md use 4096 alone; ``cnn_kernels.py`` takes 512-4096 (in-cache sizes run a few
    percent faster)."""
    rates = []
    for n in sides:
        a, b = torch.randn(n, n), torch.randn(n, n)
        reps = max(1, 2**31 // (2 * n**3))
        torch.matmul(a, b)
        ts = []
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.matmul(a, b)
            ts.append(time.perf_counter() - t0)
        rates.append(2 * n**3 * reps / statistics.median(ts) / 1e9)
    return max(rates)


LIB = "/usr/lib/x86_64-linux-gnu"
ALLOCATORS = {  # variant suffix -> environment of the variant's process
    "jemalloc": {"LD_PRELOAD": f"{LIB}/libjemalloc.so.2"},  # Debian libjemalloc2
    "jemalloc-tuned": {  # the settings Intel's PyTorch CPU tuning guide gives
        "LD_PRELOAD": f"{LIB}/libjemalloc.so.2",
        "MALLOC_CONF": "oversize_threshold:1,background_thread:true,metadata_thp:auto,"
        "dirty_decay_ms:-1,muzzy_decay_ms:-1",
    },
    "tcmalloc": {"LD_PRELOAD": f"{LIB}/libtcmalloc_minimal.so.4"},  # libtcmalloc-minimal4
}


def one(model: str, variant: str, rounds: int, threads: int) -> dict:
    torch.set_num_threads(threads)
    variant = variant.split("+")[0]  # an allocator suffix acts through the environment
    with TreeRss() as rss:
        if variant in ("loop", "loop-cl"):
            times = run_loop(model, rounds, channels_last=variant == "loop-cl")
        elif variant in ("sequential", "engine"):
            times = run_engine(model, rounds)
        elif variant.startswith("sequential-w"):
            times = run_engine(model, rounds, workers=int(variant.removeprefix("sequential-w")))
        elif variant == "flower":
            times, flower_startup, flower_rss = run_flower(model, rounds)
        elif variant == "pfl":
            times = run_pfl(model, rounds)
        elif variant.startswith("vmap-"):
            compiled = variant.endswith("-compiled")
            times = run_engine(model, rounds, int(variant.split("-")[1]), compiled)
        else:
            raise SystemExit(
                f"unknown variant {variant!r}: loop, sequential, sequential-w<N>, vmap-<K>, "
                "flower, pfl"
            )
    med = statistics.median(times[1:])
    startup = times[0] - med
    if variant == "flower":  # Ray and the virtual nodes start before the first round
        startup += flower_startup
    return {
        "model": model,
        "variant": variant,
        "threads": threads,
        "round_s": times[1:],
        "median_s": med,
        "startup_s": startup,
        "gflops": flops_per_round(model) / med / 1e9,
        "peak_rss_mb": max(rss.peak, flower_rss) if variant == "flower" else rss.peak,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--model", choices=list(MODELS))
    ap.add_argument("--variant", help="one variant, printed as JSON (used by the table)")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help="comma-separated, for the table")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds after one warm-up")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pfl-python", default=PFL_PYTHON, help="python with pfl-research 0.6.0")
    args = ap.parse_args()
    if args.model and args.variant:
        print("RESULT " + json.dumps(one(args.model, args.variant, args.rounds, args.threads)))
        return
    torch.set_num_threads(args.threads)
    peak = peak_matmul_gflops()
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__}, {args.threads} threads, fp32 matmul peak {peak:.0f} GFLOP/s "
        "(same run)"
    )
    print(
        "| model | variant | s/round (median) | GFLOP/s | % of matmul peak | x loop "
        "| start-up s | peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for model in [args.model] if args.model else list(MODELS):
        loop_s = None
        for variant in args.variants.split(","):
            python = args.pfl_python if variant.split("+")[0] == "pfl" else sys.executable
            cmd = [python, __file__, "--model", model, "--variant", variant]
            cmd += ["--rounds", str(args.rounds), "--threads", str(args.threads)]
            env = dict(os.environ)
            alloc = variant.partition("+")[2]
            if alloc:
                if alloc not in ALLOCATORS or not os.path.exists(ALLOCATORS[alloc]["LD_PRELOAD"]):
                    print(f"| {model} | {variant} | no {alloc} here | | | | | |", flush=True)
                    continue
                env.update(ALLOCATORS[alloc])
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            if proc.returncode != 0 or "RESULT " not in proc.stdout:
                why = (proc.stderr.strip().splitlines() or ["failed"])[-1]
                print(f"| {model} | {variant} | {why} | | | | | |", flush=True)
                continue
            res = json.loads(proc.stdout.split("RESULT ", 1)[1])
            if variant == "loop" and loop_s is None:
                loop_s = res["median_s"]
            ratio = f"{loop_s / res['median_s']:.2f}" if loop_s else "-"
            print(
                f"| {model} | {variant} | {res['median_s']:.2f} | {res['gflops']:.1f} | "
                f"{100 * res['gflops'] / peak:.0f}% | {ratio} | {res['startup_s']:.1f} | "
                f"{res['peak_rss_mb']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
