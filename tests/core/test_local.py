"""Local training state lives on the model's device (vmap stacks it with the parameters)."""

import pytest
import torch

from fedretain.algorithms import build_algorithm
from fedretain.core.algorithm import ClientContext, RoundInfo
from fedretain.core.local import make_local_init
from fedretain.core.optim import OPTIMIZERS
from fedretain.core.tree import leaves


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_local_init_puts_every_tensor_on_the_parameters_device(opt):
    # the meta device stands in for a GPU: a tensor made on the CPU would show up here
    x = {"w": torch.zeros(3, 2, device="meta"), "b": torch.zeros(2, device="meta")}
    info = RoundInfo(round=0, lr=0.1, clients=[0], num_clients=1, seed=0)
    ctx = ClientContext(task=None, info=info, client_id=0, num_samples=1, data={})
    state = make_local_init(OPTIMIZERS[opt]())({"x": x, "buffers": {}}, {}, ctx)
    assert {t.device.type for t in leaves(state)} == {"meta"}


def test_every_algorithms_local_init_stays_on_the_parameters_device():
    from fedretain.algorithms import ALGORITHMS

    x = {"w": torch.zeros(3, 2, device="meta")}
    info = RoundInfo(round=0, lr=0.1, clients=[0], num_clients=1, seed=0)
    ctx = ClientContext(task=None, info=info, client_id=0, num_samples=1, data={})
    for name in ALGORITHMS:
        algo = build_algorithm(name)
        if name in ("fedreg", "moon", "fedmlb"):  # need a real model and data at init
            continue
        server = algo.server_init(x, {})
        down = algo.broadcast(server, info)
        state = algo.local_init(down, algo.client_init(x), ctx)
        devices = {t.device.type for t in leaves(state)}
        assert devices == {"meta"}, (name, devices)
