"""The model zoo: shapes, the features/head split, functorch (grad, vmap), init, sizes, errors."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fedretain.errors import ConfigError
from fedretain.models import MODELS, build_model, functional_method, model_params
from fedretain.registry import Entry

MNIST = (1, 28, 28)
CIFAR = (3, 32, 32)
TINY = (3, 64, 64)
NUM_CLASSES = 10
BATCH = 2

# (name, input shape, params) on a fitting input; norm group/none variants (vmap-able).
CASES = [
    ("mlp", MNIST, {}),
    ("cnn", MNIST, {}),
    ("cnn2", MNIST, {}),
    ("cnn-fedavg", MNIST, {}),
    ("lenet5", CIFAR, {}),
    ("lenet-dlg", MNIST, {}),
    ("vgg11", CIFAR, {"norm": "group"}),
    ("vgg11", CIFAR, {"norm": "none"}),
    ("resnet9", CIFAR, {"norm": "group"}),
    ("resnet9", CIFAR, {"norm": "none"}),  # Fixup: see test_resnet9_fixup
    ("resnet18", CIFAR, {"norm": "group"}),
    ("resnet18", CIFAR, {"norm": "none"}),
    ("resnet20", CIFAR, {"norm": "group"}),
    ("resnet20", CIFAR, {"norm": "none"}),
    ("resnet20", TINY, {"norm": "group"}),
    ("resnet20", CIFAR, {"norm": "group", "shortcut": "b"}),
    ("densenet121", CIFAR, {"norm": "group", "groups": 4, "pool": "flatten"}),  # FedReg's CT
    ("vit", CIFAR, {"patch": 8, "dim": 32, "depth": 2, "heads": 4, "size": 32}),
]
BATCHNORM = ["vgg11", "resnet9", "resnet18", "resnet20", "densenet121"]


def _id(case: tuple) -> str:
    name, shape, params = case
    extra = "-".join(str(v) for v in params.values())
    return f"{name}-{'x'.join(map(str, shape))}" + (f"-{extra}" if extra else "")


def _is_fixup(name: str, params: dict) -> bool:
    return name == "resnet9" and params.get("norm", "none") == "none"


def _build(name: str, shape: tuple[int, ...], params: dict, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(name, shape, NUM_CLASSES, **params)


def _data(shape: tuple[int, ...], batch: int = BATCH, seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, *shape, generator=g), torch.randint(
        0, NUM_CLASSES, (batch,), generator=g
    )


def _params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def _loss_fn(model: nn.Module):
    def loss(params, x, y):
        logits = functional_call(model, params, (x,))
        return F.cross_entropy(logits, y)

    return loss


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


# --------------------------------------------------------------------------- registry


def test_registry_names_and_infos():
    from fedretain.registry import kind

    # kind() loads every provider: the zoo's models and FedCIL's ACGAN (fedretain.continual.zoo)
    assert set(kind("model")) == {
        "mlp", "cnn", "cnn2", "cnn-fedavg", "lenet5", "lenet-dlg", "vgg11", "resnet9", "resnet18",
        "resnet20", "densenet121", "vit", "acgan",
    }  # fmt: skip
    for name, info in MODELS.items():
        assert isinstance(info, Entry)
        assert info.name == name
        assert info.description and "\n" not in info.description
        assert callable(info.factory)


def test_model_params():
    common = {"projection": None}  # every model: MOON's projection head (None: none)
    assert model_params("mlp") == {"hidden": (200, 200, 200), **common}
    for name in ("cnn", "cnn2", "cnn-fedavg", "lenet5"):
        assert model_params(name) == common
    assert model_params("lenet-dlg") == {"activation": "sigmoid", **common}
    for name in ("vgg11", "resnet18"):
        assert model_params(name) == {"norm": "group", "groups": 2, **common}
    assert model_params("resnet9") == {"norm": "none", "groups": 2, **common}
    assert model_params("resnet20") == {"norm": "group", "groups": 2, "shortcut": "a", **common}
    assert model_params("densenet121") == {"norm": "batch", "groups": 32, "pool": "avg", **common}
    vit = {"patch": 16, "dim": 768, "depth": 12, "heads": 12, "mlp_ratio": 4, "size": 224}
    assert model_params("vit") == {**vit, "weights": "", **common}


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_projection_head_sits_between_features_and_head(case):
    name, shape, params = case
    plain = _build(name, shape, params)
    model = _build(name, shape, {**params, "projection": 16}).eval()
    x, _ = _data(shape)
    d = plain.head.in_features
    assert [(m.in_features, m.out_features) for m in model.projection if hasattr(m, "weight")] == [
        (d, d),
        (d, 16),
    ]
    assert model.head.in_features == 16 and model.head.out_features == NUM_CLASSES
    feats = model.features(x)
    assert feats.shape == (BATCH, 16)
    torch.testing.assert_close(model(x), model.head(feats), rtol=0, atol=0)
    assert [n for n, _ in model.named_parameters()][-2:] == ["head.weight", "head.bias"]
    assert _count(model) == _count(plain) - _count(plain.head) + (d * d + d) + (d * 16 + 16) + (
        16 * NUM_CLASSES + NUM_CLASSES
    )


# --------------------------------------------------------------------------- forward / features


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_forward_is_head_of_features(case):
    name, shape, params = case
    model = _build(name, shape, params).eval()  # eval: cnn2's dropout draws fresh masks
    x, _ = _data(shape)
    logits = model(x)
    assert logits.shape == (BATCH, NUM_CLASSES)
    assert isinstance(model.head, nn.Linear) and model.head.out_features == NUM_CLASSES
    feats = model.features(x)
    assert feats.shape == (BATCH, model.head.in_features)
    torch.testing.assert_close(logits, model.head(feats), rtol=0, atol=0)
    assert [n for n, _ in model.named_parameters()][-2:] == ["head.weight", "head.bias"]
    if name.startswith("resnet"):
        assert isinstance(model.blocks, nn.ModuleList)
        h = x
        for block in model.blocks:
            h = block(h)
        torch.testing.assert_close(feats, model.pool(h), rtol=0, atol=0)


def test_resnet_blocks_are_stem_then_stages():
    r18 = _build("resnet18", CIFAR, {})
    assert len(r18.blocks) == 5  # FedMLB's B0..B4
    assert len(_build("resnet20", CIFAR, {}).blocks) == 4
    assert len(_build("resnet9", CIFAR, {}).blocks) == 4
    x, _ = _data(CIFAR)
    widths = [r18.blocks[0](x).shape[1]]
    h = r18.blocks[0](x)
    for stage in r18.blocks[1:]:
        h = stage(h)
        widths.append(h.shape[1])
    assert widths == [64, 64, 128, 256, 512]
    assert h.shape[-2:] == (4, 4)


# --------------------------------------------------------------------------- functorch


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_grad_through_functional_call(case):
    name, shape, params = case
    model = _build(name, shape, params)
    x, y = _data(shape)
    p = _params(model)
    grads = grad(_loss_fn(model))(p, x, y)
    assert grads.keys() == p.keys()
    for n, g in grads.items():
        assert g.shape == p[n].shape
        assert torch.isfinite(g).all(), n
        if _is_fixup(name, params) and not n.startswith("head."):
            # Fixup's head starts at zero: nothing flows below it at init
            assert not g.any(), n
        else:
            assert g.abs().sum() > 0, n


def _rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    """``||a - ref|| / ||ref||`` in float64 (0 when both are 0)."""
    a, ref = a.double(), ref.double()
    return ((a - ref).norm() / ref.norm().clamp_min(1e-300)).item()


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_vmap_over_clients_equals_loop(case):
    """vmap over clients gives each client its own gradient: exactly (float64, where the
    batched and unbatched kernels agree to rounding), and in float32 to float32's accuracy
    measured against the float64 gradient."""
    name, shape, params = case
    if name in ("vgg11", "resnet9", "resnet18"):
        shape = (3, 16, 16)  # the same layers and batching rules as on 32x32, a quarter the time
    model = _build(name, shape, params).eval()  # eval: deterministic dropout for the comparison
    model64 = copy.deepcopy(model).double()
    base = _params(model)
    clients = 3
    g = torch.Generator().manual_seed(2)
    # distinct clients: perturb each copy by ~10% (Fixup's zero head would otherwise hide
    # differences): mixing up clients gives errors of order 1 in every check below
    scale = {n: v.abs().mean().item() or 0.01 for n, v in base.items()}
    copies = [
        {
            n: v + 0.1 * scale[n] * torch.randn(v.shape, generator=g, dtype=v.dtype)
            for n, v in base.items()
        }
        for _ in range(clients)
    ]
    data = [_data(shape, seed=10 + k) for k in range(clients)]
    xs = torch.stack([x for x, _ in data])
    ys = torch.stack([y for _, y in data])

    def objective(m: nn.Module):
        def f(p, x, y):
            logits = functional_call(m, p, (x,))
            return F.cross_entropy(logits, y), logits

        return f

    def batched(m: nn.Module, dtype: torch.dtype):
        stacked = {n: torch.stack([c[n] for c in copies]).to(dtype) for n in base}
        return vmap(grad(objective(m), has_aux=True))(stacked, xs.to(dtype), ys)

    grads64, logits64 = batched(model64, torch.float64)
    grads32, logits32 = batched(model, torch.float32)
    assert logits32.shape == (clients, BATCH, NUM_CLASSES)
    for k in range(clients):
        ref_grads, ref_logits = grad(objective(model64), has_aux=True)(
            {n: v.double() for n, v in copies[k].items()}, xs[k].double(), ys[k]
        )
        # float64: the batching rules are exact; what is left is float64 rounding (1e-16)
        # amplified by cancellation in a conv's weight gradient (at most ~1e5 seen in float32)
        assert _rel_err(logits64[k], ref_logits) < 1e-10
        for n in base:
            assert _rel_err(grads64[n][k], ref_grads[n]) < 1e-9, n
        # float32 against the float64 gradient. Seen on AVX-512 and AVX2 kernels, one thread
        # and several (ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2 OMP_NUM_THREADS=1):
        # logits 1e-6; the whole gradient <= 4.5e-4; one tensor <= 4.3e-3 (resnet18 without
        # norm, a deep conv's bias gradient summing terms that nearly cancel, where the
        # batched (grouped) conv kernel differs from the plain one). A mixed-up client is off
        # by order 1; the bounds below keep 10x over the worst seen.
        assert _rel_err(logits32[k], ref_logits) < 1e-4
        whole = math.sqrt(
            sum((grads32[n][k].double() - ref_grads[n]).square().sum().item() for n in base)
            / sum(ref_grads[n].square().sum().item() for n in base)
        )
        assert whole < 5e-3
        for n in base:
            assert _rel_err(grads32[n][k], ref_grads[n]) < 5e-2, n


def test_cnn2_dropout_under_vmap_needs_randomness():
    model = _build("cnn2", MNIST, {}).train()
    p = _params(model)
    stacked = {n: torch.stack([v, v]) for n, v in p.items()}
    x, _ = _data(MNIST)

    def fwd(p, x):
        return functional_call(model, p, (x,))

    out = vmap(fwd, in_dims=(0, None), randomness="different")(stacked, x)
    assert out.shape == (2, BATCH, NUM_CLASSES)
    assert not torch.equal(out[0], out[1])  # independent dropout masks per client
    with pytest.raises(RuntimeError):
        vmap(fwd, in_dims=(0, None))(stacked, x)


@pytest.mark.parametrize("name", ["cnn-fedavg", "resnet20"])
def test_functional_method_features(name):
    shape = MNIST if name == "cnn-fedavg" else CIFAR
    model = _build(name, shape, {}).eval()
    p = _params(model)
    x, _ = _data(shape)
    feats = functional_method(model, p, "features", x)
    torch.testing.assert_close(feats, model.features(x))
    stacked = {n: torch.stack([v, 2 * v]) for n, v in p.items()}
    out = vmap(lambda q: functional_method(model, q, "features", x))(stacked)
    torch.testing.assert_close(out[0], feats, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------- BatchNorm


@pytest.mark.parametrize("name", BATCHNORM)
def test_batchnorm_functional_grad(name):
    model = _build(name, CIFAR, {"norm": "batch"}).train()
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    assert bns
    assert not any(isinstance(m, nn.GroupNorm) for m in model.modules())
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    assert any(n.endswith("running_mean") for n in buffers)
    assert any(n.endswith("running_var") for n in buffers)
    assert any(n.endswith("num_batches_tracked") for n in buffers)
    x, y = _data(CIFAR, batch=4)
    p = _params(model)

    def loss(params, x, y):
        # training mode updates the running statistics in place: as fedretain.core.task does,
        # pass a copy made inside the transformed function (mutating a captured tensor fails)
        new = {n: b.clone() for n, b in buffers.items()}
        logits = functional_call(model, {**params, **new}, (x,))
        return F.cross_entropy(logits, y), new

    grads, new_buffers = grad(loss, has_aux=True)(p, x, y)
    for n, g in grads.items():
        assert torch.isfinite(g).all(), n
        assert g.abs().sum() > 0, n
    mean = next(n for n in buffers if n.endswith("running_mean"))
    assert not torch.equal(new_buffers[mean], buffers[mean])
    assert torch.equal(buffers[mean], dict(model.named_buffers())[mean])  # module untouched
    assert all(int(v) == 1 for n, v in new_buffers.items() if n.endswith("num_batches_tracked"))


@pytest.mark.parametrize("name", BATCHNORM)
def test_group_norm_uses_groups(name):
    model = _build(name, CIFAR, {"norm": "group", "groups": 4})
    gns = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert gns and all(m.num_groups == 4 for m in gns)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    assert not list(model.buffers())
    none = _build(name, CIFAR, {"norm": "none"})
    assert not any(isinstance(m, nn.GroupNorm | nn.BatchNorm2d) for m in none.modules())


# --------------------------------------------------------------------------- Fixup ResNet-9


def test_resnet9_fixup_init_and_training():
    model = _build("resnet9", CIFAR, {})  # default norm="none": Fixup
    assert not any(isinstance(m, nn.GroupNorm | nn.BatchNorm2d) for m in model.modules())
    p = _params(model)
    assert not p["head.weight"].any() and not p["head.bias"].any()
    residual_last = [n for n in p if n.endswith("conv2.weight")]
    residual_first = [n for n in p if n.endswith("conv1.weight")]
    assert len(residual_last) == 2 and all(not p[n].any() for n in residual_last)
    # branch convs: He (fan-out) std scaled by L^(-1/(2m-2)) = 2^(-1/2)
    for n in residual_first:
        w = p[n]
        he = math.sqrt(2.0 / (w.shape[0] * 9))
        assert abs(w.std().item() / (he * 2**-0.5) - 1) < 0.05, n
    scalars = [n for n, v in p.items() if v.shape == (1,)]
    assert len(scalars) == 23  # 3 per conv unit (4), 5 per residual block (2), 1 before head

    x, y = _data((3, 16, 16), batch=4)
    loss_fn = _loss_fn(model)
    first = loss_fn(p, x, y).item()
    assert first == pytest.approx(math.log(NUM_CLASSES), rel=1e-6)  # zero head: uniform
    for _ in range(3):
        g = grad(loss_fn)(p, x, y)
        p = {n: v - 0.05 * g[n] for n, v in p.items()}
    assert loss_fn(p, x, y).item() < first
    g = grad(loss_fn)(p, x, y)
    for n, v in g.items():  # after a few steps every parameter receives a gradient
        assert torch.isfinite(v).all() and v.abs().sum() > 0, n


# --------------------------------------------------------------------------- init and sizes


@pytest.mark.parametrize("name", list(MODELS))
def test_init_is_deterministic_under_seed(name):
    shape = MNIST if name in ("mlp", "cnn", "cnn2", "cnn-fedavg", "lenet-dlg") else CIFAR
    a = _build(name, shape, {}, seed=5).state_dict()
    b = _build(name, shape, {}, seed=5).state_dict()
    c = _build(name, shape, {}, seed=6).state_dict()
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any(not torch.equal(a[k], c[k]) for k in a)


def _conv_params(cin: int, cout: int, k: int) -> int:
    return cin * cout * k * k + cout


def _linear_params(cin: int, cout: int) -> int:
    return cin * cout + cout


def test_parameter_counts():
    # McMahan et al. 2017: CNN 582,026 and 2NN (two hidden layers of 200) 199,210
    fedavg = _conv_params(1, 32, 5) + _conv_params(32, 64, 5)
    fedavg += _linear_params(64 * 4 * 4, 512) + _linear_params(512, 10)
    assert fedavg == 582_026
    assert _count(build_model("cnn-fedavg", MNIST, 10)) == fedavg

    two_nn = _linear_params(784, 200) + _linear_params(200, 200) + _linear_params(200, 10)
    assert two_nn == 199_210
    assert _count(build_model("mlp", MNIST, 10, hidden=[200, 200])) == two_nn
    assert _count(build_model("mlp", (784,), 10, hidden=(200, 200))) == two_nn
    default = two_nn + _linear_params(200, 200)  # default hidden=(200, 200, 200)
    assert _count(build_model("mlp", MNIST, 10)) == default == 239_410

    fedreg = _conv_params(1, 32, 5) + _conv_params(32, 32, 5) + _conv_params(32, 64, 5)
    fedreg += _linear_params(576, 256) + _linear_params(256, 10)
    assert _count(build_model("cnn", MNIST, 10)) == fedreg == 228_010

    cnn2 = _conv_params(1, 32, 3) + _conv_params(32, 64, 3)
    cnn2 += _linear_params(9216, 128) + _linear_params(128, 10)
    assert _count(build_model("cnn2", MNIST, 10)) == cnn2 == 1_199_882

    lenet = _conv_params(3, 6, 5) + _conv_params(6, 16, 5) + _linear_params(400, 120)
    lenet += _linear_params(120, 84) + _linear_params(84, 10)
    assert _count(build_model("lenet5", CIFAR, 10)) == lenet == 62_006

    # reference counts of the CIFAR nets (group and batch norm have the same affine params)
    for norm in ("group", "batch"):
        assert _count(build_model("vgg11", CIFAR, 10, norm=norm)) == 9_231_114
        assert _count(build_model("resnet18", CIFAR, 10, norm=norm)) == 11_173_962
        assert _count(build_model("resnet20", CIFAR, 10, norm=norm)) == 269_722
    assert _count(build_model("resnet9", CIFAR, 10)) == 6_568_650 + 23  # convs+fc, Fixup scalars

    # DenseNet-121 (Huang et al. 2017, Table 1) as torchvision's densenet121: 7,978,856 with
    # 1,000 classes; FedReg's CT images have 2. ViT-B/16 and ViT-S/16 as timm's
    imagenet = (3, 224, 224)
    assert _count(build_model("densenet121", imagenet, 1000)) == 7_978_856
    assert _count(build_model("densenet121", imagenet, 2)) == 7_978_856 - 1024 * 998 - 998
    # FedReg's CT model (its densenet_norm_.py): GroupNorm(4), no pooling, Linear(1024*7*7, 2)
    fedreg_ct = build_model("densenet121", imagenet, 2, norm="group", groups=4, pool="flatten")
    assert _count(fedreg_ct) == 7_978_856 - 1024 * 1000 - 1000 + 1024 * 49 * 2 + 2
    assert _count(build_model("vit", imagenet, 1000)) == 86_567_656  # vit_base_patch16_224
    assert _count(build_model("vit", imagenet, 1000, dim=384, heads=6)) == 22_050_664  # small
    # FedReg's CIFAR-100 transformer: ViT-B/32 at 384x384 (vision-transformer-pytorch's
    # ViT-B_32), 100 classes: 12 blocks of (2 LayerNorms, qkv, proj, two MLP layers)
    d, tokens = 768, (384 // 32) ** 2 + 1
    block = 2 * 2 * d + (d * 3 * d + 3 * d) + (d * d + d) + (d * 4 * d + 4 * d) + (4 * d * d + d)
    b32 = (3 * 32 * 32 * d + d) + d + tokens * d + 12 * block + 2 * d + (d * 100 + 100)
    assert _count(build_model("vit", imagenet, 100, patch=32, size=384)) == b32


def test_cnn_fedavg_matches_reference_sequential():
    torch.manual_seed(3)
    ref = nn.Sequential(
        nn.Conv2d(1, 32, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(1024, 512),
        nn.ReLU(),
        nn.Linear(512, 10),
    )
    model = _build("cnn-fedavg", MNIST, {}, seed=3)
    leaves = [m for m in model.modules() if not list(m.children())]
    assert [type(m) for m in leaves] == [type(m) for m in ref]
    ours, theirs = list(model.parameters()), list(ref.parameters())
    assert len(ours) == len(theirs)
    assert all(torch.equal(a, b) for a, b in zip(ours, theirs))  # same init under the same seed
    x, _ = _data(MNIST)
    torch.testing.assert_close(model(x), ref(x), rtol=0, atol=0)


@pytest.mark.parametrize(
    "name, shape",
    [
        ("mlp", (1, 8, 8)),
        ("mlp", (64,)),
        ("cnn2", (1, 8, 8)),
        ("vgg11", (3, 8, 8)),
        ("vgg11", MNIST),
        ("vgg11", TINY),
        ("resnet9", (3, 8, 8)),
        ("resnet9", MNIST),
        ("resnet18", (3, 8, 8)),
        ("resnet20", (3, 8, 8)),
        ("lenet5", MNIST),
        ("cnn", (3, 32, 32)),
        ("cnn-fedavg", (3, 32, 32)),
    ],
)
def test_other_input_sizes(name, shape):
    model = _build(name, shape, {}).eval()
    x, _ = _data(shape)
    assert model(x).shape == (BATCH, NUM_CLASSES)


def test_vgg11_keeps_classifier_width_on_small_inputs():
    for shape in (CIFAR, MNIST, (3, 8, 8), TINY):
        model = _build("vgg11", shape, {})
        assert model.head.in_features == 512
    pools = lambda s: sum(isinstance(m, nn.MaxPool2d) for m in _build("vgg11", s, {}).modules())  # noqa: E731
    assert pools(CIFAR) == 5 and pools(MNIST) == 4 and pools((3, 8, 8)) == 3


# --------------------------------------------------------------------------- errors


def test_unknown_model():
    with pytest.raises(ConfigError, match=r"unknown model 'resnet19'.*did you mean"):
        build_model("resnet19", CIFAR, 10)
    with pytest.raises(ConfigError, match=r"unknown model 'nope'.*cnn-fedavg"):
        model_params("nope")


def test_unknown_param():
    with pytest.raises(ConfigError, match=r"'resnet18'.*unknown parameter 'nrom'.*norm"):
        build_model("resnet18", CIFAR, 10, nrom="group")
    with pytest.raises(ConfigError, match=r"'mlp'.*'hiden'.*hidden"):
        build_model("mlp", MNIST, 10, hiden=(10,))
    with pytest.raises(ConfigError, match=r"'cnn'.*unknown parameter 'norm'.*projection"):
        build_model("cnn", MNIST, 10, norm="group")
    with pytest.raises(ConfigError, match="projection must be an integer >= 1, got 0"):
        build_model("cnn", MNIST, 10, projection=0)


@pytest.mark.parametrize("name", BATCHNORM)
def test_bad_norm(name):
    with pytest.raises(ConfigError, match=r"unknown norm 'foo'.*batch, group, none"):
        build_model(name, CIFAR, 10, norm="foo")


def test_bad_values():
    with pytest.raises(ConfigError, match="groups=3 does not divide"):
        build_model("resnet20", CIFAR, 10, groups=3)
    with pytest.raises(ConfigError, match="groups"):
        build_model("vgg11", CIFAR, 10, groups=0)
    with pytest.raises(ConfigError, match="unknown shortcut 'c'"):
        build_model("resnet20", CIFAR, 10, shortcut="c")
    with pytest.raises(ConfigError, match="hidden"):
        build_model("mlp", MNIST, 10, hidden=[200, -1])
    with pytest.raises(ConfigError, match="hidden"):
        build_model("mlp", MNIST, 10, hidden="200")
    with pytest.raises(ConfigError, match="num_classes"):
        build_model("cnn", MNIST, 0)
    with pytest.raises(ConfigError, match="input_shape"):
        build_model("mlp", (0, 28), 10)
    with pytest.raises(ConfigError, match=r"'cnn'.*\(C, H, W\).*mlp"):
        build_model("cnn", (784,), 10)


@pytest.mark.parametrize(
    "name, shape",
    [
        ("cnn-fedavg", (1, 8, 8)),
        ("cnn", (1, 8, 8)),
        ("lenet5", (3, 8, 8)),
        ("resnet9", (3, 4, 4)),
        ("cnn-fedavg", (1, 28, 8)),
    ],
)
def test_too_small_input(name, shape):
    dims = ", ".join(map(str, shape))
    with pytest.raises(ConfigError) as err:
        build_model(name, shape, 10)
    msg = str(err.value)
    assert f"'{name}'" in msg and f"({dims})" in msg and "'mlp'" in msg


def test_numpy_and_torch_integers_are_accepted():
    np = pytest.importorskip("numpy")
    model = build_model("resnet20", torch.Size([3, 32, 32]), np.int64(7), groups=np.int64(4))
    assert model.head.out_features == 7
    mlp = build_model("mlp", tuple(np.array([784])), 10, hidden=np.array([32, 16]).tolist())
    assert [m.out_features for m in mlp.modules() if isinstance(m, nn.Linear)] == [32, 16, 10]
