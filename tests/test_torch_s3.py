"""The torch datasets over ``s3://`` objects on a real S3 server (versitygw on
127.0.0.1): range requests with read-ahead, each object read once per epoch (counted
in the reader's requests and bytes), objects pinned to their listed ETag, the local
cache and its size cap, global shuffle and resume from object storage."""

from __future__ import annotations

import os
import pickle
import time
import warnings

import pytest
from torch.utils.data import DataLoader

from tfrecord_io.errors import TFRecordError
from tfrecord_io.format import remote_reader
from tfrecord_io.format.remote_reader import STATS, RemoteObjectChangedError
from tfrecord_io.storage import range_reads, remote_objects, s3_objects
from tfrecord_io.torch import MultiTFRecordDataset, TFRecordBatchDataset, TFRecordDataset

from tests.s3support import CuttingProxy, find_versitygw, start_versitygw
from tests.torch_data import write_examples

pytestmark = [pytest.mark.s3, pytest.mark.filterwarnings("ignore:This DataLoader will create")]

SIZES = (90, 60, 75)
TOTAL = sum(SIZES)
BLOCK = 4096  # bytes scanned at a time (small: many blocks per object)
REQUEST = 4 * BLOCK  # bytes per GET of a sequential read


@pytest.fixture
def remote(s3_server, s3_bucket, tmp_path, monkeypatch):
    """Three indexed files uploaded to a fresh bucket: (local paths, s3 urls, client)."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    FileSystems.set_options(PipelineOptions(s3_server.pipeline_args()))
    client = s3_server.client()
    bucket = s3_bucket[len("s3://") :]
    local, urls, first = [], [], 0
    for k, n in enumerate(SIZES):
        path = str(tmp_path / f"r-{k}.tfrecord")
        write_examples(path, range(first, first + n), index=True, seed=k)
        first += n
        for suffix in ("", ".index"):
            client.upload_file(path + suffix, bucket, f"data/r-{k}.tfrecord{suffix}")
        local.append(path)
        urls.append(f"{s3_bucket}/data/r-{k}.tfrecord")
    remote_reader.reset_client()  # a client made before the environment was set
    remote_reader.configure(block_size=BLOCK, request_size=REQUEST, parallel=4, cache_dir="", cache_bytes=0)
    STATS.reset()
    try:
        yield local, urls, client, bucket
    finally:
        remote_reader.configure(
            block_size=remote_reader.DEFAULT_BLOCK_SIZE,
            request_size=remote_reader.DEFAULT_REQUEST_SIZE,
            random_parallel=remote_reader.DEFAULT_RANDOM_PARALLEL,
            cache_dir="",
            cache_bytes=0,
        )
        FileSystems.set_options(PipelineOptions([]))


def ids(ds, workers=0, batch_size=None):
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(ds, batch_size=batch_size, num_workers=workers)
        return [int(i) for b in loader for i in np.asarray(b["id"]).reshape(-1)]


@pytest.mark.parametrize("index", ["auto", None])
def test_reads_each_object_once_per_epoch(remote, index):
    local, urls, _, _ = remote
    sizes = [os.path.getsize(p) for p in local]
    ds = TFRecordDataset(urls, index, ["id"])
    ds.files()  # described: objects stat'ed, indexes read
    STATS.reset()
    assert ids(ds) == list(range(TOTAL))
    assert STATS.bytes == sum(sizes)  # every byte once, none twice
    # runs of blocks per GET: several GETs per object, fewer than one per block
    assert sum(-(-s // REQUEST) for s in sizes) <= STATS.requests < sum(-(-s // BLOCK) for s in sizes)
    # two ranks: still each byte once in total (indexed: pieces end at frame boundaries)
    if index == "auto":
        halves = [TFRecordDataset(urls, "auto", ["id"], rank=r, world_size=2) for r in range(2)]
        for h in halves:
            h.files()
        STATS.reset()
        both = ids(halves[0]) + ids(halves[1])
        assert sorted(both) == list(range(TOTAL))
        assert STATS.bytes == sum(sizes)


def test_batches_from_s3_equal_local_batches_with_workers(remote):
    local, urls, _, _ = remote
    kw = dict(batch_size=16, shuffle_queue_size=20, shuffle_files=True, seed=4)
    a = ids(TFRecordBatchDataset(local, "auto", {"id": "int"}, **kw), workers=2)
    b = ids(TFRecordBatchDataset(urls, "auto", {"id": "int"}, **kw), workers=2)
    assert a == b and sorted(a) == list(range(TOTAL))


def test_global_shuffle_from_s3_reads_each_record_once(remote):
    local, urls, _, _ = remote
    kw = dict(shuffle="global", seed=8, global_window=32)
    want = ids(TFRecordDataset(local, "auto", ["id"], **kw))
    ds = TFRecordDataset(urls, "auto", ["id"], **kw)
    ds.files()
    STATS.reset()
    got = ids(ds)
    assert got == want and sorted(got) == list(range(TOTAL))
    assert STATS.bytes == sum(os.path.getsize(p) for p in local)


def test_resume_from_s3_reads_only_the_rest(remote):
    local, urls, _, _ = remote
    ds = TFRecordDataset(urls, "auto", ["id"], seed=1)
    it = iter(ds)
    head = [int(next(it)["id"][0]) for _ in range(120)]
    state = pickle.loads(pickle.dumps(ds.state_dict()))
    rest = [int(r["id"][0]) for r in it]
    again = TFRecordDataset(urls, "auto", ["id"], seed=1)
    again.load_state_dict(state)  # describes the objects (to check the state against them)
    STATS.reset()
    assert [int(r["id"][0]) for r in again] == rest
    assert head + rest == list(range(TOTAL))
    from tfrecord_io.format.index import load_index

    idx = [load_index(p + ".index") for p in local]
    # record 120 is record 30 of the second file: the restored run starts there
    skipped = os.path.getsize(local[0]) + int(idx[1].offsets[30])
    assert STATS.bytes == sum(os.path.getsize(p) for p in local) - skipped


def test_an_object_changed_after_listing_is_an_error_naming_it(remote):
    local, urls, client, bucket = remote
    ds = TFRecordDataset(urls, "auto", ["id"])
    it = iter(ds)
    [next(it) for _ in range(5)]  # objects listed and pinned, reading begun
    # same size, other bytes: only the ETag tells
    data = bytearray(open(local[1], "rb").read())
    data[100] ^= 0xFF
    client.put_object(Bucket=bucket, Key="data/r-1.tfrecord", Body=bytes(data))
    with pytest.raises(RemoteObjectChangedError, match="changed after it was listed") as err:
        list(it)
    assert urls[1] in str(err.value)


def test_a_multi_dataset_reads_objects_pinned_to_the_versions_given(remote):
    """``MultiTFRecordDataset`` over ``s3://`` splits: the records of the local files, in
    the same order; ``remote_objects`` pins the objects to the versions stat'ed when they
    were listed, and an object rewritten since (same size) is refused, named, when the
    dataset describes it."""
    local, urls, client, bucket = remote
    kw = dict(splits={"a": 0.5, "b": 0.5}, description=["id"], infinite=False, seed=3, shuffle_queue_size=8)
    want = ids(MultiTFRecordDataset({"a": local[:2], "b": local[2:]}, "auto", **kw))
    listed = {u: remote_reader.stat(u) for u in urls}
    ds = MultiTFRecordDataset({"a": urls[:2], "b": urls[2:]}, "auto", remote_objects=listed, **kw)
    assert ids(ds) == want and sorted(want) == list(range(TOTAL))
    data = bytearray(open(local[1], "rb").read())
    data[100] ^= 0xFF
    client.put_object(Bucket=bucket, Key="data/r-1.tfrecord", Body=bytes(data))
    changed = MultiTFRecordDataset({"a": urls[:2], "b": urls[2:]}, "auto", remote_objects=listed, **kw)
    with pytest.raises(RemoteObjectChangedError, match="changed after it was listed") as err:
        changed.sources()
    assert urls[1] in str(err.value)


def test_a_size_that_differs_from_the_listing_is_an_error(remote):
    _, urls, _, _ = remote
    with pytest.raises(RemoteObjectChangedError, match="had 5 bytes"):
        remote_reader.stat(urls[0], listed_size=5)


def test_a_state_refers_to_the_object_versions(remote):
    local, urls, client, bucket = remote
    ds = TFRecordDataset(urls, "auto", ["id"], seed=1)
    it = iter(ds)
    next(it)
    state = ds.state_dict()
    data = bytearray(open(local[2], "rb").read())
    data[50] ^= 0xFF
    client.put_object(Bucket=bucket, Key="data/r-2.tfrecord", Body=bytes(data))
    from tfrecord_io.torch import StateError

    with pytest.raises(StateError, match="object versions"):
        TFRecordDataset(urls, "auto", ["id"], seed=1).load_state_dict(state)


def test_the_cache_serves_a_second_epoch_and_keeps_its_cap(remote, tmp_path, monkeypatch):
    local, urls, _, _ = remote
    monkeypatch.setattr(range_reads, "CACHE_CHUNK", 4096)
    cache = str(tmp_path / "cache")
    total = sum(os.path.getsize(p) for p in local)
    remote_reader.configure(cache_dir=cache, cache_bytes=10 * total)
    ds = TFRecordDataset(urls, "auto", ["id"])
    ds.files()
    STATS.reset()
    assert ids(ds) == list(range(TOTAL))
    assert total <= STATS.bytes < total + 8 * 4096  # whole chunks, a few fetched twice at most
    STATS.reset()
    assert ids(ds) == list(range(TOTAL))
    assert STATS.bytes == 0 and STATS.requests == 0  # the second epoch: all from the cache
    assert STATS.cache_bytes == total  # each byte once from the cache (not whole chunks per read)

    def used():
        return sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(cache) for n in ns)

    remote_reader.configure(cache_bytes=3 * 4096)
    ids(ds)
    assert 0 < used() <= 3 * 4096


def test_compressed_objects_read_and_resume(remote, tmp_path):
    _, _, client, bucket = remote
    path = str(tmp_path / "z.tfrecord.gz")
    write_examples(path, range(120), compression="gzip")
    client.upload_file(path, bucket, "data/z.tfrecord.gz")
    url = f"s3://{bucket}/data/z.tfrecord.gz"
    ds = TFRecordDataset(url, None, ["id"], shuffle_queue_size=8, seed=3)
    whole = [int(r["id"][0]) for r in ds]
    assert sorted(whole) == list(range(120))
    it = iter(ds)
    head = [int(next(it)["id"][0]) for _ in range(50)]
    state = pickle.loads(pickle.dumps(ds.state_dict()))
    again = TFRecordDataset(url, None, ["id"], shuffle_queue_size=8, seed=3)
    again.load_state_dict(state)
    assert head + [int(r["id"][0]) for r in again] == whole


def test_receive_buffers_are_reused_only_when_no_view_is_alive(remote, monkeypatch):
    """Views kept by the caller keep their buffer; dropped ones let it be reused. A
    record-sized read gets a buffer of its own size (a global-shuffle window holds a
    thousand of them: pooled block-sized buffers would take gigabytes)."""
    local, urls, _, _ = remote
    obj = remote_reader.stat(urls[1])
    small = remote_reader.read_range(obj, 0, 1000)
    assert len(small.obj) == 1000
    monkeypatch.setattr(range_reads, "POOLED_MIN", 0)  # pool these small test reads
    want = open(local[1], "rb").read()
    ranges = [(a, min(a + 1000, obj.size)) for a in range(0, obj.size, 1000)]
    kept = list(remote_reader.fetch_ahead(obj, ranges))  # every view alive at once
    assert b"".join(bytes(v) for v in kept) == want
    del kept
    pool = range_reads._BUFFERS
    before = [id(b) for b in pool._buffers]
    for view in remote_reader.fetch_ahead(obj, ranges):  # each view dropped before the next is used
        assert len(view) > 0
    assert [id(b) for b in pool._buffers][: len(before)] == before
    assert len(pool._buffers) <= pool.limit


def test_from_dataset_on_s3_global_shuffle_and_resume(remote, tmp_path):
    """A built dataset on S3: shards described by the range reader (no Beam client per
    shard), read once, globally shuffled, resumed."""
    from tfrecord_io.torch import from_dataset

    from tests.torch_data import build_tiny_dataset

    _, _, client, bucket = remote
    (tmp_path / "built").mkdir()
    root = build_tiny_dataset(str(tmp_path / "built"))
    for dirpath, _, names in os.walk(root):
        for name in names:
            local = os.path.join(dirpath, name)
            client.upload_file(local, bucket, "ds/" + os.path.relpath(local, root))
    url = f"s3://{bucket}/ds"
    kw = dict(batch_size=8, features=["n"], shuffle="global", seed=4)
    ds = from_dataset(url, "train[10%:]", **kw)
    assert set(ds._objects) == {f.path for f in ds.selection.files}  # pinned when selected
    STATS.reset()
    it = iter(ds)
    head = [int(v) for _ in range(3) for v in next(it)["n"]]
    state = pickle.loads(pickle.dumps(ds.state_dict()))
    rest = [int(v) for b in it for v in b["n"]]
    assert len(set(head + rest)) == len(head + rest) == ds.selection.count
    again = from_dataset(url, "train[10%:]", **kw)
    again.load_state_dict(state)
    assert [int(v) for b in again for v in b["n"]] == rest


def _through(endpoint, monkeypatch, server):
    """Send this process's range GETs to ``endpoint`` (a proxy in front of ``server``)
    from now on: the environment, and the Beam flags (which win when given)."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    flags = [a for a in server.pipeline_args() if not a.startswith("--s3_endpoint_url=")]
    FileSystems.set_options(PipelineOptions([*flags, f"--s3_endpoint_url={endpoint}"]))
    remote_reader.reset_client()


