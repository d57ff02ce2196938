"""The layer-by-layer Fisher equals the per-sample-gradient Fisher on every model of the zoo."""

import copy
from dataclasses import replace

import pytest
import torch
from torch import nn
from torch.func import vmap

from fedretain.core.fisher import fisher_diag, fisher_diag_per_sample
from fedretain.core.task import Task
from fedretain.losses.ce import ce
from fedretain.losses.tce import tce
from fedretain.models import build_model

CLASSES = 5

# every zoo model with its norm options, on inputs as small as it takes
ZOO = [
    ("mlp", (1, 6, 6), {}),
    ("mlp", (7,), {"hidden": []}),
    ("mlp", (7,), {"projection": 4}),
    ("cnn", (1, 28, 28), {}),
    ("cnn2", (1, 10, 10), {}),
    ("cnn-fedavg", (1, 16, 16), {}),
    ("lenet5", (3, 16, 16), {}),
    ("vgg11", (3, 8, 8), {"norm": "group"}),
    ("vgg11", (3, 8, 8), {"norm": "batch"}),
    ("vgg11", (3, 8, 8), {"norm": "none"}),
    ("resnet9", (3, 8, 8), {}),
    ("resnet9", (3, 8, 8), {"norm": "group"}),
    ("resnet9", (3, 8, 8), {"norm": "batch"}),
    ("resnet18", (3, 8, 8), {"norm": "group"}),
    ("resnet18", (3, 8, 8), {"norm": "batch"}),
    ("resnet18", (3, 8, 8), {"norm": "none"}),
    ("resnet20", (3, 8, 8), {"norm": "group"}),
    ("resnet20", (3, 8, 8), {"norm": "batch"}),
    ("resnet20", (3, 8, 8), {"norm": "none", "shortcut": "b"}),
]


def _ids(case):
    name, _, kw = case
    return "-".join([name, *(f"{k}={v}" for k, v in kw.items())])


