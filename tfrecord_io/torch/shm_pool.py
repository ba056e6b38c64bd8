"""Shared-memory buffers for whole batches, reused across batches and epochs by the
DataLoader workers of ``TFRecordBatchDataset`` (``batch_tensor`` and large arrays).

Why: a tensor that leaves a worker normally travels in a fresh shared-memory segment,
and every page of a fresh segment is faulted in and zeroed by the kernel on first
write: for a 16 MiB batch of 64 KiB images that is 4,096 page faults, ~40 us of kernel
time per record here, more than reading, checking and copying the record costs. A
segment written a second time faults no more, so each worker keeps a few segments
("slots", ``memfd``s) and writes its next batch into one the main process has let go of.

The release protocol (one writer per counter, so no locks): each slot starts with a
header of int64 counters. The worker adds one to ``sent`` whenever it pickles a tensor
of the slot for the main process; the main process maps the slot, wraps the bytes in a
tensor without copying, and adds one to ``released`` when the last tensor or view over
that memory is freed (a ``weakref.finalize`` on the NumPy array that owns the tensor's
storage, so views, ``.numpy()`` and slices keep it held; ``pin_memory`` copies and lets
go at once). The worker reuses a slot only when ``released == sent`` and no tensor of
its own still uses it. A batch the user keeps is therefore never overwritten: when no
slot is free the worker makes a new one, up to ``POOL_SLOTS``, and past that allocates
a fresh segment as torch does. Memory stays bounded by ``POOL_SLOTS`` slots per worker
plus whatever the user keeps.

How the main process opens a slot: the first time, through ``multiprocessing``'s
``DupFd``, as torch passes its own segments' descriptors; that is a round trip to a
thread of the worker, which answers only when it gets the worker's GIL (~5-8 ms per
batch measured here, the main loop waiting). So the main process opens the same file
itself as ``/proc/<worker pid>/fd/<fd>`` (checking its device and inode), keeps that
open file and its mapping (``Kept``, the newest ``KEPT_SLOTS``), and says so in the
slot's header (``by_proc``); from then on the worker sends only its pid, the
descriptor's number and the file's identity, and the main process maps nothing anew:
no open, no mmap, and no page faults when the consumer reads the batch.

Across epochs: without ``persistent_workers`` each epoch forks new workers, which
inherit the kept files and adopt them (their pages exist already: nothing is allocated
or zeroed). Each worker holds an exclusive ``flock`` on its own open file of every slot
it uses until it exits, so two living workers (two DataLoaders at once) never share a
slot; a slot still holding a batch the user keeps stays busy by its counters.
``free_batch_buffers()`` lets the kept buffers go.

Linux only (``os.memfd_create``, ``/proc``); elsewhere ``worker_pool()`` is None and
batches take torch's fresh segments as before. Without a readable ``/proc`` every batch
takes the ``DupFd`` round trip and nothing is kept."""

from __future__ import annotations

import fcntl
import mmap
import os
import threading
import weakref
from collections import OrderedDict
from math import prod
from multiprocessing.reduction import DupFd
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

#: bytes before a slot's data: ``sent``, ``released`` and ``by_proc`` (int64), padded
#: to a page so that the data starts page-aligned
HEADER = mmap.PAGESIZE
#: slots per worker process: the DataLoader keeps ``prefetch_factor`` (2) batches per
#: worker in flight, the training loop holds one or two more; past this many busy
#: slots a batch takes a fresh segment (correct, only slower)
POOL_SLOTS = 6
#: slots the main process keeps after their worker has gone, for the next epoch's
#: workers to adopt (``free_batch_buffers()`` lets go of them)
KEPT_SLOTS = 12
#: ``madvise`` advice (Linux 5.14, Python 3.11 has no name for it): map every page of a
#: range for writing in one call
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


