"""Text: ``str`` (or UTF-8 bytes) -> one bytes feature under the column name.

Bytes that are not valid UTF-8 are rejected at stage ``decode`` with the byte offset
of the first bad byte, unless ``on_invalid="keep"``, which stores them unchanged
(and the decoder then returns ``bytes`` for that value). ``normalize`` applies a
Unicode normal form (``NFC``, ``NFD``, ``NFKC``, ``NFKD``), so visually equal strings
compare equal after reading; ``strip`` removes surrounding white space.
"""

from __future__ import annotations

import unicodedata
from typing import Any, List, Literal, Mapping, Optional, Union, cast

from ..encode_errors import EncodeError
from ..spec import FeatureSpec
from .base import Encoder, Features, scalar

_FORMS = ("NFC", "NFD", "NFKC", "NFKD")
_Form = Literal["NFC", "NFD", "NFKC", "NFKD"]


def utf8_error(data: bytes, err: UnicodeDecodeError) -> str:
    return f"not valid UTF-8 at byte {err.start} ({data[err.start : err.start + 4]!r}...): {err.reason}"


class Text(Encoder):
    """Encode a text column.

    Args:
        normalize: a Unicode normal form applied to every value, or None.
        strip: strip leading and trailing white space.
        on_invalid: ``"reject"`` (default) or ``"keep"`` bytes that are not UTF-8.
        allow_empty: accept empty strings (after strip); otherwise they are rejected.
        max_chars: reject longer values.
    """

    def __init__(
        self,
        normalize: Optional[str] = "NFC",
        strip: bool = False,
        on_invalid: str = "reject",
        allow_empty: bool = True,
        max_chars: Optional[int] = None,
        *,
        optional: bool = False,
        key: Optional[str] = None,
    ):
        super().__init__(optional=optional, key=key)
        if normalize is not None and normalize.upper() not in _FORMS:
            raise ValueError(f"normalize {normalize!r}: use one of {_FORMS} or None")
        if on_invalid not in ("reject", "keep"):
            raise ValueError("on_invalid must be 'reject' or 'keep'")
        self.normalize: Optional[_Form] = cast(_Form, normalize.upper()) if normalize else None
        self.strip = strip
        self.on_invalid = on_invalid
        self.allow_empty = allow_empty
        self.max_chars = max_chars

    def clean(self, value: Any) -> Union[str, bytes]:
        """The value as it will be stored: a normalised ``str``, or kept invalid bytes."""
        if isinstance(value, (bytes, bytearray, memoryview)):
            data = bytes(value)
            try:
                value = data.decode("utf-8")
            except UnicodeDecodeError as err:
                if self.on_invalid == "keep":
                    return data
                raise EncodeError("decode", utf8_error(data, err)) from None
        if not isinstance(value, str):
            raise EncodeError("input", f"expected str or bytes, got {type(value).__name__}")
        if self.normalize:
            value = unicodedata.normalize(self.normalize, value)
        if self.strip:
            value = value.strip()
        if not value and not self.allow_empty:
            raise EncodeError("input", "empty text")
        if self.max_chars is not None and len(value) > self.max_chars:
            raise EncodeError("transform", f"{len(value)} characters, more than the limit of {self.max_chars}")
        return value

    def encode(self, value: Any, column: str) -> Features:
        cleaned = self.clean(value)
        if isinstance(cleaned, str):
            try:
                cleaned = cleaned.encode("utf-8")
            except UnicodeEncodeError as err:  # lone surrogates cannot be UTF-8
                raise EncodeError(
                    "encode", f"cannot be written as UTF-8 at character {err.start}: {err.reason}"
                ) from None
        return {self.prefix(column): (cleaned, "bytes")}

    def feature_specs(self, column: str) -> List[FeatureSpec]:
        return [FeatureSpec(self.prefix(column), "bytes", (), not self.optional, "str", doc="UTF-8 text")]

    def decode(self, features: Mapping[str, Any], column: str) -> Union[str, bytes]:
        data = scalar(features, self.prefix(column))
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as err:
            if self.on_invalid == "keep":
                return data
            raise EncodeError("decode", utf8_error(data, err)) from None


__all__ = ["Text"]
