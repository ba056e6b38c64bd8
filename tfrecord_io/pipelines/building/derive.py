"""A new version made from the current one: ``build CONFIG --append`` (new rows added,
rows whose key exists skipped, replaced or refused: ``on_existing``) and ``build CONFIG
--remove KEYS_FILE`` (rows removed by key), without rebuilding.

How a derived version is laid out (each version stays self-contained: every reader,
TFDS's ``builder_from_directory``, ``validate`` and the report see an ordinary version):

- The base's shards keep their numbers; a split's new rows go into new shards numbered
  after them, as many as ``sharding.target_shard_bytes`` asks for the new rows alone
  (``num_shards`` is for full builds: an append of ten rows gets one new shard per
  split, not ``num_shards``). The ``-of-N`` in every name is the new total, so each shard
  is carried under its new name: a hard link on local disk (a copy where links fail), a
  server-side copy on object stores - never read, never re-encoded; its records, bytes
  and SHA-256 are the base's, from ``tfrecord_io_info.json``.
- A base shard holding a removed or replaced row is rewritten without it: its frames are
  copied (both CRCs checked) from the old shard, not re-encoded. A replaced row's new
  content goes into the new shards, like any new row.
- A row's split is the build's hash of its key with the base's seed and splits, so a
  key's split never changes between versions; an append whose config changes the key,
  seed, splits, encoders, compression or name is refused, naming what changed.
- The split's key index is the base's (entries of removed rows dropped, offsets of
  rewritten shards moved) merged with the new shards' entries, in a worker per split.
- ``dedup: content``: once the new shards are written, appended rows whose Example is
  byte-identical to a row the base keeps, or to another appended row, are dropped from
  them (``content_dedup.drop_identical_appended``: the base through its key indexes'
  content hashes) and counted as duplicates, as a full build counts them.

The commit protocol is the build's (claim, shards, ``tfrecord_io_info.json``, ``LATEST``
last), plus one rule for racing runs: an append or remove first claims its base
(``<out>/_derive/<base>/_BUILDING``, the build's claim marker: one run at a time per
base; a stale claim of a killed run is taken over), and publishes only while ``LATEST``
still names the base. Two runs racing onto one version: one wins; the other is refused
at its claim, or at its publish (``LATEST`` moved: run it again on the new version).
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Dict, Iterable, List, Optional, Tuple

import apache_beam as beam
import numpy as np

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.format.index import build_index, index_path_for, load_index
from tfrecord_io.format.key_index import KeyColumns, KeyIndexReader, KeyIndexWriter, key_index_name
from tfrecord_io.format.random_access import decode_frame
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.pipelines.building import commit
from tfrecord_io.pipelines.building.build_config import BuildConfig, ColumnConfig
from tfrecord_io.pipelines.building.build_spec import BuildSpec
from tfrecord_io.pipelines.building.content_dedup import DropIdenticalAppended
from tfrecord_io.pipelines.building.plan import SUMMARY_TAG, ClaimVersion, MergeSummaries, PrepareRows
from tfrecord_io.pipelines.building.row_plan import pack, row_key, unpack
from tfrecord_io.pipelines.building.write import WriteShard, dataset_shard_name, shard_key
from tfrecord_io.storage import files
from tfrecord_io.usage_errors import UsageError

ON_EXISTING = ("error", "skip", "replace")
DERIVE_DIR = "_derive"


class IncompatibleAppend(UsageError, ValueError):
    """The config differs from the base version's in what decides the records."""


class KeyExistsError(UsageError, ValueError):
    """``on_existing: error`` and a new row's key is in the base version."""


class BaseMoved(RuntimeError):
    """``LATEST`` no longer names the base: another run published on top of it."""


# ---------------------------------------------------------------------- launcher checks


def _columns_for_compare(columns: Dict[str, Any], auto: Iterable[str]) -> Dict[str, Any]:
    out = {}
    for name, col in columns.items():
        col = dict(col) if isinstance(col, dict) else {"encoder": col}
        if name in auto:
            col.pop("vocabulary", None)
        out[name] = col
    return out


