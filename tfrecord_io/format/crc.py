"""Masked CRC32C as TFRecord frames use it.

The ``crc32c`` package computes CRC32C with SSE4.2/ARMv8 instructions (about 15 GB/s
here, 12M calls/s on 100-byte inputs) and accepts any object with the buffer protocol,
so memoryview slices of a read buffer are checksummed without a copy. That zero-copy
path is why we use it rather than ``google-crc32c`` (bytes only) or ``crcmod``
(0.46 GB/s, which Beam's own tfrecordio pulls in).
"""

from __future__ import annotations

from crc32c import crc32c

_MASK_DELTA = 0xA282EAD8
_U32 = 0xFFFFFFFF


def mask(crc: int) -> int:
    """TensorFlow's CRC mask: rotate right by 15 bits and add a constant.

    Masking keeps a CRC stored inside data that is itself CRC'd from being trivial.
    """
    return ((((crc >> 15) | (crc << 17)) & _U32) + _MASK_DELTA) & _U32


def unmask(masked: int) -> int:
    """Inverse of :func:`mask`."""
    rot = (masked - _MASK_DELTA) & _U32
    return ((rot >> 17) | (rot << 15)) & _U32


def _masked_crc32c_py(data) -> int:
    """Pure-Python twin of the compiled ``masked_crc32c`` (kept for tests and fallback)."""
    return mask(crc32c(data))


try:  # one C call instead of a C call plus Python integer arithmetic per record
    from .._speedups import masked_crc32c
except ImportError:  # pragma: no cover - exercised when the extension is absent
    masked_crc32c = _masked_crc32c_py


__all__ = ["crc32c", "mask", "unmask", "masked_crc32c"]
