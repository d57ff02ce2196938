"""A federation small enough to compute by hand.

Model: ``f(x) = w x`` with one weight ``w`` (``nn.Linear(1, 1, bias=False)``), loss
``½ (w x − y)²`` per example, so the gradient of a batch mean is ``mean((w x − y) x)``.
Client 0 holds ``(x, y) = (1, 2)``; client 1 holds two copies of ``(2, 0)``.
With ``batch_size = 2`` every local epoch is one full-batch step.

Numbers computed by hand are exact references (better than a float64 run); the float32 runs land
within a few float32 roundings of them: 2.9e-7 at most over the hand-checked tests (4.1e-7 where
the hand value is itself rounded to 6 digits), seen with AVX-512 and AVX2 kernels and 1 and 2
threads. Their bounds (1e-6 and up; 3e-6 where a result is divided by K·lr) keep 10x or more over
what each one saw.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

from fedretain.core.algorithm import Algorithm, RoundInfo
from fedretain.core.client import Clients, LocalSpec, train_client
from fedretain.core.task import Task
from fedretain.data.base import Dataset
from fedretain.engines.round import Rounds
from fedretain.engines.sequential import SequentialEngine


def half_squared_error(pred: Tensor, y: Tensor, label_mask: Tensor | None = None) -> Tensor:
    return 0.5 * (pred.squeeze(-1) - y) ** 2


def tiny_dataset() -> Dataset:
    x = torch.tensor([[1.0], [2.0], [2.0]])
    y = torch.tensor([2.0, 0.0, 0.0])
    return Dataset("tiny", x, y, x, y, num_classes=1)


TINY_PARTS = [np.array([0]), np.array([1, 2])]


def tiny_engine(algorithm: Algorithm, epochs: int = 1, w0: float = 1.0) -> Rounds:
    """Rounds of ``algorithm`` over the two tiny clients on the sequential engine."""
    model = nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(w0)
    task = Task(model, half_squared_error, num_classes=1)
    clients = Clients(tiny_dataset(), TINY_PARTS, LocalSpec(batch_size=2, epochs=epochs), seed=0)
    return Rounds(algorithm, task, clients, SequentialEngine())


def run_rounds(engine: Rounds, rounds: int, lr: float = 0.1) -> dict:
    """Run ``rounds`` rounds with both clients sampled; returns the server state."""
    params, buffers = engine.task.init()
    state = engine.algorithm.server_init(params, buffers)
    for rnd in range(rounds):
        state, _ = engine.run_round(state, rnd, lr, per_round=2)
    return state


def train_one(engine: Rounds, cid: int, downlink: dict, info: RoundInfo) -> tuple[dict, float]:
    """One client's local training (its stored state or a fresh one): uplink and mean loss."""
    clients, algo = engine.clients, engine.algorithm
    update = train_client(
        algo,
        engine.task,
        downlink,
        engine.client_state(cid, downlink),
        clients.data(cid),
        clients.plan(cid, info, algo),
        info,
        cid,
    )
    return update.uplink, float(update.loss)


def w(state: dict, key: str = "x") -> float:
    """The one weight in ``state[key]`` (``key`` may be a path: ``server_opt/b``)."""
    for part in key.split("/"):
        state = state[part]
    return float(state["weight"].reshape(()))
