"""Checkpoints, exact resume (also after SIGKILL), divergence handling, declared payloads."""

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from fedretain.algorithms import ALGORITHMS, build_algorithm, continual_only
from fedretain.core.optim import SERVER_OPTIMIZERS
from fedretain.data.base import Dataset
from fedretain.engines.round import Rounds
from fedretain.engines.sequential import SequentialEngine
from fedretain.engines.vmap import VmapEngine
from fedretain.errors import ConfigError, DataError, DivergenceError, OutputError
from fedretain.experiments.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from fedretain.experiments.run import run_experiment
from fedretain.files import read_json, read_jsonl
from fedretain.recipe.config import make_config
from tests.tiny import TINY_PARTS, run_rounds, tiny_engine

DIGITS = {
    "dataset": "digits",
    "model": "mlp",
    "model.hidden": [32],
    "clients": 10,
    "clients_per_round": 4,
    "batch_size": 20,
    "lr": 0.1,
    "partition": "shards",
    "algorithm": "scaffold",
}


def _without_seconds(path):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in read_jsonl(path)]


def test_checkpoint_roundtrip_keeps_structure_and_rng(tmp_path):
    torch.manual_seed(5)
    server = {"x": {"w": torch.randn(3)}, "buffers": {}, "v": {"w": torch.zeros(3)}}
    clients = {7: {"c_i": {"w": torch.ones(3)}}, 2: {"c_i": {"w": torch.full((3,), 2.0)}}}
    rng = torch.get_rng_state()
    ckpt = Checkpoint(
        3,
        server,
        clients,
        {"by_key": {}, "per_client": {}},
        [{"round": 3}],
        1.5,
        rng,
        [],
        {"seed": 0},
    )
    save_checkpoint(tmp_path, ckpt)
    torch.randn(10)  # move the RNG on
    back = load_checkpoint(tmp_path)
    assert back.round == 3 and back.server["buffers"] == {}
    assert torch.equal(back.server["x"]["w"], server["x"]["w"])
    assert set(back.clients) == {7, 2} and torch.equal(
        back.clients[2]["c_i"]["w"], clients[2]["c_i"]["w"]
    )
    assert torch.equal(back.torch_rng, rng)
    # the last two checkpoints are kept: a newer one removes the one before the previous
    save_checkpoint(tmp_path, replace(ckpt, round=4))
    save_checkpoint(tmp_path, replace(ckpt, round=5))
    assert sorted(p.name for p in (tmp_path / "checkpoint").glob("*.safetensors")) == [
        "state-4.safetensors",
        "state-5.safetensors",
    ]
    assert load_checkpoint(tmp_path).round == 5


def test_corrupt_or_missing_checkpoint_is_one_line(tmp_path):
    with pytest.raises(DataError, match="no checkpoint"):
        load_checkpoint(tmp_path)
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "checkpoint" / "meta.json").write_text("{not json")
    with pytest.raises(DataError, match="cannot be read"):
        load_checkpoint(tmp_path)


def test_resume_extends_a_finished_run_exactly(tmp_path):
    run_experiment(make_config({**DIGITS, "rounds": 2}), tmp_path / "a", progress=False)
    run_experiment(
        make_config({**DIGITS, "rounds": 4}), tmp_path / "a", progress=False, resume=True
    )
    run_experiment(make_config({**DIGITS, "rounds": 4}), tmp_path / "b", progress=False)
    assert _without_seconds(tmp_path / "a" / "metrics.jsonl") == _without_seconds(
        tmp_path / "b" / "metrics.jsonl"
    )
    a = json.loads((tmp_path / "a" / "summary.json").read_text())
    b = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert a["bytes_up"] == b["bytes_up"] and a["clients_with_state"] == b["clients_with_state"]