def check_compatible(spec: BuildSpec, base: Dict[str, Any]) -> List[str]:
    """What differs between this config and the base version's, in what decides where rows
    go and how they are encoded (empty: an append may go ahead)."""
    old = base.get("config") or {}
    changes: List[str] = []
    if base.get("name") != spec.name:
        changes.append(f"name: {base.get('name')!r} -> {spec.name!r}")
    now = spec.config_dict()
    for field in ("key", "seed", "shuffle"):
        if old.get(field) != now.get(field):
            changes.append(f"{field}: {old.get(field)!r} -> {now.get(field)!r}")
    placement = base.get("placement") or {}
    cutoffs = [[n, c] for n, c in spec.cutoffs]
    if placement.get("cutoffs") != cutoffs:
        changes.append(f"splits: {old.get('splits')!r} -> {now.get('splits')!r}")
    if str(base.get("compression") or "") != spec.compression:
        changes.append(f"output.compression: {base.get('compression')!r} -> {spec.compression!r}")
    auto = set(spec.vocab_sources)
    before = _columns_for_compare(old.get("columns") or {}, auto)
    after = _columns_for_compare(now["columns"], auto)
    for name in sorted(set(before) | set(after)):
        if before.get(name) != after.get(name):
            changes.append(f"columns.{name}: {before.get(name)!r} -> {after.get(name)!r}")
    return changes


def base_version(out_dir: str) -> Tuple[str, Dict[str, Any]]:
    """The version an append or remove starts from: the one ``LATEST`` names."""
    latest = dataset_writer.read_latest(out_dir)
    info = dataset_writer.load_info(files.join(out_dir, latest)) if latest else None
    if not latest or info is None:
        raise dataset_writer.DatasetDirError(
            f"{out_dir} has no published version to append to or remove from (no LATEST): run a full build first"
        )
    missing = sorted(s for s, e in (info.get("splits") or {}).items() if not e.get("key_index"))
    if missing:
        raise dataset_writer.DatasetDirError(
            f"version {latest} of {out_dir} has no key index (built before tfrecord-io wrote them): append and "
            "remove need one; build it again with this tfrecord-io (`tfrecord-io build CONFIG`), then append"
        )
    if info.get("compression"):
        raise dataset_writer.DatasetDirError(
            f"version {latest} of {out_dir} has {info['compression']} shards: append and remove rewrite shards by "
            "record, which compressed shards do not allow; build again"
        )
    return latest, info


def claim_base(out_dir: str, base: str) -> dataset_writer.BuildClaim:
    """One append or remove at a time onto ``base``; a stale claim (a killed run) is taken over."""
    claim_dir = files.join(out_dir, DERIVE_DIR, base)
    marker = dataset_writer.read_marker(claim_dir)
    if marker is not None and not dataset_writer.marker_is_live(marker):
        files.delete([files.join(claim_dir, dataset_writer.BUILDING_NAME)])
    claim = dataset_writer.BuildClaim(claim_dir)
    try:
        claim.acquire()
    except dataset_writer.VersionTaken as err:
        raise dataset_writer.VersionTaken(
            f"another append or remove onto version {base} is running ({str(err).rpartition('(')[2].rstrip(')')}); "
            "wait for it, then run this one on the version it publishes"
        ) from None
    if dataset_writer.read_latest(out_dir) != base:
        claim.release()
        raise BaseMoved(f"LATEST of {out_dir} moved away from {base} while this run started: run it again")
    return claim


# ---------------------------------------------------------------------- pipeline stages


class _BaseIndexes:
    """The base version's key indexes, opened once per worker.

    Each is read whole, through Beam's filesystems (one read per split and worker, as
    ``merge_key_index`` reads it), and then probed in memory: a worker has the job's
    credentials as pipeline options (``--s3_access_key_id``...), which only Beam's
    filesystems see; a positioned read of its own (``KeyIndexReader`` given a path)
    would take boto3's usual sources, which a cluster's workers need not have. About
    50 MB per million base rows, per worker."""

    def __init__(self, base_dir: str, base: Dict[str, Any]):
        self._dir = base_dir
        self._splits = base.get("splits") or {}
        self._readers: Dict[str, KeyIndexReader] = {}

    def get(self, split: str, key: str):
        reader = self._readers.get(split)
        if reader is None:
            note = self._splits[split]["key_index"]
            path = files.join(self._dir, note["path"])
            reader = self._readers[split] = KeyIndexReader(path, data=files.read_bytes(path))
        return reader.get(key)

    def find(self, key: str):
        for split in sorted(self._splits):
            entry = self.get(split, key)
            if entry is not None:
                return split, entry
        return None


