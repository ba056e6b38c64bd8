"""A seeded permutation of ``range(n)`` that any reader computes in pieces: position
``i`` of the shuffled order holds record ``permute(i)``.

Why not ``numpy.random.permutation(n)``: every DataLoader worker of every rank would
build the whole array (8 bytes per record, tens of millions of records per dataset)
to use a slice of it. Here the permutation is a keyed bijection (a balanced Feistel
network over the smallest even power of two >= n, with cycle walking back into
``[0, n)``), so a reader evaluates exactly the positions it reads, in windows, and a
resumed reader jumps to position ``i`` for free. Every record appears exactly once;
the order depends only on the key (seed and epoch), never on the process.

Nothing here imports torch or Beam.
"""

from __future__ import annotations

import hashlib
from typing import Sequence, Union

import numpy as np

ROUNDS = 6
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a 64-bit avalanche mix (uint64 arithmetic wraps)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


class Permutation:
    """``permute(positions)`` -> record numbers, a bijection of ``[0, n)`` chosen by ``key``
    (any string: e.g. ``"seed:7:epoch:3"``)."""

    def __init__(self, n: int, key: str) -> None:
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        self.n = int(n)
        self.key = key
        bits = max(2, int(self.n - 1).bit_length()) if self.n > 1 else 2
        bits += bits % 2
        self._half = np.uint64(bits // 2)
        self._mask = np.uint64((1 << (bits // 2)) - 1)
        digest = hashlib.sha512(key.encode("utf-8")).digest()
        self._keys = [np.uint64(int.from_bytes(digest[8 * r : 8 * r + 8], "little")) for r in range(ROUNDS)]

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        left, right = x >> self._half, x & self._mask
        with np.errstate(over="ignore"):
            for k in self._keys:
                left, right = right, left ^ (_mix(right ^ k) & self._mask)
        return (left << self._half) | right

    def permute(self, positions: Union[Sequence[int], np.ndarray]) -> np.ndarray:
        """The record numbers at ``positions`` (each in ``[0, n)``), as int64."""
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and (pos.min() < 0 or pos.max() >= self.n):
            raise IndexError(f"positions must be in [0, {self.n})")
        out = self._encrypt(pos.astype(np.uint64))
        limit = np.uint64(self.n)
        outside = np.flatnonzero(out >= limit)
        while outside.size:  # cycle walking: at most 4x the domain, so few rounds
            out[outside] = self._encrypt(out[outside])
            outside = outside[out[outside] >= limit]
        return out.astype(np.int64)

    def __len__(self) -> int:
        return self.n


__all__ = ["Permutation"]
