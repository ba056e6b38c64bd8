"""One boto3 S3 client per process and S3 options under Beam's S3 filesystem
(tfrecord_io/storage/s3_clients.py), against a real S3 server (versitygw): calls share it,
open files keep their own download streams, other options and forked processes get
clients of their own, and a Beam wrapper that keeps more than plain values is left alone."""

from __future__ import annotations

import os
import threading
from typing import List

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

from tfrecord_io.storage import files, s3_clients, storage_retry


def _made_and_shared():
    return s3_clients.STATS["made"], s3_clients.STATS["shared"]


def test_calls_through_beams_filesystems_share_one_client(s3_server, s3_bucket, s3_options):
    """40 opens, sizes, lookups, listings, writes and deletes: at most one client made by
    Beam (none if this process already has one for these options), the rest shared."""
    payloads = {f"{s3_bucket}/obj-{i}": os.urandom(1000 + i) for i in range(8)}
    files.beam_filesystems()  # installs the sharing, as every use of remote paths does
    made, shared = _made_and_shared()
    for url, data in payloads.items():
        files.write_bytes(url, data)
    for url, data in payloads.items():
        assert files.exists(url) and files.file_size(url) == len(data) and files.read_bytes(url) == data
    assert files.glob(s3_bucket + "/obj-*") == sorted(payloads)
    files.delete(list(payloads))
    assert files.glob(s3_bucket + "/obj-*") == []
    made_now, shared_now = _made_and_shared()
    assert made_now - made <= 1, (made, made_now)
    assert shared_now - shared >= 40, (shared, shared_now)


def test_open_files_keep_their_own_download_streams(s3_server, s3_bucket, s3_options):
    """Reads of two objects interleaved chunk by chunk, and in threads at once, give each
    object's bytes: the shared client does not share one file's position with another."""
    a, b = os.urandom(3 << 20), os.urandom(3 << 20)
    files.write_bytes(s3_bucket + "/a", a)
    files.write_bytes(s3_bucket + "/b", b)
    with files.open_raw(s3_bucket + "/a") as fa, files.open_raw(s3_bucket + "/b") as fb:
        got_a, got_b = [], []
        for _ in range(6):
            got_a.append(fa.read(1 << 19))
            got_b.append(fb.read(1 << 19))
        fa.seek(100)
        assert fa.read(10) == a[100:110]
    assert b"".join(got_a) == a and b"".join(got_b) == b
    results = {}

    def read(name):
        results[name] = [files.read_bytes(f"{s3_bucket}/{name}") for _ in range(3)]

    threads = [threading.Thread(target=read, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert results == {"a": [a] * 3, "b": [b] * 3}


def test_other_options_get_another_client(s3_server, s3_bucket, s3_options):
    """A wrong secret is its own client, refused by the server (not the right secret's
    client used quietly), and the right options still work after it."""
    from apache_beam.io.aws.s3filesystem import S3FileSystem

    files.write_bytes(s3_bucket + "/x", b"x")
    wrong = [a for a in s3_server.pipeline_args() if not a.startswith("--s3_secret")] + ["--s3_secret_access_key=no"]
    made, _ = _made_and_shared()
    with pytest.raises(Exception, match="(?i)signature|denied|403"):
        S3FileSystem(PipelineOptions(wrong)).size(s3_bucket + "/x")
    assert _made_and_shared()[0] == made + 1
    assert files.read_bytes(s3_bucket + "/x") == b"x"


def test_credentials_from_the_environment_are_part_of_the_key(s3_server, s3_bucket, monkeypatch):
    """Options without credentials: boto3 takes them from the AWS_* environment when it
    makes a client. A client made without them is not used once they are set (it would
    fail with "Unable to locate credentials"), nor the other way round."""
    from apache_beam.io.aws.s3filesystem import S3FileSystem

    s3_server.client().put_object(Bucket=s3_bucket[len("s3://") :], Key="e", Body=b"env")
    bare = PipelineOptions([f"--s3_endpoint_url={s3_server.endpoint}", "--s3_disable_ssl"])
    files.beam_filesystems()
    for key in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    storage_retry.set_storage_timeout(3)  # Beam retries "Unable to locate credentials" like a server error
    try:
        with pytest.raises(Exception, match="(?i)unable to locate credentials"):
            S3FileSystem(bare).size(s3_bucket + "/e")
    finally:
        storage_retry.set_storage_timeout(None)
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    assert S3FileSystem(bare).size(s3_bucket + "/e") == 3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_forked_process_makes_its_own_client(s3_server, s3_bucket, s3_options):
    """A forked worker never uses its parent's client (connections are not shared
    between processes): its first call makes one of its own."""
    files.write_bytes(s3_bucket + "/f", b"forked")
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            made, _ = _made_and_shared()
            ok = files.read_bytes(s3_bucket + "/f") == b"forked"
            os.write(write_fd, f"{int(ok)} {_made_and_shared()[0] - made}".encode())
        finally:
            os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        report = f.read()
    os.waitpid(pid, 0)
    assert report == "1 1", report


def test_a_wrapper_that_keeps_more_than_plain_values_is_not_shared():
    """Where Beam's constructor sets up anything but the client and plain values, every
    wrapper is made by Beam's constructor (nothing is copied between them)."""

    class Wrapper:
        def __init__(self, options):
            self.client = object()
            self.pending = []  # per-wrapper mutable state: must not be shared

    made = []
    original = Wrapper.__init__

    def counted(self, options):
        made.append(1)
        original(self, options)

    Wrapper.__init__ = s3_clients._sharing_init(counted)  # type: ignore[method-assign]
    saved = s3_clients._not_shareable
    try:
        first, second = Wrapper({"s3_endpoint_url": "http://x"}), Wrapper({"s3_endpoint_url": "http://x"})
        assert len(made) == 2 and first.pending is not second.pending and first.client is not second.client
    finally:
        s3_clients._not_shareable = saved


def _operations(url: str) -> List[str]:
    """The S3 operations the shared client of ``url``'s options sends from now on."""
    from apache_beam.io.aws import s3io

    options = files.beam_filesystems().get_filesystem(url)._options
    client = s3io.S3IO(options=options).client.client
    sent: List[str] = []
    client.meta.events.register("before-call.s3", lambda model, **_: sent.append(model.name))
    return sent


def test_a_whole_object_is_read_with_one_get(s3_server, s3_bucket, s3_options):
    """``files.read_bytes`` of an object is one GetObject (Beam's open is a HeadObject and
    then ranged GETs); with ``max_bytes`` one ranged GET of at most ``max_bytes + 1``
    bytes. A missing or empty object falls back to Beam's open, which says what is wrong
    as before (and an empty object reads as empty)."""
    data = os.urandom(30_000)
    url = f"{s3_bucket}/photo.jpg"
    files.write_bytes(url, data)
    files.write_bytes(f"{s3_bucket}/empty", b"")
    sent = _operations(url)
    assert files.read_bytes(url) == data
    assert sent == ["GetObject"], sent
    sent.clear()
    assert files.read_bytes(url, max_bytes=999) == data[:1000]
    assert sent == ["GetObject"], sent
    assert files.read_bytes(f"{s3_bucket}/empty") == b""
    with pytest.raises(FileNotFoundError, match="no-such-object"):
        files.read_bytes(f"{s3_bucket}/no-such-object")
