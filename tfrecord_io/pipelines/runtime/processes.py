"""The process tree, read from ``/proc``: who is whose child, who still runs, what each runs.

The launcher stops the worker processes a failed or interrupted job leaves
(``failures.stop_children``), the forked local workers are waited for by pid
(``local_workers``), and the fault tests find the workers they kill the same way. Each
used to walk ``/proc`` on its own, each with its own way of reading ``/proc/PID/stat``
(whose second field, the command name, may hold spaces and parentheses). This module is
the one reader.

Linux only, like the rest of the local worker handling: elsewhere every function answers
"nothing known" (no children, not running, empty command line) instead of raising.
"""

from __future__ import annotations

import os
from typing import Dict, List, Optional


def _stat_fields(pid: int) -> Optional[List[bytes]]:
    """The fields of ``/proc/PID/stat`` after the command name (state, ppid, ...), or
    None if the process is gone. The name is in parentheses and may contain both, so
    the split is at the last ``)``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data.rsplit(b")", 1)[-1].split()
    return fields if len(fields) > 1 else None


def parents() -> Dict[int, int]:
    """pid -> parent pid of every process now visible in ``/proc``."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    out: Dict[int, int] = {}
    for name in entries:
        if name.isdigit():
            fields = _stat_fields(int(name))
            if fields is not None:
                out[int(name)] = int(fields[1])
    return out


def children(pid: int) -> List[int]:
    """The processes whose parent is ``pid``."""
    return sorted(p for p, parent in parents().items() if parent == pid)


def descendants(pid: Optional[int] = None) -> List[int]:
    """Every descendant of ``pid`` (default: this process): children first, then theirs."""
    by_parent: Dict[int, List[int]] = {}
    for p, parent in parents().items():
        by_parent.setdefault(parent, []).append(p)
    out: List[int] = []
    frontier = [os.getpid() if pid is None else pid]
    while frontier:
        kids = sorted(by_parent.get(frontier.pop(0), []))
        out.extend(kids)
        frontier.extend(kids)
    return out


def running(pid: int) -> bool:
    """Is ``pid`` still running: there, and not a zombie (exited, not yet reaped)?"""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != b"Z"


def cmdline(pid: int) -> str:
    """The command line of ``pid``, arguments separated by spaces ("" if gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
    except OSError:
        return ""


def comm(pid: int) -> str:
    """The process name of ``pid`` (``/proc/PID/comm``: what ``ps -o comm`` shows; the
    forked local workers set theirs), "" if gone."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read().strip().decode("utf-8", "replace")
    except OSError:
        return ""


__all__ = ["children", "cmdline", "comm", "descendants", "parents", "running"]
