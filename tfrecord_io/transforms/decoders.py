"""Serialised Examples -> decoded values, as plain functions (no Beam): use them in a
PyTorch ``Dataset``, a ``tf.data`` ``py_function`` or a notebook.

``decode_example(data, spec)`` gives ``{column: value}``: images as ``(H, W, C)``
arrays of their dtype, audio as :class:`AudioData` ``(samples, sample_rate)``, text as
``str``, labels and ints as ``int``, arrays with their shape. The same ``spec`` that
encoded the data decodes it. An optional column absent from the record decodes to None.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Dict, List, Mapping, Optional

from tfrecord_io.format.codec import TYPE_NAMES, feature_to_numpy
from tfrecord_io.proto.example_pb2 import Example, SequenceExample

from .encode_errors import ColumnError, EncodeError
from .encoders.audio import AudioData
from .encoders.image import decode_image


class DecodeError(ColumnError):
    """A record does not decode with the given spec (stage ``decode``). A sibling of
    :class:`EncodeError`, not a kind of it: ``except ColumnError`` catches both."""

    def __init__(self, stage: str = "decode", reason: str = "", column: Optional[str] = None):
        super().__init__(stage, reason, column)


@lru_cache(maxsize=4096)
def _specs_of(enc, column: str):
    """An encoder's feature specs (encoders do not change after construction; building
    the list each record cost ~17 us for Image, a few % of a small image's decode)."""
    return tuple(enc.feature_specs(column))


def _features(fmap, enc, column: str) -> Dict[str, Any]:
    """The encoder's (non-sequence) features present in ``fmap``, parsed."""
    out: Dict[str, Any] = {}
    main = [s for s in _specs_of(enc, column) if not s.sequence]
    if enc.optional and not any(s.key in fmap for s in main):
        return out  # an optional column the row did not have
    for s in main:
        if s.key in fmap:
            out[s.key] = feature_to_numpy(fmap[s.key], s.key, TYPE_NAMES[s.kind])
        elif s.required:
            raise DecodeError("decode", f"the record has no feature {s.key!r}", column)
    return out


def _decode_columns(fmap, spec: Mapping[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for column, enc in spec.items():
        try:
            feats = _features(fmap, enc, column)
            if not feats:
                out[column] = None  # an optional column the row did not have
                continue
            out[column] = enc.decode(feats, column)
        except EncodeError as err:
            raise DecodeError("decode", err.reason, column) from None
        except Exception as err:  # noqa: BLE001 - a decoder bug or odd value fails this row, with its column
            raise DecodeError("decode", f"{type(err).__name__}: {err}", column) from None
    return out


def decode_example(data, spec: Mapping[str, Any]) -> Dict[str, Any]:
    """Serialised ``Example`` bytes -> ``{column: decoded value}``; raises DecodeError."""
    example = Example()
    try:
        example.ParseFromString(data)
    except Exception as err:  # noqa: BLE001 - any parse failure is this record's DecodeError
        raise DecodeError("decode", f"not a valid tf.train.Example: {err}") from None
    return _decode_columns(example.features.feature, spec)


def decode_sequence_example(data, context: Optional[Mapping[str, Any]], sequence: Mapping[str, Any]) -> Dict[str, Any]:
    """Serialised ``SequenceExample`` -> ``{column: value}`` for context and sequence columns."""
    seq = SequenceExample()
    try:
        seq.ParseFromString(data)
    except Exception as err:  # noqa: BLE001 - any parse failure is this record's DecodeError
        raise DecodeError("decode", f"not a valid tf.train.SequenceExample: {err}") from None
    out = _decode_columns(seq.context.feature, context or {})
    fmap = seq.context.feature
    fl = seq.feature_lists.feature_list
    for column, enc in sequence.items():
        try:
            ctx = _features(fmap, enc, column)
            lists: Dict[str, List[Any]] = {}
            for s in _specs_of(enc, column):
                if not s.sequence:
                    continue
                if s.key not in fl:
                    if s.required:
                        raise DecodeError("decode", f"the record has no feature list {s.key!r}", column)
                    continue
                lists[s.key] = [feature_to_numpy(f, s.key, TYPE_NAMES[s.kind]) for f in fl[s.key].feature]
            out[column] = enc.decode(ctx, lists, column) if lists else None
        except EncodeError as err:
            raise DecodeError("decode", err.reason, column) from None
        except Exception as err:  # noqa: BLE001 - a decoder bug or odd value fails this row, with its column
            raise DecodeError("decode", f"{type(err).__name__}: {err}", column) from None
    return out


class ExampleDecoder:
    """A picklable ``record -> {column: value}`` for a spec: pass it as the transform
    of a PyTorch dataset or DataLoader worker, or map it over records."""

    def __init__(self, spec: Mapping[str, Any]):
        self.spec = dict(spec)

    def __call__(self, record) -> Dict[str, Any]:
        return decode_example(record, self.spec)


__all__ = ["AudioData", "DecodeError", "ExampleDecoder", "decode_example", "decode_image", "decode_sequence_example"]