class Slot:
    """One shared-memory segment of a worker's pool (see the module doc), held with an
    exclusive ``flock`` on this process's own open file: no other worker adopts it while
    this one lives."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        st = os.fstat(fd)
        self.identity = (st.st_dev, st.st_ino)
        self.length = st.st_size
        self.capacity = self.length - HEADER
        self.mapping = mmap.mmap(fd, self.length)
        self.counters: np.ndarray = np.ndarray((3,), np.int64, buffer=self.mapping)  # [sent, released, by_proc]
        self.data: np.ndarray = np.ndarray((self.capacity,), np.uint8, buffer=self.mapping, offset=HEADER)
        self.address = self.data.ctypes.data
        self.held = False  # a tensor in this (the worker) process still uses the memory

    @classmethod
    def create(cls, capacity: int) -> Slot:
        fd = os.memfd_create("tfrecord-io-batch", os.MFD_CLOEXEC)
        os.ftruncate(fd, HEADER + capacity)
        fcntl.flock(fd, fcntl.LOCK_EX)  # new: nobody else can hold it
        return cls(fd)

    @classmethod
    def adopt(cls, kept_fd: int) -> Optional[Slot]:
        """A slot an earlier worker made and the main process kept (``kept_fd``, inherited
        from it), if no living worker holds it and no batch of it is outstanding. Its
        pages exist already: ``MADV_POPULATE_WRITE`` maps them all in one call (16 MiB:
        ~2-4 ms here, against ~6-11 ms faulting them in page by page on first write)."""
        try:
            fd = os.open(f"/proc/self/fd/{kept_fd}", os.O_RDWR | os.O_CLOEXEC)  # an open file of our own
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        slot = cls(fd)
        if not slot.free():  # a batch of it is still held by the user, or was never received
            slot.close()
            return None
        try:
            slot.mapping.madvise(MADV_POPULATE_WRITE)
        except (OSError, ValueError):  # a kernel before 5.14: the pages fault in one by one
            pass
        return slot

    def free(self) -> bool:
        return not self.held and int(self.counters[0]) == int(self.counters[1])

    def take(self, shape: Tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A tensor over the slot's memory; the slot is held until the tensor (and every
        view of it) is gone from this process."""
        nbytes = prod(shape) * _itemsize(dtype)
        raw = self.data[:nbytes]  # a view: its finalizer fires when torch frees the storage
        self.held = True
        weakref.finalize(raw, self._let_go).atexit = False
        return torch.from_numpy(raw).view(dtype).view(shape)

    def _let_go(self) -> None:
        self.held = False

    def close(self) -> None:
        os.close(self.fd)


class BufferPool:
    """The slots of one worker process."""

    def __init__(self, max_slots: int = POOL_SLOTS, adopt: Sequence[int] = ()) -> None:
        self.max_slots = max_slots
        self.slots: List[Slot] = []
        self.by_address: Dict[int, Slot] = {}
        for kept_fd in adopt:
            if len(self.slots) >= max_slots:
                break
            slot = Slot.adopt(kept_fd)
            if slot is not None:
                self._add(slot)

    def _add(self, slot: Slot) -> None:
        self.slots.append(slot)
        self.by_address[slot.address] = slot

    def tensor(self, shape: Sequence[int], dtype: torch.dtype) -> Optional[torch.Tensor]:
        """An uninitialised tensor in a free slot (or a new one); None when every slot
        is busy and the pool is full."""
        shape = tuple(int(d) for d in shape)
        nbytes = prod(shape) * _itemsize(dtype)
        free = [s for s in self.slots if s.free()]
        fits = [s for s in free if s.capacity >= nbytes]
        if fits:
            return min(fits, key=lambda s: s.capacity).take(shape, dtype)
        if len(self.slots) >= self.max_slots:
            if not free:
                return None
            self._drop(min(free, key=lambda s: s.capacity))  # too small: make room for a bigger one
        slot = Slot.create(_round_up(max(nbytes, 1), HEADER))
        self._add(slot)
        return slot.take(shape, dtype)

    def _drop(self, slot: Slot) -> None:
        self.slots.remove(slot)
        del self.by_address[slot.address]
        slot.close()  # the mapping goes when nothing uses it any more

    def slot_of(self, tensor: torch.Tensor) -> Optional[Slot]:
        """The slot whose memory ``tensor`` (or the tensor it views) lives in, if any."""
        return self.by_address.get(tensor.untyped_storage().data_ptr())


