"""``tf.train.Example`` records <-> Apache Arrow, without TensorFlow.

Why: the tools people analyse and train with (pandas, polars, DuckDB, Ray, Hugging Face
``datasets``) speak Arrow, and the usual way there (tfx-bsl's decoder) drags in pinned
TensorFlow packages. Here the compiled parser of :mod:`tfrecord_io.format.codec` fills one
contiguous buffer per column for a whole batch of records (values, counts per record,
sizes of byte strings), and those buffers become the Arrow arrays as they are: no
Python object per value.

Types. An Example feature is always a list, so a column is, by default, a list of the
feature's wire type: ``int64_list`` -> ``list<int64>``, ``float_list`` ->
``list<float>`` (float32), ``bytes_list`` -> ``list<binary>``. The *shape* of the
feature, when it is known, narrows that:

- shape ``()`` (one value per record) -> a scalar column (``int64``, ``float``, ``binary``);
- a fully known shape such as ``(3,)`` or ``(2, 3)`` -> ``fixed_size_list<T, 6>`` (values
  in row-major order; a shape of rank > 1 is kept in the field metadata
  ``tfrecord_io.shape``);
- unknown shape (``None``, or a ``-1`` in it) -> ``list<T>``.

Shapes come from the schema source: a built dataset's ``tfrecord_io_info.json`` (its
``features``), a description with shapes (``{"label": ("int", ())}``), or a
``pyarrow.Schema`` you pass. A plain description (``{"label": "int"}``) or an inferred
schema knows no shapes: every column is a list. An inferred schema never drops a
feature: :func:`to_arrow` widens its table for a feature first seen in a later record,
and a stream of batches (:func:`to_arrow_batches`, Beam's ``output="arrow"``) stops at
such a record with an :class:`~tfrecord_io.errors.UnknownFeatureError` naming it. A record that does not fit its column
(two values in a scalar column, a missing value in a non-nullable one, another wire
type) is an :class:`~tfrecord_io.errors.ExampleCodecError` naming its file and byte
offset.

Missing values. A record without the feature is ``null`` in the column (a feature that
is present with no values is an empty list, not null); Arrow -> Example maps ``null``
back to "no such feature", so the round trip is exact. Features required by
``tfrecord_io_info.json`` give non-nullable fields.

Arrow -> Example (:func:`batch_to_records`) takes any column whose type has an Example
equivalent: integers and booleans -> ``int64_list`` (a ``uint64`` above the int64
range is an error), floating point -> ``float_list`` (float64 is rounded to float32,
the only float an Example stores), binary and string -> ``bytes_list`` (strings as
UTF-8), each as a scalar, list, large list or fixed-size list of those, dictionary
encoded or not. Anything else (structs, maps, timestamps, decimals, nested lists, a
null inside a list) is an error naming the column.

pyarrow is imported by this module only; it is installed with Apache Beam, and the
``arrow`` extra names it for users of the format core without Beam.
"""

from __future__ import annotations

import json
import os
from itertools import islice
from math import prod
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Protocol, Sequence, Tuple, Union

import numpy as np
import pyarrow as pa
from google.protobuf.message import DecodeError

from .errors import ExampleCodecError, UnknownFeatureError
from .format.codec import BYTES, FLOAT, INT64, TYPE_NAMES, serialize_example
from .format.index import INDEX_SUFFIXES
from .proto.example_pb2 import Example
from .storage import files

try:  # the compiled batch parser (mode 2: flat byte strings, missing keys allowed)
    from ._speedups import parse_examples as _parse_examples
except ImportError:  # pragma: no cover - exercised when the extension is absent
    _parse_examples = None

#: Field metadata keys this module writes and reads.
META_KIND = b"tfrecord_io.kind"
META_SHAPE = b"tfrecord_io.shape"

