"""``tfrecord-io convert`` on the DirectRunner with a real built dataset: TFRecord ->
Parquet (split as a column or folders) -> TFRecord keeps every Example; loose files get
an inferred schema; bad input fails before anything is written, naming its place."""

from __future__ import annotations

import glob
import json
import os
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tfrecord_io
from tfrecord_io import arrow
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.format import codec
from tfrecord_io.format.reader import read_records
from tfrecord_io.pipelines.convert_job import ConvertError, run_convert

from tests.pipeline_support import TWO_WORKERS, options, run_cli


@pytest.fixture(scope="module")
def built(demo_build):
    build = demo_build(18)
    return build.root, build.version_dir


def _records_by_split(version_dir):
    info = dataset_writer.load_info(version_dir)
    out = {}
    for split, entry in info["splits"].items():
        out[split] = Counter(
            bytes(r)
            for s in entry["shards"]
            for r in tfrecord_io.tfrecord_iterator(os.path.join(version_dir, s["path"]))
        )
    return out


def _tfrecords(pattern):
    return Counter(bytes(d) for p in sorted(glob.glob(pattern)) if not p.endswith(".index") for _, d in read_records(p))


def test_dataset_to_parquet_and_back_keeps_every_example(built, tmp_path):
    root, version_dir = built
    originals = _records_by_split(version_dir)
    info = dataset_writer.load_info(version_dir)
    pq_dir = str(tmp_path / "pq")
    summary = run_convert([root], "parquet", pq_dir, options(), num_shards=2)
    assert summary.records == 18 and len(summary.files) == 2
    table = pq.read_table(pq_dir)  # the whole directory, as pandas or DuckDB would open it
    assert table.num_rows == 18
    assert Counter(table.column("split").to_pylist()) == {s: e["records"] for s, e in info["splits"].items()}
    schema = pq.read_schema(summary.files[0])
    assert json.loads(schema.metadata[b"tfrecord_io.dataset.splits"]) == sorted(info["splits"])
    assert schema.field("label").type == pa.int64()  # shape () in the dataset's features: a scalar
    assert schema.field("image/encoded").type == pa.binary()
    back = str(tmp_path / "back")
    summary = run_convert(glob.glob(os.path.join(pq_dir, "*.parquet")), "tfrecord", back, options(), num_shards=1)
    assert summary.records == 18
    for split, records in originals.items():
        shards = glob.glob(os.path.join(back, split, "data-*.tfrecord"))
        assert shards and all(os.path.exists(s + ".index") for s in shards)
        assert _tfrecords(os.path.join(back, split, "data-*.tfrecord")) == records  # same bytes, per split


def test_split_as_folder_and_a_selection(built, tmp_path):
    root, version_dir = built
    info = dataset_writer.load_info(version_dir)
    out = str(tmp_path / "pq")
    run_convert([root], "parquet", out, options(), split="train[:50%]", split_as="folder")
    files = glob.glob(os.path.join(out, "train", "data-*.parquet"))
    assert files and not glob.glob(os.path.join(out, "data-*"))
    table = pq.read_table(files[0]) if len(files) == 1 else pa.concat_tables(pq.read_table(f) for f in files)
    assert "split" not in table.column_names
    half = len(list(tfrecord_io.iter_dataset(root, "train[:50%]", output="bytes")))
    assert table.num_rows == half and half < info["splits"]["train"]["records"]


def _write(path, datums):
    with tfrecord_io.TFRecordWriter(path) as w:
        for d in datums:
            w.write(d if isinstance(d, bytes) else codec.serialize_example(d))
    return path


def test_loose_files_get_an_inferred_schema_and_round_trip(tmp_path):
    a = [{"id": (i, "int"), "tags": ([b"x"] * (i % 3), "byte")} for i in range(30)]
    b = [{"id": (i, "int"), "score": ([i / 4], "float")} for i in range(30, 40)]  # keys the first file lacks
    os.makedirs(tmp_path / "in")
    _write(str(tmp_path / "in" / "a.tfrecord"), a)
    _write(str(tmp_path / "in" / "b.tfrecord"), b)
    pq_dir = str(tmp_path / "pq")
    run_convert([str(tmp_path / "in" / "*.tfrecord")], "parquet", pq_dir, options())
    table = pq.read_table(pq_dir)
    assert table.schema.names == ["id", "score", "tags"]  # every key of every record
    assert table.schema.field("score").type == pa.list_(pa.float32())
    back = str(tmp_path / "back")
    run_convert([os.path.join(pq_dir, "*.parquet")], "tfrecord", back, options())
    expected = Counter(codec.serialize_example(d) for d in a + b)
    assert _tfrecords(os.path.join(back, "data-*.tfrecord")) == expected


