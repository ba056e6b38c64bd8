"""The record jobs in batches (issue #24) and their results through shared storage:
the batch paths give what the per-record paths give, reshard's shards are even and
placed by where records are, and results never need the launcher's /tmp."""

from __future__ import annotations

import collections
import glob
import os

import pytest
from apache_beam.options.pipeline_options import PipelineOptions

import tfrecord_io
from tfrecord_io.errors import IndexFileError
from tfrecord_io.format.codec import serialize_example
from tfrecord_io.format.frame_copy import copy_frames
from tfrecord_io.format.framing import encode_frame
from tfrecord_io.format.index import load_index
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.pipelines.inspect_job import StatsFn, batch_stats, record_stats
from tfrecord_io.pipelines.report.stats import ObserveBatch, SplitStatsFn, columns_from_record
from tfrecord_io.pipelines.reshard_job import run_reshard, slice_plan
from tfrecord_io.pipelines.runtime.collect import ResultDir, ResultLocationError, workers_share_local_disk
from tfrecord_io.transforms import Array, Bytes, Float, Int, Text, encode_row
from tfrecord_io.transforms.checks import check_record, check_records
from tfrecord_io.transforms.spec import feature_specs

from tests.pipeline_support import IN_PROCESS, TWO_WORKERS, options, run_cli

# --------------------------------------------------------------------------- results: where they go


@pytest.mark.parametrize(
    "flags,local",
    [
        ([], True),
        (["--runner=DirectRunner", "--direct_running_mode=multi_processing"], True),
        (["--runner=DirectRunner", "--direct_running_mode=in_memory"], True),
        (["--runner=FlinkRunner", "--environment_type=LOOPBACK"], True),  # the harness is the launcher
        (["--runner=PrismRunner", "--environment_type=LOOPBACK"], True),
        (["--runner=PortableRunner", "--environment_type=EXTERNAL", "--environment_config=host:5"], False),
        (["--runner=FlinkRunner", "--environment_type=DOCKER"], False),
        (["--runner=SparkRunner", "--environment_type=PROCESS"], False),
        (["--runner=DirectRunner", "--environment_type=EXTERNAL", "--environment_config=localhost:5"], False),
        (["--runner=DataflowRunner"], False),
        (["--runner=PrismRunner"], False),
    ],
)
def test_which_runs_may_use_the_launchers_disk(flags, local):
    assert workers_share_local_disk(PipelineOptions(flags)) is local


def test_result_dir_of_a_cluster_job_is_under_temp_location_or_the_output(tmp_path):
    cluster = ["--runner=PortableRunner", "--environment_type=EXTERNAL", "--environment_config=host:5"]
    with pytest.raises(ResultLocationError, match="set --temp_location"):
        ResultDir.for_job(PipelineOptions(cluster), "validate")
    shared = ResultDir.for_job(PipelineOptions([*cluster, f"--temp_location={tmp_path}/t"]), "validate")
    assert shared.path.startswith(f"{tmp_path}/t/tfrecord-io-validate-results-")
    inside = ResultDir.for_job(PipelineOptions(cluster), "convert", output_dir=str(tmp_path / "pq"))
    assert inside.path.startswith(str(tmp_path / "pq" / ".tfrecord-io-convert-results-"))
    beside = ResultDir.for_job(PipelineOptions(cluster), "reshard", output=str(tmp_path / "out" / "part"))
    assert beside.path.startswith(str(tmp_path / "out" / ".tfrecord-io-reshard-results-"))
    with beside:
        os.makedirs(beside.path, exist_ok=True)
        open(os.path.join(beside.path, "x.json"), "w").write("{}")
    assert not os.path.exists(beside.path)  # cleaned up
    local = ResultDir.for_job(PipelineOptions(IN_PROCESS), "validate")
    assert not local.path.startswith(str(tmp_path))
    local.remove()


def test_results_come_back_whole_in_a_file_per_bundle_not_per_element(tmp_path):
    """20,000 results through a ResultDir: every one read back, in a handful of files
    (a file per element costs a request or three each on an object store: a cluster
    job's 20,000 results then took longer than the test's 15 minutes on S3)."""
    import apache_beam as beam

    with ResultDir(str(tmp_path / "results")) as results:
        with beam.Pipeline(options=options(IN_PROCESS)) as p:
            p | beam.Create([{"i": i, "s": "x" * (i % 7)} for i in range(20000)]) | results.sink()
        got = results.read()
        written = os.listdir(results.path)
    assert sorted(r["i"] for r in got) == list(range(20000))
    assert all(r["s"] == "x" * (r["i"] % 7) for r in got)
    assert 1 <= len(written) <= 50, f"{len(written)} result files for 20,000 elements"