REMOVED_TAG = "removed"
SKIPPED_TAG = "skipped"
MISSING_TAG = "missing"


class ClassifyRows(beam.DoFn):
    """A placed batch -> the rows to write (main, packed), the base rows they replace
    (``removed``: ``(split, shard, offset, key)``) and the count skipped (``skipped``)."""

    def __init__(self, spec: BuildSpec, base_dir: str, base: Dict[str, Any], on_existing: str):
        self._spec, self._base_dir, self._base, self._on_existing = spec, base_dir, base, on_existing
        self._indexes: Optional[_BaseIndexes] = None

    def process(self, packed: bytes):
        if self._indexes is None:
            self._indexes = _BaseIndexes(self._base_dir, self._base)
        keep = []
        skipped = 0
        key_column = self._spec.key_column
        for item in unpack(packed):
            split, _, _, row = item
            if key_column and row.get(key_column) is None:
                keep.append(item)  # rejected with its reason by the writer
                continue
            key = row_key(row, key_column)
            entry = self._indexes.get(split, key)
            if entry is None:
                keep.append(item)
            elif self._on_existing == "skip":
                skipped += 1
            elif self._on_existing == "error":
                raise KeyExistsError(
                    f"key {key[:200]!r} (row at {row.get('_row')}) is already in the base version (split {split}); "
                    # a flag of the command, not a config field (--set on_existing=... is refused as unknown)
                    "give --on-existing skip or --on-existing replace to append anyway"
                )
            else:
                keep.append(item)
                yield beam.pvalue.TaggedOutput(REMOVED_TAG, (split, entry.shard, entry.offset, key))
        if keep:
            yield pack(keep)
        if skipped:
            yield beam.pvalue.TaggedOutput(SKIPPED_TAG, skipped)


class FindKeys(beam.DoFn):
    """A line of the keys file -> the base row it names (``(split, shard, offset, key)``)
    or the key, not found (``missing``)."""

    def __init__(self, base_dir: str, base: Dict[str, Any]):
        self._base_dir, self._base = base_dir, base
        self._indexes: Optional[_BaseIndexes] = None

    def process(self, line: str):
        key = line.rstrip("\r\n")
        if not key.strip():
            return
        if self._indexes is None:
            self._indexes = _BaseIndexes(self._base_dir, self._base)
        found = self._indexes.find(key)
        if found is None:
            yield beam.pvalue.TaggedOutput(MISSING_TAG, key)
        else:
            split, entry = found
            yield split, entry.shard, entry.offset, key


def new_shard_counts(spec: BuildSpec, summary: Dict[str, Any]) -> Dict[str, int]:
    """New shards per split for the appended rows: by ``target_shard_bytes`` of their
    estimated size (at least one where rows arrive; none for a split without new rows)."""
    target = int(spec.config.sharding.target_shard_bytes)
    return {s: (max(1, math.ceil(b / target)) if b else 0) for s, b in (summary.get("bytes") or {}).items()}


class PlaceNew(beam.DoFn):
    """Placed new rows -> ``(shard key, packed rows)`` in the new shards after the base's."""

    def __init__(self, base_counts: Dict[str, int]):
        self._base = base_counts

    def process(self, packed: bytes, new_counts: Dict[str, int]):
        by_shard: Dict[Tuple[str, int], List[Any]] = {}
        for split, shard_hash, order, row in unpack(packed):
            n = new_counts.get(split) or 1
            by_shard.setdefault((split, self._base.get(split, 0) + shard_hash % n), []).append((order, row))
        for (split, shard), items in by_shard.items():
            yield shard_key(split, shard), pack(items)


def _link_or_copy(src: str, dst: str) -> None:
    """``dst`` as a copy of ``src`` that costs no read: a hard link (local), a server-side
    copy (object stores: Beam's ``FileSystems.copy``)."""
    if files.is_remote(dst):
        files.beam_filesystems().copy([src], [dst])
        return
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        import shutil

        tmp = files.temp_path_beside(dst)
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)


