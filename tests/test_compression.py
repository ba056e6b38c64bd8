"""Compressed files (GZIP, ZLIB): every spelling of the compression type, round trips,
and damaged streams: a truncated or corrupted GZIP/ZLIB file raises our errors (with
the path), never ``EOFError``/``zlib.error``, and never loses records silently."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tfrecord_io as tfio
from tfrecord_io.format.writer import RecordWriter

from tfio_testutil import golden_path, golden_payloads

PAYLOADS = golden_payloads()


@pytest.mark.parametrize(
    "spelling,kind",
    [(None, ""), ("", ""), ("NONE", ""), ("gzip", "gzip"), ("GZIP", "gzip"), ("zlib", "zlib"), ("ZLIB", "zlib")],
)
def test_spellings_round_trip(tmp_path, spelling, kind):
    path = str(tmp_path / "data.bin")
    with RecordWriter(path, spelling) as w:
        w.write_records(PAYLOADS)
    head = open(path, "rb").read(2)
    if kind == "gzip":
        assert head == b"\x1f\x8b"
    elif kind == "zlib":
        assert head[0] == 0x78  # zlib header, deflate with a 32K window
    else:
        assert open(path, "rb").read() == open(golden_path("records.tfrecord"), "rb").read()
    assert [bytes(r) for r in tfio.tfrecord_iterator(path, compression_type=spelling)] == PAYLOADS


@pytest.mark.parametrize("suffix,magic", [(".gz", b"\x1f\x8b"), (".zz", b"\x78")])
def test_suffix_chooses_compression(tmp_path, suffix, magic):
    path = str(tmp_path / ("data.tfrecord" + suffix))
    with tfio.TFRecordWriter(path) as w:
        for p in PAYLOADS:
            w.write(p)
    assert open(path, "rb").read(len(magic)) == magic
    assert [bytes(r) for r in tfio.tfrecord_iterator(path)] == PAYLOADS


def test_unknown_compression_type_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="bz2"):
        list(tfio.tfrecord_iterator(golden_path("records.tfrecord"), compression_type="bz2"))


def test_compressed_file_cannot_be_read_by_byte_range():
    with pytest.raises(ValueError, match="GZIP"):
        list(tfio.read_records(golden_path("records.tfrecord.gz"), 10, 100))


def _read_prefix(path):
    """Records read before an error, and the error (or None)."""
    got = []
    try:
        for r in tfio.tfrecord_iterator(path):
            got.append(bytes(r))
    except tfio.TFRecordError as err:
        return got, err
    return got, None


@pytest.mark.parametrize("name", ["records.tfrecord.gz", "records.tfrecord.zz"])
def test_every_truncation_of_a_compressed_file_is_detected(tmp_path, name):
    blob = open(golden_path(name), "rb").read()
    path = str(tmp_path / name)
    for cut in range(len(blob)):
        with open(path, "wb") as f:
            f.write(blob[:cut])
        got, err = _read_prefix(path)
        assert got == PAYLOADS[: len(got)], cut  # only good records, in order
        if cut == 0:
            assert err is None and got == []  # an empty file is an empty dataset
            continue
        assert err is not None, f"truncation at {cut} of {len(blob)} bytes went unnoticed"
        assert isinstance(err, (tfio.TruncatedRecordError, tfio.CorruptRecordError)), cut
        assert path in str(err) and err.offset is not None


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_bit_flips_in_compressed_files_never_give_wrong_records(tmp_path_factory, data):
    name = data.draw(st.sampled_from(["records.tfrecord.gz", "records.tfrecord.zz"]))
    blob = bytearray(open(golden_path(name), "rb").read())
    bit = data.draw(st.integers(0, len(blob) * 8 - 1))
    blob[bit // 8] ^= 1 << (bit % 8)
    path = str(tmp_path_factory.mktemp("flip") / name)
    with open(path, "wb") as f:
        f.write(bytes(blob))
    got, err = _read_prefix(path)  # any other exception type fails the test
    assert got == PAYLOADS[: len(got)]
    if err is None:
        # undetected only where the flip changed no data (e.g. gzip's mtime/OS header bytes)
        assert got == PAYLOADS
    else:
        assert path in str(err)
