"""Fault injection (issue #12): a killed worker, SIGTERM to the launcher, a reader of a
file still being written, a disk that fills up.

After each, the reader's view is checked the way a downstream job would take it:
``LATEST`` names a version whose ``tfrecord_io_info.json`` lists shards that are all there,
whole (SHA-256 and record counts match), and no other directory of the root carries a
``tfrecord_io_info.json`` for partial data; and the command's last words say what happened
and what is left. (Two builds into one root at once are tested by the build-s3 work.)
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import pytest

import tfrecord_io as tfio
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.pipelines.building.build_job import run_build
from tfrecord_io.pipelines.runtime import failures, processes
from tfrecord_io.pipelines.runtime.local_workers import PROCESS_NAME

from tests.pipeline_support import TWO_WORKERS, build_config, cli_env, options, start_cli

pytestmark = [pytest.mark.faults, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def media(demo_media):
    return demo_media(12)


def _build_v1(config, out):
    run_build(build_config(config, out, "v1"), options(), progress=False)


def _start_build(config, out, tmp_path, version="v2", preexec_fn=None, extra=()):
    return start_cli(
        "build",
        config,
        "--output",
        str(out),
        "--version",
        version,
        "--no-progress",
        *TWO_WORKERS,
        *extra,
        log_dir=str(tmp_path / "logs"),
        preexec_fn=preexec_fn,
        start_new_session=True,  # its own process group: a hung run is killed whole below
    )


def _is_worker(pid):
    """Beam's own worker process, or one forked by tfrecord_io/pipelines/runtime/local_workers.py."""
    command = processes.cmdline(pid)
    return ("sdk_worker_main" in command and not command.startswith("/bin/sh")) or processes.comm(
        pid
    ) == PROCESS_NAME.decode()