def test_a_response_broken_off_is_read_on_from_where_it_broke(remote, s3_server, monkeypatch):
    local, urls, _, _ = remote
    obj = remote_reader.stat(urls[0])
    want = open(local[0], "rb").read()
    remote_reader.configure(request_size=1 << 20)  # the whole object in one GET
    proxy = CuttingProxy(s3_server, cut_after=3000, cuts=2)  # the first two responses break off
    try:
        _through(proxy.endpoint, monkeypatch, s3_server)
        STATS.reset()
        ranges = [(a, min(a + BLOCK, obj.size)) for a in range(0, obj.size, BLOCK)]
        assert b"".join(bytes(v) for v in remote_reader.fetch_ahead(obj, ranges)) == want
        assert STATS.bytes == obj.size  # what arrived before a break is not asked for again
        assert STATS.requests == 3 == proxy.connections
    finally:
        proxy.close()


def test_a_server_that_keeps_breaking_off_is_an_error_naming_the_object(remote, s3_server, monkeypatch):
    _, urls, _, _ = remote
    obj = remote_reader.stat(urls[0])
    proxy = CuttingProxy(s3_server, cut_after=1, cuts=None)  # every response cut at its first byte
    try:
        _through(proxy.endpoint, monkeypatch, s3_server)
        with pytest.raises(TFRecordError, match="range read of bytes 0-99 failed") as err:
            remote_reader.read_range(obj, 0, 100)
        assert urls[0] in str(err.value)
        assert proxy.connections_for("GET /" + urls[0][len("s3://") :]) == remote_objects.TRIES, proxy.first_lines
    finally:
        proxy.close()


