"""`fedretain reproduce`: what became of each run is kept with it (a failed run among parallel
jobs too); ranks by the seeds' spread; plots that keep every line in sight."""

from __future__ import annotations

import itertools
import json
import queue
from types import SimpleNamespace

import pytest

from fedretain.cli import main
from fedretain.experiments.plots import plot_curves, style
from fedretain.recipe.config import load_config
from fedretain.studies.presets import RunSpec
from fedretain.studies.reproduce import Job, job_state, jobs, outcomes_of, run_jobs
from fedretain.studies.reproduce.jobs import plan_section

TINY = ["dataset=digits", "clients=4", "clients_per_round=2", "rounds=3", "model=mlp"]
TINY += ["model.hidden=[8]", "local_steps=2", "threads=1", "checkpoint_every=1"]


def test_a_run_that_diverges_says_so_in_its_folder_and_is_not_run_again(tmp_path):
    args = [*TINY, "lr=1e30"]  # NaN in the first round
    job = Job("t", RunSpec("s", "FedAvg", 0, {}), args, tmp_path / "run", "fresh")
    lines: list[str] = []
    errors = run_jobs([job], 1, lines.append)
    assert "training diverged in round 1" in errors[job.folder]
    assert "diverged: training diverged in round 1" in lines[-1]
    status = json.loads((job.folder / "status.json").read_text())
    assert status["state"] == "diverged" and "cpu" in status
    assert "stopped" in json.loads((job.folder / "summary.json").read_text())
    outcome = outcomes_of(job)["FedAvg"]
    assert outcome.state == "diverged" and outcome.round == 1 and outcome.run is not None
    assert outcome.short() == "diverged in round 1"
    assert job_state(job.folder, load_config(None, args)) == "done"  # the same NaN again


def test_a_failed_run_is_kept_as_failed_and_tried_again(tmp_path):
    job = Job("t", RunSpec("s", "FedAvg", 0, {}), TINY, tmp_path / "run", "fresh")
    job.folder.mkdir()
    (job.folder / "status.json").write_text(json.dumps({"state": "failed", "error": "boom"}))
    outcome = outcomes_of(job)["FedAvg"]
    assert (outcome.state, outcome.reason) == ("failed", "boom")
    assert job_state(job.folder, load_config(None, TINY)) == "fresh"
    assert run_jobs([job], 1, lambda s: None) == {}
    assert json.loads((job.folder / "status.json").read_text())["state"] == "finished"
    assert outcomes_of(job)["FedAvg"].state == "finished"


def test_every_line_of_a_plot_has_its_own_colour_and_marker(tmp_path):
    styles = [style(i) for i in range(10)]
    assert len({s["color"] for s in styles}) == len({s["marker"] for s in styles}) == 10
    assert all(a["linewidth"] > b["linewidth"] for a, b in itertools.pairwise(styles))
    assert style(1, 100)["markevery"] != style(2, 100)["markevery"]  # staggered markers
    records = [
        {"round": r, "test_accuracy": 0.1 * r, "bytes_up": r, "bytes_down": r} for r in range(5)
    ]
    path = tmp_path / "a.png"
    plot_curves([("FedAvg", records), ("FedProx", records)], path, stopped=[("x", records[:3])])
    assert path.read_bytes().startswith(b"\x89PNG")


def test_crowded_curves_also_get_one_panel_per_method_over_fedavg(tmp_path):
    """More than five methods on one axis: the report adds small multiples, each method over
    FedAvg's curve, every panel's axes shared (the committed demo shows nine)."""
    import matplotlib.pyplot as plt

    from fedretain.experiments import plots

    records = [{"round": r, "test_accuracy": 0.1 * r, "test_accuracy_std": 0.01} for r in range(5)]
    runs = [(name, records) for name in ("SGD", "FedAvg", "FedProx", "A", "B", "C", "D")]
    drawn = []
    real = plots.save_figure
    plots.save_figure = lambda fig, path: (drawn.append(fig), real(fig, path))
    try:
        plots.plot_panels(runs, tmp_path / "p.png", "FedAvg", title="t")
    finally:
        plots.save_figure = real
    axes = drawn[0].axes
    assert len(axes) == 9 and [a.get_title() for a in axes[:7]] == [n for n, _ in runs]
    assert not axes[7].axison and not axes[8].axison  # the empty places of the 3x3 grid
    assert [len(a.get_lines()) for a in axes[:3]] == [2, 1, 2]  # FedAvg's own panel: itself
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")
    plt.close("all")


def test_parallel_jobs_report_a_failed_run_and_finish_the_others(tmp_path, capsys):
    out = tmp_path / "par"
    broken = out / "e-10" / "fedavg" / "seed0" / "checkpoint"
    broken.mkdir(parents=True)
    (broken / "meta.json").write_text("{")  # a corrupt checkpoint: that run fails
    code = main(["reproduce", "fedcurv-table1", "--out", str(out), "--scale", "ci", "--jobs", "2"])
    assert code == 1  # the report is written, but a run failed
    text = (out / "report.md").read_text()
    assert "## Runs that failed" in text and "e-10/fedavg/seed0" in text
    runs = len(plan_section("fedcurv-table1", out, "ci", None, [], [], out, False).jobs)
    assert f"Runs: {runs - 1} of {runs} finished" in text
    captured = capsys.readouterr()
    assert "1 run(s) failed" in captured.out
    assert captured.err.count("\n") == 1 and "1 run(s) failed and 0 diverged" in captured.err
    status = json.loads((broken.parent / "status.json").read_text())
    assert status["state"] == "failed" and "checkpoint" in status["error"]


