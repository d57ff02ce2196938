"""engine=auto: the vectorised engine where it applies (with the sequential engine's numbers),
the sequential engine otherwise, compiled only for runs long enough to pay for it."""

import pytest

from fedretain.algorithms import ALGORITHMS, continual_only
from fedretain.engines import auto
from fedretain.engines.sequential import SequentialEngine
from fedretain.engines.vmap import VmapEngine
from fedretain.experiments.run import build_rounds, run_experiment
from fedretain.recipe.config import Config, make_config
from fedretain.recipe.federation import build_federation
from tests.engines.test_vmap_conformance import BASE, FP32_BOUND, OVERRIDES, _max_diff, _run


def test_auto_is_the_default_engine():
    assert Config().engine == "auto"


def _even(name: str) -> dict:
    # two threads and even clients: otherwise auto keeps the sequential engine for runs this short
    extra = OVERRIDES.get(name, {})
    return {"threads": 2, "partition": "iid", "partition.alpha": None, **extra}


# continual-only methods (fedcil) refuse this non-continual setting with a one-line ConfigError;
# their conformance (resume, ledger) runs in a class-incremental scenario in tests/continual/
@pytest.mark.parametrize("name", [n for n in ALGORITHMS if n not in continual_only()])
def test_auto_vectorises_every_algorithm_that_can_be(name):
    keys = {**BASE, "algorithm": name, "engine": "auto", **_even(name)}
    _fed, rounds = build_rounds(make_config({k: v for k, v in keys.items() if v is not None}))
    vectorisable = ALGORITHMS.build(name, {}).hints.vectorisable if name != "moon" else True
    assert isinstance(rounds.engine, VmapEngine if vectorisable else SequentialEngine)


# the numbers: one algorithm of each kind of state (none, client state, server state, MOON's
# model of its own); tests/engines/test_vmap_conformance.py compares every algorithm's engines
@pytest.mark.parametrize("name", ["fedavg", "scaffold", "mifa", "moon"])
def test_auto_gives_the_sequential_engines_numbers(name):
    seq_state, _ = _run({"algorithm": name, "engine": "sequential", **_even(name)})
    auto_state, rounds = _run({"algorithm": name, "engine": "auto", **_even(name)})
    assert isinstance(rounds.engine, VmapEngine)
    # float32 rounding alone (3.6e-7 seen; AVX-512 and AVX2 kernels, 1 and 2 threads): the
    # bound of test_vmap_conformance, whose float64 runs prove the engines compute the same
    assert _max_diff(seq_state, auto_state) < FP32_BOUND


def test_auto_falls_back_to_sequential_for_batchnorm(capsys):
    cfg = {**BASE, "model": "resnet20", "model.norm": "batch", "rounds": 1}
    _fed, rounds = build_rounds(make_config({k: v for k, v in cfg.items() if k != "model.hidden"}))
    assert isinstance(rounds.engine, SequentialEngine)
    assert "BatchNorm" in capsys.readouterr().out


EVEN = {
    **{k: v for k, v in BASE.items() if k != "partition.alpha"},
    "partition": "iid",
}  # 9 clients of 199-200 samples: 13 steps each


def test_auto_compiles_only_long_runs_with_a_compiler(monkeypatch):
    short = build_federation(make_config({**EVEN, "rounds": 2}))
    assert auto.balance(short) == 1.0
    assert auto.choose(short, threads=2)[:3] == ("vmap", False, 1)
    # 9 clients, 5 per round, digits split 9 ways (~200 samples), batch 16, 2 epochs: ~26 steps
    long = build_federation(make_config({**EVEN, "rounds": 1000}))
    assert auto.client_steps(long) >= auto.COMPILE_CLIENT_STEPS
    assert auto.choose(long, threads=2)[:2] == ("vmap", True)
    monkeypatch.setattr(auto.shutil, "which", lambda name: None)
    name, compiled, _, why = auto.choose(long, threads=2)
    assert (name, compiled) == ("vmap", False) and "compiler" in why


