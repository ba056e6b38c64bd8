"""Splittable Beam source for TFRecord files: ``ReadFromTFRecord`` and ``ReadAllFromTFRecord``.

Why this exists: Beam's built-in TFRecord source is ``splittable=False``, so one big
file is read by one worker. Here each file is a splittable DoFn element whose
restriction is a byte range (``OffsetRange``); a record belongs to the range in
which it *begins* and is claimed at its start offset, so initial splits, dynamic
splits (``try_split``) and checkpoints all read every record exactly once.

A range that does not start at 0 begins at the first record boundary at or after its
start: taken from the file's index when one is found and still describes the file
(``RecordIndex.matches``), found by resynchronisation otherwise (see
``FrameStream.resync``). A stale index is never used; it is counted in the
``stale_index`` metric.

Corruption and range edges. Each range reads the frames that begin in it and then
checks the *one* frame that follows its last record even when that frame begins in
the next range. The next range resynchronises past bytes it cannot read without
reporting them, so this check is what keeps a corrupt frame right after a range edge
from being skipped silently: a corrupt region is always reported (or raised) by the
range that read the good record just before it, exactly once.

Compressed files (GZIP/ZLIB) have no seekable record offsets: one unsplittable
restriction per file, read whole.

Index sidecars are not data: a matched ``x.index``/``x.idx`` (or ``x.tfindex``,
``x.index`` beside ``x.tfrecord``) whose data file exists is skipped, so Beam's idiom
``WriteToTFRecord("out/part")`` then ``ReadFromTFRecord("out/part*")`` works although
the sink writes an index beside every shard.
"""

from __future__ import annotations

import bisect
import os
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Union

import apache_beam as beam
from apache_beam import coders
from apache_beam.io.filesystem import CompressionTypes, FileMetadata
from apache_beam.io.restriction_trackers import (
    OffsetRange,
    OffsetRestrictionTracker,
    UnsplittableRestrictionTracker,
)
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider
from apache_beam.typehints import Any as AnyHint
from apache_beam.typehints import List as ListHint
from apache_beam.typehints import Tuple as TupleHint

from ..errors import ExampleCodecError, IndexFileError
from ..format.codec import Description, parse_example
from ..format.framing import (
    DEFAULT_MAX_RECORD_BYTES,
    FRAME_OVERHEAD,
    HEADER_SIZE,
    CorruptRegion,
    FrameStream,
    check_max_record_bytes,
    length_crc_ok,
)
from ..format.index import INDEX_SUFFIXES, RecordIndex, find_index, load_index
from ..format.reader import read_records
from ..storage import files

METRICS_NAMESPACE = "tfrecord_io"
DEAD_LETTER = "dead_letter"
DEFAULT_DESIRED_BUNDLE_SIZE = 64 << 20
# Records read ahead and claimed together (by the last one's offset): one claim per
# chunk rather than per record. Dynamic splits then land on chunk edges.
_CLAIM_CHUNK = 256
_CLAIM_CHUNK_BYTES = 4 << 20

# with_metadata value of ReadRecordBatches: (path, [offsets], [records]) per element
_BATCHES = "batches"

# A file as the splittable DoFn sees it: (path, stored size in bytes, compression kind).
FileElement = Tuple[str, int, str]
IndexPattern = Union[None, bool, str, Callable[[str], Optional[str]]]


def resolve_index_path(path: str, index_pattern: IndexPattern) -> Optional[str]:
    """Where the index of ``path`` is, or None.

    ``None``/``True``: auto-discover beside the file (``find_index``). ``False`` or ``""``:
    never use an index. A string: a format with ``{path}`` (the data path), ``{name}``
    (its base name) and ``{stem}`` (base name without extension), e.g.
    ``"/indexes/{name}.index"``; a missing file means no index. A callable: called with
    the data path.
    """
    if index_pattern is None or index_pattern is True:
        return find_index(path)
    if index_pattern is False or index_pattern == "":
        return None
    if callable(index_pattern):
        return index_pattern(path)
    name = os.path.basename(path)
    candidate = str(index_pattern).format(path=path, name=name, stem=os.path.splitext(name)[0])
    return candidate if files.exists(candidate) else None


