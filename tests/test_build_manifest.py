"""The build's manifest read: a CSV or JSONL file cut into byte ranges read in parallel,
each row read exactly once and known by its byte offset, whatever the cut; a CSV whose
quoted values may hold line breaks read by one reader."""

from __future__ import annotations

import csv
import io
import json
import os

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from tfrecord_io.pipelines.building import manifest
from tfrecord_io.pipelines.building.manifest import InputError, ReadManifest

from tests.pipeline_support import TWO_WORKERS, options

CSV_CASES = {
    "lf": b"id,path,label\nr1,a.jpg,cat\nr2,b.jpg,dog\n\nr3,c.jpg\nr4,d.jpg,owl",
    "crlf": b"id,path,label\r\nr1,a.jpg,cat\r\nr2,b.jpg,dog\r\n\r\nr3,c.jpg\r\n",
    "cr": b"id,path,label\rr1,a.jpg,cat\rr2,b.jpg,dog\r\rr3,c.jpg\r",
    "bom": b"\xef\xbb\xbfid,path,label\nr1,a.jpg,cat\nr2,\xc3\xa9t\xc3\xa9.jpg,dog\n",
    "mixed": b"id,path,label\nr1,a.jpg,cat\r\nr2,b.jpg,dog\rr3,x,y\n \n\n",
    "many": b"id,path\n" + b"".join(b"r%d,img/%d.jpg%s" % (i, i, (b"\n", b"\r\n", b"\n\n")[i % 3]) for i in range(400)),
    "quoted": b'id,path,label\nr1,"a,1.jpg",cat\nr2,"b\nc.jpg",dog\r\nr3,"x""y",z\n',
}


def _dict_reader(data: bytes):
    """What ``csv.DictReader`` over the file opened as the docs say gives."""
    return list(csv.DictReader(io.TextIOWrapper(io.BytesIO(data), encoding="utf-8-sig", newline="")))


def _read(path: str, range_bytes: int, multiline="auto"):
    layout = manifest.manifest_layout(path, "auto", multiline)
    ranges = manifest.manifest_ranges(layout, range_bytes)
    return layout, ranges, [row for start, stop in ranges for row in manifest.read_manifest_range(layout, start, stop)]