def test_a_type_change_in_loose_files_fails_naming_its_place(tmp_path):
    os.makedirs(tmp_path / "in")
    path = _write(str(tmp_path / "in" / "a.tfrecord"), [{"v": 1}] * 3 + [{"v": 0.5}])
    offset = [o for o, _ in read_records(path)][3]
    with pytest.raises(Exception, match=rf"a.tfrecord, byte offset {offset}: feature 'v'") as err:
        run_convert([path], "parquet", str(tmp_path / "pq"), options())
    assert "must not change" in str(err.value)
    assert not glob.glob(str(tmp_path / "pq" / "*.parquet"))


def test_a_type_change_across_batches_names_both_places(tmp_path):
    os.makedirs(tmp_path / "in")
    path = _write(str(tmp_path / "in" / "a.tfrecord"), [{"v": 1}] * 4 + [{"v": 0.5}] * 2)
    offsets = [o for o, _ in read_records(path)]
    with pytest.raises(Exception, match="must not change") as err:
        run_convert([path], "parquet", str(tmp_path / "pq"), options(), batch_size=2)
    assert f"byte offset {offsets[0]}" in str(err.value) and f"byte offset {offsets[4]}" in str(err.value)
    assert not glob.glob(str(tmp_path / "pq" / "*.parquet"))


def test_parquet_without_an_example_form_is_refused_before_writing(tmp_path):
    os.makedirs(tmp_path / "pq")
    pq.write_table(pa.table({"id": [1], "where": pa.array([{"x": 1.0}])}), str(tmp_path / "pq" / "a.parquet"))
    with pytest.raises(ConvertError, match="column 'where': Arrow type struct"):
        run_convert([str(tmp_path / "pq" / "*.parquet")], "tfrecord", str(tmp_path / "out"), options())
    assert not os.path.exists(tmp_path / "out")
    with pytest.raises(ConvertError, match="no Parquet files match"):
        run_convert([str(tmp_path / "none-*.parquet")], "tfrecord", str(tmp_path / "out"), options())


def test_cli_convert_and_its_usage_errors(tmp_path):
    os.makedirs(tmp_path / "in")
    _write(str(tmp_path / "in" / "a.tfrecord"), [{"id": i} for i in range(5)])
    ok = run_cli("convert", str(tmp_path / "in" / "a.tfrecord"), "--to", "parquet", "--output", str(tmp_path / "pq"))
    assert ok.returncode == 0, ok.stderr
    assert "convert: 5 records -> 1 parquet files" in ok.stdout
    assert pq.read_table(str(tmp_path / "pq")).column("id").to_pylist() == [[i] for i in range(5)]
    bad = run_cli("convert", str(tmp_path / "missing-*.tfrecord"), "--to", "parquet", "--output", str(tmp_path / "o"))
    assert bad.returncode == 2 and "no TFRecord files match" in bad.stderr


def test_examples_are_what_arrow_read_gives(tmp_path):
    """Parquet written by convert reads back through tfrecord_io.arrow's own path."""
    os.makedirs(tmp_path / "in")
    path = _write(str(tmp_path / "in" / "a.tfrecord"), [{"id": i, "b": b"%d" % i} for i in range(7)])
    run_convert([path], "parquet", str(tmp_path / "pq"), options())
    assert pq.read_table(str(tmp_path / "pq")).equals(arrow.to_arrow(path).replace_schema_metadata(None))


def test_record_that_is_not_an_example_names_its_offset(tmp_path):
    os.makedirs(tmp_path / "in")
    path = _write(str(tmp_path / "in" / "a.tfrecord"), [{"id": 1}, b"\x0a\x05\x0a"])
    offset = [o for o, _ in read_records(path)][1]
    with pytest.raises(Exception, match=rf"byte offset {offset}: record is not a valid tf.train.Example"):
        run_convert([path], "parquet", str(tmp_path / "pq"), options())


