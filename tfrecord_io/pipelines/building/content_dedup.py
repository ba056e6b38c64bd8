"""``dedup: content``: rows whose encoded Example is byte-identical to another row's are
dropped, under whatever key, after the shards are written: in a full build, among the
build's rows; in an append (``build --append``), among the appended rows and against the
rows the base version keeps.

Why after: an Example's bytes exist only where it is encoded, in the shard writer, and
two rows with the same content may have any keys, so any shards. This stage sees every
new shard's key part (key, offset, length and the 16-byte BLAKE2b of each record), finds
the hashes seen more than once, keeps the row whose key sorts first (byte order: the same
whatever the runner or input order) and rewrites only the shards that held the others
(frames copied, CRCs checked, not re-encoded), with their key parts. It runs once, in a
worker, on the shard notes; the finalize stage then counts the dropped rows as
duplicates. Builds with ``dedup: error`` or ``key`` do not have this stage.

An append compares against the base version through its key indexes, which hold every
row's content hash: they are scanned (not the base's records) for the appended rows'
hashes. A base row is always kept (the append adds rows, it does not remove the base's);
the rows an append replaces (``on_existing: replace``) are not compared against, since
they leave the dataset, and a row that replaces one is never dropped: its key would leave
the dataset with it (it may still be the kept row that names others).

Hash collisions: 128 bits of BLAKE2b make an accidental collision unthinkable, but they
are a truncated digest (64-bit collision resistance, within reach of someone crafting
Examples), so a row is dropped only when its bytes equal the kept row's: each row whose
hash is seen twice is read (one ranged read; a base row only until one matches) and
compared. Rows that only share a hash are both kept.
"""

from __future__ import annotations

import os
from typing import AbstractSet, Any, BinaryIO, Callable, Dict, Iterable, List, NamedTuple, Set, Tuple

import apache_beam as beam

from tfrecord_io.format.framing import FRAME_OVERHEAD
from tfrecord_io.format.index import build_index, index_path_for, load_index
from tfrecord_io.format.key_index import HASH_BYTES, KeyIndexReader, KeyIndexWriter
from tfrecord_io.format.random_access import decode_frame
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.pipelines.building.build_spec import BuildSpec
from tfrecord_io.storage import files

EXAMPLES = 10


def rewrite_without(path: str, has_index: bool, gone: set) -> Tuple[Dict[int, int], int, str]:
    """Rewrite the shard at ``path`` without the records at offsets ``gone`` (and its
    index); ``(old offset -> new offset of each kept record, bytes, sha256)``."""
    data = memoryview(files.read_bytes(path))
    index = load_index(index_path_for(path)) if has_index else build_index(path)
    writer = RecordWriter(
        path, atomic=not files.is_remote(path), index_path=index_path_for(path) if has_index else None, digest=True
    )
    moved: Dict[int, int] = {}
    pos = 0
    try:
        for off, size in zip(index.offsets.tolist(), index.sizes.tolist()):
            if off in gone:
                continue
            writer.write_records([decode_frame(data[off : off + size], path, off)])
            moved[off] = pos
            pos += size
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return moved, int(writer.stored_bytes or 0), str(writer.sha256)


class _Row(NamedTuple):
    """A record that may be a duplicate: where to read it and which shard note holds it."""

    key: bytes
    path: str  # the shard file
    offset: int
    length: int
    note: int  # the number of its shard note; BASE for a row of the base version (always kept)


BASE = -1


class _Records:
    """Single records by offset (one seek and read each; a handle per shard kept open),
    both CRCs checked."""

    def __init__(self) -> None:
        self._open: Dict[str, BinaryIO] = {}

    def read(self, row: _Row) -> bytes:
        handle = self._open.get(row.path)
        if handle is None:
            handle = self._open[row.path] = files.open_raw(row.path, "rb")
        handle.seek(row.offset)
        frame = handle.read(row.length + FRAME_OVERHEAD)
        return bytes(decode_frame(frame, row.path, row.offset))

    def close(self) -> None:
        for handle in self._open.values():
            handle.close()
        self._open = {}


def same_content(
    base: List[_Row], new: List[_Row], read: Callable[[_Row], bytes], keep: AbstractSet[bytes] = frozenset()
) -> List[Tuple[_Row, _Row]]:
    """``(dropped, kept)`` for rows of one content hash: each new row whose bytes equal a
    base row's (the first such by key) or an earlier new row's (by key), unless its key
    is in ``keep`` (the keys an append replaces). Bytes are compared, not just hashes
    (module doc); a base row is read only when the rows read so far do not match the
    new row."""
    base = sorted(base)
    classes: List[Tuple[bytes, _Row]] = []  # (content, the row kept for it)
    next_base = 0
    out: List[Tuple[_Row, _Row]] = []
    for row in sorted(new):
        data = read(row)
        kept = next((k for content, k in classes if content == data), None)
        while kept is None and next_base < len(base):
            candidate = base[next_base]
            next_base += 1
            content = read(candidate)
            if any(content == c for c, _ in classes):
                continue  # a base row like an earlier one: that one (first by key) is named
            classes.append((content, candidate))
            if content == data:
                kept = candidate
        if kept is None:  # no base row holds it: every base row has been read by now
            classes.append((data, row))
        elif row.key not in keep:
            out.append((row, kept))
    return out


def _new_rows(notes: List[Dict[str, Any]], version_dir: str) -> Dict[bytes, List[_Row]]:
    """The rows of the shards just written, by content hash (from their key parts)."""
    by_hash: Dict[bytes, List[_Row]] = {}
    for n, note in enumerate(notes):
        if not note.get("key_part"):
            continue
        path = files.join(version_dir, note["path"])
        with KeyIndexReader(note["key_part"], data=files.read_bytes(note["key_part"])) as reader:
            for blk in reader.blocks_in_order():
                for i, key in enumerate(blk.keys):
                    h = blk.hashes[HASH_BYTES * i : HASH_BYTES * (i + 1)]
                    by_hash.setdefault(h, []).append(_Row(key, path, int(blk.offsets[i]), int(blk.lengths[i]), n))
    return by_hash


