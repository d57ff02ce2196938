"""tracking=tensorboard: each record's numbers as TensorBoard scalars, no duplicates on resume."""

import pytest

from fedretain.errors import ConfigError
from fedretain.experiments.tracking import TensorBoardTracker, scalars
from fedretain.recipe.config import make_config

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")

RECORDS = [
    {
        "round": r,
        "test_accuracy": 0.1 * r,
        "train_loss": None if r == 0 else 1.0 / r,
        "participants": 4,
        "bytes_up": 1000 * r,
    }
    for r in range(6)
]


def points(folder, tag):
    acc = event_accumulator.EventAccumulator(str(folder))
    acc.Reload()
    return [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)]


def test_scalars_are_the_numbers_of_a_record_but_the_step():
    got = scalars({"round": 3, "test_accuracy": 0.5, "train_loss": None, "ok": True, "x": "a"})
    assert got == {"test_accuracy": 0.5}


def test_every_numeric_key_is_a_scalar_by_round(tmp_path):
    tracker = TensorBoardTracker(tmp_path)
    tracker.start(0, [])
    for r in RECORDS:
        tracker.record(r, {})
    tracker.close()
    acc = event_accumulator.EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"test_accuracy", "train_loss", "participants", "bytes_up"}
    assert points(tmp_path / "tensorboard", "test_accuracy") == [
        (r, round(0.1 * r, 6)) for r in range(6)
    ]
    assert [s for s, _ in points(tmp_path / "tensorboard", "train_loss")] == [1, 2, 3, 4, 5]


def test_resume_keeps_rounds_to_the_checkpoint_and_drops_the_rest(tmp_path):
    first = TensorBoardTracker(tmp_path)  # killed after round 4, checkpoint at round 3
    first.start(0, [])
    for r in RECORDS[:5]:
        first.record(r, {})
    first.close()
    again = TensorBoardTracker(tmp_path)
    again.start(3, RECORDS[:4])
    for r in RECORDS[4:]:
        again.record({**r, "test_accuracy": 9.0}, {})
    again.close()
    got = points(tmp_path / "tensorboard", "test_accuracy")
    assert got == [(0, 0.0), (1, 0.1), (2, 0.2), (3, 0.3), (4, 9.0), (5, 9.0)]


def test_tracking_switched_on_at_resume_writes_the_kept_records(tmp_path):
    tracker = TensorBoardTracker(tmp_path)
    tracker.start(2, RECORDS[:3])
    tracker.record(RECORDS[3], {})
    tracker.close()
    assert [s for s, _ in points(tmp_path / "tensorboard", "test_accuracy")] == [0, 1, 2, 3]


def test_a_fresh_run_clears_an_old_folder(tmp_path):
    old = TensorBoardTracker(tmp_path)
    old.start(0, [])
    for r in RECORDS:
        old.record(r, {})
    old.close()
    new = TensorBoardTracker(tmp_path)
    new.start(0, [])
    new.record(RECORDS[0], {})
    new.close()
    assert points(tmp_path / "tensorboard", "test_accuracy") == [(0, 0.0)]


def test_the_tracking_key_is_checked():
    assert make_config({}).tracking == ""
    assert make_config({"tracking": "tensorboard"}).tracking == "tensorboard"
    with pytest.raises(ConfigError, match="unknown tracker 'tensorbord'"):
        make_config({"tracking": "tensorbord"})


def test_a_run_with_tracking_writes_its_metrics_to_tensorboard(tmp_path, capsys):
    from fedretain.cli import main
    from fedretain.files import read_jsonl

    fast = ["dataset=digits", "model=mlp", "model.hidden=[16]", "clients=4", "clients_per_round=2"]
    out = tmp_path / "run"
    args = [*fast, "rounds=3", "checkpoint_every=2", "tracking=tensorboard"]
    assert main(["run", *args, "--out", str(out)]) == 0
    assert main(["run", "--resume", str(out), "rounds=4"]) == 0
    rows = read_jsonl(out / "metrics.jsonl")
    got = points(out / "tensorboard", "test_accuracy")
    assert got == [(r["round"], round(r["test_accuracy"], 6)) for r in rows]