def test_progress_of_a_cluster_job_is_where_its_results_are(tmp_path):
    """Progress follows the results: a launcher-local directory only for local workers;
    for workers that may be elsewhere under --temp_location, else hidden beside the
    output or inside the output directory, else none; removed at the end."""
    from tfrecord_io.pipelines.runtime.progress import ProgressPrinter

    cluster = ["--runner=PortableRunner", "--environment_type=EXTERNAL", "--environment_config=host:5"]
    with ProgressPrinter("validate", options=PipelineOptions([*cluster, f"--temp_location={tmp_path}/t"])) as bar:
        assert bar.dir.startswith(f"{tmp_path}/t/tfrecord-io-validate-progress-") and os.path.isdir(bar.dir)
        shared = bar.dir
    assert not os.path.exists(shared)
    with ProgressPrinter("build", options=PipelineOptions(cluster), output_dir=str(tmp_path / "ds")) as bar:
        assert bar.dir.startswith(str(tmp_path / "ds" / ".tfrecord-io-build-progress-"))
    with ProgressPrinter("reshard", options=PipelineOptions(cluster), output=str(tmp_path / "o" / "part")) as bar:
        assert bar.dir.startswith(str(tmp_path / "o" / ".tfrecord-io-reshard-progress-"))
    with ProgressPrinter("inspect", options=PipelineOptions(cluster)) as bar:
        assert bar.dir is None  # no shared place: no live counts (the job itself needs --temp_location)
    with ProgressPrinter("inspect", options=PipelineOptions(IN_PROCESS)) as bar:
        assert bar.dir is not None and not bar.dir.startswith(str(tmp_path)) and os.path.isdir(bar.dir)


def test_no_progress_line_comes_after_the_job_is_over():
    """The summary follows the progress lines: once ``ProgressPrinter`` has exited, its
    thread prints nothing more. Before, the exit waited 5 s for the thread and went on;
    a thread slow in reading the counts (a busy disk or store) then printed its line
    after the command's summary."""
    import io
    import threading

    from tfrecord_io.pipelines.runtime.progress import ProgressPrinter

    stream = io.StringIO()
    reading, release = threading.Event(), threading.Event()
    bar = ProgressPrinter("convert", interval=0.01, stream=stream)

    def slow_read():
        reading.set()
        release.wait(30)
        return {"rows": 7}, None

    bar._read = slow_read  # type: ignore[method-assign]
    bar.join_timeout = 0.2
    bar.__enter__()
    assert reading.wait(10)
    threading.Timer(1.0, release.set).start()  # after the exit's join has given up
    bar.__exit__(None, None, None)
    stream.write("convert: the summary\n")
    release.wait(30)
    bar._thread.join(10)
    assert stream.getvalue().splitlines()[-1] == "convert: the summary", stream.getvalue()


def test_a_job_run_in_process_leaves_no_retry_listener_behind(tmp_path):
    """A job whose pipeline runs in this process (as in a notebook): the launcher's
    retry notes and the counting stage's are unregistered when it ends, so later
    retries of any store in this process are not written into its deleted progress
    directory (before, one listener per job ever run stayed registered)."""
    import apache_beam as beam

    from tfrecord_io.pipelines.runtime.progress import CountProgress, ProgressPrinter, read_counts
    from tfrecord_io.storage import storage_retry

    before = list(storage_retry._listeners)
    with ProgressPrinter("validate", options=PipelineOptions(IN_PROCESS)) as bar:
        with beam.Pipeline(options=options(IN_PROCESS)) as p:
            p | beam.Create(list(range(40))) | beam.ParDo(CountProgress(bar.dir, "records"))
        assert read_counts(bar.dir) == {"records": 40}
        assert len(storage_retry._listeners) > len(before)  # the notes of this job, while it runs
    assert storage_retry._listeners == before