def test_throttling_is_retried_with_backoff_then_read(remote, s3_server, monkeypatch):
    local, urls, _, _ = remote
    want = open(local[0], "rb").read()
    proxy = CuttingProxy(s3_server)
    try:
        _through(proxy.endpoint, monkeypatch, s3_server)
        obj = remote_reader.stat(urls[0])  # presigned for the proxy's address
        proxy.connections, proxy.throttles = 0, remote_objects.TRIES - 1  # 503 SlowDown, then served
        began = time.monotonic()
        assert bytes(remote_reader.read_range(obj, 0, 100)) == want[:100]
        assert time.monotonic() - began >= 0.25  # backed off before asking again
        assert proxy.connections_for("GET /" + urls[0][len("s3://") :]) == remote_objects.TRIES, proxy.first_lines
    finally:
        proxy.close()


def test_throttling_that_lasts_is_an_error_after_the_tries(remote, s3_server, monkeypatch):
    _, urls, _, _ = remote
    proxy = CuttingProxy(s3_server)
    try:
        _through(proxy.endpoint, monkeypatch, s3_server)
        obj = remote_reader.stat(urls[0])
        proxy.connections, proxy.throttles = 0, 100
        with pytest.raises(TFRecordError, match="HTTP 503.*SlowDown") as err:
            remote_reader.read_range(obj, 0, 100)
        assert urls[0] in str(err.value)
        # the first try and the retries, no more
        assert proxy.connections_for("GET /" + urls[0][len("s3://") :]) == remote_objects.TRIES, proxy.first_lines
    finally:
        proxy.close()


