"""Index files: the ``offset size`` text format shared with the ``tfrecord`` package
and DALI, validation before an atomic write, staleness, malformed indexes, and
compressed files."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

import tfrecord_io as tfio
from tfrecord_io.format.framing import encode_frame
from tfrecord_io.format.index import parse_index

from tfio_testutil import golden_path, golden_payloads, manifest


def test_build_index_of_golden_file():
    index = tfio.build_index(golden_path("records.tfrecord"))
    assert index.offsets.tolist() == manifest()["records_offsets"]
    assert index.sizes.tolist() == [len(p) + 16 for p in golden_payloads()]
    assert index.matches(os.path.getsize(golden_path("records.tfrecord")))
    text = index.to_text()
    assert text.splitlines()[0] == f"0 {len(golden_payloads()[0]) + 16}"
    assert parse_index(text).offsets.tolist() == index.offsets.tolist()


def test_same_text_as_the_tfrecord_package(tmp_path):
    tools = pytest.importorskip("tfrecord.tools.tfrecord2idx")
    theirs = str(tmp_path / "theirs.index")
    tools.create_index(golden_path("records.tfrecord"), theirs)
    ours = str(tmp_path / "ours.index")
    tfio.create_index(golden_path("records.tfrecord"), ours)
    assert open(ours).read() == open(theirs).read()
    # and we load theirs
    assert tfio.load_index(theirs).offsets.tolist() == manifest()["records_offsets"]


def test_empty_file_has_empty_index(tmp_path):
    path = str(tmp_path / "empty.tfrecord")
    open(path, "wb").close()
    index = tfio.create_index(path, path + ".index")
    assert len(index) == 0 and open(path + ".index").read() == ""
    assert len(tfio.load_index(path + ".index")) == 0 and index.matches(0)


def test_index_over_chunk_boundaries_and_a_record_larger_than_a_chunk(tmp_path):
    """Indexing scans 4 MiB at a time: frames cut by a chunk's end, and a record of 5 MiB
    (larger than a chunk), get the offsets and sizes they have; damage in the second
    chunk and a last frame cut short are the reader's errors at their byte offsets."""
    rng = np.random.default_rng(7)
    payloads = [bytes(rng.integers(0, 256, size=int(n), dtype=np.uint8)) for n in rng.integers(0, 3000, size=3000)]
    payloads.insert(1500, b"\x07" * (5 << 20))
    blob = b"".join(encode_frame(p) for p in payloads)
    assert len(blob) > 2 * (4 << 20)
    path = str(tmp_path / "big.tfrecord")
    open(path, "wb").write(blob)
    index = tfio.create_index(path, path + ".index")
    sizes = [len(p) + 16 for p in payloads]
    assert index.sizes.tolist() == sizes
    assert index.offsets.tolist() == np.concatenate([[0], np.cumsum(sizes)[:-1]]).tolist()
    assert tfio.load_index(path + ".index").offsets.tolist() == index.offsets.tolist()
    broken = bytearray(blob)
    victim = 2000
    broken[int(index.offsets[victim]) + 12] ^= 0x01  # the first data byte of a record past 4 MiB
    open(path, "wb").write(bytes(broken))
    with pytest.raises(tfio.CorruptRecordError) as err:
        tfio.build_index(path)
    assert err.value.offset == index.offsets[victim] > (4 << 20)
    open(path, "wb").write(blob[:-5])
    with pytest.raises(tfio.TruncatedRecordError) as err:
        tfio.build_index(path)
    assert err.value.offset == index.offsets[-1]


def test_matches_detects_stale_indexes():
    index = tfio.build_index(golden_path("records.tfrecord"))
    size = os.path.getsize(golden_path("records.tfrecord"))
    assert index.matches(size) and not index.matches(size + 1) and not index.matches(size - 1)
    gap = tfio.RecordIndex(index.offsets.copy(), index.sizes.copy())
    gap.sizes[1] -= 1  # frames no longer contiguous
    assert not gap.matches(size)


