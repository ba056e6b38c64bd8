"""Rows to build a dataset from, read inside the pipeline: a CSV/JSONL manifest, or a
``root/<label>/<file>`` tree on any Beam filesystem (a local folder, an ``s3://bucket/prefix``).

Why the launcher does not read them: on a cluster the rows are the part that grows; the
launcher only checks, cheaply, what makes the whole job meaningless before anything is
written (no such manifest or folder, a CSV header without a column the config names,
nothing matching), raising ``InputError``. Reading happens in the workers
(:class:`ReadManifest`, :class:`ListDirectory`), which emit rows in batches (Beam
costs tens of microseconds per element per stage; a batch of rows is one element).

Rows keep media paths as the input gives them: relative to the manifest's folder, or
relative to the input root for a folder (``<label>/<file>``). The build resolves them
against ``base_dir`` only where a file is read, so a row's key does not depend on where
the data is mounted. Per-row problems (a file that does not exist, a missing value)
are left to the encoders, which send the row to the rejected rows with the reason.
"""

from __future__ import annotations

import csv
import json
import os
import re
from typing import Any, BinaryIO, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

import apache_beam as beam

from tfrecord_io.errors import StorageAccessError
from tfrecord_io.pipelines.building.build_config import InputConfig
from tfrecord_io.pipelines.building.row_plan import pack, unpack
from tfrecord_io.storage import files
from tfrecord_io.usage_errors import UsageError

BATCH_ROWS = 1000


class InputError(UsageError, ValueError):
    """The job's input cannot be used; the message says why."""


def manifest_format(path: str, fmt: str = "auto") -> str:
    if fmt == "auto":
        return "jsonl" if path.lower().endswith((".jsonl", ".json", ".ndjson")) else "csv"
    if fmt not in ("csv", "jsonl"):
        raise InputError(f"unknown manifest format {fmt!r}: use csv or jsonl")
    return fmt


def manifest_base(path: str) -> str:
    """The folder a manifest's relative paths are relative to."""
    return path.rsplit("/", 1)[0] if files.is_remote(path) else os.path.dirname(path)


def check_manifest(path: str, fmt: str, needed: Iterable[str]) -> None:
    """Before anything is written: the manifest exists, is UTF-8 and has a row; a CSV
    header names every column the config reads. Reads the head of the file only."""
    try:
        if not files.exists(path):
            raise InputError(f"manifest {path} does not exist")
        with files.open_raw(path, "rb") as f:
            head = f.read(1 << 16)
    except InputError:
        raise
    except StorageAccessError:  # credentials or permissions: fails the job, naming what to set
        raise
    except Exception as err:  # noqa: BLE001 - unreachable store, no permission ...
        raise InputError(f"manifest {path}: cannot read it ({str(err).splitlines()[0] if str(err) else err})") from None
    text = head.decode("utf-8-sig", errors="ignore") if len(head) == 1 << 16 else None
    if text is None:
        try:
            text = head.decode("utf-8-sig")
        except UnicodeDecodeError as err:
            raise InputError(f"manifest {path} is not UTF-8 text: {err}") from None
    lines = [line for line in text.splitlines() if line.strip()]
    if manifest_format(path, fmt) == "csv":
        if not lines:
            raise InputError(f"manifest {path} is empty (no header line)")
        header = next(csv.reader([lines[0]]))
        missing = [c for c in needed if c not in header]
        if missing:
            raise InputError(
                f"manifest {path}: column(s) {', '.join(missing)} not found (it has: {', '.join(sorted(header))})"
            )
        if len(lines) < 2:
            raise InputError(f"manifest {path} has no rows")
    elif not lines:
        raise InputError(f"manifest {path} has no rows")


