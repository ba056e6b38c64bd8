"""Arrow in the Beam IO, on the real DirectRunner: ``ReadFromTFRecord(output="arrow")``
yields RecordBatches of one schema with every record exactly once; ``WriteToTFRecord``
takes RecordBatches; bad records fail with their place or go to the dead letters."""

from __future__ import annotations

import glob
import os

import apache_beam as beam
import pyarrow as pa
import pytest

import tfrecord_io as tfio
from tfrecord_io import arrow
from tfrecord_io.beam.beam_arrow import RecordBatchCoder
from tfrecord_io.beam.beam_io import ReadAllFromTFRecord, ReadFromTFRecord, WriteToTFRecord
from tfrecord_io.format import codec
from tfrecord_io.format.reader import read_records

from tests.beam_support import run_pipeline


def _write(path, datums, index=True):
    records = [d if isinstance(d, bytes) else codec.serialize_example(d) for d in datums]
    with tfio.RecordWriter(path, index_path=path + ".index" if index else None) as w:
        w.write_records(records)
    return path


def _datums(n, start=0):
    out = []
    for i in range(start, start + n):
        d = {"id": (i, "int"), "v": ([i / 2, -1.0], "float")}
        if i % 5:
            d["name"] = (b"n%d" % i, "byte")
        out.append(d)
    return out


@pytest.mark.parametrize("multi", [False, True])
def test_arrow_read_gives_every_record_once_in_batches_of_one_schema(tmp_path, multi):
    _write(str(tmp_path / "a.tfrecord"), _datums(400))
    _write(str(tmp_path / "b.tfrecord"), _datums(300, start=400), index=False)
    schema = pa.schema(
        [
            arrow.feature_field("id", "int", (), nullable=False),
            arrow.feature_field("v", "float", (2,)),
            arrow.feature_field("name", "bytes", ()),
        ]
    )
    out, metrics = run_pipeline(
        lambda p: {
            "b": p
            | ReadFromTFRecord(
                str(tmp_path / "*.tfrecord"),
                output="arrow",
                description=schema,
                batch_size=64,
                desired_bundle_size=3000,
            )
        },
        str(tmp_path),
        multi=multi,
    )
    batches = out["b"]
    assert all(isinstance(b, pa.RecordBatch) and b.schema == schema for b in batches)
    assert max(b.num_rows for b in batches) <= 64
    table = pa.Table.from_batches(batches)
    assert sorted(table.column("id").to_pylist()) == list(range(700))  # each record once
    rows = {r["id"]: r for r in table.to_pylist()}
    assert rows[7] == {"id": 7, "v": [3.5, -1.0], "name": b"n7"}
    assert rows[10]["name"] is None
    assert metrics[("tfrecord_io", "restrictions")] > 2  # the files were really cut into ranges


def test_arrow_read_infers_the_schema_from_the_first_file(tmp_path):
    _write(str(tmp_path / "a.tfrecord"), _datums(10))
    out, _ = run_pipeline(
        lambda p: {"b": p | ReadFromTFRecord(str(tmp_path / "a.tfrecord"), output="arrow")}, str(tmp_path)
    )
    table = pa.Table.from_batches(out["b"])
    assert table.schema.names == ["id", "name", "v"]
    assert table.schema.field("id").type == pa.list_(pa.int64())
    assert sorted(x[0] for x in table.column("id").to_pylist()) == list(range(10))


def test_arrow_read_with_an_inferred_schema_fails_on_a_feature_the_sample_lacked(tmp_path):
    """The schema comes from the first file's first records; a record in another file
    with a feature they lack fails the job naming it, dead letters or not (it is a
    sound record), instead of its values vanishing."""
    _write(str(tmp_path / "a.tfrecord"), _datums(10))
    late = _write(str(tmp_path / "b.tfrecord"), [{"id": 99, "extra": b"e"}])

    def job(on_corrupt):
        def build(p):
            read = p | ReadFromTFRecord(str(tmp_path / "*.tfrecord"), output="arrow", on_corrupt=on_corrupt)
            return {"b": read} if on_corrupt == "fail" else {"b": read.records, "dead": read.dead_letter}

        return build

    for on_corrupt in ("fail", "dead_letter"):
        with pytest.raises(Exception, match="'extra' is in this record but not in the columns") as err:
            run_pipeline(job(on_corrupt), str(tmp_path))
        assert late in str(err.value) and "byte offset 0" in str(err.value)


