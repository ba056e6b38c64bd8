"""What the planning stages compute per row, as plain functions (no Beam): its key, its
placement, its estimated size, and its share of the input fingerprint.

A row is a dict column -> value. Media values are bytes, or paths relative to the
build's ``base_dir`` (the input root of a folder, the folder of a manifest), or absolute
paths and URLs. Columns whose names start with ``_`` are bookkeeping, not data:
``_row`` says where the row came from (the byte offset of its line in a manifest, a
file under the input root) for rejected rows, ``_stat`` carries ``[size, mtime]`` per media column
when a listing already knows them. Neither enters the key or the fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import stat
import zlib
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from tfrecord_io.pipelines.building import placement
from tfrecord_io.storage import files

# [split, shard_hash, order, row]: what travels from planning to the shard writers.
Prepared = Tuple[str, int, Any, Dict[str, Any]]


def pack(value: Any) -> bytes:
    """Rows as they cross a shuffle or wait for a side input: pickled and compressed
    (zlib level 1, about 20 bytes a row for paths and labels, 1-2 us a row each way).
    A runner holds these buffers (the local runner in its own process, where Python
    objects would cost ten times the bytes), and a cluster moves them over the network."""
    return zlib.compress(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), 1)


def unpack(data: bytes) -> Any:
    return pickle.loads(zlib.decompress(data))


def _json_default(value: Any) -> Any:
    """JSON for what JSON has no type for: media bytes by their SHA-256 (a key or a
    fingerprint must not carry a whole image), anything else as its ``str``."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "sha256:" + hashlib.sha256(bytes(value)).hexdigest()
    return str(value)


def canonical(row: Mapping[str, Any]) -> str:
    """The row's data as sorted-key JSON, bookkeeping columns left out."""
    return json.dumps(
        {k: v for k, v in row.items() if not k.startswith("_")},
        sort_keys=True,
        default=_json_default,
        ensure_ascii=False,
    )


def row_key(row: Mapping[str, Any], key_column: Optional[str]) -> str:
    """The string a row is split, sharded and ordered by: the ``key`` column's value, or
    without one the whole row (:func:`canonical`). Paths in it are as the input gives
    them, relative to the input root or manifest folder, so the key is the same
    wherever the data is mounted."""
    if key_column:
        value = row.get(key_column)
        return "" if value is None else str(value)
    return canonical(row)


def resolve(base_dir: Optional[str], value: str) -> str:
    """A media path as given in a row -> a path a worker can open."""
    if not base_dir or "://" in value or os.path.isabs(value):
        return value
    if files.is_remote(base_dir):
        return files.join(base_dir, value)
    return os.path.normpath(os.path.join(base_dir, value))


class Resolver:
    """:func:`resolve` for one ``base_dir``, made once per stage: a plain relative name
    (no ``.``/``..``/empty segment, no scheme) under a local base is the normalised base,
    ``/`` and the name, which is what ``normpath(join(...))`` gives, without its cost
    (a few microseconds a row at a million rows); anything else goes to :func:`resolve`."""

    def __init__(self, base_dir: Optional[str]):
        self._base = base_dir
        self._prefix: Optional[str] = None
        if base_dir and os.sep == "/" and not files.is_remote(base_dir):
            norm = os.path.normpath(base_dir)
            self._prefix = "" if norm == "." else (norm if norm.endswith("/") else norm + "/")

    def __call__(self, value: str) -> str:
        prefix = self._prefix
        if (
            prefix is not None
            and value[:1] not in ("/", ".", "")
            and "/." not in value
            and "//" not in value
            and not value.endswith("/")
        ):
            return prefix + value
        return resolve(self._base, value)


class PlanSummary:
    """What the planning pass learns about all rows, merged across batches in any order:
    rows, estimated bytes per split, an order-independent fingerprint of the rows (the
    sum of their digests mod 2**256) and the distinct values of ``vocabulary: auto``
    columns."""

    MOD = 1 << 256

    def __init__(self, splits: Iterable[str] = (), vocab_columns: Iterable[str] = ()):
        self.rows = 0
        self.bytes: Dict[str, int] = {s: 0 for s in splits}
        self.digest = 0
        self.vocab: Dict[str, set] = {c: set() for c in vocab_columns}

    def merge(self, other: PlanSummary) -> PlanSummary:
        self.rows += other.rows
        for split, size in other.bytes.items():
            self.bytes[split] = self.bytes.get(split, 0) + size
        self.digest = (self.digest + other.digest) % self.MOD
        for col, values in other.vocab.items():
            self.vocab.setdefault(col, set()).update(values)
        return self

    def to_dict(self) -> Dict[str, Any]:
        return {
            "rows": self.rows,
            "bytes": dict(sorted(self.bytes.items())),
            "digest": f"{self.digest:064x}",
            "vocab": {c: sorted(v) for c, v in sorted(self.vocab.items())},
        }


def _stat_paths(paths: Iterable[str], listings: Any = None) -> Dict[str, Optional[Tuple[int, float]]]:
    """``{path: (size, mtime)}``, ``None`` for a missing file or a folder: one ``stat`` per
    local file, listings for remote ones (``files.stat_many``; ``listings``: the
    stage's ``s3_listing.FolderListings``)."""
    out: Dict[str, Optional[Tuple[int, float]]] = {}
    remote = []
    for path in paths:
        if files.is_remote(path):
            remote.append(path)
            continue
        try:
            st = os.stat(path)
        except OSError:
            out[path] = None
            continue
        out[path] = None if stat.S_ISDIR(st.st_mode) else (int(st.st_size), float(st.st_mtime))
    if remote:
        out.update(files.stat_many(remote, listings))
    return out


