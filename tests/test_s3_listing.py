"""S3 listings that cost what is asked (tfrecord_io/storage/s3_listing.py), on a real S3 server
(versitygw): a build's planning stats a batch of media files by listing around them,
not their whole folder each batch; a root/<label>/ tree is listed by label, in
parallel. Sizes and times are those Beam's match gives."""

from __future__ import annotations

import os
import random

import apache_beam as beam
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from tfrecord_io.storage import files, s3_listing

pytestmark = pytest.mark.s3


@pytest.fixture
def s3_fs(s3_server):
    FileSystems.set_options(PipelineOptions(s3_server.pipeline_args()))
    yield s3_server
    FileSystems.set_options(PipelineOptions([]))


def _put_files(server, url, names, size=lambda i: 10 + i % 7):
    """Objects written behind the server (its posix directory): thousands in a second."""
    for i, name in enumerate(names):
        path = server.object_path(f"{url}/{name}")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(b"x" * size(i))


def _count_lists(url):
    """A counter of the ListObjectsV2 requests of this process's S3 client."""
    client = files._s3_client(url)[0]
    calls = {"n": 0}

    def count(**_):
        calls["n"] += 1

    client.meta.events.register("before-call.s3.ListObjectsV2", count)
    return calls, lambda: client.meta.events.unregister("before-call.s3.ListObjectsV2", count)


def test_stat_many_lists_around_the_files_not_the_whole_folder(s3_fs, s3_bucket):
    """5,000 objects in a folder: a batch of 100 consecutive names costs one request (Beam's
    match of the folder: 5 pages, every batch); names in random order cost at most one
    request each; missing ones are None; every size and time is what the match gives."""
    names = [f"img_{i:05d}.jpg" for i in range(5000)] + ["img_00100.jpg.bak", "img_0010.jpg"]
    _put_files(s3_fs, s3_bucket + "/media", names)
    whole = {
        m.path: (int(m.size_in_bytes), float(m.last_updated_in_seconds))
        for m in FileSystems.match([s3_bucket + "/media/*"])[0].metadata_list
    }
    assert len(whole) == len(names)
    calls, stop = _count_lists(s3_bucket + "/media/x")
    try:
        batch = [f"{s3_bucket}/media/img_{i:05d}.jpg" for i in range(1000, 1100)] + [
            f"{s3_bucket}/media/img_01050x.jpg"
        ]
        calls["n"] = 0
        got = files.stat_many(batch)
        assert calls["n"] == 1, calls
        assert got == {p: whole.get(p) for p in batch} and got[batch[-1]] is None
        spread = random.Random(0).sample(sorted(whole), 40) + [f"{s3_bucket}/media/img_99999.jpg"]
        calls["n"] = 0
        got = files.stat_many(spread)
        assert calls["n"] <= len(spread), calls
        assert got == {p: whole.get(p) for p in spread}
        # the whole folder at once: as many pages as the folder, no more
        calls["n"] = 0
        assert files.stat_many(sorted(whole)) == whole
        assert calls["n"] <= 6, calls
    finally:
        stop()


def test_a_manifest_in_random_order_lists_the_folder_once_per_stage(s3_fs, s3_bucket):
    """Batches of files spread over a big folder (a manifest in random order): windows
    would cost about a request per file every batch; with the stage's FolderListings
    the first batch over its budget lists the folder once and later batches make no
    request. Values as Beam's match gives them."""
    names = [f"p{i:05d}.png" for i in range(5000)]
    _put_files(s3_fs, s3_bucket + "/pics", names)
    whole = {
        m.path: (int(m.size_in_bytes), float(m.last_updated_in_seconds))
        for m in FileSystems.match([s3_bucket + "/pics/*"])[0].metadata_list
    }
    order = sorted(whole) + [f"{s3_bucket}/pics/gone-{i}.png" for i in range(10)]
    random.Random(1).shuffle(order)
    listings = s3_listing.FolderListings()
    calls, stop = _count_lists(s3_bucket + "/pics/x")
    try:
        costs = []
        for start in range(0, len(order), 1000):
            calls["n"] = 0
            batch = order[start : start + 1000]
            assert files.stat_many(batch, listings) == {p: whole.get(p) for p in batch}
            costs.append(calls["n"])
        assert costs[0] <= 4 + 5 and costs[1:] == [0] * (len(costs) - 1), costs  # budget + 5 pages, then none
        small = s3_listing.FolderListings(max_keys=100)  # a folder too big to keep: windows only
        calls["n"] = 0
        assert files.stat_many(order[:1000], small) == {p: whole.get(p) for p in order[:1000]}
        assert small.folders == {(s3_bucket[len("s3://") :], "pics/"): None}
    finally:
        stop()


def test_a_folder_tree_on_s3_is_listed_by_label(s3_fs, s3_bucket, tmp_path):
    """root/<label>/<file> on S3: the labels come from one delimited listing and each
    label folder is listed on its own (in parallel on a runner's workers); the rows
    are those of one listing of the whole prefix."""
    from tfrecord_io.pipelines.building.manifest import ListDirectory, _ListGroups

    from tests.beam_support import run_pipeline

    root = s3_bucket + "/images"
    names = [f"{label}/{i:03d}.jpg" for label in ("cat", "dog", "emu") for i in range(30)] + [".hidden/x.jpg"]
    _put_files(s3_fs, root, names)
    assert list(_ListGroups().process(root)) == ["cat", "dog", "emu"]
    assert s3_listing.folders(*files.s3_folder_client(root + "/cat")) == []
    out, _ = run_pipeline(
        lambda p: {"rows": p | ListDirectory(root, batch_rows=7) | beam.FlatMap(lambda b: b)},
        str(tmp_path),
        flags=s3_fs.pipeline_args(),
    )
    rows = sorted(out["rows"], key=lambda r: r["path"])
    assert [r["path"] for r in rows] == sorted(n for n in names if not n.startswith("."))
    assert {r["label"] for r in rows} == {"cat", "dog", "emu"}
    sizes = {m.path: int(m.size_in_bytes) for m in FileSystems.match([root + "/*/*"])[0].metadata_list}
    assert all(r["_stat"][0][0] == sizes[f"{root}/{r['path']}"] for r in rows)