def test_read_all_needs_a_schema_for_arrow():
    with pytest.raises(ValueError, match="needs description="):
        beam.Pipeline() | beam.Create(["x"]) | ReadAllFromTFRecord(output="arrow")
    with pytest.raises(ValueError, match="with_metadata"):
        ReadAllFromTFRecord(output="arrow", description={"a": "int"}, with_filename=True)


def test_records_that_do_not_fit_go_to_the_dead_letters_with_their_place(tmp_path):
    path = _write(str(tmp_path / "a.tfrecord"), _datums(20) + [{"id": 1.5}, b"\x0a\x05\x0a"] + _datums(5, start=20))
    offsets = [o for o, _ in read_records(path)]
    out, metrics = run_pipeline(
        lambda p: (lambda r: {"b": r.records, "dead": r.dead_letter})(
            p | ReadFromTFRecord(path, output="arrow", description={"id": "int"}, on_corrupt="dead_letter")
        ),
        str(tmp_path),
    )
    ids = sorted(x[0] for x in pa.Table.from_batches(out["b"]).column("id").to_pylist())
    assert ids == list(range(25))
    dead = sorted(out["dead"], key=lambda d: d["start"])
    assert [(d["path"], d["start"]) for d in dead] == [(path, offsets[20]), (path, offsets[21])]
    assert "float_list" in dead[0]["reason"] and "not a valid tf.train.Example" in dead[1]["reason"]


def test_a_type_change_fails_the_read_naming_file_and_offset(tmp_path):
    path = _write(str(tmp_path / "a.tfrecord"), _datums(3) + [{"id": 2.5}])
    offset = [o for o, _ in read_records(path)][3]
    with pytest.raises(Exception, match=rf"a.tfrecord, byte offset {offset}: feature 'id' is a float_list"):
        run_pipeline(
            lambda p: {"b": p | ReadFromTFRecord(path, output="arrow", description={"id": "int"})}, str(tmp_path)
        )


def test_write_takes_record_batches(tmp_path):
    b1 = pa.record_batch({"id": pa.array([1, 2, 3]), "s": pa.array(["a", None, "c"])})
    b2 = pa.table({"id": pa.array([4]), "s": pa.array(["d"])})
    prefix = str(tmp_path / "out" / "part")
    run_pipeline(
        lambda p: {
            "r": p | beam.Create([b1, b2]) | WriteToTFRecord(prefix, file_name_suffix=".tfrecord", num_shards=2)
        },
        str(tmp_path),
    )
    shards = sorted(glob.glob(prefix + "-*.tfrecord"))
    assert len(shards) == 2 and all(os.path.exists(s + ".index") for s in shards)
    got = sorted(bytes(d) for s in shards for _, d in read_records(s))
    assert got == sorted(arrow.batch_to_records(b1) + arrow.batch_to_records(b2))
    parsed = {int(e["id"][0]): e for e in (codec.parse_example(r) for r in got)}
    assert parsed[2].keys() == {"id"} and parsed[3]["s"] == b"c"  # the null is an absent feature


def test_a_batch_without_an_example_form_writes_nothing(tmp_path):
    bad = pa.record_batch({"when": pa.array([1], pa.timestamp("s"))})
    out_dir = tmp_path / "out"
    with pytest.raises(Exception, match="column 'when': Arrow type timestamp"):
        run_pipeline(
            lambda p: {"r": p | beam.Create([bad]) | WriteToTFRecord(str(out_dir / "part"), num_shards=1)},
            str(tmp_path),
        )
    assert not glob.glob(str(out_dir / "part*"))


def test_record_batch_coder_round_trips():
    batch = pa.record_batch({"a": pa.array([[1], None]), "b": pa.array([b"x", b""])})
    coder = RecordBatchCoder()
    assert coder.decode(coder.encode(batch)).equals(batch)
    assert beam.coders.registry.get_coder(pa.RecordBatch).__class__ is RecordBatchCoder


