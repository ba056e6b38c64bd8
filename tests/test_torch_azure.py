"""The torch datasets over ``azfs://`` blobs on Azurite (tests/azure_support.py), read by
``tfrecord_io.format.remote_reader`` through azure-storage-blob: range reads with read-ahead,
each blob read once per epoch, every read pinned to the ETag the blob had when listed
(``If-Match``): a blob replaced by other bytes of the same size is an error naming it."""

from __future__ import annotations

import os
import warnings

import pytest

pytest.importorskip("torch")
pytest.importorskip("azure.storage.blob")

from torch.utils.data import DataLoader

from tfrecord_io.errors import StorageAccessError
from tfrecord_io.format import remote_reader
from tfrecord_io.format.remote_reader import STATS, RemoteObjectChangedError
from tfrecord_io.torch import TFRecordBatchDataset, TFRecordDataset

from tests.torch_data import write_examples

pytestmark = [pytest.mark.azure, pytest.mark.filterwarnings("ignore:This DataLoader will create")]

SIZES = (90, 60, 75)
TOTAL = sum(SIZES)
BLOCK = 4096
REQUEST = 4 * BLOCK


@pytest.fixture
def remote(azurite, tmp_path, monkeypatch):
    """Three indexed files uploaded to a fresh container: (local paths, azfs urls, container client)."""
    for key, value in azurite.env().items():
        monkeypatch.setenv(key, value)
    name = azurite.make_container()
    container = azurite.client().get_container_client(name)
    local, urls, first = [], [], 0
    for k, n in enumerate(SIZES):
        path = str(tmp_path / f"r-{k}.tfrecord")
        write_examples(path, range(first, first + n), index=True, seed=k)
        first += n
        for suffix in ("", ".index"):
            with open(path + suffix, "rb") as f:
                container.upload_blob(f"data/r-{k}.tfrecord{suffix}", f)
        local.append(path)
        urls.append(azurite.url(name, f"data/r-{k}.tfrecord"))
    remote_reader.configure(block_size=BLOCK, request_size=REQUEST, parallel=4, cache_dir="", cache_bytes=0)
    STATS.reset()
    try:
        yield local, urls, container
    finally:
        remote_reader.configure(
            block_size=remote_reader.DEFAULT_BLOCK_SIZE,
            request_size=remote_reader.DEFAULT_REQUEST_SIZE,
            random_parallel=remote_reader.DEFAULT_RANDOM_PARALLEL,
        )


def ids(ds, workers=0):
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(ds, batch_size=None, num_workers=workers)
        return [int(i) for b in loader for i in np.asarray(b["id"]).reshape(-1)]


def test_stat_pins_the_etag_and_a_missing_blob_or_container_is_named(remote):
    local, urls, container = remote
    obj = remote_reader.stat(urls[0])
    props = container.get_blob_client("data/r-0.tfrecord").get_blob_properties()
    assert (obj.size, obj.etag) == (os.path.getsize(local[0]), props.etag)
    assert bytes(remote_reader.read_range(obj, 10, 5000)) == open(local[0], "rb").read()[10:5000]
    with pytest.raises(FileNotFoundError):
        remote_reader.stat(urls[0] + ".missing")
    other = urls[0].replace(container.container_name, "no-such-container")
    with pytest.raises(StorageAccessError, match="no such container"):
        remote_reader.stat(other)


def test_reads_each_blob_once_per_epoch_also_in_workers(remote):
    local, urls, _ = remote
    sizes = [os.path.getsize(p) for p in local]
    ds = TFRecordDataset(urls, "auto", ["id"])
    ds.files()
    assert set(ds._objects) == set(urls)  # pinned by the range reader, not read through Beam
    STATS.reset()
    assert ids(ds) == list(range(TOTAL))
    assert STATS.bytes == sum(sizes)
    kw = dict(batch_size=16, shuffle_queue_size=20, shuffle_files=True, seed=4)
    a = ids(TFRecordBatchDataset(local, "auto", {"id": "int"}, **kw), workers=2)
    b = ids(TFRecordBatchDataset(urls, "auto", {"id": "int"}, **kw), workers=2)
    assert a == b and sorted(a) == list(range(TOTAL))


def test_a_blob_replaced_by_other_bytes_of_the_same_size_is_an_error_naming_it(remote):
    local, urls, container = remote
    ds = TFRecordDataset(urls, "auto", ["id"], shuffle="global", seed=2, global_window=16)
    it = iter(ds)
    [next(it) for _ in range(5)]  # listed and pinned, reading begun
    data = bytearray(open(local[1], "rb").read())
    data[-1] ^= 0xFF  # a CRC would tell too, but the If-Match refuses before any byte is read
    container.upload_blob("data/r-1.tfrecord", bytes(data), overwrite=True)
    with pytest.raises(RemoteObjectChangedError, match="changed after it was listed") as err:
        list(it)
    assert urls[1] in str(err.value)
