"""FedLwF-2T: its two teachers, their weights per task, and the refusal outside a scenario."""

import pytest
import torch

from fedretain.algorithms import build_algorithm, continual_only
from fedretain.continual.fedlwf import soft_kl
from fedretain.core.algorithm import ClientContext, RoundInfo
from fedretain.core.task import Task
from fedretain.errors import ConfigError
from fedretain.losses import get_loss
from fedretain.models import build_model
from fedretain.recipe.config import make_config


def _ctx(task, rnd):
    torch.manual_seed(1)
    data = {
        "x": torch.randn(6, 4),
        "y": torch.tensor([0, 1, 0, 1, 0, 1]),
        "w": torch.ones(6),
        "label_mask": torch.tensor([True, True, False]),
    }
    info = RoundInfo(round=rnd, num_clients=1, clients=(0,), lr=0.1, seed=0)
    return ClientContext(task=task, info=info, client_id=0, num_samples=6, data=data)


def test_soft_kl_is_torchs_at_temperature():
    p, q = torch.randn(4, 3), torch.randn(4, 3)
    ref = torch.nn.KLDivLoss(reduction="batchmean")(
        torch.log_softmax(q / 2, -1), torch.softmax(p / 2, -1)
    )
    assert float(soft_kl(p, q, 2.0)) == pytest.approx(float(ref), rel=1e-5)
    assert float(soft_kl(p, p, 2.0)) == pytest.approx(0.0, abs=1e-7)


def test_teachers_and_weights_follow_the_tasks():
    torch.manual_seed(0)
    task = Task(build_model("mlp", (4,), 3, hidden=[5]), get_loss("ce"), 3)
    params, buffers = task.init()
    algo = build_algorithm("fedlwf2t", rounds_per_task=2)
    server = algo.server_init(params, buffers)
    cs = algo.client_init(params)
    lasts = {}
    for rnd in range(3):
        ctx = _ctx(task, rnd)
        down = algo.broadcast(server, ctx.info)
        state = algo.local_init(down, cs, ctx)
        lwf = state["lwf"]
        if rnd < 2:  # task 0: the cross-entropy alone
            assert [float(lwf[k]) for k in ("w_ce", "w_prev", "w_glob")] == [1.0, 0.0, 0.0]
        else:  # task 1: the client's own model of its last round of task 0 is the teacher
            assert [float(lwf[k]) for k in ("w_ce", "w_prev", "w_glob")] == pytest.approx(
                [0.33, 0.33, 0.34]
            )
            assert all(torch.equal(lwf["prev"][k], lasts[1][k]) for k in lasts[1])
        batch = {k: v for k, v in ctx.data.items()}
        state, _ = algo.local_step(state, batch, ctx)
        uplink, cs = algo.local_final(state, cs, ctx)
        lasts[rnd] = cs["last"]
        server = {**server, "x": uplink["y"]}  # one client: the mean is its model


def test_fedlwf2t_refuses_the_non_continual_setting():
    assert "fedlwf2t" in continual_only()
    with pytest.raises(ConfigError, match="scenario=class_incremental"):
        make_config({"algorithm": "fedlwf2t", "dataset": "digits"})
    task = Task(build_model("mlp", (4,), 3, hidden=[5]), get_loss("ce"), 3)
    params, buffers = task.init()
    algo = build_algorithm("fedlwf2t")
    ctx = _ctx(task, 0)
    with pytest.raises(ConfigError, match="continual scenario"):
        algo.local_init(algo.broadcast(algo.server_init(params, buffers), ctx.info), {}, ctx)