def test_read_dataset_gives_record_batches_of_its_features(tmp_path):
    import json

    from tfrecord_io.beam.beam_dataset import ReadDataset
    from tfrecord_io.format.index import create_index
    from tfrecord_io.storage import files

    v = tmp_path / "ds" / "v1"
    (v / "train").mkdir(parents=True)
    shard = "train/d-train.tfrecord-00000-of-00001"
    _write(str(v / shard), [{"label": (i, "int"), "v": ([i, i], "float")} for i in range(6)], index=False)
    create_index(str(v / shard), str(v / shard) + ".index")
    features = {
        "label": {"kind": "int", "shape": [], "required": True},
        "v": {"kind": "float", "shape": [2], "required": True},
    }
    info = {
        "features": features,
        "splits": {"train": {"records": 6, "shards": [{"path": shard, "index": shard + ".index", "records": 6}]}},
    }
    files.write_bytes(str(v / "tfrecord_io_info.json"), json.dumps(info).encode())
    files.write_bytes(str(tmp_path / "ds" / "LATEST"), b"v1")
    out, _ = run_pipeline(
        lambda p: {"b": p | ReadDataset(str(tmp_path / "ds"), "train[:50%]", output="arrow")}, str(tmp_path)
    )
    table = pa.Table.from_batches(out["b"])
    assert table.schema.field("label").type == pa.int64()
    assert table.schema.field("v").type == pa.list_(pa.float32(), 2)
    assert sorted(table.column("label").to_pylist()) == [0, 1, 2]


def test_arrow_read_keeps_the_features_listed(tmp_path):
    """``description=[names]``, as ``to_arrow`` takes it: only those columns, in that
    order, their types from the first file; features of later records outside the list
    are not read (no failure); a name the first file lacks is an error naming it; the
    same selection as ``to_arrow`` gives."""
    _write(str(tmp_path / "a.tfrecord"), _datums(40))
    _write(str(tmp_path / "b.tfrecord"), [{"id": (99, "int"), "v": ([1.0], "float"), "extra": b"e"}])
    pattern = str(tmp_path / "*.tfrecord")
    out, _ = run_pipeline(
        lambda p: {"b": p | ReadFromTFRecord(pattern, output="arrow", description=["v", "id"], batch_size=16)},
        str(tmp_path),
    )
    table = pa.Table.from_batches(out["b"])
    assert table.schema.names == ["v", "id"]
    assert sorted(x[0] for x in table.column("id").to_pylist()) == list(range(40)) + [99]
    ours = arrow.to_arrow(sorted(glob.glob(pattern)), ["v", "id"])
    assert ours.schema == table.schema
    one, _ = run_pipeline(
        lambda p: {"b": p | ReadFromTFRecord(str(tmp_path / "a.tfrecord"), output="arrow", description="name")},
        str(tmp_path),
    )
    assert pa.Table.from_batches(one["b"]).schema.names == ["name"]
    with pytest.raises(ValueError, match=r"features \['nope'\] are not in the first 1000 records of .*a.tfrecord"):
        ReadFromTFRecord(pattern, output="arrow", description=["id", "nope"])
    with pytest.raises(ValueError, match="a list of names is not enough"):
        beam.Pipeline() | beam.Create(["x"]) | ReadAllFromTFRecord(output="arrow", description=["id"])


def test_sequence_features_left_out_of_arrow_are_named(tmp_path):
    """A dataset's SequenceExample feature lists cannot be Arrow columns of an Example
    read: leaving them out warns, naming them; asking for one by name is an error; a
    selection of context features says nothing."""
    import json
    import warnings

    from tfrecord_io.storage import files

    v = tmp_path / "ds" / "v1"
    (v / "train").mkdir(parents=True)
    shard = "train/d-train.tfrecord-00000-of-00001"
    records = [codec.serialize_sequence_example({"label": [i]}, {"frames": [[0.5, i], [1.0, 2.0]]}) for i in range(3)]
    _write(str(v / shard), records)
    features = {
        "label": {"kind": "int", "shape": [], "required": True},
        "frames": {"kind": "float", "shape": [2], "required": True, "sequence": True},
    }
    info = {"features": features, "splits": {"train": {"records": 3, "shards": [{"path": shard, "records": 3}]}}}
    files.write_bytes(str(v / "tfrecord_io_info.json"), json.dumps(info).encode())
    files.write_bytes(str(tmp_path / "ds" / "LATEST"), b"v1")
    with pytest.warns(arrow.SequenceFeaturesLeftOut, match=r"\['frames'\] are SequenceExample feature lists"):
        table = arrow.to_arrow(str(tmp_path / "ds"))
    assert table.schema.names == ["label"] and table.column("label").to_pylist() == [0, 1, 2]
    with pytest.warns(arrow.SequenceFeaturesLeftOut, match="frames"):
        arrow.schema_from_features(features)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert arrow.to_arrow(str(tmp_path / "ds"), ["label"]).column("label").to_pylist() == [0, 1, 2]
    with pytest.raises(Exception, match=r"\['frames'\] are SequenceExample feature lists"):
        arrow.to_arrow(str(tmp_path / "ds"), ["label", "frames"])
