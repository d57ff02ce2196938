"""Planning and running a preset's runs.

- planning: a preset's :class:`Section` (its plan, data and :class:`Job` per run) with each
  job's state (done, resume, fresh or missing), read from its folder (:func:`job_state`);
- ``status.json`` in each run's folder: what became of the run (``state``: finished,
  diverged or failed; the error; the CPU it ran on, :func:`machine`);
- running: :func:`run_jobs` runs the jobs not done yet, ``parallel`` at a time, each in its
  own process (:func:`run_one`), or as tasks on a Ray cluster (:mod:`.cluster`); the
  costliest algorithms (their registry entry's ``cost``, in FedAvg runs) start first, so that
  parallel jobs finish together.
"""

from __future__ import annotations

import json
import platform
import shlex
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import ExitStack, redirect_stderr, redirect_stdout, suppress
from dataclasses import dataclass, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from fedretain.errors import ConfigError, DataError, DivergenceError, FedRetainError
from fedretain.files import read_json, write_json
from fedretain.recipe.config import Config, load_config, parse_value, toml_text
from fedretain.registry import kind
from fedretain.studies.presets import PRESETS, Data, Plan, RunSpec
from fedretain.studies.privacy import PrivacyStudy, Study, study_args
from fedretain.studies.reproduce.cluster import RayCluster, ray_each

THREADS = 1  # torch threads of every run: runs go in parallel instead (--jobs)
STATUS = "status.json"  # in each run's folder: what became of it (state, error, CPU)


@dataclass
class Job:
    """One planned run of a preset: its config arguments, folder and state."""

    preset: str
    spec: RunSpec
    args: list[str]  # KEY=VALUE, as `fedretain run` takes them
    folder: Path
    state: str  # done | resume | fresh | missing

    @property
    def resume(self) -> bool:
        return self.state == "resume"


@dataclass
class Section:
    """One preset of an invocation: its plan, data, folder and jobs."""

    name: str
    plan: Plan
    data: Data
    folder: Path
    jobs: list[Job]
    command: str
    scale: str = "small"


# ------------------------------------------------------------------------------- planning


def as_args(values: dict[str, Any]) -> list[str]:
    """Flat config keys as ``KEY=VALUE`` arguments that ``load_config`` reads back as they are."""
    out = []
    for key, value in values.items():
        if isinstance(value, str):
            text = value if parse_value(value) == value else json.dumps(value)
        else:
            text = toml_text(value)
        out.append(f"{key}={text}")
    return out


def resolve_data(paper: str, standin: str | None, data_dirs: list[str]) -> Data:
    """The paper's dataset from ``--data-dir`` (``DIR`` or ``NAME=DIR``) or its default folder;
    else the stand-in; else a :class:`Data` that says which files are missing."""
    from fedretain.data.datasets import load_dataset

    def samples(name: str, folder: str | None = None) -> int:
        return len(load_dataset(name, folder).y_train)

    named = dict(d.split("=", 1) for d in data_dirs if "=" in d)
    folders = [named[paper]] if paper in named else [d for d in data_dirs if "=" not in d] + [""]
    error = ""
    for folder in folders:
        try:
            return Data(paper, folder, paper, samples=samples(paper, folder or None))
        except (DataError, ConfigError) as e:
            error = str(e)
    if standin:
        try:
            note = f"{standin} stands in for {paper}: {error}"
            return Data(standin, "", paper, note=note, samples=samples(standin))
        except (DataError, ConfigError) as e:
            error = f"{error}; the stand-in {standin} is missing too: {e}"
    return Data(paper, "", paper, missing=error)


