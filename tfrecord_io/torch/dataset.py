"""PyTorch datasets over TFRecord files, drop-in for the ``tfrecord`` package's
``tfrecord.torch.dataset`` (same names, same positional arguments), that read every
record exactly once per epoch across DataLoader workers *and* distributed ranks.

Sharding. Each copy of an iterable dataset reads global shard
``rank * num_workers + worker_id`` of ``world_size * num_workers``
(``tfrecord_io.format.sharding``): with indexes the files are cut by record count, without them
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

``shuffle="global"`` replaces the sequential order by one permutation of every record of
the files per epoch (``tfrecord_io.dataset.permutation``, keyed by seed and epoch), cut into
shards as the sequential order is; it needs plain, indexed files (``resume.GlobalSource``
reads it a window of ``global_window`` positions at a time, in file order).

Resuming. ``state_dict()`` describes where the latest iterator of this copy is and
``load_state_dict()`` makes the next one continue there, seeking rather than replaying
(``resume``): torchdata's ``StatefulDataLoader`` calls both per worker.
"""

from __future__ import annotations

from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterator,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
    cast,
)

import torch.utils.data

from .. import iterator_utils
from ..dataset.path_specs import PathSpec, expand, split_files
from ..errors import ExampleCodecError, IndexFileError
from ..format import remote_reader
from ..format.codec import Description, parse_example, parse_sequence_example
from ..format.random_access import IndexedRecordReader
from ..format.sharding import FileInfo, cut, describe_files, plan_shard, shard_count, total_records
from ..storage import range_reads
from ..storage.remote_objects import RemoteObject, RemoteObjectChangedError, handles
from .context import ReadContext, current_context, distributed_rank, draw_torch_seed, make_rng
from .options import ReadKwargs, ReadOptions
from .resume import (
    STATE_FORMAT,
    GlobalSource,
    MultiSource,
    PieceSource,
    Run,
    ShuffleBuffer,
    StateError,
    check_context,
    check_header,
    check_identity,
    files_digest,
    global_permutation,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

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


class _Start(NamedTuple):
    """How a new iteration begins: fresh, or resuming a loaded state (then every field
    comes from that state, whatever ``set_epoch`` or the seeds say now)."""

    keys: Tuple[Tuple[Any, ...], Tuple[Any, ...]]  # (key shared by every shard of the epoch, this shard's)
    saved: Optional[Dict[str, Any]]
    epoch: int
    passes: int

    @property
    def position(self) -> Optional[Mapping[str, Any]]:
        return None if self.saved is None else self.saved["position"]


class _ShardedDataset(torch.utils.data.IterableDataset):
    """What the iterable datasets share: sharding context, seeds, decoding, shuffles,
    resume state; how they read is one ``ReadOptions`` (``self.options``)."""

    def __init__(
        self,
        options: ReadOptions,
        description: Description,
        sequence_description: Description,
        transform: Optional[Callable[[Any], Any]],
    ) -> None:
        super().__init__()
        self.options = options
        self._pending: Optional[Dict[str, Any]] = None
        self._run: Optional[Run] = None
        #: S3 object versions read (by URL): stat'ed when described, or given (``from_dataset``)
        self._objects: Dict[str, RemoteObject] = dict(options.remote_objects)
        #: what identifies the records beyond the files (e.g. a built dataset's selection)
        self.origin: Optional[str] = None
        self.description = description
        self.sequence_description = sequence_description
        self.transform = transform
        self.epoch = 0
        self._passes = 0  # iterations of this copy: persistent workers keep their copy
        self._decode = RecordDecoder(description, sequence_description)

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that, with ``seed``, picks this epoch's shuffles. Call it before
        creating each epoch's DataLoader iterator (workers get a copy of the dataset).

        After ``load_state_dict`` the next iterator resumes that state's epoch: setting
        another one before it runs raises ``StateError`` (the state's position belongs to
        its epoch's order; in another epoch it names other records), unless the state's
        epoch was finished, which is then dropped (the next iterator starts ``epoch``)."""
        epoch = int(epoch)
        pending = self._pending
        if pending is not None and epoch != int(pending["epoch"]):
            if not pending.get("finished"):
                raise StateError(
                    f"set_epoch({epoch}) after load_state_dict of a state in epoch {pending['epoch']}: the next "
                    f"iterator resumes epoch {pending['epoch']} (its position names records of that epoch's "
                    f"order); call set_epoch({pending['epoch']}), or set_epoch before load_state_dict"
                )
            self._pending = None
        self.epoch = epoch

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
        seed = self.options.seed
        if seed is not None:
            shared: Tuple[Any, ...] = ("seed", seed, self.epoch, passes)
            return shared, shared + (ctx.shard,)
        if not in_worker and not randomised:
            return ("fixed",), ("fixed",)  # draw nothing: leave the caller's torch RNG alone
        base = ctx.worker_base_seed if in_worker else draw_torch_seed()
        return ("torch", base, passes), ("torch", base, passes, ctx.rank, ctx.worker_id)

    def _order(self, infos: Sequence[FileInfo], rng: Any, ctx: ReadContext) -> List[FileInfo]:
        out = list(infos)
        if self.options.shuffle_files:
            if ctx.world_size > 1 and self.options.seed is None:
                raise ValueError(
                    "shuffle_files with several ranks needs seed= (every rank must order the files "
                    "alike to read each record once); call set_epoch(epoch) each epoch"
                )
            rng.shuffle(out)
        return out

    def _describe(self, paths: Sequence[str], index_paths: Sequence[Optional[str]]) -> List[FileInfo]:
        """``describe_files``, with ``s3://`` and ``gs://`` objects described by requests of
        their own (``remote_reader.describe``) and pinned to their ETag (S3) or generation
        (GCS): the one given in
        ``remote_objects`` (an object that no longer has it is an error naming it), else
        the one it has now."""
        out: List[FileInfo] = []
        compression = self.options.compression_type
        for path, index in zip(paths, index_paths):
            if handles(path):
                info, obj = remote_reader.describe(path, index, compression)
                given = self._objects.setdefault(path, obj)
                if (given.etag, given.size) != (obj.etag, obj.size):
                    raise RemoteObjectChangedError(
                        f"the object changed after it was listed (ETag {given.etag}, {given.size} bytes; "
                        f"now ETag {obj.etag}, {obj.size} bytes)",
                        path,
                    )
                out.append(info)
            else:
                out += describe_files([path], [index], compression)
        return out

    def _pin_objects(self, infos: Sequence[FileInfo]) -> None:
        """Stat the S3 and GCS objects among ``infos`` once (size checked against the
        listing, ETag or generation kept): every later range read asks for that version
        and fails if it changed."""
        for f in infos:
            if handles(f.path) and f.path not in self._objects:
                self._objects[f.path] = range_reads.stat(f.path, f.size)

    def _rank(self) -> Tuple[int, int]:
        """(rank, world size) of this process, for ``len``."""
        return distributed_rank(self.options.rank, self.options.world_size)

    def _context(self) -> ReadContext:
        return current_context(self.options.rank, self.options.world_size)

    # ------------------------------------------------------------------ state

    def _identity(self) -> Dict[str, Any]:
        """What a state must agree on to be resumed by this dataset."""
        o = self.options
        return {
            "class": type(self).__name__,
            "origin": self.origin,
            "seed": o.seed,
            "shuffle": o.shuffle,
            "global_window": o.global_window if o.shuffle == "global" else None,
            "shuffle_queue_size": o.shuffle_queue_size or 0,
            "shuffle_files": bool(o.shuffle_files),
        }

    def state_dict(self) -> Dict[str, Any]:
        """Where the latest iterator of this copy is (torchdata's ``Stateful``): the
        position in its pieces or permutation, its shuffle buffer (records by file and
        offset) and seeds. ``StatefulDataLoader`` saves it per worker after each batch;
        ``load_state_dict`` makes the next iterator continue from there. Before any
        iteration: the start of the next one."""
        if self._run is not None:
            return self._run.state()
        if self._pending is not None:
            return dict(self._pending)
        return {
            "format": STATE_FORMAT,
            "identity": self._identity(),
            "epoch": self.epoch,
            "passes": self._passes,
            "fresh": True,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Make the next iterator continue where ``state`` (from ``state_dict``) was: it
        opens the files at the saved offsets, refills the shuffle buffer by offset and
        yields exactly the rest of that epoch, in the order an uninterrupted run gives.
        A state from another dataset (files, selection, version), seed or shuffle
        setting, or from another worker or rank, raises ``StateError``; so does
        ``set_epoch`` of another epoch before the resumed iterator runs."""
        check_header(state)
        check_identity(state["identity"], self._identity())
        self.epoch = int(state["epoch"])
        self._passes = int(state["passes"])
        self._run = None
        self._pending = None if state.get("fresh") else dict(state)

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_run"] = None  # an iteration (open files, views of them) stays in its process
        return state

    def _begin(self, ctx: ReadContext, randomised: bool) -> _Start:
        """How a new iteration starts: resuming the loaded state (its seed keys, epoch
        and passes, whatever this copy says now), or fresh."""
        saved, self._pending = self._pending, None
        if saved is not None:
            check_context(saved, (ctx.rank, ctx.world_size, ctx.worker_id, ctx.num_workers))
            shared, own = saved["keys"]
            return _Start((tuple(shared), tuple(own)), saved, int(saved["epoch"]), int(saved["passes"]))
        return _Start(self._seed_keys(ctx, randomised), None, self.epoch, self._passes)

    def _start(self, ctx: ReadContext, start: _Start, source: Any, infos: Sequence[FileInfo]) -> Run:
        buffer = None
        o, saved = self.options, start.saved
        if o.shuffle_queue_size:
            buffer = ShuffleBuffer(o.shuffle_queue_size, make_rng(*start.keys[1], "buffer"))
            if saved is not None and saved.get("buffer") is not None:
                buffer.restore(saved["buffer"], o.check_crc, self._objects)
        run = Run(
            self._identity(),
            (ctx.rank, ctx.world_size, ctx.worker_id, ctx.num_workers),
            start.keys,
            start.epoch,
            start.passes,
            source,
            buffer,
            {f.path: bool(f.compression) for f in infos},
        )
        if saved is not None:
            run.yielded = int(saved.get("yielded", 0))
            run.finished = bool(saved.get("finished", False))
        self._run = run
        return run

    def _pieces(self, pieces: Sequence[Any], start: _Start) -> PieceSource:
        return PieceSource(pieces, self.options.check_crc, self._objects, start.position)

    def _global_source(
        self,
        infos: Sequence[FileInfo],
        start: _Start,
        ctx: ReadContext,
        lo_hi: Optional[Tuple[int, int]],
    ) -> GlobalSource:
        """Positions ``lo_hi`` (default: this copy's shard) of the epoch's permutation of
        every record of ``infos`` (``shuffle="global"``); the epoch is the iteration's
        (a resumed state's own)."""
        total = total_records(infos)
        if total is None:
            bad = next(f.path for f in infos if f.compression or f.index is None)
            raise IndexFileError(
                "shuffle='global' reads records by number: it needs every file plain (not compressed) "
                "and indexed (index_path='auto' or a list; `tfrecord-io index` makes them)",
                bad,
            )
        if ctx.world_size > 1 and self.options.seed is None:
            raise ValueError("shuffle='global' with several ranks needs seed= (every rank must permute alike)")
        lo, hi = lo_hi if lo_hi is not None else cut(total, ctx.shard, ctx.num_shards)
        perm = global_permutation(total, start.keys[0], start.epoch, start.passes)
        o = self.options
        return GlobalSource(infos, perm, lo, hi, o.global_window, o.check_crc, self._objects, start.position)

    def _emit(self, run: Run) -> Iterator[Any]:
        """Decoded (and transformed) records of a run, its position kept as they go."""
        if run.finished:
            return
        decode, transform, source = self._decode, self.transform, run.source
        records, note = run.located()
        for located in records:
            if note:
                source.note(located, 1)
            path, (offset, data) = located
            record = decode(data, path, offset)
            if transform is not None:
                record = transform(record)
            run.yielded += 1
            yield record
        run.finished = True


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

    ``shuffle="global"``: each epoch one permutation of all the records (across files),
    read ``global_window`` positions at a time. ``state_dict()``/``load_state_dict()``:
    resume mid-epoch (module doc). ``s3://``, ``gs://`` and ``azfs://`` paths are read with range
    requests (``tfrecord_io.format.remote_reader``), each object pinned to the ETag (S3) or
    generation (GCS) it had when listed
    (``remote_objects``: versions stat'ed already, by URL, as ``from_dataset`` passes them).

    The reading options (``shuffle_queue_size``, ``compression_type``, ``shuffle_files``,
    ``seed``, ``rank``, ``world_size``, ``check_crc``, ``shuffle``, ``global_window``,
    ``remote_objects``: ``ReadOptions``) come as keywords, or as one ``options=ReadOptions(...)``;
    they are on the dataset as ``ds.options``.
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
        options: Optional[ReadOptions] = None,
        **read: Unpack[ReadKwargs],
    ) -> None:
        opts = ReadOptions.gather(
            options, read, shuffle_queue_size=shuffle_queue_size, compression_type=compression_type
        )
        super().__init__(opts, description, sequence_description, transform)
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
                infos = self._describe(names, _index_list(self.index_path, names))
            self._pin_objects(infos)
            self._infos = infos
        return self._infos

    def _identity(self) -> Dict[str, Any]:
        infos = self.files()
        return dict(super()._identity(), files=files_digest(infos, self._objects), file_count=len(infos))

    def __len__(self) -> int:
        count = shard_count(self.files(), *self._rank())
        if count is None:
            raise TypeError("len() needs an index for every file, and uncompressed files")
        return count

    def __iter__(self) -> Iterator[Any]:
        ctx = self._context()
        start = self._begin(ctx, self.options.randomised)
        infos = self.files()
        source: Any
        if self.options.shuffle == "global":
            source = self._global_source(infos, start, ctx, None)
        else:
            order = self._order(infos, make_rng(*start.keys[0], "files"), ctx)
            source = self._pieces(plan_shard(order, ctx.shard, ctx.num_shards), start)
        return self._emit(self._start(ctx, start, source, infos))


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

    The reading options are ``TFRecordDataset``'s (keywords, or ``options=``), ``s3://``
    files and resuming included, but for ``shuffle="global"``: the weighted draw decides
    the order across splits, so there is no one permutation of every record to follow
    (refused with ``ValueError``).
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
        options: Optional[ReadOptions] = None,
        **read: Unpack[ReadKwargs],
    ) -> None:
        opts = ReadOptions.gather(
            options, read, shuffle_queue_size=shuffle_queue_size, compression_type=compression_type
        )
        if opts.shuffle == "global":
            raise ValueError(
                "MultiTFRecordDataset draws its records from the splits by weight, so no order of it is one "
                "permutation of every record: shuffle='global' does not apply (use shuffle_queue_size and "
                "shuffle_files here, or a TFRecordDataset over the files with shuffle='global')"
            )
        super().__init__(opts, description, sequence_description, transform)
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
                infos = self._describe(paths, self._split_indexes(name, paths))
                self._pin_objects(infos)
                out.append((name, weight, infos))
            self._sources = out
        return self._sources

    def _identity(self) -> Dict[str, Any]:
        sources = self.sources()
        every = [f for _, _, infos in sources for f in infos]
        return dict(
            super()._identity(),
            files=files_digest(every, self._objects),
            file_count=len(every),
            splits=[(name, weight) for name, weight, _ in sources],
            infinite=bool(self.infinite),
        )

    def __len__(self) -> int:
        if self.infinite:
            raise TypeError("an infinite MultiTFRecordDataset has no length; pass infinite=False")
        total = 0
        for _, _, infos in self.sources():
            count = shard_count(infos, *self._rank())
            if count is None:
                raise TypeError("len() needs an index for every file, and uncompressed files")
            total += count
        return total

    def __iter__(self) -> Iterator[Any]:
        ctx = self._context()
        start = self._begin(ctx, True)
        file_rng = make_rng(*start.keys[0], "files")
        plans: Dict[str, Tuple[float, List[Any]]] = {}
        every: List[FileInfo] = []
        for name, weight, infos in self.sources():
            plans[name] = (weight, plan_shard(self._order(infos, file_rng, ctx), ctx.shard, ctx.num_shards))
            every += infos
        rng = make_rng(*start.keys[1], "sample")
        source = MultiSource(plans, self.infinite, rng, self.options.check_crc, self._objects, start.position)
        return self._emit(self._start(ctx, start, source, every))


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