class CarryShard(beam.DoFn):
    """A base shard -> carried into the new version under its new name (linked or copied),
    or rewritten without its removed rows; its note (as ``WriteShard``'s, plus ``moved``:
    ``[[old offset, new offset], ...]`` of a rewritten shard's records)."""

    def __init__(self, spec: BuildSpec, base_dir: str, base: Dict[str, Any]):
        self._spec, self._base_dir, self._base = spec, base_dir, base

    def process(self, element, removed, new_counts, claim):
        if claim["state"] != "new":
            return
        split, shard = element
        entry = self._base["splits"][split]
        old = entry["shards"][shard]
        total = int(entry["num_shards"]) + int(new_counts.get(split, 0))
        relpath = f"{split}/{dataset_shard_name(self._spec.name, split, shard, total, self._spec.compression)}"
        final = files.join(self._spec.version_dir, relpath)
        src = files.join(self._base_dir, old["path"])
        gone = sorted(off for s, n, off, _ in removed if s == split and n == shard)
        note = {
            "split": split,
            "shard": shard,
            "num_shards": total,
            "path": relpath,
            "index": index_path_for(relpath) if old.get("index") else None,
            "rejected": 0,
            "duplicates": 0,
            "key_part": None,
        }
        if not gone:
            _link_or_copy(src, final)
            if old.get("index"):
                _link_or_copy(files.join(self._base_dir, old["index"]), index_path_for(final))
            yield {**note, "records": old["records"], "bytes": old["bytes"], "sha256": old["sha256"], "carried": True}
            return
        yield {**note, **self._rewrite(src, old, final, set(gone)), "carried": False}

    def _rewrite(self, src: str, old: Dict[str, Any], final: str, gone: set) -> Dict[str, Any]:
        data = memoryview(files.read_bytes(src))
        index = load_index(files.join(self._base_dir, old["index"])) if old.get("index") else build_index(src)
        if not files.is_remote(final):
            os.makedirs(os.path.dirname(final), exist_ok=True)
        writer = RecordWriter(
            final,
            atomic=not files.is_remote(final),
            index_path=index_path_for(final) if old.get("index") else None,
            digest=True,
        )
        moved: List[List[int]] = []
        pos = 0
        try:
            for off, size in zip(index.offsets.tolist(), index.sizes.tolist()):
                if off in gone:
                    continue
                record = decode_frame(data[off : off + size], src, off)  # both CRCs checked on the way
                writer.write_records([record])
                moved.append([off, pos])
                pos += size
            writer.close()
        except BaseException:
            writer.abort()
            raise
        return {"records": len(moved), "bytes": writer.stored_bytes, "sha256": writer.sha256, "moved": moved}


def merge_key_index(
    spec: BuildSpec, base_dir: str, base: Dict[str, Any], split: str, notes: List[Dict[str, Any]]
) -> Dict[str, Any]:
    """The split's key index of the new version: the base's entries (removed rows dropped,
    rewritten shards' offsets moved) and the new shards' entries; the note, with the
    split's change counts (``added``, ``changed``, ``removed``, ``carried``).

    Why columns: the base holds every row of the dataset and an append adds a few, so
    the base's entries move as whole arrays (:class:`KeyColumns`) and only the new ones
    take a Python step each: a million carried entries cost well under a second."""
    carried_cols = KeyColumns.empty()
    entry = (base.get("splits") or {}).get(split)
    if entry and entry.get("key_index"):
        path = files.join(base_dir, entry["key_index"]["path"])
        with KeyIndexReader(path, data=files.read_bytes(path)) as reader:
            carried_cols = reader.columns()
    carried_cols, removed_keys = _moved_and_removed(carried_cols, notes)
    parts: List[KeyColumns] = []
    for n in notes:
        if n.get("key_part"):
            part = n["key_part"]
            with KeyIndexReader(part, data=files.read_bytes(part)) as reader:
                parts.append(reader.columns())
    added = KeyColumns.concat(parts).sorted()
    new_keys = {added.key(i) for i in range(len(added))}
    relpath = key_index_name(spec.name, split)
    writer = KeyIndexWriter(files.join(spec.version_dir, relpath))
    try:
        writer.add_columns(carried_cols.merged(added))
        writer.close()
    except BaseException:
        writer.abort()
        raise
    changed = len(removed_keys & new_keys)
    return {
        "split": split,
        "path": relpath,
        "entries": writer.entries,
        "bytes": writer.bytes,
        "sha256": writer.sha256,
        "added": len(new_keys) - changed,
        "changed": changed,
        "removed": len(removed_keys) - changed,
        "carried": len(carried_cols),
    }


