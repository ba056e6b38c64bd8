"""``tf.train.Example`` / ``SequenceExample`` <-> Python dicts of NumPy arrays, without
TensorFlow.

Writing takes ``{key: (value, type)}`` with type ``"byte"``/``"bytes"``, ``"int"`` or
``"float"`` (the ``tfrecord`` package's form), or plain ``{key: value}`` with the type
inferred. Reading takes a *description* (``{"image": "byte", "label": "int"}``, a list
of keys, or None for every key) and returns NumPy arrays: ``int64`` and ``float32``
arrays; one byte string as ``bytes``; several as a ``dtype=object`` array (which, unlike
NumPy's ``S`` dtype, keeps trailing zero bytes).

Serialisation is deterministic (map keys sorted), so the same dict gives the same bytes
in every process: upb's map order otherwise varies from run to run.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
from google.protobuf.message import DecodeError

from ..errors import ExampleCodecError
from ..proto.example_pb2 import Example, Feature, Features, SequenceExample

try:  # compiled encoder/parser: same results as upb, or None to send the input to upb
    from .._speedups import encode_example as _encode_example
    from .._speedups import parse_examples as _parse_examples
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _encode_example = None
    _parse_examples = None

BYTES = "bytes_list"
FLOAT = "float_list"
INT64 = "int64_list"

# Spellings accepted for a feature's type -> the Feature oneof field it selects.
TYPE_NAMES: Dict[str, str] = {
    "byte": BYTES,
    "bytes": BYTES,
    "str": BYTES,
    "string": BYTES,
    "int": INT64,
    "int64": INT64,
    "float": FLOAT,
    "float32": FLOAT,
}

Description = Union[None, Sequence[str], Mapping[str, Optional[str]]]

# Kind numbers of the compiled core: the Feature oneof field numbers.
_KIND_CODES = {BYTES: 1, FLOAT: 2, INT64: 3}
_TYPE_CODES = {name: _KIND_CODES[kind] for name, kind in TYPE_NAMES.items()}

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def _kind_of_type(typename: Optional[str], key: str) -> Optional[str]:
    if typename is None:
        return None
    try:
        return TYPE_NAMES[str(typename).lower()]
    except KeyError:
        raise ExampleCodecError(f"feature {key!r}: unknown type {typename!r}; use 'byte', 'int' or 'float'") from None


# --------------------------------------------------------------------------- writing


def _infer_kind(key: str, value: Any) -> str:
    if isinstance(value, np.ndarray):
        k = value.dtype.kind
        if k in "iub":
            return INT64
        if k == "f":
            return FLOAT
        if k in "SUO":
            return BYTES
        raise ExampleCodecError(f"feature {key!r}: cannot store a NumPy array of dtype {value.dtype}")
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return BYTES
    if isinstance(value, (bool, int, np.integer, np.bool_)):
        return INT64
    if isinstance(value, (float, np.floating)):
        return FLOAT
    if isinstance(value, (list, tuple)):
        if not value:
            raise ExampleCodecError(
                f"feature {key!r}: an empty list has no type to infer; write it as ([], 'int'), "
                "([], 'float') or ([], 'byte')"
            )
        kinds = {_infer_kind(key, v) for v in value}
        if kinds == {INT64}:
            return INT64
        if kinds <= {INT64, FLOAT}:
            return FLOAT
        if kinds == {BYTES}:
            return BYTES
        raise ExampleCodecError(f"feature {key!r}: a list mixes byte strings and numbers")
    raise ExampleCodecError(
        f"feature {key!r}: cannot infer a feature type from {type(value).__name__}; pass (value, 'byte'|'int'|'float')"
    )


def _as_bytes(key: str, item: Any) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, (bytearray, memoryview, np.bytes_)):
        return bytes(item)
    if isinstance(item, np.str_):
        return str(item).encode("utf-8")
    raise ExampleCodecError(f"feature {key!r}: expected bytes or str, got {type(item).__name__}")


def _check_number(key: str, v: Any) -> None:
    """``float()`` would accept ``"1.5"`` and ``b"2"``: a string is a wrong type here."""
    if isinstance(v, (str, bytes, bytearray, memoryview, np.str_, np.bytes_)):
        raise ExampleCodecError(f"feature {key!r}: {type(v).__name__} value {v!r:.40} given for a 'float' feature")


def _fill_feature(feature: Feature, key: str, value: Any, kind: str) -> None:
    try:
        if kind == BYTES:
            if isinstance(value, (bytes, bytearray, memoryview, str, np.bytes_, np.str_)):
                feature.bytes_list.value.append(_as_bytes(key, value))
            else:
                items = value.ravel().tolist() if isinstance(value, np.ndarray) else value
                feature.bytes_list.value.extend([_as_bytes(key, v) for v in items])
        elif kind == INT64:
            if isinstance(value, np.ndarray):
                if value.dtype.kind == "u" and value.size and value.max() > _INT64_MAX:
                    raise ExampleCodecError(f"feature {key!r}: value above the int64 range")
                if value.dtype.kind == "f":
                    raise ExampleCodecError(f"feature {key!r}: float array given for an 'int' feature")
                feature.int64_list.value.extend(value.ravel().astype(np.int64, copy=False).tolist())
            elif isinstance(value, (list, tuple)):
                for v in value:
                    if isinstance(v, (float, np.floating)) or not isinstance(v, (int, np.integer, np.bool_)):
                        raise ExampleCodecError(
                            f"feature {key!r}: {type(v).__name__} value {v!r} given for an 'int' feature"
                        )
                feature.int64_list.value.extend([int(v) for v in value])
            else:
                if not isinstance(value, (int, np.integer, np.bool_)) or isinstance(value, float):
                    raise ExampleCodecError(
                        f"feature {key!r}: {type(value).__name__} value {value!r} given for an 'int' feature"
                    )
                feature.int64_list.value.append(int(value))
        elif kind == FLOAT:
            if isinstance(value, np.ndarray):
                if value.dtype.kind not in "iufb":
                    raise ExampleCodecError(f"feature {key!r}: {value.dtype} array given for a 'float' feature")
                feature.float_list.value.extend(value.ravel().astype(np.float32, copy=False).tolist())
            elif isinstance(value, (list, tuple)):
                for v in value:
                    _check_number(key, v)
                feature.float_list.value.extend([float(v) for v in value])
            else:
                _check_number(key, value)
                feature.float_list.value.append(float(value))
        else:  # pragma: no cover - kinds come from TYPE_NAMES/_infer_kind
            raise ExampleCodecError(f"feature {key!r}: unknown kind {kind}")
    except ExampleCodecError:
        raise
    except (TypeError, ValueError, OverflowError) as err:
        raise ExampleCodecError(f"feature {key!r}: cannot store {value!r:.80}: {err}") from None


def _split_value(key: str, raw: Any) -> Tuple[Any, str]:
    """``(value, type)`` or a plain value -> (value, Feature oneof field)."""
    if isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[1], str) and raw[1].lower() in TYPE_NAMES:
        return raw[0], TYPE_NAMES[raw[1].lower()]
    if isinstance(raw, Feature):
        return raw, ""
    return raw, _infer_kind(key, raw)


def fill_features(features: Features, datum: Mapping[str, Any]) -> None:
    """Add every key of ``datum`` to ``features`` (a ``Features`` message)."""
    fmap = features.feature
    for key, raw in datum.items():
        if not isinstance(key, str):
            raise ExampleCodecError(f"feature names must be str, got {key!r}")
        value, kind = _split_value(key, raw)
        if kind == "":
            fmap[key].CopyFrom(value)
        elif value is None:
            raise ExampleCodecError(f"feature {key!r}: value is None")
        else:
            _fill_feature(fmap[key], key, value, kind)


def build_example(datum: Mapping[str, Any]) -> Example:
    """A ``tf.train.Example`` message (this package's wire-compatible class) from a dict."""
    example = Example()
    fill_features(example.features, datum)
    return example


def build_sequence_example(
    context: Optional[Mapping[str, Any]], feature_lists: Optional[Mapping[str, Any]]
) -> SequenceExample:
    """A ``SequenceExample`` from a context dict and ``{key: steps}`` feature lists.

    Each feature list value is ``(steps, type)`` or plain ``steps``: a sequence with one
    entry per step (a scalar, list or array), or a 2-D array (one row per step).
    """
    seq = SequenceExample()
    if context:
        fill_features(seq.context, context)
    for key, raw in (feature_lists or {}).items():
        if isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[1], str) and raw[1].lower() in TYPE_NAMES:
            steps, kind = raw[0], TYPE_NAMES[raw[1].lower()]
        else:
            steps, kind = raw, None
        flist = seq.feature_lists.feature_list[key]
        for step in steps:
            step_kind = kind or _infer_kind(key, step)
            _fill_feature(flist.feature.add(), key, step, step_kind)
    return seq


