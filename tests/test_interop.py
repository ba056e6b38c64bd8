"""Interop both ways with the ``tfrecord`` package (writer, loaders, its index tool)
and with Beam's built-in ``apache_beam.io.tfrecordio`` (``_TFRecordUtil`` and the
``ReadFromTFRecord``/``WriteToTFRecord`` transforms on the DirectRunner)."""

from __future__ import annotations

import glob

import numpy as np
import pytest

import tfrecord_io as tfio
from tfrecord_io.format.writer import RecordWriter

from tfio_testutil import golden_path, golden_payloads

tfrecord_writer = pytest.importorskip("tfrecord.writer")
tfrecord_reader = pytest.importorskip("tfrecord.reader")
tfrecord_tools = pytest.importorskip("tfrecord.tools.tfrecord2idx")


def _rows(n=30):
    rng = np.random.default_rng(3)
    return [
        {
            "label": (i - 5, "int"),
            "scores": (rng.standard_normal(4).astype(np.float32).tolist(), "float"),
            "text": (f"ü-{i}".encode(), "byte"),
            "tags": ([b"a\x01", b"b"], "byte"),
        }
        for i in range(n)
    ]


def _assert_row(row, got):
    assert got["label"].tolist() == [row["label"][0]]
    assert np.array_equal(np.asarray(got["scores"], dtype=np.float32), np.asarray(row["scores"][0], dtype=np.float32))
    assert bytes(got["text"]) == row["text"][0]
    assert [bytes(t) for t in got["tags"]] == row["tags"][0]


# ------------------------------------------------------------------ tfrecord package


def test_their_writer_our_loaders(tmp_path):
    path = str(tmp_path / "theirs.tfrecord")
    w = tfrecord_writer.TFRecordWriter(path)
    rows = _rows()
    for row in rows:
        w.write(row)
    w.write({"id": (1, "int")}, {"steps": ([[1, 2], [3]], "int"), "names": ([b"x", b"y"], "byte")})
    w.close()
    got = list(tfio.tfrecord_iterator(path))  # both CRCs checked: their frames are valid
    assert len(got) == len(rows) + 1
    desc = {"label": "int", "scores": "float", "text": "byte", "tags": "byte"}
    for row, rec in zip(rows, got):
        _assert_row(row, tfio.parse_example(rec, desc))
    ctx, lists = tfio.parse_sequence_example(got[-1], {"id": "int"}, {"steps": "int", "names": "byte"})
    assert ctx["id"].tolist() == [1]
    assert [s.tolist() for s in lists["steps"]] == [[1, 2], [3]] and lists["names"] == [b"x", b"y"]
    # their index file drives our shards
    tfrecord_tools.create_index(path, path + ".idx")
    shards = [list(tfio.tfrecord_iterator(path, path + ".idx", shard=(i, 4))) for i in range(4)]
    assert [bytes(r) for s in shards for r in s] == [bytes(r) for r in got]


def test_our_writer_their_loader(tmp_path):
    path = str(tmp_path / "ours.tfrecord")
    rows = _rows()
    with tfio.TFRecordWriter(path, index_path=path + ".index") as w:
        for row in rows:
            w.write(row)
    desc = {"label": "int", "scores": "float", "text": "byte", "tags": "byte"}
    got = list(tfrecord_reader.tfrecord_loader(path, None, desc))
    assert len(got) == len(rows)
    for row, g in zip(rows, got):
        _assert_row(row, g)
    # they read with our index, by shard
    shards = [list(tfrecord_reader.tfrecord_loader(path, path + ".index", desc, shard=(i, 3))) for i in range(3)]
    assert [int(g["label"][0]) for s in shards for g in s] == [r["label"][0] for r in rows]