def _moved_and_removed(cols: KeyColumns, notes: List[Dict[str, Any]]) -> Tuple[KeyColumns, set]:
    """The base's entries with the rewritten shards' records at their new offsets, and
    without the records those rewrites left out; the keys left out. A rewritten shard's
    note lists ``moved``: ``[old offset, new offset]`` of each record it kept."""
    offsets = cols.offsets.copy()
    keep = np.ones(len(cols), dtype=bool)
    for n in notes:
        if n.get("moved") is None:
            continue
        rows = np.flatnonzero(cols.shards == n["shard"])
        pairs = np.asarray(n["moved"], dtype=np.int64).reshape(-1, 2)
        table = pairs[np.argsort(pairs[:, 0])]
        old = offsets[rows]
        at = np.searchsorted(table[:, 0], old)
        found = at < len(table)
        found[found] = table[at[found], 0] == old[found]
        offsets[rows[found]] = table[at[found], 1]
        keep[rows[~found]] = False
    removed = {cols.key(i) for i in np.flatnonzero(~keep).tolist()}
    moved = dataclasses.replace(cols, offsets=offsets)
    return moved.kept(keep), removed


class MergeDerivedKeyIndex(beam.DoFn):
    def __init__(self, spec: BuildSpec, base_dir: str, base: Dict[str, Any]):
        self._spec, self._base_dir, self._base = spec, base_dir, base

    def process(self, element, claim):
        if claim["state"] == "new":
            split, notes = element
            yield merge_key_index(self._spec, self._base_dir, self._base, split, list(notes))


def finalize_derived(
    spec: BuildSpec,
    base_name: str,
    base: Dict[str, Any],
    operation: str,
    shards: List[Dict[str, Any]],
    summary: Dict[str, Any],
    new_counts: Dict[str, int],
    claim: Dict[str, Any],
    key_indexes: List[Dict[str, Any]],
    skipped: int,
    missing: List[str],
) -> Dict[str, Any]:
    """Check, write ``tfrecord_io_info.json``, publish while ``LATEST`` still names the base."""
    if claim["state"] == "published":
        return commit._reuse(spec, claim["info"])
    shards = sorted(shards, key=lambda s: (s["split"], s["shard"]))
    info = dataset_writer.load_info(spec.version_dir)
    if info is None or info.get("fingerprint") != claim["fingerprint"]:
        commit.check_claim(spec)
        totals = {s: int(e["num_shards"]) + int(new_counts.get(s, 0)) for s, e in base["splits"].items()}
        for s, n in new_counts.items():
            totals.setdefault(s, n)
        expected = {(s, i) for s, n in totals.items() for i in range(n)}
        got = [(s["split"], s["shard"]) for s in shards]
        new_written = sum(s["records"] for s in shards if s.get("carried") is None)
        rejected = sum(s["rejected"] for s in shards)
        duplicates = sum(s.get("duplicates", 0) for s in shards)
        if (
            set(got) != expected
            or len(got) != len(expected)
            or new_written + rejected + duplicates + skipped != summary["rows"]
        ):
            raise commit.BuildIncomplete(
                f"{operation} lost rows: {summary['rows']} in, {new_written} written, {rejected} rejected, "
                f"{duplicates} duplicates, {skipped} skipped; {len(set(got) & expected)} of {len(expected)} shards; "
                f"not publishing {spec.version_dir}"
            )
        indexes = commit.check_key_indexes(spec, shards, key_indexes)
        commit.merge_rejected(spec, shards)
        summary = dict(summary, vocab={})
        info = commit.dataset_info(spec, shards, summary, claim["fingerprint"], indexes)
        info["base"] = base_name
        info["changes"] = {
            "operation": operation,
            "base": base_name,
            # this run's rows: rows_in = written + rejected + duplicates + skipped
            "written": new_written,
            "skipped": skipped,
            "not_found": missing[:1000],
            "not_found_count": len(missing),
            "shards_carried": sum(1 for s in shards if s.get("carried") is True),
            "shards_written": sum(1 for s in shards if s.get("carried") is not True),
            "splits": {n["split"]: {k: n[k] for k in ("added", "removed", "changed", "carried")} for n in key_indexes},
        }
        dataset_writer.write_info(spec.version_dir, info)
    files.delete_prefix(files.join(spec.version_dir, commit.REJECTED_DIR))
    files.delete_prefix(files.join(spec.version_dir, commit.KEYS_DIR))
    latest = dataset_writer.read_latest(spec.out_dir)
    if latest != base_name:
        raise BaseMoved(
            f"LATEST of {spec.out_dir} now names {latest}, not {base_name} this {operation} started from: "
            f"{spec.version_dir} is complete but not published; run the {operation} again"
        )
    files.delete([files.join(spec.version_dir, dataset_writer.BUILDING_NAME)])
    dataset_writer.publish(spec.out_dir, spec.version)
    return info


