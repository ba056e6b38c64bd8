"""TFRecordDataset through a real DataLoader: every record exactly once per epoch across
workers and (simulated) ranks, with and without index, plain and compressed; lengths,
seeded shuffles, transforms, errors from workers, and agreement with the ``tfrecord``
package's output."""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tfrecord_io.errors import CorruptRecordError, ExampleCodecError
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.torch import ReadOptions, TFRecordDataset, pad_collate
from tfrecord_io.torch.dataset import TFRecordDataset as TFRecordDatasetFromModule

from tests.torch_data import corrupt_data_byte, drain, write_examples, write_sequences

N = 600
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")


def ids_of(batch):
    return [int(r["id"][0]) for r in batch]


def epoch_ids(ds, workers, batch_size=16):
    return drain(DataLoader(ds, batch_size=batch_size, num_workers=workers, collate_fn=ids_of))


@pytest.fixture(scope="module")
def big_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("big")
    path = str(d / "data.tfrecord")
    index = write_examples(path, range(N), index=True)
    return path, index


@pytest.mark.parametrize("workers", [0, 2, 3])
@pytest.mark.parametrize("with_index", [True, False])
@pytest.mark.parametrize("world", [1, 2])
def test_exactly_once_workers_and_ranks(big_file, workers, with_index, world):
    path, index = big_file
    seen = Counter()
    for rank in range(world):
        ds = TFRecordDataset(path, index if with_index else None, ["id"], rank=rank, world_size=world)
        ids = epoch_ids(ds, workers)
        assert ids, f"rank {rank} read nothing"
        seen.update(ids)
    assert sorted(seen) == list(range(N))
    assert set(seen.values()) == {1}, "some record was read twice"


def test_ranks_from_environment(big_file, monkeypatch):
    path, _ = big_file
    seen = []
    for rank in range(2):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        part = epoch_ids(TFRecordDataset(path, None, ["id"]), 2)
        assert 0 < len(part) < N
        seen += part
    assert sorted(seen) == list(range(N))
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match="rank 2"):
        epoch_ids(TFRecordDataset(path, None, ["id"]), 0)


@pytest.mark.parametrize("n_files,workers", [(2, 3), (5, 2)])
def test_compressed_files_exactly_once(tmp_path, n_files, workers):
    paths = [str(tmp_path / f"p{k}.tfrecord.gz") for k in range(n_files)]
    for k, p in enumerate(paths):
        write_examples(p, range(k * 40, (k + 1) * 40), compression="gzip")
    ds = TFRecordDataset(paths, None, ["id"], compression_type="gzip")
    assert sorted(epoch_ids(ds, workers)) == list(range(n_files * 40))
    with pytest.raises(TypeError):
        len(ds)


def test_file_list_with_auto_index_and_empty_file(tmp_path):
    paths = [str(tmp_path / f"f{k}.tfrecord") for k in range(3)]
    write_examples(paths[0], range(0, 50), index=True)
    RecordWriter(paths[1]).close()  # empty file
    write_examples(paths[2], range(50, 120), index=True)
    ds = TFRecordDataset(paths, "auto", ["id"])
    assert len(ds) == 120
    assert sorted(epoch_ids(ds, 3)) == list(range(120))


def test_len_is_this_ranks_share(big_file):
    path, index = big_file
    lens = [len(TFRecordDataset(path, index, ["id"], rank=r, world_size=3)) for r in range(3)]
    assert sum(lens) == N and max(lens) - min(lens) <= 1
    for workers in (0, 3):
        ds = TFRecordDataset(path, index, ["id"], rank=1, world_size=3)
        assert len(epoch_ids(ds, workers)) == lens[1]
    assert len(DataLoader(TFRecordDataset(path, index, ["id"]), batch_size=16)) == (N + 15) // 16
    with pytest.raises(TypeError, match="index"):
        len(TFRecordDataset(path, None))


def test_shuffle_is_reproducible_from_torch_seed(big_file):
    path, index = big_file
    ds = TFRecordDataset(path, index, ["id"], shuffle_queue_size=64)
    runs = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        loader = DataLoader(ds, batch_size=16, num_workers=2, collate_fn=ids_of)
        first = [i for b in loader for i in b]
        second = [i for b in loader for i in b]  # the next epoch
        runs.append((first, second))
    assert runs[0] == runs[1]  # same torch seed, same order
    assert runs[0][0] != runs[0][1]  # a new order each epoch
    assert runs[0][0] != runs[2][0]  # another seed, another order
    for order in runs[0] + runs[2]:
        assert sorted(order) == list(range(N)) and order != sorted(order)


