"""Privacy in runs: ε in metrics and summary, exact resume after SIGKILL (the accountants'
state in the checkpoint), the same numbers on Flower as on the sequential engine."""

import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")

from fedretain.core.algorithm import RoundInfo
from fedretain.errors import ConfigError
from fedretain.experiments.checkpoint import load_checkpoint
from fedretain.experiments.run import run_experiment
from fedretain.files import read_jsonl
from fedretain.privacy.accounting import ClientAccountant, rdp_epsilon
from fedretain.recipe.config import make_config
from fedretain.recipe.federation import build_federation
from tests.experiments.test_resume import _kill_at_round, _without_seconds
from tests.flower.helpers import config, inline_federation, max_diff, run_rounds

DIGITS = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [16],
    "clients": 8,
    "clients_per_round": 3,
    "batch_size": 20,
    "lr": 0.1,
    "partition": "dirichlet",
    "partition.alpha": 0.5,
    "rounds": 3,
    "checkpoint_every": 0,
}
DPSGD = {"privacy": "dpsgd", "privacy.noise_multiplier": 1.1, "privacy.max_grad_norm": 1.0}


def test_dpsgd_run_reports_the_largest_client_epsilon_each_round(tmp_path):
    cfg = make_config({**DIGITS, **DPSGD})
    summary = run_experiment(cfg, tmp_path, progress=False)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    eps = [r["epsilon"] for r in records]
    assert eps[0] == 0.0 and all(a <= b for a, b in itertools.pairwise(eps)) and eps[-1] > 0
    # the same ledger rebuilt by hand from the sampled clients and their mini-batch plans
    fed = build_federation(cfg)
    ledger = ClientAccountant()
    for rnd in range(cfg.rounds):
        clients = fed.participation.clients(rnd).tolist()
        info = RoundInfo(rnd, cfg.clients, tuple(clients), cfg.lr, cfg.seed)
        for cid in clients:
            steps = len(fed.clients.plan(cid, info, fed.algorithm))
            ledger.record(cid, 1.1, min(1.0, 20 / fed.clients.size(cid)), steps)
    assert summary["privacy"]["epsilon"] == pytest.approx(ledger.epsilon(1e-5), rel=1e-9)
    assert summary["privacy"]["mechanism"] == "dpsgd" and eps[-1] == summary["privacy"]["epsilon"]


def test_client_level_run_reports_epsilon_at_the_round_sampling_rate(tmp_path):
    cfg = make_config(
        {
            **DIGITS,
            "privacy": "client_fixed",
            "privacy.noise_multiplier": 0.8,
            "algo.weighted": False,
        }
    )
    run_experiment(cfg, tmp_path, progress=False)
    records = read_jsonl(tmp_path / "metrics.jsonl")
    for r in records[1:]:
        assert r["epsilon"] == pytest.approx(rdp_epsilon(0.8, 3 / 8, r["round"], 1e-5))


def test_privacy_is_refused_where_it_does_not_compose():
    with pytest.raises(ConfigError, match="fedreg"):
        build_federation(make_config({**DIGITS, **DPSGD, "algorithm": "fedreg"}))
    with pytest.raises(ConfigError, match="scaffold"):
        build_federation(
            make_config({**DIGITS, "algorithm": "scaffold", "privacy": "client_fixed"})
        )
    with pytest.raises(ConfigError, match="delta must be in"):
        make_config({**DIGITS, **DPSGD, "privacy.delta": 2.0})


def test_sigkill_then_resume_keeps_the_accountants_state(tmp_path):
    settings = {**DIGITS, **DPSGD, "rounds": 6, "local_epochs": 2, "checkpoint_every": 1}
    settings["threads"] = 1  # the uninterrupted run below runs in this process
    args = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in settings.items()]
    cli = [sys.executable, "-m", "fedretain.cli", "run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed, full = tmp_path / "killed", tmp_path / "full"
    _kill_at_round([*cli, *args, "--out", str(killed)], killed, env, 3)
    assert load_checkpoint(killed).extra["accountant"]["histories"]
    resumed = subprocess.run(
        [*cli, "--resume", str(killed)], env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    run_experiment(make_config(settings), full, progress=False)
    assert _without_seconds(killed / "metrics.jsonl") == _without_seconds(full / "metrics.jsonl")
    eps = [r["epsilon"] for r in read_jsonl(killed / "metrics.jsonl")]
    assert np.all(np.diff(eps) >= 0) and eps[-1] > 0


@pytest.mark.parametrize(
    "privacy",
    [
        {"privacy": "dpsgd", "privacy__noise_multiplier": 0.7},
        {
            "privacy": "client_adaptive",
            "privacy__noise_multiplier": 0.5,
            "privacy__clipped_count_stddev": 1.0,
            "algo__weighted": False,
        },
    ],
)
def test_private_rounds_on_flower_equal_the_sequential_engine(privacy):
    ref, _ = run_rounds(config(algorithm="fedavg", **privacy), rounds=2)
    federation, _ = inline_federation(4)
    state, _ = run_rounds(config(algorithm="fedavg", engine="flower", **privacy), 2, federation)
    assert max_diff(ref, state) == 0.0
