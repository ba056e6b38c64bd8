"""PyTorch datasets over TFRecord files, drop-in for the ``tfrecord`` package's
``tfrecord.torch.dataset`` (same names, same positional arguments), that read every
record exactly once per epoch across DataLoader workers *and* distributed ranks.

Sharding. Each copy of an iterable dataset reads global shard
``rank * num_workers + worker_id`` of ``world_size * num_workers``
(``tfrecord_io.sharding``): with indexes the files are cut by record count, without them
by bytes, each part starting at the first record boundary found by resynchronisation.
Compressed (GZIP/ZLIB) files cannot be cut: they are dealt out whole, one file per
shard; when there are fewer compressed files than shards, the shards sharing a file each
decompress all of it and keep every n-th record (correct, but n times the work: prefer
at least as many compressed files as ``world_size * num_workers``). The rank and world
size come from the ``rank``/``world_size`` arguments, else ``torch.distributed`` when it
is initialised, else the ``RANK``/``WORLD_SIZE`` environment variables.

Shuffling. ``shuffle_queue_size`` shuffles through a buffer; ``shuffle_files=True`` also
shuffles the file order each epoch. Without ``seed``, the seeds come from PyTorch's:
each DataLoader iterator (so each epoch) gets new worker seeds from torch's generator,
and in the main process one is drawn from it, so ``torch.manual_seed(s)`` makes a run
reproducible. With ``seed=s`` the order depends only on ``(s, epoch, shard)``; call
``set_epoch(epoch)`` before each epoch, as with ``DistributedSampler``. With
``persistent_workers=True`` the workers keep their copy (and never see ``set_epoch``):
there each pass of a worker also counts, so every epoch still gets a new order. Shuffling the
file order across several ranks needs ``seed`` (every rank must order the files alike).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union, cast

import torch.utils.data

from .. import iterator_utils
from ..codec import Description, parse_example, parse_sequence_example
from ..errors import ExampleCodecError
from ..path_specs import PathSpec, expand, split_files
from ..random_access import IndexedRecordReader
from ..sharding import FileInfo, Piece, describe_files, plan_shard, read_piece, shard_count
from .context import ReadContext, current_context, distributed_rank, draw_torch_seed, make_rng

IndexSpec = Union[None, str, Sequence[Optional[str]]]


class RecordDecoder:
    """Serialised record -> ``Example`` dict, or ``(context, feature_lists)`` for a
    ``SequenceExample`` when ``sequence_description`` is given (an empty one: every
    feature list, as in the ``tfrecord`` package). A record that does not parse raises
    ``ExampleCodecError`` naming the file and the record's offset."""

    def __init__(self, description: Description = None, sequence_description: Description = None):
        self.description = description
        self.sequence = sequence_description is not None
        self.sequence_description = sequence_description if sequence_description else None

    def __call__(self, data: Any, path: str = "<record>", offset: Optional[int] = None) -> Any:
        try:
            if self.sequence:
                return parse_sequence_example(data, self.description, self.sequence_description)
            return parse_example(data, self.description)
        except ExampleCodecError as err:
            raise ExampleCodecError(err.reason, path, offset) from None


def _index_list(index_path: IndexSpec, paths: Sequence[str]) -> List[Optional[str]]:
    if index_path is None or index_path == "auto":
        return [index_path] * len(paths)
    if isinstance(index_path, str):
        if len(paths) != 1:
            raise ValueError("give one index path per data file (a list), or index_path='auto'")
        return [index_path]
    out = list(index_path)
    if len(out) != len(paths):
        raise ValueError(f"{len(paths)} data files but {len(out)} index paths")
    return out


