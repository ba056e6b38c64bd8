"""The build's finalize stage: after every shard is written, check the counts, gather
the rejected rows, write ``tfrecord_io_info.json``, remove the claim and move ``LATEST``
(the protocol is described in ``tfrecord_io/dataset/dataset_writer.py``).

It runs in a worker, once, on the list of shard notes (one small dict per shard), so
it works wherever the pipeline runs. Runners may run a stage again after a failure:
every step here is safe to repeat. A second run finds ``tfrecord_io_info.json`` with its
own fingerprint and only finishes the steps after it; the rejected rows are merged
again from the per-shard files until those are deleted, which happens after
``tfrecord_io_info.json`` is written.
"""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, List, Optional

from tfrecord_io._version import __version__
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.pipelines.building.build_spec import BuildSpec
from tfrecord_io.storage import files

REJECTED_NAME = "rejected-00000-of-00001.jsonl"
REJECTED_DIR = "_rejected"
KEYS_DIR = "_keys"


class BuildIncomplete(RuntimeError):
    """The shards written do not account for every row: nothing is published."""


class ClaimWithdrawn(RuntimeError):
    """The version's ``_BUILDING`` marker no longer holds this run: the launcher gave the
    run up (it failed or was stopped, released the claim and is removing the version)
    or another run took a stale claim over. Nothing is published."""


def rejected_part(version_dir: str, split: str, shard: int) -> str:
    """Where a shard's writer leaves its rejected rows for the finalize stage."""
    return files.join(version_dir, REJECTED_DIR, f"{split}-{shard:05d}.jsonl")


def key_part(version_dir: str, split: str, shard: int) -> str:
    """Where a shard's writer leaves its key index entries for the split's merge stage."""
    return files.join(version_dir, KEYS_DIR, f"{split}-{shard:05d}.keyindex")


def splits_info(
    shards: Iterable[Dict[str, Any]], key_indexes: Optional[Dict[str, Dict[str, Any]]] = None
) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for s in shards:
        split = out.setdefault(s["split"], {"records": 0, "bytes": 0, "num_shards": s["num_shards"], "shards": []})
        split["records"] += s["records"]
        split["bytes"] += s["bytes"]
        split["shards"].append({k: s[k] for k in ("path", "index", "records", "bytes", "sha256")})
    for name, note in (key_indexes or {}).items():
        if name in out:
            out[name]["key_index"] = {k: note[k] for k in ("path", "entries", "bytes", "sha256")}
    return out


def check_complete(spec: BuildSpec, shards: List[Dict[str, Any]], counts: Dict[str, int], rows_in: int) -> None:
    """Every shard of the plan is there, once, and every row is written or rejected."""
    expected = {(split, i) for split, n in counts.items() for i in range(n)}
    got = [(s["split"], s["shard"]) for s in shards]
    written = sum(s["records"] for s in shards)
    rejected = sum(s["rejected"] for s in shards)
    duplicates = sum(s.get("duplicates", 0) for s in shards)
    if set(got) != expected or len(got) != len(expected) or written + rejected + duplicates != rows_in:
        raise BuildIncomplete(
            f"build lost rows: {rows_in} in, {written} written, {rejected} rejected, {duplicates} duplicates, "
            f"{len(set(got) & expected)} of {len(expected)} shards; not publishing {spec.version_dir}"
        )


def check_claim(spec: BuildSpec) -> None:
    """The marker still holds this run. A launcher that gives a run up releases its
    marker before it removes the version; a finalize still running on a cluster after
    that (the job outlived its launcher) must not write ``tfrecord_io_info.json`` and move
    ``LATEST`` to a version whose shards are being deleted."""
    marker = dataset_writer.read_marker(spec.version_dir)
    if not marker or marker.get("run_id") != spec.run_id:
        holder = f"run {str(marker.get('run_id'))[:8]}" if marker else "no run"
        raise ClaimWithdrawn(
            f"the claim on {spec.version_dir} is no longer this run's ({holder} holds it): not publishing; "
            "the run was given up or taken over"
        )


def merge_rejected(spec: BuildSpec, shards: List[Dict[str, Any]]) -> str:
    """The shards' rejected rows, in (split, shard) order, into one file; its path.
    Streamed one shard's part at a time: the finalize worker never holds them all."""
    path = files.join(spec.version_dir, REJECTED_NAME)
    with files.open_raw(path, "wb") as out:
        for s in shards:
            if s["rejected"]:
                with files.open_raw(rejected_part(spec.version_dir, s["split"], s["shard"]), "rb") as part:
                    while True:
                        block = part.read(1 << 20)
                        if not block:
                            break
                        out.write(block)
    return path


def image_modes(shards: Iterable[Dict[str, Any]]) -> Dict[str, List[str]]:
    """Per Image column without a configured ``mode``, the Pillow modes its images were
    written in, over every shard (what ``tfds_info`` states TFDS's channels from)."""
    seen: Dict[str, set] = {}
    for s in shards:
        for column, modes in (s.get("image_modes") or {}).items():
            seen.setdefault(column, set()).update(modes)
    return {column: sorted(modes) for column, modes in sorted(seen.items())}