class _FinalizeDerived(beam.DoFn):
    def __init__(self, spec, base_name, base, operation):
        self._args = (spec, base_name, base, operation)

    def process(self, shards, summary, new_counts, claim, key_indexes, skipped, missing):
        yield finalize_derived(
            *self._args, list(shards), summary, new_counts, claim, list(key_indexes), sum(skipped), sorted(missing)
        )


class DeriveVersion(beam.PTransform):
    """Applied to the pipeline: ``rows`` to append (a PCollection of batches of rows) or
    ``key_lines`` to remove (lines of a keys file) -> the new version published (its
    ``tfrecord_io_info.json`` content, one element)."""

    def __init__(
        self,
        spec: BuildSpec,
        base_name: str,
        base: Dict[str, Any],
        on_existing: str = "error",
        progress_dir: Optional[str] = None,
        *,
        rows=None,
        key_lines=None,
    ):
        super().__init__()
        self.spec, self.base_name, self.base, self.on_existing = spec, base_name, base, on_existing
        self._rows, self._key_lines = rows, key_lines
        self.base_dir = files.join(spec.out_dir, base_name)
        self._progress_dir = progress_dir

    def expand(self, pbegin):
        batches, key_lines = self._rows, self._key_lines
        spec, base, base_dir = self.spec, self.base, self.base_dir
        p = pbegin.pipeline
        operation = "append" if batches is not None else "remove"
        base_counts = {s: int(e["num_shards"]) for s, e in base["splits"].items()}
        if batches is None:
            batches = p | "NoRows" >> beam.Create([])
        prepared = batches | "PrepareRows" >> beam.ParDo(PrepareRows(spec)).with_outputs(SUMMARY_TAG, main="prepared")
        summary = prepared[SUMMARY_TAG] | "MergeSummaries" >> beam.CombineGlobally(MergeSummaries(spec))
        claim = summary | "ClaimVersion" >> beam.ParDo(_ClaimDerived(spec, operation))
        new_counts = summary | "NewShardCounts" >> beam.Map(lambda s: new_shard_counts(spec, s))
        classified = prepared["prepared"] | "Classify" >> beam.ParDo(
            ClassifyRows(spec, base_dir, base, self.on_existing)
        ).with_outputs(REMOVED_TAG, SKIPPED_TAG, main="new")
        removed = [classified[REMOVED_TAG]]
        missing = p | "NoMissing" >> beam.Create([])
        if key_lines is not None:
            found = key_lines | "FindKeys" >> beam.ParDo(FindKeys(base_dir, base)).with_outputs(
                MISSING_TAG, main="found"
            )
            removed.append(found["found"])
            missing = found[MISSING_TAG]
        removed_all = removed | "Removed" >> beam.Flatten()
        totals = new_counts | "Totals" >> beam.Map(lambda c: {s: base_counts.get(s, 0) + n for s, n in c.items()})
        side = {
            "counts": beam.pvalue.AsSingleton(totals),
            "summary": beam.pvalue.AsSingleton(summary),
            "claim": beam.pvalue.AsSingleton(claim),
        }
        pieces = classified["new"] | "PlaceNew" >> beam.ParDo(
            PlaceNew(base_counts), new_counts=beam.pvalue.AsSingleton(new_counts)
        )
        empty = new_counts | "EveryNewShard" >> beam.FlatMap(
            lambda c: [shard_key(s, base_counts.get(s, 0) + i) for s, n in sorted(c.items()) for i in range(n)]
        )
        written = (
            (pieces, empty | "Empty" >> beam.Map(lambda k: (k, pack([]))))
            | "Pieces" >> beam.Flatten()
            | "Typed" >> beam.Map(lambda kv: kv).with_output_types(beam.typehints.KV[str, bytes])
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(WriteShard(spec, self._progress_dir), **side)
        )
        if spec.dedup == "content" and operation == "append":
            # appended rows byte-identical to a row the base keeps or to another appended
            # row: dropped once every new shard is written (content_dedup.py)
            written = (
                written
                | "NewNotes" >> beam.combiners.ToList()
                | "DropIdentical"
                >> beam.ParDo(
                    DropIdenticalAppended(spec, base_dir, base),
                    replaced=beam.pvalue.AsList(removed_all),
                    claim=side["claim"],
                )
            )
        carried = (
            p
            | "BaseShards"
            >> beam.Create([(s, i) for s, e in sorted(base["splits"].items()) for i in range(len(e["shards"]))])
            | "SpreadBase" >> beam.Reshuffle()
            | "CarryShard"
            >> beam.ParDo(
                CarryShard(spec, base_dir, base),
                removed=beam.pvalue.AsList(removed_all),
                new_counts=beam.pvalue.AsSingleton(new_counts),
                claim=side["claim"],
            )
        )
        shards = (written, carried) | "AllShards" >> beam.Flatten()
        key_indexes = (
            shards
            | "BySplit" >> beam.Map(lambda note: (note["split"], note))
            | "GroupBySplit" >> beam.GroupByKey()
            | "KeyIndex" >> beam.ParDo(MergeDerivedKeyIndex(spec, base_dir, base), claim=side["claim"])
        )
        return (
            shards
            | "ShardNotes" >> beam.combiners.ToList()
            | "Finalize"
            >> beam.ParDo(
                _FinalizeDerived(spec, self.base_name, base, operation),
                summary=side["summary"],
                new_counts=beam.pvalue.AsSingleton(new_counts),
                claim=side["claim"],
                key_indexes=beam.pvalue.AsList(key_indexes),
                skipped=beam.pvalue.AsList(classified[SKIPPED_TAG]),
                missing=beam.pvalue.AsList(missing),
            )
        )


