"""Example codec: dict -> Example -> dict round trips (hypothesis), type inference,
descriptions, SequenceExamples, batched parsing and clear errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tfrecord_io as tfio
from tfrecord_io.format import codec
from tfrecord_io.proto.example_pb2 import Example

keys = st.text(min_size=1, max_size=12)
int64s = st.integers(-(2**63), 2**63 - 1)
float32s = st.floats(width=32, allow_nan=True, allow_infinity=True)
byte_strings = st.binary(max_size=40)

typed_feature = st.one_of(
    st.tuples(st.lists(int64s, max_size=6), st.just("int")),
    st.tuples(st.lists(float32s, max_size=6), st.just("float")),
    st.tuples(st.lists(byte_strings, max_size=6), st.sampled_from(["byte", "bytes"])),
)


def _same_float32(a, b):
    return (
        np.asarray(a, dtype=np.float32).view(np.uint32).tolist()
        == np.asarray(b, dtype=np.float32).view(np.uint32).tolist()
    )


def _check(value, typ, got):
    if typ == "int":
        assert got.dtype == np.int64 and got.tolist() == value
    elif typ == "float":
        assert got.dtype == np.float32 and _same_float32(got, value)
    elif len(value) == 1:
        assert got == value[0] and isinstance(got, bytes)
    else:
        assert got.dtype == object and list(got) == value


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(keys, typed_feature, max_size=6))
def test_typed_round_trip(datum):
    data = codec.serialize_example(datum)
    description = {k: t for k, (_, t) in datum.items()}
    parsed = codec.parse_example(data, description)
    assert set(parsed) == set(datum)
    for key, (value, typ) in datum.items():
        _check(value, "byte" if typ == "bytes" else typ, parsed[key])
    # untyped read: the same values, even for empty lists (their kind is on the wire)
    untyped = codec.parse_example(data)
    assert set(untyped) == set(datum)
    for key, (value, typ) in datum.items():
        _check(value, "byte" if typ == "bytes" else typ, untyped[key])
    assert codec.infer_description(data) == {k: ("byte" if t == "bytes" else t) for k, (_, t) in datum.items()}


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        keys,
        st.one_of(
            int64s,
            st.floats(width=32, allow_nan=False),
            byte_strings,
            st.text(max_size=10),
            st.booleans(),
            st.lists(int64s, min_size=1, max_size=4),
            st.lists(byte_strings, min_size=1, max_size=4),
        ),
        max_size=6,
    )
)
def test_inferred_round_trip(datum):
    parsed = codec.parse_example(codec.serialize_example(datum))
    for key, value in datum.items():
        got = parsed[key]
        if isinstance(value, bool):
            assert got.tolist() == [int(value)]
        elif isinstance(value, int):
            assert got.tolist() == [value]
        elif isinstance(value, float):
            assert _same_float32(got, [value])
        elif isinstance(value, bytes):
            assert got == value
        elif isinstance(value, str):
            assert got == value.encode("utf-8")
        elif isinstance(value[0], int):
            assert got.tolist() == value
        else:
            assert (got == value[0]) if len(value) == 1 else list(got) == value


@pytest.mark.parametrize(
    "array",
    [
        np.arange(12, dtype=np.int32).reshape(3, 4),
        np.array([[1.5, -2.0], [np.inf, np.nan]], dtype=np.float64),
        np.array([True, False]),
        np.array([2**63 - 1], dtype=np.uint64),
        np.array([b"a\x00", b"b"], dtype=object),
        np.zeros((2, 0, 3), dtype=np.float32),
    ],
)
def test_numpy_arrays_any_shape_flattened(array):
    got = codec.parse_example(codec.serialize_example({"a": array}))["a"]
    if array.dtype.kind == "O":
        assert list(got) == list(array.ravel())
    elif array.dtype.kind == "f":
        assert _same_float32(got, array.ravel().astype(np.float32))
    else:
        assert got.tolist() == array.ravel().astype(np.int64).tolist()


def test_numpy_S_array_loses_trailing_zeros_but_object_arrays_keep_them():
    data = codec.serialize_example({"b": ([b"x\x00\x00", b"\x00"], "byte")})
    got = codec.parse_example(data, {"b": "byte"})["b"]
    assert got.dtype == object and list(got) == [b"x\x00\x00", b"\x00"]


@pytest.mark.parametrize(
    "datum,key",
    [
        ({"label": ("x", "int")}, "label"),
        ({"label": ([1.5], "int")}, "label"),
        ({"f": ("nope", "float")}, "f"),
        ({"b": ([1, 2], "byte")}, "b"),
        ({"e": []}, "e"),
        ({"m": [1, b"x"]}, "m"),
        ({"o": object()}, "o"),
        ({"n": None}, "n"),
        ({"u": np.array([2**64 - 1], dtype=np.uint64)}, "u"),
        ({"big": (2**63, "int")}, "big"),
        ({"t": (1, "complex")}, "t"),
        ({"fs": ("1.5", "float")}, "fs"),
        ({"fb": (b"2", "float")}, "fb"),
        ({"fl": (["1", 2.0], "float")}, "fl"),
    ],
)
def test_wrong_types_name_the_key(datum, key):
    with pytest.raises(tfio.ExampleCodecError) as err:
        codec.serialize_example(datum)
    assert repr(key) in str(err.value)


def test_description_forms():
    data = codec.serialize_example({"a": (1, "int"), "b": (b"x", "byte"), "c": ([0.5], "float")})
    assert set(codec.parse_example(data, ["a", "c"])) == {"a", "c"}
    assert set(codec.parse_example(data, None)) == {"a", "b", "c"}
    assert codec.parse_example(data, {"a": None})["a"].tolist() == [1]
    with pytest.raises(tfio.ExampleCodecError, match="'zz'"):
        codec.parse_example(data, ["zz"])
    with pytest.raises(tfio.ExampleCodecError, match="'b'"):
        codec.parse_example(data, {"b": "int"})
    with pytest.raises(tfio.ExampleCodecError, match="unknown type"):
        codec.parse_example(data, {"a": "double"})


def test_invalid_payload_is_a_codec_error():
    with pytest.raises(tfio.ExampleCodecError):
        codec.parse_example(b"\xff\xff\xff")
    with pytest.raises(tfio.ExampleCodecError):
        codec.parse_sequence_example(b"\xff\xff\xff")
    with pytest.raises(tfio.ExampleCodecError):
        codec.infer_description(b"\xff\xff\xff")
    with pytest.raises(tfio.ExampleCodecError):
        codec.parse_examples_batch([codec.serialize_example({"a": 1}), b"\xff\xff\xff"], {"a": "int"})
    assert isinstance(tfio.ExampleCodecError("x"), ValueError)


@settings(max_examples=80, deadline=None)
@given(
    context=st.dictionaries(keys, typed_feature, max_size=3),
    lists=st.dictionaries(
        keys,
        st.one_of(
            st.tuples(st.lists(st.lists(int64s, max_size=3), max_size=4), st.just("int")),
            st.tuples(st.lists(st.lists(float32s, max_size=3), max_size=4), st.just("float")),
            st.tuples(st.lists(st.lists(byte_strings, max_size=3), max_size=4), st.just("byte")),
        ),
        max_size=3,
    ),
)
def test_sequence_example_round_trip(context, lists):
    data = codec.serialize_sequence_example(context, lists)
    ctx, got = codec.parse_sequence_example(
        data, {k: t for k, (_, t) in context.items()}, {k: t for k, (_, t) in lists.items()}
    )
    for key, (value, typ) in context.items():
        _check(value, "byte" if typ == "bytes" else typ, ctx[key])
    for key, (steps, typ) in lists.items():
        assert len(got[key]) == len(steps)
        for step, g in zip(steps, got[key]):
            _check(step, typ, g)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(int64s, st.lists(float32s, min_size=3, max_size=3), byte_strings), min_size=1, max_size=20))
def test_batch_parse_matches_per_record(rows):
    records = [
        codec.serialize_example({"l": (ints, "int"), "v": (v, "float"), "b": (b, "byte")}) for ints, v, b in rows
    ]
    batch = codec.parse_examples_batch(records, {"l": "int", "v": "float", "b": "byte"})
    assert batch["l"].shape == (len(rows), 1) and batch["l"][:, 0].tolist() == [r[0] for r in rows]
    assert batch["v"].shape == (len(rows), 3)
    assert _same_float32(batch["v"].ravel(), [x for r in rows for x in r[1]])
    assert list(batch["b"]) == [r[2] for r in rows]


def test_batch_parse_ragged():
    records = [codec.serialize_example({"v": (list(range(n)), "int")}) for n in [0, 2, 1]]
    values, lengths = codec.parse_examples_batch(records, {"v": "int"})["v"]
    assert values.tolist() == [0, 1, 0] and lengths.tolist() == [0, 2, 1]


def test_wire_compatible_with_the_tfrecord_package_protos():
    their = pytest.importorskip("tfrecord.example_pb2")
    ours = codec.serialize_example({"a": ([1, -2], "int"), "b": ([b"x", b""], "byte"), "c": ([math.pi], "float")})
    ex = their.Example.FromString(ours)
    assert list(ex.features.feature["a"].int64_list.value) == [1, -2]
    assert list(ex.features.feature["b"].bytes_list.value) == [b"x", b""]
    assert Example.FromString(ex.SerializeToString()).features.feature["c"].float_list.value[0] == pytest.approx(
        math.pi
    )


def test_batch_parse_byte_views_are_the_values_without_copies():
    from tfrecord_io.format.codec import _parse_examples, parse_examples_batch, serialize_example

    records = [
        serialize_example({"img": (b"\x00" * 70000, "byte"), "tags": ([b"a", b"bc"], "byte"), "n": (1, "int")}),
        memoryview(serialize_example({"img": (b"xyz", "byte"), "tags": ([], "byte"), "n": (2, "int")})),
    ]
    desc = {"img": "byte", "tags": "byte", "n": "int"}
    copies = parse_examples_batch(records, desc)
    views = parse_examples_batch(records, desc, byte_views=True)
    assert views["n"].tolist() == [[1], [2]]
    if _parse_examples is not None:  # the compiled parser gives views of the records
        assert isinstance(views["img"][0], memoryview) and views["img"][0].obj is not None
    assert [bytes(v) for v in views["img"]] == list(copies["img"]) == [b"\x00" * 70000, b"xyz"]
    assert [[bytes(t) for t in v] for v in views["tags"]] == [[b"a", b"bc"], []]
