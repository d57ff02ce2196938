"""Run folders without a shared filesystem: a study on Ray whose nodes do not see the caller's
``--out`` (``--storage ray``, or ``auto`` when a node's check finds it does not) runs each run in
a scratch folder on its node and sends the folder back through Ray's object store.

- A task starts by pulling what came back of its run so far (its last checkpoint, metrics and
  status: :meth:`Folders.pull`) into a fresh scratch folder, so a run Ray or the caller tries
  again on another node continues from its last checkpoint that came back.
- After each checkpoint (the hook :data:`~fedretain.experiments.checkpoint.SAVED`) and when the
  run ends, however it ends, the task pushes the files that changed (and the names of those
  removed) to :class:`Folders`, an actor on the caller's node that keeps the latest copy of each
  run in flight.
- The caller drains them into ``--out`` as they come (:func:`drain`: each file written whole,
  through a temporary file), and before it counts a run as ended.

Whether the filesystem is shared is tested, not assumed: the caller writes a token file into
the study's folder and each node's check looks for it (:mod:`.nodes`); a node that finds the
folder but not the token writes to a disk of its own at the same path.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fedretain.errors import ConfigError
from fedretain.files import atomic_write_bytes

STORAGES = ("auto", "shared", "ray")
TOKEN = ".fedretain-shared-"  # + a random name: the caller's file, looked for on each node


def check_storage(storage: str) -> str:
    if storage not in STORAGES:
        raise ConfigError(
            f"--storage must be one of {', '.join(STORAGES)}, got {storage!r} (auto: through "
            "Ray where a node does not share --out with the caller)"
        )
    return storage


@contextlib.contextmanager
def token(folder: Path) -> Iterator[str]:
    """A file in ``folder`` that only a node sharing its filesystem sees: its path, removed
    after the checks."""
    path = folder / f"{TOKEN}{uuid.uuid4().hex}"
    path.write_bytes(b"")
    try:
        yield str(path)
    finally:
        path.unlink(missing_ok=True)


Files = dict[str, bytes]  # path relative to the run's folder -> contents


def snapshot(folder: Path) -> Files:
    """Every file under ``folder`` (none where it does not exist)."""
    if not folder.is_dir():
        return {}
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


class Folders:
    """The Ray actor that carries run folders between the nodes and the caller: the latest
    copy of each run in flight (what a task pulls) and the changes the caller has yet to
    write (what it drains)."""

    def __init__(self) -> None:
        self.latest: dict[str, Files] = {}
        self.outbox: list[tuple[str, Files, list[str]]] = []

    def seed(self, key: str, files: Files) -> None:
        """The run's folder as the caller has it (a run continued from an earlier study)."""
        self.latest[key] = dict(files)

    def pull(self, key: str) -> Files:
        return self.latest.get(key, {})

    def push(self, key: str, changed: Files, removed: list[str]) -> None:
        latest = self.latest.setdefault(key, {})
        latest.update(changed)
        for name in removed:
            latest.pop(name, None)
        self.outbox.append((key, changed, removed))

    def take(self) -> list[tuple[str, Files, list[str]]]:
        out, self.outbox = self.outbox, []
        return out

    def forget(self, key: str) -> None:
        self.latest.pop(key, None)


def drain(ray: Any, folders: Any) -> int:
    """Write what the runs pushed into their folders on the caller (the keys are their
    paths; a name that would leave its run's folder is ignored), removing the files they
    removed and the folders that leaves empty; returns how many files were written or
    removed."""
    count = 0
    for key, changed, removed in ray.get(folders.take.remote()):
        root = Path(key).resolve()
        for name, data in changed.items():
            if inside(root, name):
                atomic_write_bytes(root / name, data)
                count += 1
        for name in removed:
            if inside(root, name):
                (root / name).unlink(missing_ok=True)
                count += 1
                parent = (root / name).parent
                while parent != root and parent.is_dir() and not any(parent.iterdir()):
                    parent.rmdir()  # a checkpoint's old clients-<round>/, emptied
                    parent = parent.parent
    return count


def inside(root: Path, name: str) -> bool:
    """Whether ``root / name`` stays inside ``root`` (no absolute name, no ``..`` out)."""
    return (root / name).resolve().is_relative_to(root)


class Mirror:
    """A task's side: the run in ``scratch`` on its node, its folder known to the caller as
    ``key``; :meth:`push` sends what changed since the last push."""

    def __init__(self, folders: Any, key: str, scratch: Path) -> None:
        self.folders, self.key, self.scratch = folders, key, scratch
        self.sent: dict[str, tuple[int, int]] = {}  # name -> (size, mtime_ns) last sent

    def pull(self) -> None:
        import ray

        for name, data in ray.get(self.folders.pull.remote(self.key)).items():
            path = self.scratch / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        self.sent = self._stats()

    def _stats(self) -> dict[str, tuple[int, int]]:
        return {
            str(p.relative_to(self.scratch)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in self.scratch.rglob("*")
            if p.is_file()
        }

    def push(self, folder: Path | None = None) -> None:
        """Send the changes (a checkpoint's hook passes its run's folder: others are not ours)."""
        import ray

        if folder is not None and Path(folder) != self.scratch:
            return
        now = self._stats()
        changed = {
            n: (self.scratch / n).read_bytes() for n, s in now.items() if self.sent.get(n) != s
        }
        removed = sorted(set(self.sent) - set(now))
        if changed or removed:
            ray.get(self.folders.push.remote(self.key, changed, removed))
        self.sent = now

    @contextlib.contextmanager
    def pushing(self) -> Iterator[None]:
        """Push after each checkpoint while the run goes on, and once more when it ends."""
        from fedretain.experiments.checkpoint import SAVED

        SAVED.append(self.push)
        try:
            yield
        finally:
            SAVED.remove(self.push)
            self.push()


@contextlib.contextmanager
def scratch_folder() -> Iterator[Path]:
    """A run's folder on its node, removed when the task ends (what matters came back)."""
    path = Path(tempfile.mkdtemp(prefix="fedretain-run-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


__all__ = ["STORAGES", "Folders", "Mirror", "check_storage", "drain", "snapshot", "token"]