def test_first_at_or_after():
    index = tfio.RecordIndex(np.array([0, 20, 50]), np.array([20, 30, 16]))
    assert [index.first_at_or_after(o) for o in [0, 1, 20, 21, 50, 51]] == [0, 1, 1, 2, 2, 3]


@pytest.mark.parametrize(
    "text,what",
    [
        ("0 20\n20", "two numbers"),
        ("0 x\n", "malformed"),
        ("0 20\n0 20\n", "rise"),
        ("0 10\n", ">= 16"),
        ("-5 20\n", "rise"),
        ("\xff\xfe", "not a number: b'\\\\xff\\\\xfe' at byte 0"),  # not text: named, with its byte offset
        ("0 20\n20 1_6\n", "not a number: b'1_6' at byte 8"),  # Python's int() would take it
        ("0 20\n20 16 x\n", "malformed"),
        ("99999999999999999999 20\n", "malformed"),
        ("   \n", None),  # empty: no records
        ("0 20 20 16\n", None),  # pairs need not be one a line (tfrecord2idx writes one a line)
    ],
)
def test_malformed_index_is_a_clear_error(tmp_path, text, what):
    path = str(tmp_path / "bad.index")
    with open(path, "wb") as f:
        f.write(text.encode("latin-1"))
    if what is None:
        assert tfio.load_index(path).to_text() == "".join(f"{a} {b}\n" for a, b in zip(*[iter(text.split())] * 2))
        return
    with pytest.raises(tfio.IndexFileError, match=what) as err:
        tfio.load_index(path)
    assert path in str(err.value)


@pytest.mark.parametrize("where", ["first", "last"])
def test_corrupt_file_writes_no_index_and_keeps_the_old_one(tmp_path, where):
    payloads = [b"a" * 10, b"b" * 20, b"c" * 30]
    blob = bytearray(b"".join(encode_frame(p) for p in payloads))
    blob[14 if where == "first" else len(blob) - 6] ^= 0x01
    path = str(tmp_path / "c.tfrecord")
    with open(path, "wb") as f:
        f.write(blob)
    index_path = path + ".index"
    with open(index_path, "w") as f:
        f.write("old index\n")
    with pytest.raises(tfio.CorruptRecordError) as err:
        tfio.create_index(path, index_path)
    assert err.value.offset == (0 if where == "first" else 26 + 36)
    assert open(index_path).read() == "old index\n"
    assert sorted(os.listdir(tmp_path)) == ["c.tfrecord", "c.tfrecord.index"]  # no temp file left


@pytest.mark.parametrize("name,kind", [("records.tfrecord.gz", "GZIP"), ("records.tfrecord.zz", "ZLIB")])
def test_compressed_files_cannot_be_indexed(tmp_path, name, kind):
    with pytest.raises(tfio.IndexFileError, match=kind) as err:
        tfio.build_index(golden_path(name))
    assert "seek" in str(err.value)
    # also when the name does not say so: the header is recognised
    disguised = str(tmp_path / "data.tfrecord")
    shutil.copy(golden_path(name), disguised)
    with pytest.raises(tfio.IndexFileError, match=f"looks {kind}-compressed"):
        tfio.create_index(disguised, disguised + ".index")
    assert not os.path.exists(disguised + ".index")
    with pytest.raises(ValueError):
        tfio.RecordWriter(str(tmp_path / "x.tfrecord.gz"), index_path=str(tmp_path / "x.index"))


def test_find_index_names(tmp_path):
    data = str(tmp_path / "x.tfrecord")
    open(data, "wb").close()
    assert tfio.find_index(data) is None
    for name in ["x.index", "x.tfindex", "x.tfrecord.idx", "x.tfrecord.index"]:
        open(str(tmp_path / name), "w").close()
        assert tfio.find_index(data) == str(tmp_path / name)