# --------------------------------------------------------------------------- manifests
#
# A manifest is read in byte ranges, in parallel, as Beam's ReadAllFromText reads text:
# the launcher-free ``_ManifestRanges`` stage cuts the file into ranges, a Reshuffle
# spreads the ranges (a few small elements, not the rows) over the workers, and each
# worker reads the rows that *begin* in its ranges. A range that does not start at the
# data's first byte starts at the first line after its start, and its last row may run
# past its end: every row is read exactly once, whatever the cut. Lines end at "\n",
# "\r\n" or a lone "\r" (the universal newlines Python's csv module expects).
#
# A row is known by its byte offset (``_row``): where its first byte is in the file
# (``tail -c +$((N + 1)) manifest.csv | head -n 1`` prints it), the same whatever the
# cut, which a line number would not be without reading every line before it.

# Bytes per range: a 64th of the file, at least 1 MiB (a range costs an open and a seek,
# on an object store a request) and at most 64 MiB (Beam's text reads' initial split).
# Enough ranges for the runner to even out the workers (34 for a million 34-byte rows).
MIN_RANGE_BYTES = 1 << 20
MAX_RANGE_BYTES = 64 << 20
_BLOCK = 1 << 20
_EOL = re.compile(rb"\r\n|\r|\n")


class ManifestLayout(NamedTuple):
    """What every range reader of a manifest needs to know: its format, its CSV header,
    where its rows start (after a UTF-8 BOM and the header), its size, and whether it
    may be cut at line breaks (``splittable``)."""

    path: str
    fmt: str
    header: Optional[Tuple[str, ...]]
    data_start: int
    size: int
    splittable: bool


def _lines(raw: BinaryIO, pos: int, stop: int, keep_ends: bool) -> Iterator[Tuple[int, bytes]]:
    """``(offset, line)`` for every line of ``raw`` that begins in ``[pos, stop)``, ``raw``
    positioned at ``pos``, a line start. The last one may end past ``stop``. Without
    ``keep_ends`` the line's terminator is cut off."""
    rest = b""
    base = pos  # file offset of rest[0]
    while True:
        chunk = raw.read(_BLOCK)
        data = rest + chunk if rest else chunk
        at_eof = not chunk
        i = 0
        if b"\r" not in data:
            find = data.find
            while True:
                j = find(b"\n", i)
                if j < 0:
                    break
                if base + i >= stop:
                    return
                yield base + i, data[i : j + 1] if keep_ends else data[i:j]
                i = j + 1
        else:
            last = len(data)
            for m in _EOL.finditer(data):
                if m.end() == last and not at_eof and m.group() == b"\r":
                    break  # a "\r" at the end of what was read: maybe half of "\r\n"
                if base + i >= stop:
                    return
                yield base + i, data[i : m.end()] if keep_ends else data[i : m.start()]
                i = m.end()
        rest = data[i:]
        base += i
        if at_eof:
            if rest and base < stop:
                yield base, rest
            return


def _first_line_start(raw: BinaryIO, start: int) -> Optional[int]:
    """The offset of the first line that begins at or after ``start`` (> 0), None if no
    line does."""
    raw.seek(start - 1)
    head = raw.read(2)
    if head[:1] == b"\n" or (head[:1] == b"\r" and head[1:2] != b"\n"):
        return start
    offset = start - 1
    raw.seek(offset)
    while True:
        block = raw.read(1 << 16)
        if not block:
            return None
        m = _EOL.search(block, 1 if offset == start - 1 else 0)
        if m:
            end = offset + m.end()
            if m.group() == b"\r" and m.end() == len(block) and raw.read(1) == b"\n":
                end += 1  # the "\r\n" was cut by the block
            return end
        offset += len(block)


def _decode(path: str, offset: int, line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"manifest {path}, row at byte {offset}: not UTF-8 text ({err.reason})") from None


