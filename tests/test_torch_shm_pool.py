"""The workers' reused shared-memory batch buffers (tfrecord_io.torch.shm_pool): a slot
is written again only after the main process has freed every tensor over it, so
batches (or views of them) the user keeps are never overwritten, and slots are reused
when the user lets go. The protocol is checked in one process (pickled as the
DataLoader pickles, through a real ``DupFd``) and through real DataLoaders."""

from __future__ import annotations

import gc
import pickle
import warnings
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tfrecord_io.torch import TFRecordBatchDataset, batch_tensor
from tfrecord_io.torch.shm_pool import (
    _KEPT,
    KEPT_SLOTS,
    POOL_SLOTS,
    BufferPool,
    PooledTensor,
    free_batch_buffers,
    worker_pool,
)

from tests.torch_data import write_examples

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create"),
    pytest.mark.skipif(not hasattr(__import__("os"), "memfd_create"), reason="the pool needs os.memfd_create (Linux)"),
]

N = 480
DESC = {"id": "int"}
ROW = 64 * 1024  # bytes per record: a batch of 16 is 1 MiB, above PIPE_LIMIT, so it takes the pool


@pytest.fixture(autouse=True)
def no_kept_buffers():
    """Each test starts without buffers kept from an earlier test's workers."""
    free_batch_buffers()
    yield
    free_batch_buffers()


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("pool") / "data.tfrecord")
    return path, write_examples(path, range(N), index=True)


def send(slot, tensor):
    """What the DataLoader does to a batch tensor: pickle in the worker, unpickle in main."""
    return pickle.loads(ForkingPickler.dumps(PooledTensor(slot, tensor)))


def test_a_slot_is_reused_only_after_every_received_tensor_is_freed():
    pool = BufferPool(max_slots=2)
    first = pool.tensor((4, 1024), torch.int32)
    first.fill_(7)
    slot = pool.slot_of(first)
    received = send(slot, first)
    view = received[1:3, ::2]  # a view keeps the memory held as well
    del first, received
    gc.collect()
    second = pool.tensor((4, 1024), torch.int32)
    assert pool.slot_of(second) is not slot  # the main process still holds a view of the first
    second.fill_(1)
    assert pool.tensor((4, 1024), torch.int32) is None  # both slots busy, pool full: the caller allocates fresh
    assert torch.all(view == 7)
    del view
    gc.collect()
    third = pool.tensor((4, 1024), torch.int32)
    assert pool.slot_of(third) is slot  # released by the main process and by this side: reused
    assert len(pool.slots) == 2


def test_a_tensor_still_held_in_the_worker_is_not_handed_out_again():
    pool = BufferPool(max_slots=1)
    kept = pool.tensor((8,), torch.float64)
    assert pool.tensor((8,), torch.float64) is None
    del kept
    assert pool.tensor((8,), torch.float64) is not None


def test_received_tensor_has_the_values_dtype_shape_and_strides():
    pool = BufferPool()
    t = pool.tensor((3, 5, 7), torch.float32)
    t.copy_(torch.arange(105, dtype=torch.float32).reshape(3, 5, 7))
    for part in (t, t[1:], t[:, 2], t.transpose(0, 2)):
        got = send(pool.slot_of(part), part)
        assert got.dtype == part.dtype and got.shape == part.shape and got.stride() == part.stride()
        assert torch.equal(got, part)


def ids_rows(batch):
    """A batch transform: each record's row of ``ROW`` bytes filled with its id mod 251,
    in a ``batch_tensor``, and how many slots the worker's pool has."""
    ids = batch["id"].reshape(-1)
    out = batch_tensor((len(ids), ROW), torch.uint8)
    for i, v in enumerate(ids.tolist()):
        out[i].fill_(v % 251)
    return {"id": batch["id"], "rows": out, "slots": len(worker_pool().slots)}


def _check(batch):
    want = (batch["id"].reshape(-1) % 251).to(torch.uint8)
    assert torch.equal(batch["rows"][:, 0], want) and torch.equal(batch["rows"][:, -1], want)


@pytest.mark.parametrize("workers", [1, 2])
def test_batches_the_user_keeps_are_never_overwritten(data, workers):
    path, index = data
    ds = TFRecordBatchDataset(path, index, DESC, 16, batch_transform=ids_rows)
    kept = list(DataLoader(ds, batch_size=None, num_workers=workers))
    assert len(kept) == N // 16 > POOL_SLOTS * workers  # more batches than slots: some took fresh memory
    assert max(b["slots"] for b in kept) == POOL_SLOTS
    for batch in kept:
        _check(batch)
    assert sorted(int(i) for b in kept for i in b["id"].reshape(-1)) == list(range(N))


def test_kept_views_and_arrays_are_never_overwritten(data):
    path, index = data
    ds = TFRecordBatchDataset(path, index, DESC, 16, batch_transform=ids_rows)
    kept = []
    for batch in DataLoader(ds, batch_size=None, num_workers=2):
        kept.append((batch["id"].reshape(-1)[2:5].clone(), batch["rows"][2:5, 100:200], batch["rows"].numpy()[2:5]))
    for ids, view, array in kept:
        want = (ids % 251).to(torch.uint8)
        assert torch.equal(view[:, 0], want) and torch.equal(view[:, -1], want)
        assert (array[:, 0] == want.numpy()).all()


