"""The process-tree reader (tfrecord_io/pipelines/runtime/processes.py) on real processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from tfrecord_io.pipelines.runtime import processes

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")


def _wait_for(predicate, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_children_descendants_and_a_name_with_spaces_and_parentheses(tmp_path):
    # /proc/PID/stat puts the command name in parentheses, so a name holding ") (" would
    # shift every field after it for a reader that splits at the first ")".
    odd = tmp_path / "a) b (c"
    shutil.copy(shutil.which("sleep"), odd)
    parent = subprocess.Popen(["bash", "-c", f"'{odd}' 30 & sleep 30 & wait"])
    try:
        assert _wait_for(lambda: len(processes.children(parent.pid)) == 2)
        kids = processes.children(parent.pid)
        assert sorted(processes.cmdline(k).split()[0].rsplit("/", 1)[-1] for k in kids) == ["a)", "sleep"]
        assert "a) b (c" in [processes.comm(k) for k in kids]
        assert processes.parents()[kids[0]] == parent.pid  # the ppid field read right past the odd name
        mine = processes.descendants()
        assert parent.pid in mine and set(kids) <= set(mine)
        assert mine.index(parent.pid) < min(mine.index(k) for k in kids)  # children before grandchildren
        assert all(processes.running(p) for p in [parent.pid, *kids])
    finally:
        for pid in processes.descendants(parent.pid):
            os.kill(pid, 9)
        parent.kill()
        parent.wait()


def test_a_zombie_is_not_running_and_a_gone_process_knows_nothing():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    # exited but not yet reaped: still in /proc, as a zombie
    assert _wait_for(lambda: not processes.running(child.pid))
    assert os.path.exists(f"/proc/{child.pid}")
    child.wait()
    assert not processes.running(child.pid)
    assert processes.cmdline(child.pid) == "" and processes.comm(child.pid) == ""
    assert child.pid not in processes.descendants()