def test_resume_of_a_composed_server_side_matches_uninterrupted(tmp_path):
    """FedProx clients, FedAdam server, trimmed mean: the server optimizer's state (m, v, t)
    travels in the checkpoint."""
    composed = {
        **DIGITS,
        "algorithm": "fedprox",
        "server_opt": "adam",
        "aggregator": "trimmed_mean",
    }
    run_experiment(make_config({**composed, "rounds": 2}), tmp_path / "a", progress=False)
    ckpt = load_checkpoint(tmp_path / "a")
    assert int(ckpt.server["server_opt"]["t"]) == 2
    run_experiment(
        make_config({**composed, "rounds": 4}), tmp_path / "a", progress=False, resume=True
    )
    run_experiment(make_config({**composed, "rounds": 4}), tmp_path / "b", progress=False)
    assert _without_seconds(tmp_path / "a" / "metrics.jsonl") == _without_seconds(
        tmp_path / "b" / "metrics.jsonl"
    )


def test_resume_accepts_a_checkpoint_older_than_a_new_key_at_its_default(tmp_path):
    run_experiment(make_config({**DIGITS, "rounds": 1}), tmp_path, progress=False)
    meta_path = tmp_path / "checkpoint" / "meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["fingerprint"]["store.dtype"]  # as written before the key existed
    meta_path.write_text(json.dumps(meta))
    run_experiment(make_config({**DIGITS, "rounds": 2}), tmp_path, progress=False, resume=True)
    with pytest.raises(ConfigError, match=r"cannot resume.*store\.dtype"):
        run_experiment(
            make_config({**DIGITS, "rounds": 3, "store.dtype": "float16"}),
            tmp_path,
            resume=True,
        )


def test_resume_refuses_changed_settings(tmp_path):
    run_experiment(make_config({**DIGITS, "rounds": 1}), tmp_path, progress=False)
    with pytest.raises(ConfigError, match=r"cannot resume.*: lr differs from the checkpoint"):
        run_experiment(make_config({**DIGITS, "rounds": 2, "lr": 0.2}), tmp_path, resume=True)
    with pytest.raises(ConfigError, match=r"cannot resume.*precision"):  # training's numerics
        run_experiment(
            make_config({**DIGITS, "rounds": 2, "precision": "bf16"}), tmp_path, resume=True
        )


def test_resume_accepts_another_evaluation_batch(tmp_path):
    """A checkpoint written with the old default (1000) continues under the new one (0):
    the evaluation batch only moves the test loss by float rounding."""
    run_experiment(
        make_config({**DIGITS, "rounds": 1, "eval_batch_size": 1000}), tmp_path, progress=False
    )
    run_experiment(make_config({**DIGITS, "rounds": 2}), tmp_path, progress=False, resume=True)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rows] == [0, 1, 2]


def kill_at_checkpoint(cmd: list[str], out: Path, env: dict, rnd: int, pause: float = 0.0) -> None:
    """Start ``cmd`` and SIGKILL it once ``out``'s checkpoint holds round ``rnd`` (then
    ``pause`` seconds later, to land inside a round)."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    meta = out / "checkpoint" / "meta.json"
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if json.loads(meta.read_text())["round"] >= rnd:
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.02)
    time.sleep(pause)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_sigkill_mid_run_then_resume_matches_uninterrupted(tmp_path):
    args = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in DIGITS.items()]
    args += ["rounds=16", "local_epochs=4", "checkpoint_every=1"]
    cli = [sys.executable, "-m", "fedretain.cli", "run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = tmp_path / "killed"
    kill_at_checkpoint([*cli, *args, "--out", str(killed)], killed, env, 3, pause=0.13)
    assert not (killed / "summary.json").exists()
    resumed = subprocess.run(
        [*cli, "--resume", str(killed)],
        env=env,
        capture_output=True,
        text=True,
    )
    assert resumed.returncode == 0, resumed.stderr
    full = tmp_path / "full"
    subprocess.run([*cli, *args, "--out", str(full)], env=env, check=True, capture_output=True)
    assert _without_seconds(killed / "metrics.jsonl") == _without_seconds(full / "metrics.jsonl")


def _kill_at_round(cmd: list[str], out: Path, env: dict, rnd: int) -> None:
    """Start ``cmd`` and SIGKILL it once ``out/metrics.jsonl`` shows round ``rnd``."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if read_jsonl(out / "metrics.jsonl")[-1]["round"] >= rnd:
                break
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()