DEFAULT_BATCH_SIZE = 1024
#: A batch is cut when its records reach this many bytes, so one batch's byte column
#: stays well inside Arrow's 32-bit offsets (2 GiB) and memory stays bounded.
DEFAULT_MAX_BATCH_BYTES = 64 << 20
_MODE_FLAT = 2
_MODE_FLAT_STRICT = 3  # a key outside the columns: None (the twin names it)
_KIND_CODES = {BYTES: 1, FLOAT: 2, INT64: 3}
_KIND_NAMES = {BYTES: "bytes", FLOAT: "float", INT64: "int"}
_VALUE_TYPES = {BYTES: pa.binary(), FLOAT: pa.float32(), INT64: pa.int64()}

Shape = Optional[Tuple[int, ...]]
SchemaSource = Union[None, pa.Schema, Mapping[str, Any], Sequence[str]]


class _Located(Protocol):
    """Indexable ``(path, byte offset)`` of each record of a batch, for error messages."""

    def __getitem__(self, i: int) -> Tuple[Optional[str], Optional[int]]: ...


Locations = Optional[_Located]  # None when unknown


# --------------------------------------------------------------------------- schema


def feature_field(key: str, kind: str, shape: Shape = None, nullable: bool = True) -> pa.Field:
    """The Arrow field of one feature: wire kind (``'bytes'``/``'int'``/``'float'`` or an
    alias) and shape, by the rule in the module doc."""
    wire = _wire_kind(kind, key)
    value = _VALUE_TYPES[wire]
    metadata = {META_KIND: _KIND_NAMES[wire].encode()}
    if shape is not None and all(int(d) >= 0 for d in shape):
        shape = tuple(int(d) for d in shape)
        if shape == ():
            return pa.field(key, value, nullable=nullable, metadata=metadata)
        if len(shape) > 1:
            metadata[META_SHAPE] = json.dumps(list(shape)).encode()
        return pa.field(key, pa.list_(value, prod(shape)), nullable=nullable, metadata=metadata)
    return pa.field(key, pa.list_(value), nullable=nullable, metadata=metadata)


def _wire_kind(kind: Any, key: str) -> str:
    try:
        return TYPE_NAMES[str(kind).lower()]
    except KeyError:
        raise ExampleCodecError(f"feature {key!r}: unknown type {kind!r}; use 'bytes', 'int' or 'float'") from None


class SequenceFeaturesLeftOut(UserWarning):
    """A dataset's SequenceExample feature lists are not in its Arrow schema (they are
    not Example features: an Arrow read parses records as Examples, which gives a
    SequenceExample's context features and nothing of its feature lists)."""


def schema_from_features(features: Any, warn: bool = True) -> pa.Schema:
    """An Arrow schema from a feature description.

    Accepts ``tfrecord_io_info.json``'s ``features`` (``{key: {"kind", "shape", "required",
    "sequence"}}``), a description ``{key: "int"}`` or ``{key: ("int", shape)}``, or a
    list of keys with ``{key: type}`` dicts. A ``pyarrow.Schema`` is returned as it is.

    Sequence features (SequenceExample feature lists) are left out: an Arrow read
    parses each record as an Example, which reads a SequenceExample's context features
    and nothing of its lists. Leaving them out says so (``warn``, on by default): a
    :class:`SequenceFeaturesLeftOut` warning naming them, rather than a silent column
    loss; not an error, because the context features (ids, labels, lengths) read
    correctly and are often what a table of such a dataset is for. Their values are
    read with ``tfrecord_io.parse_sequence_example`` on the records
    (``iter_dataset(..., output="bytes")``). A description that names only the
    context features (a list of keys) warns of nothing.
    """
    if isinstance(features, pa.Schema):
        return features
    if not isinstance(features, Mapping):
        raise TypeError(f"a schema source must be a pyarrow.Schema or a mapping of features, not {features!r:.80}")
    sequence = sorted(k for k, spec in features.items() if isinstance(spec, Mapping) and spec.get("sequence"))
    if sequence and warn:
        import warnings

        warnings.warn(
            f"features {sequence} are SequenceExample feature lists, not Example features: they are not in the "
            "Arrow schema (the context features are); read them with tfrecord_io.parse_sequence_example",
            SequenceFeaturesLeftOut,
            stacklevel=3,
        )
    fields = []
    for key, spec in features.items():
        if isinstance(spec, Mapping):
            if spec.get("sequence"):
                continue
            shape = spec.get("shape")
            fields.append(
                feature_field(
                    key, spec["kind"], None if shape is None else tuple(shape), not spec.get("required", True)
                )
            )
        elif isinstance(spec, tuple) and len(spec) == 2:
            fields.append(feature_field(key, spec[0], None if spec[1] is None else tuple(spec[1])))
        else:
            fields.append(feature_field(key, spec))
    return pa.schema(fields)


