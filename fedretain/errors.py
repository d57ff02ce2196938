"""The one exception type users see: a clear, one-line message naming the problem and the fix.

The command line prints ``error: <message>`` and exits with status 2, without a traceback.
"""

from __future__ import annotations

import difflib
import errno
from collections.abc import Iterable
from pathlib import Path


class FedRetainError(Exception):
    """A user-facing error: bad configuration, missing or corrupt data, impossible request.

    Its text is always one line: a wrapped library message (an unpickling error spans two)
    has its whitespace folded.
    """

    def __str__(self) -> str:
        return " ".join(super().__str__().split())


class ConfigError(FedRetainError):
    """A configuration key or value is not valid."""


class DataError(FedRetainError):
    """Data is missing, corrupt or cannot be split as asked."""


class OutputError(FedRetainError):
    """A results file or folder cannot be written: full disk, no permission, a file in the way."""


class DivergenceError(FedRetainError):
    """NaN or Inf appeared in a client's update or in the global model."""


# errno -> what the user can do about it
_FIXES = {
    errno.ENOSPC: "free some space, or choose a folder on another disk",
    errno.EDQUOT: "free some space, or choose a folder on another disk",
    errno.EACCES: "choose a folder you can write to, or fix its permissions",
    errno.EPERM: "the file may be immutable (lsattr; chattr -i) or another user's: "
    "choose another folder, or fix it",
    errno.EROFS: "choose a folder on a writable file system",
    errno.ENOTDIR: "a file stands where a folder is needed: remove it or choose another path",
    errno.EEXIST: "a file stands where a folder is needed: remove it or choose another path",
    errno.EISDIR: "a folder stands where a file is needed: choose another path",
    errno.ENAMETOOLONG: "choose a shorter path",
}


def os_error_message(
    e: OSError, path: str | Path | None = None, action: str = "cannot write"
) -> str:
    """One line for a file-system error: the path, what went wrong and what to do about it.

    ``path`` names the file at stake when the error itself names none (or names a temporary
    file)."""
    where = path if path is not None else (e.filename or "")
    reason = e.strerror or str(e) or type(e).__name__
    fix = _FIXES.get(e.errno or 0, "check the path and try again" if where else "")
    return "; ".join(
        part for part in (f"{action} {where}: {reason}" if where else reason, fix) if part
    )


def unknown_choice(kind: str, value: object, choices: Iterable[str]) -> str:
    """Message for an unknown name, listing the valid choices and the closest match."""
    choices = sorted(choices)
    close = difflib.get_close_matches(str(value), choices, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown {kind} '{value}'{hint}; choose one of: {', '.join(choices)}"
