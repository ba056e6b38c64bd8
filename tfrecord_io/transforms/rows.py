"""Rows -> serialised Examples, as plain functions (no Beam): what ``EncodeExample``
runs on each element, usable as is in a script, a PyTorch ``Dataset`` or a test.

A *spec* maps column names to encoders: ``{"image": Image(), "label": Label([...])}``.
Every column of the spec is encoded (columns of the row not in the spec are ignored);
the first failure raises :class:`EncodeError` naming the column and stage, so one bad
value rejects the whole row rather than writing a partial Example.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from tfrecord_io.errors import StorageUnavailableError
from tfrecord_io.format.codec import serialize_example, serialize_sequence_example

from .encode_errors import EncodeError
from .encoders.base import Encoder
from .encoders.sequence import SequenceEncoder
from .spec import FeatureSpec, feature_specs

Spec = Mapping[str, Encoder]


def check_spec(spec: Mapping[str, Any], allowed=(Encoder,), what: str = "spec") -> List[FeatureSpec]:
    """Check that every value is an encoder and no two write the same key; the specs."""
    if not isinstance(spec, Mapping) or not spec:
        raise TypeError(f"{what}: expected a non-empty dict of column -> encoder")
    for column, enc in spec.items():
        if not isinstance(column, str):
            raise TypeError(f"{what}: column names must be str, got {column!r}")
        if not isinstance(enc, allowed):
            raise TypeError(
                f"{what}: {column!r} maps to {enc!r}, not an encoder ({', '.join(a.__name__ for a in allowed)})"
            )
    specs = feature_specs(spec)
    seen: Dict[str, str] = {}
    for s in specs:
        if s.key in seen:
            raise ValueError(f"{what}: two encoders write the key {s.key!r}; give one of them key='...'")
        seen[s.key] = s.key
    return specs


def check_sequence_spec(
    context: Optional[Mapping[str, Encoder]], sequence: Mapping[str, SequenceEncoder]
) -> List[FeatureSpec]:
    """``check_spec`` for a ``SequenceExample``'s two parts: plain encoders in ``context``
    (may be empty), per-step ones in ``sequence``, no column in both, no key twice."""
    both = {**(context or {}), **sequence}
    if len(both) != len(context or {}) + len(sequence):
        raise ValueError("a column is in both context and sequence")
    if context:
        check_spec(context, (Encoder,), "context")
    check_spec(sequence, (SequenceEncoder,), "sequence")
    return check_spec(both, (Encoder, SequenceEncoder))


def _check_row(row: Any) -> None:
    if not isinstance(row, Mapping):
        raise EncodeError("input", f"expected a dict row, got {type(row).__name__}")


def _value(row: Mapping[str, Any], column: str, enc: Any) -> Tuple[bool, Any]:
    value = row.get(column)
    if value is None:
        if enc.optional:
            return False, None
        raise EncodeError("input", "missing value" if column in row else "no such column in the row", column)
    return True, value


def _encode_columns(row: Mapping[str, Any], spec: Spec) -> Dict[str, Tuple[Any, str]]:
    _check_row(row)
    features: Dict[str, Tuple[Any, str]] = {}
    for column, enc in spec.items():
        present, value = _value(row, column, enc)
        if not present:
            continue
        try:
            features.update(enc.encode(value, column))
        except EncodeError as err:
            raise err.with_column(column) from None
        except StorageUnavailableError:
            raise  # the store is down: the job fails, no row is rejected for it
        except Exception as err:  # noqa: BLE001 - an encoder bug must reject the row, not kill the worker
            raise EncodeError("encode", f"{type(err).__name__}: {err}", column) from None
    return features


def encode_features(row: Mapping[str, Any], spec: Spec) -> Dict[str, Tuple[Any, str]]:
    """``{key: (value, type)}`` for the row, before serialisation (for inspection)."""
    return _encode_columns(row, spec)


def encode_row(row: Mapping[str, Any], spec: Spec) -> bytes:
    """One row -> serialised ``tf.train.Example`` bytes; raises :class:`EncodeError`."""
    return example_bytes(_encode_columns(row, spec))


def example_bytes(features: Mapping[str, Tuple[Any, str]]) -> bytes:
    """:func:`encode_features`' result -> serialised ``tf.train.Example`` bytes (what
    :func:`encode_row` gives, for callers that look at the features first); raises
    :class:`EncodeError`."""
    try:
        return serialize_example(features)
    except Exception as err:  # noqa: BLE001 - any failure to serialise is this row's EncodeError
        raise EncodeError("encode", f"cannot build the Example: {err}") from None


def encode_sequence_row(
    row: Mapping[str, Any],
    context: Optional[Spec],
    sequence: Mapping[str, SequenceEncoder],
) -> bytes:
    """One row -> serialised ``tf.train.SequenceExample`` bytes.

    ``context`` encoders write context features; ``sequence`` encoders write feature
    lists (and context features of their own, such as the number of steps).
    """
    _check_row(row)
    ctx = _encode_columns(row, context or {})
    lists: Dict[str, Tuple[List[Any], str]] = {}
    for column, enc in sequence.items():
        present, value = _value(row, column, enc)
        if not present:
            continue
        try:
            c, fl = enc.encode(value, column)
        except EncodeError as err:
            raise err.with_column(column) from None
        except StorageUnavailableError:
            raise  # the store is down: the job fails, no row is rejected for it
        except Exception as err:  # noqa: BLE001 - an encoder bug or odd value rejects the row, with its column
            raise EncodeError("encode", f"{type(err).__name__}: {err}", column) from None
        ctx.update(c)
        lists.update(fl)
    try:
        return serialize_sequence_example(ctx, lists)
    except Exception as err:  # noqa: BLE001 - any failure to serialise is this row's EncodeError
        raise EncodeError("encode", f"cannot build the SequenceExample: {err}") from None


__all__ = ["check_spec", "encode_features", "encode_row", "encode_sequence_row", "example_bytes"]