def test_plain_range_gets_are_sent_by_the_standard_library(remote):
    """The fast path (``_StdlibGets``) is what sends a plain GET: urllib3, the path for
    retries and errors, sees none of them (~0.2 ms of CPU less per GET)."""
    local, urls, _, _ = remote
    want = open(local[1], "rb").read()
    obj = remote_reader.stat(urls[1])
    presigner = s3_objects._presigner()
    urllib3_gets = []
    original = presigner.get
    presigner.get = lambda *a, **kw: urllib3_gets.append(a) or original(*a, **kw)  # type: ignore[method-assign]
    try:
        for a in range(0, 5000, 1000):
            assert bytes(remote_reader.read_range(obj, a, a + 1000)) == want[a : a + 1000]
    finally:
        del presigner.get
    assert urllib3_gets == []  # (kept-alive connections: test_connections_are_kept_alive_unless_...)


def test_a_bucket_name_with_dots_is_read(remote, s3_server, tmp_path):
    """Dotted names are valid S3 bucket names that break TLS in virtual-hosted
    addresses (``a.b.s3.amazonaws.com`` does not match ``*.s3.amazonaws.com``); the
    addressing is botocore's (next test), the reads here go to the path it signed."""
    bucket = s3_server.make_bucket(f"t.dots.{os.urandom(3).hex()}")
    path = str(tmp_path / "d.tfrecord")
    write_examples(path, range(30), index=True, seed=3)
    for suffix in ("", ".index"):
        s3_server.client().upload_file(path + suffix, bucket, f"d.tfrecord{suffix}")
    url = f"s3://{bucket}/d.tfrecord"
    assert ids(TFRecordDataset(url, "auto")) == list(range(30))
    assert ids(TFRecordBatchDataset([url], "auto", batch_size=8, shuffle="global", seed=2), batch_size=None) != []


