"""The one exception type users see: a clear, one-line message naming the problem and the fix.

The command line prints ``error: <message>`` and exits with status 2, without a traceback.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


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


def unknown_choice(kind: str, value: object, choices: Iterable[str]) -> str:
    """Message for an unknown name, listing the valid choices and the closest match."""
    choices = sorted(choices)
    close = difflib.get_close_matches(str(value), choices, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return f"unknown {kind} '{value}'{hint}; choose one of: {', '.join(choices)}"
