"""Resuming the torch datasets mid-epoch: ``state_dict``/``load_state_dict`` directly
and through torchdata's real ``StatefulDataLoader`` with worker processes. The rest of
an epoch after a restore must equal what the uninterrupted run gave next, and the
restored run must seek (the records before the resume point are never read again)."""

from __future__ import annotations

import os
import pickle
import warnings

import pytest
import torch

# torchdata is a dev dependency like pytest (pyproject.toml): imported, never skipped, so
# that an environment without it fails here instead of passing without the resume tests
from torchdata.stateful_dataloader import StatefulDataLoader

from tfrecord_io.errors import CorruptRecordError
from tfrecord_io.torch import (
    MultiTFRecordDataset,
    StateError,
    TFRecordBatchDataset,
    TFRecordDataset,
    from_dataset,
)

from tests.torch_data import build_tiny_dataset, corrupt_data_byte, write_examples, write_indexed_parts

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

SIZES = (37, 80, 23)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """Three indexed files with ids 0..139 (37, 80 and 23 records)."""
    return write_indexed_parts(str(tmp_path_factory.mktemp("resume")), SIZES, "part")


def corrupt_by_index(path, record):
    """Flip a data byte of record ``record`` (found through the file's index)."""
    from tfrecord_io.format.index import load_index

    idx = load_index(path + ".index")
    at = int(idx.offsets[record]) + 12 + (int(idx.sizes[record]) - 16) // 2
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))


def ids_of(item):
    """The ids in a record dict or a batch dict."""
    value = item["id"]
    return [int(v) for v in (value.reshape(-1).tolist() if hasattr(value, "reshape") else value)]


def roundtrip(state):
    """A state as it comes back from a checkpoint (pickled, as torch.save does)."""
    return pickle.loads(pickle.dumps(state))


def make(kind, paths, index="auto", **kw):
    if kind == "records":
        return TFRecordDataset(paths, index, ["id"], **kw)
    return TFRecordBatchDataset(paths, index, {"id": "int"}, batch_size=7, **kw)


CONFIGS = [
    pytest.param({}, id="plain"),
    pytest.param({"shuffle_queue_size": 16}, id="buffer"),
    pytest.param({"shuffle_files": True}, id="files"),
    pytest.param({"shuffle_queue_size": 9, "shuffle_files": True}, id="buffer+files"),
    pytest.param({"shuffle": "global"}, id="global"),
    pytest.param({"shuffle": "global", "shuffle_queue_size": 5, "global_window": 10}, id="global+buffer"),
]


@pytest.mark.parametrize("kind", ["records", "batches"])
@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("stop", [0, 1, 5, 12])
def test_resume_in_process_gives_exactly_the_rest(shards, kind, config, stop):
    ds = make(kind, shards, seed=3, **config)
    ds.set_epoch(2)
    it = iter(ds)
    head = [ids_of(next(it)) for _ in range(stop)]
    state = roundtrip(ds.state_dict())
    rest = [ids_of(x) for x in it]

    again = make(kind, shards, seed=3, **config)
    again.load_state_dict(state)
    assert [ids_of(x) for x in again] == rest
    everything = [i for part in head + rest for i in part]
    assert sorted(everything) == list(range(sum(SIZES)))  # the epoch: every record once


@pytest.mark.parametrize("index", ["auto", None])
def test_resume_without_a_seed_and_without_indexes(shards, index):
    """Seeds drawn from torch's generator are part of the state, and unindexed files
    resume at the saved frame boundary."""
    torch.manual_seed(11)
    ds = make("records", shards, index=index, shuffle_queue_size=8, shuffle_files=True)
    it = iter(ds)
    head = [ids_of(next(it)) for _ in range(50)]
    state = roundtrip(ds.state_dict())
    rest = [ids_of(x) for x in it]
    torch.manual_seed(999)  # another torch seed: the state's seeds win
    again = make("records", shards, index=index, shuffle_queue_size=8, shuffle_files=True)
    again.load_state_dict(state)
    assert [ids_of(x) for x in again] == rest
    assert sorted(i for p in head + rest for i in p) == list(range(sum(SIZES)))


