"""``engine.devices``: the vectorised engine splits a round's clients over several devices.

On a CPU the devices are CPU "devices" (``["cpu", "cpu"]``): the same code path as GPUs (chunks
per device, copies there and back, results gathered in the round's order), checked against the
one-device run; ``engine.devices=all`` on a GPU runs in the ``cuda`` test.
"""

import numpy as np
import pytest
import torch

from fedretain.core.tree import leaves
from fedretain.engines import auto
from fedretain.engines.sequential import SequentialEngine
from fedretain.engines.vmap import VmapEngine, parse_devices
from fedretain.errors import ConfigError
from fedretain.experiments.checkpoint import load_checkpoint
from fedretain.experiments.run import build_rounds
from fedretain.files import read_jsonl
from fedretain.recipe.config import make_config
from tests.engines.test_vmap_conformance import BASE, OVERRIDES, VMAP, _max_diff, _run

CPUS = ["cpu", "cpu"]
# CPU devices compute each chunk exactly as one device does (0.0 seen everywhere below); the
# bound allows for summation order where the chunks differ (memory-sized: 5 clients in one
# chunk on one device, 3 + 2 over two)
BOUND = 1e-6


def _assert_same_run(a, b, bound: float = BOUND) -> None:
    (a_state, a_rounds), (b_state, b_rounds) = a, b
    assert _max_diff(a_state, b_state) <= bound
    assert set(a_rounds.store) == set(b_rounds.store)
    for cid in a_rounds.store:
        assert _max_diff(a_rounds.store[cid], b_rounds.store[cid]) <= bound
    assert a_rounds.ledger.state() == b_rounds.ledger.state()


@pytest.mark.parametrize("chunk", [0, 2])
@pytest.mark.parametrize("name", ["fedavg", "fedprox", "scaffold", "feddyn", "moon", "gradma"])
def test_cpu_devices_equal_the_one_device_run(name, chunk):
    """SCAFFOLD, FedDyn and MOON keep client states, GradMA a server memory; ``chunk=0`` sizes
    the chunks to memory (one device: one chunk of 5; two devices: 3 and 2), ``chunk=2`` gives
    both runs the same chunks."""
    extra = {"algorithm": name, "engine": "vmap", "engine.chunk": chunk, **OVERRIDES.get(name, {})}
    one = _run(extra)
    split = _run({**extra, "engine.devices": CPUS})
    assert split[1].engine.devices == [torch.device("cpu")] * 2
    _assert_same_run(one, split)


def test_dropout_draws_the_one_device_runs_numbers_on_cpu_devices():
    """A model with dropout draws its masks in the step, from the CPU's one generator: with
    the same chunks the split run draws them in the one-device run's order, the very same."""
    extra = {"algorithm": "fedavg", "engine": "vmap", "model": "cnn2", "model.hidden": None}
    one = _run({**extra, "engine.chunk": 2}, rounds=2)
    split = _run({**extra, "engine.chunk": 2, "engine.devices": ["cpu"] * 3}, rounds=2)
    _assert_same_run(one, split, bound=0.0)
    # the masks do depend on the order of the draws: other chunks, other numbers
    other = _run({**extra, "engine.chunk": 3}, rounds=2)
    assert _max_diff(one[0], other[0]) > 1e-4


def test_clients_are_gathered_in_the_rounds_order():
    """Chunks go to the devices in turn; each wave is a block of the round's order, and each
    client's row is its own (its uplink equals the one-device run's)."""
    order = np.array([7, 2, 5, 0, 8, 1, 3, 6, 4])
    results = {}
    for devices in (None, ["cpu"] * 3):
        keys = {**BASE, **VMAP, "engine.devices": devices, "clients_per_round": 9}
        fed, rounds = build_rounds(make_config({k: v for k, v in keys.items() if v is not None}))
        opened = rounds.open(fed.algorithm.server_init(*fed.task.init()), 0, 0.1, clients=order)
        results[devices is None] = list(rounds.engine.train(opened.work))
    engine = rounds.engine
    cpu = torch.device("cpu")
    assert engine.waves(order.tolist()) == [
        [(cpu, [7, 2]), (cpu, [5, 0]), (cpu, [8, 1])],
        [(cpu, [3, 6]), (cpu, [4])],
    ]
    split = results[False]
    assert [c for t in split for c in t.clients] == order.tolist()
    rows = {c: (t, k) for t in results[True] for k, c in enumerate(t.clients)}
    for t in split:
        for k, cid in enumerate(t.clients):
            ref, j = rows[cid]
            for a, b in zip(leaves(t.uplinks), leaves(ref.uplinks), strict=True):
                assert torch.equal(a[k], b[j])
            assert float(t.losses[k]) == float(ref.losses[j])


def test_a_run_from_the_command_line_equals_the_one_device_run(tmp_path):
    """``fedretain run engine=vmap 'engine.devices=["cpu","cpu"]'``: metrics.jsonl and the final
    model of the one-device run."""
    from fedretain.cli import main

    args = [f"{k}={v}" for k, v in BASE.items() if k != "model.hidden"] + ["model.hidden=[16]"]
    args += ["engine=vmap", "rounds=3", "checkpoint_every=3"]
    assert main(["run", *args, "--out", str(tmp_path / "one")]) == 0
    assert main(["run", *args, 'engine.devices=["cpu","cpu"]', "--out", str(tmp_path / "two")]) == 0
    one, two = (read_jsonl(tmp_path / d / "metrics.jsonl") for d in ("one", "two"))
    assert len(one) == len(two) == 4
    for a, b in zip(one, two, strict=True):
        assert a.keys() == b.keys()
        for key in a.keys() - {"seconds"}:
            if isinstance(a[key], float):
                assert a[key] == pytest.approx(b[key], abs=BOUND), key
            else:
                assert a[key] == b[key], key
    model = [load_checkpoint(tmp_path / d).server for d in ("one", "two")]
    assert _max_diff(*model) <= BOUND


