"""Look up a built dataset's records by key: ``open_dataset(root).get(key)``.

Each key costs one probe of its split's key index (one ranged read of one block; the
index's footer is read once, when the split is first used) and one ranged read of its
record, whose length and both CRCs are checked, and whose content hash must be the one
the index recorded. The split of a key is found the way the build placed it (a hash of
``seed`` and the key, ``pipelines/building/placement.py``; a key's split never changes
between versions), so only one split's index is probed; a version whose config does not
say how it split (built by other tools) has every split probed.

Local files are read with ``pread``; ``s3://`` and ``gs://`` objects with range GETs
(``tfrecord_io.storage.range_reads``: credentials and endpoint from boto3's usual sources or
the command's ``--s3_*`` flags, Google's as for Beam's GCS filesystem; no HEAD: sizes come
from ``tfrecord_io_info.json``), each object pinned to the version its first read got
(``format.key_index._Source``: a replaced one is a ``RemoteObjectChangedError`` naming it);
other URLs through Beam's filesystems. Nothing here imports Beam (unless a non-S3 URL is read) or torch.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from ..errors import TFRecordError
from ..format.framing import FRAME_OVERHEAD
from ..format.key_index import Entry, KeyIndexReader, _Source, check_frame_matches
from ..format.random_access import decode_frame
from ..storage import files
from .datasets import DatasetLayoutError, load_info, resolve_version_dir


class NoKeyIndexError(DatasetLayoutError):
    """The version was built before key indexes (or by another tool): nothing to probe."""


def _split_of(key: str, cutoffs: Sequence[Tuple[str, float]], seed: int) -> str:
    """The split the build put ``key`` in: the first 8 bytes of SHA-256 of ``seed|key`` as a
    fraction against the splits' cumulative weights. The same computation as
    ``pipelines.building.placement.place`` (tested to agree), kept here because the format
    layer may not import the pipelines."""
    digest = hashlib.sha256(f"{seed}\x1f{key}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2.0**64
    for name, cut in cutoffs:
        if fraction < cut:
            return name
    return cutoffs[-1][0]


def _cutoffs(info: Dict[str, Any]) -> Optional[List[Tuple[str, float]]]:
    """The splits' cumulative fractions as the build placed rows (``placement`` in
    ``tfrecord_io_info.json``: a list, in the config's order, which the config's own
    mapping loses when the file is written with sorted keys)."""
    placement = info.get("placement") or {}
    cutoffs = placement.get("cutoffs")
    if not isinstance(cutoffs, list) or not cutoffs:
        return None
    return [(str(name), float(cut)) for name, cut in cutoffs]


class KeyedDataset:
    """One version of a built dataset, by key. Use :func:`open_dataset`."""

    def __init__(self, version_dir: str, info: Dict[str, Any], check_crc: bool = True):
        self.version_dir = version_dir
        self.info = info
        self.check_crc = check_crc
        self.splits: Dict[str, Any] = dict(info.get("splits") or {})
        missing = [s for s, e in self.splits.items() if not e.get("key_index")]
        if missing or not self.splits:
            raise NoKeyIndexError(
                f"{version_dir} has no key index (built before tfrecord-io wrote them, or by another tool): "
                "build it again with this version of tfrecord-io (`tfrecord-io build CONFIG`) to look rows up by key"
            )
        self._cutoffs = _cutoffs(info)
        self._seed = int((info.get("placement") or {}).get("seed", 0) or 0)
        self._indexes: Dict[str, KeyIndexReader] = {}
        self._shards: Dict[Tuple[str, int], _Source] = {}
        self._description: Optional[Dict[str, str]] = None

    @property
    def version(self) -> str:
        return str(self.info.get("version") or os.path.basename(self.version_dir.rstrip("/")))

    def _index(self, split: str) -> KeyIndexReader:
        reader = self._indexes.get(split)
        if reader is None:
            note = self.splits[split]["key_index"]
            reader = KeyIndexReader(files.join(self.version_dir, note["path"]), size=int(note["bytes"]))
            if len(reader) != int(note["entries"]):
                raise TFRecordError(
                    f"the key index has {len(reader)} entries, tfrecord_io_info.json says {note['entries']}",
                    reader.path,
                )
            self._indexes[split] = reader
        return reader

    def _candidate_splits(self, key: str) -> List[str]:
        if self._cutoffs is not None:
            split = _split_of(key, self._cutoffs, self._seed)
            if split in self.splits:
                return [split]
        return sorted(self.splits)

    def locate(self, key: str) -> Optional[Tuple[str, str, Entry]]:
        """``(split, shard path, index entry)`` of ``key``, or None: index probes only."""
        key = str(key)
        for split in self._candidate_splits(key):
            entry = self._index(split).get(key)
            if entry is not None:
                shard = self.splits[split]["shards"][entry.shard]
                return split, files.join(self.version_dir, shard["path"]), entry
        return None

    def get_record(self, key: str) -> Optional[bytes]:
        """The serialised Example of ``key`` (CRCs and content hash checked), or None."""
        found = self.locate(key)
        if found is None:
            return None
        split, path, entry = found
        if self.info.get("compression"):
            raise TFRecordError(
                "the shards are compressed: a record cannot be read by offset (build with output.compression: none)",
                path,
            )
        src = self._shards.get((split, entry.shard))
        if src is None:
            size = int(self.splits[split]["shards"][entry.shard]["bytes"])
            src = self._shards[(split, entry.shard)] = _Source(path, size)
        frame = src.read(entry.offset, entry.length + FRAME_OVERHEAD)
        data = decode_frame(frame, path, entry.offset, self.check_crc)
        if self.check_crc:
            check_frame_matches(entry, data, path)
        return bytes(data)

    def _parse(self, data: bytes) -> Dict[str, Any]:
        from ..format.codec import parse_example
        from .dataset_reader import _description

        if self._description is None:
            self._description = _description(self.info.get("features") or {}, None)[0]
        return parse_example(data, self._description)

    def get(self, key: str, default: Any = None) -> Any:
        """The decoded Example of ``key`` (a dict of NumPy arrays, as ``iter_dataset``
        gives), or ``default`` when the version has no such key."""
        data = self.get_record(key)
        return default if data is None else self._parse(data)

    def get_many(self, keys: Iterable[str]) -> Dict[str, Optional[Dict[str, Any]]]:
        """``{key: decoded Example or None}`` for ``keys`` (one probe and one read each)."""
        return {str(k): self.get(str(k)) for k in keys}

    def __contains__(self, key: object) -> bool:
        return self.locate(str(key)) is not None

    def __len__(self) -> int:
        return sum(int(e.get("records", 0)) for e in self.splits.values())

    def close(self) -> None:
        for reader in self._indexes.values():
            reader.close()
        for src in self._shards.values():
            src.close()
        self._indexes, self._shards = {}, {}

    def __enter__(self) -> KeyedDataset:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def open_dataset(root: str, version: Optional[str] = None, *, check_crc: bool = True) -> KeyedDataset:
    """The dataset at ``root`` (its ``LATEST`` version, or ``version``; a version directory
    works too), to look records up by key. Raises :class:`NoKeyIndexError` for a version
    built without key indexes.

    On an object store the small metadata files (``LATEST``, ``tfrecord_io_info.json``)
    are read through Beam's filesystems: with the options a pipeline (or the caller,
    ``FileSystems.set_options``) gave them, else with none, so that boto3's usual sources
    (``AWS_*`` variables, ``AWS_ENDPOINT_URL``) apply, as for the record reads."""
    if files.is_remote(str(root)):
        fs = files.beam_filesystems()
        if getattr(fs, "_pipeline_options", None) is None:
            from apache_beam.options.pipeline_options import PipelineOptions

            fs.set_options(PipelineOptions([]))
    version_dir = resolve_version_dir(root, version)
    info = load_info(version_dir)
    if info is None:  # resolve_version_dir checked it; a race with a deletion
        raise DatasetLayoutError(f"{version_dir}: no tfrecord_io_info.json")
    return KeyedDataset(version_dir, info, check_crc)


__all__ = ["KeyedDataset", "NoKeyIndexError", "open_dataset"]