def job_state(folder: Path, cfg: Config) -> str:
    """``done`` (summary.json of at least the planned rounds, or of a run that diverged),
    ``resume`` (a checkpoint to continue or extend) or ``fresh`` (a run that failed is tried
    again); a ConfigError when the folder holds other settings."""
    if (folder / "config.toml").is_file():
        differ = changed_keys(folder, cfg)
        if differ:
            raise ConfigError(
                f"{folder} holds a run with other settings ({', '.join(differ)}); delete it "
                "or choose another --out"
            )
    checkpoint = has_checkpoint(folder)
    if read_status(folder).get("state") == "failed":
        return "resume" if checkpoint else "fresh"  # tried again
    if (folder / "summary.json").is_file():
        summary = read_json(folder / "summary.json")
        short = summary.get("rounds", 0) < cfg.rounds and "stopped" not in summary
        return "resume" if short and checkpoint else "done"
    return "resume" if checkpoint else "fresh"


def changed_keys(folder: Path, cfg: Config) -> list[str]:
    """The settings (those a resume may not change) in which ``folder``'s run differs."""
    from fedretain.experiments.checkpoint import fingerprint
    from fedretain.recipe.config import config_from_text

    try:
        old = fingerprint(config_from_text((folder / "config.toml").read_text()))
    except FedRetainError:
        return ["config.toml unreadable"]
    new, defaults = fingerprint(cfg), fingerprint(Config())  # a newer key: its default
    return sorted(k for k in set(old) | set(new) if old.get(k, defaults.get(k)) != new.get(k))


def study_of(options: dict[str, Any]) -> Study:
    """A preset's privacy-study options as :class:`Study` (a ConfigError names a bad one)."""
    options = dict(options)
    if "sigmas" in options:
        options["sigmas"] = tuple(options["sigmas"])
    try:
        return Study(**options)
    except TypeError as e:
        raise ConfigError(f"bad privacy-study option in preset: {e}") from None


def study_state(folder: Path) -> str:
    """``done`` (privacy.json written) or ``resume`` (attacks or runs to reuse) or ``fresh``;
    a study refuses a folder of other settings itself."""
    if (folder / "privacy.json").is_file():
        return "done"
    return "resume" if folder.is_dir() and any(folder.iterdir()) else "fresh"


def command_line(
    name: str, out: Path, scale: str, seeds: int, data_dirs: list[str], extra: list[str]
) -> str:
    """The ``fedretain reproduce`` command line that plans the same section again."""
    # NAME and the KEY=VALUE settings together: argparse reads one block of positionals
    words = ["fedretain", "reproduce", name, *extra, "--out", str(out), "--scale", scale]
    words += ["--seeds", str(seeds)]
    for d in data_dirs:
        words += ["--data-dir", d]
    return shlex.join(words)


def job_command(job: Job) -> str:
    """The command line that runs one job by itself."""
    if job.spec.study is not None:
        words = ["fedretain", "privacy", *job.args, *study_args(study_of(job.spec.study))]
    else:
        words = ["fedretain", "run", *job.args]
    return shlex.join([*words, "--out", str(job.folder)])