class _ShardedDataset(torch.utils.data.IterableDataset):
    """What both iterable datasets share: sharding context, seeds, decoding, shuffle."""

    def __init__(
        self,
        description: Description,
        shuffle_queue_size: Optional[int],
        transform: Optional[Callable[[Any], Any]],
        sequence_description: Description,
        compression_type: Optional[str],
        shuffle_files: bool,
        seed: Optional[int],
        rank: Optional[int],
        world_size: Optional[int],
        check_crc: bool,
    ) -> None:
        super().__init__()
        if shuffle_queue_size is not None and shuffle_queue_size < 0:
            raise ValueError("shuffle_queue_size must be >= 0")
        self.description = description
        self.sequence_description = sequence_description
        self.shuffle_queue_size = shuffle_queue_size
        self.transform = transform
        self.compression_type = compression_type
        self.shuffle_files = shuffle_files
        self.seed = seed
        self.rank = rank
        self.world_size = world_size
        self.check_crc = check_crc
        self.epoch = 0
        self._passes = 0  # iterations of this copy: persistent workers keep their copy
        self._decode = RecordDecoder(description, sequence_description)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that, with ``seed``, picks this epoch's shuffles. Call it before
        creating each epoch's DataLoader iterator (workers get a copy of the dataset)."""
        self.epoch = int(epoch)

    def _seed_keys(self, ctx: ReadContext, randomised: bool = True) -> Tuple[Tuple[Any, ...], Tuple[Any, ...]]:
        """(key shared by every shard of this epoch, key of this shard).

        In a worker both include how many times this copy has been iterated: a
        persistent worker keeps its copy and its torch seed across epochs and never
        sees ``set_epoch``, yet must shuffle differently each epoch (a fresh worker
        always counts 1; every shard counts alike, so file orders still agree)."""
        in_worker = ctx.worker_base_seed is not None
        if in_worker:
            self._passes += 1
        passes = self._passes if in_worker else 0
        if self.seed is not None:
            shared: Tuple[Any, ...] = ("seed", self.seed, self.epoch, passes)
            return shared, shared + (ctx.shard,)
        if not in_worker and not randomised:
            return ("fixed",), ("fixed",)  # draw nothing: leave the caller's torch RNG alone
        base = ctx.worker_base_seed if in_worker else draw_torch_seed()
        return ("torch", base, passes), ("torch", base, passes, ctx.rank, ctx.worker_id)

    def _order(self, infos: Sequence[FileInfo], rng: Any, ctx: ReadContext) -> List[FileInfo]:
        out = list(infos)
        if self.shuffle_files:
            if ctx.world_size > 1 and self.seed is None:
                raise ValueError(
                    "shuffle_files with several ranks needs seed= (every rank must order the files "
                    "alike to read each record once); call set_epoch(epoch) each epoch"
                )
            rng.shuffle(out)
        return out

    def _records(self, pieces: Sequence[Piece]) -> Iterator[Any]:
        decode = self._decode
        for piece in pieces:
            path = piece.path
            for offset, data in read_piece(piece, self.check_crc):
                yield decode(data, path, offset)

    def _finish(self, it: Iterator[Any], shard_key: Tuple[Any, ...]) -> Iterator[Any]:
        if self.shuffle_queue_size:
            it = iterator_utils.shuffle_iterator(it, self.shuffle_queue_size, make_rng(*shard_key, "buffer"))
        if self.transform is not None:
            it = map(self.transform, it)
        return it


