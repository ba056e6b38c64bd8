"""Random access by record number: positioned reads checked against the index."""

from __future__ import annotations

import multiprocessing as mp
import pickle

import pytest

from tfrecord_io.errors import CorruptRecordError, IndexFileError, TruncatedRecordError
from tfrecord_io.format.framing import encode_frame
from tfrecord_io.format.random_access import IndexedRecordReader, decode_frame
from tfrecord_io.format.reader import read_records

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


@pytest.mark.parametrize("block_size", [1, 700, 1 << 20])
def test_read_indexed_matches_a_scan(tmp_path, block_size):
    from tfrecord_io.format.index import load_index
    from tfrecord_io.format.random_access import read_indexed

    path = str(tmp_path / "a.tfrecord")
    index = load_index(write_examples(path, range(80), index=True))
    expected = [(o, bytes(d)) for o, d in read_records(path)]
    got = [(o, bytes(d)) for o, d in read_indexed(path, index, block_size=block_size)]
    assert got == expected
    part = [(o, bytes(d)) for o, d in read_indexed(path, index, 13, 41, block_size=block_size)]
    assert part == expected[13:41]


def test_read_indexed_errors_name_the_record(tmp_path):
    import numpy as np

    from tfrecord_io.format.index import RecordIndex, load_index
    from tfrecord_io.format.random_access import read_indexed
    from tfrecord_io.format.writer import RecordWriter

    path = str(tmp_path / "a.tfrecord")
    index = load_index(write_examples(path, range(50), index=True))
    offset = corrupt_data_byte(path, 30)
    with pytest.raises(CorruptRecordError, match=f"byte offset {offset}: corrupt record data"):
        list(read_indexed(path, index))
    assert len(list(read_indexed(path, index, 0, 30))) == 30  # records before it are fine

    two = str(tmp_path / "two.tfrecord")
    with RecordWriter(two) as w:
        w.write_record(b"abcd")
        w.write_record(b"abcdefgh")
    swapped = RecordIndex(np.array([0, 24]), np.array([24, 20]))  # tiles the file, wrong split
    with pytest.raises(CorruptRecordError, match="byte offset 0: record length mismatch"):
        list(read_indexed(two, swapped))
    with open(two, "r+b") as f:
        f.truncate(30)
    with pytest.raises(TruncatedRecordError):
        list(read_indexed(two, RecordIndex(np.array([0, 20]), np.array([20, 24]))))


def test_read_indexed_through_filesystems_blocks(tmp_path, monkeypatch):
    """The path for remote files (blocks read through Beam's FileSystems, no mmap),
    exercised on a local file by routing it as if it were remote."""
    from tfrecord_io.format.index import load_index
    from tfrecord_io.format.random_access import read_indexed
    from tfrecord_io.storage import files

    path = str(tmp_path / "a.tfrecord")
    index = load_index(write_examples(path, range(40), index=True))
    expected = [(o, bytes(d)) for o, d in read_records(path)]
    offset = record_offsets(path)[25][0]
    monkeypatch.setattr(files, "is_remote", lambda p: True)
    assert [(o, bytes(d)) for o, d in read_indexed(path, index, block_size=900)] == expected
    corrupt_data_byte(path, 25)
    with pytest.raises(CorruptRecordError, match=f"byte offset {offset}"):
        list(read_indexed(path, index, block_size=900))


def test_scan_mapped_matches_read_records(tmp_path):
    from tfrecord_io.format.random_access import scan_mapped

    path = str(tmp_path / "a.tfrecord")
    write_examples(path, range(60))
    size = len(open(path, "rb").read())
    cuts = [0, 1, 13, size // 3, size // 2 + 7, size - 5, size]
    for a, b in zip(cuts, cuts[1:]):
        assert [(o, bytes(d)) for o, d in scan_mapped(path, a, b)] == [
            (o, bytes(d)) for o, d in read_records(path, a, b)
        ]
    assert len(list(scan_mapped(path))) == 60
    offset = corrupt_data_byte(path, 44)
    with pytest.raises(CorruptRecordError, match=f"byte offset {offset}: corrupt record data"):
        list(scan_mapped(path))
    with open(path, "r+b") as f:
        f.truncate(size - 3)
    with pytest.raises(TruncatedRecordError):
        list(scan_mapped(path, offset + 1))


def test_without_mmap_both_paths_fall_back_to_reads(tmp_path, monkeypatch):
    import tfrecord_io.format.random_access as ra
    from tfrecord_io.format.index import load_index

    path = str(tmp_path / "a.tfrecord")
    index = load_index(write_examples(path, range(30), index=True))
    expected = [(o, bytes(d)) for o, d in read_records(path)]

    def no_mmap(path):
        raise OSError("mmap not supported")

    monkeypatch.setattr(ra, "_map_local", no_mmap)
    assert [(o, bytes(d)) for o, d in ra.read_indexed(path, index)] == expected
    assert [(o, bytes(d)) for o, d in ra.scan_mapped(path, 5)] == expected[1:]