def test_sequence_examples_both_ways(tmp_path):
    ours = str(tmp_path / "ours.tfrecord")
    theirs = str(tmp_path / "theirs.tfrecord")
    ctx = {"id": (7, "int")}
    seq = {"tok": ([[1, 2], [3], []], "int"), "emb": ([[0.5], [1.5, 2.5], [4.0]], "float")}
    with tfio.TFRecordWriter(ours) as w:
        w.write(ctx, seq)
    tw = tfrecord_writer.TFRecordWriter(theirs)
    tw.write(ctx, seq)
    tw.close()
    for path in (ours, theirs):
        ((c, lists),) = list(tfio.sequence_loader(path, None, {"id": "int"}, {"tok": "int", "emb": "float"}))
        assert c["id"].tolist() == [7]
        assert [s.tolist() for s in lists["tok"]] == [[1, 2], [3], []]
        assert [s.tolist() for s in lists["emb"]] == [[0.5], [1.5, 2.5], [4.0]]
    ((c, lists),) = list(tfrecord_reader.sequence_loader(ours, None, {"id": "int"}, {"tok": "int", "emb": "float"}))
    assert c["id"].tolist() == [7] and [s.tolist() for s in lists["emb"]] == [[0.5], [1.5, 2.5], [4.0]]


def test_their_gzip_reader_reads_our_gzip(tmp_path):
    path = str(tmp_path / "g.tfrecord.gz")
    with RecordWriter(path) as w:
        w.write_records(golden_payloads())
    got = [bytes(r) for r in tfrecord_reader.tfrecord_iterator(path, compression_type="gzip")]
    assert got == golden_payloads()


def test_our_views_stay_valid_unlike_theirs():
    path = golden_path("records.tfrecord")
    ours = list(tfio.tfrecord_iterator(path))  # hold every view, compare at the end
    assert [bytes(v) for v in ours] == golden_payloads()
    # the tfrecord package reuses one buffer: held views show later records' bytes
    theirs = list(tfrecord_reader.tfrecord_iterator(path))
    assert [bytes(v) for v in theirs] != golden_payloads()


# ------------------------------------------------------------------ Beam's tfrecordio

beam = pytest.importorskip("apache_beam")
from apache_beam.io import tfrecordio as beam_tfrecordio  # noqa: E402
from apache_beam.testing.util import assert_that, equal_to  # noqa: E402


def test_beam_record_util_both_ways(tmp_path):
    util = beam_tfrecordio._TFRecordUtil
    payloads = golden_payloads()
    theirs = str(tmp_path / "beam.tfrecord")
    with open(theirs, "wb") as f:
        for p in payloads:
            util.write_record(f, p)
    assert open(theirs, "rb").read() == open(golden_path("records.tfrecord"), "rb").read()
    assert [bytes(r) for r in tfio.tfrecord_iterator(theirs)] == payloads
    got = []
    with open(golden_path("records.tfrecord"), "rb") as f:  # written by TF, read by Beam's loop
        while True:
            record = util.read_record(f)
            if record is None:
                break
            got.append(record)
    assert got == payloads


def test_beam_write_transform_our_reader(tmp_path):
    payloads = golden_payloads()
    prefix = str(tmp_path / "out")
    with beam.Pipeline("DirectRunner") as p:
        _ = p | beam.Create(payloads) | beam_tfrecordio.WriteToTFRecord(prefix, num_shards=2)
    shards = sorted(glob.glob(prefix + "*"))
    assert len(shards) == 2
    got = [bytes(r) for s in shards for r in tfio.tfrecord_iterator(s)]
    assert sorted(got) == sorted(payloads)


@pytest.mark.parametrize("compression", ["", "gzip"])
def test_our_writer_beam_read_transform(tmp_path, compression):
    payloads = golden_payloads()
    path = str(tmp_path / ("ours.tfrecord" + (".gz" if compression else "")))
    with RecordWriter(path) as w:
        w.write_records(payloads)
    with beam.Pipeline("DirectRunner") as p:
        got = p | beam_tfrecordio.ReadFromTFRecord(path)
        assert_that(got, equal_to(payloads))