def test_slots_are_reused_when_the_user_lets_go(data):
    path, index = data
    ds = TFRecordBatchDataset(path, index, DESC, 16, batch_transform=ids_rows)
    seen = []
    for batch in DataLoader(ds, batch_size=None, num_workers=2):
        _check(batch)
        seen.append(batch["slots"])
    # 15 batches per worker, at most prefetch_factor in flight plus the one held here
    assert max(seen) < POOL_SLOTS


def test_large_numpy_arrays_and_pinned_batches_go_through_the_pool(data):
    path, index = data

    def big(batch):
        ids = batch["id"].reshape(-1)  # NumPy inside the worker
        return {
            "id": batch["id"],
            "rows": np.repeat((ids % 251).astype(np.uint8)[:, None], ROW, axis=1),
            "slots": len(worker_pool().slots),
        }

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # no accelerator here: torch warns and skips pinning
        got = list(
            DataLoader(
                TFRecordBatchDataset(path, index, DESC, 16, batch_transform=big),
                batch_size=None,
                num_workers=2,
                pin_memory=True,
            )
        )
    assert max(b["slots"] for b in got) >= 1
    for batch in got:
        _check(batch)


def test_after_the_first_batch_the_main_process_opens_the_slot_through_proc():
    pool = BufferPool()
    t = pool.tensor((1024,), torch.int64)
    t.copy_(torch.arange(1024))
    slot = pool.slot_of(t)
    assert slot.counters[2] == 0
    first = send(slot, t)  # by DupFd, a round trip to the sender; then the receiver checks /proc
    assert slot.counters[2] == 1
    again = send(slot, t[10:20])  # by /proc only
    assert torch.equal(first, torch.arange(1024)) and torch.equal(again, torch.arange(10, 20))
    data = ForkingPickler.dumps(PooledTensor(slot, t))
    assert set(_KEPT) == {slot.identity}  # the receiver keeps it mapped for the next batches
    free_batch_buffers()
    pool._drop(slot)  # the descriptor is gone before the batch is opened: a clear error, not other memory
    with pytest.raises(RuntimeError, match=r"cannot open the shared-memory batch buffer of DataLoader worker \d+"):
        pickle.loads(data)


def slot_identity_rows(batch):
    """``ids_rows`` plus the identity (device, inode) of the slot the rows were written to
    ((0, 0): a fresh segment, the pool being full)."""
    out = ids_rows(batch)
    slot = worker_pool().slot_of(out["rows"])
    out["slot"] = torch.tensor(slot.identity if slot is not None else (0, 0))
    return out


def test_the_next_epochs_workers_adopt_the_kept_buffers_and_never_overwrite_kept_batches(data):
    path, index = data
    ds = TFRecordBatchDataset(path, index, DESC, 16, batch_transform=slot_identity_rows)
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    first = {tuple(b["slot"].tolist()) for b in loader} - {(0, 0)}
    assert 0 < len(_KEPT) <= KEPT_SLOTS and set(_KEPT) <= first
    kept = list(loader)  # the second epoch, every batch kept
    assert {tuple(b["slot"].tolist()) for b in kept} & first  # new workers wrote into the old buffers
    again = list(loader)  # a third epoch while every batch of the second is still held
    for batch in kept + again:
        _check(batch)
    free_batch_buffers()
    assert not _KEPT


def test_two_loaders_at_once_never_share_a_buffer(data):
    path, index = data
    ds = TFRecordBatchDataset(path, index, DESC, 16, batch_transform=slot_identity_rows)
    a, b = (DataLoader(ds, batch_size=None, num_workers=2) for _ in range(2))
    list(a)  # buffers kept for both loaders' next workers to compete for
    kept = []
    for x, y in zip(a, b):  # two sets of workers alive at once, forked with the same kept buffers
        kept += [x, y]
    for batch in kept:
        _check(batch)
    assert sorted(int(i) for x in kept for i in x["id"].reshape(-1)) == sorted(list(range(N)) * 2)


@pytest.mark.parametrize("persistent", [False, True])
def test_epochs_after_a_broken_off_epoch_are_whole_and_correct(data, persistent):
    path, index = data
    ds = TFRecordBatchDataset(path, index, DESC, 16, batch_transform=slot_identity_rows)
    loader = DataLoader(ds, batch_size=None, num_workers=2, persistent_workers=persistent)
    for i, _ in enumerate(loader):  # batches sent but never received when the epoch is left
        if i == 3:
            break
    kept = []
    for _ in range(2):
        epoch = list(loader)
        assert sorted(int(i) for b in epoch for i in b["id"].reshape(-1)) == list(range(N))
        kept += epoch
    for batch in kept:
        _check(batch)


def test_spawned_workers_use_the_pool_too(data):
    path, index = data
    ds = TFRecordBatchDataset(path, index, DESC, 16, batch_transform=slot_identity_rows)
    got = list(DataLoader(ds, batch_size=None, num_workers=1, multiprocessing_context="spawn"))
    assert {tuple(b["slot"].tolist()) for b in got} - {(0, 0)}  # pool slots, not only fresh segments
    for batch in got:
        _check(batch)