def plan_section(
    name: str,
    folder: Path,
    scale: str,
    seeds: int | None,
    data_dirs: list[str],
    extra: list[str],
    out: Path,
    several: bool,
    threads: int = THREADS,
) -> Section:
    """Preset ``name``'s plan at ``scale`` into ``folder``: every run's settings checked and
    its state read from its folder (``missing`` for every run when the data are missing and a
    run reads them; a plan whose runs all read other data, as ``ci``'s digits, runs)."""
    entry = PRESETS.get(name)
    data = resolve_data(entry.meta["dataset"], entry.meta.get("standin"), data_dirs)
    n = seeds or entry.meta["seeds"][scale]
    plan = entry.factory(scale, list(range(n)), data)
    named = dict(d.split("=", 1) for d in data_dirs if "=" in d)
    jobs, read, others = [], set(), {}
    for spec in plan.runs:
        keys = {**plan.base, **spec.overrides, "name": spec.method, "threads": threads}
        second = keys.get("dataset") not in (None, data.name, data.paper)
        if second and not keys.get("data_dir") and keys["dataset"] in named:
            keys["data_dir"] = named[keys["dataset"]]  # a second dataset's --data-dir
        args = as_args(keys) + extra
        cfg = load_config(None, args)  # every setting checked before anything runs
        read.add(cfg.dataset)
        run_folder = folder / spec.folder
        if spec.study is not None:
            study_of(spec.study)  # its options checked too
            state = study_state(run_folder)
        else:
            state = job_state(run_folder, cfg)
        jobs.append(Job(name, spec, args, run_folder, state))
        if second:
            others.setdefault(cfg.dataset, []).append(len(jobs) - 1)
    if data.missing and data.paper in read:
        jobs = [replace(job, state="missing") for job in jobs]
    elif data.missing:  # nothing reads the missing files
        data = replace(data, name=", ".join(sorted(read)), missing="")
    for dataset, at in others.items():  # a second dataset (a figure's other panel) missing
        if resolve_data(dataset, None, data_dirs).missing:
            for i in at:
                jobs[i] = replace(jobs[i], state="missing")
    command = command_line(name, out / name if several else out, scale, n, data_dirs, extra)
    return Section(name, plan, data, folder, jobs, command, scale)


# ---------------------------------------------------------------------- status.json, CPU


def read_status(folder: Path) -> dict[str, Any]:
    """``folder``'s ``status.json`` ({} when absent or unreadable)."""
    with suppress(OSError, ValueError):
        status = read_json(folder / STATUS)
        return status if isinstance(status, dict) else {}
    return {}


