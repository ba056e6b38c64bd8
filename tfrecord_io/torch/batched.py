"""Whole batches made in the DataLoader worker: ``DataLoader(ds, batch_size=None)``.

Why: through ``DataLoader(batch_size=N)`` every record becomes a dict of NumPy arrays
(one protobuf parse each), the default collate stacks them key by key, and that costs
~12 us per record against ~1.5 us for reading and parsing a batch column by column in
C (``codec.parse_examples_batch``). Here each worker reads its records, shuffles them
(raw, through a record-level buffer, before batching), parses each batch of records in
one call and turns the columns into tensors itself; the DataLoader only passes whole
batches on (``batch_size=None``).

Which records a worker reads. With every file plain and indexed (the usual case), the
records are numbered across the files (in file order, shuffled per epoch with
``shuffle_files``); rank ``r`` of ``world_size`` takes the contiguous part ``r`` of
that range (the same cut as ``TFRecordDataset``), cuts it into batches of
``batch_size`` and its workers take contiguous runs of whole batches. So only the
rank's last batch can be short, ``len(ds)`` (batches per epoch for this rank) does not
depend on ``num_workers``, and every record is read once per epoch. With
``drop_last=True`` each rank yields ``(total // world_size) // batch_size`` full batches
(equal on every rank, as DDP needs); the records left over are dropped after the
shuffle. Without indexes, or with compressed files, each worker reads its shard as
``TFRecordDataset`` does and batches it alone (its last batch may be short, and there
is no ``len``).

What a batch holds (a dict; ``batch_transform`` may turn it into anything):

- numeric features of a known fixed shape (``shapes={"label": (), "emb": (128,)}``,
  taken from ``tfrecord_io_info.json`` by ``from_dataset``): one ``(B, *shape)`` tensor;
- other numeric features: with ``ragged="pad"`` a ``(B, longest)`` tensor padded with
  ``padding_value`` plus ``{key}_length`` (int64, ``(B,)``), in every batch, also when
  all lengths agree; with ``ragged="flat"`` the values of the batch end to end (1-D)
  plus ``{key}_length`` (row lengths, as a ragged tensor's);
- byte features: a list of ``bytes`` (a list of lists when a record has several).
  Inside the worker, ``batch_transform`` gets them as read-only ``memoryview``s of the
  records (no copy: decode or stack large images straight from the file's pages); they
  become ``bytes`` only if the batch still holds them when it leaves the dataset.

``record_decoder`` (serialised record -> dict, e.g. ``tfrecord_io.transforms.ExampleDecoder(spec)``,
which decodes images) replaces the parser; ``transform`` is applied to each parsed (or
decoded) record dict; both then batch as ``PadCollate`` does. ``batch_transform`` is
applied to each finished batch (decode a batch of images at once, normalise, ...). All
run in the worker. Pinned memory: ``DataLoader(ds, batch_size=None, pin_memory=True)``
pins the batches' tensors in the main process as for any batch.

How batches travel (``deliver``): arrays under ``PIPE_LIMIT`` pickled through the
DataLoader's pipe; larger ones in the worker's reused shared-memory buffers
(``shm_pool``), written again only once the main process has freed every tensor over
them.
"""

from __future__ import annotations

from itertools import islice
from math import prod
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..errors import ExampleCodecError
from ..format.codec import Description, infer_description, parse_example, parse_examples, parse_examples_batch
from ..format.sharding import FileInfo, cut, plan_records, plan_shard, total_records
from .collate import PadCollate
from .context import make_rng
from .dataset import IndexSpec, PathSpec, TFRecordDataset
from .options import ReadKwargs, ReadOptions
from .resume import Run
from .shm_pool import BufferPool, PooledTensor, worker_pool

if TYPE_CHECKING:
    from typing_extensions import Unpack

#: a record as it travels from the reader to the parser: (path, (offset, data))
Located = Tuple[str, Tuple[int, Any]]

RAGGED_MODES = ("pad", "flat")