def test_resume_compressed_files(tmp_path):
    paths = []
    for k in range(2):
        path = str(tmp_path / f"c{k}.tfrecord.gz")
        write_examples(path, range(k * 40, k * 40 + 40), compression="gzip")
        paths.append(path)
    ds = TFRecordDataset(paths, None, ["id"], shuffle_queue_size=6, seed=1, rank=0, world_size=1)
    it = iter(ds)
    head = [ids_of(next(it)) for _ in range(47)]
    state = roundtrip(ds.state_dict())
    rest = [ids_of(x) for x in it]
    again = TFRecordDataset(paths, None, ["id"], shuffle_queue_size=6, seed=1)
    again.load_state_dict(state)
    assert [ids_of(x) for x in again] == rest
    assert sorted(i for p in head + rest for i in p) == list(range(80))


def test_resume_a_compressed_file_shared_by_two_ranks(tmp_path):
    """Fewer compressed files than shards: each rank decompresses the file and keeps
    every second record; a resumed rank keeps the same ones."""
    path = str(tmp_path / "shared.tfrecord.gz")
    write_examples(path, range(50), compression="gzip")
    for rank in range(2):
        ds = TFRecordDataset(path, None, ["id"], rank=rank, world_size=2)
        whole = [ids_of(x)[0] for x in ds]
        assert whole == list(range(rank, 50, 2))
        it = iter(ds)
        head = [ids_of(next(it))[0] for _ in range(7)]
        state = roundtrip(ds.state_dict())
        again = TFRecordDataset(path, None, ["id"], rank=rank, world_size=2)
        again.load_state_dict(state)
        assert head + [ids_of(x)[0] for x in again] == whole


def test_resume_a_multi_dataset(shards, tmp_path):
    mapping = {"a": shards[:2], "b": shards[2:]}
    kw = dict(splits={"a": 0.7, "b": 0.3}, description=["id"], infinite=False, seed=5, shuffle_queue_size=4)
    ds = MultiTFRecordDataset(mapping, "auto", **kw)
    it = iter(ds)
    head = [ids_of(next(it)) for _ in range(60)]
    state = roundtrip(ds.state_dict())
    rest = [ids_of(x) for x in it]
    again = MultiTFRecordDataset(mapping, "auto", **kw)
    again.load_state_dict(state)
    assert [ids_of(x) for x in again] == rest
    assert sorted(i for p in head + rest for i in p) == list(range(sum(SIZES)))


def test_resume_an_infinite_multi_dataset_across_a_restart(shards):
    mapping = {"a": shards[2:]}  # 23 records, cycled
    kw = dict(splits={"a": 1.0}, description=["id"], infinite=True, seed=5)
    ds = MultiTFRecordDataset(mapping, "auto", **kw)
    it = iter(ds)
    [next(it) for _ in range(30)]  # into the second pass
    state = roundtrip(ds.state_dict())
    rest = [ids_of(next(it)) for _ in range(40)]
    again = MultiTFRecordDataset(mapping, "auto", **kw)
    again.load_state_dict(state)
    it2 = iter(again)
    assert [ids_of(next(it2)) for _ in range(40)] == rest


# ---------------------------------------------------------------------- the state's epoch


@pytest.mark.parametrize("kind", ["records", "batches"])
@pytest.mark.parametrize("config", [{"shuffle": "global"}, {"shuffle_queue_size": 9, "shuffle_files": True}])
def test_set_epoch_of_another_epoch_before_resuming_is_refused(shards, kind, config):
    """A loaded state resumes its own epoch: the global permutation (like every other
    seed) is that epoch's. ``set_epoch`` of another epoch before the resumed iterator
    runs is refused; the same epoch resumes exactly the rest."""
    ds = make(kind, shards, seed=3, **config)
    ds.set_epoch(2)
    it = iter(ds)
    [next(it) for _ in range(4)]
    state = roundtrip(ds.state_dict())
    rest = [ids_of(x) for x in it]

    again = make(kind, shards, seed=3, **config)
    again.load_state_dict(state)
    with pytest.raises(StateError, match=r"set_epoch\(5\) after load_state_dict of a state in epoch 2"):
        again.set_epoch(5)
    again.set_epoch(2)  # the state's epoch: what a training loop restarted at that epoch calls
    assert [ids_of(x) for x in again] == rest
    again.set_epoch(3)  # nothing pending any more: the next epoch starts fresh
    fresh = make(kind, shards, seed=3, **config)
    fresh.set_epoch(3)
    assert [ids_of(x) for x in again] == [ids_of(x) for x in fresh]


