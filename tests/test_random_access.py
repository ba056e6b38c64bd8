"""Random access by record number: positioned reads checked against the index."""

from __future__ import annotations

import multiprocessing as mp
import pickle

import pytest

from tfrecord_io.errors import CorruptRecordError, IndexFileError, TruncatedRecordError
from tfrecord_io.framing import encode_frame
from tfrecord_io.random_access import IndexedRecordReader, decode_frame
from tfrecord_io.reader import read_records

from tests.torch_data import corrupt_data_byte, record_offsets, write_examples


def test_decode_frame_checks():
    frame = encode_frame(b"hello world")
    assert bytes(decode_frame(frame)) == b"hello world"
    bad = bytearray(frame)
    bad[14] ^= 1
    with pytest.raises(CorruptRecordError, match="f.tfrecord, byte offset 40: corrupt record data"):
        decode_frame(bytes(bad), "f.tfrecord", 40)
    bad = bytearray(frame)
    bad[2] ^= 1
    with pytest.raises(CorruptRecordError, match="header"):
        decode_frame(bytes(bad), "f", 0)
    with pytest.raises(CorruptRecordError, match="length mismatch"):
        decode_frame(frame + b"xx", "f", 0)
    with pytest.raises(TruncatedRecordError):
        decode_frame(frame[:10], "f", 0)
    bad = bytearray(frame)
    bad[14] ^= 1
    assert bytes(decode_frame(bytes(bad), check_crc=False)) == b"he\x6dlo world"  # checks skipped


def _sequential(paths):
    return [bytes(d) for p in paths for _, d in read_records(p)]


def test_reads_every_record_by_number(tmp_path):
    a, b = str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")
    write_examples(a, range(30), index=True)
    write_examples(b, range(30, 45))  # no index file: built in memory
    reader = IndexedRecordReader([a, b], "auto")
    expected = _sequential([a, b])
    assert len(reader) == 45
    assert [bytes(reader[i]) for i in range(45)] == expected
    assert bytes(reader[-1]) == expected[-1]
    assert reader.record(31)[:2] == (b, record_offsets(b)[1][0])
    with pytest.raises(IndexError):
        reader[45]


def _read_all(reader):
    return [bytes(reader[i]) for i in range(len(reader))]


def test_pickled_reader_reopens_in_another_process(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    write_examples(path, range(20), index=True)
    reader = IndexedRecordReader(path)
    reader[3]  # opens a handle, which must not travel
    clone = pickle.loads(pickle.dumps(reader))
    assert clone._handles == {}
    with mp.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_read_all, (reader,)) == _sequential([path])


def test_corrupt_record_names_file_and_offset(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    write_examples(path, range(20), index=True)
    offset = corrupt_data_byte(path, 7)
    reader = IndexedRecordReader(path)
    reader[6]
    with pytest.raises(CorruptRecordError, match=f"a.tfrecord, byte offset {offset}: corrupt record data"):
        reader[7]


def test_stale_or_wrong_index(tmp_path):
    a, b = str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")
    write_examples(a, range(20), index=True)
    write_examples(b, range(20), seed=5)
    with pytest.raises(IndexFileError, match="stale"):
        IndexedRecordReader(b, a + ".index")
    with pytest.raises(IndexFileError, match="uncompressed"):
        IndexedRecordReader(str(tmp_path / "c.tfrecord.gz"), a + ".index")