def _wait_for_workers(proc, out, count=2, timeout=180, writing=False):
    """The launcher's Python worker processes, once ``count`` run and the version dir
    exists; ``writing``: and the pipeline has written into it (more than the claim's
    marker), so the job is surely past its claim and running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        workers = [p for p in processes.descendants(proc.pid) if _is_worker(p)]
        version_dir = out / "v2"
        written = version_dir.exists() and (
            not writing or any(name != dataset_writer.BUILDING_NAME for name in os.listdir(version_dir))
        )
        if len(workers) >= count and written:
            return workers
        time.sleep(0.05)
    raise AssertionError(
        f"no {count} workers seen (exit {proc.poll()}): {proc.communicate()[1] if proc.poll() is not None else ''}"
    )


def assert_readers_see_whole_data(out, latest="v1"):
    """What a reader that follows LATEST or tfrecord_io_info.json finds is whole."""
    assert dataset_writer.read_latest(str(out)) == latest
    for name in os.listdir(out):
        version_dir = out / name
        if not version_dir.is_dir():
            continue
        info = dataset_writer.load_info(str(version_dir))
        if info is None:
            continue  # no tfrecord_io_info.json: no reader takes it
        for split in info["splits"].values():
            for shard in split["shards"]:
                path = str(version_dir / shard["path"])
                assert dataset_writer.sha256_file(path) == shard["sha256"], path
                assert sum(1 for _ in tfio.tfrecord_iterator(path)) == shard["records"], path


def _finish(proc, timeout=300):
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise AssertionError(f"the launcher hung after the fault; it was killed\n{err[-3000:]}") from None
    return proc.returncode, out, err


def test_kill_9_one_worker_of_a_multi_process_build(media, tmp_path):
    _, config = media
    out = tmp_path / "out"
    _build_v1(config, out)
    proc = _start_build(config, out, tmp_path)
    workers = _wait_for_workers(proc, out)
    all_children = processes.descendants(proc.pid)
    os.kill(workers[0], signal.SIGKILL)
    code, _, err = _finish(proc)
    assert code == 1, err
    assert "tfrecord-io build failed: a worker process died: it exited with code 137 (killed by SIGKILL)" in err, err
    assert "LATEST still points at v1" in err
    assert f"partial output {out / 'v2'} removed" in err
    assert "Traceback" not in err and "exit:  1" in err
    assert not (out / "v2").exists()
    assert not [p for p in all_children if processes.running(p)], "worker processes outlived the launcher"
    assert_readers_see_whole_data(out)


def test_sigterm_to_the_launcher(media, tmp_path):
    _, config = media
    out = tmp_path / "out"
    _build_v1(config, out)
    proc = _start_build(config, out, tmp_path)
    _wait_for_workers(proc, out, writing=True)
    all_children = processes.descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    code, _, err = _finish(proc)
    assert code == 128 + signal.SIGTERM, err
    assert "tfrecord-io build failed: interrupted: stopped by SIGTERM" in err, err
    assert "LATEST still points at v1" in err and f"partial output {out / 'v2'} removed" in err
    assert "Traceback" not in err
    assert not (out / "v2").exists()
    assert not [p for p in all_children if processes.running(p)], "worker processes outlived the launcher"
    assert_readers_see_whole_data(out)


def test_a_signal_between_the_claim_and_the_pipeline_removes_the_claimed_version(media, tmp_path):
    """SIGTERM just after the launcher claimed the version, before the pipeline started
    (``Terminated`` raised where the claim is handed over): the version is removed all
    the same, LATEST is untouched, and the interruption goes on up."""
    _, config = media
    out = tmp_path / "out"
    _build_v1(config, out)
    said = []

    def signalled(version):
        assert (out / version / dataset_writer.BUILDING_NAME).exists()  # claimed
        raise failures.Terminated(signal.SIGTERM)

    with pytest.raises(failures.Terminated):
        run_build(build_config(config, out, "v2"), options(), progress=False, log=said.append, on_version=signalled)
    assert not (out / "v2").exists()
    assert any(f"removed the unfinished version {out / 'v2'}" in line for line in said), said
    assert_readers_see_whole_data(out)


class _ClaimCutShort(dataset_writer.BuildClaim):
    """A claim that SIGTERM interrupts at ``where``: while writing its marker, or once
    the marker is whole (starting the heartbeat)."""

    def __init__(self, version_dir, where):
        super().__init__(version_dir)
        self.where = where

    def _body(self):
        if self.where == "writing":
            raise failures.Terminated(signal.SIGTERM)
        return super()._body()

    def _start_heartbeat(self):
        super()._start_heartbeat()
        raise failures.Terminated(signal.SIGTERM)


@pytest.mark.parametrize("where", ["writing", "written"])
def test_a_claim_cut_short_takes_itself_back(tmp_path, where):
    """Nobody holds a claim that never returned, so nobody else would remove it: the
    marker (empty or whole) and the directory the claim made are gone, and the
    heartbeat thread stopped. A taken version's marker is never touched."""
    version_dir = tmp_path / "v2"
    claim = _ClaimCutShort(str(version_dir), where)
    with pytest.raises(failures.Terminated):
        claim.acquire()
    assert not version_dir.exists()
    assert claim._thread is None or not claim._thread.is_alive()

    holder = dataset_writer.BuildClaim(str(version_dir))
    holder.acquire()
    try:
        with pytest.raises(dataset_writer.VersionTaken):
            dataset_writer.BuildClaim(str(version_dir)).acquire()
        assert dataset_writer.read_marker(str(version_dir))["run_id"] == holder.run_id
    finally:
        holder.release()


# The build CLI with a stage after BuildDataset's finalize that waits for a file that
# never comes: the version is published and the job is still running.
_HELD_AFTER_FINALIZE = """
import sys
import apache_beam as beam
from tfrecord_io.pipelines import cli
from tfrecord_io.pipelines.building import build_job as job
from tests.pipeline_support import wait_for_file

real = job.build_pipeline

def held(p, *args, **kwargs):
    build, info = real(p, *args, **kwargs)
    info | "HoldAfterFinalize" >> beam.Map(wait_for_file, sys.argv[1])
    return build, info

job.build_pipeline = held
sys.exit(cli.main(sys.argv[2:]))
"""