@pytest.mark.parametrize("command", ["validate", "inspect", "index", "report"])
def test_cluster_job_without_a_shared_location_is_a_usage_error(command, tmp_path):
    """Exit 2 before anything runs, naming the flag (the job server address is never
    contacted: nothing listens there)."""
    path = str(tmp_path / "a.tfrecord")
    with RecordWriter(path) as w:
        w.write_record(serialize_example({"label": 1}))
    extra = ["--output", str(tmp_path / "r.html")] if command == "report" else []
    proc = run_cli(
        command,
        path,
        *extra,
        "--no-progress",
        "--runner=PortableRunner",
        "--job_endpoint=localhost:9",
        "--environment_type=EXTERNAL",
        "--environment_config=localhost:9",
        timeout=120,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--temp_location" in proc.stderr and "share" in proc.stderr
    assert not os.path.exists(str(tmp_path / "r.html")) and not os.path.exists(path + ".index")


# --------------------------------------------------------------------------- batch paths = per-record paths


def test_check_records_fast_path_finds_what_check_record_finds():
    specs = feature_specs({"i": Int(), "v": Array(dtype="float32", shape=(3,)), "t": Text()})
    good = [
        encode_row(
            {"i": n, "v": [n, 0, 1], "t": "x" * n}, {"i": Int(), "v": Array(dtype="float32", shape=(3,)), "t": Text()}
        )
        for n in range(50)
    ]
    batch = list(good)
    batch[7] = serialize_example({"i": 7, "v": [1.0, 2.0], "t": "t"})  # two values, not three
    batch[30] = serialize_example({"i": [1, 2], "v": [1.0, 2.0, 3.0], "t": "t"})  # two ints
    expected = [(i, check_record(r, specs)) for i, r in enumerate(batch) if check_record(r, specs)]
    assert [i for i, _ in expected] == [7, 30]
    assert check_records(batch, specs) == expected
    batch[12] = serialize_example({"i": 12, "v": [1.0, 2.0, 3.0]})  # 't' missing: the batch goes to upb
    expected = [(i, check_record(r, specs)) for i, r in enumerate(batch) if check_record(r, specs)]
    assert check_records(batch, specs) == expected and [i for i, _ in expected] == [7, 12, 30]
    assert check_records(good, specs) == []


def _inspect_each(batch):
    stats = StatsFn()
    acc = stats.create_accumulator()
    for data in batch[2]:
        stats.add_input(acc, record_stats(batch[0], data))
    return acc


def test_inspect_batch_stats_equal_the_per_record_stats():
    rows = [serialize_example({"a": n, "b": [0.5] * (n % 4 + 1), "c": b"x" * n}) for n in range(40)]
    uniform = ("f", [8 * i for i in range(len(rows))], rows)
    assert batch_stats(uniform) == _inspect_each(uniform)
    mixed = ("f", uniform[1], list(rows))
    mixed[2][5] = serialize_example({"a": 1, "b": [0.5], "c": b"", "extra": 3})  # one more key
    mixed[2][9] = b"\x0a\x03not an example"
    assert batch_stats(mixed) == _inspect_each(mixed)
    assert batch_stats(mixed)["features"]["extra"]["count"] == 1 and batch_stats(mixed)["errors"] == 1


def _report_both(records, columns, by_label=False):
    shards = []
    fn = ObserveBatch(shards, columns, samples=3, by_label=by_label)
    fn.setup()
    batch = ("/d/train/x.tfrecord", [100 * i for i in range(len(records))], records)
    results = {}
    for name, outputs in (("fast", list(fn.process(batch))), ("each", list(fn._each(batch)))):
        stats = [o for o in outputs if not hasattr(o, "tag")]
        samples = sorted(o.value for o in outputs if hasattr(o, "tag"))
        merged = SplitStatsFn(columns).merge_accumulators([acc for _, acc in stats])
        results[name] = (SplitStatsFn(columns).extract_output(merged), samples)
    return results


def test_report_batch_statistics_equal_the_per_record_ones():
    spec = {
        "label": Int(),
        "count": Int(),
        "score": Float(allow_nan=True),
        "emb": Array(dtype="float32", shape=(4,)),
        "note": Text(),
        "blob": Bytes(),
    }
    rows = [
        {
            "label": i % 3,
            "count": i * 7 - 20,
            "score": float("nan") if i == 7 else i / 10,
            "emb": [i, -i, 0.5, 2.0],
            "note": "é" * (1 + i % 9),
            "blob": bytes([255, i % 256]) * (1 + i % 3),
        }
        for i in range(60)
    ]
    records = [encode_row(r, spec) for r in rows]
    columns = columns_from_record(records[0])
    got = _report_both(records, columns, by_label=True)
    assert got["fast"] == got["each"]
    stats, samples = got["fast"]
    assert stats["records"] == 60 and stats["columns"]["label"]["ids"] == {"0": 20, "1": 20, "2": 20}
    assert {group for (_, group), _ in samples} == {0, 1, 2}


def test_report_batch_statistics_of_images_and_audio(tmp_path):
    """The demo's images and audio (the encoders' key groups): the same figures both ways."""
    from tfrecord_io.pipelines.building.build_config import load_config
    from tfrecord_io.pipelines.building.build_job import run_build
    from tfrecord_io.pipelines.demo_data import make_demo_media
    from tfrecord_io.pipelines.report.report_job import _columns, resolve_input

    config = make_demo_media(str(tmp_path), rows=12)
    cfg = load_config(config, [("output.dir", str(tmp_path / "out")), ("output.version", "v1")])
    run_build(cfg, options(), progress=False)
    inp = resolve_input([str(tmp_path / "out")])
    columns = _columns(inp)
    assert {c.kind for c in columns} >= {"image", "audio", "label"}
    records = [bytes(r) for s in inp.shards for r in tfrecord_io.tfrecord_iterator(s.path)]
    by_shape = collections.defaultdict(list)
    for r in records:  # batches of records with the same keys, as one shard's would be
        by_shape[tuple(sorted(tfrecord_io.parse_example(r)))].append(r)
    for group in by_shape.values():
        got = _report_both(group, columns, by_label=True)
        assert got["fast"] == got["each"]


# --------------------------------------------------------------------------- reshard: even, placed by position


def _dataset(root, distinct: int, n: int = 100_000, files: int = 16, indexed: bool = False, gzip: bool = False):
    image = b"\x89PNG" + b"x" * 60  # one image; one label, four labels, or a distinct id per record
    contents = [
        serialize_example({"image": image, "label": k % 4, **({"id": k} if distinct > 4 else {})})
        for k in range(distinct)
    ]
    os.makedirs(root)
    per = n // files
    suffix = ".tfrecord.gz" if gzip else ".tfrecord"
    for f in range(files):
        path = os.path.join(root, f"in-{f:02d}{suffix}")
        with RecordWriter(path, "gzip" if gzip else None, index_path=path + ".index" if indexed else None) as w:
            w.write_records([contents[(f * per + i) % distinct] for i in range(per)])
    return sorted(glob.glob(os.path.join(root, "*" + suffix)))


def _shards(prefix):
    paths = sorted(p for p in glob.glob(prefix + "-*") if not p.endswith(".index"))
    return [collections.Counter(bytes(r) for r in tfrecord_io.tfrecord_iterator(p, p + ".index")) for p in paths]


@pytest.mark.parametrize(
    "distinct,indexed,gzip",
    [(1, False, True), (4, False, True), (100_000, False, True), (1, True, False), (4, False, False)],
    ids=[
        "one-content-batched",
        "four-contents-batched",
        "distinct-batched",
        "one-content-slices",
        "four-contents-scanned",
    ],
)
def test_reshard_is_even_whatever_the_records_hold_and_placed_by_position(tmp_path, distinct, indexed, gzip):
    """100,000 records into 4 shards: every shard within 1% of the mean, for one record
    repeated (any placement by a hash of the bytes puts them all in one shard), for four
    distinct contents (one image, four labels: all copies of one record once went to one
    shard) and for distinct records; on the batched path (GZIP inputs: no byte offsets to
    slice at), the slice path (indexed inputs) and the scanned path (uncompressed, no
    indexes); the same shards on one and on two workers."""
    inputs = _dataset(str(tmp_path / "in"), distinct, indexed=indexed, gzip=gzip)
    assert (slice_plan(inputs, 4, None) is not None) == indexed  # the path the case is about
    before = collections.Counter(bytes(r) for p in inputs for r in tfrecord_io.tfrecord_iterator(p))
    out = {}
    for name, flags in (("one", IN_PROCESS), ("two", TWO_WORKERS)):
        prefix = str(tmp_path / name / "part")
        result = run_reshard(inputs, prefix, options(flags), num_shards=4, progress=False)
        assert result["records"] == 100_000
        out[name] = _shards(prefix)
    counts = [sum(c.values()) for c in out["one"]]
    assert len(counts) == 4 and all(abs(n - 25_000) <= 250 for n in counts), counts
    assert sum(out["one"], collections.Counter()) == before
    assert out["one"] == out["two"]  # each record in the same shard, whatever the runner


def test_reshard_of_a_corrupt_file_fails_naming_file_and_offset(tmp_path):
    path = str(tmp_path / "c.tfrecord")
    with RecordWriter(path) as w:
        w.write_records([b"r%d" % i for i in range(100)])
    data = bytearray(open(path, "rb").read())
    data[16 * 10 + 13] ^= 0xFF
    open(path, "wb").write(bytes(data))
    proc = run_cli(
        "reshard", path, "--output", str(tmp_path / "o" / "p"), "--num-shards", "2", "--no-progress", *IN_PROCESS
    )
    assert proc.returncode != 0
    assert path in proc.stderr and "offset" in proc.stderr
    assert glob.glob(str(tmp_path / "o" / "p-*")) == []


# --------------------------------------------------------------------------- reshard: slices planned from the indexes


def _indexed_dataset(root, counts, seed=0):
    """Indexed files ``in-XX.tfrecord`` (written out of path order, so the plan must sort)
    of records of uneven sizes; returns the paths sorted and their records in global order."""
    os.makedirs(root, exist_ok=True)
    paths = [os.path.join(root, f"in-{f:02d}.tfrecord") for f in range(len(counts))]
    records = {}
    for f in reversed(range(len(counts))):
        records[f] = [b"%d/%d:" % (f, i) + bytes([(seed + f + i) % 251]) * ((i * 7 + f) % 97) for i in range(counts[f])]
        with RecordWriter(paths[f], index_path=paths[f] + ".index") as w:
            w.write_records(records[f])
    return paths, [r for f in range(len(counts)) for r in records[f]]


def _shard_files(prefix):
    return sorted(p for p in glob.glob(prefix + "-*") if not p.endswith(".index"))


def _frames_bytes(records):
    return b"".join(encode_frame(r) for r in records)


def test_reshard_slices_are_exactly_even_in_order_byte_identical_and_the_same_on_one_and_two_workers(tmp_path):
    """Indexed inputs take the slice path: shard k holds records [k*T//4, (k+1)*T//4) of
    the inputs in path order, as the very frames of the inputs (same bytes), with an index
    that describes it; one and two workers write the same bytes."""
    counts = [1000 + 37 * f for f in range(7)]
    inputs, records = _indexed_dataset(str(tmp_path / "in"), counts)
    total = len(records)
    assert total % 4 != 0
    assert slice_plan(inputs, 4, None) is not None
    written = {}
    for name, flags in (("one", IN_PROCESS), ("two", TWO_WORKERS)):
        prefix = str(tmp_path / name / "part")
        result = run_reshard(inputs, prefix, options(flags), num_shards=4, progress=False)
        assert result["records"] == total
        shards = _shard_files(prefix)
        assert len(shards) == 4
        for k, shard in enumerate(shards):
            want = records[k * total // 4 : (k + 1) * total // 4]
            data = open(shard, "rb").read()
            assert data == _frames_bytes(want), shard
            index = load_index(shard + ".index")
            assert index.matches(len(data)) and len(index) == len(want)
            assert [bytes(r) for r in tfrecord_io.tfrecord_iterator(shard, shard + ".index")] == want
        written[name] = [open(s, "rb").read() for s in shards]
    assert written["one"] == written["two"]


def test_reshard_splits_one_big_indexed_file_over_the_shards(tmp_path):
    """One input file is cut into one byte range per shard (each shard a separate unit of
    work, so the workers share it), exactly even."""
    inputs, records = _indexed_dataset(str(tmp_path / "in"), [20_001])
    plan = slice_plan(inputs, 4, None)
    assert [len(pieces) for pieces in plan] == [1, 1, 1, 1]
    assert [piece[0][3] for piece in plan] == [5000, 5000, 5000, 5001]
    assert [piece[0][1] for piece in plan] == sorted({piece[0][1] for piece in plan})  # distinct, rising
    prefix = str(tmp_path / "out" / "part")
    run_reshard(inputs, prefix, options(TWO_WORKERS), num_shards=4, progress=False)
    got = [[bytes(r) for r in tfrecord_io.tfrecord_iterator(s)] for s in _shard_files(prefix)]
    assert [len(g) for g in got] == [5000, 5000, 5000, 5001]
    assert [r for g in got for r in g] == records


def test_reshard_slices_with_compressed_output(tmp_path):
    inputs, records = _indexed_dataset(str(tmp_path / "in"), [300, 301])
    prefix = str(tmp_path / "out" / "part")
    result = run_reshard(inputs, prefix, options(IN_PROCESS), num_shards=3, compression="gzip", progress=False)
    shards = sorted(s["path"] for s in result["shards"])
    assert all(s.endswith(".tfrecord.gz") for s in shards)
    assert all(s["index_path"] is None for s in result["shards"])
    got = [[bytes(r) for r in tfrecord_io.tfrecord_iterator(s, compression_type="gzip")] for s in shards]
    assert [len(g) for g in got] == [200, 200, 201]
    assert [r for g in got for r in g] == records
    assert not glob.glob(prefix + "*.index")


def test_reshard_plans_in_the_launcher_only_with_a_shard_count_no_where_and_sound_indexes(tmp_path):
    """``--where`` (records must be parsed), no fixed shard count, a missing index or a
    stale one: no launcher plan. With a stale index the job scans the files in the
    pipeline (the scanned path): the records appended after indexing are there, and
    the shards are the slices in path order, as with sound indexes."""
    inputs, records = _indexed_dataset(str(tmp_path / "in"), [400, 400])
    assert slice_plan(inputs, 4, ("label", "1")) is None  # --where parses records
    assert slice_plan(inputs, 0, None) is None  # no fixed shard count
    os.remove(inputs[0] + ".index")
    assert slice_plan(inputs, 4, None) is None  # missing
    with RecordWriter(inputs[0], index_path=inputs[0] + ".index") as w:
        w.write_records(records[:400])
    with open(inputs[1], "ab") as f:  # records appended after indexing: the index is stale
        f.write(_frames_bytes([b"late-1", b"late-2"]))
    assert slice_plan(inputs, 4, None) is None
    prefix = str(tmp_path / "out" / "part")
    result = run_reshard(inputs, prefix, options(IN_PROCESS), num_shards=4, progress=False)
    assert result["records"] == 802  # the stale index hid nothing
    everything = records + [b"late-1", b"late-2"]
    got = [[bytes(r) for r in tfrecord_io.tfrecord_iterator(s)] for s in _shard_files(prefix)]
    assert got == [everything[k * 802 // 4 : (k + 1) * 802 // 4] for k in range(4)]


def test_reshard_scanned_path_gives_the_slice_paths_bytes_without_indexes(tmp_path):
    """Uncompressed inputs without indexes are scanned in the pipeline (frame offsets
    only cross the runner, no record): the same shard files, byte for byte, as the
    launcher's plan from indexes gives, on one and on two workers; with fewer records
    than shards every shard is still written (the empty ones empty)."""
    counts = [1000 + 37 * f for f in range(7)]
    inputs, records = _indexed_dataset(str(tmp_path / "in"), counts)
    from_indexes = str(tmp_path / "indexed" / "part")
    run_reshard(inputs, from_indexes, options(IN_PROCESS), num_shards=4, progress=False)
    want = [open(s, "rb").read() for s in _shard_files(from_indexes)]
    assert len(want) == 4
    for path in inputs:
        os.remove(path + ".index")
    assert slice_plan(inputs, 4, None) is None
    for name, flags in (("one", IN_PROCESS), ("two", TWO_WORKERS)):
        prefix = str(tmp_path / name / "part")
        result = run_reshard(inputs, prefix, options(flags), num_shards=4, progress=False)
        assert result["records"] == len(records)
        shards = _shard_files(prefix)
        assert [open(s, "rb").read() for s in shards] == want, name
        for shard in shards:
            assert load_index(shard + ".index").matches(os.path.getsize(shard))
    few, few_records = _indexed_dataset(str(tmp_path / "few"), [3])
    os.remove(few[0] + ".index")
    prefix = str(tmp_path / "few-out" / "part")
    result = run_reshard(few, prefix, options(TWO_WORKERS), num_shards=5, progress=False)
    got = [[bytes(r) for r in tfrecord_io.tfrecord_iterator(s)] for s in _shard_files(prefix)]
    assert got == [[], few_records[0:1], [], few_records[1:2], few_records[2:3]]
    assert result["records"] == 3


def test_reshard_where_with_indexed_inputs_keeps_only_matching_records(tmp_path):
    root = tmp_path / "in"
    os.makedirs(root)
    path = str(root / "a.tfrecord")
    with RecordWriter(path, index_path=path + ".index") as w:
        w.write_records([serialize_example({"label": i % 3, "id": i}) for i in range(300)])
    prefix = str(tmp_path / "out" / "part")
    result = run_reshard([path], prefix, options(IN_PROCESS), num_shards=2, where=("label", "1"), progress=False)
    assert result["records"] == 100


@pytest.mark.parametrize("where", ["data", "header"])
def test_reshard_slices_fail_on_a_record_corrupted_after_indexing_naming_file_and_offset(tmp_path, where):
    """The index still matches the file's size and boundaries, so the slice path is
    taken; the damage is found by the CRC checks and named, and no shard appears."""
    inputs, records = _indexed_dataset(str(tmp_path / "in"), [500, 500])
    bad = inputs[1]
    offset = int(load_index(bad + ".index").offsets[321])
    data = bytearray(open(bad, "rb").read())
    data[offset + (14 if where == "data" else 3)] ^= 0x40
    open(bad, "wb").write(bytes(data))
    assert slice_plan(inputs, 2, None) is not None
    proc = run_cli(
        "reshard",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "o" / "p"),
        "--num-shards",
        "2",
        "--no-progress",
        *TWO_WORKERS,
    )
    assert proc.returncode != 0
    assert f"{bad}, byte offset {offset}" in proc.stderr, proc.stderr[-3000:]
    assert glob.glob(str(tmp_path / "o" / "p-*")) == []


def test_copy_frames_rejects_an_index_that_does_not_describe_the_file(tmp_path):
    """An index whose ranges do not tile the frames (or count them wrong) is an error
    naming the file and offset, not a silent copy."""
    path = str(tmp_path / "a.tfrecord")
    records = [b"x" * (i + 1) for i in range(50)]
    with RecordWriter(path) as w:
        w.write_records(records)
    size = os.path.getsize(path)
    out = str(tmp_path / "b.tfrecord")
    with RecordWriter(out) as w:
        copy_frames(path, 0, size, 50, w, chunk_size=64)  # records cut by small reads re-joined
    assert open(out, "rb").read() == open(path, "rb").read()
    with RecordWriter(out) as w, pytest.raises(IndexFileError, match="hold 50 records but the file's index says 49"):
        copy_frames(path, 0, size, 49, w)
    with RecordWriter(out) as w, pytest.raises(IndexFileError) as err:
        copy_frames(path, 0, size - 5, 50, w)  # the last frame runs past the range's end
    assert err.value.path == path and err.value.offset == size - len(encode_frame(records[-1]))


# --------------------------------------------------------------------------- results on a cluster: no shared /tmp


@pytest.fixture
def shared_dir():
    """A directory both the launcher and a worker with a private /tmp see (the stand-in
    for the storage a cluster shares)."""
    import shutil
    import tempfile

    path = tempfile.mkdtemp(prefix="tfrecord-io-shared-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def private_tmp_pool(shared_dir):
    """A worker pool (``runtime.worker_pool``, the one ``scripts/cluster`` runs, with the
    SDK container's boot step) in a mount namespace of its own with an empty tmpfs over
    /tmp: its SDK workers cannot see any file the launcher puts in its /tmp. Needs root
    (for ``unshare``)."""
    import shutil
    import socket
    import subprocess
    import sys
    import time

    if os.geteuid() != 0 or shutil.which("unshare") is None or not shared_dir.startswith("/dev/shm"):
        pytest.skip("needs root, unshare and /dev/shm for a private /tmp")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    boot = os.path.join(shared_dir, "boot")
    with open(boot, "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -m tfrecord_io.pipelines.runtime.worker_pool --boot "$@"\n')
    os.chmod(boot, 0o755)
    log_path = os.path.join(shared_dir, "pool.log")
    with open(log_path, "wb") as log:
        pool = subprocess.Popen(
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                # the checkout stays visible when it was cloned under /tmp (bound back, as
                # scripts/cluster does): the pool runs it, as a worker machine has it installed
                f'exec 4<"$0" && mount -t tmpfs tmpfs /tmp && case "$0" in /tmp/*) mkdir -p "$0" && '
                f'mount --no-canonicalize --bind /proc/self/fd/4 "$0";; esac && exec 4<&- && '
                f"exec {sys.executable} -m tfrecord_io.pipelines.runtime.worker_pool "
                f"--address 127.0.0.1:{port} --container-executable {boot}",
                repo,
            ],
            env=dict(os.environ, PYTHONPATH=repo),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd="/",
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.2)
    else:
        pool.kill()
        pytest.fail("worker pool did not start: " + open(log_path).read())
    yield f"127.0.0.1:{port}"
    pool.terminate()
    try:
        pool.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pool.kill()
        pool.wait()


@pytest.mark.runners
def test_jobs_on_prism_workers_without_the_launchers_tmp(private_tmp_pool, shared_dir):
    """validate, inspect, index, reshard and convert on Prism with EXTERNAL workers that have a
    /tmp of their own: results come back through --temp_location (reshard: beside its
    --output) on storage both sides see (with the launcher's /tmp, as before, the jobs
    failed with FileNotFoundError), and nothing is left there."""
    from tfrecord_io.pipelines.runtime.runners import cached_path

    try:
        cached_path("PrismRunner")
    except Exception as err:  # noqa: BLE001 - no Prism binary on this machine
        pytest.skip(str(err))
    data = os.path.join(shared_dir, "in")
    os.makedirs(data)
    for f in range(3):
        with RecordWriter(os.path.join(data, f"d-{f}.tfrecord")) as w:
            w.write_records([serialize_example({"label": i % 5, "x": [float(i)] * 3}) for i in range(200)])
    flags = [
        "--runner=PrismRunner",
        "--environment_type=EXTERNAL",
        f"--environment_config={private_tmp_pool}",
        "--experiments=disable_prism_server_singleton",
    ]
    temp = os.path.join(shared_dir, "tmp")
    shared = [f"--temp_location={temp}"]
    pattern = os.path.join(data, "*.tfrecord")
    proc = run_cli("validate", pattern, "--no-progress", *flags, timeout=300)
    assert proc.returncode == 2 and "--temp_location" in proc.stderr, proc.stdout + proc.stderr
    proc = run_cli("validate", pattern, *flags, *shared, timeout=300)  # with progress, under --temp_location too
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 files, 600 records" in proc.stdout
    proc = run_cli("inspect", pattern, "--json", "--head", "0", "--no-progress", *flags, *shared, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert '"records": 600' in proc.stdout
    proc = run_cli("index", pattern, "--no-progress", *flags, *shared, timeout=300)
    assert proc.returncode == 0 and "3 created" in proc.stdout, proc.stdout + proc.stderr
    out = os.path.join(shared_dir, "out")
    os.makedirs(out)
    proc = run_cli(
        "reshard",
        pattern,
        "--output",
        os.path.join(out, "part"),
        "--num-shards",
        "2",
        "--no-progress",
        *flags,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "into 2 shards, 600 records" in proc.stdout
    assert sorted(os.listdir(out)) == [f"part-0000{i}-of-00002.tfrecord{x}" for i in range(2) for x in ("", ".index")]
    # convert both ways: results under --temp_location, then (without it) hidden inside --output
    parquet = os.path.join(shared_dir, "pq")
    proc = run_cli("convert", pattern, "--to", "parquet", "--output", parquet, "--no-progress", *flags, *shared)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "convert: 600 records -> " in proc.stdout, proc.stdout
    back = os.path.join(shared_dir, "back")
    proc = run_cli(
        "convert", os.path.join(parquet, "*.parquet"), "--to", "tfrecord", "--output", back, "--no-progress", *flags
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "convert: 600 records -> " in proc.stdout, proc.stdout
    assert not [n for n in os.listdir(back) if n.startswith(".")] and not os.path.exists(os.path.join(back, "back"))
    assert sorted(
        bytes(r) for p in glob.glob(os.path.join(back, "data-*.tfrecord")) for r in tfrecord_io.tfrecord_iterator(p)
    ) == sorted(bytes(r) for p in glob.glob(pattern) for r in tfrecord_io.tfrecord_iterator(p))
    assert not os.path.exists(temp) or os.listdir(temp) == []  # every result directory removed


def _where_records():
    """Records where ``--where`` meets every case: ints, floats, text, lists (any element
    may match), absent keys, an empty list, and a text that reads as a number."""
    out = []
    for i in range(400):
        row = {"id": i, "label": i % 5, "score": [0.5 * (i % 4), 7.0], "tag": [b"cat" if i % 3 else b"dog", b"x"]}
        if i % 7 == 0:
            del row["label"]
        if i % 11 == 0:
            row["tag"] = ([], "bytes")
        row["code"] = str(i % 4).encode()  # bytes that read as numbers
        out.append(serialize_example(row))
    return out


@pytest.mark.parametrize(
    "where",
    [
        ("label", "3"),
        ("label", "3.0"),
        ("score", "1.5"),
        ("tag", "dog"),
        ("code", "2"),
        ("label", "x"),
        ("nope", "1"),
        ("tag", ""),
    ],
)
def test_where_filter_is_matches_by_the_compiled_parser(where, monkeypatch):
    """``--where`` over a batch by the compiled parser keeps exactly the records the
    per-record protobuf test keeps, in order, without that test (it is made to fail
    here); a batch whose key changes type between records falls back to it."""
    from tfrecord_io.pipelines import reshard_job as reshard

    records = _where_records()
    want = [r for r in records if reshard.matches(r, where)]
    per_record = reshard.matches
    monkeypatch.setattr(reshard, "matches", lambda *a: pytest.fail("parsed record by record"))
    got = reshard.WhereFilter(where).keep(records)
    assert got == want
    mixed = records[:10] + [serialize_example({"label": b"3"})]  # label: int64, then bytes
    monkeypatch.setattr(reshard, "matches", per_record)
    assert reshard.WhereFilter(where).keep(mixed) == [r for r in mixed if per_record(r, where)]


def test_reshard_without_a_shard_count_moves_lists_not_records(tmp_path, monkeypatch):
    """No --num-shards: the records reach the sink's bundle files as the read's lists,
    one Beam element per batch (reshard.py says it never moves one element per record;
    it did on this path), with --where too; every record is written once."""
    from tfrecord_io.beam import beam_sink

    path = str(tmp_path / "in.tfrecord")
    records = [serialize_example({"label": i % 3, "id": i}) for i in range(20_000)]
    with RecordWriter(path) as w:
        w.write_records(records)
    calls = collections.Counter()
    for cls in {beam_sink._WriteBundles, *beam_sink._WriteBundles.__subclasses__()}:
        original = cls.__dict__.get("process")
        if original is not None:

            def counted(self, element, _original=original, _name=cls.__name__):
                calls[_name] += 1
                return _original(self, element)

            monkeypatch.setattr(cls, "process", counted)
    for where, want in ((None, records), (("label", "1"), records[1::3])):
        calls.clear()
        prefix = str(tmp_path / f"out-{bool(where)}" / "part")
        result = run_reshard([path], prefix, options(IN_PROCESS), num_shards=0, where=where, progress=False)
        assert result["records"] == len(want)
        written = collections.Counter(
            bytes(r) for s in result["shards"] for r in tfrecord_io.tfrecord_iterator(s["path"])
        )
        assert written == collections.Counter(want)
        assert 0 < sum(calls.values()) <= 40, calls  # 20 read batches of 1,024 (a few more at range cuts)
