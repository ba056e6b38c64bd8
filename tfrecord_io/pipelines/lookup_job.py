"""``tfrecord-io lookup ROOT KEY...``: print the Examples of some keys of a built dataset.

No pipeline: each key is one probe of its split's key index and one ranged read of its
record (``tfrecord_io.dataset.keyed_dataset``), from local disk or an object store. Exit status
0 when every key was found, 1 when some were not (they are listed), 2 for bad usage or input
(no such dataset or version, a version without a key index, a shard or key index replaced
while it was read: ``RemoteObjectChangedError``, named in one line; not "keys not found").
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List

import numpy as np

DESCRIPTION = (
    "Look rows of a built dataset up by key (the build config's key column): one probe of the split's key "
    "index and one ranged read of the record per key, CRCs and content hash checked. Prints each Example "
    "(bytes features by length, or as text when short UTF-8), or JSON lines with --json."
)


def add_parser(sub: Any, common: Any, epilog: str) -> None:
    """The ``lookup`` subcommand (registered by the CLI)."""
    p = sub.add_parser(
        "lookup",
        help="print the Examples of some keys (one index probe + one ranged read each)",
        description=DESCRIPTION,
        epilog=epilog,
        allow_abbrev=False,
    )
    p.add_argument("root", help="a dataset root (follows LATEST) or a version directory")
    p.add_argument("keys", nargs="+", metavar="KEY", help="keys to look up (the values of the config's key column)")
    p.add_argument("--version", help="a version of the dataset (default: the one LATEST names)")
    p.add_argument("--json", action="store_true", help="one JSON object per key")
    common(p)


def _value(value: Any) -> Any:
    """A feature value for printing: numbers as lists, bytes as text when short UTF-8,
    else by length and SHA-256 prefix (an image is not printed)."""
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return [_value(v) for v in value.tolist()]
        return value.tolist()
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if len(raw) <= 200:
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                pass
        import hashlib

        return {"bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()[:16]}
    if isinstance(value, (list, tuple)):
        return [_value(v) for v in value]
    return value


def lookup(root: str, keys: List[str], version: str = "") -> List[Dict[str, Any]]:
    """One result per key: ``{key, found, split, shard, offset, length, example}``."""
    from tfrecord_io.dataset.datasets import DatasetLayoutError
    from tfrecord_io.dataset.keyed_dataset import open_dataset
    from tfrecord_io.usage_errors import ArgumentError

    try:
        ds = open_dataset(root, version or None)
    except DatasetLayoutError as err:
        raise ArgumentError(str(err)) from None
    out = []
    with ds:
        for key in keys:
            found = ds.locate(key)
            if found is None:
                out.append({"key": key, "found": False, "version": ds.version})
                continue
            split, path, entry = found
            example = ds.get(key)
            out.append(
                {
                    "key": key,
                    "found": True,
                    "version": ds.version,
                    "split": split,
                    "shard": path,
                    "offset": entry.offset,
                    "length": entry.length,
                    "example": {k: _value(v) for k, v in sorted(example.items())},
                }
            )
    return out


def cmd_lookup(args: Any, beam_flags: List[str]) -> int:
    """The CLI command: look the keys up, print them; 1 if any is missing."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.dataset import dataset_writer
    from tfrecord_io.pipelines.runtime.beam_options import command_flags
    from tfrecord_io.storage.remote_objects import RemoteObjectChangedError
    from tfrecord_io.usage_errors import ArgumentError

    dataset_writer.use_filesystems(PipelineOptions(command_flags(args.runner_config, beam_flags)), [args.root])
    try:
        results = lookup(args.root, list(args.keys), args.version or "")
    except RemoteObjectChangedError as err:
        # the input changed under the command (exit 2, one line naming the object), not a
        # failed job, and not exit 1, which says "keys not found"
        raise ArgumentError(f"{err} (the version's files changed while they were read; look it up again)") from err
    missing = [r["key"] for r in results if not r["found"]]
    for r in results:
        if args.json:
            print(json.dumps(r, sort_keys=True, ensure_ascii=False))
        elif r["found"]:
            print(f"{r['key']}  (split {r['split']}, {r['shard']} @ {r['offset']}, {r['length']} bytes)")
            for name, value in r["example"].items():
                print(f"  {name}: {json.dumps(value, ensure_ascii=False)}")
    if missing:
        print(
            f"{len(missing)} of {len(results)} keys not in version {results[0]['version']}: "
            + ", ".join(repr(k) for k in missing[:20])
            + (" ..." if len(missing) > 20 else ""),
            file=sys.stderr,
        )
        return 1
    return 0
