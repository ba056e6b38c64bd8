"""The build's storage and commit protocol: URLs, usage errors before any write,
scheduled retries (same --version), concurrent builds, and the whole cycle on a real
S3 server (versitygw): build -> validate -> corrupt -> validate names it -> reshard ->
rerun identical -> killed build leaves LATEST as it was -> retry succeeds."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import yaml
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

import tfrecord_io
from tfrecord_io.dataset import dataset_writer, datasets
from tfrecord_io.pipelines.building.build_config import load_config
from tfrecord_io.pipelines.building.build_job import run_build
from tfrecord_io.storage import files

from tests.pipeline_support import IN_PROCESS, REPO, TWO_WORKERS, options, run_cli, start_cli


def _jpeg(path, color, size=(32, 24)):
    from PIL import Image

    Image.new("RGB", size, color).save(path, "JPEG", quality=90)


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """12 good JPEGs and four bad rows: missing, unreadable (a directory), a
    decompression bomb (over max_pixels) and a text file that is not an image."""
    root = tmp_path_factory.mktemp("storage-media")
    rows = []
    for i in range(12):
        _jpeg(root / f"img{i}.jpg", (20 * i % 256, 100, 200 - 10 * i))
        rows.append({"id": f"r{i}", "image": f"img{i}.jpg", "label": ["cat", "dog"][i % 2]})
    from PIL import Image

    Image.new("RGB", (200, 200), (1, 2, 3)).save(root / "bomb.png")
    os.makedirs(root / "adir.jpg")
    (root / "notes.jpg").write_text("this is not an image\n")
    rows += [
        {"id": "bad-missing", "image": "nope.jpg", "label": "cat"},
        {"id": "bad-unreadable", "image": "adir.jpg", "label": "cat"},
        {"id": "bad-bomb", "image": "bomb.png", "label": "dog"},
        {"id": "bad-notimage", "image": "notes.jpg", "label": "dog"},
    ]
    with open(root / "manifest.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    config = {
        "name": "st",
        "input": {"manifest": "manifest.jsonl"},
        "key": "id",
        "columns": {
            "image": {"encoder": "image", "max_pixels": 5000},
            "label": {"encoder": "label", "vocabulary": ["cat", "dog"]},
        },
        "splits": {"train": 0.75, "test": 0.25},
        "sharding": {"num_shards": 2},
        "output": {"dir": "out"},
    }
    (root / "build.yaml").write_text(yaml.safe_dump(config))
    return root


def _cfg(media, out, version, **extra):
    return load_config(
        str(media / "build.yaml"), [("output.dir", str(out)), ("output.version", version), *extra.items()]
    )


def _shard_bytes(version_dir):
    return {
        s["path"]: files.read_bytes(s["abspath"])
        for s in dataset_writer.dataset_shards(version_dir, datasets.load_info(version_dir))
    }


# ---------------------------------------------------------------- local disk


def test_rejected_rows_carry_their_reasons(media, tmp_path):
    summary = run_build(_cfg(media, tmp_path / "out", "v1"), options(), progress=False)
    assert (summary.rows_in, summary.written, summary.rejected) == (16, 12, 4)
    with open(tmp_path / "out" / "v1" / "rejected-00000-of-00001.jsonl") as f:
        rejected = {r["row"]["id"]: r for r in map(json.loads, f)}
    assert "no such file" in rejected["bad-missing"]["reason"]
    assert "is a directory" in rejected["bad-unreadable"]["reason"]
    assert "decompression bomb" in rejected["bad-bomb"]["reason"]
    assert rejected["bad-notimage"]["stage"] == "decode" and "notes.jpg" in rejected["bad-notimage"]["reason"]


def test_unknown_scheme_is_a_usage_error_before_anything_is_written(media, tmp_path):
    proc = run_cli(
        "build",
        str(media / "build.yaml"),
        "--output",
        "nosuchfs://bucket/ds",
        "--no-progress",
        *IN_PROCESS,
        cwd=str(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    # The CLI's failure block: the one line that matters first, then state and exit code.
    assert "nosuchfs://" in lines[0] and "Traceback" not in proc.stderr, proc.stderr
    assert "nothing was written" in proc.stderr and len(lines) <= 4, proc.stderr
    assert os.listdir(tmp_path) == []  # no local "nosuchfs:" directory


def test_retry_after_a_failed_attempt_cleans_up_and_builds(media, tmp_path, monkeypatch):
    import tfrecord_io.pipelines.building.write as build_module

    out = tmp_path / "out"
    run_build(_cfg(media, out, "v1"), options(), progress=False)

    class FailingWriter(build_module.RecordWriter):
        def close(self):
            raise OSError("injected failure: disk full")

    monkeypatch.setattr(build_module, "RecordWriter", FailingWriter)
    with pytest.raises(Exception, match="injected failure"):
        run_build(_cfg(media, out, "v2"), options(), progress=False)
    assert not os.path.exists(out / "v2")  # the failed run removed what it wrote
    assert dataset_writer.read_latest(str(out)) == "v1"
    monkeypatch.undo()
    summary = run_build(_cfg(media, out, "v2"), options(), progress=False)
    assert not summary.reused and dataset_writer.read_latest(str(out)) == "v2"


def test_retry_after_a_killed_attempt_removes_its_leftovers(media, tmp_path):
    out = tmp_path / "out"
    version_dir = out / "v1"
    os.makedirs(version_dir / "train")
    (version_dir / "train" / "st-train.tfrecord-00000-of-00002").write_bytes(b"half a shard")
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    ).stdout.strip()
    (version_dir / "_BUILDING").write_text(
        json.dumps({"run_id": "x" * 32, "host": os.uname().nodename, "pid": int(dead), "heartbeat": time.time()})
    )
    summary = run_build(_cfg(media, out, "v1"), options(), progress=False)
    assert not summary.reused and summary.written == 12
    assert datasets.resolve_version_dir(str(out)) == str(version_dir)
    assert not os.path.exists(version_dir / "_BUILDING")
    # The shard now holds whole records (CRCs checked), not the leftover bytes.
    shard = str(version_dir / "train" / "st-train.tfrecord-00000-of-00002")
    listed = {
        s["abspath"]: s["records"]
        for s in dataset_writer.dataset_shards(str(version_dir), datasets.load_info(str(version_dir)))
    }
    assert len(list(tfrecord_io.tfrecord_iterator(shard))) == listed[shard] > 0


def test_a_version_being_built_by_a_live_run_is_refused(media, tmp_path):
    version_dir = tmp_path / "out" / "v1"
    os.makedirs(version_dir)
    (version_dir / "_BUILDING").write_text(
        json.dumps({"run_id": "y" * 32, "host": os.uname().nodename, "pid": os.getpid(), "heartbeat": time.time()})
    )
    with pytest.raises(dataset_writer.DatasetDirError, match="being built by another run"):
        run_build(_cfg(media, tmp_path / "out", "v1"), options(), progress=False)
    assert os.listdir(version_dir) == ["_BUILDING"]


def test_retry_after_success_verifies_and_rewrites_nothing(media, tmp_path):
    out = tmp_path / "out"
    run_build(_cfg(media, out, "20261130T020000"), options(), progress=False)
    before = {p: os.stat(p).st_mtime_ns for p in files.list_prefix(str(out))}
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "tfrecord_io", "pipelines", "scheduled_build.py"),
            f"--config={media / 'build.yaml'}",
            f"--output={out}",
            "--version=20261130T020000",
            *IN_PROCESS,
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, PYTHONPATH=REPO),
    )
    assert proc.returncode == 0, proc.stderr
    assert "nothing rewritten" in proc.stdout
    assert {p: os.stat(p).st_mtime_ns for p in files.list_prefix(str(out))} == before
    # A corrupted published version is not silently accepted by the retry.
    shard = next(p for p in before if p.endswith("-00000-of-00002"))
    with open(shard, "r+b") as f:
        f.seek(20)
        f.write(b"\xff")
    with pytest.raises(dataset_writer.DatasetDirError, match="fails verification"):
        run_build(_cfg(media, out, "20261130T020000"), options(), progress=False)


def test_same_version_with_another_config_is_refused(media, tmp_path):
    out = tmp_path / "out"
    run_build(_cfg(media, out, "v1"), options(), progress=False)
    proc = run_cli(
        "build",
        str(media / "build.yaml"),
        "--output",
        str(out),
        "--version",
        "v1",
        "--set",
        "seed=5",
        "--no-progress",
        *IN_PROCESS,
    )
    assert proc.returncode == 2
    assert "already holds a build of a different config or inputs" in proc.stderr


def test_two_builds_at_once_publish_distinct_whole_versions(media, tmp_path):
    out = tmp_path / "out"
    procs = [
        start_cli("build", str(media / "build.yaml"), "--output", str(out), "--no-progress", *IN_PROCESS)
        for _ in range(2)
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results
    versions = sorted(n for n in os.listdir(out) if n != "LATEST")
    assert len(versions) == 2
    for v in versions:
        assert datasets.load_info(str(out / v))["records"] == 12
    assert dataset_writer.read_latest(str(out)) in versions


# ---------------------------------------------------------------- S3 (versitygw)


@pytest.fixture
def s3_fs(s3_server):
    FileSystems.set_options(PipelineOptions(s3_server.pipeline_args()))
    yield s3_server
    FileSystems.set_options(PipelineOptions([]))


def test_unreachable_or_unauthorised_bucket_fails_before_work(media, s3_server, s3_bucket, tmp_path):
    wrong_secret = [a for a in s3_server.pipeline_args() if not a.startswith("--s3_secret")] + [
        "--s3_secret_access_key=wrong"
    ]
    for url, flags in ((s3_bucket + "/ds", wrong_secret), ("s3://no-such-bucket-here/ds", s3_server.pipeline_args())):
        proc = run_cli("build", str(media / "build.yaml"), "--output", url, "--no-progress", *IN_PROCESS, *flags)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert url in lines[0] and "Traceback" not in proc.stderr and len(lines) <= 4, proc.stderr
    assert os.listdir(s3_server.object_path(s3_bucket)) == []


@pytest.mark.s3
@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_the_digest_kept_while_uploading_is_the_stored_objects(s3_fs, s3_bucket, compression):
    """What the build records of a shard on S3 (SHA-256, size) is hashed on the way
    out, not read back: it must be the object as the server stores it, whatever the
    upload's parts (over 2 * 8 MiB: Beam's multipart upload sends several)."""
    from tfrecord_io.format.writer import RecordWriter

    path = f"{s3_bucket}/digest/{compression}.tfrecord"
    records = [os.urandom(1 << 20) for _ in range(20)]
    writer = RecordWriter(path, compression, digest=True)
    for start in range(0, len(records), 3):
        writer.write_records(records[start : start + 3])
    writer.close()
    with open(s3_fs.object_path(path), "rb") as f:
        stored = f.read()
    assert writer.sha256 == hashlib.sha256(stored).hexdigest() and writer.stored_bytes == len(stored)
    assert [bytes(r) for r in tfrecord_io.tfrecord_iterator(path, compression_type=compression)] == records


@pytest.mark.s3
def test_s3_build_validate_corrupt_reshard_rerun_kill_retry(media, s3_fs, s3_bucket, tmp_path):
    s3 = s3_fs
    root = s3_bucket + "/ds"
    flags = ["--no-progress", *TWO_WORKERS, *s3.pipeline_args()]
    build = run_cli("build", str(media / "build.yaml"), "--output", root, "--version", "v1", *flags)
    assert build.returncode == 0, build.stderr
    assert "written: 12" in build.stdout and "rejected: 4" in build.stdout
    assert datasets.read_latest(root) == "v1"
    v1 = datasets.resolve_version_dir(root)
    assert not files.exists(files.join(v1, "_BUILDING")) and files.glob(files.join(v1, "_shards", "*")) == []
    first = _shard_bytes(v1)
    assert len(first) == 4

    ok = run_cli("validate", root, *flags)
    assert ok.returncode == 0, ok.stdout + ok.stderr

    # Corrupt one byte of one object behind the server; validate names the object.
    victim = sorted(files.glob(v1 + "/train/*-00001-of-00002"))[0]
    with open(s3.object_path(victim), "r+b") as f:
        f.seek(30)
        byte = f.read(1)
        f.seek(30)
        f.write(bytes([byte[0] ^ 0xFF]))
    bad = run_cli("validate", root, *flags)
    assert bad.returncode == 1 and victim in bad.stdout, bad.stdout
    with open(s3.object_path(victim), "r+b") as f:
        f.seek(30)
        f.write(byte)

    resharded = run_cli("reshard", root, "--output", s3_bucket + "/flat/data", "--num-shards", "3", *flags)
    assert resharded.returncode == 0, resharded.stderr
    flat = [p for p in files.glob(s3_bucket + "/flat/data-*") if not p.endswith(".index")]
    assert len(flat) == 3
    got = sorted(bytes(r) for p in flat for r in tfrecord_io.tfrecord_iterator(p))
    want = sorted(bytes(r) for path in first for r in tfrecord_io.tfrecord_iterator(files.join(v1, path)))
    assert got == want
    # The built shards are indexed: the slice path copies them in path order, evenly.
    in_order = [bytes(r) for path in sorted(first) for r in tfrecord_io.tfrecord_iterator(files.join(v1, path))]
    shards = [[bytes(r) for r in tfrecord_io.tfrecord_iterator(p)] for p in sorted(flat)]
    assert [r for shard in shards for r in shard] == in_order
    assert max(map(len, shards)) - min(map(len, shards)) <= 1

    again = run_cli("build", str(media / "build.yaml"), "--output", root, "--version", "v2", *flags)
    assert again.returncode == 0, again.stderr
    assert _shard_bytes(files.join(root, "v2")) == first
    assert datasets.read_latest(root) == "v2"

    # A build killed mid-run (the launcher and its workers) leaves LATEST as it was.
    proc = start_cli(
        "build",
        str(media / "build.yaml"),
        "--output",
        root,
        "--version",
        "v3",
        *flags,
        capture=False,
        start_new_session=True,
    )
    marker = s3.object_path(root + "/v3/_BUILDING")
    deadline = time.monotonic() + 120
    while not os.path.exists(marker) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the build finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert datasets.read_latest(root) == "v2"
    assert datasets.load_info(root + "/v3") is None
    with pytest.raises(datasets.DatasetLayoutError):
        datasets.resolve_version_dir(root, "v3")

    # The scheduler's retry with the same version removes the leftovers and builds.
    retry = run_cli("build", str(media / "build.yaml"), "--output", root, "--version", "v3", *flags)
    assert retry.returncode == 0, retry.stderr
    assert datasets.read_latest(root) == "v3" and _shard_bytes(root + "/v3") == first
    # ... and a second retry after that success verifies and rewrites nothing.
    before = {p: files.stat_many([p])[p] for p in files.list_prefix(root + "/v3")}
    noop = run_cli("build", str(media / "build.yaml"), "--output", root, "--version", "v3", *flags)
    assert noop.returncode == 0 and "nothing rewritten" in noop.stdout, noop.stderr
    assert {p: files.stat_many([p])[p] for p in files.list_prefix(root + "/v3")} == before
    changed = run_cli(
        "build", str(media / "build.yaml"), "--output", root, "--version", "v3", "--set", "seed=9", *flags
    )
    assert changed.returncode == 2 and "different config or inputs" in changed.stderr

    index = run_cli("index", root, *flags)
    assert index.returncode == 0 and "4 ok" in index.stdout, index.stdout + index.stderr
    inspect = run_cli("inspect", root, "--head", "1", *flags)
    assert inspect.returncode == 0 and "12 records" in inspect.stdout, inspect.stdout + inspect.stderr


@pytest.mark.parametrize("store", ["conditional-put", "last-writer-wins"])
def test_two_runs_claiming_one_s3_version_at_once_only_one_wins(s3_fs, s3_bucket, monkeypatch, store):
    """versitygw (like S3) refuses a conditional PUT (``If-None-Match: *``) of a marker
    that exists: one run wins at once, without the second's wait (the wait is made an
    hour here: a claim that waited would not finish). A store that ignores the
    condition - stood in for by skipping the conditional PUT - falls back to: each run
    writes the marker, waits, reads it back, and only the run whose id is there goes on."""
    import threading

    if store == "conditional-put":
        monkeypatch.setattr(dataset_writer, "CLAIM_SETTLE_S", 3600.0)
    else:
        monkeypatch.setattr(files, "_s3_put_if_absent", lambda path, data: None)
    version_dir = s3_bucket + f"/ds-{store}/v1"
    claims = [dataset_writer.BuildClaim(version_dir) for _ in range(2)]
    outcomes = {}

    def claim(i):
        try:
            claims[i].acquire()
            outcomes[i] = "won"
        except dataset_writer.VersionTaken as err:
            outcomes[i] = str(err)

    threads = [threading.Thread(target=claim, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a claim waited (or hung)"
    assert sorted(o == "won" for o in outcomes.values()) == [False, True], outcomes
    winner = next(i for i, o in outcomes.items() if o == "won")
    assert "being built by another run" in outcomes[1 - winner]
    assert dataset_writer.read_marker(version_dir)["run_id"] == claims[winner].run_id
    claims[winner].release()
    assert dataset_writer.read_marker(version_dir) is None


def test_put_if_absent_on_s3_is_refused_once_the_object_exists(s3_fs, s3_bucket):
    path = s3_bucket + "/exclusive/marker"
    assert files.put_if_absent(path, b"first") is True
    assert files.put_if_absent(path, b"second") is False
    assert files.read_bytes(path) == b"first"


def test_a_claim_whose_put_response_was_lost_is_still_this_runs(s3_fs, s3_bucket):
    """The conditional PUT of the marker lands but its response is cut off; boto3 sends
    it again and that one is refused (the marker exists): the marker names this run, so
    the claim is this run's, not "taken by another run"."""
    from tests.s3support import CuttingProxy

    # the first connection's response breaks off after "HTTP/1.1 100 Continue" (25 bytes)
    # and 5 of the final status line: the PUT has run, the client sees no answer
    proxy = CuttingProxy(s3_fs, cut_after=30, cuts=1)
    args = [a for a in s3_fs.pipeline_args() if not a.startswith("--s3_endpoint_url")]
    FileSystems.set_options(PipelineOptions([*args, f"--s3_endpoint_url={proxy.endpoint}"]))
    version_dir = s3_bucket + "/lost-response/v1"
    claim = dataset_writer.BuildClaim(version_dir)
    try:
        claim.acquire()
        assert proxy.connections >= 2  # the response was cut and the PUT sent again
        assert dataset_writer.read_marker(version_dir)["run_id"] == claim.run_id
    finally:
        claim.release()
        FileSystems.set_options(PipelineOptions(s3_fs.pipeline_args()))
        proxy.close()