class _Layout:
    """What planning needs to know about rows with one set of columns (in one order),
    worked out once per batch and layout instead of once per row: the data columns
    sorted (the fingerprint's order), each one's media index (or -1), and the JSON of
    the sorted names that starts each row's fingerprint text."""

    def __init__(self, keys: Tuple[str, ...], media: Sequence[str]):
        self.columns = tuple(sorted(k for k in keys if not k.startswith("_")))
        self.media_index = tuple(media.index(c) if c in media else -1 for c in self.columns)
        self.prefix = json.dumps(self.columns)


def _estimate_bytes(layout: _Layout, row: Mapping[str, Any], stats: List[Any]) -> int:
    """Estimated Example bytes of a row: its media files' stored sizes (bytes values:
    their length) plus the length of its other values."""
    size = 0
    for col, index in zip(layout.columns, layout.media_index):
        value = row[col]
        if value is None:
            continue
        if isinstance(value, (bytes, bytearray, memoryview)):
            size += len(value)
        elif index >= 0 and isinstance(value, str):
            found = stats[index]
            size += int(found[0]) if found else 0
        else:
            size += len(str(value))
    return size


def _fingerprint_text(layout: _Layout, row: Mapping[str, Any], stats: List[Any]) -> str:
    """A row's data (sorted columns) and its media files' ``[size, mtime]`` as JSON: what
    its share of the input fingerprint is the SHA-256 of. Values JSON has no type for:
    media bytes by their SHA-256, anything else as its ``str`` (:func:`_json_default`)."""
    values = [row[c] for c in layout.columns]
    values.append(stats)
    try:
        return layout.prefix + json.dumps(values)
    except (TypeError, ValueError):
        return layout.prefix + json.dumps(values, default=_json_default)


def prepare_batch(
    rows: Iterable[Dict[str, Any]],
    *,
    key_column: Optional[str],
    cutoffs: Sequence[Tuple[str, float]],
    seed: int,
    shuffle: bool,
    media_columns: Sequence[str],
    base_dir: Optional[str],
    vocab_sources: Mapping[str, str],
    resolver: Optional[Resolver] = None,
    listings: Any = None,
) -> Tuple[List[Prepared], PlanSummary]:
    """Place a batch of rows and summarise it: ``(prepared, summary)``.

    Media files are stat'ed in one call per batch (listings on an object store;
    ``listings``: what the caller keeps between batches, ``s3_listing.FolderListings``)
    unless the row carries ``_stat``; size and modification time enter the
    fingerprint, size the shard-count estimate. With ``shuffle: false`` a row's order
    in its shard is its key (rows sort by key) instead of the key's hash.

    Per row: one SHA-256 of the key for the placement (``placement.place``), one of the
    fingerprint text; the whole row as canonical JSON only when it is the key (no
    ``key`` column)."""
    rows = list(rows)
    summary = PlanSummary((name for name, _ in cutoffs), vocab_sources)
    media = list(media_columns)
    resolve_path = resolver if resolver is not None else Resolver(base_dir)
    # each row's media paths resolved once; stat'ed together unless listed
    resolved: List[Optional[List[Optional[str]]]] = []
    wanted = set()
    for row in rows:
        if "_stat" in row:
            resolved.append(None)
            continue
        paths: List[Optional[str]] = []
        for col in media:
            value = row.get(col)
            path = resolve_path(value) if isinstance(value, str) and value else None
            paths.append(path)
            if path is not None:
                wanted.add(path)
        resolved.append(paths)
    stat_of = _stat_paths(wanted, listings) if wanted else {}
    prepared: List[Prepared] = []
    digest_sum = 0
    sizes = summary.bytes
    layouts: Dict[Tuple[str, ...], _Layout] = {}
    sha256 = hashlib.sha256
    from_bytes = int.from_bytes
    for row, row_paths in zip(rows, resolved):
        listed = row.get("_stat")
        if listed is not None:  # a copy without it: a stage must not change its input elements
            row = {k: v for k, v in row.items() if k != "_stat"}
        shape = tuple(row)
        layout = layouts.get(shape)
        if layout is None:
            layout = layouts[shape] = _Layout(shape, media)
        # [size, mtime] (or None) of each media column's file, from the stat or the listing
        stats: List[Any] = []
        for i, col in enumerate(media):
            if row_paths is None:
                assert listed is not None  # unresolved: the row came with its "_stat"
                value = row.get(col)
                stats.append(listed[i] if isinstance(value, str) and value else None)
            else:
                path = row_paths[i]
                stats.append(stat_of.get(path) if path is not None else None)
        key = row_key(row, key_column)
        split, shard_hash, order = placement.place(key, cutoffs, seed)
        sizes[split] += _estimate_bytes(layout, row, stats)
        digest_sum += from_bytes(sha256(_fingerprint_text(layout, row, stats).encode()).digest(), "big")
        for col, src in vocab_sources.items():
            value = row.get(src)
            if value not in (None, ""):
                summary.vocab[col].add(str(value))
        prepared.append((split, shard_hash, order if shuffle else key, row))
    summary.rows = len(rows)
    summary.digest = digest_sum % PlanSummary.MOD
    return prepared, summary


def fingerprint(settings: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    """SHA-256 of what decides a build's content: the config (without where it is
    written and which runner runs it) and the rows with their media files' size and
    modification time (:class:`PlanSummary`'s digest, independent of row order). A
    file rewritten in place with the same size and time is not noticed: hashing every
    input would cost a full read before every retry."""
    canon = json.dumps(
        {"config": settings, "rows": summary["rows"], "digest": summary["digest"]},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()