def test_shuffle_in_main_process_follows_torch_seed(big_file):
    path, index = big_file
    ds = TFRecordDataset(path, index, ["id"], shuffle_queue_size=32, shuffle_files=True)
    torch.manual_seed(3)
    a = epoch_ids(ds, 0)
    torch.manual_seed(3)
    assert epoch_ids(ds, 0) == a and sorted(a) == list(range(N)) and a != sorted(a)


def test_explicit_seed_and_set_epoch(tmp_path):
    paths = [str(tmp_path / f"f{k}.tfrecord") for k in range(6)]
    for k, p in enumerate(paths):
        write_examples(p, range(k * 30, (k + 1) * 30))
    orders = {}
    for epoch in (0, 1, 0):
        seen = []
        for rank in range(2):
            ds = TFRecordDataset(
                paths, None, ["id"], shuffle_queue_size=16, shuffle_files=True, seed=5, rank=rank, world_size=2
            )
            ds.set_epoch(epoch)
            torch.manual_seed(epoch * 100 + rank)  # must not matter with an explicit seed
            seen.append(epoch_ids(ds, 2))
        assert sorted(seen[0] + seen[1]) == list(range(180))
        orders.setdefault(epoch, seen)
        assert orders[epoch] == seen
    assert orders[0] != orders[1]
    assert orders[0][0][:30] != list(range(30))


def test_shuffle_files_across_ranks_needs_seed(big_file):
    path, _ = big_file
    ds = TFRecordDataset(path, None, shuffle_files=True, rank=0, world_size=2)
    with pytest.raises(ValueError, match="seed"):
        next(iter(ds))


def test_transform_and_padding_collate(big_file):
    path, index = big_file
    ds = TFRecordDataset(
        path, index, {"id": "int", "tokens": "int", "payload": "byte"}, transform=lambda r: {**r, "twice": r["id"] * 2}
    )
    batch = next(iter(DataLoader(ds, batch_size=32, num_workers=2, collate_fn=pad_collate)))
    assert torch.equal(batch["twice"][:, 0], batch["id"][:, 0] * 2)
    lengths = batch["tokens_length"]
    assert batch["tokens"].shape == (32, int(lengths.max()))
    assert isinstance(batch["payload"], list) and len(batch["payload"]) == 32