@pytest.mark.slow  # test_sigkill_mid_run_then_resume_matches_uninterrupted stays in the default
def test_sigkill_before_the_first_checkpoint_then_resume_starts_over(tmp_path):
    """A run killed before its first checkpoint (checkpoint_every=10, killed at round 3) is
    started over by --resume, which says so, and ends with the uninterrupted run's metrics."""
    args = [f"{k}={json.dumps(v) if not isinstance(v, str) else v}" for k, v in DIGITS.items()]
    args += ["rounds=12", "local_epochs=4", "checkpoint_every=10", "algorithm=scaffold"]
    args += ["store=disk"]  # a killed run leaves client states behind: they must not be reused
    cli = [sys.executable, "-m", "fedretain.cli", "run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    killed = tmp_path / "killed"
    _kill_at_round([*cli, *args, "--out", str(killed)], killed, env, 3)
    assert not (killed / "checkpoint").exists() and not (killed / "summary.json").exists()
    assert any((killed / "client_state").iterdir())
    resumed = subprocess.run(
        [*cli, "--resume", str(killed)], env=env, capture_output=True, text=True
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "no checkpoint yet; starting over from round 0" in resumed.stderr
    full = tmp_path / "full"
    subprocess.run([*cli, *args, "--out", str(full)], env=env, check=True, capture_output=True)
    assert _without_seconds(killed / "metrics.jsonl") == _without_seconds(full / "metrics.jsonl")


def test_divergence_stops_and_keeps_results(tmp_path):
    cfg = make_config({**DIGITS, "algorithm": "fedavg", "rounds": 3, "lr": 1e30})
    with pytest.raises(DivergenceError, match=r"client .*lower lr"):
        run_experiment(cfg, tmp_path, progress=False)
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert "diverged" in summary["stopped"]
    assert read_jsonl(tmp_path / "metrics.jsonl")[0]["round"] == 0
    assert (tmp_path / "config.toml").exists()


@pytest.mark.parametrize("vectorised", [False, True])
def test_divergence_skip_drops_only_the_bad_client(vectorised):
    seq = tiny_engine(build_algorithm("fedavg"))
    ds = seq.clients.dataset
    x = ds.x_train.clone()
    x[1:] = float("inf")  # client 1's data makes its update NaN
    data = Dataset("tiny", x, ds.y_train, x, ds.y_train, num_classes=1)
    engine = Rounds(
        seq.algorithm,
        seq.task,
        replace(seq.clients, dataset=data),
        VmapEngine(seq.task) if vectorised else SequentialEngine(),
    )
    with pytest.raises(DivergenceError, match="client 1"):
        run_rounds(engine, 1)
    engine.on_divergence = "skip"
    params, buffers = engine.task.init()
    state, metrics = engine.run_round(engine.algorithm.server_init(params, buffers), 0, 0.1, 2)
    assert metrics["skipped_clients"] == 1
    assert float(state["x"]["weight"].reshape(())) == pytest.approx(1.1)  # client 0 alone
    assert TINY_PARTS[1].tolist() == [1, 2]


# fedmlb needs a model split into blocks (the one-weight model is not): its ledger check runs on
# an MLP in tests/algorithms/test_fedmlb.py; continual-only methods refuse this non-continual
# setting with a one-line ConfigError: their ledger test is in tests/continual/
@pytest.mark.parametrize(
    "name", [n for n in ALGORITHMS if n != "fedmlb" and n not in continual_only()]
)
def test_ledger_counts_exactly_the_declared_payload_keys(name):
    server = {}
    if ALGORITHMS.takes(name, "server_opt"):  # a composed server side sends the same payloads
        server = {"server_opt": SERVER_OPTIMIZERS.build("yogi")}
    engine = tiny_engine(build_algorithm(name, **server))
    run_rounds(engine, 1)
    algo = engine.algorithm
    assert set(engine.ledger.by_key["up"]) == set(algo.uplink_keys)
    assert set(engine.ledger.by_key["down"]) == set(algo.downlink_keys)


def test_a_client_sending_an_undeclared_key_is_stopped():
    algo = build_algorithm("fedavg")

    def leaky_final(state, client_state, ctx):
        uplink, cs = algo.local_final(state, client_state, ctx)
        return {**uplink, "data": ctx.data["x"]}, cs

    engine = tiny_engine(replace(algo, local_final=leaky_final))
    with pytest.raises(RuntimeError, match="declared"):
        run_rounds(engine, 1)
    assert engine.ledger.bytes_up == 0


def test_checkpoint_files_hold_no_pickle(tmp_path):
    run_experiment(make_config({**DIGITS, "rounds": 1}), tmp_path, progress=False)
    for f in (tmp_path / "checkpoint").iterdir():
        assert not f.read_bytes().startswith(b"\x80"), f  # pickle protocol header
    assert np.isfinite(json.loads((tmp_path / "summary.json").read_text())["final_accuracy"])


def test_a_truncated_latest_checkpoint_resumes_from_the_previous_one_exactly(tmp_path, capsys):
    cfg = {**DIGITS, "checkpoint_every": 1}
    run_experiment(make_config({**cfg, "rounds": 3}), tmp_path / "a", progress=False)
    latest = tmp_path / "a" / "checkpoint" / "state-3.safetensors"
    assert (tmp_path / "a" / "checkpoint" / "state-2.safetensors").is_file()
    latest.write_bytes(latest.read_bytes()[:-100])  # a copy cut short
    capsys.readouterr()
    run_experiment(make_config({**cfg, "rounds": 5}), tmp_path / "a", progress=False, resume=True)
    err = capsys.readouterr().err
    assert f"note: checkpoint {latest} cannot be read" in err and "truncated" in err
    assert f"resuming {tmp_path / 'a'} from round 2 of 5 (checkpoint state-2.safetensors)" in err
    run_experiment(make_config({**cfg, "rounds": 5}), tmp_path / "b", progress=False)
    assert _without_seconds(tmp_path / "a" / "metrics.jsonl") == _without_seconds(
        tmp_path / "b" / "metrics.jsonl"
    )
    assert load_checkpoint(tmp_path / "a").round == 5


def test_no_readable_checkpoint_names_the_damaged_file_and_the_fix(tmp_path):
    run_experiment(make_config({**DIGITS, "rounds": 2, "checkpoint_every": 1}), tmp_path)
    for name in ("state-1.safetensors", "state-2.safetensors"):
        (tmp_path / "checkpoint" / name).write_bytes(b"\x00" * 10)
    with pytest.raises(DataError) as e:
        run_experiment(make_config({**DIGITS, "rounds": 3}), tmp_path, resume=True)
    text = str(e.value)
    assert "state-2.safetensors cannot be read" in text and "state-1.safetensors" in text
    assert "--overwrite" in text and "backup" in text
    # the command it suggests starts the run over with the run's own settings
    from fedretain.cli import main

    command = shlex.split(re.search(r"`(fedretain run [^`]*)`", text).group(1))
    assert command[:2] == ["fedretain", "run"] and "--config" in command
    before = (tmp_path / "config.toml").read_text()
    assert main(command[1:]) == 0
    assert (tmp_path / "config.toml").read_text() == before
    assert [r["round"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2]


def test_a_diverged_runs_results_are_strict_json_and_read_back_as_nan(tmp_path):
    # one huge step leaves finite weights whose logits overflow: the test loss is NaN
    cfg = {**DIGITS, "algorithm": "fedavg", "rounds": 1, "local_steps": 1, "lr": 1e30}
    run_experiment(make_config(cfg), tmp_path, progress=False)

    def refuse(name):
        raise ValueError(f"bare {name} is not JSON")

    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line, parse_constant=refuse) for line in lines]
    summary = json.loads((tmp_path / "summary.json").read_text(), parse_constant=refuse)
    assert rows[-1]["test_loss"] == summary["final_loss"] == "NaN"
    assert np.isnan(read_jsonl(tmp_path / "metrics.jsonl")[-1]["test_loss"])
    assert np.isnan(read_json(tmp_path / "summary.json")["final_loss"])
    meta = json.loads((tmp_path / "checkpoint" / "meta.json").read_text(), parse_constant=refuse)
    assert meta["records"][-1]["test_loss"] == "NaN"
    assert np.isnan(load_checkpoint(tmp_path).records[-1]["test_loss"])


def test_a_full_disk_between_rounds_saves_a_checkpoint_to_resume_from(tmp_path, monkeypatch):
    """The disk fills while round 3's metrics are written, before the first checkpoint (10):
    the rounds run so far are kept in a checkpoint, and resuming gives the uninterrupted run."""
    from fedretain.experiments import run as run_module

    write = run_module.write_jsonl

    def full_at_round_3(path, rows):
        rows = list(rows)
        if rows[-1]["round"] == 3:
            raise OutputError(f"cannot write {path}: No space left on device")
        write(path, rows)

    monkeypatch.setattr(run_module, "write_jsonl", full_at_round_3)
    with pytest.raises(OutputError, match="No space left"):
        run_experiment(make_config({**DIGITS, "rounds": 5}), tmp_path / "a", progress=False)
    monkeypatch.undo()
    assert load_checkpoint(tmp_path / "a").round == 3
    run_experiment(make_config({**DIGITS, "rounds": 5}), tmp_path / "a", resume=True)
    run_experiment(make_config({**DIGITS, "rounds": 5}), tmp_path / "b", progress=False)
    assert _without_seconds(tmp_path / "a" / "metrics.jsonl") == _without_seconds(
        tmp_path / "b" / "metrics.jsonl"
    )


def test_a_failure_inside_a_round_saves_no_checkpoint_of_a_half_round(tmp_path, monkeypatch):
    real = Rounds.run_round

    def fail_in_round_3(self, state, rnd, *args, **kwargs):
        if rnd == 2:
            raise RuntimeError("a client crashed")
        return real(self, state, rnd, *args, **kwargs)

    monkeypatch.setattr(Rounds, "run_round", fail_in_round_3)
    with pytest.raises(RuntimeError):
        run_experiment(make_config({**DIGITS, "rounds": 5}), tmp_path, progress=False)
    assert not (tmp_path / "checkpoint").exists()


@pytest.fixture
def sigint():
    """Set SIGINT's handler for a test (what the test process inherited is restored after):
    Python's own on a terminal; ignored under nohup or in a background job of a script."""
    inherited = signal.getsignal(signal.SIGINT)
    yield lambda handler: signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGINT, inherited)


