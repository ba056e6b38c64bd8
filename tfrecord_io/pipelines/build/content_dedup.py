"""``dedup: content``: rows whose encoded Example is byte-identical to another row's of
the same build are dropped, under whatever key, after the shards are written.

Why after: an Example's bytes exist only where it is encoded, in the shard writer, and
two rows with the same content may have any keys, so any shards. This stage sees every
shard's key part (key, offset, length and the 16-byte BLAKE2b of each record), finds the
hashes seen more than once, keeps the row whose key sorts first (byte order: the same
whatever the runner or input order) and rewrites only the shards that held the others
(frames copied, CRCs checked, not re-encoded), with their key parts. It runs once, in a
worker, on the shard notes; the finalize stage then counts the dropped rows as
duplicates. Builds with ``dedup: error`` or ``key`` do not have this stage.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import apache_beam as beam

from tfrecord_io import files
from tfrecord_io.index import build_index, index_path_for, load_index
from tfrecord_io.key_index import KeyIndexReader, KeyIndexWriter
from tfrecord_io.pipelines.build.spec import BuildSpec
from tfrecord_io.random_access import decode_frame
from tfrecord_io.writer import RecordWriter

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


def drop_identical(spec: BuildSpec, notes: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The shard notes after byte-identical Examples are dropped (see the module)."""
    first: Dict[bytes, Tuple[bytes, int]] = {}  # hash -> (kept key, note number)
    rows: List[Tuple[bytes, bytes, int, int]] = []  # (hash, key, note number, offset)
    for n, note in enumerate(notes):
        if not note.get("key_part"):
            continue
        with KeyIndexReader(note["key_part"], data=files.read_bytes(note["key_part"])) as reader:
            for blk in reader.blocks_in_order():
                for i, key in enumerate(blk.keys):
                    h = blk.hashes[16 * i : 16 * i + 16]
                    rows.append((h, key, n, int(blk.offsets[i])))
                    kept = first.get(h)
                    if kept is None or key < kept[0]:
                        first[h] = (key, n)
    gone: Dict[int, set] = {}
    examples: Dict[int, List[Dict[str, Any]]] = {}
    for h, key, n, offset in rows:
        kept_key, _ = first[h]
        if key != kept_key:
            gone.setdefault(n, set()).add(offset)
            examples.setdefault(n, []).append(
                {"key": key.decode("utf-8"), "kept_key": kept_key.decode("utf-8"), "same_content": True}
            )
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


class DropIdentical(beam.DoFn):
    """All shard notes (one list) -> each note, after :func:`drop_identical`."""

    def __init__(self, spec: BuildSpec):
        self._spec = spec

    def process(self, notes, claim):
        if claim["state"] != "new":
            return
        yield from drop_identical(self._spec, list(notes))