class TFRecordDataset(_ShardedDataset):
    """Records of one TFRecord file (or a list of files) as an ``IterableDataset``.

    ``data_path``: a path, or a list of paths read as one dataset (or of
    ``sharding.FileInfo``s, already described, record ranges kept). ``index_path``: the
    index file (or a list, one per file), ``"auto"`` for ``x.tfrecord.index`` & co. beside
    each file, or None. ``description``/``sequence_description``: which features to
    parse, as in the ``tfrecord`` package (None: all). ``transform`` is applied to each
    parsed record. ``check_crc=False`` skips the CRC checks (data you trust).

    ``len(ds)`` is the number of records this *rank* reads per epoch (its share of the
    total, the same whatever ``num_workers`` is); it needs every file indexed and plain,
    and raises ``TypeError`` otherwise. See the module doc for sharding and seeds.
    """

    def __init__(
        self,
        data_path: Union[PathSpec, Sequence[FileInfo]],
        index_path: IndexSpec,
        description: Description = None,
        shuffle_queue_size: Optional[int] = None,
        transform: Optional[Callable[[Any], Any]] = None,
        sequence_description: Description = None,
        compression_type: Optional[str] = None,
        *,
        shuffle_files: bool = False,
        seed: Optional[int] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        check_crc: bool = True,
    ) -> None:
        super().__init__(
            description,
            shuffle_queue_size,
            transform,
            sequence_description,
            compression_type,
            shuffle_files,
            seed,
            rank,
            world_size,
            check_crc,
        )
        self.data_path = data_path
        self.index_path = index_path
        self._infos: Optional[List[FileInfo]] = None

    def files(self) -> List[FileInfo]:
        """The files with their sizes and indexes (loaded once per process)."""
        if self._infos is None:
            paths = [self.data_path] if isinstance(self.data_path, str) else list(self.data_path)
            described = [p for p in paths if isinstance(p, FileInfo)]
            if paths and len(described) == len(paths):
                infos = described  # described already (e.g. a slice of a built dataset)
            else:
                names = cast(List[str], paths)  # path strings: data_path is a PathSpec here
                infos = describe_files(names, _index_list(self.index_path, names), self.compression_type)
            self._infos = infos
        return self._infos

    def __len__(self) -> int:
        rank, world = distributed_rank(self.rank, self.world_size)
        count = shard_count(self.files(), rank, world)
        if count is None:
            raise TypeError("len() needs an index for every file, and uncompressed files")
        return count

    def __iter__(self) -> Iterator[Any]:
        ctx = current_context(self.rank, self.world_size)
        shared, own = self._seed_keys(ctx, bool(self.shuffle_queue_size or self.shuffle_files))
        order = self._order(self.files(), make_rng(*shared, "files"), ctx)
        pieces = plan_shard(order, ctx.shard, ctx.num_shards)
        return self._finish(self._records(pieces), own)


