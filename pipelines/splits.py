"""Deterministic split, shuffle and shard assignment, from a hash of each row's key.

Why hashes and not random numbers: a rerun with the same config and inputs must give
byte-identical shards, and a worker must decide alone, without coordination, which
split, shard and position a row gets. SHA-256 of ``seed|purpose|key`` gives that: the
same on every machine, Python version and runner, independent of input order.
"""

from __future__ import annotations

import hashlib
import math
from typing import Dict, List, Optional, Sequence, Tuple


def _hash64(*parts: str) -> int:
    digest = hashlib.sha256("\x1f".join(parts).encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big")


def split_cutoffs(weights: Dict[str, float]) -> List[Tuple[str, float]]:
    """Cumulative fractions per split, in the config's order."""
    total = float(sum(weights.values()))
    acc = 0.0
    out = []
    for name, w in weights.items():
        acc += float(w) / total
        out.append((name, acc))
    return out


def assign_split(key: str, cutoffs: Sequence[Tuple[str, float]], seed: int = 0) -> str:
    """The split of a row: its hash as a fraction in [0, 1) against the cutoffs."""
    fraction = _hash64(str(seed), "split", key) / 2.0**64
    for name, cut in cutoffs:
        if fraction < cut:
            return name
    return cutoffs[-1][0]


def shuffle_key(key: str, seed: int = 0) -> int:
    """Sort key giving a deterministic pseudo-random order."""
    return _hash64(str(seed), "shuffle", key)


def assign_shard(key: str, num_shards: int, seed: int = 0) -> int:
    """Shard of a row within its split."""
    return _hash64(str(seed), "shard", key) % num_shards


def shard_counts(bytes_by_split: Dict[str, int], num_shards: Optional[int], target_shard_bytes: int) -> Dict[str, int]:
    """Shards per split: ``num_shards`` for every split, else enough shards of about
    ``target_shard_bytes`` for the split's estimated bytes (at least one)."""
    if num_shards:
        return {s: int(num_shards) for s in bytes_by_split}
    return {s: max(1, math.ceil(size / target_shard_bytes)) for s, size in bytes_by_split.items()}
