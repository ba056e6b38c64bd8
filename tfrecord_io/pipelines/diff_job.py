"""``tfrecord-io diff ROOT A B``: what changed between two versions of a dataset, per
split: rows added, removed and changed (same key, other content), from the key indexes
alone - no record is read.

Both indexes are sorted by key, so a diff is one merge of two sorted streams, read in
runs of blocks (about 50 bytes a row each): a million rows take a second or two, in
whatever process runs it (no pipeline: the cost is that of reading the two indexes).
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Optional, Tuple

from tfrecord_io.dataset.datasets import DatasetLayoutError, load_info, resolve_version_dir
from tfrecord_io.format.key_index import KeyIndexReader
from tfrecord_io.storage import files
from tfrecord_io.usage_errors import ArgumentError

DESCRIPTION = (
    "Compare two versions of a built dataset by their key indexes (no record is read): per split, the keys "
    "added, removed and changed (same key, other content). VERSION_B defaults to the current one (LATEST)."
)


def _stream(version_dir: str, note: Optional[Dict[str, Any]]) -> Iterator[Tuple[bytes, bytes]]:
    """``(key, content hash)`` of a split's key index, in key order (nothing without one)."""
    if not note:
        return
    # through Beam's filesystems: the command's --s3_* / GCS flags apply, as to every job
    path = files.join(version_dir, note["path"])
    with KeyIndexReader(path, size=int(note["bytes"]), via_filesystems=True) as reader:
        for blk in reader.blocks_in_order():
            hashes = blk.hashes
            for i, key in enumerate(blk.keys):
                yield key, hashes[16 * i : 16 * i + 16]


def diff_split(dir_a: str, note_a: Optional[Dict[str, Any]], dir_b: str, note_b: Optional[Dict[str, Any]]):
    """``{added: [...], removed: [...], changed: [...], unchanged: n}`` for one split."""
    added: List[str] = []
    removed: List[str] = []
    changed: List[str] = []
    same = 0
    a, b = _stream(dir_a, note_a), _stream(dir_b, note_b)
    x, y = next(a, None), next(b, None)
    while x is not None or y is not None:
        if y is None or (x is not None and x[0] < y[0]):
            assert x is not None
            removed.append(x[0].decode("utf-8"))
            x = next(a, None)
        elif x is None or y[0] < x[0]:
            added.append(y[0].decode("utf-8"))
            y = next(b, None)
        else:
            if x[1] == y[1]:
                same += 1
            else:
                changed.append(x[0].decode("utf-8"))
            x, y = next(a, None), next(b, None)
    return {"added": added, "removed": removed, "changed": changed, "unchanged": same}


def _version(root: str, version: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    try:
        version_dir = resolve_version_dir(root, version or None)
    except DatasetLayoutError as err:
        raise ArgumentError(str(err)) from None
    info = load_info(version_dir)
    assert info is not None  # resolve_version_dir checked it
    missing = sorted(s for s, e in (info.get("splits") or {}).items() if not e.get("key_index"))
    if missing or not info.get("splits"):
        raise ArgumentError(
            f"{version_dir} has no key index (built before tfrecord-io wrote them): diff compares key indexes; "
            "build that version again with this tfrecord-io (`tfrecord-io build CONFIG --version NAME`)"
        )
    return version_dir, info


def diff_versions(root: str, version_a: str, version_b: Optional[str] = None) -> Dict[str, Any]:
    """The changes from ``version_a`` to ``version_b`` (default: the current version)."""
    dir_a, info_a = _version(root, version_a)
    dir_b, info_b = _version(root, version_b)
    splits_a, splits_b = info_a.get("splits") or {}, info_b.get("splits") or {}
    out: Dict[str, Any] = {"a": info_a.get("version"), "b": info_b.get("version"), "splits": {}}
    for split in sorted(set(splits_a) | set(splits_b)):
        out["splits"][split] = diff_split(
            dir_a, (splits_a.get(split) or {}).get("key_index"), dir_b, (splits_b.get(split) or {}).get("key_index")
        )
    return out


def summary_lines(result: Dict[str, Any], limit: int = 10) -> List[str]:
    out = [f"diff {result['a']} -> {result['b']}"]
    for split, d in result["splits"].items():
        out.append(
            f"  {split:<12} added {len(d['added']):>8}  removed {len(d['removed']):>8}  "
            f"changed {len(d['changed']):>8}  unchanged {d['unchanged']:>8}"
        )
        for kind in ("added", "removed", "changed"):
            keys = d[kind]
            if keys:
                more = f" ... ({len(keys) - limit} more; --json lists all)" if len(keys) > limit else ""
                out.append(f"    {kind}: " + ", ".join(repr(k) for k in keys[:limit]) + more)
    return out


def add_parser(sub: Any, common: Any, epilog: str) -> None:
    """The ``diff`` subcommand (registered by the CLI)."""
    p = sub.add_parser(
        "diff",
        help="rows added, removed and changed between two versions (from the key indexes)",
        description=DESCRIPTION,
        epilog=epilog,
        allow_abbrev=False,
    )
    p.add_argument("root", help="the dataset root (the folder holding LATEST and the versions)")
    p.add_argument("version_a", metavar="VERSION_A", help="the older version")
    p.add_argument("version_b", metavar="VERSION_B", nargs="?", help="the newer version (default: LATEST)")
    p.add_argument("--json", action="store_true", help="print the whole result (every key) as JSON")
    common(p)


def cmd_diff(args: Any, beam_flags: List[str]) -> int:
    """The CLI command: print the diff (exit 0 whether or not anything changed)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.dataset import dataset_writer
    from tfrecord_io.pipelines.runtime.beam_options import command_flags

    dataset_writer.use_filesystems(PipelineOptions(command_flags(args.runner_config, beam_flags)), [args.root])
    result = diff_versions(args.root, args.version_a, args.version_b)
    if args.json:
        print(json.dumps(result, sort_keys=True, ensure_ascii=False))
    else:
        print("\n".join(summary_lines(result)))
    return 0
