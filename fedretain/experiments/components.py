"""The components of this layer, registered by importing this module: the diagnostics and the
trackers (the kinds this layer declares, each entry in its own module) and Flower's engine
(``engine=flower``, an entry of the engines' kind from the layer below). The run and the
results folder's rules read them from here; a new diagnostic or tracker in a file of its own
is that file, its registry line and one import below (``tests/test_layers.py`` names a
registration that no one imports).

Each diagnostic's and tracker's line names the files it writes into a run's results folder
(``files=``: names, ``*`` for a round, a trailing ``/`` for a folder), so that ``--overwrite``
knows them as the run's (:mod:`fedretain.experiments.outputs`).
"""

from __future__ import annotations

import fnmatch

import fedretain.experiments.diagnostics
import fedretain.experiments.generator_quality
import fedretain.experiments.tracking
import fedretain.flower  # noqa: F401
from fedretain.registry import kind

KINDS = ("diagnostic", "tracker")  # the kinds whose entries write files of their own


def writes(name: str, folder: bool) -> bool:
    """Whether a registered diagnostic or tracker writes the file (folder) ``name``."""
    patterns = [
        pattern
        for k in KINDS
        for _, entry in kind(k).items()
        for pattern in entry.meta.get("files", ())
    ]
    if folder:
        return any(p.endswith("/") and fnmatch.fnmatchcase(name, p[:-1]) for p in patterns)
    return any(not p.endswith("/") and fnmatch.fnmatchcase(name, p) for p in patterns)


__all__ = ["KINDS", "writes"]
