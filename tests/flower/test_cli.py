"""The command lines: ``fedretain run engine=flower`` (its own simulation) and
``python -m fedretain.flower app``."""

import json
import os
import time
import tomllib

import pytest

pytest.importorskip("flwr", reason="needs Flower (flwr is not installed)")

from fedretain.cli import main
from fedretain.files import read_jsonl
from fedretain.flower.__main__ import main as flower_main
from fedretain.flower.processes import alive, descendants
from tests.flower.helpers import BASE

ARGS = [f"{k}={json.dumps(v) if isinstance(v, list) else v}" for k, v in BASE.items()]


def test_run_engine_flower_starts_and_stops_its_own_simulation(tmp_path, capsys):
    before = set(descendants(os.getpid()))
    common = [*ARGS, "algorithm=scaffold", "rounds=2", "checkpoint_every=0"]
    assert main(["run", *common, "engine=flower", "--out", str(tmp_path / "fl")]) == 0
    spawned = set(descendants(os.getpid())) - before
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(alive(p) for p in spawned):
        time.sleep(0.2)
    assert not [p for p in spawned if alive(p)], "Ray processes left after the run"
    assert main(["run", *common, "--out", str(tmp_path / "seq")]) == 0
    fl, seq = (read_jsonl(tmp_path / d / "metrics.jsonl") for d in ("fl", "seq"))
    for a, b in zip(seq, fl, strict=True):
        assert a["test_accuracy"] == pytest.approx(b["test_accuracy"], abs=1e-6)
        assert a["test_loss"] == pytest.approx(b["test_loss"], abs=1e-5)
    summary = json.loads((tmp_path / "fl" / "summary.json").read_text())
    assert summary["lost_replies"] == 0 and summary["rounds"] == 2
    written = tomllib.loads((tmp_path / "fl" / "config.toml").read_text())
    assert written["engine"]["name"] == "flower"


def test_bad_flower_settings_are_one_line_errors(tmp_path, capsys):
    out = str(tmp_path / "x")
    assert main(["run", *ARGS, "engine=flower", "engine.client_cpus=0", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: engine.client_cpus must be > 0, got 0.0"
    assert main(["run", *ARGS, "engine=flow", "--out", out]) == 2
    assert "did you mean 'flower'" in capsys.readouterr().err


def test_app_folder_is_a_valid_flower_app(tmp_path, capsys):
    from flwr.cli.config_utils import load_and_validate

    app, out = tmp_path / "app", tmp_path / "results"
    assert flower_main(["app", str(app), "--out", str(out), *ARGS, "algorithm=mifa"]) == 0
    assert "flwr run" in capsys.readouterr().out
    config, _ = load_and_validate(app / "pyproject.toml")  # Flower's own check, modules included
    run_config = config["tool"]["flwr"]["app"]["config"]
    assert run_config["out"] == str(out)
    settings = tomllib.loads(run_config["config"])
    assert settings["engine"]["name"] == "flower" and settings["algorithm"] == "mifa"


def test_node_and_worker_refuse_bad_options_in_one_line(capsys):
    assert flower_main(["node", "--isolation", "process", "--insecure"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: node sets --isolation itself") and "\n" not in err
    assert flower_main(["node", "--poll", "-1", "--insecure"]) == 2
    assert "--poll must be >= 0" in capsys.readouterr().err
    assert flower_main(["worker", "--runtime-api-address", "127.0.0.1:1", "--poll", "0"]) == 2
    assert "--poll must be > 0" in capsys.readouterr().err


def test_local_federation_nodes_are_warm_unless_asked(tmp_path):
    from fedretain.errors import ConfigError
    from fedretain.flower.deployment import LocalFederation

    warm = LocalFederation(2, workdir=tmp_path, port=1).node_command(1)
    assert warm[1:4] == ["-m", "fedretain.flower.node", "node"] and "--cold" not in warm
    assert "partition-id=1 num-partitions=2" in warm
    cold = LocalFederation(2, workdir=tmp_path, port=1, warm=False).node_command(0)
    assert "--cold" in cold and "--poll" in cold
    flower = LocalFederation(2, workdir=tmp_path, port=1, warm=False, poll=0).node_command(0)
    assert flower[0].endswith("flower-supernode") and "--isolation" not in flower
    with pytest.raises(ConfigError, match="poll must be >= 0"):
        LocalFederation(2, workdir=tmp_path, poll=-1)
