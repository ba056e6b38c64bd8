"""Rows with the same key in one build: an error by default, or one kept (``dedup: key``).

Why it is decided in the shard writer: a key decides its split, shard and position, so
every row with one key lands in the same shard, next to each other, and the writer sees
them all without another shuffle. A dataset with one key twice could not be looked up by
key, diffed, appended to or removed from, and TFDS refuses such a build too.

Which row is kept (``dedup: key``): the first in the input - the lowest byte offset in
the manifest (``_row``), or for a folder the first file in path order; rows without a
position (``BuildDataset`` fed from a PCollection) keep the one whose data sorts first as
canonical JSON. Deterministic whatever the runner, worker count or input order.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from tfrecord_io.pipelines.building.row_plan import canonical, row_key
from tfrecord_io.usage_errors import UsageError

MODES = ("error", "key", "content")


class DuplicateKeyError(UsageError, ValueError):
    """Two rows of one build have the same key (``dedup: error``, the default)."""


def _where(row: Dict[str, Any]) -> str:
    pos = row.get("_row")
    if pos is None:
        return f"a row with data {canonical(row)[:200]}"
    return f"manifest byte offset {pos}" if isinstance(pos, int) else f"input file {pos}"


def _rank(row: Dict[str, Any]) -> Tuple[int, Any, str]:
    """Input order: rows with a byte offset, then with a path, then by data."""
    pos = row.get("_row")
    if isinstance(pos, int):
        return (0, pos, "")
    if pos is not None:
        return (1, str(pos), "")
    return (2, 0, canonical(row))


def by_key(
    rows: List[Dict[str, Any]], key_column: Optional[str], mode: str, split: str, shard: int
) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """``(rows to write, in order; notes of the rows dropped)``. Raises
    :class:`DuplicateKeyError` naming both rows when ``mode`` is ``error``."""
    first: Dict[str, int] = {}
    dropped_at: List[int] = []
    notes: List[Dict[str, Any]] = []
    keep = list(rows)
    for i, row in enumerate(rows):
        if key_column and row.get(key_column) is None:
            continue  # rejected by the encoder with its reason
        key = row_key(row, key_column)
        j = first.get(key)
        if j is None:
            first[key] = i
            continue
        if mode == "error":
            raise DuplicateKeyError(
                f"key {key[:200]!r} is in the input twice ({_where(rows[j])} and {_where(row)}); "
                "each row of a dataset needs its own key: fix the input, or set `dedup: key` to keep the first"
            )
        kept = keep[j]
        if _rank(row) < _rank(kept):  # this one came first in the input: it stays, in the same place
            keep[j] = row
            row, kept = kept, row
        dropped_at.append(i)
        notes.append({"key": key, "dropped": row.get("_row"), "kept": kept.get("_row")})
    if not dropped_at:
        return rows, []
    gone = set(dropped_at)
    return [r for i, r in enumerate(keep) if i not in gone], notes