def test_auto_keeps_uneven_clients_sequential_until_compiling_pays():
    # BASE: Dirichlet alpha = 0.5 over 9 clients; a vmapped chunk runs its largest client's steps
    ragged = build_federation(make_config({**BASE, "rounds": 2}))
    assert auto.balance(ragged) < auto.MIN_BALANCE
    name, compiled, workers, why = auto.choose(ragged, threads=2)
    assert (name, compiled, workers) == ("sequential", False, 2) and "uneven clients" in why
    long = build_federation(make_config({**BASE, "rounds": 1000}))
    assert auto.choose(long, threads=2)[:2] == ("vmap", True)


def test_auto_keeps_one_cpu_thread_sequential_until_compiling_pays():
    short = build_federation(make_config({**BASE, "rounds": 2}))
    name, compiled, workers, why = auto.choose(short, threads=1)
    assert (name, compiled, workers) == ("sequential", False, 1) and "one CPU thread" in why
    longer = build_federation(make_config({**BASE, "rounds": 500}))
    steps = auto.client_steps(longer)
    assert auto.COMPILE_CLIENT_STEPS <= steps < auto.COMPILE_CLIENT_STEPS_ONE_THREAD
    assert auto.choose(longer, threads=1)[:2] == ("sequential", False)
    longest = build_federation(make_config({**BASE, "rounds": 4000}))
    assert auto.choose(longest, threads=1)[:2] == ("vmap", True)


def test_auto_keeps_convolutions_sequential_on_a_cpu(monkeypatch):
    cfg = {k: v for k, v in BASE.items() if k != "model.hidden"}
    fed = build_federation(make_config({**cfg, "model": "resnet20", "model.norm": "group"}))
    name, compiled, workers, why = auto.choose(fed, threads=2)
    assert (name, compiled, workers) == ("sequential", False, 2) and "convolutions" in why
    # on three threads, three clients at a time; never with dropout (timing-dependent draws)
    assert auto.choose(fed, threads=3)[2] == 3
    monkeypatch.setattr(auto, "draws_random_numbers", lambda model: True)
    assert auto.choose(fed, threads=2)[:3] == ("sequential", False, 1)


def test_auto_writes_its_choice_to_the_summary(tmp_path, capsys):
    cfg = make_config({**EVEN, "rounds": 1, "engine": "auto", "threads": 2})
    summary = run_experiment(cfg, tmp_path, progress=False)
    assert summary["engine"] == "vmap"
    assert summary["engine_choice"].startswith("vmap, chunk 10: 2 CPU threads")
    assert "engine=auto: vmap, chunk 10" in capsys.readouterr().out


def test_auto_takes_engine_workers_for_the_sequential_engine_it_keeps(capsys):
    """``engine.workers=N`` under the default ``engine=auto``: N clients at a time wherever auto
    keeps the sequential engine (here one torch thread, whose rule is one at a time); the
    vectorised engine, where auto picks it, is unaffected."""
    short = {**BASE, "rounds": 2, "threads": 1}
    cfg = make_config({**short, "engine.workers": 2})
    assert cfg.engine == "auto" and cfg.engine_params == {"workers": 2}
    _fed, rounds = build_rounds(cfg)
    assert isinstance(rounds.engine, SequentialEngine) and rounds.engine.workers == 2
    assert "sequential, 2 workers: one CPU thread" in capsys.readouterr().out
    even = build_federation(make_config({**EVEN, "rounds": 2}))
    assert auto.choose(even, threads=2, workers=3)[:3] == ("vmap", False, 1)
    fed = build_federation(make_config(short))
    assert auto.choose(fed, threads=2, workers=1)[:3] == ("sequential", False, 1)
    with pytest.raises(ValueError, match=r"engine\.workers must be >= 0"):
        auto.auto_engine(fed, workers=-1)