def test_a_run_continued_elsewhere_lists_every_machine_and_the_report_names_it(
    tmp_path, monkeypatch
):
    """A run paused after round 1 on one machine and continued on another (another CPU, as
    a retry on another node would be): status.json lists both, in order, and the report's
    machine lines name the run; continued on the same kind of machine, nothing is named."""
    from types import SimpleNamespace

    from fedretain.studies.reproduce import jobs
    from fedretain.studies.reproduce.jobs import hardware_changed, machines_with, run_one
    from fedretain.studies.reproduce.report import machine_lines

    folder = tmp_path / "setting" / "fedavg" / "seed0"
    run_one([*TINY, "rounds=1"], str(folder), False)
    first = json.loads((folder / "status.json").read_text())["machines"]
    assert len(first) == 1 and first[0]["host"] and first[0]["torch"]
    other = {**first[0], "cpu": "Another CPU", "avx512": not first[0]["avx512"], "host": "n2"}
    monkeypatch.setattr(jobs, "provenance", lambda device="cpu": other)
    run_one(TINY, str(folder), True)  # extended to 3 rounds from its checkpoint
    machines = json.loads((folder / "status.json").read_text())["machines"]
    assert machines == [first[0], other] and hardware_changed(machines)
    assert json.loads((folder / "summary.json").read_text())["rounds"] == 3
    job = SimpleNamespace(folder=folder)
    results = SimpleNamespace(outcomes={0: SimpleNamespace(run=True, job=job, cpu={})})
    assert not any("mid-run" in line for line in machine_lines(results))
    results.outcomes[0].cpu = {"machines": machines}
    named = [line for line in machine_lines(results) if "Changed machine mid-run" in line]
    assert len(named) == 1 and "`seed0` of `setting/fedavg`" in named[0]
    assert "Another CPU" in named[0] and "on n2" in named[0]
    same_kind = {**first[0], "host": "n3"}  # another node of the same kind changes nothing
    assert not hardware_changed([first[0], same_kind])
    assert machines_with(folder, other) == machines  # the same machine again: not repeated


def _job(folder, device: str) -> SimpleNamespace:
    """What run_each reads of a job."""
    args = [*TINY, f"device={device}"]
    return SimpleNamespace(args=args, folder=folder, resume=False, spec=SimpleNamespace(study=None))


def test_a_local_study_spreads_runs_on_cuda_over_every_gpu(tmp_path):
    cuda = [_job(tmp_path, "cuda"), _job(tmp_path, "cpu")]
    assert jobs.gpu_slots(cuda, 4, 2) == ["cuda:0", "cuda:1", "cuda:0", "cuda:1"]
    assert jobs.gpu_slots(cuda, 3, 4) == ["cuda:0", "cuda:1", "cuda:2"]
    assert jobs.gpu_slots(cuda, 4, 1) == ["cuda:0"] * 4
    # the share of its GPU each run plans for: one over the most runs on one GPU
    assert [jobs.gpu_share(jobs.gpu_slots(cuda, n, 2)) for n in (2, 3, 4)] == [1.0, 0.5, 0.5]
    assert jobs.gpu_share(["cuda:0"] * 4) == 0.25
    assert jobs.gpu_slots(cuda, 1, 4) == []  # one run at a time: on cuda, as asked
    assert jobs.gpu_slots([_job(tmp_path, "cuda:1")], 4, 2) == []  # a GPU named is kept
    assert jobs.gpu_slots([_job(tmp_path, "cpu")], 4, 2) == []


def test_a_run_takes_a_free_gpu_and_gives_it_back_whatever_its_end(monkeypatch):
    free: queue.Queue = queue.Queue()
    free.put("cuda:1")
    seen = []

    def fake_run(args, folder, resume):
        seen.append(args)
        if len(seen) == 2:
            raise RuntimeError("out of memory")
        return {"line": "0.5"}

    monkeypatch.setattr(jobs, "run_one", fake_run)
    assert jobs.run_on_free_gpu(free, 0.5, ["device=cuda"], "f", False) == {"line": "0.5"}
    with pytest.raises(RuntimeError, match="out of memory"):
        jobs.run_on_free_gpu(free, 0.5, ["device=cuda", "gpu_share=1"], "f", False)
    assert seen == [
        ["device=cuda", "gpu_share=0.5", "device=cuda:1"],
        ["device=cuda", "gpu_share=1", "device=cuda:1"],  # a share asked for is kept
    ]
    assert free.get_nowait() == "cuda:1"


def test_parallel_runs_on_cuda_take_distinct_gpus_through_the_process_pool(tmp_path, monkeypatch):
    # two GPUs as the driver counts them; on this CPU each run then fails naming its device
    monkeypatch.setattr(jobs, "cuda_devices", lambda: 2)
    todo = [_job(tmp_path / f"r{k}", "cuda") for k in range(2)]
    errors = [str(result) for _, result in jobs.run_each(todo, 2)]
    named = {d for e in errors for d in ("cuda:0", "cuda:1") if d in e}
    assert named == {"cuda:0", "cuda:1"}, errors