class _WholeFile(OffsetRange):
    """The restriction of a compressed file: position 0 stands for the whole file.

    Offsets in a decompressed stream are not file offsets, so it cannot be split.
    """


class _TFRecordRestrictionProvider(RestrictionProvider):
    """Byte ranges of desired size for plain files; one unsplittable range otherwise."""

    def __init__(self, desired_bundle_size: int):
        self._desired = max(int(desired_bundle_size), 1)

    def initial_restriction(self, element: FileElement) -> OffsetRange:
        _, size, kind = element
        if kind:
            return _WholeFile(0, 1 if size > 0 else 0)
        return OffsetRange(0, size)

    def split(self, element: FileElement, restriction: OffsetRange) -> Iterator[OffsetRange]:
        if element[2]:
            if restriction.size() > 0:
                yield restriction
            return
        # Beam's OffsetRange.split folds a small tail into the last range.
        yield from restriction.split(self._desired, min(self._desired, 1 << 16))

    def create_tracker(self, restriction: OffsetRange):
        tracker = OffsetRestrictionTracker(restriction)
        if isinstance(restriction, _WholeFile):
            return UnsplittableRestrictionTracker(tracker)
        return tracker

    def restriction_size(self, element: FileElement, restriction: OffsetRange) -> int:
        if element[2]:
            return element[1] if restriction.size() else 0
        return restriction.size()

    def restriction_coder(self):
        return coders.PickleCoder()