def manifest_layout(path: str, fmt: str = "auto", multiline_values: Any = "auto") -> ManifestLayout:
    """Read a manifest's head (and, for a CSV with ``multiline_values: auto``, look for a
    quote character in the rest): where its rows are and whether it can be cut.

    JSONL can always be cut at line breaks (a JSON string holds no raw line break). A
    CSV value can, when quoted; a CSV whose rows hold no ``"`` has none, so it is cut
    (the check reads the file once, at the speed of ``bytes.find``). Otherwise one worker
    reads it, unless ``multiline_values`` is ``False`` (the values have no line breaks:
    cut it, and fail on a quoted value that runs past its line) or ``True`` (one reader,
    without the check)."""
    fmt = manifest_format(path, fmt)
    size = files.file_size(path)
    with files.open_raw(path, "rb") as raw:
        start = 3 if raw.read(3) == b"\xef\xbb\xbf" else 0
        raw.seek(start)
        header: Optional[Tuple[str, ...]] = None
        data_start = start
        if fmt == "csv":
            lines = _LineFeed(_lines(raw, start, size, keep_ends=True), path)
            try:
                fields = next(csv.reader(lines), None)
            except csv.Error as err:
                raise InputError(f"manifest {path}: cannot read its header ({err})") from None
            if not fields:
                raise InputError(f"manifest {path} is empty (no header line)")
            header = tuple(fields)
            data_start = lines.end
        if fmt == "jsonl" or multiline_values is False:
            splittable = True
        elif multiline_values is True:
            splittable = False
        else:
            raw.seek(data_start)
            splittable = True
            while splittable:
                block = raw.read(_BLOCK)
                if not block:
                    break
                splittable = b'"' not in block
    return ManifestLayout(path, fmt, header, data_start, size, splittable)


class _LineFeed:
    """Lines (``str``) for ``csv.reader`` from ``(offset, bytes)`` pairs, remembering the
    offset of the first line each row takes (``first``, reset by the caller) and where
    the last line taken ends (``end``)."""

    def __init__(self, lines: Iterator[Tuple[int, bytes]], path: str):
        self._lines = lines
        self._path = path
        self.first: Optional[int] = None
        self.end = 0

    def __iter__(self) -> _LineFeed:
        return self

    def __next__(self) -> str:
        offset, line = next(self._lines)
        if self.first is None:
            self.first = offset
        self.end = offset + len(line)
        return _decode(self._path, offset, line)


def _csv_row(layout: ManifestLayout, values: List[str], offset: int) -> Dict[str, Any]:
    header = layout.header or ()
    if len(values) > len(header):
        raise InputError(f"manifest {layout.path}, row at byte {offset}: more values than header columns")
    row: Dict[str, Any] = dict(zip(header, values))
    for column in header[len(values) :]:
        row[column] = None  # as csv.DictReader: rejected later by the encoder that needs it
    row["_row"] = offset
    return row


def read_manifest_range(layout: ManifestLayout, start: int, stop: int) -> Iterator[Dict[str, Any]]:
    """The rows that begin in ``[start, stop)`` of the manifest, each with ``_row``, its
    byte offset. A CSV row with fewer values than the header has ``None`` for the rest;
    a line that cannot be a row at all stops the job, naming the file and offset."""
    path = layout.path
    with files.open_raw(path, "rb") as raw:
        if start > layout.data_start:
            first = _first_line_start(raw, start)
            if first is None or first >= stop:
                return
            start = first
        raw.seek(start)
        if layout.fmt == "jsonl":
            for offset, line in _lines(raw, start, stop, keep_ends=False):
                text = _decode(path, offset, line)
                if not text.strip():
                    continue
                try:
                    row = json.loads(text)
                except json.JSONDecodeError as err:
                    raise InputError(f"manifest {path}, row at byte {offset}: not valid JSON ({err.msg})") from None
                if not isinstance(row, dict):
                    raise InputError(f"manifest {path}, row at byte {offset}: expected a JSON object")
                row["_row"] = offset
                yield row
        elif layout.splittable:
            yield from _read_csv_lines(layout, _lines(raw, start, stop, keep_ends=False))
        else:
            feed = _LineFeed(_lines(raw, start, stop, keep_ends=True), path)
            reader = csv.reader(feed)
            while True:
                feed.first = None
                try:
                    values = next(reader)
                except StopIteration:
                    return
                except csv.Error as err:
                    raise InputError(f"manifest {path}, row at byte {feed.first}: {err}") from None
                if values:
                    yield _csv_row(layout, values, feed.first or 0)


