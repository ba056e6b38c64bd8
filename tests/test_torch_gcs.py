"""The torch datasets over ``gs://`` objects on the GCS emulator (fake-gcs-server,
tests/gcs_support.py), read by ``tfrecord_io.format.remote_reader`` through google-cloud-storage:
range reads with read-ahead, each object read once per epoch (counted in the reader's
requests and bytes), every read pinned to the generation the object had when listed
(a replacement, even by the very same bytes, is an error naming it), global shuffle,
forked DataLoader workers."""

from __future__ import annotations

import os
import warnings

import pytest

pytest.importorskip("torch")
pytest.importorskip("google.cloud.storage")

from torch.utils.data import DataLoader

from tfrecord_io.format import remote_reader
from tfrecord_io.format.remote_reader import STATS, RemoteObjectChangedError
from tfrecord_io.storage import range_reads
from tfrecord_io.torch import TFRecordBatchDataset, TFRecordDataset

from tests.torch_data import write_examples

pytestmark = [pytest.mark.gcs, pytest.mark.filterwarnings("ignore:This DataLoader will create")]

SIZES = (90, 60, 75)
TOTAL = sum(SIZES)
BLOCK = 4096
REQUEST = 4 * BLOCK


@pytest.fixture
def remote(gcs_env, gcs_bucket, tmp_path):
    """Three indexed files uploaded to a fresh bucket: (local paths, gs urls, bucket)."""
    client = gcs_env.client()
    bucket = client.bucket(gcs_bucket[len("gs://") :])
    local, urls, first = [], [], 0
    for k, n in enumerate(SIZES):
        path = str(tmp_path / f"r-{k}.tfrecord")
        write_examples(path, range(first, first + n), index=True, seed=k)
        first += n
        for suffix in ("", ".index"):
            bucket.blob(f"data/r-{k}.tfrecord{suffix}").upload_from_filename(path + suffix)
        local.append(path)
        urls.append(f"{gcs_bucket}/data/r-{k}.tfrecord")
    remote_reader.configure(block_size=BLOCK, request_size=REQUEST, parallel=4, cache_dir="", cache_bytes=0)
    STATS.reset()
    try:
        yield local, urls, bucket
    finally:
        remote_reader.configure(
            block_size=remote_reader.DEFAULT_BLOCK_SIZE,
            request_size=remote_reader.DEFAULT_REQUEST_SIZE,
            random_parallel=remote_reader.DEFAULT_RANDOM_PARALLEL,
            cache_dir="",
            cache_bytes=0,
        )


def ids(ds, workers=0, batch_size=None):
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(ds, batch_size=batch_size, num_workers=workers)
        return [int(i) for b in loader for i in np.asarray(b["id"]).reshape(-1)]


def test_stat_pins_the_generation(remote):
    local, urls, bucket = remote
    obj = remote_reader.stat(urls[0])
    blob = bucket.get_blob("data/r-0.tfrecord")
    assert (obj.size, obj.etag) == (os.path.getsize(local[0]), str(blob.generation))
    want = open(local[0], "rb").read()
    assert bytes(remote_reader.read_range(obj, 10, 5000)) == want[10:5000]
    with pytest.raises(FileNotFoundError):
        remote_reader.stat(urls[0] + ".missing")


@pytest.mark.parametrize("index", ["auto", None])
def test_reads_each_object_once_per_epoch(remote, index):
    local, urls, _ = remote
    sizes = [os.path.getsize(p) for p in local]
    ds = TFRecordDataset(urls, index, ["id"])
    ds.files()  # described: objects stat'ed, indexes read
    assert set(ds._objects) == set(urls)  # pinned by the range reader, not read through Beam
    STATS.reset()
    assert ids(ds) == list(range(TOTAL))
    assert STATS.bytes == sum(sizes)  # every byte once, none twice
    assert STATS.requests >= sum(-(-s // BLOCK) for s in sizes) - len(sizes)  # ranged GETs, not whole objects


def test_batches_from_gcs_equal_local_batches_with_workers(remote):
    """Two forked DataLoader workers: each makes its own client and reads its share."""
    local, urls, _ = remote
    kw = dict(batch_size=16, shuffle_queue_size=20, shuffle_files=True, seed=4)
    a = ids(TFRecordBatchDataset(local, "auto", {"id": "int"}, **kw), workers=2)
    b = ids(TFRecordBatchDataset(urls, "auto", {"id": "int"}, **kw), workers=2)
    assert a == b and sorted(a) == list(range(TOTAL))


def test_global_shuffle_from_gcs_reads_each_record_once(remote):
    local, urls, _ = remote
    kw = dict(shuffle="global", seed=8, global_window=32)
    want = ids(TFRecordDataset(local, "auto", ["id"], **kw))
    ds = TFRecordDataset(urls, "auto", ["id"], **kw)
    ds.files()
    STATS.reset()
    got = ids(ds)
    assert got == want and sorted(got) == list(range(TOTAL))
    assert STATS.bytes == sum(os.path.getsize(p) for p in local)


def test_an_object_replaced_by_the_same_bytes_is_an_error_naming_it(remote):
    """The same size and even the same bytes, uploaded again: a new generation. Neither
    the size nor the records' CRCs can tell; the generation pin does."""
    local, urls, bucket = remote
    ds = TFRecordDataset(urls, "auto", ["id"])
    it = iter(ds)
    [next(it) for _ in range(5)]  # objects listed and pinned, reading begun
    bucket.blob("data/r-1.tfrecord").upload_from_filename(local[1])
    with pytest.raises(RemoteObjectChangedError, match="changed after it was listed") as err:
        list(it)
    assert urls[1] in str(err.value)


def test_an_object_deleted_after_listing_is_an_error_naming_it(remote):
    local, urls, bucket = remote
    obj = remote_reader.stat(urls[2])
    bucket.blob("data/r-2.tfrecord").delete()
    with pytest.raises(RemoteObjectChangedError) as err:
        remote_reader.read_range(obj, 0, 100)
    assert urls[2] in str(err.value)


def test_fetch_many_and_the_cache_on_gcs(remote, tmp_path, monkeypatch):
    local, urls, _ = remote
    obj = remote_reader.stat(urls[1])
    want = open(local[1], "rb").read()
    ranges = [(obj, a, min(a + 1000, obj.size)) for a in range(0, obj.size, 1000)]
    STATS.reset()
    got = remote_reader.fetch_many(ranges)
    assert [bytes(v) for v in got] == [want[a:b] for _, a, b in ranges]
    assert STATS.requests == len(ranges) and STATS.bytes == obj.size
    monkeypatch.setattr(range_reads, "CACHE_CHUNK", 4096)
    remote_reader.configure(cache_dir=str(tmp_path / "cache"), cache_bytes=1 << 20)
    STATS.reset()
    assert bytes(remote_reader.read_range(obj, 0, obj.size)) == want
    assert bytes(remote_reader.read_range(obj, 100, 9000)) == want[100:9000]
    assert STATS.bytes == obj.size and STATS.cache_hits >= 3  # the second read from the cache