class TFRecordBatchDataset(TFRecordDataset):
    """Batches of ``batch_size`` records as dicts of tensors, made in the worker; use it
    as ``DataLoader(ds, batch_size=None, num_workers=...)`` (see the module doc).

    Same files, index, sharding, shuffling (``shuffle_queue_size`` records, a buffer
    *before* batching; ``shuffle="global"``: the permuted order is cut into batches as
    the sequential one is), ``seed``/``set_epoch``, resume (``state_dict``, counting the
    batches each worker made) and CRC checks as ``TFRecordDataset``.
    ``description`` must give types (``{"label": "int", ...}``); None takes the types of
    each worker's first record. ``len(ds)`` is the number of batches this rank yields per
    epoch (needs plain, indexed files). A corrupt or unparsable record raises the same
    errors, naming its file and byte offset, from the worker.
    """

    def __init__(
        self,
        data_path: Union[PathSpec, Sequence[FileInfo]],
        index_path: IndexSpec,
        description: Description = None,
        batch_size: int = 256,
        shuffle_queue_size: Optional[int] = None,
        *,
        drop_last: bool = False,
        shapes: Optional[Mapping[str, Optional[Sequence[int]]]] = None,
        ragged: str = "pad",
        padding_value: float = 0,
        length_suffix: str = "_length",
        record_decoder: Optional[Callable[[Any], Any]] = None,
        transform: Optional[Callable[[Any], Any]] = None,
        batch_transform: Optional[Callable[[Dict[str, Any]], Any]] = None,
        compression_type: Optional[str] = None,
        options: Optional[ReadOptions] = None,
        **read: Unpack[ReadKwargs],
    ) -> None:
        opts = ReadOptions.gather(
            options, read, shuffle_queue_size=shuffle_queue_size, compression_type=compression_type
        )
        super().__init__(data_path, index_path, description, transform=transform, options=opts)
        if int(batch_size) < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if ragged not in RAGGED_MODES:
            raise ValueError(f"ragged={ragged!r}: use one of {', '.join(RAGGED_MODES)}")
        self.batch_size = int(batch_size)
        self.drop_last = bool(drop_last)
        self.shapes = {k: (None if s is None else tuple(int(d) for d in s)) for k, s in (shapes or {}).items()}
        self.ragged = ragged
        self.padding_value = padding_value
        self.length_suffix = length_suffix
        self.record_decoder = record_decoder
        self.batch_transform = batch_transform
        self.files()  # now, in the main process: workers inherit the indexes, and a bad path fails here
        self._collate_rows = PadCollate(
            keys=None, padding_value=padding_value, lengths=True, length_suffix=length_suffix
        )

    # ------------------------------------------------------------------ planning

    def _rank_batches(self, rank_count: int, total: int, world_size: int) -> int:
        if self.drop_last:
            return (total // world_size) // self.batch_size
        return -(-rank_count // self.batch_size)

    def __len__(self) -> int:
        rank, world = self._rank()
        total = total_records(self.files())
        if total is None:
            raise TypeError("len() needs an index for every file, and uncompressed files")
        lo, hi = cut(total, rank, world)
        return self._rank_batches(hi - lo, total, world)

    def _identity(self) -> Dict[str, Any]:
        return dict(super()._identity(), batch_size=self.batch_size, drop_last=self.drop_last)

    def _plan(self, order: Sequence[FileInfo], ctx: Any) -> Tuple[Optional[Tuple[int, int]], Optional[int]]:
        """(records ``[start, stop)`` of the files laid end to end that this worker reads,
        and how many batches it yields), or (None, None) when the files are not all
        plain and indexed (then it reads its shard of ``plan_shard`` and batches it all)."""
        total = total_records(order)
        if total is None:
            return None, None
        lo, hi = cut(total, ctx.rank, ctx.world_size)
        batches = self._rank_batches(hi - lo, total, ctx.world_size)
        b0, b1 = cut(batches, ctx.worker_id, ctx.num_workers)
        if b0 == b1:
            return (lo, lo), 0
        start = lo + b0 * self.batch_size
        stop = hi if b1 == batches else lo + b1 * self.batch_size
        return (start, stop), b1 - b0

    # ------------------------------------------------------------------ reading

    def __iter__(self) -> Iterator[Any]:
        ctx = self._context()
        start = self._begin(ctx, self.options.randomised)
        infos = self.files()
        source: Any
        if self.options.shuffle == "global":
            span, limit = self._plan(infos, ctx)
            source = self._global_source(infos, start, ctx, span)
        else:
            order = self._order(infos, make_rng(*start.keys[0], "files"), ctx)
            span, limit = self._plan(order, ctx)
            pieces = plan_shard(order, ctx.shard, ctx.num_shards) if span is None else plan_records(order, *span)
            source = self._pieces(pieces, start)
        return self._batches(self._start(ctx, start, source, infos), limit)

    def _batches(self, run: Run, limit: Optional[int]) -> Iterator[Any]:
        if run.finished:
            return
        size = self.batch_size
        in_worker = torch.utils.data.get_worker_info() is not None
        records, note = run.located()
        source = run.source
        while limit is None or run.yielded < limit:
            chunk = list(islice(records, size))
            if note and chunk:
                source.note(chunk[-1], len(chunk))
            if not chunk or (len(chunk) < size and self.drop_last):
                run.finished = True
                return
            short = len(chunk) < size
            batch = self.make_batch(chunk)
            if self.batch_transform is not None:
                batch = self.batch_transform(batch)
            # nothing here views the records any more while the batch is out: a reader's
            # receive buffers under them can be reused for the next batch (S3)
            del chunk
            run.yielded += 1
            if short:
                run.finished = True
            out = deliver(batch, in_worker)
            del batch
            yield out
            del out
            if short:
                return
        for _ in records:  # drop_last: the rank's leftover records (read, so CRCs are checked)
            pass
        run.finished = True

    # ------------------------------------------------------------------ collating

    def make_batch(self, chunk: Sequence[Located]) -> Dict[str, Any]:
        """Records -> one batch dict (see the module doc)."""
        datas = [r[1][1] for r in chunk]
        if self.record_decoder is not None:
            rows = [self._decode_one(r) for r in chunk]
            if self.transform is not None:
                rows = [self.transform(row) for row in rows]
            return self._collate_rows(rows)
        description = self.description
        if description is None:
            description = self.description = self._infer(chunk[0])
        if self.transform is not None:
            rows = self._parse(chunk, lambda: parse_examples(datas, description))
            return self._collate_rows([self.transform(row) for row in rows])
        columns = self._parse(chunk, lambda: parse_examples_batch(datas, description, byte_views=True))  # type: ignore[arg-type]
        return self._arrays(columns, chunk)

    def _infer(self, first: Located) -> Dict[str, str]:
        path, (offset, data) = first
        try:
            return infer_description(data)
        except ExampleCodecError as err:
            raise ExampleCodecError(err.reason, path, offset) from None

    def _decode_one(self, record: Located) -> Any:
        path, (offset, data) = record
        try:
            return self.record_decoder(data)  # type: ignore[misc]
        except Exception as err:  # broad: re-raised with the record's place
            raise ExampleCodecError(f"{type(err).__name__}: {err}", path, offset) from err

    def _parse(self, chunk: Sequence[Located], parse: Callable[[], Any]) -> Any:
        try:
            return parse()
        except ExampleCodecError:
            for path, (offset, data) in chunk:  # find the record at fault, and name it
                try:
                    parse_example(data, self.description)
                except ExampleCodecError as err:
                    raise ExampleCodecError(err.reason, path, offset) from None
            raise

    def _arrays(self, columns: Dict[str, Any], chunk: Sequence[Located]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        n = len(chunk)
        for key, col in columns.items():
            if isinstance(col, np.ndarray) and col.dtype == object:  # byte strings (views of the records)
                out[key] = list(col)
                continue
            if isinstance(col, tuple):
                flat, lengths = col
            else:
                flat, lengths = col.reshape(-1), np.full(n, col.shape[1], dtype=np.int64)
            shape = self.shapes.get(key)
            if shape is not None:
                out[key] = self._fixed(key, flat, lengths, shape, chunk)
            elif self.ragged == "flat":
                out[key] = flat
                out[key + self.length_suffix] = lengths
            else:
                out[key] = _pad(flat, lengths, self.padding_value)
                out[key + self.length_suffix] = lengths
        return out

    def _fixed(
        self, key: str, flat: np.ndarray, lengths: np.ndarray, shape: Tuple[int, ...], chunk: Sequence[Located]
    ) -> np.ndarray:
        want = prod(shape)
        bad = np.flatnonzero(lengths != want)
        if bad.size:
            path, (offset, _) = chunk[int(bad[0])]
            raise ExampleCodecError(
                f"feature {key!r} has {int(lengths[bad[0]])} values, its shape {shape} needs {want}", path, offset
            )
        return flat.reshape(len(chunk), *shape)


#: arrays smaller than this go from a worker to the main process pickled through the
#: DataLoader's pipe; larger ones as tensors in shared memory. Each shared-memory tensor
#: costs a file descriptor sent over a socket and a mapping on each side (and page
#: faults when the segment is fresh), far more than piping a few KiB; for megabytes,
#: one copy into shared memory beats copies through a pipe.
PIPE_LIMIT = 512 * 1024


def _tensor_from_bytes(data: bytes, dtype: str, shape: Tuple[int, ...]) -> torch.Tensor:
    return torch.from_numpy(np.frombuffer(bytearray(data), dtype=dtype).reshape(shape))


class PipedArray:
    """A small array on its way from a worker: the DataLoader's ``default_convert`` (run
    in the worker) leaves it alone, pickling sends its bytes through the pipe, and it
    unpickles in the main process as a plain ``torch.Tensor``."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray) -> None:
        self.array = np.ascontiguousarray(array)

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        a = self.array
        return _tensor_from_bytes, (a.tobytes(), a.dtype.str, a.shape)


def deliver(batch: Any, in_worker: bool) -> Any:
    """A finished batch as it leaves the dataset, in dicts, lists and tuples: in the main
    process every NumPy array becomes a tensor (no copy); in a worker, numeric arrays and
    tensors below ``PIPE_LIMIT`` become ``PipedArray``s (tensors again in the main
    process) and larger ones travel in the worker's reused shared memory
    (``shm_pool``): a tensor made by ``batch_tensor`` as it is, any other array copied
    into a pool slot (where torch would copy it into a fresh segment)."""
    return _deliver(batch, worker_pool() if in_worker else None, in_worker)


def _deliver(batch: Any, pool: Optional[BufferPool], in_worker: bool) -> Any:
    if isinstance(batch, np.ndarray):
        if batch.dtype == object:
            return batch
        if in_worker and batch.nbytes < PIPE_LIMIT:
            return PipedArray(batch)
        return _pooled(torch.from_numpy(batch), pool)
    if isinstance(batch, torch.Tensor):
        if in_worker and batch.device.type == "cpu" and batch.layout == torch.strided:
            if batch.nbytes < PIPE_LIMIT:
                return PipedArray(batch.numpy())
            return _pooled(batch, pool)
        return batch
    if isinstance(batch, dict):
        return {k: _deliver(v, pool, in_worker) for k, v in batch.items()}
    if isinstance(batch, tuple) and not hasattr(batch, "_fields"):
        return tuple(_deliver(v, pool, in_worker) for v in batch)
    if isinstance(batch, list) and batch:
        first = batch[0]
        if isinstance(first, (torch.Tensor, np.ndarray)):
            return [_deliver(v, pool, in_worker) for v in batch]
        if isinstance(first, memoryview) or (isinstance(first, list) and any(isinstance(v, list) for v in batch)):
            return [_as_bytes(v) for v in batch]
    return batch


def _pooled(tensor: torch.Tensor, pool: Optional[BufferPool]) -> Any:
    """A large CPU tensor leaving a worker: in a pool slot if it is not in one yet (one
    copy, into memory that faults no more); as it is without a pool, or when it is in
    shared memory already, or the pool is full (torch then shares it as usual)."""
    if pool is None:
        return tensor
    slot = pool.slot_of(tensor)
    if slot is not None:
        return PooledTensor(slot, tensor)
    if tensor.is_shared() or tensor.dtype not in _POOLED_DTYPES:
        return tensor
    target = pool.tensor(tensor.shape, tensor.dtype)
    if target is None:
        return tensor
    target.copy_(tensor)
    return PooledTensor(pool.slot_of(target), target)  # type: ignore[arg-type]


#: dtypes a pool slot holds (a view of bytes as any of these is exact)
_POOLED_DTYPES = frozenset(
    [
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.bool,
        torch.complex64,
        torch.complex128,
    ]
)


def _as_bytes(value: Any) -> Any:
    """Byte strings still viewing the records -> ``bytes`` (what leaves a batch)."""
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, list):
        return [_as_bytes(v) for v in value]
    return value


def batch_tensor(shape: Sequence[int], dtype: torch.dtype = torch.uint8) -> torch.Tensor:
    """An uninitialised tensor for a whole batch, in shared memory when called in a
    DataLoader worker, so that filling it is the only copy: use it in a
    ``batch_transform`` that decodes many records into one tensor. In a worker the
    memory comes from the worker's pool of reused segments (``shm_pool``: no page faults
    once a slot has been used, and never a slot whose last batch the main process still
    holds); a fresh segment, as ``default_collate`` allocates, when the pool is full."""
    shape = tuple(int(d) for d in shape)
    numel = prod(shape)
    if torch.utils.data.get_worker_info() is None or not numel:
        return torch.empty(shape, dtype=dtype)
    pool = worker_pool() if dtype in _POOLED_DTYPES else None
    pooled = pool.tensor(shape, dtype) if pool is not None else None
    if pooled is not None:
        return pooled
    storage = torch.UntypedStorage._new_shared(numel * torch.empty((), dtype=dtype).element_size())
    return torch.empty(0, dtype=dtype).set_(storage).view(shape)


def _pad(flat: np.ndarray, lengths: np.ndarray, padding_value: float) -> np.ndarray:
    """Rows of ``flat`` (``lengths`` values each) padded to the longest, as one array."""
    n = len(lengths)
    longest = int(lengths.max()) if n else 0
    if n and int(lengths.min()) == longest:
        return flat.reshape(n, longest)
    out = np.full((n, longest), padding_value, dtype=flat.dtype)
    out[np.arange(longest) < lengths[:, None]] = flat
    return out


__all__ = ["PIPE_LIMIT", "PipedArray", "RAGGED_MODES", "TFRecordBatchDataset", "batch_tensor", "deliver"]