def check_key_indexes(
    spec: BuildSpec, shards: List[Dict[str, Any]], key_indexes: List[Dict[str, Any]]
) -> Dict[str, Dict[str, Any]]:
    """One key index per split, holding one entry per record written; ``{split: note}``."""
    records: Dict[str, int] = {}
    for s in shards:
        records[s["split"]] = records.get(s["split"], 0) + s["records"]
    by_split = {n["split"]: n for n in key_indexes}
    for split, n in records.items():
        note = by_split.get(split)
        if note is None or note["entries"] != n:
            got = "none" if note is None else f"{note['entries']} entries"
            raise BuildIncomplete(
                f"the key index of split {split!r} does not cover its {n} records ({got}); "
                f"not publishing {spec.version_dir}"
            )
    return by_split


def dataset_info(
    spec: BuildSpec,
    shards: List[Dict[str, Any]],
    summary: Dict[str, Any],
    fingerprint: str,
    key_indexes: Optional[Dict[str, Dict[str, Any]]] = None,
) -> Dict[str, Any]:
    """``tfrecord_io_info.json`` of a finished version: what readers and reruns go by."""
    columns = spec.columns(summary["vocab"])
    encoders = spec.encoders(summary["vocab"])
    config = dict(spec.config_dict(), columns=columns)
    return {
        "name": spec.name,
        "description": spec.config.description,
        "version": spec.version,
        "tool": "tfrecord-io",
        "tool_version": __version__,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fingerprint": fingerprint,
        # which run wrote it: a launcher whose pipeline fails after this file landed
        # keeps the version it published (job.run_build) instead of removing it
        "run_id": spec.run_id,
        "features": spec.feature_spec(summary["vocab"]),
        "encoders": {k: e.to_config() for k, e in encoders.items()},
        "image_modes": image_modes(shards),
        "compression": spec.compression,
        "splits": splits_info(shards, key_indexes),
        "rows_in": summary["rows"],
        "records": sum(s["records"] for s in shards),
        "rejected": sum(s["rejected"] for s in shards),
        # rows dropped because their key was already in the build (dedup: key/content)
        "duplicates": sum(s.get("duplicates", 0) for s in shards),
        "dedup": spec.dedup,
        # how rows were placed, in order (the config's mapping is written with sorted keys):
        # what a lookup needs to find a key's split, and an append to keep it there
        "placement": {"seed": spec.seed, "cutoffs": [[name, cut] for name, cut in spec.cutoffs]},
        "duplicate_examples": [d for s in shards for d in s.get("duplicate_examples", [])][:10],
        "config": config,
    }


def finalize(
    spec: BuildSpec,
    shards: List[Dict[str, Any]],
    summary: Dict[str, Any],
    counts: Dict[str, int],
    claim: Dict[str, Any],
    key_indexes: Optional[List[Dict[str, Any]]] = None,
) -> Dict[str, Any]:
    """Publish the version (or, when the claim found it already published from the same
    inputs, verify it and point ``LATEST`` at it if nothing newer is there); returns its
    ``tfrecord_io_info.json`` content."""
    if claim["state"] == "published":
        return _reuse(spec, claim["info"])
    shards = sorted(shards, key=lambda s: (s["split"], s["shard"]))
    info = dataset_writer.load_info(spec.version_dir)
    if info is None or info.get("fingerprint") != claim["fingerprint"]:
        check_claim(spec)
        check_complete(spec, shards, counts, summary["rows"])
        indexes = check_key_indexes(spec, shards, list(key_indexes or []))
        merge_rejected(spec, shards)
        info = dataset_info(spec, shards, summary, claim["fingerprint"], indexes)
        dataset_writer.write_info(spec.version_dir, info)
    files.delete_prefix(files.join(spec.version_dir, REJECTED_DIR))
    files.delete_prefix(files.join(spec.version_dir, KEYS_DIR))
    files.delete([files.join(spec.version_dir, dataset_writer.BUILDING_NAME)])
    dataset_writer.publish(spec.out_dir, spec.version)
    return info


def _reuse(spec: BuildSpec, info: Dict[str, Any]) -> Dict[str, Any]:
    problems = dataset_writer.verify_version(spec.version_dir, info)
    if problems:
        raise dataset_writer.DatasetDirError(
            f"version {spec.version_dir} was built from the same config and inputs but fails verification "
            f"({len(problems)} problems, first: {problems[0]}); not overwriting a published version"
        )
    latest = dataset_writer.read_latest(spec.out_dir)
    if latest != spec.version:
        latest_info: Optional[Dict[str, Any]] = (
            dataset_writer.load_info(files.join(spec.out_dir, latest)) if latest else None
        )
        if latest_info is None or str(latest_info.get("created_utc", "")) <= str(info.get("created_utc", "")):
            dataset_writer.publish(
                spec.out_dir, spec.version
            )  # the earlier attempt died between its info file and LATEST
    return dict(info, reused=True)
