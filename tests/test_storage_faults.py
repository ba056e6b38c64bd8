"""An unreachable store is reported within the storage timeout, naming it, with
"retrying" in the progress meanwhile (tfrecord_io/storage/storage_retry.py).

Real parts: a versitygw of the test's own (stopped on purpose, so not the session's
``s3_server``), Beam's S3 filesystem and its retry loop, the ``tfrecord-io`` CLI.

Beam's own retries of one request to a stopped server last 318 to 635 s (7 retries
from 5 s, doubling, fuzzed to 50-100 %); the bounds asserted here are far below that,
so a guard that does not stop Beam's loop fails them. They are the contract, not a
measurement: the timeout, plus one attempt (boto3's own retries of a refused
connection, ~7 s) plus the job's shutdown, with room for a loaded machine.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import List

import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from tfrecord_io.storage import files, storage_retry

from tests.pipeline_support import start_cli
from tests.s3support import find_versitygw, start_versitygw

pytestmark = pytest.mark.s3

TIMEOUT_S = 20
# The timeout + one attempt (~7 s of boto3 retries, 14-18 s under CI's two lanes) + the
# job failing and its workers stopping: 92 s once in CI (2026-12-07, the retries 14-18 s
# apart), ~70 s quiet. Beam alone takes at least 318 s, which this bound still tells apart.
BOUND_S = TIMEOUT_S + 100
# Rows of the build the store is stopped under: enough that its pipeline runs on for
# seconds after its first progress line (the cue to stop the store). Measured with one
# S3 client per process: 240 rows ended before any progress line; 1,200 rows printed
# the first at 5.7 s and ended at 13.3 s.
STOPPED_BUILD_ROWS = 1200


@pytest.fixture
def own_s3(tmp_path):
    """A versitygw this test may stop."""
    binary = find_versitygw()
    if binary is None:
        if os.environ.get("TFRECORD_IO_REQUIRE_S3") == "1":
            pytest.fail("versitygw not found: run `bash scripts/setup-s3`")
        pytest.skip("versitygw not found: run `bash scripts/setup-s3`")
    server = start_versitygw(binary, str(tmp_path / "s3"))
    yield server
    server.stop()


@pytest.fixture
def s3_options(own_s3):
    options = PipelineOptions([*own_s3.pipeline_args(), f"--storage_timeout={TIMEOUT_S}"])
    FileSystems.set_options(options)
    yield options
    FileSystems.set_options(PipelineOptions([]))


def test_a_stopped_store_fails_a_request_within_the_timeout_naming_it(own_s3, s3_options):
    """files.exists / read_bytes / glob against a stopped server: StorageUnavailableError
    naming the endpoint and object, what was being done, within the timeout; every
    retry announced to listeners meanwhile."""
    assert storage_retry.storage_timeout() == TIMEOUT_S  # from the pipeline option
    bucket = own_s3.make_bucket()
    url = f"s3://{bucket}/object"
    files.write_bytes(url, b"hello")
    assert files.read_bytes(url) == b"hello"
    events = []
    storage_retry.add_listener(events.append)
    try:
        own_s3.stop()
        for call, doing in (
            (lambda: files.exists(url), "looking up an object"),
            (lambda: files.read_bytes(url), "opening an object for reading"),
        ):
            events.clear()
            started = time.monotonic()
            with pytest.raises(storage_retry.StorageUnavailableError) as caught:
                call()
            took = time.monotonic() - started
            message = str(caught.value)
            # the first attempt (not counted: the timeout runs from the first failure), the
            # timeout, and one attempt past it: a refused connection's attempt is ~7 s of
            # boto3's own retries on an idle machine, up to ~15 s on CI's loaded one (seen:
            # 43 s in all); Beam alone retries for 318-635 s
            assert took < TIMEOUT_S + 30, f"{took:.0f}s: {message}"
            assert f"{own_s3.endpoint}/{bucket}/object" in message and doing in message, message
            assert f"storage timeout of {TIMEOUT_S}s" in message and "Could not connect" in message, message
            assert events and all(e["store"] == f"{own_s3.endpoint}/{bucket}/object" for e in events), events
    finally:
        storage_retry.remove_listener(events.append)


def test_timeout_zero_leaves_beams_retries_alone(own_s3, s3_options):
    """--storage_timeout=0: the guard only watches (the first retry is announced, the
    request still running after the point where a 1 s timeout would have ended it)."""
    storage_retry.set_storage_timeout(0)
    events = []
    storage_retry.add_listener(events.append)
    bucket = own_s3.make_bucket()
    own_s3.stop()
    done = threading.Event()

    def call():
        try:
            files.exists(f"s3://{bucket}/x")
        except Exception:  # noqa: BLE001 - whatever Beam raises in the end
            pass
        done.set()

    try:
        threading.Thread(target=call, daemon=True).start()
        deadline = time.monotonic() + 60
        while len(events) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(events) >= 2 and not done.is_set(), events  # still retrying: nothing cut it short
        assert events[-1]["timeout"] == 0
        # A timeout set while the request retries ends it at its next retry. (Without
        # this the thread went on retrying for minutes into the next tests, and its
        # notes, reaching every listener of the process, took over their progress lines.)
        storage_retry.set_storage_timeout(1)
        assert done.wait(90), "the request kept retrying after a timeout was set"
    finally:
        storage_retry.remove_listener(events.append)
        storage_retry.set_storage_timeout(None)


@pytest.mark.faults
def test_s3_server_stopped_during_a_build_is_reported_within_the_bound(own_s3, demo_media, tmp_path):
    """`tfrecord-io build` to s3:// with media and manifest on S3; the server is stopped
    once the version is claimed. The build ends (exit 1) within the bound, its message
    names the store, its progress said "retrying" meanwhile, and nothing was published."""
    logging.getLogger(__name__).info("versitygw at %s", own_s3.endpoint)
    _, demo = demo_media(STOPPED_BUILD_ROWS)
    bucket = own_s3.make_bucket()
    config = own_s3.upload_demo(demo, f"s3://{bucket}/demo", str(tmp_path / "build.yaml"))
    out = f"s3://{bucket}/ds"
    build = start_cli(
        "build",
        config,
        "--output",
        out,
        "--version",
        "v1",
        f"--storage_timeout={TIMEOUT_S}",
        *own_s3.pipeline_args(),
        cwd=str(tmp_path),
    )
    lines: List[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(build.stderr.readline, "")), daemon=True)
    reader.start()
    try:
        # Midway: the version is claimed and the pipeline runs (its progress line is out).
        deadline = time.monotonic() + 180
        while not any(line.startswith("[") for line in lines) and build.poll() is None:
            assert time.monotonic() < deadline, "the build's pipeline never started:\n" + "".join(lines)
            time.sleep(0.05)
        assert build.poll() is None, "the build ended before the store was stopped:\n" + "".join(lines)
        own_s3.stop()
        stopped = time.monotonic()
        build.wait(timeout=BOUND_S + 300)
        took = time.monotonic() - stopped
        reader.join(timeout=30)
        stdout = build.stdout.read()
    finally:
        if build.poll() is None:
            build.kill()
            build.wait()
    stderr = "".join(lines)
    print(f"ended {took:.0f}s after the stop, exit {build.returncode}\n{stdout}\n{stderr}")
    assert build.returncode == 1, stderr
    assert took < BOUND_S, f"the build took {took:.0f}s to fail after the store stopped:\n{stderr}"
    first = stderr.strip().splitlines()
    failure = stderr[stderr.index("tfrecord-io build failed") :] if "tfrecord-io build failed" in stderr else stderr
    assert own_s3.endpoint in failure, failure  # names the store
    assert "Traceback" not in failure, failure
    # The progress said "retrying" meanwhile, naming the store -- unless the first request
    # to fail was one Beam does not retry: the start of a shard's multipart upload
    # (Beam 2.62's ``S3Uploader._start_upload`` is ``no_retries``), which fails the job at
    # once with nothing to announce (seen in CI when the stop fell on a worker's upload).
    said_retrying = any("retrying" in line and own_s3.endpoint in line for line in first)
    failed_unretried = "?uploads" in failure and "WriteShard" in failure
    assert said_retrying or failed_unretried, stderr
    assert not os.path.exists(own_s3.object_path(f"{out}/LATEST"))
    if "StorageUnavailableError" in failure.split("state:", 1)[0]:  # the store's outage failed the job:
        # what it left was looked for briefly, not for a second storage timeout
        assert "looked for up to 5s after the job failed on storage" in failure, failure


#: what Beam 2.62's retry loop logs before each wait (``apache_beam.utils.retry``)
BEAM_RETRY_FORMAT = (
    "Retry with exponential backoff: waiting for %s seconds before retrying %s because we caught "
    "exception: %s Traceback for above exception (most recent call last):\n%s"
)
UNREACHABLE = "S3ClientError: ('Could not connect to the endpoint URL: \"http://127.0.0.1:9/bucket/key\"', None)\n"


def announce_beam_retry(wait_s: float) -> None:
    """Log, as Beam's retry loop does, a wait of ``wait_s`` before retrying a read of an
    unreachable object (no server at 127.0.0.1:9)."""
    logging.getLogger(storage_retry.BEAM_RETRY_LOGGER).warning(BEAM_RETRY_FORMAT, wait_s, "get_range", UNREACHABLE, "")


def test_progress_line_says_retrying_from_beams_retry_announcement():
    """The launcher's progress line shows a retry announced on Beam's retry logger (the
    message Beam 2.62 logs before each wait), with the store and what failed; a retry
    past the timeout raises from that announcement."""
    from tfrecord_io.pipelines.runtime.progress import ProgressPrinter

    storage_retry.install()
    storage_retry.set_storage_timeout(30)
    try:
        with ProgressPrinter("build", interval=3600) as progress:
            assert "retrying" not in progress.line()
            announce_beam_retry(2.5)
            line = progress.line()
            assert "retrying http://127.0.0.1:9/bucket/key: reading an object failing for 0s" in line, line
            assert "gives up at 30s" in line and "Could not connect" in line, line
            with pytest.raises(storage_retry.StorageUnavailableError, match="http://127.0.0.1:9/bucket/key"):
                announce_beam_retry(40.0)  # the next wait ends past 30 s
    finally:
        storage_retry.set_storage_timeout(None)


def test_the_timeout_at_most_bounds_a_longer_or_unbounded_one_and_restores_it():
    """``storage_timeout_at_most``: a 30 s or an unbounded (0) timeout is 5 s within, a
    shorter one stays, and the one set before is back after (also after an error); a
    retry past 5 s within gives up."""
    storage_retry.install()
    try:
        for before, within in ((30.0, 5.0), (0.0, 5.0), (2.0, 2.0)):
            storage_retry.set_storage_timeout(before)
            with storage_retry.storage_timeout_at_most(5) as timeout:
                assert timeout == storage_retry.storage_timeout() == within
            assert storage_retry.storage_timeout() == before
        storage_retry.set_storage_timeout(30)
        with pytest.raises(storage_retry.StorageUnavailableError, match="gave up at the storage timeout of 5s"):
            with storage_retry.storage_timeout_at_most(5):
                announce_beam_retry(8.0)  # within 30 s, past 5 s
        assert storage_retry.storage_timeout() == 30
    finally:
        storage_retry.set_storage_timeout(None)


def test_a_failed_jobs_state_is_looked_for_briefly_after_a_storage_outage():
    """The failure block of a job that failed because a store kept failing: the look at
    what it left gives up on that store within ``AFTER_OUTAGE_TIMEOUT_S`` (not a second
    whole storage timeout), and says so; after another failure the timeout stays."""
    import argparse

    from tfrecord_io.pipelines import cli

    storage_retry.install()
    storage_retry.set_storage_timeout(20)
    seen = []

    def state():
        seen.append(storage_retry.storage_timeout())
        announce_beam_retry(8.0)  # the store is still down
        return ["LATEST still points at v0"]

    args = argparse.Namespace(command="build", failure_state=state)
    outage = "StorageUnavailableError: storage unavailable: http://127.0.0.1:9/bucket kept failing for 23s"
    try:
        (line,) = cli._failure_state(args, outage)
        assert seen == [storage_retry.AFTER_OUTAGE_TIMEOUT_S] == [5.0]
        assert line.startswith("could not be determined: storage unavailable: http://127.0.0.1:9/bucket/key"), line
        assert line.endswith("looked for up to 5s after the job failed on storage"), line
        assert storage_retry.storage_timeout() == 20
        # another cause (a corrupt record, a refusal): the whole timeout, and 8 s is within it
        for cause in ("CorruptRecordError: a.tfrecord, byte offset 30", "StorageAccessError: access denied"):
            assert cli._failure_state(args, cause) == ["LATEST still points at v0"] and seen[-1] == 20

        def down():
            announce_beam_retry(30.0)  # past the whole timeout: the store went down after another failure
            return []

        args.failure_state = down
        (line,) = cli._failure_state(args, "CorruptRecordError: a.tfrecord, byte offset 30")
        assert "gave up at the storage timeout of 20s" in line and "looked for" not in line, line
    finally:
        storage_retry.set_storage_timeout(None)


def test_an_outage_is_told_from_other_failures_in_the_chain_and_in_text():
    """``is_outage``: a StorageUnavailableError raised here or under another exception, or
    named in a runner's traceback text; not a refusal, not another error."""
    from tfrecord_io.errors import StorageAccessError, StorageUnavailableError

    try:
        try:
            raise StorageUnavailableError("storage unavailable: http://127.0.0.1:9")
        except StorageUnavailableError as inner:
            raise RuntimeError("the pipeline failed") from inner
    except RuntimeError as outer:
        wrapped = outer
    assert storage_retry.is_outage(wrapped)
    assert storage_retry.is_outage(RuntimeError("Traceback ...\nStorageUnavailableError: storage unavailable: x"))
    assert not storage_retry.is_outage(StorageAccessError("access denied"))
    assert not storage_retry.is_outage(RuntimeError("CorruptRecordError: a.tfrecord"))
    assert not storage_retry.is_outage("")