FAST = ["dataset=digits", "model=mlp", "model.hidden=[16]", "clients=4", "clients_per_round=2"]


def killed_then_resumed(out, tracking: str) -> list[dict]:
    """A run of 3 rounds with checkpoints every 2 rounds, then resumed to 4 rounds from its
    checkpoint (a second process, a second run of the tracker's); returns its metrics.jsonl
    rows, which the tracker must hold once each."""
    from fedretain.cli import main
    from fedretain.files import read_jsonl

    args = [*FAST, "rounds=3", "checkpoint_every=2", f"tracking={tracking}"]
    assert main(["run", *args, "--out", str(out), "name=tracked"]) == 0
    assert main(["run", "--resume", str(out), "rounds=4"]) == 0
    return read_jsonl(out / "metrics.jsonl")


def test_mlflow_gets_each_rounds_metrics_and_the_settings_without_duplicates(tmp_path, monkeypatch):
    """The real MLflow client and its SQLite store: after a run and its resume, one live MLflow
    run holds exactly metrics.jsonl's points, the settings as parameters; the run the first
    process wrote to is deleted."""
    pytest.importorskip("mlflow")
    from mlflow.entities import ViewType

    for variable in ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME"):
        monkeypatch.delenv(variable, raising=False)
    from mlflow.tracking import MlflowClient

    out = tmp_path / "run"
    rows = killed_then_resumed(out, "mlflow")
    client = MlflowClient(f"sqlite:///{out}/mlflow.db")
    experiment = client.get_experiment_by_name("fedretain")
    live = client.search_runs([experiment.experiment_id])
    everything = client.search_runs([experiment.experiment_id], run_view_type=ViewType.ALL)
    assert len(live) == 1 and len(everything) == 2  # the first process's run, deleted
    (run,) = live
    history = client.get_metric_history(run.info.run_id, "test_accuracy")
    got = [(m.step, round(m.value, 6)) for m in sorted(history, key=lambda m: m.step)]
    assert got == [(r["round"], round(r["test_accuracy"], 6)) for r in rows]
    assert run.data.params["rounds"] == "4" and run.data.params["model.hidden"] == "[16]"
    assert run.info.status == "FINISHED" and run.info.run_name == "tracked"


def wandb_records(path) -> list[bytes]:
    """The records of a ``.wandb`` file: a 7-byte header (``:W&B``, magic, version), then
    LevelDB's log format (32 KiB blocks of chunks, each with a 7-byte header: CRC-32, length,
    type FULL=1, FIRST=2, MIDDLE=3 or LAST=4), each record a serialized wandb ``Record``."""
    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, out, parts = 7, [], b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # a block's tail too short for a header: padding
            pos += 32768 - pos % 32768
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind in (1, 4):
            out.append(parts + chunk if kind == 4 else chunk)
        elif kind in (2, 3):
            parts = chunk if kind == 2 else parts + chunk
    return out


def test_wandb_gets_each_rounds_metrics_offline_without_duplicates(tmp_path, monkeypatch):
    """The real wandb library, offline: after a run and its resume, one offline run folder
    holds exactly metrics.jsonl's points (read back from its log with wandb's own reader), the
    settings as its config; the first process's offline run is removed."""
    pytest.importorskip("wandb")
    from wandb.proto import wandb_internal_pb2

    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    out = tmp_path / "run"
    rows = killed_then_resumed(out, "wandb")
    (folder,) = (out / "wandb").glob("offline-run-*")
    (log,) = folder.glob("*.wandb")
    points, config = [], {}
    for data in wandb_records(log):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        if record.WhichOneof("record_type") == "history":
            items = {i.key or "/".join(i.nested_key): i.value_json for i in record.history.item}
            if "test_accuracy" in items:
                points.append((int(items["_step"]), round(float(items["test_accuracy"]), 6)))
        elif record.WhichOneof("record_type") == "run":  # its config comes with it
            config.update({i.key: i.value_json for i in record.run.config.update})
    assert points == [(r["round"], round(r["test_accuracy"], 6)) for r in rows]
    assert config["rounds"] == '"4"' and config["dataset.name"] == '"digits"'
