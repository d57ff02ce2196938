"""A run's results folder: what a run writes there, by name, and whether a new run may take
the folder (:func:`check_out`) and empty it (:func:`clear_out`): ``--overwrite`` removes only a
run's own files, never a file of the user's.

The folder, the results contract that later tools (``compare``, the reports, ``--resume``)
read:

- ``config.toml``: the fully resolved configuration;
- ``metrics.jsonl``: one JSON object per evaluated round (``round``, ``test_accuracy``,
  ``test_loss``, ``train_loss``, ``lr``, cumulative ``bytes_up``/``bytes_down``, ``seconds``
  of wall time and, on engines that can lose replies, ``lost_replies``; with ``privacy=``,
  ``epsilon`` and ``delta``; in a continual scenario, the round's ``task`` and the accuracy on
  the classes seen so far); round 0 is the initial model;
- ``summary.json``: ``final_accuracy``, ``top_accuracy``, ``rounds``, ``bytes_up``,
  ``bytes_down``, ``wall_seconds``, ``rounds_to`` (target -> first round or null), and more;
- ``accuracy.png``: the accuracy curve;
- ``checkpoint/``: the state to continue from (every ``checkpoint_every`` rounds, at the end,
  and when a run stops between rounds: Ctrl-C, a full disk); the last two are kept, and a
  resumed run falls back to the earlier one when the latest cannot be read.

Every file is written atomically, with the mode the umask implies. JSON files are strict
JSON: a non-finite float (a diverged run's loss) is the string ``"NaN"``, ``"Infinity"`` or
``"-Infinity"``; :func:`fedretain.files.read_json` and :func:`~fedretain.files.read_jsonl`
read them back as floats. Each diagnostic and tracker adds the files its registry line
names (``files=``: ``forgetting.jsonl``, ``tensorboard/``...), and a continual run
``continual.jsonl`` and its plots. The run (:mod:`fedretain.experiments.run`) writes them.
"""

from __future__ import annotations

import fnmatch
import shutil
from pathlib import Path

from fedretain.errors import OutputError
from fedretain.experiments.components import writes

# what a results folder holds, by name (besides the temporary files of atomic writes): the
# run's own files, its built-in observers', and those of a study's runs (run.log,
# status.json), and the files each registered diagnostic and tracker names on its line
# (:mod:`fedretain.experiments.components`); --overwrite removes only folders made of these,
# so that a file of the user's (a figure, notes) is never removed
RESULT_DIRS = ("checkpoint", "client_state")
RESULT_FILES = (
    "config.toml",
    "metrics.jsonl",
    "summary.json",
    "accuracy.png",
    "continual.jsonl",
    "continual_accuracy.png",
    "accuracy_matrix.png",
    "run.log",
    "status.json",
)


def _is_result(path: Path) -> bool:
    if path.is_symlink():
        return False
    if path.is_dir():
        return path.name in RESULT_DIRS or writes(path.name, folder=True)
    if path.name[:1] == "." and path.suffix == ".tmp":
        return True
    return any(fnmatch.fnmatchcase(path.name, name) for name in RESULT_FILES) or writes(
        path.name, folder=False
    )


def strangers(folder: Path) -> list[str]:
    """The names in ``folder`` that no run writes (sorted): what ``--overwrite`` never
    removes."""
    return [p.name for p in sorted(folder.iterdir()) if not _is_result(p)]


def check_out(out: str | Path, overwrite: bool = False) -> None:
    """An OutputError unless a new run may write ``out``: a new or empty folder, or with
    ``overwrite`` a fedretain results folder (which :func:`clear_out` empties)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise OutputError(f"--out {out} is a file, not a folder; choose a new or empty folder")
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if not entries:
        return
    others = strangers(out)
    is_run = (out / "config.toml").is_file() and (
        (out / "metrics.jsonl").is_file() or (out / "checkpoint").is_dir()
    )
    if is_run and others:
        raise OutputError(
            f"{out} holds a run and files no run writes ({', '.join(others[:3])}); "
            "--overwrite removes only a run's own files: move those out, or choose another "
            "--out (nothing was removed)"
        )
    if not is_run or others:
        why = f"it holds {', '.join(others[:3])}" if others else "no metrics.jsonl"
        raise OutputError(
            f"{out} is not empty and does not look like a fedretain results folder ({why}); "
            "choose a new or empty folder for --out (nothing was removed)"
        )
    if not overwrite:
        what = "finished" if (out / "summary.json").is_file() else "unfinished"
        raise OutputError(
            f"{out} already holds a {what} run; pass --resume {out} to continue it, "
            "--overwrite to replace it, or choose another --out"
        )


def clear_out(out: str | Path) -> None:
    """Empty the results folder ``out`` for a new run; nothing but a fedretain results
    folder's files is ever removed (see :func:`check_out`)."""
    check_out(out, overwrite=True)
    for path in sorted(Path(out).iterdir()) if Path(out).is_dir() else []:
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()


__all__ = ["RESULT_DIRS", "RESULT_FILES", "check_out", "clear_out", "strangers"]