def test_presigned_urls_for_dotted_buckets_on_aws_are_path_style(monkeypatch):
    """On AWS's own endpoint over HTTPS, botocore signs a dotted bucket's GET in path
    style (host ``s3.<region>.amazonaws.com``, whose certificate matches), which is
    what ``_StdlibGets`` connects to. Presigning is local: nothing is sent."""
    for key in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    from urllib.parse import urlsplit

    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions([]))
    remote_reader.reset_client()
    try:
        signed = s3_objects._presign(remote_objects.RemoteObject("s3://my.dotted.bucket/a/b.tfrecord", 10, '"e"'))
        _, path, address = s3_objects._presigner().target(
            remote_objects.RemoteObject("s3://my.dotted.bucket/a/b.tfrecord", 10, '"e"')
        )
    finally:
        remote_reader.reset_client()
    parts = urlsplit(signed)
    assert parts.scheme == "https" and parts.hostname == "s3.eu-west-1.amazonaws.com"
    assert parts.path == "/my.dotted.bucket/a/b.tfrecord"
    assert address == ("https", "s3.eu-west-1.amazonaws.com", 443) and path.startswith(parts.path + "?")


def test_connections_are_kept_alive_unless_the_server_closes_them(remote, s3_server, tmp_path, monkeypatch):
    local, urls, _, _ = remote
    want = open(local[1], "rb").read()
    obj = remote_reader.stat(urls[1])
    ranges = [(obj, a, min(a + 1000, obj.size)) for a in range(0, 10_000, 1000)]
    # the session's server answers "Connection: close": a connection per GET
    proxy = CuttingProxy(s3_server)
    try:
        _through(proxy.endpoint, monkeypatch, s3_server)
        for o, a, b in ranges[:5]:
            assert bytes(remote_reader.read_range(o, a, b)) == want[a:b]
        assert proxy.connections == 5
    finally:
        proxy.close()
    # one that keeps them open (the same buckets, served by a second gateway): reused
    kept = start_versitygw(find_versitygw(), str(tmp_path), keep_alive=True, root=s3_server.root_dir)
    proxy = CuttingProxy(kept)
    try:
        for key, value in kept.env().items():
            monkeypatch.setenv(key, value)
        _through(proxy.endpoint, monkeypatch, kept)
        for o, a, b in ranges[:5]:
            assert bytes(remote_reader.read_range(o, a, b)) == want[a:b]
        assert proxy.connections == 1
        remote_reader.configure(random_parallel=2)
        got = remote_reader.fetch_many(ranges)  # two GETs at a time: one more connection at most
        assert [bytes(v) for v in got] == [want[a:b] for _, a, b in ranges]
        assert proxy.connections <= 2
        before = proxy.connections
        remote_reader.fetch_many(ranges)
        assert proxy.connections == before
    finally:
        proxy.close()
        kept.stop()