def test_a_finished_state_then_another_epoch_starts_that_epoch(shards):
    """A state saved after the last record has nothing left to resume: ``set_epoch`` of
    the next epoch drops it, and the next iterator reads all of that epoch."""
    ds = make("records", shards, seed=3, shuffle="global")
    ds.set_epoch(1)
    list(ds)
    state = roundtrip(ds.state_dict())
    assert state["finished"]
    again = make("records", shards, seed=3, shuffle="global")
    again.load_state_dict(state)
    assert list(again) == []  # the rest of epoch 1: nothing
    again.load_state_dict(state)
    again.set_epoch(2)
    fresh = make("records", shards, seed=3, shuffle="global")
    fresh.set_epoch(2)
    got = [ids_of(x) for x in again]
    assert got == [ids_of(x) for x in fresh] and len(got) == sum(SIZES)


# ---------------------------------------------------------------------- seeking


@pytest.mark.parametrize("index", ["auto", None])
@pytest.mark.parametrize("kind", ["records", "batches"])
def test_a_restored_run_never_reads_the_records_before_its_position(tmp_path, index, kind):
    """Corrupt a record before the resume point: a full read fails on it, the restored
    run does not (so it seeks instead of reading and dropping)."""
    path = str(tmp_path / "one.tfrecord")
    write_examples(path, range(100), index=True)
    ds = make(kind, [path], index=index)
    it = iter(ds)
    taken = [i for _ in range(20 if kind == "records" else 3) for i in ids_of(next(it))]
    state = roundtrip(ds.state_dict())
    rest = [i for x in it for i in ids_of(x)]
    assert taken[-1] > 10
    corrupt_data_byte(path, 3)
    with pytest.raises(CorruptRecordError):
        list(make(kind, [path], index=index))
    again = make(kind, [path], index=index)
    again.load_state_dict(state)
    assert [i for x in again for i in ids_of(x)] == rest


def test_buffered_records_are_read_again_by_offset_with_crcs(tmp_path):
    path = str(tmp_path / "one.tfrecord")
    write_examples(path, range(60), index=True)
    ds = TFRecordDataset(path, "auto", ["id"], shuffle_queue_size=20, seed=0)
    it = iter(ds)
    [next(it) for _ in range(5)]
    state = roundtrip(ds.state_dict())
    buffered = state["buffer"]["records"]
    assert len(buffered) == 20 and all(isinstance(n, int) for _, _, n in buffered)  # places, not bytes
    offsets = [o for _, o, _ in buffered]
    from tests.torch_data import record_offsets

    number = [o for o, _ in record_offsets(path)].index(offsets[0])
    corrupt_data_byte(path, number)
    again = TFRecordDataset(path, "auto", ["id"], shuffle_queue_size=20, seed=0)
    again.load_state_dict(state)
    with pytest.raises(CorruptRecordError) as err:
        list(again)
    assert err.value.offset == offsets[0] and path in str(err.value)


# ---------------------------------------------------------------------- StatefulDataLoader


def _loader(ds, workers, batch_size):
    return StatefulDataLoader(ds, batch_size=batch_size, num_workers=workers, snapshot_every_n_steps=1)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize(
    "kind,config",
    [
        ("records", {"shuffle_queue_size": 12, "shuffle_files": True}),
        ("batches", {"shuffle_queue_size": 12}),
        ("batches", {"shuffle": "global"}),
        ("records", {"shuffle": "global", "shuffle_queue_size": 4}),
    ],
)
def test_stateful_dataloader_resumes_each_worker(shards, tmp_path, workers, kind, config):
    """The loader's state restores each worker's position; the records consumed before
    it are then corrupted on disk, and the restored run still reads on (it seeks; a
    replay would fail on them)."""
    import shutil

    copies = []
    for p in shards:
        for suffix in ("", ".index"):
            shutil.copy(p + suffix, str(tmp_path / os.path.basename(p + suffix)))
        copies.append(str(tmp_path / os.path.basename(p)))
    batch = 5 if kind == "records" else None

    def loader():
        return _loader(make(kind, copies, seed=7, **config), workers, batch)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = [ids_of(b) for b in loader()]
        first = loader()
        it = iter(first)
        head = [ids_of(next(it)) for _ in range(6)]
        state = roundtrip(first.state_dict())
        del it, first
        for i in head[0][:3]:  # consumed before the state was taken
            k = next(k for k in range(len(SIZES)) if i < sum(SIZES[: k + 1]))
            corrupt_by_index(copies[k], i - sum(SIZES[:k]))
        with pytest.raises(CorruptRecordError):
            list(loader())
        second = loader()
        second.load_state_dict(state)
        rest = [ids_of(b) for b in second]
    assert head == full[:6]
    assert rest == full[6:]
    assert sorted(i for b in full for i in b) == list(range(sum(SIZES)))


