"""The functional optimisers match torch.optim step for step and never modify their inputs."""

import pytest
import torch

from fedretain.core.optim import adam, sgd


def _run_torch(opt_cls, kwargs, steps, grads_seq, p0):
    p = torch.nn.Parameter(p0.clone())
    opt = opt_cls([p], **kwargs)
    for g in grads_seq[:steps]:
        p.grad = g.clone()
        opt.step()
    return p.detach()


# float64: the same arithmetic as torch.optim to rounding; float32: 3.0e-8 seen (AVX-512 and
# AVX2 kernels, 1 and 2 threads: torch.optim's kernels order a step's products differently);
# the bounds keep >= 30x
TOL = {torch.float64: 1e-12, torch.float32: 1e-6}
DTYPES = pytest.mark.parametrize("dtype", [torch.float64, torch.float32])


@DTYPES
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"momentum": 0.9},
        {"momentum": 0.9, "nesterov": True},
        {"momentum": 0.5, "weight_decay": 0.01},
    ],
)
def test_sgd_matches_torch(kwargs, dtype):
    torch.manual_seed(0)
    p0 = torch.randn(5, dtype=dtype)
    grads = [torch.randn(5, dtype=dtype) for _ in range(4)]
    opt = sgd(**kwargs)
    params = {"p": p0.clone()}
    state = opt.init(params)
    for g in grads:
        params, state = opt.update({"p": g}, state, params, 0.1)
    expected = _run_torch(torch.optim.SGD, {"lr": 0.1, **kwargs}, 4, grads, p0)
    assert torch.allclose(params["p"], expected, rtol=0, atol=TOL[dtype])


@DTYPES
@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adam_matches_torch(weight_decay, dtype):
    torch.manual_seed(1)
    p0 = torch.randn(6, dtype=dtype)
    grads = [torch.randn(6, dtype=dtype) for _ in range(5)]
    opt = adam(weight_decay=weight_decay)
    params = {"p": p0.clone()}
    state = opt.init(params)
    for g in grads:
        params, state = opt.update({"p": g}, state, params, 0.01)
    expected = _run_torch(
        torch.optim.Adam, {"lr": 0.01, "weight_decay": weight_decay}, 5, grads, p0
    )
    assert torch.allclose(params["p"], expected, rtol=0, atol=TOL[dtype])


def test_update_leaves_inputs_untouched():
    opt = sgd(momentum=0.9)
    params = {"p": torch.ones(3)}
    state = opt.init(params)
    before = params["p"].clone()
    opt.update({"p": torch.ones(3)}, state, params, 0.5)
    assert torch.equal(params["p"], before)
    assert torch.equal(state["b"]["p"], torch.zeros(3))


def test_adam_bias_correction_is_torchs_in_float64_at_beta2_0_9999():
    """torch.optim.Adam corrects with Python floats (float64): at β2 = 0.9999 a float32
    ``β2 ** t`` was 1e-4 off it relatively; the count is an exact int64 tensor."""
    torch.manual_seed(2)
    p0 = torch.randn(6, dtype=torch.float64)
    grads = [torch.randn(6, dtype=torch.float64) for _ in range(5)]
    opt = adam(beta2=0.9999)
    params = {"p": p0.clone()}
    state = opt.init(params)
    for g in grads:
        params, state = opt.update({"p": g}, state, params, 0.01)
    expected = _run_torch(torch.optim.Adam, {"lr": 0.01, "betas": (0.9, 0.9999)}, 5, grads, p0)
    torch.testing.assert_close(params["p"], expected, rtol=1e-12, atol=1e-12)
    assert state["t"].dtype == torch.int64 and int(state["t"]) == 5


def test_adam_steps_under_vmap_as_one_client_at_a_time():
    """The int64 step count and the float64 corrections stack under ``vmap`` and leave the
    float32 parameters float32: each client's step is its own."""
    torch.manual_seed(3)
    opt = adam()
    params = {"p": torch.randn(3, 4)}
    grads = {"p": torch.randn(3, 4)}
    state = torch.func.vmap(opt.init)(params)
    step = torch.func.vmap(lambda g, s, p: opt.update(g, s, p, 0.1))
    new, new_state = step(grads, state, params)
    new, new_state = step(grads, new_state, new)
    assert new["p"].dtype == torch.float32 and new_state["t"].tolist() == [2, 2, 2]
    for i in range(3):
        one = {"p": params["p"][i]}
        s = opt.init(one)
        for _ in range(2):
            one, s = opt.update({"p": grads["p"][i]}, s, one, 0.1)
        torch.testing.assert_close(new["p"][i], one["p"])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: adam(beta1=1.0), r"optimizer\.beta1 must be in \[0, 1\)"),
        (lambda: adam(beta2=float("nan")), r"optimizer\.beta2 must be in \[0, 1\)"),
        (lambda: adam(eps=float("inf")), r"optimizer\.eps must be a finite number >= 0"),
        (lambda: sgd(momentum=-0.1), r"optimizer\.momentum must be a finite number >= 0"),
        (lambda: sgd(weight_decay=float("inf")), r"optimizer\.weight_decay must be a finite"),
    ],
)
def test_out_of_range_hyper_parameters_are_refused(make, message):
    with pytest.raises(ValueError, match=message):
        make()