def test_ctrl_c_finishes_the_round_then_stops_with_a_checkpoint(
    tmp_path, monkeypatch, capsys, sigint
):
    from fedretain.experiments.run import Run

    sigint(signal.default_int_handler)  # as on a terminal, whatever this process inherited
    real = Run.round

    def interrupted_in_round_2(self, rnd):
        if rnd == 1:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while the round runs
        return real(self, rnd)

    monkeypatch.setattr(Run, "round", interrupted_in_round_2)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(make_config({**DIGITS, "rounds": 5}), tmp_path / "a", progress=False)
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # restored
    err = capsys.readouterr().err
    assert "stopping after this round" in err and "saved a checkpoint at round 2 of 5" in err
    assert load_checkpoint(tmp_path / "a").round == 2
    run_experiment(make_config({**DIGITS, "rounds": 5}), tmp_path / "a", resume=True)
    run_experiment(make_config({**DIGITS, "rounds": 5}), tmp_path / "b", progress=False)
    assert _without_seconds(tmp_path / "a" / "metrics.jsonl") == _without_seconds(
        tmp_path / "b" / "metrics.jsonl"
    )


def test_an_ignored_sigint_stays_ignored_during_a_run(tmp_path, monkeypatch, sigint):
    """A process that inherits SIGINT ignored (nohup, a background job) keeps ignoring it: the
    run installs no handler of its own, and a SIGINT during a round changes nothing."""
    from fedretain.experiments.run import Run

    sigint(signal.SIG_IGN)
    real, handlers = Run.round, []

    def interrupted_in_round_2(self, rnd):
        handlers.append(signal.getsignal(signal.SIGINT))
        if rnd == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return real(self, rnd)

    monkeypatch.setattr(Run, "round", interrupted_in_round_2)
    summary = run_experiment(make_config({**DIGITS, "rounds": 3}), tmp_path, progress=False)
    assert summary["rounds"] == 3 and "stopped" not in summary
    assert handlers == [signal.SIG_IGN] * 3
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_counts_since_the_last_record_survive_a_resume_between_records(tmp_path, monkeypatch):
    """Skipped clients (and lost replies) are counted from one record to the next: a
    checkpoint of a round without a record keeps the count so far."""
    from fedretain.engines.round import Rounds
    from fedretain.experiments.observers import LostReplies, RoundResult

    close, calls = Rounds.close, []

    def skipping_one(self, server_state, rnd):  # every round skips one client
        calls.append(1)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        state, metrics = close(self, server_state, rnd)
        return state, {**metrics, "skipped_clients": 1.0}

    monkeypatch.setattr(Rounds, "close", skipping_one)
    cfg = make_config({**DIGITS, "rounds": 4, "eval_every": 2, "checkpoint_every": 1})
    stop_at = 4  # interrupted in round 4: the checkpoint is round 3's, recorded up to round 2
    with pytest.raises(KeyboardInterrupt):
        run_experiment(cfg, tmp_path / "a", progress=False)
    stop_at = 0
    run_experiment(cfg, tmp_path / "a", progress=False, resume=True)
    run_experiment(cfg, tmp_path / "b", progress=False)
    resumed = _without_seconds(tmp_path / "a" / "metrics.jsonl")
    assert resumed == _without_seconds(tmp_path / "b" / "metrics.jsonl")
    assert [r["skipped_clients"] for r in resumed] == [0.0, 2.0, 2.0]
    lost = LostReplies()
    lost.after_round(RoundResult(0, [0], 0.1, {"lost_replies": 2.0}, {}, {}))
    again = LostReplies()
    again.load_state(lost.state())
    assert again.record({}, {}) == {"lost_replies": 2}
    again.load_state(None)  # a checkpoint written before the count was kept
    assert again.record({}, {}) == {"lost_replies": 0}


