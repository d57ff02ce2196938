"""Process trees (Linux ``/proc``): find a process's descendants, stop them, add up their memory.

Flower and Ray start processes of their own (SuperExec, ServerApp and ClientApp processes;
Ray's raylet, GCS and actors), some in new sessions, so stopping or measuring "everything a
federation started" means walking the tree from the processes we started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    if not os.path.isdir("/proc"):  # not Linux: only the processes themselves are known
        return children
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                ppid = int(stat[stat.rfind(")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    return children


def descendants(pid: int) -> list[int]:
    """``pid``'s descendants, children before grandchildren."""
    children = _children()
    out, stack = [], list(children.get(pid, []))
    while stack:
        p = stack.pop()
        out.append(p)
        stack.extend(children.get(p, []))
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_trees(roots: list[int], sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
    """Signal the processes ``roots`` and all their descendants at once; whatever survives
    ``grace`` seconds of a SIGTERM gets SIGKILL."""
    pids = [p for root in roots for p in (root, *descendants(root))]
    for p in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, sig)
    if sig == signal.SIGKILL:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    for p in pids:
        if alive(p):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)


def kill_tree(pid: int, sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
    """Signal ``pid`` and all its descendants; see :func:`kill_trees`."""
    kill_trees([pid], sig, grace)


def tree_rss_kb(root: int) -> tuple[int, int]:
    """Resident memory summed over ``root`` and its descendants (kB), and how many processes."""
    total = count = 0
    for pid in (root, *descendants(root)):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
                        count += 1
                        break
        except OSError:
            continue
    return total, count


__all__ = ["alive", "descendants", "kill_tree", "kill_trees", "tree_rss_kb"]
