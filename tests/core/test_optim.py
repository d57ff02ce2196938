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


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"momentum": 0.9},
        {"momentum": 0.9, "nesterov": True},
        {"momentum": 0.5, "weight_decay": 0.01},
    ],
)
def test_sgd_matches_torch(kwargs):
    torch.manual_seed(0)
    p0 = torch.randn(5)
    grads = [torch.randn(5) for _ in range(4)]
    opt = sgd(**kwargs)
    params = {"p": p0.clone()}
    state = opt.init(params)
    for g in grads:
        params, state = opt.update({"p": g}, state, params, 0.1)
    expected = _run_torch(torch.optim.SGD, {"lr": 0.1, **kwargs}, 4, grads, p0)
    assert torch.allclose(params["p"], expected, atol=1e-6)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_adam_matches_torch(weight_decay):
    torch.manual_seed(1)
    p0 = torch.randn(6)
    grads = [torch.randn(6) for _ in range(5)]
    opt = adam(weight_decay=weight_decay)
    params = {"p": p0.clone()}
    state = opt.init(params)
    for g in grads:
        params, state = opt.update({"p": g}, state, params, 0.01)
    expected = _run_torch(
        torch.optim.Adam, {"lr": 0.01, "weight_decay": weight_decay}, 5, grads, p0
    )
    assert torch.allclose(params["p"], expected, atol=1e-6)


def test_update_leaves_inputs_untouched():
    opt = sgd(momentum=0.9)
    params = {"p": torch.ones(3)}
    state = opt.init(params)
    before = params["p"].clone()
    opt.update({"p": torch.ones(3)}, state, params, 0.5)
    assert torch.equal(params["p"], before)
    assert torch.equal(state["b"]["p"], torch.zeros(3))