def _read_csv_lines(layout: ManifestLayout, lines: Iterator[Tuple[int, bytes]]) -> Iterator[Dict[str, Any]]:
    """CSV rows, one a line (the file may be cut at line breaks), parsed a block of lines
    at a time by ``csv.reader``; a quoted value that runs past its line is an error here
    (``multiline_values: false`` said there is none)."""
    path = layout.path
    while True:
        offsets: List[int] = []
        texts: List[str] = []
        bad: Optional[InputError] = None  # raised once the rows before it are out
        for offset, line in lines:
            if line:  # an empty line is no row (csv.DictReader skips it)
                try:
                    texts.append(_decode(path, offset, line))
                except InputError as err:
                    bad = err
                    break
                offsets.append(offset)
                if len(texts) >= 1024:
                    break
        if not texts and bad is None:
            return
        count = len(texts)
        texts.append("")  # a sentinel: a quote left open on the block's last line swallows it
        reader = csv.reader(texts)
        taken = 0  # rows of this block so far, one line each
        try:
            for values in reader:
                if reader.line_num != taken + 1:
                    raise InputError(
                        f"manifest {path}, row at byte {offsets[taken]}: a quoted value runs past the end of its "
                        "line, but input.multiline_values is false (values hold no line breaks); set it to auto "
                        "or true for a CSV whose quoted values do"
                    )
                if taken == count:
                    break  # the sentinel's empty row
                yield _csv_row(layout, values, offsets[taken])
                taken += 1
        except csv.Error as err:
            raise InputError(f"manifest {path}, row at byte {offsets[taken]}: {err}") from None
        if bad is not None:
            raise bad