class _ReadTFRecordFn(beam.DoFn, _TFRecordRestrictionProvider):
    """Splittable DoFn: ``(path, size, kind)`` -> records that begin in the restriction.

    It is its own restriction provider, so the desired bundle size travels with it.
    """

    def __init__(
        self,
        desired_bundle_size: int,
        coder: coders.Coder,
        output: str,
        description: Description,
        with_metadata: bool,
        batch_size: Optional[int],
        on_corrupt: str,
        check_crc: bool,
        index_pattern: IndexPattern,
        max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
    ):
        _TFRecordRestrictionProvider.__init__(self, desired_bundle_size)
        self._max_record_bytes = check_max_record_bytes(max_record_bytes)
        self._claim_chunk = _CLAIM_CHUNK
        self._coder = coder
        self._raw_bytes = isinstance(coder, coders.BytesCoder)
        self._output = output
        self._description = description
        self._with_metadata = with_metadata
        self._batch_size = batch_size
        self._dead_letter = on_corrupt == "dead_letter"
        self._check_crc = check_crc
        self._index_pattern = index_pattern
        self._index_cache: Dict[Tuple[str, int], Optional[RecordIndex]] = {}
        self._records = Metrics.counter(METRICS_NAMESPACE, "records")
        self._bytes = Metrics.counter(METRICS_NAMESPACE, "bytes")
        self._corrupt = Metrics.counter(METRICS_NAMESPACE, "corrupt_regions")
        self._stale = Metrics.counter(METRICS_NAMESPACE, "stale_index")
        self._ranges = Metrics.counter(METRICS_NAMESPACE, "restrictions")

    # ------------------------------------------------------------------ helpers

    def _index_for(self, path: str, size: int) -> Optional[RecordIndex]:
        """The file's index if it is present and describes a file of this size.

        Cached per DoFn instance (a few files): a file read as many ranges loads its index once.
        """
        key = (path, size)
        if key in self._index_cache:
            return self._index_cache[key]
        index_path = resolve_index_path(path, self._index_pattern)
        index = None
        if index_path is not None:
            try:
                index = load_index(index_path)
            except IndexFileError:
                index = None
            if index is None or not index.matches(size):
                self._stale.inc()
                index = None
        if len(self._index_cache) >= 8:  # indexes of huge files are large: keep a few
            self._index_cache.clear()
        self._index_cache[key] = index
        return index

    def _value(self, path: str, offset: int, data: memoryview) -> Any:
        if self._output == "example":
            try:
                value: Any = parse_example(data, self._description)
            except ExampleCodecError as err:
                raise ExampleCodecError(f"record is not a valid Example: {err.reason}", path, offset) from None
            except Exception as err:  # noqa: BLE001 - anything else the description's conversion raises fails with the record's place
                raise ExampleCodecError(f"record is not a valid Example: {err}", path, offset) from None
        elif self._raw_bytes:
            value = bytes(data)
        else:
            value = self._coder.decode(bytes(data))
        if self._with_metadata == "filename":
            return (path, value)
        if self._with_metadata:
            return (path, offset, value)
        return value

    def _next_frame_problem(self, path: str, size: int, offset: int) -> Optional[CorruptRegion]:
        """Check the frame at ``offset`` (just after this range's last record).

        Returns None if a good frame begins there, else the corrupt region from there
        to the next good frame. Raises in fail mode.
        """
        with files.open_raw(path, "rb") as raw:
            raw.seek(offset)
            stream = FrameStream(
                raw,
                path=path,
                offset=offset,
                size=size,
                check_crc=self._check_crc,
                max_record_bytes=self._max_record_bytes,
            )
            for _, item in stream.frames(report_corrupt=self._dead_letter):
                return item if isinstance(item, CorruptRegion) else None
        return None

    # ------------------------------------------------------------------ process

    def process(self, element: FileElement, tracker=beam.DoFn.RestrictionParam()) -> Iterator[Any]:
        path, size, kind = element
        restriction = tracker.current_restriction()
        self._ranges.inc()
        if kind:
            yield from self._process_whole(path, kind, tracker)
            return
        start, stop = restriction.start, restriction.stop
        index = self._range_index(path, size, start)
        items = read_records(
            path,
            start,
            stop,
            compression_type="",  # plain (the element says so), whatever the name ends in
            check_crc=self._check_crc,
            index=index,
            on_corrupt="report" if self._dead_letter else "raise",
            max_record_bytes=self._max_record_bytes,
        )
        chunk = self._batch_size or self._claim_chunk
        # Records read ahead, as two flat lists: offsets and data. In the common
        # bytes-out case each view is copied to ``bytes`` at once, so the list holds no
        # objects the garbage collector tracks; holding a thousand (offset, view) tuples
        # instead made every gen-0 collection walk them (a batch of 1000 ran 4x slower).
        copy = bytes if self._bytes_out else None
        offs: List[int] = []
        datas: List[Any] = []
        end_of_last = None  # end of the last good frame taken, if it was the last item
        stopped = False
        first = True
        for offset, item in items:
            if type(item) is not memoryview:  # a CorruptRegion
                if first and start > 0:
                    # A range that starts from an index offset may land on a corrupt
                    # frame; the range before it reports that region (see module doc).
                    first = False
                    continue
                first = False
                if offs:
                    stopped = yield from self._emit(path, offs, datas, tracker)
                    offs, datas = [], []
                    if stopped:  # the region follows records of another range: theirs
                        break
                claimed = tracker.try_claim(offset)
                self._corrupt.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, _dead_letter_entry(item))
                end_of_last = None
                if not claimed:  # still ours: it follows our last record
                    stopped = True
                    break
                continue
            first = False
            offs.append(offset)
            datas.append(copy(item) if copy else item)
            # Read ahead at most `chunk` records or ~4 MiB (offsets are file positions).
            if len(offs) >= chunk or offset - offs[0] >= _CLAIM_CHUNK_BYTES:
                end_of_last = offset + len(item) + FRAME_OVERHEAD
                stopped = yield from self._emit(path, offs, datas, tracker)
                offs, datas = [], []
                if stopped:
                    break
        if offs and not stopped:
            end_of_last = offs[-1] + len(datas[-1]) + FRAME_OVERHEAD
            stopped = yield from self._emit(path, offs, datas, tracker)
        if not stopped:
            yield from self._finish_range(path, size, stop, end_of_last, tracker)

    def _range_index(self, path: str, size: int, start: int) -> Optional[RecordIndex]:
        """The index to find this range's first record by, or None to resynchronise
        (the first range starts at a frame; an index with other boundaries is stale)."""
        index = self._index_for(path, size) if start > 0 else None
        if index is not None and not _index_start_ok(path, index, start):
            self._stale.inc()  # same size but other boundaries: resynchronise instead
            index = None
        return index

    def _finish_range(self, path: str, size: int, stop: int, end_of_last: Optional[int], tracker) -> Iterator[Any]:
        """After the last record of a range: when that record ends at or past the range's
        end, a corrupt frame right after it is reported here (the next range, starting
        on it, skips it; see the module doc), then the rest of the range is claimed."""
        if end_of_last is not None and end_of_last >= stop and end_of_last < size:
            region = self._next_frame_problem(path, size, end_of_last)
            if region is not None:
                self._corrupt.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, _dead_letter_entry(region))
        # Mark the rest of the range done (check_done needs a claim attempt at its end).
        tracker.try_claim(tracker.current_restriction().stop)

    def _emit(self, path: str, offs: List[int], datas: List[Any], tracker):
        """Claim a chunk of records read ahead, by the offset of its last record, and
        emit them. Returns True when the range ended (a split moved its end).

        One claim covers the chunk: a split point is always after the last claimed
        position, so every record at or before it is this range's. If the claim fails,
        a split ended the range somewhere in the chunk: the records before the new end
        are still ours (nobody else will read them) and the rest are not.
        """
        stopped = not tracker.try_claim(offs[-1])
        if stopped:
            limit = tracker.current_restriction().stop
            keep = bisect.bisect_left(offs, limit)  # offsets rise within a range
            offs, datas = offs[:keep], datas[:keep]
        yield from self._values(path, offs, datas)
        return stopped

    @property
    def _bytes_out(self) -> bool:
        """Records go out as ``bytes`` (alone or with their place): copied once, as read."""
        return self._raw_bytes and self._output == "bytes"

    @property
    def _plain_bytes_out(self) -> bool:
        """Records go out as ``bytes`` exactly as read (no parse, coder or metadata)."""
        return self._raw_bytes and self._output == "bytes" and not self._with_metadata

    def _values(self, path: str, offs: List[int], datas: List[Any]) -> Iterator[Any]:
        """Output for records this range owns: values (or one list of them), and a
        dead-letter entry for each record that is not a valid Example."""
        if not offs:
            return
        if self._plain_bytes_out or self._with_metadata == _BATCHES:
            values: List[Any] = [d if type(d) is bytes else bytes(d) for d in datas]  # the common case, fast
            n_bytes = sum(map(len, values))
        else:
            values = []
            n_bytes = 0
            for offset, data in zip(offs, datas):
                try:
                    values.append(self._value(path, offset, data))
                except ExampleCodecError as err:
                    if not self._dead_letter:
                        raise
                    self._corrupt.inc()
                    yield beam.pvalue.TaggedOutput(
                        DEAD_LETTER,
                        {
                            "path": path,
                            "start": offset,
                            "end": offset + len(data) + FRAME_OVERHEAD,
                            "reason": err.reason,
                        },
                    )
                    continue
                n_bytes += len(data)
        self._records.inc(len(values))
        self._bytes.inc(n_bytes)
        if self._with_metadata == _BATCHES:
            yield (path, offs, values)  # offs: a fresh list per chunk (the caller starts a new one)
        elif self._batch_size:
            if values:
                yield values
        else:
            yield from values

    def _process_whole(self, path: str, kind: str, tracker) -> Iterator[Any]:
        """A compressed file: claim position 0 (the whole file) and read it all."""
        if not tracker.try_claim(0):
            return
        chunk = self._batch_size or _CLAIM_CHUNK
        copy = bytes if self._bytes_out else None
        offs: List[int] = []
        datas: List[Any] = []
        for offset, item in read_records(
            path,
            compression_type=kind,
            check_crc=self._check_crc,
            on_corrupt="report" if self._dead_letter else "raise",
            max_record_bytes=self._max_record_bytes,
        ):
            if isinstance(item, CorruptRegion):
                yield from self._values(path, offs, datas)
                offs, datas = [], []
                self._corrupt.inc()
                yield beam.pvalue.TaggedOutput(DEAD_LETTER, _dead_letter_entry(item))
                continue
            offs.append(offset)
            datas.append(copy(item) if copy else item)
            if len(offs) >= chunk:
                yield from self._values(path, offs, datas)
                offs, datas = [], []
        if offs:
            yield from self._values(path, offs, datas)


