"""TFRecordIndexedDataset: map-style random access for Samplers, files opened per worker,
CRCs checked, errors naming file and offset."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler

from tfrecord_io.errors import CorruptRecordError
from tfrecord_io.torch import TFRecordIndexedDataset, pad_collate

from tests.torch_data import corrupt_data_byte, drain, write_examples, write_sequences

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def ids_of(batch):
    return [int(r["id"][0]) for r in batch]


@pytest.fixture(scope="module")
def two_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("indexed")
    a, b = str(d / "a.tfrecord"), str(d / "b.tfrecord")
    write_examples(a, range(100), index=True)
    write_examples(b, range(100, 250))  # no index file: built in memory
    return [a, b]


def test_random_access_by_number(two_files):
    ds = TFRecordIndexedDataset(two_files, "auto", ["id", "tokens"])
    assert len(ds) == 250
    for i in (0, 99, 100, 249, -1):
        assert int(ds[i]["id"][0]) == i % 250


@pytest.mark.parametrize("workers", [0, 2, 3])
def test_shuffled_loader_reads_each_record_once(two_files, workers):
    ds = TFRecordIndexedDataset(two_files, "auto", ["id"])
    torch.manual_seed(0)
    loader = DataLoader(ds, batch_size=32, shuffle=True, num_workers=workers, collate_fn=ids_of)
    ids = [i for b in loader for i in b]
    assert sorted(ids) == list(range(250)) and ids != sorted(ids)


def test_distributed_sampler_two_ranks(two_files):
    ds = TFRecordIndexedDataset(two_files, "auto", ["id"])
    seen = Counter()
    for rank in range(2):
        sampler = DistributedSampler(ds, num_replicas=2, rank=rank, shuffle=True, seed=3)
        seen.update(i for b in DataLoader(ds, 25, sampler=sampler, num_workers=2, collate_fn=ids_of) for i in b)
    assert sorted(seen) == list(range(250)) and set(seen.values()) == {1}


def test_corrupt_record_surfaces_from_worker(tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    index = write_examples(path, range(60), index=True)
    offset = corrupt_data_byte(path, 42)
    ds = TFRecordIndexedDataset(path, index, ["id"])
    assert int(ds[41]["id"][0]) == 41
    loader = DataLoader(ds, batch_size=10, num_workers=2, collate_fn=ids_of)
    with pytest.raises(RuntimeError, match=rf"bad.tfrecord, byte offset {offset}: corrupt record data") as err:
        drain(loader)
    assert isinstance(err.value, CorruptRecordError)
    unchecked = TFRecordIndexedDataset(path, index, check_crc=False)
    assert len(unchecked.reader[42]) > 0  # the raw record reads without the CRC check


def test_transform_and_sequences(tmp_path):
    path = str(tmp_path / "seq.tfrecord")
    write_sequences(path, range(30))
    ds = TFRecordIndexedDataset(path, None, ["id"], transform=lambda r: (r[0], r[1]), sequence_description=["frames"])
    ctx, feats = next(iter(DataLoader(ds, batch_size=6, collate_fn=pad_collate)))
    assert ctx["id"][:, 0].tolist() == list(range(6))
    assert feats["frames"].shape[:1] == (6,) and feats["frames_length"].min() >= 1


def test_list_of_index_paths_must_match(two_files):
    with pytest.raises(ValueError):
        TFRecordIndexedDataset(two_files, two_files[0] + ".index")
    with pytest.raises(ValueError, match="2 data files but 1"):
        TFRecordIndexedDataset(two_files, [two_files[0] + ".index"])