def manifest_ranges(layout: ManifestLayout, range_bytes: Optional[int] = None) -> List[Tuple[int, int]]:
    """``[start, stop)`` byte ranges to read the manifest's rows in (``range_bytes`` each,
    default: see ``MIN_RANGE_BYTES``): one for the whole of an unsplittable one."""
    start, size = layout.data_start, layout.size
    if range_bytes is None:
        range_bytes = min(MAX_RANGE_BYTES, max(MIN_RANGE_BYTES, size // 64))
    if not layout.splittable or size - start <= range_bytes:
        return [(start, size)] if size > start else []
    return [(s, min(s + range_bytes, size)) for s in range(start, size, range_bytes)]


def _batches(rows: Iterable[Dict[str, Any]], size: int) -> Iterator[List[Dict[str, Any]]]:
    batch: List[Dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


class _ManifestRanges(beam.DoFn):
    """A manifest's path -> ``(layout, start, stop)`` per range (in a worker: it reads the
    file's head, and for a CSV the quote check)."""

    def __init__(self, fmt: str, multiline_values: Any, range_bytes: Optional[int]):
        self._fmt = fmt
        self._multiline = multiline_values
        self._range_bytes = range_bytes

    def process(self, path: str):
        layout = manifest_layout(path, self._fmt, self._multiline)
        for start, stop in manifest_ranges(layout, self._range_bytes):
            yield (tuple(layout), start, stop)


class _ReadManifestRange(beam.DoFn):
    def __init__(self, batch_rows: int):
        self._batch = batch_rows

    def process(self, element):
        layout, start, stop = element
        yield from _batches(read_manifest_range(ManifestLayout(*layout), start, stop), self._batch)


class Spread(beam.PTransform):
    """Packed ``(key, batch)`` pairs -> the batches, spread over the workers by the
    runner's shuffle. Beam's ``Reshuffle`` would do, but moves the rows as Python
    objects, which the local runner keeps in its own process (about 1 KB a row);
    packed they are about 20 bytes a row."""

    def expand(self, pairs):
        return (
            pairs
            | "Typed" >> beam.Map(lambda kv: kv).with_output_types(beam.typehints.KV[str, bytes])
            | "Group" >> beam.GroupByKey()
            | "Unpack" >> beam.FlatMap(lambda kv: [unpack(b) for b in kv[1]])
        )


class ReadManifest(beam.PTransform):
    """A manifest -> batches (lists) of row dicts, media paths as written in it, each
    row with ``_row``, its byte offset in the file.

    The file is cut into byte ranges of ``range_bytes`` (default: a 64th of the file,
    1-64 MiB) read in parallel (see above);
    the Reshuffle between cutting and reading moves the ranges, not the rows, so the
    rows are planned in the worker that read them. A CSV that may hold quoted line
    breaks (see :func:`manifest_layout`) is one range, read by one worker."""

    def __init__(
        self,
        path: str,
        fmt: str = "auto",
        batch_rows: int = BATCH_ROWS,
        multiline_values: Any = "auto",
        range_bytes: Optional[int] = None,
    ):
        super().__init__()
        self._path = path
        self._fmt = fmt
        self._batch = batch_rows
        self._multiline = multiline_values
        self._range_bytes = range_bytes

    def expand(self, pbegin):
        return (
            pbegin
            | "Manifest" >> beam.Create([self._path])
            # Any, not a tuple type: Prism 2.62 cannot decode Python's tuple coder at a
            # GroupByKey (apache/beam#32636)
            | "Ranges"
            >> beam.ParDo(_ManifestRanges(self._fmt, self._multiline, self._range_bytes)).with_output_types(
                beam.typehints.Any
            )
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadRanges" >> beam.ParDo(_ReadManifestRange(self._batch))
        )


# --------------------------------------------------------------------------- folders


def directory_pattern(root: str, pattern: str = "*", within: str = "*") -> str:
    """Beam's match pattern for ``root/<label>/<file>`` (``*`` does not cross a ``/``)."""
    return files.join(root, within, pattern) if files.is_remote(root) else os.path.join(root, within, pattern)


def check_directory(root: str, pattern: str = "*") -> None:
    """Before anything is written: at least one file matches ``root/<label>/<pattern>``
    (Beam's match, stopped at the first hit)."""
    FileSystems = files.beam_filesystems()

    if not files.is_remote(root) and not os.path.isdir(root):
        raise InputError(f"input directory {root} does not exist")
    try:
        with files.refusals(root):
            found = FileSystems.match([directory_pattern(root, pattern)], limits=[1])[0].metadata_list
        if not found:
            files.check_bucket(root)
    except StorageAccessError:  # credentials or permissions: fails the job, naming what to set
        raise
    except Exception as err:  # noqa: BLE001 - unreachable store, no permission ...
        raise InputError(f"input directory {root}: cannot list it ({str(err).splitlines()[0]})") from None
    if not found:
        raise InputError(f"input directory {root} has no files under root/<label>/ matching {pattern!r}")


def listing_rows(root: str, metadata: Iterable[Any], path_column: str, label_column: str) -> Iterator[Dict[str, Any]]:
    """Rows ``{path: <label>/<file>, label, _row, _stat}`` from Beam ``FileMetadata``
    under ``root`` (hidden files and folders left out)."""
    prefix = root.rstrip("/") + "/"
    for meta in metadata:
        path = meta.path
        rel = path[len(prefix) :] if path.startswith(prefix) else os.path.relpath(path, root)
        if not files.is_remote(root):
            rel = rel.replace(os.sep, "/")
        label, _, name = rel.partition("/")
        if not name or "/" in name or label.startswith(".") or name.startswith("."):
            continue
        yield {
            path_column: rel,
            label_column: label,
            "_row": rel,
            "_stat": [[int(meta.size_in_bytes), float(meta.last_updated_in_seconds or 0.0)]],
        }


class _ListGroups(beam.DoFn):
    """The root -> what to list in parallel: each label folder, on a local disk and on
    S3 (its folders from one delimited listing: ``s3_listing.folders``), so the label
    folders are listed by the workers at once rather than the whole prefix by one (a
    listing is a page of 1,000 keys per request, one request after the other). On
    other object stores the whole prefix, by one worker (Beam's match lists no
    folders)."""

    def process(self, root: str):
        if files.is_remote(root):
            client = files.s3_folder_client(root)
            if client is None:
                yield "*"
                return
            from tfrecord_io.storage import s3_listing

            with files.refusals(root):
                names = s3_listing.folders(*client)
            yield from (name for name in names if not name.startswith("."))
            return
        with os.scandir(root) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_dir() and not entry.name.startswith("."):
                    yield entry.name


class _ListFiles(beam.DoFn):
    def __init__(self, root: str, pattern: str, path_column: str, label_column: str, batch_rows: int):
        self._root = root
        self._pattern = pattern
        self._columns = (path_column, label_column)
        self._batch = batch_rows

    def process(self, within: str):
        # "*" in the folder's place only for an object store; a local label is a name,
        # its glob characters escaped as one-character classes
        folder = within if within == "*" else "".join("[" + c + "]" if c in "*?[" else c for c in within)
        result = files.match([directory_pattern(self._root, self._pattern, folder)])[0]
        rows = listing_rows(self._root, sorted(result.metadata_list, key=lambda m: m.path), *self._columns)
        for number, batch in enumerate(_batches(rows, self._batch)):
            yield f"{within}#{number}", pack(batch)


class ListDirectory(beam.PTransform):
    """A ``root/<label>/<file>`` tree on any Beam filesystem -> batches of rows
    ``{path: "<label>/<file>", label: "<label>"}`` (``path_column``/``label_column``),
    each with its file's size and modification time from the listing (no stat
    afterwards). ``pattern`` selects the file names."""

    def __init__(
        self,
        root: str,
        pattern: str = "*",
        path_column: str = "path",
        label_column: str = "label",
        batch_rows: int = BATCH_ROWS,
    ):
        super().__init__()
        self._root = root.rstrip("/") if files.is_remote(root) else os.path.normpath(root)
        self._args = (pattern, path_column, label_column, batch_rows)

    def expand(self, pbegin):
        return (
            pbegin
            | "Root" >> beam.Create([self._root])
            | "Folders" >> beam.ParDo(_ListGroups())
            | "SpreadFolders" >> beam.Reshuffle()
            | "ListFiles" >> beam.ParDo(_ListFiles(self._root, *self._args))
            | "Spread" >> Spread()
        )


def _directory(input_cfg: InputConfig) -> str:
    if not input_cfg.directory:  # validate_build_config requires one of the two
        raise InputError("input: give exactly one of input.manifest or input.directory")
    return input_cfg.directory


def input_source(input_cfg: InputConfig) -> beam.PTransform:
    """The reading transform for a config's ``input`` section."""
    if input_cfg.manifest:
        return ReadManifest(input_cfg.manifest, input_cfg.format, multiline_values=input_cfg.multiline_values)
    return ListDirectory(_directory(input_cfg), input_cfg.glob, input_cfg.path_column, input_cfg.label_column)


def input_base_dir(input_cfg: InputConfig) -> str:
    """What relative media paths of this input are relative to."""
    if input_cfg.manifest:
        return manifest_base(input_cfg.manifest)
    root = _directory(input_cfg)
    return root.rstrip("/") if files.is_remote(root) else os.path.normpath(root)


def check_input(input_cfg: InputConfig, needed: Iterable[str], key_column: Optional[str]) -> None:
    """The launcher's cheap checks of the input (see the module docstring)."""
    if input_cfg.manifest:
        wanted = list(needed) + ([key_column] if key_column else [])
        check_manifest(input_cfg.manifest, input_cfg.format, sorted(set(wanted)))
        return
    directory = _directory(input_cfg)
    check_directory(directory, input_cfg.glob)
    path_column, label_column = input_cfg.path_column, input_cfg.label_column
    missing = [c for c in needed if c not in (path_column, label_column)]
    if key_column and key_column not in (path_column, label_column):
        missing.append(key_column)
    if missing:
        raise InputError(
            f"directory {directory}: column(s) {', '.join(sorted(set(missing)))} not found "
            f"(it has: {label_column}, {path_column})"
        )