@pytest.mark.parametrize(
    "devices, message",
    [
        (["tpu"], r"engine\.devices: 'tpu' is not a device \(cpu, cuda or cuda:N\)"),
        ([], r"engine\.devices=\[\] names no device"),
        ("", r"engine\.devices='' names no device"),
        (["cpu:1"], r"'cpu:1' is not a device"),
        ([0], r"0 is not a device"),
    ],
)
def test_bad_devices_are_one_line_config_errors(devices, message):
    cfg = make_config({**BASE, **VMAP, "engine.devices": devices})
    with pytest.raises(ConfigError, match=message) as err:
        build_rounds(cfg)
    assert "\n" not in str(err.value)


def test_all_without_cuda_names_the_fix(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match=r"torch finds none; leave engine\.devices unset") as err:
        build_rounds(make_config({**BASE, **VMAP, "engine.devices": "all"}))
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="lists cuda:0, but torch finds no CUDA GPU"):
        parse_devices(["cuda:0"], torch.device("cpu"))


def test_cuda_devices_need_a_cuda_run_and_existing_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    with pytest.raises(ConfigError, match="run's device is the CPU; add device=cuda"):
        parse_devices("all", cpu)
    with pytest.raises(ConfigError, match=r"lists cuda:2, but torch finds 2 CUDA GPU\(s\)"):
        parse_devices(["cuda:0", "cuda:2"], cuda)
    assert parse_devices("all", cuda) == [torch.device("cuda", 0), torch.device("cuda", 1)]
    assert parse_devices("cuda:1, cpu", cuda) == [torch.device("cuda", 1), cpu]
    assert parse_devices(None, cuda) is None


@pytest.mark.parametrize("picked", ["vmap", "sequential"])
def test_auto_passes_the_devices_to_the_vectorised_engine(monkeypatch, picked):
    """engine=auto's rule is its own; where it picks the vectorised engine, the devices go with
    it, and the choice says so either way."""
    monkeypatch.setattr(auto, "choose", lambda fed, workers=0: (picked, False, 1, "the rule"))
    cfg = make_config({**BASE, "engine": "auto", "engine.devices": CPUS})
    _, rounds = build_rounds(cfg)
    if picked == "vmap":
        assert isinstance(rounds.engine, VmapEngine)
        assert rounds.engine.devices == [torch.device("cpu")] * 2
        assert "on cpu, cpu" in rounds.engine.choice
    else:
        assert isinstance(rounds.engine, SequentialEngine)
        assert "engine.devices unused" in rounds.engine.choice


def test_unset_devices_keep_one_device():
    _, rounds = build_rounds(make_config({**BASE, **VMAP}))
    assert rounds.engine.devices is None


@pytest.mark.cuda
def test_all_gpus_equal_the_plain_cuda_run(real_gpu):
    """``engine.devices=all`` on a GPU machine: the plain ``device=cuda`` run's numbers (one GPU:
    the same chunks on the same device; several: up to summation order)."""
    extra = {"algorithm": "scaffold", "engine": "vmap", "device": real_gpu}
    plain, _ = _run(extra, rounds=2)
    split, rounds = _run({**extra, "engine.devices": "all"}, rounds=2)
    count = torch.cuda.device_count()
    assert rounds.engine.devices == [torch.device("cuda", k) for k in range(count)]
    assert next(iter(split["x"].values())).device == next(iter(plain["x"].values())).device
    assert _max_diff(plain, split) < BOUND


def test_a_gpu_chunk_is_sized_to_an_eighth_of_its_memory(monkeypatch):
    """1 GiB on a CPU; on a GPU an eighth of its memory, read from the GPU's properties (not
    its free memory, which would change the chunks, and the numbers, from run to run)."""
    from fedretain.engines import vmap

    class H100:
        total_memory = 80 * 10**9

    asked = []
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: asked.append(d) or H100())
    assert vmap.memory_budget(torch.device("cpu")) == 1 << 30 and not asked
    assert vmap.memory_budget(torch.device("cuda", 1)) == 10 * 10**9
    assert asked == [torch.device("cuda", 1)]
    # a run holding a quarter of the GPU (gpu_share, which --run-gpus 0.25 sets) plans for a
    # quarter of that; the CPU's budget is its own
    assert vmap.memory_budget(torch.device("cuda", 1), 0.25) == 2.5 * 10**9
    assert vmap.memory_budget(torch.device("cpu"), 0.25) == 1 << 30
    with pytest.raises(ConfigError, match=r"gpu_share must be in \(0, 1\]"):
        make_config({**BASE, "gpu_share": 0})
    fed, rounds = build_rounds(make_config({**BASE, "engine": "vmap"}))
    per_client = 8 * sum(p.numel() * 4 for p in fed.task.model.parameters())
    assert rounds.engine.chunk_size(10**9) == (1 << 30) // per_client  # the CPU's budget