def _index_start_ok(path: str, index: RecordIndex, start: int) -> bool:
    """Does the record the index names as the first at or after ``start`` really begin
    there? Its header's length CRC must match and its frame size must agree.

    ``RecordIndex.matches`` only checks that the index tiles a file of this size; an
    index of another file of the same size passes that, and this catches it per range.
    """
    i = index.first_at_or_after(start)
    if i >= len(index):
        return True  # nothing begins in or after this range by the index; the chain agrees
    offset = int(index.offsets[i])
    with files.open_raw(path, "rb") as raw:
        raw.seek(offset)
        header = raw.read(HEADER_SIZE)
    if len(header) < HEADER_SIZE:
        return False
    length = int.from_bytes(header[:8], "little")
    return length_crc_ok(header) and length + FRAME_OVERHEAD == int(index.sizes[i])


def _dead_letter_entry(region: CorruptRegion) -> Dict[str, Any]:
    return {"path": region.path, "start": region.start, "end": region.end, "reason": region.reason}


def index_sidecar_of(path: str) -> Optional[str]:
    """The data file that ``path`` is an index of, or None.

    ``path`` is a sidecar when it has one of the names ``find_index`` looks for
    (``x.tfrecord.index``, ``x.tfrecord.idx``, ``x.tfindex``, ``x.index``) and a data
    file it would belong to exists beside it (``x.tfrecord`` for the first two; ``x``
    or some ``x.<ext>`` for the others). A lone ``x.index`` is read as data.
    """
    import glob as _glob

    stem, ext = os.path.splitext(path)
    if ext not in INDEX_SUFFIXES:
        return None
    candidates = [stem]
    if ext in (".tfindex", ".index"):
        candidates += files.glob(_glob.escape(stem) + ".*")
    for candidate in candidates:
        if candidate != path and os.path.splitext(candidate)[1] not in INDEX_SUFFIXES and files.exists(candidate):
            return candidate
    return None


