"""engine.workers: the sequential engine training several clients at a time on threads gives,
bit for bit, the one-thread engine's numbers, restores torch's threads and refuses dropout."""

import sys

import pytest
import torch
from torch import nn

from fedretain.algorithms import ALGORITHMS, continual_only
from fedretain.errors import ConfigError
from fedretain.experiments.run import build_rounds
from fedretain.recipe.config import make_config
from tests.engines.test_vmap_conformance import BASE, OVERRIDES, _max_diff, _run


@pytest.fixture
def torch_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n not in continual_only()])
def test_workers_give_the_one_thread_engines_numbers_bit_for_bit(name, torch_threads):
    keys = {"algorithm": name, "engine": "sequential", **OVERRIDES.get(name, {})}
    ref, _ = _run({**keys, "threads": 1})
    got, rounds = _run({**keys, "threads": 3, "engine.workers": 3})
    assert rounds.engine.workers == 3
    assert ref.keys() == got.keys()
    assert _max_diff(ref, got) == 0.0


def test_workers_on_a_convolutional_model_keep_the_client_states(torch_threads):
    # SCAFFOLD's control variates are read and written by the main thread, in round order
    keys = {"model": "resnet20", "model.hidden": None, "model.norm": "group"}
    keys.update(algorithm="scaffold", engine="sequential")
    _, one = _run({**keys, "threads": 1}, rounds=2)
    _, two = _run({**keys, "threads": 2, "engine.workers": 2}, rounds=2)
    assert sorted(one.store) == sorted(two.store) and len(one.store) > 0
    for cid in one.store:
        assert _max_diff(one.store[cid], two.store[cid]) == 0.0


def test_workers_restore_torch_threads_after_the_round(torch_threads):
    torch.set_num_threads(2)
    fed, rounds = build_rounds(make_config({**BASE, "engine": "sequential", "engine.workers": 2}))
    state = fed.algorithm.server_init(*fed.task.init())
    rounds.run_round(state, 0, 0.1, clients=fed.participation.clients(0))
    assert torch.get_num_threads() == 2
    rounds.engine.close()


def test_workers_refuse_a_model_that_draws_random_numbers(monkeypatch):
    # the module (the package also has a function named sequential)
    seq = sys.modules["fedretain.engines.sequential"]
    assert seq.draws_random_numbers(nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)))
    assert not seq.draws_random_numbers(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))
    monkeypatch.setattr(seq, "draws_random_numbers", lambda model: True)
    fed, rounds = build_rounds(make_config({**BASE, "engine": "sequential", "engine.workers": 2}))
    state = fed.algorithm.server_init(*fed.task.init())
    with pytest.raises(ConfigError, match=r"engine\.workers=1"):
        rounds.run_round(state, 0, 0.1, clients=fed.participation.clients(0))


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_workers_must_be_a_positive_integer(bad):
    with pytest.raises(ConfigError, match=r"engine\.workers.* integer"):
        build_rounds(make_config({**BASE, "engine": "sequential", "engine.workers": bad}))