class _ClaimDerived(ClaimVersion):
    """The build's claim, but an append or remove with no rows is not an error."""

    def __init__(self, spec: BuildSpec, operation: str):
        super().__init__(spec)
        self._operation = operation

    def process(self, summary: Dict[str, Any]):
        from tfrecord_io.pipelines.building.row_plan import fingerprint

        spec = self._spec
        if not summary["rows"] and self._operation == "append":
            from tfrecord_io.pipelines.building.manifest import InputError

            raise InputError(f"the input of {spec.name!r} has no rows: nothing to append")
        fp = fingerprint(spec.fingerprint_settings(), summary)
        yield {**dataset_writer.claim_for_run(spec.version_dir, spec.run_id, fp), "fingerprint": fp}


def derived_config(cfg: BuildConfig, base: Dict[str, Any], operation: str, extra: Dict[str, Any]) -> BuildConfig:
    """The config a derived version is written with: the base's columns (vocabularies as
    the base found them: new values are rejected, not given new ids) and what the run is
    (base, operation, keys file), which enters its fingerprint."""
    base_columns = (base.get("config") or {}).get("columns")
    columns = {n: ColumnConfig.from_settings(s) for n, s in base_columns.items()} if base_columns else cfg.columns
    return cfg.replace(columns=columns, derive={"base": base.get("version"), "operation": operation, **extra})


def summary_lines(info: Dict[str, Any]) -> List[str]:
    """The change lines of a derived version's build summary."""
    c = info.get("changes") or {}
    out = [
        f"{c.get('operation')} on version {c.get('base')}: {c.get('shards_carried')} shards carried unchanged "
        f"(linked or copied), {c.get('shards_written')} written"
    ]
    for split, d in sorted((c.get("splits") or {}).items()):
        out.append(
            f"  {split:<12} added {d['added']:>8}  replaced {d['changed']:>8}  removed {d['removed']:>8}  "
            f"unchanged {d['carried']:>8}"
        )
    if c.get("skipped"):
        out.append(f"rows skipped (key already in {c.get('base')}, on_existing: skip): {c['skipped']}")
    if c.get("not_found_count"):
        shown = ", ".join(repr(k) for k in c.get("not_found", [])[:20])
        more = " ..." if c["not_found_count"] > 20 else ""
        out.append(f"keys not found in {c.get('base')} ({c['not_found_count']}): {shown}{more}")
    return out


def keys_lines(path: str) -> beam.PTransform:
    """The keys file, a key per line, read in the pipeline."""
    return beam.io.ReadFromText(path)


__all__ = ["DeriveVersion", "base_version", "check_compatible", "claim_base", "derived_config"]