def test_a_reader_left_early_stops_its_threads(remote):
    import threading
    import time

    _, urls, _, _ = remote
    obj = remote_reader.stat(urls[0])

    def ahead_threads():
        return sum(t.name == "tfrecord-io-read-ahead" and t.is_alive() for t in threading.enumerate())

    before = ahead_threads()
    it = remote_reader.fetch_ahead(obj, [(a, min(a + 100, obj.size)) for a in range(0, obj.size, 100)])
    assert len(next(it)) == 100
    assert ahead_threads() > before
    it.close()  # with its producers waiting for room ahead of the consumer
    deadline = time.monotonic() + 10
    while ahead_threads() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ahead_threads() == before


def test_a_client_of_ones_own_reads_through_get_object(remote, s3_server, monkeypatch):
    """``configure(client_factory=...)``: every GET through that client's ``get_object``
    (botocore's whole pipeline, also what a proxy in the environment gets): the same
    checks, each byte once, a body cut twice read on from where it broke, a replaced
    object refused."""
    import boto3

    local, urls, client, bucket = remote
    want = open(local[0], "rb").read()
    proxy = CuttingProxy(s3_server, cut_after=3000, cuts=2)
    made = []

    def factory():
        made.append(1)
        return boto3.session.Session().client(
            "s3",
            endpoint_url=proxy.endpoint,
            aws_access_key_id=s3_server.access_key,
            aws_secret_access_key=s3_server.secret_key,
            region_name=s3_server.region,
            config=s3_objects._config(),
        )

    try:
        obj = remote_reader.stat(urls[0])  # (not through the proxy: its first connections are cut)
        remote_reader.configure(client_factory=factory, request_size=1 << 20)
        STATS.reset()
        ranges = [(a, min(a + BLOCK, obj.size)) for a in range(0, obj.size, BLOCK)]
        assert b"".join(bytes(v) for v in remote_reader.fetch_ahead(obj, ranges)) == want
        assert STATS.bytes == obj.size and STATS.requests == 3  # two cut bodies: the rest asked for twice
        assert made and not s3_objects._signed  # nothing presigned: get_object did it
        data = bytearray(open(local[0], "rb").read())
        data[100] ^= 0xFF
        client.put_object(Bucket=bucket, Key="data/r-0.tfrecord", Body=bytes(data))
        with pytest.raises(RemoteObjectChangedError, match="changed after it was listed") as err:
            remote_reader.read_range(obj, 0, 100)
        assert urls[0] in str(err.value)
    finally:
        remote_objects._settings.client_factory = None
        remote_reader.reset_client()
        proxy.close()