def test_the_guard_sees_retries_while_logging_is_switched_off():
    """``logging.disable`` is process-wide (a caller may mute Beam's log around one call, in
    another thread): the guard still sees Beam's announcements and gives up at the timeout,
    and the announcement itself stays out of sight."""
    storage_retry.install()
    storage_retry.set_storage_timeout(30)
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with pytest.raises(storage_retry.StorageUnavailableError, match="http://127.0.0.1:9/bucket/key"):
            announce_beam_retry(40.0)
    finally:
        logging.disable(previous)
        storage_retry.set_storage_timeout(None)


def test_cluster_progress_travels_through_shared_storage_and_says_retrying(own_s3, s3_options):
    """A job whose workers may be elsewhere (an EXTERNAL environment) keeps its progress
    on S3 under --temp_location, never in the launcher's /tmp: a real pipeline's
    CountProgress counts and a worker's retry note reach the line through the store;
    when that store stops, the line still comes out at once and says "retrying" (the
    launcher's own retry, noted locally; the store is read by a thread of its own), and
    the job's end is not held up by deleting the progress files."""
    import apache_beam as beam

    from tfrecord_io.pipelines.runtime.progress import CountProgress, ProgressPrinter, RetryNotes, read_counts

    from tests.pipeline_support import IN_PROCESS

    bucket = own_s3.make_bucket()
    temp = f"s3://{bucket}/tmp"
    cluster = PipelineOptions(
        [
            "--runner=PortableRunner",
            "--environment_type=EXTERNAL",
            "--environment_config=localhost:9",
            f"--temp_location={temp}",
            f"--storage_timeout={TIMEOUT_S}",
            *own_s3.pipeline_args(),
        ]
    )
    beam_retry = logging.getLogger(storage_retry.BEAM_RETRY_LOGGER)
    fmt = (
        "Retry with exponential backoff: waiting for %s seconds before retrying %s because we caught "
        "exception: %s Traceback for above exception (most recent call last):\n%s"
    )
    storage_retry.install()
    storage_retry.set_storage_timeout(TIMEOUT_S)
    try:
        with ProgressPrinter("validate", interval=0.2, options=cluster, rate_stage="records") as bar:
            assert bar.dir is not None and bar.dir.startswith(f"{temp}/tfrecord-io-validate-progress-"), bar.dir
            # the counting stage of a real pipeline (the in-process runner stands in for a remote worker)
            with beam.Pipeline(options=PipelineOptions([*IN_PROCESS, *own_s3.pipeline_args()])) as p:
                p | beam.Create(list(range(250))) | beam.ParDo(CountProgress(bar.dir, "records"))
            assert read_counts(bar.dir) == {"records": 250}
            RetryNotes(bar.dir)(
                {"store": "http://elsewhere:9/b/k", "what": "reading an object", "failing_for": 3.0, "error": "boom"}
            )
            deadline = time.monotonic() + 30
            while "retrying http://elsewhere:9/b/k" not in bar.line() and time.monotonic() < deadline:
                time.sleep(0.1)
            line = bar.line()
            assert "records 250" in line and "retrying http://elsewhere:9/b/k: reading an object" in line, line
            own_s3.stop()
            url = f"{own_s3.endpoint}/{bucket}/x"
            error = f"S3ClientError: ('Could not connect to the endpoint URL: \"{url}\"', None)\n"
            beam_retry.warning(fmt, 2.5, "get_range", error, "")  # the launcher's own request failing
            time.sleep(1.0)  # the poller is now stuck in Beam's retries of its listing
            started = time.monotonic()
            line = bar.line()
            assert time.monotonic() - started < 1.0, "the line waited on the stopped store"
            # the newest of the launcher's own retries of the stopped store: the request
            # above, or, when Beam's retry of it came after (a race), whichever request the
            # poller's round was making (listing the progress directory, looking up or
            # reading one of its files)
            retrying = rf"retrying {re.escape(own_s3.endpoint)}/{bucket}\S*: [\w' ]+ failing for \d+s"
            assert re.search(retrying, line), line
            exiting = time.monotonic()
        assert time.monotonic() - exiting < 20, "the end of the job waited for Beam's retries of the clean-up"
    finally:
        storage_retry.set_storage_timeout(None)