def serialize_example(datum: Mapping[str, Any]) -> bytes:
    """Serialised ``Example`` bytes, deterministic (sorted keys)."""
    if _encode_example is not None:  # plain Python values: encoded in C, same bytes
        data = _encode_example(datum, _TYPE_CODES)
        if data is not None:
            return data
    return build_example(datum).SerializeToString(deterministic=True)


def serialize_sequence_example(
    context: Optional[Mapping[str, Any]], feature_lists: Optional[Mapping[str, Any]]
) -> bytes:
    """Serialised ``SequenceExample`` bytes, deterministic (sorted keys)."""
    return build_sequence_example(context, feature_lists).SerializeToString(deterministic=True)


# --------------------------------------------------------------------------- reading

_EMPTY = {
    INT64: lambda: np.empty(0, dtype=np.int64),
    FLOAT: lambda: np.empty(0, dtype=np.float32),
    BYTES: lambda: np.empty(0, dtype=object),
}


def feature_to_numpy(feature: Feature, key: str = "?", expected: Optional[str] = None):
    """One ``Feature`` -> ``int64``/``float32`` array, ``bytes``, or object array."""
    kind = feature.WhichOneof("kind")
    if kind is None:  # a Feature with no list set: an empty list of any type
        return _EMPTY[expected or FLOAT]()
    if expected is not None and kind != expected:
        raise ExampleCodecError(f"feature {key!r} is stored as {kind} but the description says {expected}")
    if kind == INT64:
        ints = feature.int64_list.value
        return np.fromiter(ints, dtype=np.int64, count=len(ints))
    if kind == FLOAT:
        floats = feature.float_list.value
        return np.fromiter(floats, dtype=np.float32, count=len(floats))
    values = feature.bytes_list.value
    if len(values) == 1:
        return values[0]
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