def infer_kinds(records: Iterable[Any], locations: Locations = None) -> Dict[str, Tuple[str, int]]:
    """``{key: (wire kind, index of the first record with that kind)}`` over some
    serialised Examples. A key whose type differs between records is an error naming the
    second record's place; a key present with no list set in every record is a float
    (as :func:`tfrecord_io.format.codec.infer_description` says)."""
    kinds: Dict[str, Tuple[str, int]] = {}
    untyped: Dict[str, int] = {}
    example = Example()
    for i, data in enumerate(records):
        _parse_into(example, data, locations, i)
        for key, feature in example.features.feature.items():
            kind = feature.WhichOneof("kind")
            if kind is None:
                untyped.setdefault(key, i)
                continue
            seen = kinds.setdefault(key, (kind, i))
            if seen[0] != kind:
                path, offset = _where(locations, i)
                raise ExampleCodecError(
                    f"feature {key!r} is a {kind} here but a {seen[0]} in an earlier record "
                    f"(record {seen[1]} of the sample): a feature's type must not change",
                    path,
                    offset,
                )
    for key, i in untyped.items():
        kinds.setdefault(key, (FLOAT, i))
    return kinds


def infer_schema(records: Iterable[Any], locations: Locations = None) -> pa.Schema:
    """The schema of some serialised Examples: every key any of them has, as a list of
    its wire type (no shapes: see the module doc), nullable; errors as :func:`infer_kinds`."""
    kinds = infer_kinds(records, locations)
    return pa.schema([feature_field(k, _KIND_NAMES[kinds[k][0]]) for k in sorted(kinds)])


def _field_kind(field: pa.Field) -> str:
    """The wire kind a field is read from / written to."""
    meta = field.metadata or {}
    if META_KIND in meta:
        return _wire_kind(meta[META_KIND].decode(), field.name)
    return _kind_of_arrow(field.name, _value_type(field.name, field.type))


# --------------------------------------------------------------------------- Examples -> Arrow


def _where(locations: Locations, i: int) -> Tuple[Optional[str], Optional[int]]:
    if locations is None:
        return None, None
    return locations[i]


def _parse_into(example: Example, data: Any, locations: Locations, i: int) -> None:
    example.Clear()
    try:
        example.ParseFromString(data)
    except DecodeError as err:
        path, offset = _where(locations, i)
        raise ExampleCodecError(f"record is not a valid tf.train.Example: {err}", path, offset) from None


def parse_columns(
    records: Sequence[Any],
    keys: Sequence[str],
    kinds: Sequence[str],
    locations: Locations = None,
    strict: bool = False,
) -> List[tuple]:
    """Per key, the flat buffers of its column: ``(values, counts)`` for numbers,
    ``(data, counts, sizes)`` for byte strings; ``counts`` holds int64 values per record
    (-1: the record lacks the key), ``sizes`` the int64 size of each string. Those of
    the compiled parser where it handles the batch, else the same from upb (which also
    names the record at fault: not an Example, or another wire type). ``strict``: a
    record with a key outside ``keys`` is an :class:`UnknownFeatureError` (the columns
    were inferred from other records; without it such keys are not read)."""
    if _parse_examples is not None and records:
        raw = [k.encode("utf-8", "surrogatepass") for k in keys]
        cols = _parse_examples(
            records, raw, [_KIND_CODES[k] for k in kinds], _MODE_FLAT_STRICT if strict else _MODE_FLAT
        )
        if cols is not None:
            return cols
    return parse_columns_py(records, keys, kinds, locations, strict)