@pytest.mark.parametrize("name", sorted(CSV_CASES))
@pytest.mark.parametrize("block", [3, 1 << 20])
def test_every_cut_reads_every_row_once_with_its_byte_offset(name, block, tmp_path, monkeypatch):
    """Ranges of 1 byte up to the whole file, read in blocks that split lines and "\\r\\n"
    pairs: the rows are csv.DictReader's, in file order, each once, and ``_row`` is
    where the row's first byte is."""
    monkeypatch.setattr(manifest, "_BLOCK", block)
    data = CSV_CASES[name]
    path = str(tmp_path / "m.csv")
    with open(path, "wb") as f:
        f.write(data)
    want = _dict_reader(data)
    for range_bytes in (1, 2, 5, 13, 64, 1 << 20):
        layout, ranges, rows = _read(path, range_bytes)
        assert [{k: v for k, v in r.items() if k != "_row"} for r in rows] == want, range_bytes
        first_values = [next(iter(r.values())) for r in want]
        for row, first in zip(rows, first_values):
            at = row["_row"]
            assert data[at:].startswith(first.encode() if name != "quoted" else b"r"), (range_bytes, row)
        if name == "quoted":  # a '"': may be a line break in a value, so one range
            assert not layout.splittable and len(ranges) == 1
        else:
            assert layout.splittable and len(ranges) == -(-(len(data) - layout.data_start) // range_bytes)


def test_a_csv_with_quoted_line_breaks_is_one_reader_unless_told_otherwise(tmp_path):
    path = str(tmp_path / "q.csv")
    with open(path, "wb") as f:
        f.write(CSV_CASES["quoted"])
    _, ranges, rows = _read(path, 4, multiline=True)
    assert len(ranges) == 1 and [r["path"] for r in rows] == ["a,1.jpg", "b\nc.jpg", 'x"y']
    assert [r["_row"] for r in rows] == [14, 31, 49]
    # told that no value holds a line break: cut at every line, and the one that does is an error
    with pytest.raises(InputError, match=r"row at byte 31: a quoted value runs past the end of its line"):
        _read(path, 1 << 20, multiline=False)
    # quotes without line breaks, told so: cut and read in parallel
    with open(path, "wb") as f:
        f.write(b'id,path\nr1,"a,b.jpg"\nr2,"c""d.jpg"\n')
    layout, ranges, rows = _read(path, 3, multiline=False)
    assert layout.splittable and len(ranges) > 1 and [r["path"] for r in rows] == ["a,b.jpg", 'c"d.jpg']


def test_bad_lines_name_the_file_and_byte_offset(tmp_path):
    path = str(tmp_path / "m.jsonl")
    with open(path, "wb") as f:
        f.write(b'{"id": 1}\n\n  \n{"id": 2, "p": "a\\nb"}\r\n{"id": 3}\r{"id": 4}')
    for range_bytes in range(1, 12):
        layout, _, rows = _read(path, range_bytes)
        assert layout.splittable and [(r["id"], r["_row"]) for r in rows] == [(1, 0), (2, 14), (3, 38), (4, 48)]
    with open(path, "wb") as f:
        f.write(b'{"id": 1}\n{"id": \n')
    with pytest.raises(InputError, match=r"m.jsonl, row at byte 10: not valid JSON"):
        _read(path, 1 << 20)
    with open(path, "wb") as f:
        f.write(b'{"id": 1}\n[1, 2]\n')
    with pytest.raises(InputError, match=r"row at byte 10: expected a JSON object"):
        _read(path, 1 << 20)
    path = str(tmp_path / "m.csv")
    with open(path, "wb") as f:
        f.write(b"id,path\nr1,a.jpg\nr2,b.jpg,extra\nr3,\xff.jpg\n")
    with pytest.raises(InputError, match=r"m.csv, row at byte 17: more values than header columns"):
        _read(path, 1 << 20)
    with open(path, "wb") as f:
        f.write(b"id,path\nr1,a.jpg\nr3,\xff.jpg\n")
    with pytest.raises(InputError, match=r"m.csv, row at byte 17: not UTF-8 text"):
        _read(path, 1 << 20)
    with open(path, "wb") as f:
        f.write(b"\n\nid,path\n")
    with pytest.raises(InputError, match="is empty"):
        _read(path, 1 << 20)


def test_ranges_are_read_by_every_worker(tmp_path):
    """On two local workers, the ranges of one manifest are read by both (the Reshuffle
    between cutting and reading spreads the ranges, not the rows)."""
    path = str(tmp_path / "m.csv")
    rows = [f"r{i:05d},img/{i}.jpg,{'cat' if i % 2 else 'dog'}" for i in range(4000)]
    with open(path, "w") as f:
        f.write("id,path,label\n" + "\n".join(rows) + "\n")
    with beam.Pipeline(options=options(TWO_WORKERS)) as p:
        batches = p | ReadManifest(path, range_bytes=8 << 10, batch_rows=100)
        ids = batches | "Ids" >> beam.FlatMap(lambda batch: [row["id"] for row in batch])
        readers = (
            batches
            | "Reader" >> beam.Map(lambda batch: os.getpid())
            | beam.combiners.Count.PerElement()
            | beam.combiners.Count.Globally()
        )
        assert_that(ids, equal_to([row.split(",")[0] for row in rows]), label="EveryRowOnce")
        assert_that(readers, equal_to([2]), label="TwoReaders")


def test_a_manifest_read_in_one_range_or_many_builds_the_same_shards(tmp_path):
    """Placement comes from each row's key: the same rows read in 1-KiB ranges (many
    readers) or as one range (one reader) give byte-identical shards and rejected rows."""
    from PIL import Image

    import tfrecord_io
    from tfrecord_io.pipelines.building import commit

    root = tmp_path / "data"
    (root / "img").mkdir(parents=True)
    for i in range(12):
        Image.new("RGB", (8, 6), (20 * i, 40, 60)).save(root / "img" / f"{i}.jpg", "JPEG")
    with open(root / "m.csv", "w") as f:
        f.write("id,path,label\n")
        for i in range(300):
            f.write(f"r{i},img/{i % 13}.jpg,{('cat', 'dog')[i % 2]}\n")  # img/12.jpg does not exist
    config = {
        "name": "cuts",
        "key": "id",
        "columns": {
            "image": {"encoder": "image", "column": "path"},
            "label": {"encoder": "label", "vocabulary": ["cat", "dog"]},
        },
        "splits": {"train": 0.7, "test": 0.3},
        "sharding": {"num_shards": 2},
    }
    built = {}
    for name, read in (
        ("one", ReadManifest(str(root / "m.csv"), multiline_values=True)),
        ("many", ReadManifest(str(root / "m.csv"), range_bytes=1 << 10, batch_rows=16)),
    ):
        out = str(tmp_path / name)
        with beam.Pipeline(options=options()) as p:
            _ = p | read | tfrecord_io.BuildDataset(config, str(root), output_dir=out, version="v1", batched=True)
        version = os.path.join(out, "v1")
        shards = {
            rel: open(os.path.join(dirpath, rel), "rb").read()
            for dirpath, _, names in os.walk(version)
            for rel in names
            if ".tfrecord" in rel
        }
        with open(os.path.join(version, commit.REJECTED_NAME), "rb") as f:
            built[name] = (shards, f.read())
    assert len(built["one"][0]) == 8 and built["one"] == built["many"]  # 4 shards, 4 indexes
    rejected = [json.loads(line) for line in built["many"][1].splitlines()]
    assert len(rejected) == 23 and all(r["row"]["path"] == "img/12.jpg" for r in rejected)
    with open(root / "m.csv", "rb") as f:
        data = f.read()
    assert all(data[r["row"]["_row"] :].startswith(r["row"]["id"].encode() + b",") for r in rejected)