def _normalize_description(description: Description) -> Optional[List[Tuple[str, Optional[str]]]]:
    if description is None:
        return None
    if isinstance(description, Mapping):
        return [(k, _kind_of_type(t, k)) for k, t in description.items()]
    if isinstance(description, str):
        return [(description, None)]
    return [(k, None) for k in description]


def features_to_dict(features: Features, description: Description = None, what: str = "example"):
    """A ``Features`` message -> ``{key: array}`` for the keys the description names."""
    fmap = features.feature
    wanted = _normalize_description(description)
    if wanted is None:
        return {k: feature_to_numpy(fmap[k], k) for k in sorted(fmap.keys())}
    out = {}
    for key, kind in wanted:
        if key not in fmap:
            raise ExampleCodecError(
                f"key {key!r} is not in the {what} (it has: {', '.join(sorted(fmap.keys())) or 'no features'})"
            )
        out[key] = feature_to_numpy(fmap[key], key, kind)
    return out


def parse_example(data, description: Description = None) -> Dict[str, Any]:
    """Serialised ``Example`` bytes (or memoryview) -> dict of NumPy arrays."""
    example = Example()
    try:
        example.ParseFromString(data)
    except DecodeError as err:  # what protobuf raises for bytes that do not parse
        raise ExampleCodecError(f"not a valid tf.train.Example: {err}") from None
    return features_to_dict(example.features, description)


def parse_sequence_example(
    data, context_description: Description = None, sequence_description: Description = None
) -> Tuple[Dict[str, Any], Dict[str, List[Any]]]:
    """Serialised ``SequenceExample`` -> ``(context, feature_lists)``.

    ``feature_lists[key]`` is a list with one array per step.
    """
    seq = SequenceExample()
    try:
        seq.ParseFromString(data)
    except DecodeError as err:
        raise ExampleCodecError(f"not a valid tf.train.SequenceExample: {err}") from None
    context = features_to_dict(seq.context, context_description, "context")
    fl = seq.feature_lists.feature_list
    wanted = _normalize_description(sequence_description)
    if wanted is None:
        wanted = [(k, None) for k in sorted(fl.keys())]
    lists: Dict[str, List[Any]] = {}
    for key, kind in wanted:
        if key not in fl:
            raise ExampleCodecError(
                f"key {key!r} is not in the sequence example's feature lists "
                f"(it has: {', '.join(sorted(fl.keys())) or 'none'})"
            )
        lists[key] = [feature_to_numpy(f, key, kind) for f in fl[key].feature]
    return context, lists


def infer_description(data) -> Dict[str, str]:
    """The description (``{key: 'byte'|'int'|'float'}``) of one serialised Example."""
    example = Example()
    try:
        example.ParseFromString(data)
    except DecodeError as err:
        raise ExampleCodecError(f"not a valid tf.train.Example: {err}") from None
    names = {BYTES: "byte", FLOAT: "float", INT64: "int"}
    return {
        k: names.get(example.features.feature[k].WhichOneof("kind"), "float")
        for k in sorted(example.features.feature.keys())
    }


