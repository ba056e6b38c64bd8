"""The shard planner: shards tile the records of a file set exactly once, by count with
indexes, by bytes without, by file (or every n-th record) for compressed files."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfrecord_io.errors import IndexFileError
from tfrecord_io.format.codec import parse_example
from tfrecord_io.format.index import RecordIndex, write_index_atomic
from tfrecord_io.format.sharding import describe_files, plan_shard, read_piece, shard_count
from tfrecord_io.format.writer import RecordWriter

from tests.torch_data import write_examples


def _ids(infos, shard, n):
    return [int(parse_example(d, ["id"])["id"][0]) for p in plan_shard(infos, shard, n) for _, d in read_piece(p)]


def _write_set(directory, sizes, index, compression=None):
    paths, indexes, start = [], [], 0
    suffix = ".tfrecord.gz" if compression else ".tfrecord"
    for k, count in enumerate(sizes):
        path = os.path.join(directory, f"f{k}{suffix}")
        indexes.append(write_examples(path, range(start, start + count), index=index, seed=k))
        paths.append(path)
        start += count
    return paths, indexes, start


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 40), min_size=1, max_size=4),
    n=st.integers(1, 7),
    index=st.booleans(),
)
def test_shards_tile_every_record_once(sizes, n, index):
    with tempfile.TemporaryDirectory() as d:
        paths, indexes, total = _write_set(d, sizes, index)
        infos = describe_files(paths, indexes)
        got = [i for s in range(n) for i in _ids(infos, s, n)]
        assert got == list(range(total))  # shards in order concatenate to the file set
        counts = [shard_count(infos, s, n) for s in range(n)]
        if index or not any(sizes):
            assert counts == [len(_ids(infos, s, n)) for s in range(n)]
            assert max(counts) - min(counts) <= 1  # balanced by record count
        else:
            assert counts == [None] * n


@pytest.mark.parametrize("n_files,n", [(2, 5), (5, 2), (3, 3), (1, 4)])
def test_compressed_files_every_record_once(tmp_path, n_files, n):
    paths, _, total = _write_set(str(tmp_path), [17] * n_files, False, compression="gzip")
    infos = describe_files(paths)
    assert all(f.compression == "gzip" for f in infos)
    per_shard = [_ids(infos, s, n) for s in range(n)]
    assert sorted(i for ids in per_shard for i in ids) == list(range(total))
    assert all(ids for ids in per_shard)  # with fewer files than shards no shard idles
    assert shard_count(infos, 0, n) is None


def test_rank_count_is_union_of_worker_shards(tmp_path):
    paths, indexes, total = _write_set(str(tmp_path), [13, 0, 29, 8], True)
    infos = describe_files(paths, indexes)
    for world in (1, 2, 3):
        for workers in (1, 2, 3, 5):
            for rank in range(world):
                shards = range(rank * workers, (rank + 1) * workers)
                union = sum(shard_count(infos, s, world * workers) for s in shards)
                assert union == shard_count(infos, rank, world)


def test_byte_split_opens_few_files(tmp_path):
    paths, _, _ = _write_set(str(tmp_path), [20] * 8, False)
    infos = describe_files(paths)
    for s in range(4):
        assert len(plan_shard(infos, s, 4)) <= 3  # about files / n + 1, not every file


def test_stale_index_is_an_error(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    index = write_examples(path, range(10), index=True)
    with open(path, "ab") as f:  # the file grows after indexing
        f.write(b"\0" * 5)
    with pytest.raises(IndexFileError, match="a.tfrecord.*stale"):
        describe_files([path], [index])


def test_index_for_compressed_file_is_an_error(tmp_path):
    path = str(tmp_path / "a.tfrecord.gz")
    write_examples(path, range(3), compression="gzip")
    idx_path = str(tmp_path / "a.index")
    write_index_atomic(RecordIndex(np.array([0]), np.array([20])), idx_path)
    with pytest.raises(IndexFileError, match="GZIP"):
        describe_files([path], [idx_path])


def test_auto_index_is_found(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    write_examples(path, range(9), index=True)
    other = str(tmp_path / "b.tfrecord")
    write_examples(other, range(4))
    infos = describe_files([path, other], ["auto", "auto"])
    assert infos[0].count == 9 and infos[1].index is None


def test_bad_shard_numbers(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    with RecordWriter(path) as w:
        w.write_record(b"x")
    infos = describe_files([path])
    for shard, n in [(1, 1), (-1, 2), (0, 0)]:
        with pytest.raises(ValueError):
            plan_shard(infos, shard, n)
