"""``tfrecord_io.arrow``: Examples <-> Arrow, the compiled flat columns against their
upb twin, shapes, missing values, exact round trips and the errors of bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfrecord_io import arrow
from tfrecord_io.errors import ExampleCodecError, UnknownFeatureError
from tfrecord_io.format import codec
from tfrecord_io.format.writer import TFRecordWriter
from tfrecord_io.storage import files

from tests.test_speedups import wire_examples

try:
    from tfrecord_io import _speedups as S
except ImportError:  # pragma: no cover - test_speedups fails loudly for that
    S = None

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_INT64 = st.integers(-(2**63), 2**63 - 1)
_F32 = st.floats(width=32, allow_nan=False)


def _write(path, datums):
    with TFRecordWriter(str(path)) as w:
        for d in datums:
            w.write(d if isinstance(d, bytes) else codec.serialize_example(d))
    return str(path)


def _offsets(path):
    from tfrecord_io.format.reader import read_records

    return [off for off, _ in read_records(str(path))]


# ---------------------------------------------------------------- C flat mode == upb twin

_DATUM = st.fixed_dictionaries(
    {},
    optional={
        "i": st.tuples(st.lists(_INT64, max_size=4), st.just("int")),
        "f": st.tuples(st.lists(_F32, max_size=4), st.just("float")),
        "b": st.tuples(st.lists(st.binary(max_size=6), max_size=3), st.just("byte")),
        "other": st.tuples(st.lists(_INT64, max_size=2), st.just("int")),
    },
)


def _same_columns(a, b):
    return len(a) == len(b) and all(
        len(x) == len(y) and all(bytes(p) == bytes(q) for p, q in zip(x, y)) for x, y in zip(a, b)
    )


@SETTINGS
@given(datums=st.lists(_DATUM, max_size=8))
def test_compiled_flat_columns_equal_the_upb_twin(datums):
    assert S is not None, "the compiled core is not built"
    records = [codec.serialize_example(d) for d in datums]
    keys, kinds = ["i", "f", "b"], [codec.INT64, codec.FLOAT, codec.BYTES]
    fast = S.parse_examples(records, [k.encode() for k in keys], [3, 2, 1], 2)
    assert fast is not None
    twin = arrow.parse_columns_py(records, keys, kinds)
    assert _same_columns(fast, twin)
    counts = np.frombuffer(twin[0][1], dtype=np.int64)
    assert counts.tolist() == [len(d["i"][0]) if "i" in d else -1 for d in datums]


@SETTINGS
@given(examples=st.lists(wire_examples(), min_size=1, max_size=5))
def test_compiled_flat_columns_equal_the_twin_on_unusual_encodings(examples):
    """Packed and unpacked lists, repeated map entries, Example.features in pieces, keys
    nobody asked for: the flat mode gives what upb gives, or leaves the batch to it."""
    description = examples[0][1]
    records = [data for data, desc in examples if desc == description] or [examples[0][0]]
    keys = list(description)
    kinds = [codec.TYPE_NAMES[t] for t in description.values()]
    fast = S.parse_examples(records, [k.encode() for k in keys], [codec._KIND_CODES[k] for k in kinds], 2)
    assert fast is not None
    assert _same_columns(fast, arrow.parse_columns_py(records, keys, kinds))


def test_without_the_compiled_core_the_table_is_the_same(tmp_path, monkeypatch):
    datums = [{"a": (i, "int"), "b": (b"x" * i, "byte")} if i % 3 else {"a": (i, "int")} for i in range(50)]
    path = _write(tmp_path / "x.tfrecord", datums)
    description = {"a": ("int", ()), "b": "bytes"}
    fast = arrow.to_arrow(path, description)
    monkeypatch.setattr(arrow, "_parse_examples", None)
    assert arrow.to_arrow(path, description).equals(fast)


def test_compiled_flat_mode_leaves_another_wire_type_to_upb():
    records = [codec.serialize_example({"a": 1}), codec.serialize_example({"a": 1.5})]
    assert S.parse_examples(records, [b"a"], [3], 2) is None
    with pytest.raises(ExampleCodecError, match="'a' is a float_list in this record"):
        arrow.parse_columns(records, ["a"], [codec.INT64], [("x.tfrecord", 0), ("x.tfrecord", 17)])


@SETTINGS
@given(datums=st.lists(_DATUM, max_size=8))
def test_strict_flat_mode_refuses_exactly_the_batches_with_a_key_outside_the_columns(datums):
    """Mode 3 gives mode 2's columns, or None when some record has a key that is not a
    column; the twin raises UnknownFeatureError naming that key for the same batches."""
    records = [codec.serialize_example(d) for d in datums]
    keys, kinds = ["i", "f", "b"], [codec.INT64, codec.FLOAT, codec.BYTES]
    strict = S.parse_examples(records, [k.encode() for k in keys], [3, 2, 1], 3)
    outside = any("other" in d for d in datums)
    if outside:
        assert strict is None
        with pytest.raises(UnknownFeatureError) as err:
            arrow.parse_columns_py(records, keys, kinds, strict=True)
        assert err.value.key == "other"
    else:
        assert strict is not None
        assert _same_columns(strict, arrow.parse_columns_py(records, keys, kinds, strict=True))
        assert _same_columns(strict, S.parse_examples(records, [k.encode() for k in keys], [3, 2, 1], 2))


# ---------------------------------------------------------------- Examples -> Arrow


def test_to_arrow_columns_types_and_values(tmp_path):
    datums = [
        {"image": (b"\x00jpeg\x00", "byte"), "label": (3, "int"), "scores": ([0.5, 1.5], "float")},
        {"image": (b"", "byte"), "label": (-1, "int"), "scores": ([], "float"), "tags": ([b"a", b"b"], "byte")},
    ]
    path = _write(tmp_path / "x.tfrecord", datums)
    table = arrow.to_arrow(path)
    assert table.schema.names == ["image", "label", "scores", "tags"]  # inferred, sorted keys
    assert table.schema.field("label").type == pa.list_(pa.int64())
    assert table.schema.field("scores").type == pa.list_(pa.float32())
    assert table.schema.field("image").type == pa.list_(pa.binary())
    assert table.column("image").to_pylist() == [[b"\x00jpeg\x00"], [b""]]
    assert table.column("label").to_pylist() == [[3], [-1]]
    assert table.column("scores").to_pylist() == [[0.5, 1.5], []]  # present, empty: not null
    assert table.column("tags").to_pylist() == [None, [b"a", b"b"]]  # absent: null


def test_shapes_give_scalars_and_fixed_size_lists(tmp_path):
    datums = [
        {"label": (i, "int"), "xy": ([i, i + 0.5, 0, 1, 2, 3], "float"), "t": (b"t%d" % i, "byte")} for i in range(5)
    ]
    path = _write(tmp_path / "x.tfrecord", datums)
    features = {
        "label": {"kind": "int", "shape": [], "required": True},
        "xy": {"kind": "float", "shape": [2, 3], "required": True},
        "t": {"kind": "bytes", "shape": None, "required": False},
        "clip": {"kind": "float", "shape": [4], "sequence": True},  # not an Example feature
    }
    with pytest.warns(arrow.SequenceFeaturesLeftOut, match=r"\['clip'\]"):  # left out, and said so
        table = arrow.to_arrow(path, features, batch_size=2)
    assert table.schema.names == ["label", "xy", "t"]
    assert table.schema.field("label").type == pa.int64() and not table.schema.field("label").nullable
    xy = table.schema.field("xy")
    assert xy.type == pa.list_(pa.float32(), 6)
    assert json.loads(xy.metadata[arrow.META_SHAPE]) == [2, 3]
    assert table.column("label").to_pylist() == list(range(5))
    assert table.column("xy").to_pylist()[4] == [4, 4.5, 0, 1, 2, 3]
    assert table.column("t").to_pylist() == [[b"t%d" % i] for i in range(5)]


def test_nulls_in_scalar_and_fixed_size_columns_keep_their_rows(tmp_path):
    datums = [{"a": (1, "int"), "v": ([1, 2], "float")}, {}, {"a": (3, "int"), "v": ([5, 6], "float")}]
    path = _write(tmp_path / "x.tfrecord", datums)
    schema = pa.schema([arrow.feature_field("a", "int", ()), arrow.feature_field("v", "float", (2,))])
    table = arrow.to_arrow(path, schema)
    assert table.column("a").to_pylist() == [1, None, 3]
    assert table.column("v").to_pylist() == [[1.0, 2.0], None, [5.0, 6.0]]
    assert arrow.batch_to_records(table) == [codec.serialize_example(d) for d in datums]


def test_table_equals_per_record_parse_across_batches(tmp_path):
    rng = np.random.default_rng(1)
    datums = []
    for i in range(300):
        d = {"id": (i, "int"), "emb": (rng.random(int(rng.integers(0, 5))).astype(np.float32).tolist(), "float")}
        if i % 7:
            d["blob"] = (rng.bytes(int(rng.integers(0, 40))), "byte")
        datums.append(d)
    path = _write(tmp_path / "x.tfrecord", datums)
    batches = list(arrow.to_arrow_batches(path, {"id": "int", "emb": "float", "blob": "byte"}, batch_size=64))
    assert [b.num_rows for b in batches] == [64, 64, 64, 64, 44]
    table = pa.Table.from_batches(batches)
    for i, record in enumerate(codec.parse_example(r) for r in _payloads(path)):
        assert table.column("id")[i].as_py() == [int(record["id"][0])]
        assert table.column("emb")[i].as_py() == record["emb"].tolist()
        blob = table.column("blob")[i].as_py()
        assert blob == (None if "blob" not in record else [record["blob"]])


def _payloads(path):
    from tfrecord_io.format.reader import read_records

    return [bytes(d) for _, d in read_records(str(path))]


def test_byte_limit_cuts_batches(tmp_path):
    path = _write(tmp_path / "x.tfrecord", [{"b": (b"x" * 1000, "byte")}] * 10)
    sizes = [b.num_rows for b in arrow.to_arrow_batches(path, {"b": "byte"}, max_batch_bytes=3000)]
    assert sizes == [3, 3, 3, 1]


def test_a_list_of_keys_infers_their_types(tmp_path):
    path = _write(tmp_path / "x.tfrecord", [{"a": 1, "b": 2.0, "c": b"x"}])
    table = arrow.to_arrow(path, ["c", "a"])
    assert table.schema.names == ["c", "a"]
    assert table.column("a").type == pa.list_(pa.int64())
    with pytest.raises(ExampleCodecError, match=r"\['zz'\] are not in the records"):
        arrow.to_arrow(path, ["zz"])


def test_patterns_skip_index_sidecars_and_compressed_files_read(tmp_path):
    from tfrecord_io.format.index import create_index

    p1 = _write(tmp_path / "part-0.tfrecord", [{"a": 1}, {"a": 2}])
    create_index(p1, p1 + ".index")
    with TFRecordWriter(str(tmp_path / "part-1.tfrecord.gz"), compression_type="gzip") as w:
        w.write(codec.serialize_example({"a": 3}))
    table = arrow.to_arrow(str(tmp_path / "part-*"), {"a": "int"})
    assert table.column("a").to_pylist() == [[1], [2], [3]]


def test_a_dataset_version_gives_its_schema_and_split(tmp_path):
    root = tmp_path / "ds"
    v = root / "v1"
    (v / "train").mkdir(parents=True)
    (v / "test").mkdir()
    _write(v / "train" / "d-train.tfrecord-00000-of-00001", [{"label": (i, "int")} for i in range(4)])
    _write(v / "test" / "d-test.tfrecord-00000-of-00001", [{"label": (9, "int")}])
    from tfrecord_io.format.index import create_index

    for split in ("train", "test"):
        shard = f"{split}/d-{split}.tfrecord-00000-of-00001"
        create_index(str(v / shard), str(v / shard) + ".index")
    splits = {
        s: {
            "records": n,
            "shards": [
                {
                    "path": f"{s}/d-{s}.tfrecord-00000-of-00001",
                    "index": f"{s}/d-{s}.tfrecord-00000-of-00001.index",
                    "records": n,
                }
            ],
        }
        for s, n in (("train", 4), ("test", 1))
    }
    info = {"features": {"label": {"kind": "int", "shape": [], "required": True}}, "splits": splits, "compression": ""}
    files.write_bytes(str(v / "dataset_info.json"), json.dumps(info).encode())
    files.write_bytes(str(root / "LATEST"), b"v1")
    table = arrow.to_arrow(str(root), split="train[:50%]")
    assert table.schema.field("label").type == pa.int64()
    assert table.column("label").to_pylist() == [0, 1]
    assert sorted(arrow.to_arrow(str(root)).column("label").to_pylist()) == [0, 1, 2, 3, 9]


@pytest.mark.parametrize("compiled", [True, False])
def test_to_arrow_widens_for_a_feature_first_seen_in_a_later_batch(tmp_path, monkeypatch, compiled):
    """An inferred schema comes from the first batch; a feature only later records have
    must still be in the table (null before it), never dropped."""
    if not compiled:
        monkeypatch.setattr(arrow, "_parse_examples", None)
    datums = [{"a": (i, "int")} for i in range(10)] + [{"a": (10, "int"), "late": (b"x", "byte")}]
    datums += [{"a": (11, "int"), "later": ([0.5, 1.5], "float")}]
    path = _write(tmp_path / "x.tfrecord", datums)
    table = arrow.to_arrow(path, batch_size=4)
    assert table.schema.names == ["a", "late", "later"]
    assert table.num_rows == 12
    assert table.column("late").to_pylist() == [None] * 10 + [[b"x"], None]
    assert table.column("later").to_pylist() == [None] * 11 + [[0.5, 1.5]]
    assert table.column("a").to_pylist() == [[i] for i in range(12)]


def test_a_batch_stream_stops_at_a_feature_its_inferred_schema_lacks(tmp_path):
    datums = [{"a": (i, "int")} for i in range(6)] + [{"a": (6, "int"), "late": (1, "int")}]
    path = _write(tmp_path / "x.tfrecord", datums)
    stream = arrow.to_arrow_batches(path, batch_size=4)
    first = next(stream)
    assert first.schema.names == ["a"] and first.num_rows == 4
    with pytest.raises(UnknownFeatureError, match="'late' is in this record but not in the columns") as err:
        next(stream)
    assert (err.value.path, err.value.offset, err.value.key) == (path, _offsets(path)[6], "late")
    # a description is a selection: other features are not read, and nothing fails
    got = pa.Table.from_batches(list(arrow.to_arrow_batches(path, {"a": "int"}, batch_size=4)))
    assert got.schema.names == ["a"] and got.num_rows == 7


def test_widening_still_refuses_a_type_change_in_a_later_batch(tmp_path):
    datums = [{"a": (i, "int")} for i in range(4)] + [{"a": (1, "int"), "b": (1, "int")}, {"a": (0.5, "float")}]
    path = _write(tmp_path / "x.tfrecord", datums)
    with pytest.raises(ExampleCodecError, match="must not change") as err:
        arrow.to_arrow(path, batch_size=4)
    assert err.value.offset == _offsets(path)[5]


def test_unknown_feature_error_keeps_its_key_through_pickling():
    import pickle

    err = pickle.loads(pickle.dumps(UnknownFeatureError("k", "why", "f.tfrecord", 12)))
    assert (err.key, err.reason, err.path, err.offset) == ("k", "why", "f.tfrecord", 12)
    assert str(err) == "f.tfrecord, byte offset 12: why"


# ---------------------------------------------------------------- bad input


def test_a_type_change_names_the_file_and_offset(tmp_path):
    path = _write(tmp_path / "x.tfrecord", [{"a": 1}, {"a": 2}, {"a": 2.5}])
    offsets = _offsets(path)
    with pytest.raises(ExampleCodecError) as err:
        arrow.to_arrow(path, {"a": "int"})
    assert err.value.path == path and err.value.offset == offsets[2]
    with pytest.raises(ExampleCodecError, match="must not change") as err:
        arrow.to_arrow(path)  # inferred: the sample itself disagrees
    assert err.value.offset == offsets[2]


def test_a_record_that_is_not_an_example_names_its_offset(tmp_path):
    path = _write(tmp_path / "x.tfrecord", [{"a": 1}, b"\x0a\x05\x0a\x03\x0a\x01"])
    with pytest.raises(ExampleCodecError, match="not a valid tf.train.Example") as err:
        arrow.to_arrow(path, {"a": "int"})
    assert (err.value.path, err.value.offset) == (path, _offsets(path)[1])


def test_values_that_do_not_fit_the_shape_name_the_record(tmp_path):
    path = _write(tmp_path / "x.tfrecord", [{"a": 1}, {"a": [1, 2]}])
    with pytest.raises(ExampleCodecError, match="2 values in this record but its column holds one value") as err:
        arrow.to_arrow(path, {"a": ("int", ())})
    assert err.value.offset == _offsets(path)[1]
    with pytest.raises(ExampleCodecError, match="missing from this record") as err:
        arrow.to_arrow(_write(tmp_path / "y.tfrecord", [{"a": 1}, {"b": 1}]), {"a": {"kind": "int", "shape": []}})
    assert err.value.offset == _offsets(tmp_path / "y.tfrecord")[1]


def test_a_path_that_does_not_exist_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        arrow.to_arrow(str(tmp_path / "none-*.tfrecord"))


# ---------------------------------------------------------------- Arrow -> Examples


@SETTINGS
@given(datums=st.lists(_DATUM, min_size=1, max_size=8))
def test_examples_arrow_examples_is_exact(datums):
    records = [codec.serialize_example(d) for d in datums]
    schema = pa.schema(
        [arrow.feature_field("i", "int"), arrow.feature_field("f", "float"), arrow.feature_field("b", "bytes")]
    )
    batch = arrow.records_to_batch(records, schema)
    expected = [codec.serialize_example({k: v for k, v in d.items() if k != "other"}) for d in datums]
    assert arrow.batch_to_records(batch) == expected  # same bytes: values, types, missing, empty lists


def test_arrow_types_with_an_example_equivalent():
    table = pa.table(
        {
            "i8": pa.array([1, -2], pa.int8()),
            "u32": pa.array([4000000000, 0], pa.uint32()),
            "flag": pa.array([True, False]),
            "f64": pa.array([0.1, None], pa.float64()),
            "s": pa.array(["é", "b"]),
            "fsb": pa.array([b"ab", b"cd"], pa.binary(2)),
            "cat": pa.array(["x", "y"]).dictionary_encode(),
            "ls": pa.array([[1, 2], []], pa.large_list(pa.int16())),
            "fs": pa.array([[1.0, 2.0], [3.0, 4.0]], pa.list_(pa.float32(), 2)),
        }
    )
    out = [codec.parse_example(r) for r in arrow.batch_to_records(table)]
    assert out[0]["i8"].tolist() == [1] and out[1]["i8"].tolist() == [-2]
    assert out[0]["u32"].tolist() == [4000000000]
    assert out[0]["flag"].tolist() == [1]
    assert math.isclose(out[0]["f64"][0], 0.1, rel_tol=1e-7) and "f64" not in out[1]
    assert out[0]["s"] == "é".encode() and out[1]["fsb"] == b"cd" and out[1]["cat"] == b"y"
    assert out[0]["ls"].tolist() == [1, 2] and out[1]["ls"].dtype == np.int64 and out[1]["ls"].size == 0
    assert out[1]["fs"].tolist() == [3.0, 4.0]


@pytest.mark.parametrize(
    "column, message",
    [
        (pa.array([{"x": 1}]), "struct<x: int64> has no Example equivalent"),
        (pa.array([[[1]]]), "a list of lists"),
        (pa.array([1], pa.timestamp("s")), "timestamp"),
        (pa.array([[1, None]]), "a null inside a list"),
        (pa.array([2**64 - 1], pa.uint64()), "above the int64 range"),
    ],
)
def test_arrow_columns_without_an_example_equivalent_name_the_column(column, message):
    with pytest.raises(ExampleCodecError, match=message) as err:
        arrow.batch_to_records(pa.table({"col": column}))
    assert "'col'" in str(err.value)