def test_sigterm_after_the_version_is_published_keeps_it(media, tmp_path):
    """SIGTERM once the finalize stage moved LATEST, while the job still runs: the run
    fails (128 + 15), the version it published stays - LATEST names it, whole - and the
    failure block says so (before, the launcher removed the version LATEST named)."""
    _, config = media
    out = tmp_path / "out"
    _build_v1(config, out)
    argv = ["build", config, "--output", str(out), "--version", "v2", "--no-progress", *TWO_WORKERS]
    proc = subprocess.Popen(
        [sys.executable, "-c", _HELD_AFTER_FINALIZE, str(tmp_path / "never"), *argv],
        env=cli_env(str(tmp_path / "logs")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 300
    while dataset_writer.read_latest(str(out)) != "v2" and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    assert dataset_writer.read_latest(str(out)) == "v2"
    proc.send_signal(signal.SIGTERM)
    code, _, err = _finish(proc)
    assert code == 128 + signal.SIGTERM, err
    assert "tfrecord-io build failed: interrupted: stopped by SIGTERM" in err, err
    assert "LATEST points at v2 (it was v1 before this run)" in err, err
    assert f"{out / 'v2'} was published by this run before the failure" in err and "kept, whole" in err, err
    assert "removed" not in err and "Traceback" not in err, err
    assert (out / "v2").is_dir()
    assert_readers_see_whole_data(out, latest="v2")
    assert dataset_writer.load_info(str(out / "v2"))["records"] == 12


def _can_mount_tmpfs(target):
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    os.makedirs(target, exist_ok=True)
    ok = (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(target)], capture_output=True).returncode
        == 0
    )
    if ok:
        subprocess.run(["umount", str(target)], check=True)
    return ok


def _tree_bytes(path):
    """What the files under ``path`` take on a tmpfs: whole 4 KiB pages each."""
    return sum(-(-os.path.getsize(os.path.join(d, f)) // 4096) * 4096 for d, _, fs in os.walk(path) for f in fs)


def test_a_disk_that_fills_up_during_a_build(media, tmp_path):
    """A small tmpfs when this test may mount one (root), else a file-size limit
    (RLIMIT_FSIZE, with SIGXFSZ ignored so writes fail with EFBIG instead of killing)."""
    _, config = media
    staging = tmp_path / "staging"
    _build_v1(config, staging)
    disk = tmp_path / "disk"
    mounted = _can_mount_tmpfs(disk)
    preexec = None
    extra = []
    try:
        if mounted:
            # room for v1 and a little more, not for a second version
            size = _tree_bytes(staging) + 48 * 1024
            subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(disk)], check=True)
            expected = "No space left on device"
        else:
            # one shard per split: the train shard (~130 KB) goes over the limit, while
            # the job's log and Beam's own files stay under it
            limit = 96 * 1024
            extra = ["--num-shards", "1"]

            def preexec():
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
                resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

            expected = "File too large"
        out = disk / "out"
        shutil.copytree(staging, out)
        proc = _start_build(config, out, tmp_path, preexec_fn=preexec, extra=extra)
        code, _, err = _finish(proc)
        assert code == 1, err
        first = [line for line in err.splitlines() if line.startswith("tfrecord-io build failed:")]
        assert first and expected in first[0] and str(out / "v2") in first[0], err  # names the shard file
        assert "LATEST still points at v1" in err
        assert f"partial output {out / 'v2'} removed" in err
        assert "Traceback" not in err
        assert not (out / "v2").exists()
        assert_readers_see_whole_data(out)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(disk)])


_APPENDER = r"""
import sys, time
from tfrecord_io.format.framing import encode_frame
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "ab", buffering=0) as f:
    for i in range(n):
        frame = encode_frame(b"record-%05d" % i * 50)
        half = len(frame) // 2
        f.write(frame[:half])  # a reader may now see half a record
        time.sleep(0.004)
        f.write(frame[half:])
"""


def test_reading_a_file_that_is_still_being_appended_to(tmp_path):
    """Decision: a reader gets whole records only. Where the file (as it was when the
    read began) ends inside a record, it raises TruncatedRecordError naming the file and
    that record's offset, after every whole record before it."""
    path = str(tmp_path / "growing.tfrecord")
    open(path, "wb").close()
    n = 300
    expected = [b"record-%05d" % i * 50 for i in range(n)]
    frame_size = len(expected[0]) + 16
    writer = subprocess.Popen([sys.executable, "-c", _APPENDER, path, str(n)], env=cli_env())
    truncated = whole = 0
    try:
        while writer.poll() is None or whole == 0:
            got = []
            try:
                for record in tfio.tfrecord_iterator(path):
                    got.append(bytes(record))
                whole += 1
            except tfio.TruncatedRecordError as err:
                truncated += 1
                assert err.path == path
                assert err.offset == len(got) * frame_size  # the record after the last whole one
            assert got == expected[: len(got)]  # whole records, in order, never a partial one
    finally:
        writer.wait(timeout=60)
    assert [bytes(r) for r in tfio.tfrecord_iterator(path)] == expected
    assert truncated > 0, "the reader never caught the writer mid-record; the test proved nothing"
