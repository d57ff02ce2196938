"""Writing results atomically: every file goes to a temporary name, then is renamed.

A crash (or SIGKILL) at any moment leaves either the old file or the new one, never a torn
one: ``os.replace`` is atomic on POSIX file systems. Files get the mode the umask implies
(0644 under umask 022), as ``open`` would give them. A file-system error (full disk, no
permission, a file where a folder should be) is an :class:`~fedretain.errors.OutputError`
naming the path and the fix.

JSON is always valid JSON: non-finite floats (a diverged run's loss) are written as the
strings ``"NaN"``, ``"Infinity"`` and ``"-Infinity"``, and :func:`read_json` and
:func:`read_jsonl` turn exactly those strings back into floats.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import tomli_w

from fedretain.errors import OutputError, os_error_message


def _umask() -> int:
    """The process's umask, read without changing it where Linux shows it (threads may be
    creating files meanwhile)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def durable() -> bool:
    """Whether written files are flushed to the disk before they replace the old ones: yes,
    unless the environment sets ``FEDRETAIN_FSYNC=0`` (the test suite does; a scratch disk
    may), which keeps every file whole or absent after a killed process but not after a
    power loss."""
    return os.environ.get("FEDRETAIN_FSYNC", "1") != "0"


def atomic_write_bytes(path: str | Path, data: bytes, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``.

    ``fsync=False`` skips flushing to the disk: the file is still whole or absent after a
    killed process, but not after a power loss (for scratch files synced later in bulk);
    :func:`durable` can turn flushing off for every file.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())  # mkstemp's files are 0600
            f.write(data)
            if fsync and durable():
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise OutputError(os_error_message(e, path)) from e
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _encode(value: Any) -> Any:
    """``value`` with its non-finite floats as the strings of :data:`NON_FINITE`."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    """The inverse of :func:`_encode`: exactly the strings of :data:`NON_FINITE` become floats."""
    if isinstance(value, str):
        return NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def dumps(data: Any, indent: int | None = None) -> str:
    """Strict JSON text of ``data`` (non-finite floats as strings, see the module)."""
    return json.dumps(_encode(data), indent=indent, allow_nan=False)


def write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, dumps(data, indent=2) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(dumps(r) + "\n" for r in rows))


def write_toml(path: str | Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, tomli_w.dumps(data))


def figure_format(path: str | Path) -> str:
    """The image format a figure named ``path`` is written in: its suffix (``.png``, ``.pdf``,
    ``.svg``: matplotlib's ``savefig`` formats, but ``.pgf``, which needs LaTeX); a
    ConfigError listing them for another suffix or none."""
    from matplotlib.backend_bases import FigureCanvasBase

    from fedretain.errors import ConfigError

    formats = sorted(set(FigureCanvasBase.get_supported_filetypes()) - {"pgf"})
    suffix = Path(path).suffix.lower().removeprefix(".")
    if suffix not in formats:
        raise ConfigError(
            f"cannot write a figure to {path}: its name must end in one of "
            f"{', '.join('.' + f for f in formats)} (the format follows the suffix), e.g. "
            f"{Path(path).with_suffix('.png').name}"
        )
    return suffix


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> None:
    """Save a matplotlib figure through a temporary file, in the format its suffix names
    (:func:`figure_format`: ``heat.pdf`` is a PDF)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format=figure_format(path), dpi=dpi, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


def read_json(path: str | Path) -> Any:
    """A JSON file written by :func:`write_json` (``"NaN"``, ``"Infinity"``,
    ``"-Infinity"`` read back as floats); also reads older files with bare ``NaN``."""
    with open(path) as f:
        return _decode(json.load(f))


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file written by :func:`write_jsonl`, as :func:`read_json`."""
    with open(path) as f:
        return [_decode(json.loads(line)) for line in f if line.strip()]


LOCK = ".fedretain.lock"  # in a study's --out while a driver writes it


@contextlib.contextmanager
def driver_lock(folder: str | Path, command: str) -> Iterator[None]:
    """Hold ``folder/.fedretain.lock`` while one ``fedretain COMMAND`` writes ``folder``: a
    second driver on the same folder (on this machine, or another that shares it through a
    filesystem with POSIX locks) stops at once with an :class:`OutputError`, having written
    nothing. The lock goes with the process, also when it is killed; the empty file stays."""
    import fcntl

    folder = Path(folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise OutputError(os_error_message(e, folder)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            raise OutputError(
                f"{folder} is being written by {holder}; wait for it to end or choose another "
                "--out (nothing was written)"
            ) from None
        os.ftruncate(fd, 0)
        who = f"fedretain {command} (pid {os.getpid()} on {os.uname().nodename})"
        os.pwrite(fd, f"{who}\n".encode(), 0)
        yield
    finally:
        os.close(fd)