class PooledTensor:
    """A tensor in a pool slot on its way from a worker: the DataLoader's
    ``default_convert`` leaves it alone, and pickling sends the slot's file descriptor
    and where the tensor lies in it (not its bytes); it unpickles in the main process as
    a ``torch.Tensor`` over the same memory (``rebuild_pooled``)."""

    __slots__ = ("slot", "tensor")

    def __init__(self, slot: Slot, tensor: torch.Tensor) -> None:
        self.slot, self.tensor = slot, tensor

    def __reduce__(self) -> Tuple[Callable[..., torch.Tensor], Tuple[Any, ...]]:
        t = self.tensor
        slot = self.slot
        slot.counters[0] += 1  # sent: the slot stays busy until the main process releases it
        dup = None if slot.counters[2] else DupFd(slot.fd)
        where = (dup, os.getpid(), slot.fd, slot.identity, slot.length)
        return rebuild_pooled, (where, t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _release(counters: np.ndarray) -> None:
    counters[1] += 1


def _open_by_proc(pid: int, fd: int, identity: Tuple[int, int]) -> Optional[int]:
    """The worker's descriptor ``fd`` opened anew through ``/proc``, if that is the file
    ``identity`` names; else None."""
    try:
        mine = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return None
    st = os.fstat(mine)
    if (st.st_dev, st.st_ino) != tuple(identity):
        os.close(mine)
        return None
    return mine


class Kept:
    """The main process's own open file of a slot it has received, and its mapping: the
    next batches from the slot reuse the mapping (no open, no mmap, no page faults when
    the consumer reads the batch), and the next epoch's workers adopt the file."""

    __slots__ = ("fd", "mapping", "counters")

    def __init__(self, fd: int, length: int) -> None:
        self.fd = os.dup(fd)
        self.mapping = mmap.mmap(self.fd, length)
        self.counters: np.ndarray = np.ndarray((3,), np.int64, buffer=self.mapping)

    def close(self) -> None:
        os.close(self.fd)  # the mapping goes with the last tensor over it


#: the slots this (main) process has received, newest last, at most ``KEPT_SLOTS``
_KEPT: OrderedDict[Tuple[int, int], Kept] = OrderedDict()
_KEPT_LOCK = threading.Lock()


def _keep(identity: Tuple[int, int], fd: int, length: int) -> Kept:
    kept = _KEPT[identity] = Kept(fd, length)
    while len(_KEPT) > KEPT_SLOTS:
        _KEPT.popitem(last=False)[1].close()
    return kept


def free_batch_buffers() -> None:
    """Let go of the shared-memory batch buffers this process keeps for the next
    epoch's DataLoader workers (at most ``KEPT_SLOTS`` buffers of one batch each; the
    memory is freed once no worker or tensor uses it). Call it when no more epochs of a
    ``TFRecordBatchDataset`` will run but the process goes on."""
    with _KEPT_LOCK:
        while _KEPT:
            _KEPT.popitem()[1].close()


def _adoptable() -> List[int]:
    """In a new worker: the kept buffers inherited from the main process that are this
    worker's share (workers start at different ones, so they rarely contend; the lock
    decides)."""
    kept = [k.fd for k in _KEPT.values()]
    info = torch.utils.data.get_worker_info()
    assert info is not None  # called in a DataLoader worker only
    share = -(-len(kept) // max(1, info.num_workers)) if kept else 0
    return kept[info.id * share : (info.id + 1) * share]


def _mapped_slot(where: Tuple[Any, int, int, Tuple[int, int], int]) -> Kept:
    """The slot a worker names, mapped in this process: kept from an earlier batch, or
    opened through ``/proc`` and kept; without ``/proc``, mapped from the descriptor
    the worker sent (``DupFd``) for this batch only."""
    dup, pid, fd, identity, length = where
    identity = (identity[0], identity[1])  # a tuple, whatever sequence arrived
    theirs = dup.detach() if dup is not None else None  # the worker's own open file (holds its lock)
    try:
        with _KEPT_LOCK:  # the pin_memory thread of one DataLoader, the main thread of another
            return _kept_or_once(theirs, pid, fd, identity, length)
    finally:
        if theirs is not None:
            os.close(theirs)


def _kept_or_once(theirs: Optional[int], pid: int, fd: int, identity: Tuple[int, int], length: int) -> Kept:
    """``_mapped_slot`` under the lock; ``theirs`` is the descriptor the worker sent, if any."""
    kept = _KEPT.get(identity)
    if kept is None:
        mine = _open_by_proc(pid, fd, identity)
        if mine is None:
            if theirs is None:
                raise RuntimeError(
                    f"cannot open the shared-memory batch buffer of DataLoader worker {pid} "
                    f"(/proc/{pid}/fd/{fd}); the worker has exited or /proc is no longer readable"
                )
            once = Kept(theirs, length)
            once.close()  # not kept: it would hold the worker's lock
            return once
        try:
            kept = _keep(identity, mine, length)
        finally:
            os.close(mine)
    _KEPT.move_to_end(identity)  # the file stays open while kept: no other file has its identity
    kept.counters[2] = 1  # by_proc: the worker may send without DupFd from now on
    return kept


def rebuild_pooled(
    where: Tuple[Any, int, int, Tuple[int, int], int],
    dtype: torch.dtype,
    shape: Tuple[int, ...],
    stride: Tuple[int, ...],
    offset: int,
) -> torch.Tensor:
    """In the main process: the tensor a worker sent, over the slot's memory (no copy).
    When its storage is freed, the slot's ``released`` counter goes up by one."""
    slot = _mapped_slot(where)
    raw: np.ndarray = np.ndarray((where[4] - HEADER,), np.uint8, buffer=slot.mapping, offset=HEADER)
    weakref.finalize(raw, _release, slot.counters).atexit = False
    typed = torch.from_numpy(raw).view(dtype)
    return typed.as_strided(shape, stride, offset)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


_POOL: Tuple[int, Optional[BufferPool]] = (-1, None)


def worker_pool() -> Optional[BufferPool]:
    """This DataLoader worker's pool (made on first use; a forked process never shares
    its parent's); None in the main process, or without ``os.memfd_create``."""
    global _POOL
    if torch.utils.data.get_worker_info() is None or not hasattr(os, "memfd_create"):
        return None
    pid = os.getpid()
    if _POOL[0] != pid:
        pool = BufferPool(adopt=_adoptable())
        while _KEPT:  # copies of the main process's descriptors: the adopted slots have their own
            _KEPT.popitem()[1].close()
        _POOL = (pid, pool)
    return _POOL[1]


__all__ = [
    "HEADER",
    "KEPT_SLOTS",
    "POOL_SLOTS",
    "BufferPool",
    "Kept",
    "PooledTensor",
    "Slot",
    "free_batch_buffers",
    "rebuild_pooled",
    "worker_pool",
]