def parse_columns_py(
    records: Sequence[Any],
    keys: Sequence[str],
    kinds: Sequence[str],
    locations: Locations = None,
    strict: bool = False,
) -> List[tuple]:
    """:func:`parse_columns` by upb: the pure-Python twin of the compiled parser's flat
    modes (same buffers, tests compare them)."""
    n = len(records)
    counts = [np.empty(n, dtype=np.int64) for _ in keys]
    values: List[List[Any]] = [[] for _ in keys]
    sizes: List[List[int]] = [[] for _ in keys]
    wanted = set(keys)
    example = Example()
    for i, data in enumerate(records):
        _parse_into(example, data, locations, i)
        fmap = example.features.feature
        if strict and not wanted.issuperset(fmap):
            key = sorted(set(fmap) - wanted)[0]
            raise UnknownFeatureError(
                key,
                f"feature {key!r} is in this record but not in the columns, which were inferred from "
                "earlier records; pass a description or schema that names every feature "
                "(to_arrow widens its table for such keys)",
                *_where(locations, i),
            )
        for j, (key, kind) in enumerate(zip(keys, kinds)):
            if key not in fmap:
                counts[j][i] = -1
                continue
            feature = fmap[key]
            stored = feature.WhichOneof("kind")
            if stored is None:
                counts[j][i] = 0
                continue
            if stored != kind:
                path, offset = _where(locations, i)
                raise ExampleCodecError(
                    f"feature {key!r} is a {stored} in this record but its column holds {kind} "
                    "(a feature's type must not change between records)",
                    path,
                    offset,
                )
            items = getattr(feature, stored).value
            counts[j][i] = len(items)
            if kind == BYTES:
                values[j].extend(items)
                sizes[j].extend(len(v) for v in items)
            else:
                values[j].append(np.asarray(items, dtype=np.int64 if kind == INT64 else np.float32))
    out: List[tuple] = []
    for j, kind in enumerate(kinds):
        count_buf = bytearray(counts[j].tobytes())
        if kind == BYTES:
            size_buf = bytearray(np.asarray(sizes[j], dtype=np.int64).tobytes())
            out.append((bytearray(b"".join(values[j])), count_buf, size_buf))
        else:
            dtype = np.int64 if kind == INT64 else np.float32
            flat = np.concatenate(values[j]) if values[j] else np.empty(0, dtype=dtype)
            out.append((bytearray(flat.astype(dtype, copy=False).tobytes()), count_buf))
    return out