def _fast_columns(
    records: Sequence, wanted: Optional[List[Tuple[str, Optional[str]]]], spans: bool = False
) -> Optional[List[Any]]:
    """Columns from the compiled parser, or None (not built, untyped keys, or a record
    it leaves to upb, which then gives the result or the error). With ``spans``, byte
    features come as (offset, length) pairs within each record instead of copies."""
    if _parse_examples is None or not wanted or any(kind is None for _, kind in wanted):
        return None
    keys = [k.encode("utf-8", "surrogatepass") for k, _ in wanted]  # never a match if not UTF-8
    kinds = [_KIND_CODES[k] for _, k in wanted if k is not None]  # all of them (checked above)
    return _parse_examples(records, keys, kinds, True) if spans else _parse_examples(records, keys, kinds)


def _object_array(items: Sequence[Any]) -> np.ndarray:
    """A 1-D object array of ``items`` (assigned one by one: lists stay lists)."""
    arr = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        arr[i] = item
    return arr


def parse_examples(records: Sequence, description: Description = None) -> List[Dict[str, Any]]:
    """``[parse_example(r, description) for r in records]``, faster for many records.

    With a typed description and the compiled core, the records are parsed in one C
    call into columns; each record's arrays are then views of those columns (rows of
    a 2-D block), which is much cheaper than one protobuf message and fresh arrays per
    record. Any record the fast parser does not handle sends the batch to upb.
    """
    if not isinstance(records, (list, tuple)):
        records = list(records)
    fast = _parse_examples_fast(records, description)
    return [parse_example(r, description) for r in records] if fast is None else fast


def _parse_examples_fast(records: Sequence, description: Description) -> Optional[List[Dict[str, Any]]]:
    """``parse_examples`` by the compiled parser, or None when it leaves them to upb."""
    if not records:
        return []
    wanted = _normalize_description(description)
    cols = _fast_columns(records, wanted)
    if cols is None:
        return None
    n = len(records)
    per_key: List[Any] = []
    for (_key, kind), col in zip(wanted or [], cols):
        if kind == BYTES:
            per_key.append([v[0] if len(v) == 1 else _object_array(v) for v in col])
            continue
        flat = np.frombuffer(col[0], dtype=np.int64 if kind == INT64 else np.float32)
        lengths = np.frombuffer(col[1], dtype=np.int64)
        if n and np.all(lengths == lengths[0]):
            per_key.append(list(flat.reshape(n, int(lengths[0]))))
        else:
            per_key.append(np.split(flat, np.cumsum(lengths)[:-1]))
    keys = [k for k, _ in wanted or []]
    return [dict(zip(keys, values)) for values in zip(*per_key)]


def parse_example_stream(
    records: Iterable, description: Description = None, batch_size: int = 128
) -> Iterator[Dict[str, Any]]:
    """``parse_example`` over an iterable of records, parsing ``batch_size`` at a time.

    Records read before an error (a corrupt frame, say) are still yielded, in order,
    before the error is raised, as a record-at-a-time loop would.
    """
    it = iter(records)
    while True:
        batch: List[Any] = []
        error: Optional[BaseException] = None
        try:
            for record in it:
                batch.append(record)
                if len(batch) >= batch_size:
                    break
        except Exception as err:  # noqa: BLE001 - re-raised below, after the good records
            error = err
        fast = _parse_examples_fast(batch, description) if batch else None
        if fast is not None:
            yield from fast
        else:  # upb, record by record: the good records before a bad one come out first
            for record in batch:
                yield parse_example(record, description)
        if error is not None:
            raise error
        if len(batch) < batch_size:
            return


