"""Why a row could not be encoded (or a record decoded), in a form a dead-letter
output can keep: the column at fault, the stage that failed and a readable reason.

:class:`ColumnError` holds those three fields; :class:`EncodeError` (a row -> an
Example) and :class:`~tfrecord_io.transforms.decoders.DecodeError` (an Example -> values)
are its two directions, siblings: ``except ColumnError`` catches both, ``except
EncodeError`` only what encoding raised.

Stages, in the order a value goes through them:

- ``input``: the row has no such column, or the value has the wrong Python type;
- ``read``: the media file is missing, empty or unreadable;
- ``decode``: the bytes are not a valid image / audio file / UTF-8 text, or the
  image is a decompression bomb;
- ``transform``: resizing, colour conversion, resampling or a vocabulary lookup failed;
- ``encode``: re-encoding or building the Example failed.

These are plain Python (no Beam), so the same errors come out of ``encode_row`` in a
PyTorch or tf.data script and out of the ``EncodeExample`` PTransform.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, TypeVar

STAGES = ("input", "read", "decode", "transform", "encode")

_E = TypeVar("_E", bound="ColumnError")


class ColumnError(ValueError):
    """A value of one column failed at one stage: the fields a dead-letter row keeps."""

    def __init__(self, stage: str, reason: str, column: Optional[str] = None):
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; one of {STAGES}")
        self.stage = stage
        self.reason = reason
        self.column = column
        super().__init__(self._message())

    def _message(self) -> str:
        where = f"column {self.column!r}, " if self.column is not None else ""
        return f"{where}stage {self.stage}: {self.reason}"

    def with_column(self: _E, column: str) -> _E:
        """The same error, naming the column (encoders do not know their column)."""
        return type(self)(self.stage, self.reason, column)

    def __reduce__(self):  # keep the fields when pickled between Beam workers
        return (self.__class__, (self.stage, self.reason, self.column))


class EncodeError(ColumnError):
    """A value could not be turned into features (a row into an Example)."""


def rejected_row(row: Any, error: ColumnError) -> Dict[str, Any]:
    """The dead-letter element for ``row``: ``{row, column, stage, reason}``."""
    return {"row": row, "column": error.column, "stage": error.stage, "reason": error.reason}


__all__ = ["STAGES", "ColumnError", "EncodeError", "rejected_row"]
