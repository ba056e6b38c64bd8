"""Look-ups by key on ``s3://`` (versitygw) and ``gs://`` (fake-gcs-server) read each shard
and key index pinned to the version their first read got (``range_reads.PinOnFirstRead``):
an object replaced between two look-ups is a ``RemoteObjectChangedError`` naming it, not
a corrupt record or index. Every replacement below also changes bytes the next look-up
reads, so that, unpinned, the look-up would read across versions (and call it corrupt)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Tuple

import pytest

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.dataset.keyed_dataset import open_dataset
from tfrecord_io.format import remote_reader
from tfrecord_io.format.key_index import Entry, KeyIndexReader
from tfrecord_io.storage.remote_objects import RemoteObjectChangedError

from tests.pipeline_support import IN_PROCESS, cli_env, run_cli, write_rows_config, write_rows_manifest

#: rows enough for two key-index blocks per split (256 entries a block)
ROWS = 600
SPLIT = "train"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> str:
    """A keyed dataset (ids 0-599, two splits of two shards) built on local disk once."""
    tmp = tmp_path_factory.mktemp("pinned")
    out = str(tmp / "out")
    manifest, config = write_rows_config(tmp, "pinrows", out)
    write_rows_manifest(manifest, range(ROWS))
    run_cli("build", str(config), "--version", "v1", "--no-progress", *IN_PROCESS, check=True)
    return out


@dataclass
class Store:
    root: str  # the dataset's root on the store
    put: Callable[[str, bytes], None]  # (path under root, bytes): replace an object
    env: dict
    flags: Tuple[str, ...] = ()  # a command's Beam flags for the store


@pytest.fixture(
    params=[
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("gcs", marks=pytest.mark.gcs),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def store(request, built, tmp_path, monkeypatch) -> Store:
    """The built dataset uploaded to a fresh bucket of the store."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    if request.param == "s3":
        server = request.getfixturevalue("s3_server")
        request.getfixturevalue("s3_options")
        for name, value in server.env().items():
            monkeypatch.setenv(name, value)
        remote_reader.reset_client()  # a client made before the environment was set
        root = f"s3://{server.make_bucket()}/ds"
        client = server.client()

        def put(rel: str, data: bytes) -> None:
            bucket, _, prefix = root[len("s3://") :].partition("/")
            client.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=data)

    elif request.param == "azure":  # the credentials as a flag only: what Beam's reads take, look-ups too
        server = request.getfixturevalue("azurite")
        monkeypatch.delenv("AZURE_STORAGE_CONNECTION_STRING", raising=False)
        FileSystems.set_options(PipelineOptions(server.pipeline_args()))
        container = server.make_container()
        root = server.url(container, "ds")
        service = server.client()

        def put(rel: str, data: bytes) -> None:
            service.get_blob_client(container, f"ds/{rel}").upload_blob(data, overwrite=True)

        for folder, _, names in os.walk(built):
            for name in names:
                with open(os.path.join(folder, name), "rb") as f:
                    put(os.path.relpath(os.path.join(folder, name), built), f.read())
        return Store(root, put, {}, tuple(server.pipeline_args()))
    else:
        server = request.getfixturevalue("gcs_env")
        FileSystems.set_options(PipelineOptions([]))
        root = f"gs://{server.make_bucket()}/ds"

        def put(rel: str, data: bytes) -> None:
            bucket, _, prefix = root[len("gs://") :].partition("/")
            server.client().bucket(bucket).blob(f"{prefix}/{rel}").upload_from_string(data)

    server.upload_tree(built, root)
    return Store(root, put, server.env())


def _keys(built: str) -> Tuple[Entry, Entry, Entry, str, str]:
    """Of the split's key index (read locally): ``a``, the first entry of its first block;
    ``b``, the last entry of its last block; ``c``, another entry of ``a``'s block in
    ``a``'s shard; the index's and that shard's paths under the root."""
    info = dataset_writer.load_info(os.path.join(built, "v1"))
    entry = info["splits"][SPLIT]
    index = f"v1/{entry['key_index']['path']}"
    with KeyIndexReader(os.path.join(built, index)) as reader:
        assert reader.blocks >= 2, reader.blocks
        first, last = reader.block(0), reader.block(reader.blocks - 1)
        a, b = first.entry(0), last.entry(len(last) - 1)
        c = next(first.entry(i) for i in range(1, len(first)) if first.entry(i).shard == a.shard)
    return a, b, c, index, f"v1/{entry['shards'][a.shard]['path']}"


def _changed(data: bytes, at: int, same_size: bool) -> bytes:
    """``data`` with the byte at ``at`` flipped, and 16 bytes more unless ``same_size``."""
    out = bytearray(data)
    out[at] ^= 0xFF
    return bytes(out) + (b"" if same_size else b"\0" * 16)


@pytest.mark.parametrize("same_size", [True, False], ids=["same-size", "other-size"])
def test_a_shard_replaced_between_lookups_is_an_error_naming_it(built, store, same_size):
    a, _, c, _, shard = _keys(built)
    with open_dataset(store.root) as ds:
        assert ds.get(a.key)["id"].tolist() == [int(a.key)]  # the shard pinned by this read
        with open(os.path.join(built, shard), "rb") as f:
            data = f.read()
        store.put(shard, _changed(data, c.offset + 12 + 2, same_size))  # a byte of c's record
        with pytest.raises(RemoteObjectChangedError, match="changed") as err:
            ds.get(c.key)
    assert f"{store.root}/{shard}" in str(err.value)


@pytest.mark.parametrize("same_size", [True, False], ids=["same-size", "other-size"])
def test_a_key_index_replaced_between_lookups_is_an_error_naming_it(built, store, same_size):
    a, b, _, index, _ = _keys(built)
    with open(os.path.join(built, index), "rb") as f:
        data = f.read()
    with open_dataset(store.root) as ds:
        assert ds.get(a.key)["id"].tolist() == [int(a.key)]  # the footer and block 0 read: pinned
        with KeyIndexReader(os.path.join(built, index)) as reader:
            at = reader._block_offsets[-1] + 8  # a byte of the last block, which b's look-up reads
        store.put(index, _changed(data, at, same_size))
        with pytest.raises(RemoteObjectChangedError, match="changed") as err:
            ds.get(b.key)
    assert f"{store.root}/{index}" in str(err.value)


@pytest.mark.parametrize(
    "store", [pytest.param("s3", marks=pytest.mark.s3), pytest.param("azure", marks=pytest.mark.azure)], indirect=True
)
def test_a_shard_of_another_size_than_the_info_says_is_an_error_at_its_first_read(built, store):
    """On S3 and Azure the first read's ``Content-Range`` total must be the size
    ``tfrecord_io_info.json`` gives (GCS's library does not expose it: the generation pins
    from there on). The ``lookup`` command reports it in one line, naming the object."""
    a, _, _, _, shard = _keys(built)
    with open(os.path.join(built, shard), "rb") as f:
        data = f.read()
    store.put(shard, data + b"\0" * 16)
    with open_dataset(store.root) as ds:
        with pytest.raises(RemoteObjectChangedError, match=f"had {len(data)} bytes, now {len(data) + 16}") as err:
            ds.get(a.key)
    assert f"{store.root}/{shard}" in str(err.value)
    proc = run_cli("lookup", store.root, a.key, "--no-progress", *IN_PROCESS, *store.flags, env=cli_env(**store.env))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"{store.root}/{shard}" in proc.stderr and f"now {len(data) + 16}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
