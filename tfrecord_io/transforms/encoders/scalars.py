"""Scalars: ``Int``, ``Float``, ``Bytes`` and ``Label`` (class ids, optionally from
a vocabulary of names). Each writes one feature under the column name.

Values from CSV manifests arrive as strings, so ``Int``, ``Float`` and ``Label``
parse ``"3"`` / ``"0.5"``; anything that does not parse is rejected with the value in
the reason. ``Int`` refuses floats (``3.7`` would silently lose data), and ``Float``
refuses NaN and infinities unless ``allow_nan=True``.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from ..encode_errors import EncodeError
from ..spec import FeatureSpec
from .base import Encoder, Features, scalar

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def parse_int(value: Any) -> int:
    if isinstance(value, (bool, np.bool_)):
        return int(value)
    if isinstance(value, (int, np.integer)):
        out = int(value)
    elif isinstance(value, str):
        try:
            out = int(value.strip())
        except ValueError:
            raise EncodeError("input", f"{value!r:.60} is not an integer") from None
    elif isinstance(value, (float, np.floating)):
        raise EncodeError("input", f"float {value!r} given for an integer column")
    else:
        raise EncodeError("input", f"expected an integer, got {type(value).__name__}")
    if not _INT64_MIN <= out <= _INT64_MAX:
        raise EncodeError("input", f"{out} is outside the int64 range")
    return out


def parse_float(value: Any, allow_nan: bool) -> float:
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(value.strip())
        except ValueError:
            raise EncodeError("input", f"{value!r:.60} is not a number") from None
    else:
        raise EncodeError("input", f"expected a number, got {type(value).__name__}")
    if not allow_nan and not math.isfinite(out):
        raise EncodeError("input", f"{out} is not finite")
    return out


class Int(Encoder):
    """An int64 scalar, optionally checked against ``[min_value, max_value]``."""

    def __init__(
        self,
        min_value: Optional[int] = None,
        max_value: Optional[int] = None,
        *,
        optional: bool = False,
        key: Optional[str] = None,
    ):
        super().__init__(optional=optional, key=key)
        self.min_value = min_value
        self.max_value = max_value

    def encode(self, value: Any, column: str) -> Features:
        out = parse_int(value)
        if (self.min_value is not None and out < self.min_value) or (
            self.max_value is not None and out > self.max_value
        ):
            raise EncodeError("input", f"{out} is outside [{self.min_value}, {self.max_value}]")
        return {self.prefix(column): (out, "int")}

    def feature_specs(self, column: str) -> List[FeatureSpec]:
        return [FeatureSpec(self.prefix(column), "int", (), not self.optional, "int64")]

    def decode(self, features: Mapping[str, Any], column: str) -> int:
        return int(scalar(features, self.prefix(column)))


class Float(Encoder):
    """A float32 scalar (finite unless ``allow_nan``)."""

    def __init__(self, allow_nan: bool = False, *, optional: bool = False, key: Optional[str] = None):
        super().__init__(optional=optional, key=key)
        self.allow_nan = allow_nan

    def encode(self, value: Any, column: str) -> Features:
        return {self.prefix(column): (parse_float(value, self.allow_nan), "float")}

    def feature_specs(self, column: str) -> List[FeatureSpec]:
        return [FeatureSpec(self.prefix(column), "float", (), not self.optional, "float32")]

    def decode(self, features: Mapping[str, Any], column: str) -> float:
        return float(scalar(features, self.prefix(column)))


class Bytes(Encoder):
    """An opaque bytes scalar (``str`` is stored as UTF-8)."""

    def encode(self, value: Any, column: str) -> Features:
        if isinstance(value, str):
            value = value.encode("utf-8", "surrogatepass")
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise EncodeError("input", f"expected bytes, got {type(value).__name__}")
        return {self.prefix(column): (bytes(value), "bytes")}

    def feature_specs(self, column: str) -> List[FeatureSpec]:
        return [FeatureSpec(self.prefix(column), "bytes", (), not self.optional, "bytes")]

    def decode(self, features: Mapping[str, Any], column: str) -> bytes:
        return bytes(scalar(features, self.prefix(column)))


class Label(Encoder):
    """A class id (int64). With ``vocabulary``, names map to their position in it
    (an id given as a number, or as a string of digits that is not a name, must be
    in range); with ``num_classes``, ids are checked
    to be in ``[0, num_classes)``. Unknown names are rejected at stage ``transform``.
    """

    def __init__(
        self,
        vocabulary: Optional[Sequence[str]] = None,
        num_classes: Optional[int] = None,
        *,
        optional: bool = False,
        key: Optional[str] = None,
    ):
        super().__init__(optional=optional, key=key)
        self.vocabulary = list(vocabulary) if vocabulary is not None else None
        if self.vocabulary is not None:
            if len(set(self.vocabulary)) != len(self.vocabulary):
                raise ValueError("the vocabulary has duplicate names")
            if num_classes is not None and num_classes != len(self.vocabulary):
                raise ValueError("num_classes differs from the vocabulary's length")
            num_classes = len(self.vocabulary)
        self.num_classes = num_classes
        self._ids: Dict[str, int] = {name: i for i, name in enumerate(self.vocabulary or [])}

    def label_id(self, value: Any) -> int:
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).decode("utf-8", "replace")
        if isinstance(value, str) and self.vocabulary is not None:
            if value in self._ids:
                return self._ids[value]
            stripped = value.strip()
            if stripped in self._ids:
                return self._ids[stripped]
            if not stripped.lstrip("-").isdigit():  # "2" from a CSV is an id; "fish" is not
                raise EncodeError(
                    "transform", f"label {value!r:.60} is not in the vocabulary ({len(self.vocabulary)} names)"
                )
            value = stripped
        out = parse_int(value)
        if self.num_classes is not None and not 0 <= out < self.num_classes:
            raise EncodeError("transform", f"label id {out} is outside [0, {self.num_classes})")
        return out

    def encode(self, value: Any, column: str) -> Features:
        return {self.prefix(column): (self.label_id(value), "int")}

    def name_of(self, label_id: int) -> str:
        """The vocabulary name of an id."""
        if self.vocabulary is None:
            raise ValueError("this Label has no vocabulary")
        return self.vocabulary[label_id]

    def feature_specs(self, column: str) -> List[FeatureSpec]:
        return [FeatureSpec(self.prefix(column), "int", (), not self.optional, "int64", doc="class id")]

    def decode(self, features: Mapping[str, Any], column: str) -> int:
        return int(scalar(features, self.prefix(column)))


__all__ = ["Bytes", "Float", "Int", "Label", "parse_float", "parse_int"]
