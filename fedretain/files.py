"""Writing results atomically: every file goes to a temporary name, then is renamed.

A crash (or SIGKILL) at any moment leaves either the old file or the new one, never a torn
one: ``os.replace`` is atomic on POSIX file systems.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tomli_w


def atomic_write_bytes(path: str | Path, data: bytes, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``.

    ``fsync=False`` skips flushing to the disk: the file is still whole or absent after a
    killed process, but not after a power loss (for scratch files synced later in bulk).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def write_json(path: str | Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r) + "\n" for r in rows))


def write_toml(path: str | Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, tomli_w.dumps(data))


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> None:
    """Save a matplotlib figure as PNG through a temporary file."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
