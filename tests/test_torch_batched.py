"""TFRecordBatchDataset through real DataLoaders (batch_size=None): whole batches made in
the worker, every record exactly once per epoch across workers and ranks, len in
batches, drop_last, seeded shuffles, padding / flat ragged features, fixed shapes,
decoders and transforms, errors with file and offset from the worker."""

from __future__ import annotations

import re
import warnings
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tfrecord_io import tfrecord_iterator
from tfrecord_io.errors import CorruptRecordError, ExampleCodecError
from tfrecord_io.format.codec import parse_example
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.torch import TFRecordBatchDataset, batch_tensor

from tests.torch_data import corrupt_data_byte, example_bytes, record_offsets, write_examples

N = 600
DESC = {"id": "int", "tokens": "int", "score": "float", "payload": "bytes"}
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("batched") / "data.tfrecord")
    return path, write_examples(path, range(N), index=True)


def _record_at(path, offset):
    from tfrecord_io.format.random_access import IndexedRecordReader

    reader = IndexedRecordReader(path)
    number = [o for o, _ in record_offsets(path)].index(offset)
    return bytes(reader[number])


def batches(ds, workers, **loader_kwargs):
    """Every batch of one epoch; the workers are shut down even when an error propagates."""
    it = iter(DataLoader(ds, batch_size=None, num_workers=workers, **loader_kwargs))
    try:
        return list(it)
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


def ids(batch_list):
    return [int(i) for b in batch_list for i in b["id"].reshape(-1)]