def test_put_if_absent_raises_a_failed_conditional_put_instead_of_writing_plainly(s3_fs, s3_bucket):
    """A failure other than "it exists" / "no conditions here" is raised: a plain write
    after it could replace a marker another run has just created with the store's
    promise (here: the store refuses the credentials)."""
    path = s3_bucket + "/exclusive/refused"
    wrong = [a for a in s3_fs.pipeline_args() if not a.startswith("--s3_secret")] + ["--s3_secret_access_key=wrong"]
    FileSystems.set_options(PipelineOptions(wrong))
    try:
        # the conditional PUT's own error: no plain write (an upload through Beam) after it
        with pytest.raises(Exception, match="when calling the PutObject operation"):
            files.put_if_absent(path, b"data")
    finally:
        FileSystems.set_options(PipelineOptions(s3_fs.pipeline_args()))
    assert not files.exists(path)


def test_muting_beams_log_from_two_threads_restores_logging():
    """The S3 marker writes mute Beam's log from the main thread and the heartbeat thread at
    once; however their enters and exits interleave, logging is back as it was after both
    (a per-thread save/restore left it disabled for the whole process)."""
    import logging

    from tfrecord_io.dataset.dataset_writer import _BeamLogsMuted

    before = logging.root.manager.disable
    a, b = _BeamLogsMuted(), _BeamLogsMuted()
    a.__enter__()
    b.__enter__()
    assert logging.root.manager.disable == logging.CRITICAL
    a.__exit__(None, None, None)
    assert logging.root.manager.disable == logging.CRITICAL  # b still writing
    b.__exit__(None, None, None)
    assert logging.root.manager.disable == before