HF_READ = r"""
import json, sys
from datasets import load_dataset
ds = load_dataset("parquet", data_files=sys.argv[1:], split="train")
features = {k: str(v) for k, v in ds.features.items()}
print(json.dumps({"rows": ds.num_rows, "features": features, "labels": list(ds["label"]),
                  "splits": list(ds["split"]), "first_image": len(ds[0]["image/encoded"])}))
"""


HF_DEFAULT_PYTHON = os.path.expanduser("~/.cache/tfrecord-io/hf-venv/bin/python")


@pytest.mark.huggingface
def test_hugging_face_datasets_opens_the_parquet(built, tmp_path):
    """In its own interpreter (scripts/setup-hf-env): datasets cannot join the pinned lane
    (4.x and 5.x need pyarrow >= 21, Beam 2.62 caps pyarrow below 17; 3.x caps fsspec
    below the pinned one). Skips without one, unless TFRECORD_IO_REQUIRE_HF=1 (CI)."""
    import subprocess

    py = os.environ.get("TFRECORD_IO_HF_PYTHON") or HF_DEFAULT_PYTHON
    if not os.access(py, os.X_OK):
        msg = f"no Hugging Face datasets venv at {py}; run scripts/setup-hf-env or set TFRECORD_IO_HF_PYTHON"
        if os.environ.get("TFRECORD_IO_REQUIRE_HF") == "1":
            pytest.fail("TFRECORD_IO_REQUIRE_HF=1 but " + msg)
        pytest.skip(msg)
    root, _ = built
    summary = run_convert([root], "parquet", str(tmp_path / "pq"), options())
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}  # no cache in ~, no network
    proc = subprocess.run([py, "-c", HF_READ, *summary.files], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    table = pq.read_table(str(tmp_path / "pq"))
    assert got["rows"] == table.num_rows == 18
    assert sorted(got["labels"]) == sorted(table.column("label").to_pylist())
    assert Counter(got["splits"]) == Counter(table.column("split").to_pylist())
    assert "int64" in got["features"]["label"] and "binary" in got["features"]["image/encoded"]
    assert got["first_image"] > 0


def test_convert_on_s3_both_ways(s3_server, s3_bucket, tmp_path):
    """A real S3 server (versitygw): TFRecord on S3 -> Parquet on S3 -> TFRecord on S3."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.format.reader import read_records as read_remote
    from tfrecord_io.storage import files

    from tests.pipeline_support import IN_PROCESS

    datums = [{"id": (i, "int"), "v": ([i * 0.5], "float")} for i in range(25)]
    local = _write(str(tmp_path / "a.tfrecord"), datums)
    opts = PipelineOptions([*IN_PROCESS, *s3_server.pipeline_args()])
    FileSystems.set_options(opts)
    try:
        files.write_bytes(s3_bucket + "/in/a.tfrecord", open(local, "rb").read())
        run_convert([s3_bucket + "/in/a.tfrecord"], "parquet", s3_bucket + "/pq", opts)
        parquet = files.glob(s3_bucket + "/pq/data-*.parquet")
        assert parquet
        summary = run_convert([s3_bucket + "/pq"], "tfrecord", s3_bucket + "/back", opts)  # a folder: its *.parquet
        assert summary.records == 25
        got = Counter(bytes(d) for p in summary.files for _, d in read_remote(p))
        assert got == Counter(codec.serialize_example(d) for d in datums)
        assert all(files.exists(p + ".index") for p in summary.files)
    finally:
        FileSystems.set_options(PipelineOptions([]))


def test_a_value_without_an_example_form_names_the_parquet_file(tmp_path):
    os.makedirs(tmp_path / "pq")
    path = str(tmp_path / "pq" / "a.parquet")
    pq.write_table(pa.table({"big": pa.array([1, 2**64 - 1], pa.uint64())}), path)
    with pytest.raises(
        Exception, match=r"a.parquet: a row group: row 1: .*above the int64 range|a.parquet.*int64 range"
    ):
        run_convert([path], "tfrecord", str(tmp_path / "out"), options())
    # nothing half-written: no shard, and no temporary folder of the sink (.tfrecord-io-temp-*)
    assert not os.path.exists(tmp_path / "out") or _files_under(str(tmp_path / "out")) == []


def _files_under(path):
    """Every file and folder under ``path`` (folders with a trailing /: an empty
    beam-temp-* or .tfrecord-io-temp-* folder is litter too)."""
    out = []
    for d, dirs, names in os.walk(path):
        out += [os.path.relpath(os.path.join(d, n), path) + "/" for n in dirs]
        out += [os.path.relpath(os.path.join(d, n), path) for n in names]
    return sorted(out)


def test_split_as_folder_round_trips_every_split(built, tmp_path):
    """dataset -> Parquet with --split-as folder -> TFRecord: each split's Parquet folder
    comes back as that split's shards, every record byte for byte (before, the splits
    were merged into OUTPUT/data-*)."""
    root, version_dir = built
    originals = _records_by_split(version_dir)
    assert len(originals) >= 2
    pq_dir = str(tmp_path / "pq")
    run_convert([root], "parquet", pq_dir, options(), split_as="folder", num_shards=1)
    assert sorted(os.listdir(pq_dir)) == sorted(originals)
    back = str(tmp_path / "back")
    summary = run_convert([os.path.join(pq_dir, "*", "*.parquet")], "tfrecord", back, options(), num_shards=1)
    assert summary.records == sum(sum(c.values()) for c in originals.values())
    assert not glob.glob(os.path.join(back, "data-*"))
    for split, records in originals.items():
        assert _tfrecords(os.path.join(back, split, "data-*.tfrecord")) == records, split
    # one split's folder alone: that split only
    one = str(tmp_path / "one")
    split = sorted(originals)[0]
    run_convert([os.path.join(pq_dir, split, "*.parquet")], "tfrecord", one, options())
    assert os.listdir(one) == [split]
    assert _tfrecords(os.path.join(one, split, "data-*.tfrecord")) == originals[split]
    # a file out of its split folder: its split is unknown, refused before anything is written
    stray = str(tmp_path / "stray")
    os.makedirs(stray)
    moved = os.path.join(stray, "data.parquet")
    os.rename(glob.glob(os.path.join(pq_dir, split, "*.parquet"))[0], moved)
    with pytest.raises(ConvertError, match="not in a folder named after one of them"):
        run_convert([moved], "tfrecord", str(tmp_path / "none"), options())
    assert not os.path.exists(tmp_path / "none")


def test_a_folder_of_parquet_is_its_parquet_files(built, tmp_path):
    """``convert FOLDER --to tfrecord`` (it said "not a readable Parquet file ([Errno 21] Is
    a directory)"): every *.parquet under the folder, sub-folders too, in path order,
    leaving out what pyarrow, Spark and HF leave out (names starting with '.' or '_')."""
    from tfrecord_io.pipelines.convert_job import parquet_files_in

    root, version_dir = built
    originals = _records_by_split(version_dir)
    pq_dir = str(tmp_path / "pq")
    run_convert([root], "parquet", pq_dir, options(), split_as="folder", num_shards=2)
    # what readers of a Parquet folder skip: unreadable here, so reading one would fail
    for litter in ("_SUCCESS", "_common_metadata.parquet", ".part.parquet", "_tmp/x.parquet", "notes.txt"):
        os.makedirs(os.path.dirname(os.path.join(pq_dir, litter)), exist_ok=True)
        with open(os.path.join(pq_dir, litter), "wb") as f:
            f.write(b"not parquet")
    listed = parquet_files_in(pq_dir + "/")
    shards = sorted(p for split in originals for p in glob.glob(os.path.join(pq_dir, split, "*.parquet")))
    assert listed == shards and len(listed) == 2 * len(originals)
    back = str(tmp_path / "back")
    summary = run_convert([pq_dir], "tfrecord", back, options(), num_shards=1)
    assert summary.records == sum(sum(c.values()) for c in originals.values())
    for split, records in originals.items():
        assert _tfrecords(os.path.join(back, split, "data-*.tfrecord")) == records, split
    empty = tmp_path / "empty"
    os.makedirs(empty / "_logs")
    with pytest.raises(ConvertError, match="no Parquet files"):
        run_convert([str(empty)], "tfrecord", str(tmp_path / "none"), options())


def test_an_output_with_converted_files_is_refused(tmp_path):
    os.makedirs(tmp_path / "in")
    path = _write(str(tmp_path / "in" / "a.tfrecord"), [{"id": i} for i in range(5)])
    out = str(tmp_path / "pq")
    run_convert([path], "parquet", out, options())
    before = _files_under(out)
    with pytest.raises(ConvertError, match="already holds converted files"):
        run_convert([path], "parquet", out, options(), num_shards=2)
    assert _files_under(out) == before


def _dataset_with_a_bad_record(built, tmp_path):
    """A copy of the built dataset whose first shard's second record is not an Example
    (its frame and index whole: the reader hands it on, the Arrow conversion fails)."""
    import shutil

    from tfrecord_io.format.index import create_index

    root, _ = built
    copy = str(tmp_path / "bad-ds")
    shutil.copytree(root, copy)
    version_dir = os.path.join(copy, "v1")
    info = dataset_writer.load_info(version_dir)
    split = max(info["splits"], key=lambda s: info["splits"][s]["records"])
    shard = os.path.join(version_dir, info["splits"][split]["shards"][0]["path"])
    records = [bytes(d) for _, d in read_records(shard)]
    records[1] = b"\x0a\x05\x0a"
    with tfrecord_io.TFRecordWriter(shard) as w:
        for r in records:
            w.write(r)
    create_index(shard, shard + ".index")
    return copy, shard


@pytest.mark.parametrize("split_as", ["column", "folder"])
def test_a_bad_record_in_a_dataset_leaves_nothing_in_the_output(built, tmp_path, split_as):
    """The bad record fails the job inside the Parquet write: Beam's beam-temp-* folders,
    and the finished shards of other splits (folder layout), are removed."""
    copy, shard = _dataset_with_a_bad_record(built, tmp_path)
    out = tmp_path / "pq"
    os.makedirs(out)
    (out / "README").write_text("the user's own file\n")
    with pytest.raises(Exception, match="record is not a valid tf.train.Example"):
        run_convert([copy], "parquet", str(out), options(), split_as=split_as, num_shards=2)
    assert _files_under(str(out)) == ["README"]


def _parquet_with_a_bad_row_last(directory):
    """Eight good Parquet files and one whose last row has no Example form (a uint64
    above the int64 range): with --num-shards 0 the sink writes bundles of the good
    rows into its temporary folder before the bad row fails the job."""
    os.makedirs(directory)
    for i in range(8):
        good = pa.table({"big": pa.array(list(range(5000)), pa.uint64())})
        pq.write_table(good, os.path.join(directory, f"a{i}.parquet"), row_group_size=500)
    bad = pa.table({"big": pa.array([1] * 5000 + [2**64 - 1], pa.uint64())})
    pq.write_table(bad, os.path.join(directory, "z.parquet"), row_group_size=500)
    return os.path.join(directory, "*.parquet")


def test_a_failed_convert_in_the_cli_cleans_up_and_says_so(tmp_path):
    """A Parquet row without an Example form fails the TFRecord write after other bundles
    were written: the sink's .tfrecord-io-temp-* folder is removed (it was left, with
    bundle files in it), and the failure block says what is left."""
    pattern = _parquet_with_a_bad_row_last(str(tmp_path / "pq"))
    out = str(tmp_path / "out")
    proc = run_cli("convert", pattern, "--to", "tfrecord", "--output", out, "--no-progress", *TWO_WORKERS)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "z.parquet" in proc.stderr and "int64 range" in proc.stderr, proc.stderr
    state = [line for line in proc.stderr.splitlines() if line.strip().startswith("state:")]
    assert state and ("removed the" in state[0] or "it holds what it held before" in state[0]), proc.stderr
    assert not os.path.exists(out) or _files_under(out) == [], _files_under(out)


def test_a_failed_convert_in_process_leaves_no_temporary_folder(tmp_path):
    pattern = _parquet_with_a_bad_row_last(str(tmp_path / "pq"))
    out = tmp_path / "out"
    with pytest.raises(Exception, match="int64 range"):
        run_convert([pattern], "tfrecord", str(out), options(TWO_WORKERS))
    assert not out.exists() or _files_under(str(out)) == [], _files_under(str(out))
