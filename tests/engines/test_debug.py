"""engine=debug: the sequential engine's numbers, with every error located (round, client,
stage) and a stop at the first NaN or Inf a client's stage gives."""

from dataclasses import replace

import pytest

from fedretain.algorithms import build_algorithm
from fedretain.cli import main
from fedretain.core.tree import tree_map
from fedretain.engines.round import Rounds
from fedretain.engines.sequential import DebugEngine
from fedretain.errors import DivergenceError
from fedretain.experiments.run import run_experiment
from fedretain.files import read_jsonl
from fedretain.recipe.config import make_config
from tests.test_docs_examples import TINY as DOCS_TINY
from tests.tiny import tiny_engine

TINY = {k: v for k, v in DOCS_TINY.items() if k != "engine"}  # digits, a small MLP


def _debug(algorithm) -> Rounds:
    rounds = tiny_engine(algorithm)
    rounds.engine = DebugEngine()
    return rounds


def _run(rounds: Rounds, n: int = 2) -> None:
    state = rounds.algorithm.server_init(*rounds.task.init())
    for rnd in range(n):
        state, _ = rounds.run_round(state, rnd, 0.1, per_round=2)


def test_debug_gives_the_sequential_engines_numbers(tmp_path):
    for engine in ("sequential", "debug"):
        run_experiment(make_config({**TINY, "engine": engine}), tmp_path / engine)
    rows = {
        e: [
            {k: v for k, v in r.items() if k != "seconds"}
            for r in read_jsonl(tmp_path / e / "metrics.jsonl")
        ]
        for e in ("sequential", "debug")
    }
    assert rows["debug"] == rows["sequential"]


def test_an_error_in_a_local_step_names_its_round_client_and_step():
    fedavg = build_algorithm("fedavg")
    calls = []

    def step(state, batch, ctx):
        calls.append((ctx.info.round, ctx.client_id))
        if len(calls) == 4:  # round 2's second client (client 1), its first step
            raise ValueError("a bad batch")
        return fedavg.local_step(state, batch, ctx)

    with pytest.raises(ValueError, match="a bad batch") as e:
        _run(_debug(replace(fedavg, local_step=step)))
    assert e.value.__notes__ == ["engine=debug: round 2, client 1, local_step 1 of 1"]
    with pytest.raises(ValueError) as plain:  # the sequential engine: the error alone
        calls.clear()
        _run(tiny_engine(replace(fedavg, local_step=step)))
    assert not getattr(plain.value, "__notes__", None)


def test_an_error_in_local_init_or_the_aggregation_is_located():
    fedavg = build_algorithm("fedavg")

    def init(downlink, client_state, ctx):
        raise KeyError("momentum")

    with pytest.raises(KeyError) as e:
        _run(_debug(replace(fedavg, local_init=init)))
    assert e.value.__notes__ == ["engine=debug: round 1, client 0, local_init"]

    def aggregate(state, stacked, weights, info):
        raise RuntimeError("shapes")

    with pytest.raises(RuntimeError) as e:
        _run(_debug(replace(fedavg, aggregate=aggregate)))
    assert e.value.__notes__ == ["engine=debug: round 1, the server's aggregate"]


def test_the_first_nan_stops_the_client_naming_the_stage_and_the_key():
    fedavg = build_algorithm("fedavg")

    def final(state, client_state, ctx):
        uplink, new_state = fedavg.local_final(state, client_state, ctx)
        if ctx.client_id == 1:
            uplink = tree_map(lambda v: v * float("nan"), uplink)
        return uplink, new_state

    with pytest.raises(
        DivergenceError, match=r"round 1, client 1, local_final gave NaN in uplink/\w+"
    ):
        _run(_debug(replace(fedavg, local_final=final)))
    rounds = tiny_engine(replace(fedavg, local_final=final))  # sequential: found only at the round
    with pytest.raises(DivergenceError, match="training diverged in round 1") as e:
        _run(rounds)
    assert "local_final" not in str(e.value)


def test_a_diverging_run_on_the_command_line_names_the_step(tmp_path, capsys):
    code = main(
        [
            "run",
            *[f"{k}={v}" for k, v in TINY.items() if k != "model.hidden"],
            "engine=debug",
            "lr=1e30",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert "engine=debug: round 1, client" in err and "local_step" in err and "gave" in err