class _ToFileElements(beam.DoFn):
    """File patterns, ``FileMetadata`` or ``ReadableFile`` -> ``(path, size, kind)``.

    A pattern that matches nothing yields nothing (as Beam's ReadAll does), so an
    empty glob in a stream of patterns is not an error. Index sidecars of data files
    (see :func:`index_sidecar_of`) are skipped, so a glob over a written set of
    shards reads the shards and not their indexes.
    """

    def __init__(self, compression_type: Any):
        self._compression_type = compression_type

    def process(self, element: Any) -> Iterator[FileElement]:
        if isinstance(element, (str, bytes)):
            pattern = element.decode() if isinstance(element, bytes) else element
            for result in files.match([pattern]):
                matched = sorted(result.metadata_list, key=lambda m: m.path)
                names = {m.path for m in matched}
                for meta in matched:
                    if not _is_sidecar(meta.path, names):
                        yield self._element(meta)
            return
        meta = getattr(element, "metadata", element)  # fileio.ReadableFile
        if not isinstance(meta, FileMetadata):
            raise TypeError(
                f"ReadAllFromTFRecord takes file patterns, FileMetadata or ReadableFile, not {type(element).__name__}"
            )
        if index_sidecar_of(meta.path) is None:
            yield self._element(meta)

    def _element(self, meta: FileMetadata) -> FileElement:
        kind = files.normalize_compression(self._compression_type, meta.path)
        return (meta.path, int(meta.size_in_bytes), kind)


def _is_sidecar(path: str, matched: set[str]) -> bool:
    """Is ``path`` the index of a file that is also in ``matched`` (or beside it)?"""
    stem, ext = os.path.splitext(path)
    if ext not in INDEX_SUFFIXES:
        return False
    if stem in matched and os.path.splitext(stem)[1] not in INDEX_SUFFIXES:
        return True
    return index_sidecar_of(path) is not None


def _check_options(output: str, on_corrupt: str, batch_size: Optional[int], desired_bundle_size: int) -> None:
    if output not in ("bytes", "example", "arrow"):
        raise ValueError("output must be 'bytes', 'example' or 'arrow'")
    if on_corrupt not in ("fail", "dead_letter"):
        raise ValueError("on_corrupt must be 'fail' or 'dead_letter'")
    if batch_size is not None and int(batch_size) < 1:
        raise ValueError("batch_size must be a positive number of records")
    if int(desired_bundle_size) < 1:
        raise ValueError("desired_bundle_size must be positive")