class MultiTFRecordDataset(_ShardedDataset):
    """Records sampled from several sources ("splits") with given weights.

    ``data_pattern`` names each split's files: a string with ``'{}'`` filled with the
    split name (a path or a glob: ``"data/mnist-{}.tfrecord-*"``), a glob or list of
    TFDS-style shard files (``name-train.tfrecord-00001-of-01024``) grouped by split, or
    a ``{split: path | glob | list}`` mapping. ``splits`` maps split names to weights
    (finite, >= 0, at least one > 0); zero-weight splits are never opened. With
    ``splits=None`` all the files form one source. ``index_pattern``: None, ``"auto"``,
    or a string with ``'{}'`` (for splits of one file each).

    Each worker and rank samples its own shard of every split (so nothing is repeated
    between them). A source that runs out is dropped and the others' weights
    renormalised; iteration ends when every source is exhausted. ``infinite=True``
    restarts each source when it ends (an empty one is dropped, never spun on), so
    iteration never ends unless all are empty; ``infinite=False`` reads each record of
    each enabled split exactly once per epoch, and then ``len()`` works when indexed.
    """

    def __init__(
        self,
        data_pattern: Union[PathSpec, Mapping[str, PathSpec]],
        index_pattern: Union[None, str, Mapping[str, IndexSpec]],
        splits: Optional[Mapping[str, float]],
        description: Description = None,
        shuffle_queue_size: Optional[int] = None,
        transform: Optional[Callable[[Any], Any]] = None,
        sequence_description: Description = None,
        compression_type: Optional[str] = None,
        infinite: bool = True,
        *,
        shuffle_files: bool = False,
        seed: Optional[int] = None,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        check_crc: bool = True,
    ) -> None:
        super().__init__(
            description,
            shuffle_queue_size,
            transform,
            sequence_description,
            compression_type,
            shuffle_files,
            seed,
            rank,
            world_size,
            check_crc,
        )
        if splits is not None:
            weights = iterator_utils.check_weights(splits)
            self.weights: Dict[str, float] = {name: w for name, w in zip(splits, weights) if w > 0}
        else:
            self.weights = {}
        self.data_pattern = data_pattern
        self.index_pattern = index_pattern
        self.splits = splits
        self.infinite = infinite
        self._sources: Optional[List[Tuple[str, float, List[FileInfo]]]] = None

    def _split_indexes(self, name: str, paths: Sequence[str]) -> List[Optional[str]]:
        pattern = self.index_pattern
        if isinstance(pattern, Mapping):
            return _index_list(pattern.get(name), paths)
        if pattern is None or pattern == "auto":
            return [pattern] * len(paths)
        if "{}" not in pattern:
            raise ValueError("index_pattern must contain '{}', or be 'auto' or None")
        if len(paths) != 1:
            raise ValueError(
                f"split {name!r} has {len(paths)} files: use index_pattern='auto' (an index beside "
                "each file) or a mapping {split: [index paths]}"
            )
        filled = self.index_pattern.format(name)  # type: ignore[union-attr]
        return [expand(filled)[0]]

    def sources(self) -> List[Tuple[str, float, List[FileInfo]]]:
        """``(split, weight, files)`` for each enabled split (loaded once per process)."""
        if self._sources is None:
            names = list(self.weights) if self.splits is not None else None
            groups = split_files(self.data_pattern, names)
            out = []
            for name, paths in groups.items():
                weight = self.weights.get(name, 1.0)
                infos = describe_files(paths, self._split_indexes(name, paths), self.compression_type)
                out.append((name, weight, infos))
            self._sources = out
        return self._sources

    def __len__(self) -> int:
        if self.infinite:
            raise TypeError("an infinite MultiTFRecordDataset has no length; pass infinite=False")
        rank, world = distributed_rank(self.rank, self.world_size)
        total = 0
        for _, _, infos in self.sources():
            count = shard_count(infos, rank, world)
            if count is None:
                raise TypeError("len() needs an index for every file, and uncompressed files")
            total += count
        return total

    def __iter__(self) -> Iterator[Any]:
        ctx = current_context(self.rank, self.world_size)
        shared, own = self._seed_keys(ctx)
        file_rng = make_rng(*shared, "files")
        iterators: List[Iterator[Any]] = []
        weights: List[float] = []
        for _, weight, infos in self.sources():
            pieces = plan_shard(self._order(infos, file_rng, ctx), ctx.shard, ctx.num_shards)
            if not pieces:
                continue
            opener = partial(self._records, pieces)
            iterators.append(iterator_utils.cycle(opener) if self.infinite else opener())
            weights.append(weight)
        if not iterators:
            return iter(())
        it = iterator_utils.sample_iterators(iterators, weights, self.infinite, make_rng(*own, "sample"))
        return self._finish(it, own)


class TFRecordIndexedDataset(torch.utils.data.Dataset):
    """Map-style random access to records by number, through index files, for any
    ``Sampler`` (``DistributedSampler``, weighted samplers, ``shuffle=True``).

    ``data_path``: a path or a list of paths (numbered file after file). ``index_path``:
    a path (or a list), or ``"auto"``/None for the index beside each file, built in
    memory by reading the file once when there is none. Files are opened lazily in each
    worker; each item is one positioned read with the length and both CRCs checked
    (``check_crc=False`` skips the CRCs). Compressed files cannot be read this way.
    """

    def __init__(
        self,
        data_path: PathSpec,
        index_path: IndexSpec = "auto",
        description: Description = None,
        transform: Optional[Callable[[Any], Any]] = None,
        sequence_description: Description = None,
        check_crc: bool = True,
    ) -> None:
        super().__init__()
        paths = [data_path] if isinstance(data_path, str) else list(data_path)
        if index_path is None or isinstance(index_path, str):
            indexes: Any = index_path if (index_path in (None, "auto") or len(paths) == 1) else None
            if indexes is None and index_path is not None:
                raise ValueError("give one index path per data file (a list), or index_path='auto'")
        else:
            indexes = list(index_path)
        self.reader = IndexedRecordReader(paths, indexes, check_crc=check_crc)
        self.transform = transform
        self._decode = RecordDecoder(description, sequence_description)

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, i: int) -> Any:
        path, offset, data = self.reader.record(int(i))
        record = self._decode(data, path, offset)
        return self.transform(record) if self.transform is not None else record


__all__ = ["MultiTFRecordDataset", "RecordDecoder", "TFRecordDataset", "TFRecordIndexedDataset"]