def parse_examples_batch(
    records: Iterable, description: Mapping[str, str], *, byte_views: bool = False
) -> Dict[str, Any]:
    """Parse many Examples into one dict of arrays, one entry per described key.

    Numeric features of the same length in every record become a 2-D array
    ``(n_records, length)``; ragged ones become ``(values, row_lengths)``. Byte
    features become an object array of ``bytes`` (one value per record) or lists.
    ``byte_views=True`` gives, where the compiled parser handles the batch, read-only
    ``memoryview``s of the records instead of ``bytes`` copies (no copy of large images
    or audio; they keep the records' buffers alive), else ``bytes`` as usual.
    """
    wanted = _normalize_description(description) or []
    if not isinstance(records, (list, tuple)):
        records = list(records)
    cols = _fast_columns(records, wanted, byte_views)
    if cols is not None:
        if byte_views:
            cols = [_byte_views(records, col) if kind == BYTES else col for (_, kind), col in zip(wanted, cols)]
        return _batch_from_columns(len(records), wanted, cols)
    columns: Dict[str, List[Any]] = {k: [] for k, _ in wanted}
    example = Example()
    for data in records:
        example.Clear()
        try:
            example.ParseFromString(data)
        except DecodeError as err:
            raise ExampleCodecError(f"not a valid tf.train.Example: {err}") from None
        fmap = example.features.feature
        for key, kind in wanted:
            if key not in fmap:
                raise ExampleCodecError(f"key {key!r} is not in the example")
            f = fmap[key]
            k = f.WhichOneof("kind")
            if kind is not None and k is not None and k != kind:
                raise ExampleCodecError(f"feature {key!r} is stored as {k} but the description says {kind}")
            columns[key].append(getattr(f, k or kind or FLOAT).value)
    out: Dict[str, Any] = {}
    for key, kind in wanted:
        col = columns[key]
        if kind == BYTES:
            out[key] = _object_array([v[0] if len(v) == 1 else list(v) for v in col])
            continue
        dtype = np.int64 if kind == INT64 else np.float32
        lengths = np.fromiter((len(v) for v in col), dtype=np.int64, count=len(col))
        flat = np.fromiter((x for v in col for x in v), dtype=dtype, count=int(lengths.sum()))
        if len(col) and np.all(lengths == lengths[0]):
            out[key] = flat.reshape(len(col), int(lengths[0]))
        else:
            out[key] = (flat, lengths)
    return out


def _byte_views(records: Sequence, col: Tuple[bytearray, bytearray]) -> List[List[memoryview]]:
    """The compiled parser's (offset, length) spans -> per record, its strings as views."""
    spans = np.frombuffer(col[0], dtype=np.int64).reshape(-1, 2).tolist()
    counts = np.frombuffer(col[1], dtype=np.int64).tolist()
    out: List[List[memoryview]] = []
    k = 0
    for record, count in zip(records, counts):
        view = record if isinstance(record, memoryview) else memoryview(record)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        out.append([view[a : a + n] for a, n in spans[k : k + count]])
        k += count
    return out


def _batch_from_columns(n: int, wanted: List[Tuple[str, Optional[str]]], cols: List[Any]) -> Dict[str, Any]:
    """``parse_examples_batch``'s result from the compiled parser's columns."""
    out: Dict[str, Any] = {}
    for (key, kind), col in zip(wanted, cols):
        if kind == BYTES:
            out[key] = _object_array([v[0] if len(v) == 1 else v for v in col])
            continue
        flat = np.frombuffer(col[0], dtype=np.int64 if kind == INT64 else np.float32)
        lengths = np.frombuffer(col[1], dtype=np.int64)
        if n and np.all(lengths == lengths[0]):
            out[key] = flat.reshape(n, int(lengths[0]))
        else:
            out[key] = (flat, lengths)
    return out


__all__ = [
    "Example",
    "Feature",
    "Features",
    "SequenceExample",
    "build_example",
    "build_sequence_example",
    "features_to_dict",
    "feature_to_numpy",
    "infer_description",
    "parse_example",
    "parse_example_stream",
    "parse_examples",
    "parse_examples_batch",
    "parse_sequence_example",
    "serialize_example",
    "serialize_sequence_example",
]


def uniform_features(records: List[bytes]) -> Optional[Tuple[List[Tuple[str, str]], List[Any]]]:
    """``([(key, wire kind)], columns)`` for a batch whose records all have the first
    record's keys, no others, each of the same (non-empty) kind, with ``columns`` the
    compiled parser's output for those keys (``_fast_columns(..., spans=True)``:
    per key, values + value counts per record); None for any other batch (the caller
    then looks at each record; the jobs' batch statistics use it). One upb parse per record (its key count) and one call
    of the compiled parser for the whole batch."""
    if not records:
        return None
    first = Example()
    try:
        first.ParseFromString(records[0])
    except Exception:  # noqa: BLE001 - not an Example: the per-record path reports it
        return None
    wanted = []
    for key, feature in first.features.feature.items():
        kind = feature.WhichOneof("kind")
        if kind is None:
            return None
        wanted.append((key, kind))
    if not wanted:
        return None
    cols = _fast_columns(records, wanted, spans=True)  # None: a key missing, another type ...
    if cols is None:
        return None
    n_keys = len(wanted)
    probe = Example()
    for data in records:  # the same keys: none missing (above), none extra (here)
        probe.ParseFromString(data)
        if len(probe.features.feature) != n_keys:
            return None
    return wanted, cols