def test_corrupt_record_error_surfaces_from_worker(tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    write_examples(path, range(300))
    offset = corrupt_data_byte(path, 250)
    ds = TFRecordDataset(path, None, ["id"])
    with pytest.raises(RuntimeError, match=rf"bad.tfrecord, byte offset {offset}: corrupt record data") as err:
        epoch_ids(ds, 2)
    assert isinstance(err.value, CorruptRecordError)


def test_unparsable_record_names_file_and_offset(tmp_path):
    path = str(tmp_path / "junk.tfrecord")
    with RecordWriter(path) as w:
        w.write_record(b"\x0a\x05\x0a\x03abc")  # fine framing, not an Example with 'id'
        w.write_record(b"\xff\xff\xff")
    with pytest.raises(ExampleCodecError, match="junk.tfrecord, byte offset 0"):
        list(TFRecordDataset(path, None, ["id"]))


def test_sequence_examples(tmp_path):
    path = str(tmp_path / "seq.tfrecord")
    write_sequences(path, range(40))
    ds = TFRecordDataset(path, None, ["id"], sequence_description=[])  # empty: every list
    context, features = next(iter(ds))
    assert int(context["id"][0]) == 0 and set(features) == {"frames"}
    ctx, feats = next(iter(DataLoader(ds, batch_size=8, num_workers=2, collate_fn=pad_collate)))
    assert ctx["id"].shape == (8, 1)
    assert feats["frames"].shape[0] == 8 and feats["frames"].shape[2] == 3
    assert feats["frames"].shape[1] == int(feats["frames_length"].max())


def test_same_output_as_the_tfrecord_package(big_file):
    tfrecord_torch = pytest.importorskip("tfrecord.torch.dataset")
    path, index = big_file
    description = {"id": "int", "tokens": "int", "score": "float"}
    ours = list(TFRecordDataset(path, index, description))
    # with an index and no shard, the tfrecord package starts at a random record and wraps
    theirs = sorted(tfrecord_torch.TFRecordDataset(path, index, description), key=lambda r: int(r["id"][0]))
    assert len(ours) == len(theirs) == N
    for a, b in zip(ours, theirs):
        assert a.keys() == b.keys()
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
    assert TFRecordDatasetFromModule is TFRecordDataset


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.tfrecord"):
        list(TFRecordDataset(os.path.join(str(tmp_path), "nope.tfrecord"), None))


def test_corrupt_record_with_index_surfaces_from_worker(tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    index = write_examples(path, range(300), index=True)
    offset = corrupt_data_byte(path, 120)
    ds = TFRecordDataset(path, index, ["id"])
    with pytest.raises(RuntimeError, match=rf"bad.tfrecord, byte offset {offset}: corrupt record data"):
        epoch_ids(ds, 2)


def test_persistent_workers_reshuffle_each_epoch(big_file):
    path, index = big_file
    for seed in (None, 4):
        ds = TFRecordDataset(path, index, ["id"], shuffle_queue_size=64, seed=seed)
        torch.manual_seed(0)
        loader = DataLoader(ds, batch_size=16, num_workers=2, persistent_workers=True, collate_fn=ids_of)
        first, second = ([i for b in loader for i in b] for _ in range(2))
        assert sorted(first) == sorted(second) == list(range(N))
        assert first != second


def test_pickled_dataset_reads_the_same(big_file):
    import pickle

    path, index = big_file
    ds = TFRecordDataset(path, index, ["id"], rank=1, world_size=2)
    expected = [int(r["id"][0]) for r in ds]  # caches the file descriptions
    clone = pickle.loads(pickle.dumps(ds))  # as a spawned worker receives it
    assert [int(r["id"][0]) for r in clone] == expected and len(clone) == len(expected)


def test_index_path_arguments_are_checked(tmp_path):
    a, b = str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")
    ia = write_examples(a, range(10), index=True)
    ib = write_examples(b, range(10, 30), index=True)
    assert sorted(int(r["id"][0]) for r in TFRecordDataset([a, b], [ia, ib], ["id"])) == list(range(30))
    with pytest.raises(ValueError, match="one index path per data file"):
        list(TFRecordDataset([a, b], ia))
    with pytest.raises(ValueError, match="2 data files but 1"):
        list(TFRecordDataset([a, b], [ia]))


def test_unshuffled_reading_leaves_torch_rng_alone(big_file):
    path, index = big_file
    torch.manual_seed(9)
    expected = torch.rand(3)
    torch.manual_seed(9)
    assert len(list(TFRecordDataset(path, index, ["id"]))) == N
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------------- reading options


def test_reading_options_as_keywords_positionally_or_as_one_object_read_alike(big_file, tmp_path):
    """The constructors take the reading options as before (keywords; shuffle_queue_size
    and compression_type also positionally) or as one ``ReadOptions``: the same records
    in the same order, and the options are on the dataset."""
    path, index = big_file
    kw = dict(shuffle_files=True, seed=4, rank=1, world_size=2, check_crc=False)
    options = ReadOptions(shuffle_queue_size=32, compression_type=None, **kw)
    by_keywords = TFRecordDataset(path, index, ["id"], shuffle_queue_size=32, **kw)
    by_position = TFRecordDataset(path, index, ["id"], 32, None, None, None, **kw)
    by_object = TFRecordDataset(path, index, ["id"], options=options)
    assert by_keywords.options == by_position.options == by_object.options == options
    want = epoch_ids(by_keywords, 0)
    assert epoch_ids(by_position, 0) == epoch_ids(by_object, 0) == want
    assert want != sorted(want) and len(want) == N // 2  # shuffled, this rank's half
    # one object for several datasets (e.g. training and validation), gzip named positionally
    gz = str(tmp_path / "data.tfrecord.gz")
    write_examples(gz, range(50), compression="gzip")
    gz_options = ReadOptions(compression_type="gzip", seed=1, shuffle_queue_size=8)
    assert sorted(epoch_ids(TFRecordDataset(gz, None, ["id"], options=gz_options), 0)) == list(range(50))
    assert epoch_ids(TFRecordDataset(gz, None, ["id"], options=gz_options), 0) == epoch_ids(
        TFRecordDataset(gz, None, ["id"], 8, None, None, "gzip", seed=1), 0
    )


def test_reading_options_given_two_ways_or_unknown_are_refused(big_file):
    path, index = big_file
    with pytest.raises(TypeError, match=r"both as options= and as keywords \(seed\)"):
        TFRecordDataset(path, index, options=ReadOptions(seed=1), seed=2)
    with pytest.raises(TypeError, match=r"both as options= and as keywords \(shuffle_queue_size\)"):
        TFRecordDataset(path, index, None, 16, options=ReadOptions(seed=1))
    with pytest.raises(TypeError, match="unexpected keyword argument.*suffle_files"):
        TFRecordDataset(path, index, suffle_files=True)
    with pytest.raises(TypeError, match="takes a ReadOptions, not dict"):
        TFRecordDataset(path, index, options={"seed": 1})
    with pytest.raises(ValueError, match="shuffle_queue_size must be >= 0"):
        ReadOptions(shuffle_queue_size=-1)
    with pytest.raises(ValueError, match="global_window must be >= 1"):
        TFRecordDataset(path, index, shuffle="global", global_window=0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ReadOptions().seed = 3  # type: ignore[misc]
