"""MultiTFRecordDataset: weights checked, zero-weight splits never opened, empty sources
skipped (also when sampling forever), finite epochs read every record once across
workers and ranks, sampling proportions, TFDS shard names, seeded order."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader

from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.torch import MultiTFRecordDataset, ReadOptions

from tests.torch_data import write_examples

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

A, B = 300, 200  # records of split "a" (ids 0..299) and "b" (ids 1000..1199)


def ids_of(batch):
    return [int(r["id"][0]) for r in batch]


@pytest.fixture(scope="module")
def splits_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("splits")
    write_examples(str(d / "a.tfrecord"), range(A), index=True)
    write_examples(str(d / "b.tfrecord"), range(1000, 1000 + B), index=True, seed=1)
    RecordWriter(str(d / "empty.tfrecord")).close()
    (d / "empty.tfrecord.index").write_text("")
    return d


def _take(ds, n, workers, batch_size=50):
    loader = DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=ids_of)
    return list(itertools.islice((i for b in loader for i in b), n))


@pytest.mark.parametrize("bad", [{"a": -1}, {"a": float("nan")}, {"a": float("inf")}, {"a": 0, "b": 0}, {"a": "x"}, {}])
def test_weights_are_checked(splits_dir, bad):
    with pytest.raises(ValueError, match="weight"):
        MultiTFRecordDataset(str(splits_dir / "{}.tfrecord"), None, bad)


def test_zero_weight_split_is_never_opened(splits_dir):
    ds = MultiTFRecordDataset(str(splits_dir / "{}.tfrecord"), None, {"a": 1, "missing": 0}, ["id"], infinite=False)
    assert sorted(_take(ds, 10**6, 0)) == list(range(A))


@pytest.mark.parametrize("workers", [0, 2, 3])
@pytest.mark.parametrize("with_index", [True, False])
def test_finite_epoch_reads_each_record_once(splits_dir, workers, with_index):
    seen = Counter()
    for rank in range(2):
        ds = MultiTFRecordDataset(
            str(splits_dir / "{}.tfrecord"),
            str(splits_dir / "{}.tfrecord.index") if with_index else None,
            {"a": 0.5, "b": 0.5, "empty": 1.0},
            ["id"],
            infinite=False,
            rank=rank,
            world_size=2,
        )
        seen.update(_take(ds, 10**6, workers))
    assert sorted(seen) == list(range(A)) + list(range(1000, 1000 + B))
    assert set(seen.values()) == {1}


def test_len_of_finite_indexed_epoch(splits_dir):
    pattern, index = str(splits_dir / "{}.tfrecord"), str(splits_dir / "{}.tfrecord.index")
    lens = [
        len(MultiTFRecordDataset(pattern, index, {"a": 1, "b": 2}, infinite=False, rank=r, world_size=2))
        for r in range(2)
    ]
    assert sum(lens) == A + B
    with pytest.raises(TypeError, match="infinite"):
        len(MultiTFRecordDataset(pattern, index, {"a": 1}))
    with pytest.raises(TypeError, match="index"):
        len(MultiTFRecordDataset(pattern, None, {"a": 1}, infinite=False))


@pytest.mark.parametrize("workers", [0, 2])
def test_weighted_proportions(splits_dir, workers):
    n, p = 6000, 0.25
    ds = MultiTFRecordDataset(str(splits_dir / "{}.tfrecord"), None, {"a": 1, "b": 3, "empty": 2}, ["id"])
    torch.manual_seed(11)
    got = _take(ds, n, workers)  # infinite: far more than either split holds
    assert len(got) == n
    from_a = sum(1 for i in got if i < 1000)
    sigma = math.sqrt(n * p * (1 - p))
    assert abs(from_a - n * p) < 5 * sigma, (from_a, n * p, sigma)
    # the records themselves are repeated, each split cycling through its own shard
    assert set(i for i in got if i < 1000) == set(range(A))


def test_infinite_with_only_empty_sources_ends(splits_dir, tmp_path):
    ds = MultiTFRecordDataset(str(splits_dir / "{}.tfrecord"), None, {"empty": 1})
    assert _take(ds, 10, 2) == []


def test_tfds_shard_names(tmp_path):
    for split, count in (("train", 3), ("test", 2)):
        for k in range(count):
            base = 0 if split == "train" else 10_000
            path = tmp_path / f"mnist-{split}.tfrecord-{k:05d}-of-{count:05d}"
            write_examples(str(path), range(base + k * 50, base + (k + 1) * 50), index=True, seed=k)
    glob = str(tmp_path / "mnist-*.tfrecord-*")
    ds = MultiTFRecordDataset(glob, "auto", {"train": 1, "test": 0}, ["id"], infinite=False)
    assert len(ds) == 150
    assert sorted(_take(ds, 10**6, 3)) == list(range(150))
    by_pattern = MultiTFRecordDataset(str(tmp_path / "mnist-{}.tfrecord-*"), None, {"test": 1}, ["id"], infinite=False)
    assert sorted(_take(by_pattern, 10**6, 2)) == list(range(10_000, 10_100))
    files = sorted(str(p) for p in tmp_path.glob("mnist-train.tfrecord-*-of-00003"))
    with pytest.warns(UserWarning, match="1 TFDS shard"):
        partial = MultiTFRecordDataset(files[:2], None, None, ["id"], infinite=False)
        assert sorted(_take(partial, 10**6, 0)) == list(range(100))


def test_seeded_order_is_reproducible(splits_dir):
    def run(seed, epoch):
        ds = MultiTFRecordDataset(
            str(splits_dir / "{}.tfrecord"),
            None,
            {"a": 1, "b": 1},
            ["id"],
            shuffle_queue_size=32,
            infinite=False,
            seed=seed,
        )
        ds.set_epoch(epoch)
        return _take(ds, 10**6, 2)

    first = run(1, 0)
    assert run(1, 0) == first
    assert run(1, 1) != first and run(2, 0) != first
    assert sorted(first) == list(range(A)) + list(range(1000, 1000 + B))


def test_transform_applies(splits_dir):
    ds = MultiTFRecordDataset(
        str(splits_dir / "{}.tfrecord"),
        None,
        {"b": 1},
        ["id"],
        infinite=False,
        transform=lambda r: int(r["id"][0]) - 1000,
    )
    assert sorted(ds) == list(range(B))


def test_tiny_split_with_more_workers_than_records(splits_dir, tmp_path):
    write_examples(str(tmp_path / "tiny.tfrecord"), [5000, 5001])
    ds = MultiTFRecordDataset(
        {"a": str(splits_dir / "a.tfrecord"), "tiny": str(tmp_path / "tiny.tfrecord")},
        None,
        {"a": 1, "tiny": 1},
        ["id"],
    )
    got = _take(ds, 2000, 3)  # worker 2 has no tiny record: it samples only "a", never spins
    assert len(got) == 2000 and {5000, 5001} <= set(got)


def test_index_pattern_for_a_split_of_many_files(tmp_path):
    for k in range(2):
        write_examples(str(tmp_path / f"ds-train.tfrecord-{k:05d}-of-00002"), range(k * 10, k * 10 + 10), index=True)
    with pytest.raises(ValueError, match="index_pattern='auto'"):
        MultiTFRecordDataset(str(tmp_path / "ds-{}.tfrecord-*"), str(tmp_path / "{}.index"), {"train": 1}).sources()
    ds = MultiTFRecordDataset(str(tmp_path / "ds-{}.tfrecord-*"), "auto", {"train": 1}, ["id"], infinite=False)
    assert len(ds) == 20 and sorted(int(r["id"][0]) for r in ds) == list(range(20))


def test_reading_options_as_one_object_and_global_shuffle_refused(splits_dir):
    """The same ``ReadOptions`` as the other datasets; ``shuffle="global"`` is refused
    (the weighted draw, not a permutation, orders the records across splits)."""
    pattern = str(splits_dir / "{}.tfrecord")
    kw = dict(shuffle_queue_size=16, shuffle_files=True, seed=2, check_crc=False)
    a = MultiTFRecordDataset(pattern, "auto", {"a": 0.5, "b": 0.5}, ["id"], infinite=False, **kw)
    b = MultiTFRecordDataset(pattern, "auto", {"a": 0.5, "b": 0.5}, ["id"], infinite=False, options=ReadOptions(**kw))
    assert a.options == b.options
    assert _take(a, A + B, 0) == _take(b, A + B, 0)
    with pytest.raises(ValueError, match="shuffle='global' does not apply"):
        MultiTFRecordDataset(pattern, "auto", {"a": 1.0}, ["id"], shuffle="global", seed=1)
    with pytest.raises(ValueError, match="shuffle='global' does not apply"):
        MultiTFRecordDataset(pattern, "auto", {"a": 1.0}, ["id"], options=ReadOptions(shuffle="global"))