def _element_type(coder: coders.Coder, output: str, with_metadata: bool, batch_size: Optional[int]):
    """Output type hint, so Beam picks a fast coder between stages (not pickling)."""
    base: Any = bytes if output == "bytes" and isinstance(coder, coders.BytesCoder) else AnyHint
    if with_metadata == "filename":
        base = TupleHint[str, base]
    elif with_metadata:
        base = TupleHint[str, int, base]
    if batch_size:
        base = ListHint[base]
    return base


class ReadAllFromTFRecord(beam.PTransform):
    """Read TFRecord files named by a PCollection of file patterns, ``fileio.FileMetadata``
    or ``fileio.ReadableFile``, splitting each plain file into byte ranges.

    Arguments are those of :class:`ReadFromTFRecord` (without ``file_pattern`` and
    ``validate``); ``with_filename=True`` gives ``(path, record)`` pairs as Beam's
    ``ReadAllFromTFRecord`` does. With ``on_corrupt="dead_letter"`` the result is a
    ``DoOutputsTuple``: ``result.records`` and ``result.dead_letter``.
    """

    def __init__(
        self,
        coder: coders.Coder = coders.BytesCoder(),
        compression_type: Any = CompressionTypes.AUTO,
        *,
        index_pattern: IndexPattern = None,
        desired_bundle_size: int = DEFAULT_DESIRED_BUNDLE_SIZE,
        output: str = "bytes",
        description: Description = None,
        with_metadata: bool = False,
        batch_size: Optional[int] = None,
        on_corrupt: str = "fail",
        check_crc: bool = True,
        with_filename: bool = False,
        max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
    ):
        super().__init__()
        _check_options(output, on_corrupt, batch_size, desired_bundle_size)
        self._arrow = None
        if output == "arrow":  # records with their places, then one RecordBatch per list (beam_arrow)
            from .beam_arrow import DEFAULT_ARROW_BATCH_SIZE, ArrowBatches

            self._arrow = ArrowBatches(description, on_corrupt, with_metadata or with_filename)
            output, description, with_metadata = "bytes", None, True
            batch_size = batch_size or DEFAULT_ARROW_BATCH_SIZE
        if with_filename and with_metadata:
            raise ValueError("with_filename gives (path, record), with_metadata (path, offset, record): pick one")
        if with_filename:
            with_metadata = "filename"  # type: ignore[assignment]
        self._compression_type = compression_type
        self._on_corrupt = on_corrupt
        self._element_type = _element_type(coder, output, with_metadata, batch_size)
        self._fn = _ReadTFRecordFn(
            desired_bundle_size,
            coder,
            output,
            description,
            with_metadata,
            int(batch_size) if batch_size else None,
            on_corrupt,
            check_crc,
            index_pattern,
            max_record_bytes,
        )

    def expand(self, pcoll):
        elements = pcoll | "ExpandFiles" >> beam.ParDo(_ToFileElements(self._compression_type)).with_output_types(
            # Not Tuple[str, int, str]: that is Python's beam:coder:tuple:v1, which
            # Prism 2.62 cannot decode at the SDF's input (apache/beam#32636).
            AnyHint
        )
        read = beam.ParDo(self._fn)
        if self._on_corrupt == "dead_letter":
            outputs = elements | "ReadRanges" >> read.with_outputs(DEAD_LETTER, main="records")
            outputs.records.element_type = self._element_type
            return self._arrow.attach(outputs) if self._arrow else outputs
        records = elements | "ReadRanges" >> read.with_output_types(self._element_type)
        return self._arrow.attach(records) if self._arrow else records


class ReadAllRecordBatches(ReadAllFromTFRecord):
    """The splitting read for jobs that work on many records at once: file patterns (as
    :class:`ReadAllFromTFRecord` takes them) -> ``(path, [offsets], [records])``, up to
    ``batch_size`` consecutive records of one byte range of one file per element.

    Why a form of its own: a list of ``(path, offset, record)`` tuples costs a tuple per
    record and keeps the garbage collector walking them; three fields per batch cost
    nothing per record. Records are ``bytes``; the other arguments are
    :class:`ReadAllFromTFRecord`'s (with ``on_corrupt="dead_letter"`` the result is
    ``result.records`` and ``result.dead_letter``).
    """

    def __init__(
        self,
        compression_type: Any = CompressionTypes.AUTO,
        *,
        batch_size: int = 1024,
        index_pattern: IndexPattern = None,
        desired_bundle_size: int = DEFAULT_DESIRED_BUNDLE_SIZE,
        on_corrupt: str = "fail",
        check_crc: bool = True,
        max_record_bytes: Optional[int] = DEFAULT_MAX_RECORD_BYTES,
    ):
        super().__init__(
            coders.BytesCoder(),
            compression_type,
            index_pattern=index_pattern,
            desired_bundle_size=desired_bundle_size,
            batch_size=batch_size,
            on_corrupt=on_corrupt,
            check_crc=check_crc,
            max_record_bytes=max_record_bytes,
        )
        self._fn._with_metadata = _BATCHES  # type: ignore[assignment]
        self._element_type = AnyHint  # FastPrimitivesCoder between stages: no per-record coder calls