def _flip(path, count=400):
    """Flip ``count`` bytes in the middle of ``path`` (its size stays), in a new file: hard
    links to the old one keep their bytes."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2 - count // 2
    for i in range(max(middle, 0), min(middle + count, len(data))):
        data[i] ^= 0xFF
    path.unlink()
    path.write_bytes(bytes(data))


def test_a_damaged_latest_checkpoint_is_caught_by_its_checksum_and_the_previous_used(
    tmp_path, capsys
):
    cfg = {**DIGITS, "checkpoint_every": 1}
    run_experiment(make_config({**cfg, "rounds": 3}), tmp_path / "a", progress=False)
    meta = read_json(tmp_path / "a" / "checkpoint" / "meta.json")
    assert len(meta["sha256"]["state-3.safetensors"]) == 64
    latest = tmp_path / "a" / "checkpoint" / "state-3.safetensors"
    _flip(latest)  # as many bytes as before: only the checksum tells
    capsys.readouterr()
    run_experiment(make_config({**cfg, "rounds": 5}), tmp_path / "a", progress=False, resume=True)
    err = capsys.readouterr().err
    assert f"note: checkpoint {latest} is damaged: its SHA-256" in err
    assert "from round 2 of 5 (checkpoint state-2.safetensors)" in err
    run_experiment(make_config({**cfg, "rounds": 5}), tmp_path / "b", progress=False)
    assert _without_seconds(tmp_path / "a" / "metrics.jsonl") == _without_seconds(
        tmp_path / "b" / "metrics.jsonl"
    )
    # both checkpoints damaged: one line, nothing resumed
    for name in ("state-4.safetensors", "state-5.safetensors"):
        _flip(tmp_path / "a" / "checkpoint" / name)
    before = (tmp_path / "a" / "config.toml").read_text()
    with pytest.raises(DataError) as e:
        run_experiment(make_config({**cfg, "rounds": 6}), tmp_path / "a", resume=True)
    text = str(e.value)
    assert "state-5.safetensors is damaged" in text and "state-4.safetensors is damaged" in text
    assert "\n" not in text and (tmp_path / "a" / "config.toml").read_text() == before


def test_a_damaged_client_file_of_a_disk_store_is_caught_by_its_checksum(tmp_path, capsys):
    cfg = {**DIGITS, "checkpoint_every": 1, "store": "disk"}
    run_experiment(make_config({**cfg, "rounds": 2}), tmp_path / "a", progress=False)
    clients = sorted((tmp_path / "a" / "checkpoint" / "clients-2").iterdir())
    meta = read_json(tmp_path / "a" / "checkpoint" / "meta.json")
    assert {f"clients-2/{p.name}" for p in clients} <= set(meta["sha256"])
    _flip(clients[0])
    capsys.readouterr()
    run_experiment(make_config({**cfg, "rounds": 3}), tmp_path / "a", progress=False, resume=True)
    err = capsys.readouterr().err
    assert f"note: checkpoint {clients[0]} is damaged" in err and "from round 1 of 3" in err
    run_experiment(make_config({**cfg, "rounds": 3}), tmp_path / "b", progress=False)
    assert _without_seconds(tmp_path / "a" / "metrics.jsonl") == _without_seconds(
        tmp_path / "b" / "metrics.jsonl"
    )


def test_a_checkpoint_without_checksums_resumes_unverified(tmp_path, capsys):
    """Checkpoints written before checksums were recorded still resume, with a note."""
    run_experiment(make_config({**DIGITS, "rounds": 2}), tmp_path / "a", progress=False)
    meta = tmp_path / "a" / "checkpoint" / "meta.json"
    old = read_json(meta)
    del old["sha256"]
    meta.write_text(json.dumps(old))
    capsys.readouterr()
    run_experiment(make_config({**DIGITS, "rounds": 3}), tmp_path / "a", resume=True)
    err = capsys.readouterr().err
    assert "has no checksum" in err and "unverified" in err and "from round 2 of 3" in err
    run_experiment(make_config({**DIGITS, "rounds": 3}), tmp_path / "b", progress=False)
    assert _without_seconds(tmp_path / "a" / "metrics.jsonl") == _without_seconds(
        tmp_path / "b" / "metrics.jsonl"
    )


def test_resume_with_fewer_rounds_than_the_run_has_is_refused(tmp_path):
    run_experiment(make_config({**DIGITS, "rounds": 3}), tmp_path, progress=False)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(ConfigError) as e:
        run_experiment(make_config({**DIGITS, "rounds": 2}), tmp_path, resume=True)
    assert "the run already has 3 rounds; rounds can only be extended" in str(e.value)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_stop_after_pauses_between_rounds_and_the_slices_equal_an_uninterrupted_run(
    tmp_path, capsys
):
    """A run sliced by stop_after (here so small that every slice runs one round, as a slice
    on a machine lent for a while does with its time): each slice ends with a checkpoint and
    no summary, and the resumed slices give the uninterrupted run's numbers."""
    from fedretain.cli import main

    keys = {**DIGITS, "rounds": 4, "checkpoint_every": 3, "eval_every": 1}
    run_experiment(make_config(keys), tmp_path / "whole", progress=False)
    sliced = make_config({**keys, "stop_after": 1e-9})
    out = tmp_path / "sliced"
    paused = run_experiment(sliced, out, progress=False)
    assert paused["paused"] and (paused["rounds"], paused["planned_rounds"]) == (1, 4)
    assert paused["continue"] == f"fedretain run --resume {out}"
    assert not (out / "summary.json").exists()  # not a result yet: reproduce resumes it
    assert read_json(out / "checkpoint" / "meta.json")["round"] == 1  # between the 3-round ones
    # the command line says so and continues it; two more slices, then the last round
    assert main(["run", "--resume", str(out)]) == 0
    assert "paused after round 2 of 4" in capsys.readouterr().out
    assert run_experiment(sliced, out, progress=False, resume=True)["rounds"] == 3
    summary = run_experiment(sliced, out, progress=False, resume=True)
    assert "paused" not in summary and summary["rounds"] == 4
    assert _without_seconds(out / "metrics.jsonl") == _without_seconds(
        tmp_path / "whole" / "metrics.jsonl"
    )