def _base_rows(
    base_dir: str, base: Dict[str, Any], wanted: Dict[bytes, List[_Row]], replaced: Set[Tuple[str, int, int]]
) -> Dict[bytes, List[_Row]]:
    """The base version's rows whose content hash is one of ``wanted``'s, from its key
    indexes (the records are not read), less the rows ``replaced`` (split, shard, offset)."""
    out: Dict[bytes, List[_Row]] = {}
    for split, entry in sorted((base.get("splits") or {}).items()):
        note = entry.get("key_index")
        if not note:
            continue
        shard_paths = [files.join(base_dir, s["path"]) for s in entry["shards"]]
        path = files.join(base_dir, note["path"])
        with KeyIndexReader(path, data=files.read_bytes(path)) as reader:
            for blk in reader.blocks_in_order():
                hashes = blk.hashes
                for i in range(len(blk)):
                    h = hashes[HASH_BYTES * i : HASH_BYTES * (i + 1)]
                    if h not in wanted:
                        continue
                    shard, offset = int(blk.shards[i]), int(blk.offsets[i])
                    if (split, shard, offset) in replaced:
                        continue
                    row = _Row(blk.key(i), shard_paths[shard], offset, int(blk.lengths[i]), BASE)
                    out.setdefault(h, []).append(row)
    return out


def _drop(
    spec: BuildSpec, notes: List[Dict[str, Any]], pairs: List[Tuple[_Row, _Row]], kept_in: str = ""
) -> List[Dict[str, Any]]:
    """The notes after the dropped rows of ``pairs`` are taken out of their shards and key
    parts (only the shards holding one are rewritten), counted and named."""
    gone: Dict[int, set] = {}
    examples: Dict[int, List[Dict[str, Any]]] = {}
    for dropped, kept in sorted(pairs):
        gone.setdefault(dropped.note, set()).add(dropped.offset)
        example = {"key": dropped.key.decode("utf-8"), "kept_key": kept.key.decode("utf-8"), "same_content": True}
        if kept.note == BASE:
            example["kept_in"] = kept_in
        examples.setdefault(dropped.note, []).append(example)
    out = list(notes)
    for n, offsets in sorted(gone.items()):
        note = dict(notes[n])
        path = files.join(spec.version_dir, note["path"])
        moved, size, sha = rewrite_without(path, bool(note.get("index")), offsets)
        part = note["key_part"]
        with KeyIndexReader(part, data=files.read_bytes(part)) as reader:
            entries = [e._replace(offset=moved[e.offset]) for e in reader if e.offset in moved]
        writer = KeyIndexWriter(part)  # replaces the part (a temporary name, then a rename; one upload)
        writer.add_all(entries)
        writer.close()
        note.update(
            records=note["records"] - len(offsets),
            bytes=size,
            sha256=sha,
            duplicates=note.get("duplicates", 0) + len(offsets),
            duplicate_examples=(note.get("duplicate_examples") or []) + examples[n][:EXAMPLES],
        )
        out[n] = note
    return out


def drop_identical(spec: BuildSpec, notes: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The shard notes of a full build after byte-identical Examples are dropped (module doc)."""
    records = _Records()
    try:
        pairs = [
            p
            for rows in _new_rows(notes, spec.version_dir).values()
            if len(rows) > 1
            for p in same_content([], rows, records.read)
        ]
    finally:
        records.close()
    return _drop(spec, notes, pairs)


def drop_identical_appended(
    spec: BuildSpec,
    base_dir: str,
    base: Dict[str, Any],
    notes: List[Dict[str, Any]],
    replaced: Iterable[Tuple[str, int, int, str]],
) -> List[Dict[str, Any]]:
    """The notes of an append's new shards after the appended rows byte-identical to a row
    the base keeps, or to another appended row, are dropped (module doc). ``replaced``:
    the base rows the append replaces, ``(split, shard, offset, key)``."""
    replaced = list(replaced)
    new = _new_rows(notes, spec.version_dir)
    old = _base_rows(base_dir, base, new, {(s, n, off) for s, n, off, _ in replaced})
    replacing = {key.encode("utf-8") for _, _, _, key in replaced}
    records = _Records()
    try:
        pairs = [
            p
            for h, rows in new.items()
            if len(rows) > 1 or h in old
            for p in same_content(old.get(h, []), rows, records.read, replacing)
        ]
    finally:
        records.close()
    return _drop(spec, notes, pairs, str(base.get("version") or os.path.basename(base_dir.rstrip("/"))))


class DropIdentical(beam.DoFn):
    """All shard notes (one list) -> each note, after :func:`drop_identical`."""

    def __init__(self, spec: BuildSpec):
        self._spec = spec

    def process(self, notes, claim):
        if claim["state"] != "new":
            return
        yield from drop_identical(self._spec, list(notes))


class DropIdenticalAppended(beam.DoFn):
    """An append's new shard notes (one list) -> each note, after
    :func:`drop_identical_appended`; ``replaced``: the base rows the append replaces."""

    def __init__(self, spec: BuildSpec, base_dir: str, base: Dict[str, Any]):
        self._spec, self._base_dir, self._base = spec, base_dir, base

    def process(self, notes, replaced, claim):
        if claim["state"] != "new":
            return
        yield from drop_identical_appended(self._spec, self._base_dir, self._base, list(notes), replaced)
