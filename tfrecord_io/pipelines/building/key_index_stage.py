"""The build's key index stage: the key parts the shard writers left (one per shard,
sorted by key) -> one key index per split, ``<version>/<name>-<split>.keyindex``.

It runs in a worker per split (the launcher reads nothing), after every shard of the
split is written, before the finalize stage records the index in
``tfrecord_io_info.json``. The parts are read whole (36 bytes plus the key per row: a
split of a million rows is about 50 MB in this worker for a moment), sorted once, and
written in blocks (``tfrecord_io.format.key_index``). A key is in one shard only (its shard is a
hash of it) and each shard writer has already removed its duplicates, so the merged
keys are distinct; the writer checks that they are.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List

import apache_beam as beam

from tfrecord_io.format.key_index import KeyIndexReader, KeyIndexWriter, key_index_name
from tfrecord_io.pipelines.building.build_spec import BuildSpec
from tfrecord_io.storage import files


def merge_parts(version_dir: str, name: str, split: str, parts: Iterable[str]) -> Dict[str, Any]:
    """Merge a split's key parts into its key index; the note ``tfrecord_io_info.json``
    keeps (``path`` relative to the version, ``entries``, ``bytes``, ``sha256``)."""
    keys: List[bytes] = []
    shards: List[Any] = []
    offsets: List[Any] = []
    lengths: List[Any] = []
    hashes: List[bytes] = []
    for part in sorted(parts):
        with KeyIndexReader(part, data=files.read_bytes(part)) as reader:
            for blk in reader.blocks_in_order():
                keys += blk.keys
                shards.append(blk.shards)
                offsets.append(blk.offsets)
                lengths.append(blk.lengths)
                hashes.append(blk.hashes)
    import numpy as np

    order = sorted(range(len(keys)), key=keys.__getitem__)
    cat = {
        "shards": np.concatenate(shards) if shards else np.zeros(0, "<u4"),
        "offsets": np.concatenate(offsets) if offsets else np.zeros(0, "<u8"),
        "lengths": np.concatenate(lengths) if lengths else np.zeros(0, "<u4"),
    }
    idx = np.asarray(order, dtype=np.int64)
    blob = np.frombuffer(b"".join(hashes), dtype="V16")[idx].tobytes() if keys else b""
    relpath = key_index_name(name, split)
    writer = KeyIndexWriter(files.join(version_dir, relpath))
    try:
        writer.add_many([keys[i] for i in order], cat["shards"][idx], cat["offsets"][idx], cat["lengths"][idx], blob)
        writer.close()
    except BaseException:
        writer.abort()
        raise
    return {"split": split, "path": relpath, "entries": writer.entries, "bytes": writer.bytes, "sha256": writer.sha256}


class MergeKeyIndex(beam.DoFn):
    """``(split, [shard notes])`` -> the split's key index written, its note out."""

    def __init__(self, spec: BuildSpec):
        self._spec = spec

    def process(self, element, claim):
        if claim["state"] == "new":  # else already published from the same inputs: nothing was written
            split, notes = element
            parts = [n["key_part"] for n in notes if n.get("key_part")]
            yield merge_parts(self._spec.version_dir, self._spec.name, split, parts)
