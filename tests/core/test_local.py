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
    state = make_local_init(OPTIMIZERS.build(opt))({"x": x, "buffers": {}}, {}, ctx)
    assert {t.device.type for t in leaves(state)} == {"meta"}


def test_every_algorithms_local_round_stays_on_the_models_device():
    # one local_init, two local steps and local_final of every algorithm on the meta device:
    # any tensor an algorithm makes on the CPU during local training would show up here
    from fedretain.algorithms import continual_only
    from fedretain.core.task import Task
    from fedretain.losses import get_loss
    from fedretain.models import build_model
    from fedretain.registry import kind

    meta = torch.device("meta")
    data = {
        "x": torch.zeros(6, 4, device=meta),
        "y": torch.zeros(6, dtype=torch.int64, device=meta),
        "w": torch.ones(6, device=meta),
        "label_mask": torch.ones(3, dtype=torch.bool, device=meta),
        "idx": torch.zeros(6, dtype=torch.int64, device=meta),
    }
    batch = {k: v if k == "label_mask" else v[:3] for k, v in data.items()}
    info = RoundInfo(round=0, lr=0.1, clients=[0], num_clients=1, seed=0)
    bad = {}
    for name in kind("algorithm"):
        if name in continual_only():  # refuses this non-continual setting (an ACGAN needed)
            continue
        projection = {"projection": 4} if name == "moon" else {}  # MOON's projection head
        model = build_model("mlp", (4,), 3, hidden=[8], **projection).to(meta)
        task = Task(model, get_loss("ce"), 3)
        ctx = ClientContext(task=task, info=info, client_id=0, num_samples=6, data=data)
        params, buffers = task.init()
        algo = build_algorithm(name)
        down = algo.broadcast(algo.server_init(params, buffers), info)
        state = algo.local_init(down, algo.client_init(params), ctx)
        for _ in range(2):
            state, _ = algo.local_step(state, batch, ctx)
        up, client_state = algo.local_final(state, algo.client_init(params), ctx)
        devices = {t.device.type for t in leaves({"s": state, "u": up, "c": client_state})}
        if devices != {"meta"}:
            bad[name] = devices
    assert not bad