def machine(device: str = "cpu") -> dict[str, Any]:
    """This machine's CPU: ``cpu`` (its model name), ``avx512`` (True, False, or None where
    unknown) and ``torch_cpu`` (the instruction set torch's kernels use: its float32 sums,
    and so the numbers of a run, depend on it); for a run on a CUDA ``device``, also ``gpu``
    (its name)."""
    import torch

    model, flags = "", None
    with suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() == "flags" and flags is None:
                flags = value.split()
    info = {
        "cpu": model or platform.processor() or platform.machine() or "unknown CPU",
        "avx512": None if flags is None else "avx512f" in flags,
        "torch_cpu": torch.backends.cpu.get_cpu_capability(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return info


def cpu_text(info: dict[str, Any]) -> str:
    """A CPU (as :func:`machine` describes it) in words."""
    avx = {True: "AVX-512", False: "no AVX-512", None: "AVX-512 unknown"}[info.get("avx512")]
    cpu = f"{info.get('cpu', 'unknown CPU')} ({avx}; torch's kernels: {info.get('torch_cpu')})"
    return f"GPU {info['gpu']} with CPU {cpu}" if info.get("gpu") else cpu


def provenance(device: str = "cpu") -> dict[str, Any]:
    """Where a process of a run runs: :func:`machine` and the host, and the versions of
    fedretain, torch and numpy (a retried or resumed run may continue elsewhere)."""
    import numpy
    import torch

    from fedretain import __version__

    return {
        **machine(device),
        "host": platform.node(),
        "fedretain": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
    }


def machines_with(folder: Path, here: dict[str, Any]) -> list[dict[str, Any]]:
    """Every machine a run's processes ran on, in order: its status.json's ``machines`` (an
    older status: its one machine), then ``here`` unless the last one is the same."""
    status = read_status(folder)
    seen = status.get("machines")
    if not isinstance(seen, list):
        seen = [{k: status[k] for k in MACHINE_KEYS if k in status}] if "cpu" in status else []
    return seen if seen and seen[-1] == here else [*seen, here]


def hardware_changed(machines: list[dict[str, Any]]) -> bool:
    """Whether a run's processes ran on more than one kind of hardware or software (another
    CPU, GPU, or version of fedretain, torch or numpy; another host of the same kind is
    none): its numbers after the change may differ from those of an unbroken run."""
    kinds = {tuple(m.get(k) for k in MACHINE_KEYS if k != "host") for m in machines}
    return len(kinds) > 1


MACHINE_KEYS = ("cpu", "avx512", "torch_cpu", "gpu", "host", "fedretain", "torch", "numpy")


# -------------------------------------------------------------------------------- running


def run_one(
    args: list[str],
    folder: str,
    resume: bool,
    study: dict[str, Any] | None = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """One run, or one privacy study (in this process, a worker or a Ray task): its output
    goes to ``folder/run.log``, what became of it to ``folder/status.json`` (with the CPU it
    ran on, and under ``machines`` every machine its processes ran on: :func:`provenance`);
    returns the line the progress shows. ``deadline`` (``time.time()`` seconds): the
    run pauses by then (``stop_after``, the time left when it starts); past it, it does not
    start."""
    from fedretain.experiments.run import run_experiment

    if deadline is not None and study is None:
        left = deadline - time.time()
        if left < 1:
            line = "not started: the invocation's --stop-after time is spent"
            return {"line": line, "paused": True}
        args = [*args, f"stop_after={left:.0f}"]
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    here = provenance()
    cpu = {**machine(), "machines": machines_with(out, here)}
    with open(out / "run.log", "a") as log, redirect_stdout(log), redirect_stderr(log):
        try:
            cfg = load_config(None, args)
            here = provenance(cfg.device)
            cpu = {**machine(cfg.device), "machines": machines_with(out, here)}
            if study is not None:
                result = PrivacyStudy(cfg, out, study_of(study)).run()
                accs = ", ".join(
                    f"{k} {v['final_accuracy']:.4f}" for k, v in result["runs"].items()
                )
                line = f"σ* {result['sigma_matched']:g}; final {accs}"
            else:
                summary = run_experiment(cfg, out, progress=None, resume=resume)
                if summary.get("paused"):  # stop_after: its checkpoint continues it next time
                    write_json(out / STATUS, {"state": "paused", "round": summary["rounds"], **cpu})
                    line = f"paused after round {summary['rounds']} of {cfg.rounds} (stop_after)"
                    return {"line": line, "paused": True}
                line = f"{summary['final_accuracy']:.4f} ({summary['wall_seconds']:.1f} s)"
        except Exception as e:
            traceback.print_exc(file=log)
            state = "diverged" if isinstance(e, DivergenceError) else "failed"
            write_json(out / STATUS, {"state": state, "error": one_line(e), **cpu})
            raise
    write_json(out / STATUS, {"state": "finished", **cpu})
    return {"line": line}


def run_task(
    args: list[str],
    folder: str,
    resume: bool,
    study: dict[str, Any] | None = None,
    deadline: float | None = None,
    folders: Any = None,
    feature_net: tuple[str, bytes] | None = None,
) -> dict[str, Any]:
    """:func:`run_one` as a Ray task: continued from its checkpoint when it has one, so that a
    task tried again after a lost node goes on from where the lost one stopped. With
    ``folders`` (no shared filesystem: :mod:`.storage`), the run goes to a scratch folder on
    the node, pulled from what came back of it and sent back at each checkpoint and at its end;
    else to ``folder``, made by the caller. An error of the node rather than of the run
    (:func:`~.nodes.node_fault`; the folder not visible there) raises
    :class:`~.nodes.NodeFault`: the caller tries the run elsewhere. ``feature_net``: the
    study's FID feature network, put where the run looks for it on this node."""
    from fedretain.experiments.generator_quality import place_feature_net
    from fedretain.studies.reproduce.nodes import NodeFault, node_fault, this_node
    from fedretain.studies.reproduce.storage import Mirror, scratch_folder

    def run(where: Path) -> dict[str, Any]:
        try:
            if feature_net is not None:
                place_feature_net(load_config(None, args), feature_net)
            return run_one(args, str(where), resume or has_checkpoint(where), study, deadline)
        except Exception as e:
            reason = node_fault(e)
            if reason:
                raise NodeFault(*this_node(), reason) from e
            raise

    if folders is not None:
        with scratch_folder() as scratch:
            mirror = Mirror(folders, folder, scratch)
            mirror.pull()
            with mirror.pushing():
                return run(scratch)
    if not Path(folder).is_dir():
        raise NodeFault(
            *this_node(),
            f"does not see {folder} (made by the study's caller): --out must be on a "
            "filesystem every node sees at the same path",
        )
    return run(Path(folder))


def device_of(args: list[str]) -> str:
    """The device a run's ``KEY=VALUE`` arguments name (their last ``device=``; else cpu)."""
    return next((a.split("=", 1)[1] for a in reversed(args) if a.startswith("device=")), "cpu")


def gpu_slots(todo: list[Job], parallel: int, gpus: int) -> list[str]:
    """The devices of a local study's ``parallel`` process slots on a machine with ``gpus``
    GPUs, where its runs ask for ``device=cuda`` without an index: slot ``k`` trains on
    ``cuda:(k mod gpus)``, so the runs spread over every GPU (several to a GPU when
    ``parallel`` exceeds ``gpus``: see :func:`gpu_share`); empty where there is nothing to
    share out."""
    if gpus < 1 or parallel < 2 or not any(device_of(j.args) == "cuda" for j in todo):
        return []
    return [f"cuda:{k % gpus}" for k in range(parallel)]


def gpu_share(slots: list[str]) -> float:
    """The share of its GPU each run of :func:`gpu_slots`' ``slots`` holds: one over the most
    slots on one GPU (the config's ``gpu_share``, which sizes the vectorised engine's chunks)."""
    return 1.0 / max(slots.count(s) for s in slots)


def run_on_free_gpu(free: Any, share: float, args: list[str], *rest: Any) -> dict[str, Any]:
    """:func:`run_one` (``args`` and ``rest``, its other arguments) on a device taken from
    ``free`` (a queue of :func:`gpu_slots`' devices shared by a study's processes), given back
    when the run ends, whatever its end; with ``gpu_share=share`` unless its arguments set one.
    The device index changes no number: runs on GPUs of one kind compute the same."""
    device = free.get()
    if not any(a.startswith("gpu_share=") for a in args):
        args = [*args, f"gpu_share={share:.6g}"]
    try:
        return run_one([*args, f"device={device}"], *rest)
    finally:
        free.put(device)


def has_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` holds a checkpoint to continue from."""
    return any((folder / "checkpoint" / n).is_file() for n in ("meta.json", "previous.json"))


def one_line(e: BaseException) -> str:
    """An error in one line: a fedretain error's message, else its type and message."""
    text = " ".join(str(e).split())
    return text if isinstance(e, FedRetainError) else f"{type(e).__name__}: {text}"


def algorithm_of(job: Job) -> str:
    """The algorithm a job's arguments name ("" where they name none)."""
    return next((a.split("=", 1)[1] for a in reversed(job.args) if a.startswith("algorithm=")), "")


def cost(algorithm: str) -> float:
    """How long a run of ``algorithm`` takes, in FedAvg runs: its registry entry's ``cost``
    (1.0 where the entry has none, or the name is no registered algorithm)."""
    algorithms = kind("algorithm")
    if algorithm not in algorithms:
        return 1.0
    return float(algorithms.get(algorithm).meta.get("cost", 1.0))


def run_each(
    todo: list[Job],
    parallel: int,
    cluster: RayCluster | None = None,
    deadline: float | None = None,
    echo: Callable[[str], None] = print,
) -> Iterator[tuple[Job, dict[str, Any] | Exception]]:
    """Run ``todo``, ``parallel`` at a time, each in its own process, or as Ray tasks on
    ``cluster`` (the costliest start first); yield each job as it ends, with its
    :func:`run_one` result or its error. ``deadline``: see :func:`run_one`."""

    def call(job: Job) -> tuple[list[str], str, bool, dict[str, Any] | None, float | None]:
        return job.args, str(job.folder), job.resume, job.spec.study, deadline

    todo = sorted(todo, key=lambda j: -cost(algorithm_of(j)))
    if cluster is not None:
        yield from ray_each(todo, cluster, run_task, deadline, echo)
        return
    if parallel <= 1 or len(todo) <= 1:
        for job in todo:
            try:
                yield job, run_one(*call(job))
            except Exception as e:
                yield job, e
        return
    spawn = get_context("spawn")
    slots = gpu_slots(todo, parallel, cuda_devices())
    with ProcessPoolExecutor(parallel, mp_context=spawn) as pool, ExitStack() as stack:
        free = stack.enter_context(spawn.Manager()).Queue() if slots else None
        for device in slots:
            free.put(device)

        def submit(job: Job) -> Any:
            if free is not None and device_of(job.args) == "cuda":
                return pool.submit(run_on_free_gpu, free, gpu_share(slots), *call(job))
            return pool.submit(run_one, *call(job))

        futures = {submit(j): j for j in todo}
        for future in as_completed(futures):
            try:
                yield futures[future], future.result()
            except Exception as e:
                yield futures[future], e


def cuda_devices() -> int:
    """How many CUDA GPUs this process sees (0 without CUDA)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_jobs(
    jobs: list[Job],
    parallel: int,
    echo: Callable[[str], None],
    cluster: RayCluster | None = None,
    deadline: float | None = None,
) -> dict[Path, str]:
    """Run the jobs not done yet, ``parallel`` at a time (or on the Ray ``cluster``); returns
    folder -> error of the runs that failed or diverged (the others go on). Each run's
    ``status.json`` records what became of it (written where the run ran; here, for a run
    whose process died before it could: with this machine's CPU only for a local run)."""
    todo = [j for j in jobs if j.state in ("fresh", "resume")]
    skipped = sum(j.state == "done" for j in jobs)
    if skipped:
        echo(f"{skipped} run(s) already finished: skipped")
    if todo and cluster is not None:
        echo(f"{len(todo)} run(s) on {cluster.describe()}")
    errors: dict[Path, str] = {}
    for job in todo:  # a status left by an earlier try no longer holds
        (job.folder / STATUS).unlink(missing_ok=True)
    paused = 0
    for i, (job, result) in enumerate(run_each(todo, parallel, cluster, deadline, echo), 1):
        what = f"[{i}/{len(todo)}] {job.preset}: {job.spec.setting} / {job.spec.method} "
        what += f"seed {job.spec.seed}"
        if isinstance(result, Exception):
            status = read_status(job.folder)
            if status.get("state") not in ("diverged", "failed"):  # its process died first
                # on this machine, locally; on a Ray node, one this process does not know
                here = machine() if cluster is None else {}
                status = {"state": "failed", "error": one_line(result), **here}
                write_json(job.folder / STATUS, status)
            errors[job.folder] = status["error"]
            echo(f"{what}: {status['state']}: {status['error']} (log: {job.folder / 'run.log'})")
        else:
            verb = "continued" if job.resume else "done" if job.spec.study else "final"
            if result.get("paused"):  # stop_after: the next invocation continues it
                verb, paused = ("continued, then" if job.resume else ""), paused + 1
            echo(f"{what}: {verb} {result['line']}" if verb else f"{what}: {result['line']}")
    if paused:
        echo(f"{paused} run(s) paused or not started in time: the same command continues them")
    return errors


__all__ = [
    "STATUS",
    "THREADS",
    "Job",
    "Section",
    "as_args",
    "changed_keys",
    "command_line",
    "cost",
    "cpu_text",
    "has_checkpoint",
    "job_command",
    "job_state",
    "machine",
    "plan_section",
    "read_status",
    "resolve_data",
    "run_jobs",
    "run_one",
    "run_task",
    "study_of",
    "study_state",
]