@pytest.mark.parametrize("workers", [0, 2, 3])
@pytest.mark.parametrize("with_index", [True, False])
@pytest.mark.parametrize("world", [1, 2])
def test_every_record_once_in_whole_batches(big_file, workers, with_index, world):
    path, index = big_file
    seen = Counter()
    for rank in range(world):
        ds = TFRecordBatchDataset(path, index if with_index else None, DESC, 64, rank=rank, world_size=world)
        got = batches(ds, workers)
        assert got and all(isinstance(b["id"], torch.Tensor) for b in got)
        sizes = [len(b["id"]) for b in got]
        if with_index:
            # the rank's records in batches of 64: only its very last batch is short
            share = N // world
            assert len(got) == len(ds) == -(-share // 64)
            assert sorted(sizes)[1:] == [64] * (len(sizes) - 1) and sum(sizes) == share
        seen.update(ids(got))
    assert sorted(seen) == list(range(N))
    assert set(seen.values()) == {1}


def test_len_in_batches_does_not_depend_on_workers(big_file):
    path, index = big_file
    ds = TFRecordBatchDataset(path, index, DESC, 100, rank=1, world_size=3)  # 200 records
    assert len(ds) == 2
    for workers in (0, 2, 3):
        assert len(DataLoader(ds, batch_size=None, num_workers=workers)) == 2
        assert [len(b["id"]) for b in batches(ds, workers)] == [100, 100]
    with pytest.raises(TypeError, match="index"):
        len(TFRecordBatchDataset(path, None, DESC, 100))


@pytest.mark.parametrize("workers", [0, 3])
def test_drop_last_gives_every_rank_the_same_full_batches(big_file, workers):
    path, index = big_file
    per_rank = []
    for rank in range(3):  # 600 // 3 = 200 records a rank: 2 batches of 70, 60 dropped
        ds = TFRecordBatchDataset(
            path, index, DESC, 70, drop_last=True, rank=rank, world_size=3, shuffle_queue_size=50, seed=1
        )
        got = batches(ds, workers)
        assert len(ds) == 2 and [len(b["id"]) for b in got] == [70, 70]
        per_rank.append(ids(got))
    flat = [i for r in per_rank for i in r]
    assert len(set(flat)) == len(flat) == 420


def test_seeded_shuffle_and_set_epoch(big_file):
    path, index = big_file
    ds = TFRecordBatchDataset(path, index, DESC, 50, shuffle_queue_size=128, shuffle_files=True, seed=3)
    orders = {}
    for epoch in (0, 1, 0):
        ds.set_epoch(epoch)
        order = ids(batches(ds, 2))
        assert sorted(order) == list(range(N)) and order != sorted(order)
        assert orders.setdefault(epoch, order) == order
    assert orders[0] != orders[1]


def test_padding_and_flat_ragged_features_match_the_records(big_file):
    path, index = big_file
    want = {int(r["id"][0]): r for r in (parse_example(d, DESC) for d in tfrecord_iterator(path))}
    padded = batches(TFRecordBatchDataset(path, index, DESC, 64, padding_value=-1), 2)
    flat = batches(TFRecordBatchDataset(path, index, DESC, 64, ragged="flat"), 2)
    for pb, fb in zip(padded, flat):
        lengths = pb["tokens_length"]
        assert torch.equal(lengths, fb["tokens_length"])
        assert pb["tokens"].shape == (len(lengths), int(lengths.max()))
        offsets = np.concatenate([[0], np.cumsum(lengths.numpy())])
        for row, i in enumerate(pb["id"][:, 0].tolist()):
            n = int(lengths[row])
            assert pb["tokens"][row, :n].tolist() == want[i]["tokens"].tolist()
            assert (pb["tokens"][row, n:] == -1).all()
            assert fb["tokens"][offsets[row] : offsets[row + 1]].tolist() == want[i]["tokens"].tolist()
            assert pb["payload"][row] == bytes(want[i]["payload"])  # bytes, not views, leave the worker
        assert pb["score"].dtype == torch.float32 and pb["id_length"].tolist() == [1] * len(lengths)


def test_fixed_shapes_stack_and_a_wrong_length_names_the_record(tmp_path, big_file):
    path, index = big_file
    got = batches(TFRecordBatchDataset(path, index, DESC, 64, shapes={"id": (), "score": (1, 1)}), 2)
    assert got[0]["id"].shape == (64,) and got[0]["score"].shape == (64, 1, 1)
    assert "id_length" not in got[0] and "tokens_length" in got[0]
    bad = TFRecordBatchDataset(path, index, DESC, 64, shapes={"tokens": (3,)})
    offsets = [o for o, _ in record_offsets(path)]
    with pytest.raises(ExampleCodecError, match=r"data.tfrecord, byte offset \d+: feature 'tokens' has") as err:
        batches(bad, 2)
    offset = int(re.search(r"byte offset (\d+)", str(err.value)).group(1))
    record = parse_example(_record_at(path, offset), DESC)
    assert offset in offsets and len(record["tokens"]) != 3


def test_decoder_transform_and_batch_transform_run_in_the_worker(big_file):
    path, index = big_file

    def decode(data):
        r = parse_example(data, DESC)
        return {"id": int(r["id"][0]), "image": np.full((2, 3), int(r["id"][0]) % 7, np.uint8)}

    got = batches(TFRecordBatchDataset(path, index, None, 32, record_decoder=decode), 2)
    assert got[0]["image"].shape == (32, 2, 3) and sorted(ids(got)) == list(range(N))
    assert torch.equal(got[0]["image"][:, 0, 0], (got[0]["id"] % 7).to(torch.uint8))

    def payload_sizes(batch):  # bytes features reach the batch transform as views of the records
        assert all(isinstance(p, memoryview) for p in batch["payload"] if not isinstance(p, list))
        out = batch_tensor((len(batch["payload"]),), torch.int64)
        out[:] = torch.tensor([len(p) for p in batch["payload"]])
        return {"id": batch["id"], "size": out, "in_worker": torch.utils.data.get_worker_info() is not None}

    got = batches(TFRecordBatchDataset(path, index, DESC, 32, batch_transform=payload_sizes), 2)
    assert all(b["in_worker"] for b in got) and sorted(ids(got)) == list(range(N))
    got = batches(TFRecordBatchDataset(path, index, DESC, 32, transform=lambda r: {**r, "twice": r["id"] * 2}), 2)
    assert torch.equal(got[0]["twice"][:, 0], got[0]["id"][:, 0] * 2)


def test_large_arrays_travel_in_shared_memory_small_ones_by_pipe(big_file):
    path, index = big_file

    def big(batch):
        return {"id": batch["id"], "big": np.zeros((len(batch["id"]), 1 << 16), np.uint8)}

    got = batches(TFRecordBatchDataset(path, index, DESC, 32, batch_transform=big), 2)
    assert all(isinstance(b["big"], torch.Tensor) and b["big"].shape[1] == 1 << 16 for b in got)
    assert sorted(ids(got)) == list(range(N))


def test_pin_memory(big_file):
    path, index = big_file
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no accelerator here: torch warns and skips pinning
        got = batches(TFRecordBatchDataset(path, index, DESC, 64), 2, pin_memory=True)
    assert sorted(ids(got)) == list(range(N))
    if torch.cuda.is_available():
        assert got[0]["id"].is_pinned()


def test_corrupt_record_surfaces_from_worker_with_path_and_offset(tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    index = write_examples(path, range(300), index=True)
    offset = corrupt_data_byte(path, 170)
    for idx in (index, None):
        ds = TFRecordBatchDataset(path, idx, DESC, 32, shuffle_queue_size=40, seed=0)
        with pytest.raises(RuntimeError, match=rf"bad.tfrecord, byte offset {offset}: corrupt record data") as err:
            batches(ds, 2)
        assert isinstance(err.value, CorruptRecordError) or "CorruptRecordError" in str(err.value)


def test_unparsable_record_names_file_and_offset(tmp_path):
    import random

    path = str(tmp_path / "mixed.tfrecord")
    rng = random.Random(0)
    with RecordWriter(path) as w:
        for i in range(100):
            w.write_record(b"\xff\xffnot an example" if i == 61 else example_bytes(i, rng))
    bad_offset = record_offsets(path)[61][0]
    with pytest.raises(RuntimeError, match=rf"mixed.tfrecord, byte offset {bad_offset}: not a valid"):
        batches(TFRecordBatchDataset(path, None, DESC, 16), 2)


def test_compressed_files_batch_per_worker(tmp_path):
    paths = [str(tmp_path / f"p{k}.tfrecord.gz") for k in range(3)]
    for k, p in enumerate(paths):
        write_examples(p, range(k * 50, (k + 1) * 50), compression="gzip")
    ds = TFRecordBatchDataset(paths, None, DESC, 20, compression_type="gzip")
    assert sorted(ids(batches(ds, 3))) == list(range(150))
    with pytest.raises(TypeError):
        len(ds)


def test_arguments_are_checked(big_file):
    path, index = big_file
    with pytest.raises(ValueError, match="batch_size"):
        TFRecordBatchDataset(path, index, DESC, 0)
    with pytest.raises(ValueError, match="ragged"):
        TFRecordBatchDataset(path, index, DESC, 8, ragged="nested")
    with pytest.raises(FileNotFoundError):
        TFRecordBatchDataset(path + ".missing", None, DESC, 8)
