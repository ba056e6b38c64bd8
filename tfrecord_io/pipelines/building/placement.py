"""Deterministic split, shard and order of a row, from one hash of its key.

Why hashes and not random numbers: a rerun with the same config and inputs must give
byte-identical shards, and a worker must decide alone, without coordination, which
split, shard and position a row gets. SHA-256 of ``seed|key`` gives that: the same on
every machine, Python version and runner, independent of input order. One digest per
row is cut into three independent 64-bit numbers (split, shard, order): the planning
stages hash a million keys, so one SHA-256 instead of three matters.

The key itself must not depend on where the data sits (``rows.row_key``): paths in it
are relative to the input root or the manifest's folder, so a copy of the data built
from another mount or bucket lands in the same places.
"""

from __future__ import annotations

import hashlib
import math
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple


class Placement(NamedTuple):
    """Where a row goes: its split, a 64-bit number whose remainder by the split's shard
    count is its shard (the count is known only once every row has been seen), and its
    position within the shard (rows sort by it)."""

    split: str
    shard_hash: int
    order: int


def split_cutoffs(weights: Dict[str, float]) -> List[Tuple[str, float]]:
    """Cumulative fractions per split, in the config's order."""
    total = float(sum(weights.values()))
    acc = 0.0
    out = []
    for name, w in weights.items():
        acc += float(w) / total
        out.append((name, acc))
    return out


def place(key: str, cutoffs: Sequence[Tuple[str, float]], seed: int = 0) -> Placement:
    """The split, shard number and order of the row whose key is ``key``."""
    digest = hashlib.sha256(f"{seed}\x1f{key}".encode()).digest()
    fraction = int.from_bytes(digest[:8], "big") / 2.0**64
    split = cutoffs[-1][0]
    for name, cut in cutoffs:
        if fraction < cut:
            split = name
            break
    return Placement(split, int.from_bytes(digest[8:16], "big"), int.from_bytes(digest[16:24], "big"))


def shard_counts(bytes_by_split: Dict[str, int], num_shards: Optional[int], target_shard_bytes: int) -> Dict[str, int]:
    """Shards per split: ``num_shards`` for every split, else enough shards of about
    ``target_shard_bytes`` for the split's estimated bytes (at least one)."""
    if num_shards:
        return {s: int(num_shards) for s in bytes_by_split}
    return {s: max(1, math.ceil(size / target_shard_bytes)) for s, size in bytes_by_split.items()}