def test_stateful_dataloader_keeps_exactly_once_across_ranks(shards):
    """Two ranks x two workers, each rank interrupted and restored: together every
    record once."""
    seen = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for rank in range(2):
            kw = dict(seed=4, shuffle_queue_size=10, shuffle_files=True, rank=rank, world_size=2)
            first = _loader(make("batches", shards, **kw), 2, None)
            it = iter(first)
            seen += [i for _ in range(3) for i in ids_of(next(it))]
            state = roundtrip(first.state_dict())
            del it, first
            second = _loader(make("batches", shards, **kw), 2, None)
            second.load_state_dict(state)
            seen += [i for b in second for i in ids_of(b)]
    assert sorted(seen) == list(range(sum(SIZES)))


def _interrupted(make_loader, steps):
    """(the batches of an uninterrupted epoch, those of a loader interrupted after
    ``steps`` batches and restored from its state into a new loader): equal when the
    resume is exact."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        full = [[ids_of(b) for b in make_loader()]]
        first = make_loader()
        it = iter(first)
        head = [ids_of(next(it)) for _ in range(steps)]
        state = roundtrip(first.state_dict())
        del it, first
        second = make_loader()
        second.load_state_dict(state)
        rest = [ids_of(b) for b in second]
    assert head == full[0][:steps]
    return full, head + rest


def test_stateful_dataloader_resumes_a_multi_dataset_with_workers(shards):
    mapping = {"a": shards[:2], "b": shards[2:]}
    kw = dict(splits={"a": 0.6, "b": 0.4}, description=["id"], infinite=False, seed=5, shuffle_queue_size=6)

    def loader():
        ds = MultiTFRecordDataset(mapping, "auto", **kw)
        return StatefulDataLoader(ds, batch_size=4, num_workers=2, snapshot_every_n_steps=1)

    full, resumed = _interrupted(loader, 7)
    assert resumed == full[0]
    assert sorted(i for b in full[0] for i in b) == list(range(sum(SIZES)))


def test_stateful_dataloader_resumes_from_dataset_records_with_workers(built):
    """``from_dataset(..., batch_size=None)``: single records batched by the loader."""

    def loader():
        ds = from_dataset(built, "train", features=["n"], seed=2, shuffle_queue_size=8, shuffle_files=True)
        return StatefulDataLoader(ds, batch_size=5, num_workers=2, snapshot_every_n_steps=1)

    full, resumed = _interrupted(lambda: _Ids(loader(), "n"), 5)
    assert resumed == full[0]
    ns = [i for b in full[0] for i in b]
    assert len(set(ns)) == len(ns) == from_dataset(built, "train", features=["n"]).selection.count


class _Ids:
    """A loader whose batches are ``{"id": ...}`` of another feature (for ``ids_of``)."""

    def __init__(self, loader, key):
        self.loader, self.key = loader, key

    def __iter__(self):
        return ({"id": b[self.key]} for b in self.loader)

    def state_dict(self):
        return self.loader.state_dict()

    def load_state_dict(self, state):
        self.loader.load_state_dict(state)


@pytest.mark.parametrize("config", [{"shuffle_queue_size": 10, "shuffle_files": True}, {"shuffle": "global"}])
def test_stateful_dataloader_resumes_persistent_workers_in_a_later_epoch(shards, config):
    """Persistent workers keep their copy and count their passes (every epoch a new
    order without ``set_epoch``): interrupted in the second epoch and restored into a new
    loader, the rest of that epoch and the whole third one are what an uninterrupted
    loader gives."""

    def loader():
        ds = make("batches", shards, seed=7, **config)
        return StatefulDataLoader(ds, batch_size=None, num_workers=2, persistent_workers=True, snapshot_every_n_steps=1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = loader()
        epochs = [[ids_of(b) for b in reference] for _ in range(3)]
        first = loader()
        list(first)
        it = iter(first)
        head = [ids_of(next(it)) for _ in range(4)]
        state = roundtrip(first.state_dict())
        del it, first
        second = loader()
        second.load_state_dict(state)
        rest = [ids_of(b) for b in second]
        third = [ids_of(b) for b in second]
    assert epochs[0] != epochs[1] != epochs[2]  # persistent workers still shuffle per epoch
    assert head + rest == epochs[1]
    assert third == epochs[2]
    for epoch in epochs:
        assert sorted(i for b in epoch for i in b) == list(range(sum(SIZES)))


# ---------------------------------------------------------------------- refusals


def test_a_state_of_another_dataset_seed_or_setting_is_refused(shards, tmp_path):
    ds = make("batches", shards, seed=1, shuffle_queue_size=4)
    it = iter(ds)
    next(it)
    state = roundtrip(ds.state_dict())
    with pytest.raises(StateError, match="seed"):
        make("batches", shards, seed=2, shuffle_queue_size=4).load_state_dict(state)
    with pytest.raises(StateError, match="files"):
        make("batches", shards[:2], seed=1, shuffle_queue_size=4).load_state_dict(state)
    with pytest.raises(StateError, match="batch_size"):
        TFRecordBatchDataset(shards, "auto", {"id": "int"}, batch_size=8, seed=1, shuffle_queue_size=4).load_state_dict(
            state
        )
    with pytest.raises(StateError, match="shuffle"):
        make("batches", shards, seed=1, shuffle_queue_size=4, shuffle="global").load_state_dict(state)
    with pytest.raises(StateError, match="class"):
        make("records", shards, seed=1, shuffle_queue_size=4).load_state_dict(state)
    with pytest.raises(StateError, match="another version"):
        make("batches", shards, seed=1, shuffle_queue_size=4).load_state_dict(dict(state, format="other/0"))
    with pytest.raises(StateError, match="no 'format'"):
        make("batches", shards, seed=1, shuffle_queue_size=4).load_state_dict({"position": 3})
    # a file rewritten with other records (same path) is another dataset too
    changed = str(tmp_path / "changed.tfrecord")
    write_examples(changed, range(37), index=True)
    ds2 = make("records", [changed], seed=1)
    it2 = iter(ds2)
    next(it2)
    saved = roundtrip(ds2.state_dict())
    write_examples(changed, range(40), index=True)
    with pytest.raises(StateError, match="files"):
        make("records", [changed], seed=1).load_state_dict(saved)


def test_a_state_of_another_worker_or_rank_is_refused(shards):
    ds = make("records", shards, seed=1, rank=0, world_size=2)
    it = iter(ds)
    next(it)
    state = roundtrip(ds.state_dict())
    other = make("records", shards, seed=1, rank=1, world_size=2)
    other.load_state_dict(state)
    with pytest.raises(StateError, match="rank 0 of 2.*rank 1 of 2"):
        iter(other)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_tiny_dataset(str(tmp_path_factory.mktemp("built")))


def test_from_dataset_resumes_and_refuses_another_selection(built):
    ds = from_dataset(built, "train[:80%]", batch_size=4, features=["n"], seed=2, shuffle="global")
    it = iter(ds)
    head = [int(v) for _ in range(3) for v in next(it)["n"]]
    state = roundtrip(ds.state_dict())
    rest = [int(v) for b in it for v in b["n"]]
    again = from_dataset(built, "train[:80%]", batch_size=4, features=["n"], seed=2, shuffle="global")
    again.load_state_dict(state)
    assert [int(v) for b in again for v in b["n"]] == rest
    assert len(set(head + rest)) == len(head + rest) == ds.selection.count
    with pytest.raises(StateError, match="train\\[:80%\\]"):
        from_dataset(built, "train[:70%]", batch_size=4, features=["n"], seed=2, shuffle="global").load_state_dict(
            state
        )


def test_a_state_of_another_version_is_refused(built, tmp_path):
    """The same dataset built again as another version (same files, same records): a
    state of one version does not resume the other (its rows or shards may differ)."""
    import shutil

    root = str(tmp_path / "root")
    shutil.copytree(built, root)
    shutil.copytree(os.path.join(root, "v1"), os.path.join(root, "v2"))
    ds = from_dataset(root, "train", version="v1", batch_size=4, features=["n"], seed=2)
    it = iter(ds)
    next(it)
    state = roundtrip(ds.state_dict())
    same = from_dataset(root, "train", version="v1", batch_size=4, features=["n"], seed=2)
    same.load_state_dict(state)  # the same version resumes
    with pytest.raises(StateError, match="origin.*version v1.*version v2"):
        from_dataset(root, "train", version="v2", batch_size=4, features=["n"], seed=2).load_state_dict(state)


def test_state_is_small(shards):
    """A state names places, not data: no record bytes in it for plain files."""
    ds = make("batches", shards, seed=1, shuffle="global")
    it = iter(ds)
    next(it)
    assert len(pickle.dumps(ds.state_dict())) < 4096
    assert os.path.exists(shards[0])