class ReadFromTFRecord(beam.PTransform):
    """Read the TFRecord files matching ``file_pattern``, one file cut into many
    parallel byte ranges at record boundaries.

    Drop-in for ``apache_beam.io.ReadFromTFRecord`` (same ``coder``,
    ``compression_type``, ``validate``), plus:

    - ``index_pattern``: where indexes are (see :func:`resolve_index_path`; default:
      beside each file; ``False``: never use one). Ranges start at indexed offsets when
      the index matches the file, by resynchronisation otherwise.
    - ``desired_bundle_size``: bytes per initial range (default 64 MiB).
    - ``output="example"`` with ``description``: parsed Example dicts (NumPy values).
    - ``output="arrow"``: ``pyarrow.RecordBatch``es of up to ``batch_size`` records (default
      1024), one schema for all: ``description`` as a ``pyarrow.Schema`` or a mapping of
      features (see ``tfrecord_io.arrow``), else inferred from the first file; as a list
      of feature names (as ``tfrecord_io.to_arrow`` takes it), only those columns, their
      types from the first file. With dead letters, records that do not fit the schema
      go there too.
    - ``with_metadata=True``: ``(path, offset, record)`` tuples (``with_filename=True``:
      ``(path, record)``, as Beam's ReadAll gives).
    - ``batch_size=N``: lists of up to N records (one range never mixes into another's
      list), which cuts Beam's per-element cost.
    - ``on_corrupt="dead_letter"``: return ``result.records`` and ``result.dead_letter``
      (dicts ``{path, start, end, reason}``) instead of failing the bundle.
    - ``check_crc=False``: skip CRC checks (trusted data only).
    - ``max_record_bytes``: the largest record accepted (default 1 GiB; ``None``: no
      limit); a bigger one fails with ``RecordTooLargeError`` (file, offset, size)
      before memory is allocated for it.

    Index sidecars matched by ``file_pattern`` (``part-*.index`` beside
    ``part-*``) are skipped, not read as records.

    Metrics (namespace ``tfrecord_io``): records, bytes, corrupt_regions, stale_index,
    restrictions.
    """

    def __init__(
        self,
        file_pattern: str,
        coder: coders.Coder = coders.BytesCoder(),
        compression_type: Any = CompressionTypes.AUTO,
        validate: bool = True,
        **options: Any,
    ):
        """``options``: the keyword arguments of :class:`ReadAllFromTFRecord` (listed in
        this class's docstring), passed on as they are: one list of them, not two."""
        super().__init__()
        if not isinstance(file_pattern, str) or not file_pattern:
            raise ValueError("file_pattern must be a non-empty string")
        self._pattern = file_pattern
        self._read_all = ReadAllFromTFRecord(coder, compression_type, **options)  # checks the options first
        if validate:
            result = files.match([file_pattern])[0]
            if not result.metadata_list:
                raise OSError(f"No files found based on the file pattern {file_pattern}")
        if self._read_all._arrow:  # no schema given: the first file's, known before the job runs
            self._read_all._arrow.require_schema(file_pattern, validate)

    def expand(self, pbegin):
        # The pattern itself goes to the read (not one FileMetadata per match): the
        # expansion sees the whole match, so it skips the index sidecars among it.
        return pbegin | "Pattern" >> beam.Create([self._pattern]) | "Read" >> self._read_all


__all__ = [
    "DEAD_LETTER",
    "METRICS_NAMESPACE",
    "ReadAllFromTFRecord",
    "ReadAllRecordBatches",
    "ReadFromTFRecord",
    "resolve_index_path",
]
