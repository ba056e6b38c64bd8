"""The encoder interface every modality implements.

An encoder turns one column's value into Example features and back:

- ``encode(value) -> {key_suffix: (value, type)}``: features for one row; raises
  :class:`~tfrecord_io.transforms.encode_errors.EncodeError` with the stage that failed;
- ``feature_specs(column) -> [FeatureSpec]``: the keys it writes, their types and shapes;
- ``decode(features, column)``: the value back from ``{key: parsed value}`` (what
  ``tfrecord_io.format.codec.feature_to_numpy`` gives for each key);
- ``to_config()``: its parameters, JSON-ready, for ``tfrecord_io_info.json``;
- ``requirements()``: the optional libraries it imports to encode (Pillow, soundfile,
  soxr, librosa), checked once per worker before its first row
  (``transforms.requirements``).

Keys: an encoder that writes one feature writes it under the column name (or ``key=``);
one that writes several (Image, Audio) writes ``<column>/<name>`` (``image/encoded``,
``image/height`` ...), so several images in one Example never collide.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from ..encode_errors import EncodeError
from ..spec import FeatureSpec

Features = Dict[str, Tuple[Any, str]]


class Requirement(NamedTuple):
    """A library an encoder imports to encode, on the machine that encodes (a worker)."""

    module: str  # what is imported
    package: str  # what pip installs
    why: str  # what the encoder uses it for


class ColumnEncoder:
    """What every encoder of a column has, plain (``Encoder``) or per step
    (``sequence.SequenceEncoder``): ``optional``, ``key``, and its parameters as config.
    The two stay separate classes: a ``SequenceEncoder`` is no ``Encoder`` (it writes
    feature lists, and the row encoders tell them apart by class)."""

    #: Written when the row lacks the column (or has None) only if True; else rejected.
    optional: bool = False
    #: Overrides the column name as the key (single feature) or key prefix.
    key: Optional[str] = None

    def __init__(self, *, optional: bool = False, key: Optional[str] = None):
        self.optional = optional
        self.key = key

    def prefix(self, column: str) -> str:
        return self.key or column

    def requirements(self) -> Tuple[Requirement, ...]:
        """The optional libraries this encoder imports to encode, with these parameters
        (none for numbers, text and arrays)."""
        return ()

    def to_config(self) -> Dict[str, Any]:
        """``{"type": ClassName, **parameters}``: enough to rebuild the encoder."""
        params = {k: _jsonable(v) for k, v in vars(self).items() if not k.startswith("_")}
        return {"type": type(self).__name__, **params}

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


class Encoder(ColumnEncoder):
    """Base class. Subclasses set ``kind`` and implement the four methods."""

    def encode(self, value: Any, column: str) -> Features:  # pragma: no cover - abstract
        raise NotImplementedError

    def feature_specs(self, column: str) -> List[FeatureSpec]:  # pragma: no cover - abstract
        raise NotImplementedError

    def decode(self, features: Mapping[str, Any], column: str) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


def _jsonable(v: Any) -> Any:
    if isinstance(v, tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        return v.item()
    return v


def scalar(features: Mapping[str, Any], key: str) -> Any:
    """One value of a parsed feature: a Python int/float, or bytes."""
    value = features[key]
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise EncodeError("decode", f"feature {key!r} has {value.size} values, expected 1")
        return value.item()
    return value


def text(features: Mapping[str, Any], key: str) -> str:
    value = scalar(features, key)
    return value.decode("utf-8") if isinstance(value, (bytes, bytearray)) else str(value)


__all__ = ["Encoder", "Features", "scalar", "text"]
