"""Client state stores: memory or disk, float32 or half precision, checkpointed exactly."""

import json

import pytest
import torch

from fedretain.algorithms import build_algorithm
from fedretain.core.tree import tree_map
from fedretain.engines.store import DiskStore, MemoryStore, make_store
from fedretain.errors import ConfigError, DataError
from fedretain.experiments.run import run_experiment
from fedretain.files import read_jsonl
from fedretain.recipe.config import make_config
from tests.experiments.test_resume import DIGITS as RESUME_DIGITS
from tests.tiny import run_rounds, tiny_engine

STATE = {
    "c_i": {"weight": torch.tensor([1.0, 1e-4, 3.14159265]), "bias": torch.tensor([-2.5])},
    "count": torch.tensor([3], dtype=torch.int64),
}


def _equal(a, b) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return a.dtype == b.dtype and torch.equal(a, b)


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_float32_store_returns_exact_copies(kind, tmp_path):
    store = make_store(kind, "float32", tmp_path / "s")
    state = {"c_i": {k: v.clone() for k, v in STATE["c_i"].items()}, "count": STATE["count"]}
    store.put(4, state)
    state["c_i"]["weight"].add_(1.0)  # the caller's tensors change later: the store must not
    assert 4 in store and 5 not in store and len(store) == 1 and list(store) == [4]
    assert _equal(store[4], STATE)
    assert list(store[4]["c_i"]) == ["weight", "bias"]  # key order kept (not sorted)


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_half_precision_store_halves_bytes_and_restores_dtype(kind, tmp_path):
    full = make_store(kind, "float32", tmp_path / "a")
    half = make_store(kind, "float16", tmp_path / "b")
    big = {"c_i": {"w": torch.linspace(-3, 3, 10_000)}}
    full.put(0, big)
    half.put(0, big)
    back = half[0]
    assert back["c_i"]["w"].dtype == torch.float32
    assert torch.equal(back["c_i"]["w"], big["c_i"]["w"].half().float())
    assert not torch.equal(back["c_i"]["w"], big["c_i"]["w"])  # really rounded
    assert half.nbytes() < 0.52 * full.nbytes()
    half.put(1, STATE)
    assert half[1]["count"].dtype == torch.int64 and int(half[1]["count"]) == 3


def test_disk_store_finds_its_files_again_and_leaves_no_temp(tmp_path):
    store = DiskStore(tmp_path)
    store.put(3, STATE)
    store.put(10, STATE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["10.safetensors", "3.safetensors"]
    again = DiskStore(tmp_path)
    assert again.ids() == [3, 10] and _equal(again[10], STATE)


def test_disk_snapshot_does_not_follow_later_writes(tmp_path):
    store = DiskStore(tmp_path / "live")
    store.put(1, STATE)
    store.snapshot(tmp_path / "snap")
    store.put(1, {"c_i": {"weight": torch.zeros(3), "bias": torch.zeros(1)}})
    store.put(2, STATE)
    store.restore(tmp_path / "snap")
    assert store.ids() == [1] and _equal(store[1], STATE)


def test_corrupt_client_file_is_one_line(tmp_path):
    store = DiskStore(tmp_path)
    store.put(0, STATE)
    (tmp_path / "0.safetensors").write_bytes(b"\x10\x00\x00\x00garbage")
    with pytest.raises(DataError, match=r"client state .*0\.safetensors cannot be read"):
        store[0]


def test_bad_store_settings_are_refused():
    with pytest.raises(ConfigError, match=r"store\.dtype"):
        MemoryStore("float8")
    with pytest.raises(ConfigError, match=r"unknown store 'ram'"):
        make_config({"store": "ram"})
    # FedCurv's Fisher entries underflow in float16; bfloat16 keeps float32's range
    with pytest.raises(ConfigError, match=r"fedcurv with store\.dtype=float16"):
        make_config({"algorithm": "fedcurv", "store.dtype": "float16"})
    make_config({"algorithm": "fedcurv", "store.dtype": "bfloat16"})


def test_engine_states_are_the_same_in_every_store(tmp_path):
    def states(store):
        engine = tiny_engine(build_algorithm("scaffold"))
        if store is not None:
            engine.store = store
        run_rounds(engine, 3)
        return {c: engine.store[c] for c in engine.store}

    mem = states(None)
    disk = states(DiskStore(tmp_path))
    assert mem.keys() == disk.keys() == {0, 1}
    assert all(_equal(mem[c], disk[c]) for c in mem)


DIGITS = {**RESUME_DIGITS, "checkpoint_every": 2}


def _metrics(path):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in read_jsonl(path)]


def test_disk_store_run_equals_memory_run_and_resumes_from_its_snapshot(tmp_path):
    mem = run_experiment(make_config({**DIGITS, "rounds": 5}), tmp_path / "mem", progress=False)
    disk_cfg = {**DIGITS, "store": "disk"}
    first = run_experiment(
        make_config({**disk_cfg, "rounds": 3}), tmp_path / "disk", progress=False
    )
    states = tmp_path / "disk" / "client_state"
    assert len(list(states.glob("*.safetensors"))) == first["clients_with_state"] > 0
    meta = json.loads((tmp_path / "disk" / "checkpoint" / "meta.json").read_text())
    assert meta["client_dir"] == "clients-3" and meta["clients"] == {}
    # later writes of a crashed run (the store replaces files) must not leak into the resume
    later = DiskStore(states)
    for cid in later.ids():
        later.put(cid, tree_map(lambda v: v + 1.0, later[cid]))
    later.put(999, STATE)
    disk = run_experiment(
        make_config({**disk_cfg, "rounds": 5}), tmp_path / "disk", progress=False, resume=True
    )
    assert _metrics(tmp_path / "disk" / "metrics.jsonl") == _metrics(
        tmp_path / "mem" / "metrics.jsonl"
    )
    assert disk["clients_with_state"] == mem["clients_with_state"]
    assert not (tmp_path / "disk" / "checkpoint" / "clients-3").exists()  # old snapshot gone


def test_half_precision_run_is_deterministic_and_close_to_float32(tmp_path):
    half = {**DIGITS, "rounds": 3, "store.dtype": "float16"}
    run_experiment(make_config(half), tmp_path / "a", progress=False)
    run_experiment(make_config(half), tmp_path / "b", progress=False)
    run_experiment(make_config({**DIGITS, "rounds": 3}), tmp_path / "c", progress=False)
    a, b, c = (_metrics(tmp_path / n / "metrics.jsonl") for n in "abc")
    assert a == b
    assert a != c  # the rounding is real ...
    assert abs(a[-1]["test_accuracy"] - c[-1]["test_accuracy"]) < 0.05  # ... and harmless