def records_to_batch(
    records: Sequence[Any], schema: pa.Schema, locations: Locations = None, strict: bool = False
) -> pa.RecordBatch:
    """Serialised Examples -> one ``RecordBatch`` of ``schema`` (columns straight from
    the parser's buffers). ``locations``: ``(path, offset)`` per record, for errors.
    ``strict``: a feature the schema lacks is an :class:`UnknownFeatureError` (for an
    inferred schema), else it is not read (a description selects columns)."""
    if not isinstance(records, (list, tuple)):
        records = list(records)
    kinds = [_field_kind(f) for f in schema]
    cols = parse_columns(records, schema.names, kinds, locations, strict)
    arrays = [_column_array(f, k, col, len(records), locations) for f, k, col in zip(schema, kinds, cols)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _value_array(kind: str, col: tuple) -> pa.Array:
    """The values of a column, all records end to end, from the parser's buffers."""
    if kind == BYTES:
        data, _, size_buf = col
        sizes = np.frombuffer(size_buf, dtype=np.int64)
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        if offsets[-1] < 2**31:
            return pa.Array.from_buffers(
                pa.binary(), len(sizes), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(data)]
            )
        return pa.Array.from_buffers(pa.large_binary(), len(sizes), [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    itemsize = 8 if kind == INT64 else 4
    data = col[0]
    return pa.Array.from_buffers(_VALUE_TYPES[kind], len(data) // itemsize, [None, pa.py_buffer(data)])


def _column_array(field: pa.Field, kind: str, col: tuple, n: int, locations: Locations) -> pa.Array:
    counts = np.frombuffer(col[1], dtype=np.int64)
    values = _value_array(kind, col)
    valid = counts >= 0
    missing = int(n - np.count_nonzero(valid))
    if missing and not field.nullable:
        raise ExampleCodecError(
            f"feature {field.name!r} is missing from this record but the schema says every record has it",
            *_where(locations, int(np.argmin(valid))),
        )
    ftype = field.type
    validity = None if not missing else pa.py_buffer(np.packbits(valid, bitorder="little"))
    if pa.types.is_fixed_size_list(ftype) or not _is_list(ftype):
        width = ftype.list_size if pa.types.is_fixed_size_list(ftype) else 1
        bad = valid & (counts != width)
        if bad.any():
            i = int(np.argmax(bad))
            what = "one value (a scalar)" if width == 1 and not _is_list(ftype) else f"{width} values"
            raise ExampleCodecError(
                f"feature {field.name!r} has {int(counts[i])} values in this record but its column holds {what}",
                *_where(locations, i),
            )
        if missing:  # spread the values over the rows: nulls take no values in the buffers
            rank = np.cumsum(valid) - 1
            idx = (rank[:, None] * width + np.arange(width)).reshape(-1)
            values = values.take(pa.array(idx, mask=np.repeat(~valid, width)))
        values = _cast_values(field, values, _value_type(field.name, ftype))
        if not _is_list(ftype):
            if missing:
                values = pa.Array.from_buffers(values.type, n, [validity] + values.buffers()[1:], missing)
            return values
        return pa.Array.from_buffers(ftype, n, [validity], missing, children=[values])
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.maximum(counts, 0), out=offsets[1:])
    values = _cast_values(field, values, ftype.value_type)
    if pa.types.is_large_list(ftype):
        return pa.Array.from_buffers(ftype, n, [validity, pa.py_buffer(offsets)], missing, children=[values])
    if offsets[-1] >= 2**31:
        raise ExampleCodecError(
            f"feature {field.name!r}: over 2**31 values in one batch; use large_list or smaller batches"
        )
    return pa.Array.from_buffers(
        ftype, n, [validity, pa.py_buffer(offsets.astype(np.int32))], missing, children=[values]
    )


def _cast_values(field: pa.Field, values: pa.Array, target: pa.DataType) -> pa.Array:
    """The parsed values as the schema's value type (a user schema may ask for
    ``int32``, ``string``, ``large_binary`` ...): a safe cast, whose failure names the column."""
    if values.type == target:
        return values
    try:
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
        raise ExampleCodecError(f"feature {field.name!r}: its values do not fit {target}: {err}") from None


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


# --------------------------------------------------------------------------- files -> batches


def _data_files(patterns: Sequence[str]) -> List[str]:
    """The files the patterns match, sorted, without index sidecars of matched files."""
    out: List[str] = []
    for pattern in patterns:
        matched = sorted(files.glob(pattern)) if any(c in pattern for c in "*?[") else [pattern]
        if not matched:
            raise FileNotFoundError(f"{pattern}: no files match")
        names = set(matched)
        out += [
            p for p in matched if not (os.path.splitext(p)[1] in INDEX_SUFFIXES and os.path.splitext(p)[0] in names)
        ]
    return out


def _pieces(paths: Sequence[str]) -> List[Any]:
    """One whole-file read per path (compression from the suffix)."""
    from .format.sharding import Piece

    return [Piece(path, files.normalize_compression(None, path)) for path in paths]


def _dataset_source(
    source: str, split: Optional[str], keys: Optional[Sequence[str]] = None
) -> Optional[Tuple[List[Any], pa.Schema]]:
    """(pieces to read, schema) of a built dataset, or None if ``source`` is not one;
    ``keys``: the features asked for (a sequence feature among them is an error naming
    it; without keys the sequence features left out are warned of)."""
    from .dataset.dataset_reader import select_dataset
    from .dataset.datasets import DatasetLayoutError, load_info, resolve_version_dir
    from .format.sharding import plan_shard

    if any(c in source for c in "*?["):
        return None
    try:
        version_dir = resolve_version_dir(source)
    except DatasetLayoutError:
        return None
    info = load_info(version_dir) or {}
    if split is None:
        split = "+".join(sorted(info.get("splits") or {})) or "train"
    selection = select_dataset(version_dir, split)
    features = info.get("features") or {}
    if keys is not None:
        _refuse_sequence_keys(keys, features)
    return plan_shard(selection.files, 0, 1), schema_from_features(features, warn=keys is None)


def _refuse_sequence_keys(keys: Sequence[str], features: Mapping[str, Any]) -> None:
    asked = sorted(k for k in keys if isinstance(features.get(k), Mapping) and features[k].get("sequence"))
    if asked:
        raise ExampleCodecError(
            f"features {asked} are SequenceExample feature lists: an Arrow read parses Examples and cannot give "
            "them (read them with tfrecord_io.parse_sequence_example)"
        )


class _Places:
    """``(path, offset)`` of the records of one batch (all from one file), made only
    when an error needs one."""

    def __init__(self, path: str, offsets: Sequence[int]):
        self.path = path
        self.offsets = offsets

    def __getitem__(self, i: int) -> Tuple[str, int]:
        return self.path, int(self.offsets[i])

    def __len__(self) -> int:
        return len(self.offsets)


def _record_batches(
    pieces: Sequence[Any], batch_size: int, max_batch_bytes: int, check_crc: bool
) -> Iterator[Tuple[List[Any], _Places]]:
    """The records of the pieces in lists of up to ``batch_size`` (cut earlier at
    ``max_batch_bytes``), never spanning two files; the per-record work is C-level
    (islice, zip), which matters at millions of small records per second."""
    from .format.sharding import read_piece

    for piece in pieces:
        it = read_piece(piece, check_crc)
        while True:
            chunk = list(islice(it, batch_size))
            if not chunk:
                break
            offsets, datas = zip(*chunk)
            sizes = np.fromiter(map(len, datas), dtype=np.int64, count=len(datas))
            ends = np.cumsum(sizes)
            start = 0
            while start < len(datas):  # cut where the bytes reach the limit (one record at least)
                base = ends[start - 1] if start else 0
                stop = max(int(np.searchsorted(ends, base + max_batch_bytes, side="left")) + 1, start + 1)
                stop = min(stop, len(datas))
                yield list(datas[start:stop]), _Places(piece.path, offsets[start:stop])
                start = stop


def to_arrow_batches(
    source: Union[str, Sequence[str]],
    description: SchemaSource = None,
    *,
    split: Optional[str] = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    check_crc: bool = True,
) -> Iterator[pa.RecordBatch]:
    """``RecordBatch``es of the Examples in ``source``, in file order, all of one schema.

    ``source``: file paths or patterns (local or any Beam filesystem; compressed by
    suffix), or one built dataset (root or version directory), of which ``split``
    (TFDS-style, ``"train[:50%]"``; default every split) is read. ``description``: a
    ``pyarrow.Schema``, a description (see :func:`schema_from_features`) or a list of
    keys (their types inferred); only those features are read. Default: the dataset's
    ``features``, else inferred from the first batch; a later record with a feature
    that batch did not have is an :class:`~tfrecord_io.errors.UnknownFeatureError`
    naming the feature, file and byte offset (a stream cannot change its schema, and
    reading on would drop that feature: pass a description, or use :func:`to_arrow`,
    which widens). Batches hold up to ``batch_size`` records and are cut early at
    ``max_batch_bytes``.
    """
    return _batches(source, description, split, batch_size, max_batch_bytes, check_crc, widen=False)


def _batches(
    source: Union[str, Sequence[str]],
    description: SchemaSource,
    split: Optional[str],
    batch_size: int,
    max_batch_bytes: int,
    check_crc: bool,
    widen: bool,
) -> Iterator[pa.RecordBatch]:
    """:func:`to_arrow_batches`; ``widen``: an inferred schema grows by the features of
    later records (each batch has the schema known when it was read; a later schema
    only adds fields) instead of failing."""
    if batch_size < 1 or max_batch_bytes < 1:
        raise ValueError("batch_size and max_batch_bytes must be positive")
    sources = [source] if isinstance(source, str) else list(source)
    asked = None
    if description is not None and not isinstance(description, (pa.Schema, Mapping)):
        asked = [description] if isinstance(description, str) else list(description)
    dataset = _dataset_source(sources[0], split, asked) if len(sources) == 1 else None
    schema: Optional[pa.Schema] = None
    if dataset is not None:
        pieces, schema = dataset
    else:
        if split is not None:
            raise ValueError(f"split={split!r} selects from a built dataset, and {source!r} is not one")
        pieces = _pieces(_data_files(sources))
    keys: Optional[List[str]] = None
    if isinstance(description, (pa.Schema, Mapping)):
        schema = schema_from_features(description)
    elif description is not None:
        keys = [description] if isinstance(description, str) else list(description)
        schema = None if schema is None else _select(schema, keys)
    inferred = schema is None and keys is None  # every feature, types from the records
    for datas, places in _record_batches(pieces, batch_size, max_batch_bytes, check_crc):
        if schema is None:
            schema = infer_schema(datas, places)
            if keys is not None:
                schema = _select(schema, keys)
        try:
            yield records_to_batch(datas, schema, places, strict=inferred)
        except UnknownFeatureError:
            if not widen:
                raise
            schema = _widened(schema, datas, places)
            yield records_to_batch(datas, schema, places, strict=True)


def _widened(schema: pa.Schema, records: Sequence[Any], places: Locations) -> pa.Schema:
    """``schema`` with the features of ``records`` it lacks (sorted by name, as
    :func:`infer_schema` orders them); a feature whose wire type differs from its
    column's is an error naming the record."""
    fields = {f.name: f for f in schema}
    for key, (kind, i) in infer_kinds(records, places).items():
        if key not in fields:
            fields[key] = feature_field(key, _KIND_NAMES[kind])
        elif _field_kind(fields[key]) != kind:
            raise ExampleCodecError(
                f"feature {key!r} is a {kind} here but a {_field_kind(fields[key])} in an earlier record: "
                "a feature's type must not change",
                *_where(places, i),
            )
    return pa.schema([fields[k] for k in sorted(fields)], metadata=schema.metadata)


def _conformed(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """``batch`` with ``schema``'s fields (those it lacks as nulls: its records lack them)."""
    if batch.schema.equals(schema):
        return batch
    names = set(batch.schema.names)
    arrays = [batch.column(f.name) if f.name in names else pa.nulls(batch.num_rows, f.type) for f in schema]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _select(schema: pa.Schema, keys: Sequence[str]) -> pa.Schema:
    missing = [k for k in keys if k not in schema.names]
    if missing:
        raise ExampleCodecError(f"features {missing} are not in the records (they have: {', '.join(schema.names)})")
    return pa.schema([schema.field(k) for k in keys])


def to_arrow(
    source: Union[str, Sequence[str]],
    description: SchemaSource = None,
    *,
    split: Optional[str] = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
    check_crc: bool = True,
) -> pa.Table:
    """A ``pyarrow.Table`` of every Example in ``source`` (see :func:`to_arrow_batches`).
    An inferred schema holds every feature of every record: a feature first seen in a
    later record widens the table (``null`` in the rows before it), and a feature whose
    type changes is an error naming the record."""
    batches = list(_batches(source, description, split, batch_size, max_batch_bytes, check_crc, widen=True))
    if not batches:
        schema = _empty_schema(source, description, split)
        return schema.empty_table()
    final = batches[-1].schema  # schemas only grow, batch after batch
    return pa.Table.from_batches([_conformed(b, final) for b in batches], schema=final)


def _empty_schema(source: Union[str, Sequence[str]], description: SchemaSource, split: Optional[str]) -> pa.Schema:
    if isinstance(description, (pa.Schema, Mapping)):
        return schema_from_features(description)
    if isinstance(source, str):
        dataset = _dataset_source(source, split)
        if dataset is not None:
            return dataset[1]
    return pa.schema([])


# --------------------------------------------------------------------------- Arrow -> Examples


def _value_type(name: str, t: pa.DataType) -> pa.DataType:
    """The element type of a column: inside one level of list, with dictionaries decoded."""
    if pa.types.is_dictionary(t):
        t = t.value_type
    if _is_list(t):
        t = t.value_type
        if pa.types.is_dictionary(t):
            t = t.value_type
        if _is_list(t):
            raise ExampleCodecError(
                f"column {name!r}: a list of lists ({t}) has no Example equivalent (an Example feature is one "
                "flat list); flatten it (e.g. pyarrow.compute.list_flatten) and keep the shape elsewhere"
            )
    return t


def _kind_of_arrow(name: str, t: pa.DataType) -> str:
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        return INT64
    if pa.types.is_floating(t):
        return FLOAT
    if (
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_fixed_size_binary(t)
    ):
        return BYTES
    raise ExampleCodecError(
        f"column {name!r}: Arrow type {t} has no Example equivalent (an Example holds int64, float32 and "
        "byte-string lists); cast the column first"
    )


def check_schema(schema: pa.Schema) -> Dict[str, str]:
    """``{column: wire kind}`` for a schema whose every column has an Example
    equivalent; else an :class:`ExampleCodecError` naming the first column that has none."""
    out = {}
    for field in schema:
        vtype = _value_type(field.name, field.type)
        kind = _kind_of_arrow(field.name, vtype)
        meta = field.metadata or {}
        if META_KIND in meta and _wire_kind(meta[META_KIND].decode(), field.name) != kind:
            raise ExampleCodecError(
                f"column {field.name!r}: its metadata says {meta[META_KIND].decode()!r} but it holds {vtype}"
            )
        out[field.name] = kind
    return out


def _column_rows(name: str, column: pa.Array, kind: str) -> List[Any]:
    """Per row: the feature's values as a Python list, or None (null: no feature)."""
    t = column.type
    if pa.types.is_dictionary(t):
        column = column.dictionary_decode()
        t = column.type
    if _is_list(t):
        inner = column.flatten()
        if inner.null_count:
            raise ExampleCodecError(f"column {name!r}: a null inside a list has no Example equivalent")
        if pa.types.is_dictionary(inner.type):
            column = column.cast(pa.list_(inner.type.value_type))
    if kind == INT64:
        vt = _value_type(name, t)
        if pa.types.is_uint64(vt):
            flat = (column.flatten() if _is_list(t) else column).drop_null().to_numpy()
            top = int(flat.max()) if len(flat) else None
            if top is not None and top >= 2**63:
                raise ExampleCodecError(f"column {name!r}: value {top} is above the int64 range of an Example")
    rows = column.to_pylist()
    if not _is_list(t):
        return [None if v is None else [v] for v in rows]
    return rows


def batch_to_records(batch: Union[pa.RecordBatch, pa.Table]) -> List[bytes]:
    """Serialised Examples (deterministic bytes), one per row; a null is a feature the
    Example does not have. Errors name the column (and row) that has no Example form."""
    kinds = check_schema(batch.schema)
    names = list(batch.schema.names)
    columns = []
    for name in names:
        column = batch.column(name)
        if isinstance(column, pa.ChunkedArray):
            column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        columns.append(_column_rows(name, column, kinds[name]))
    typenames = [_KIND_NAMES[kinds[n]] for n in names]
    out = []
    for row in range(batch.num_rows):
        datum = {}
        for name, typename, col in zip(names, typenames, columns):
            value = col[row]
            if value is not None:
                datum[name] = (value, typename)
        try:
            out.append(serialize_example(datum))
        except ExampleCodecError as err:
            raise ExampleCodecError(f"row {row}: {err.reason}") from None
    return out


__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_MAX_BATCH_BYTES",
    "META_KIND",
    "META_SHAPE",
    "batch_to_records",
    "check_schema",
    "feature_field",
    "infer_kinds",
    "infer_schema",
    "to_arrow_batches",
    "parse_columns",
    "parse_columns_py",
    "records_to_batch",
    "schema_from_features",
    "SequenceFeaturesLeftOut",
    "to_arrow",
]