def test_stop_after_needs_checkpoints_and_a_number_of_seconds():
    with pytest.raises(ConfigError, match="stop_after must be >= 0"):
        make_config({**DIGITS, "stop_after": -1})
    with pytest.raises(ConfigError, match="checkpoint_every=0 saves none"):
        make_config({**DIGITS, "stop_after": 60, "checkpoint_every": 0})


@pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists(),
    reason="apt-get install dataset-fashion-mnist",
)
@pytest.mark.slow
def test_a_preset_sliced_by_stop_after_continues_with_the_same_command(tmp_path):
    """reproduce with stop_after: each run pauses (status 'paused', no result yet), and the
    same command, given again, continues every run to the report of a whole one."""
    from fedretain.studies.reproduce import reproduce

    lines: list[str] = []
    reproduce(["demo"], tmp_path / "a", scale="ci", extra=["stop_after=1e-9"], echo=lines.append)
    assert any("paused or not started in time: the same command continues them" in x for x in lines)
    statuses = [read_json(p) for p in (tmp_path / "a").glob("**/status.json")]
    assert statuses and {s["state"] for s in statuses} == {"paused"}
    runs = len(statuses)
    assert (
        f"Runs: 0 of {runs} finished, 0 diverged, 0 failed, {runs} not run"
        in (tmp_path / "a" / "report.md").read_text()
    )
    for _ in range(3):  # ci runs 2 rounds: a slice each, and the last finishes them
        reproduce(["demo"], tmp_path / "a", scale="ci", extra=["stop_after=1e-9"], echo=print)
    reproduce(["demo"], tmp_path / "b", scale="ci", echo=print)
    for summary in (tmp_path / "b").glob("**/metrics.jsonl"):
        other = tmp_path / "a" / summary.relative_to(tmp_path / "b")
        assert _without_seconds(other) == _without_seconds(summary)


@pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists(),
    reason="apt-get install dataset-fashion-mnist",
)
def test_reproduce_stop_after_bounds_the_invocation_and_leaves_late_runs_for_the_next(
    tmp_path, capsys
):
    from fedretain.cli import main
    from fedretain.recipe.config import config_from_text

    out = tmp_path / "a"
    args = ["reproduce", "demo", "--scale", "ci", "--out", str(out)]
    assert main([*args, "--stop-after", "0.001"]) == 0  # no time: nothing starts
    assert not list(out.glob("**/summary.json")) and not list(out.glob("**/checkpoint"))
    assert main([*args, "--stop-after", "3600"]) == 0  # time enough: every run finishes
    configs = list(out.glob("**/config.toml"))
    assert configs and len(list(out.glob("**/summary.json"))) == len(configs)
    for path in configs:  # each run was given the time left when it started
        assert 0 < config_from_text(path.read_text()).stop_after <= 3600
    capsys.readouterr()
    for bad in ("0", "-5", "nan"):
        assert main([*args, "--stop-after", bad]) == 2
        assert "--stop-after must be a number of seconds > 0" in capsys.readouterr().err


@pytest.mark.slow
def test_gpu_slice_pauses_a_run_packs_its_folder_and_the_next_slice_continues_it(tmp_path):
    """scripts/gpu_slice.sh on the CPU: a run too long for one 10-second slice pauses with a
    checkpoint and comes back as slice.tar; unpacked elsewhere, the next slice continues it."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path / "back")}
    folder = "slices/r"
    keys = [f"{k}={v}" for k, v in {**DIGITS, "rounds": 100000, "checkpoint_every": 50}.items()]
    keys = [k.replace("[32]", "32") for k in keys]
    work = tmp_path / "machine1"
    work.mkdir()
    script = ["bash", str(root / "scripts" / "gpu_slice.sh"), "--margin", "2", "12", folder]
    cmd = [*script, "run", *keys, "--out", folder]
    proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "paused after round" in proc.stdout and "slice.tar" in proc.stdout
    # the folder comes back packed, checkpoint included; the next machine unpacks it
    nxt = tmp_path / "machine2"
    nxt.mkdir()
    subprocess.run(["tar", "xf", str(tmp_path / "back" / "slice.tar")], cwd=nxt, check=True)
    first = read_json(nxt / folder / "checkpoint" / "meta.json")["round"]
    assert first > 0 and not (nxt / folder / "summary.json").exists()
    proc = subprocess.run(
        [*script, "run"], cwd=nxt, env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert read_json(nxt / folder / "checkpoint" / "meta.json")["round"] > first
