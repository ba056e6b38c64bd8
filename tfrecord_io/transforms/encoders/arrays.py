"""NumPy arrays of any shape, with their shape stored so they come back as they went in.

Keys written (``<p>`` is the column name or ``key=``):

==============  ==========  ============================================================
``<p>``         float/int   the values, C order (``storage="list"``), or
                bytes       the array's little-endian bytes (``storage="bytes"``)
``<p>/shape``   int         the array's shape
``<p>/dtype``   bytes       the NumPy dtype name (``storage="bytes"`` only)
==============  ==========  ============================================================

``storage="auto"`` uses a float/int list for ``float32`` and the int64-representable
integer dtypes TF parses directly (``int64``, ``int32``), and bytes for the rest
(``float64`` would lose precision in a float list; ``uint8`` would grow 8x).
A ``shape`` with ``-1`` (or None) in a dimension allows any length there.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

import numpy as np

from ..encode_errors import EncodeError
from ..spec import FeatureSpec
from .base import Encoder, Features, scalar, text

_LIST_DTYPES = {"float32": "float", "int64": "int", "int32": "int"}


class Array(Encoder):
    """Encode an array column (a NumPy array, or nested lists).

    Args:
        dtype: the dtype values are cast to; a cast that changes a value (3.5 -> int,
            300 -> uint8) is rejected.
        shape: the required shape, ``-1``/None for a free dimension; None for any shape.
        storage: ``"auto"``, ``"list"`` (float32 / int64 lists) or ``"bytes"``.
    """

    def __init__(
        self,
        dtype: str = "float32",
        shape: Optional[Sequence[Optional[int]]] = None,
        storage: str = "auto",
        *,
        optional: bool = False,
        key: Optional[str] = None,
    ):
        super().__init__(optional=optional, key=key)
        self.dtype = np.dtype(dtype).name
        self.shape = None if shape is None else tuple(-1 if d is None else int(d) for d in shape)
        if storage == "auto":
            storage = "list" if self.dtype in _LIST_DTYPES else "bytes"
        if storage not in ("list", "bytes"):
            raise ValueError("storage must be 'auto', 'list' or 'bytes'")
        if storage == "list" and self.dtype not in _LIST_DTYPES:
            raise ValueError(f"dtype {self.dtype} cannot be stored as a list exactly; use storage='bytes'")
        self.storage = storage

    def to_array(self, value: Any) -> np.ndarray:
        try:
            given = np.asarray(value)
        except Exception as err:  # noqa: BLE001 - ragged nested lists and the like
            raise EncodeError("input", f"not an array ({type(err).__name__}: {err})") from None
        if given.dtype.kind not in "biuf":
            raise EncodeError("input", f"expected numbers, got an array of dtype {given.dtype}")
        target = np.dtype(self.dtype)
        with np.errstate(all="ignore"):
            arr = given.astype(target)
            if given.dtype.kind == "f" and target.kind == "f":
                # Rounding float64 -> float32 is what was asked for; overflow to inf is not.
                lost = np.isfinite(given) & ~np.isfinite(arr)
            elif given.dtype.kind == "f":
                lost = ~np.isfinite(given) | (arr.astype(given.dtype) != given)
            else:
                lost = arr.astype(given.dtype) != given
        if np.any(lost):
            raise EncodeError("transform", f"values change when cast from {given.dtype} to {target}")
        if self.shape is not None:
            ok = len(self.shape) == arr.ndim and all(w in (-1, g) for w, g in zip(self.shape, arr.shape))
            if not ok:
                raise EncodeError("input", f"shape {arr.shape} does not match the required {self.shape}")
        return arr

    def encode(self, value: Any, column: str) -> Features:
        arr = self.to_array(value)
        p = self.prefix(column)
        shape = list(arr.shape)
        if self.storage == "list":
            return {p: (arr.reshape(-1), _LIST_DTYPES[self.dtype]), f"{p}/shape": (shape, "int")}
        data = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).tobytes()
        return {p: (data, "bytes"), f"{p}/shape": (shape, "int"), f"{p}/dtype": (self.dtype, "bytes")}

    def _fixed(self) -> Optional[tuple]:
        if self.shape is None or -1 in self.shape:
            return None
        return self.shape

    def feature_specs(self, column: str) -> List[FeatureSpec]:
        p = self.prefix(column)
        req = not self.optional
        rank = None if self.shape is None else (len(self.shape),)
        specs = [
            FeatureSpec(p, _LIST_DTYPES[self.dtype], self._fixed(), req, self.dtype, doc="values, C order")
            if self.storage == "list"
            else FeatureSpec(p, "bytes", (), req, self.dtype, doc="little-endian array bytes"),
            FeatureSpec(f"{p}/shape", "int", rank, req, "int64"),
        ]
        if self.storage == "bytes":
            specs.append(FeatureSpec(f"{p}/dtype", "bytes", (), req, "str"))
        return specs

    def decode(self, features: Mapping[str, Any], column: str) -> np.ndarray:
        p = self.prefix(column)
        shape = tuple(int(d) for d in np.asarray(features[f"{p}/shape"]).reshape(-1))
        count = int(np.prod(shape, dtype=np.int64))
        if self.storage == "list":
            values = np.asarray(features[p]).reshape(-1)
            if values.size != count:
                raise EncodeError("decode", f"{values.size} values for shape {shape}")
            return values.astype(self.dtype, copy=False).reshape(shape)
        data = scalar(features, p)
        dtype = np.dtype(text(features, f"{p}/dtype"))
        if len(data) != count * dtype.itemsize:
            raise EncodeError("decode", f"{len(data)} bytes for shape {shape} of {dtype}")
        return np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype, copy=False).reshape(shape)


__all__ = ["Array"]