def _setup(name, shape, kw, loss=ce, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    model = build_model(name, shape, CLASSES, **kw).to(dtype)
    task = Task(model, loss, CLASSES)
    params, buffers = task.init()
    g = torch.Generator().manual_seed(seed + 1)
    # move off the initialisation (Fixup's zero head and branches give zero gradients there)
    params = {
        k: v + 0.05 * torch.randn(v.shape, generator=g, dtype=dtype) for k, v in params.items()
    }
    buffers = {  # BatchNorm statistics other than (0, 1)
        k: v + 0.5 * torch.rand(v.shape, generator=g, dtype=dtype) if v.is_floating_point() else v
        for k, v in buffers.items()
    }
    n = 5
    data = {
        "x": torch.randn(n, *shape, generator=g, dtype=dtype),
        "y": torch.randint(0, CLASSES, (n,), generator=g),
        "w": torch.tensor([1.0, 1, 0, 1, 0], dtype=dtype),  # two padded samples
        "label_mask": torch.tensor([True, True, False, True, False]),
    }
    data["x"][2] = 0.0  # padding is zeros, as the engines pad
    data["x"][4] = 0.0
    return task, params, buffers, data


# float64: the two paths agree to rounding, relative errors up to 3.5e-14 seen (the zoo's
# deepest convolutions); 1e-10 keeps >1000x over that and is far below any wrong term
FP64_TOL = 1e-10


def _assert_close(fast, slow, tol):
    assert fast.keys() == slow.keys()
    for k in slow:
        scale = slow[k].abs().max().clamp_min(1e-30)
        err = float((fast[k] - slow[k]).abs().max() / scale)
        assert err <= tol, f"{k}: relative error {err:.2e}"


@pytest.mark.parametrize("case", ZOO, ids=_ids)
def test_fast_fisher_equals_the_per_sample_fisher_on_the_zoo(case):
    task, params, buffers, data = _setup(*case)
    _assert_close(
        fisher_diag(task, params, buffers, data),
        fisher_diag_per_sample(task, params, buffers, data),
        FP64_TOL,
    )


@pytest.mark.parametrize(
    ("case", "loss", "chunk"),
    [
        (("lenet5", (3, 16, 16), {}), ce, 1),
        (("lenet5", (3, 16, 16), {}), tce, 2),
        (("resnet20", (3, 8, 8), {"norm": "group"}), tce, 2),
        (("resnet9", (3, 8, 8), {}), tce, 2),  # Fixup scalars: the per-sample pass
    ],
    ids=["lenet5-ce-1", "lenet5-tce-2", "resnet20-tce-2", "resnet9-tce-2"],
)
def test_fast_fisher_in_chunks_and_with_tce(case, loss, chunk):
    task, params, buffers, data = _setup(*case, loss=loss)
    _assert_close(
        fisher_diag(task, params, buffers, data, chunk),
        fisher_diag_per_sample(task, params, buffers, data),
        FP64_TOL,
    )


def test_fast_fisher_in_float32_agrees_to_rounding():
    """Both float32 paths against the per-sample Fisher of the same model in float64: seen
    (AVX-512 and AVX2 kernels, 1 and 2 threads) relative errors up to 2.4e-6 (fast) and 2.0e-6
    (per sample), the grouped convolutions' sums over many products; the bound keeps >= 10x."""
    task, params, buffers, data = _setup("resnet20", (3, 8, 8), {}, dtype=torch.float32)
    task64 = replace(task, model=copy.deepcopy(task.model).double())
    ref = fisher_diag_per_sample(task64, *(_double(t) for t in (params, buffers, data)))
    for fisher in (fisher_diag, fisher_diag_per_sample):
        got = fisher(task, params, buffers, data)
        _assert_close({k: v.double() for k, v in got.items()}, ref, 3e-5)


def _double(tree):
    return {k: v.double() if v.is_floating_point() else v for k, v in tree.items()}


def test_fast_fisher_with_soft_labels():
    task, params, buffers, data = _setup("cnn-fedavg", (1, 16, 16), {})
    data["y"] = torch.softmax(torch.randn(5, CLASSES, dtype=torch.float64), dim=-1)
    del data["label_mask"]
    _assert_close(
        fisher_diag(task, params, buffers, data),
        fisher_diag_per_sample(task, params, buffers, data),
        FP64_TOL,
    )


class _Tokens(nn.Module):
    """Linear layers on several positions per sample, a frozen layer and an unused one."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(3, 4)
        self.frozen = nn.Linear(4, 4)
        self.frozen.weight.requires_grad_(False)
        self.unused = nn.Linear(2, 2)
        self.head = nn.Linear(4, CLASSES)

    def forward(self, x):
        h = torch.tanh(self.frozen(torch.tanh(self.embed(x.reshape(x.shape[0], 6, 3)))))
        return self.head(h.mean(dim=1))


class _Twice(nn.Module):
    """One Linear called twice in a forward pass: it takes the generic path."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(6, 6)
        self.head = nn.Linear(6, CLASSES)

    def forward(self, x):
        return self.head(torch.tanh(self.inner(torch.tanh(self.inner(x.flatten(1)[:, :6])))))


@pytest.mark.parametrize("module", [_Tokens, _Twice])
def test_fast_fisher_on_positions_frozen_unused_and_repeated_layers(module):
    torch.manual_seed(0)
    task = Task(module().double(), ce, CLASSES)
    params, buffers = task.init()
    _, _, _, data = _setup("mlp", (18,), {})
    fast = fisher_diag(task, params, buffers, data)
    _assert_close(fast, fisher_diag_per_sample(task, params, buffers, data), FP64_TOL)
    if module is _Tokens:
        assert "frozen.weight" not in fast and "frozen.bias" in fast
        assert float(fast["unused.weight"].abs().sum()) == 0.0


@pytest.mark.parametrize(
    "case",
    [("lenet5", (3, 16, 16), {}), ("resnet20", (3, 8, 8), {}), ("resnet9", (3, 8, 8), {})],
    ids=_ids,
)
def test_fast_fisher_under_vmap_over_clients(case):
    task, params, buffers, data = _setup(*case)
    g = torch.Generator().manual_seed(7)
    stacked = {
        k: torch.stack([v, v + 0.01 * torch.randn(v.shape, generator=g, dtype=v.dtype)])
        for k, v in params.items()
    }
    both = {k: torch.stack([v, v.roll(1, 0)]) for k, v in data.items() if k != "label_mask"}
    both["label_mask"] = torch.stack([data["label_mask"], ~data["label_mask"]])
    together = vmap(lambda p, d: fisher_diag(task, p, buffers, d))(stacked, both)
    for c in range(2):
        alone = fisher_diag_per_sample(
            task, {k: v[c] for k, v in stacked.items()}, buffers, {k: v[c] for k, v in both.items()}
        )
        _assert_close({k: v[c] for k, v in together.items()}, alone, FP64_TOL)


def test_batchnorm_on_batch_statistics_falls_back_to_per_sample_gradients(monkeypatch):
    from fedretain.core import fisher

    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 2, 3),
        nn.BatchNorm2d(2, track_running_stats=False),
        nn.Flatten(),
        nn.Linear(32, 5),
    )
    task = Task(model.double(), ce, CLASSES)
    params, buffers = task.init()
    _, _, _, data = _setup("mlp", (1, 6, 6), {})
    calls = []
    reference = fisher.fisher_diag_per_sample
    monkeypatch.setattr(
        fisher, "fisher_diag_per_sample", lambda *a, **k: calls.append(1) or reference(*a, **k)
    )
    _assert_close(
        fisher_diag(task, params, buffers, data), reference(task, params, buffers, data), 1e-12
    )
    assert calls


def test_fedcurv_reexports_the_fast_fisher():
    import importlib

    assert importlib.import_module("fedretain.algorithms.fedcurv").fisher_diag is fisher_diag
