"""ValidateTFRecords on real files with real damage, split into many byte ranges,
on DirectRunner and on two worker processes; the same report as validate_files."""

from __future__ import annotations

import gzip
import json

import apache_beam as beam
import pytest
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that

from tfrecord_io.beam.beam_io import METRICS_NAMESPACE
from tfrecord_io.format.codec import serialize_example
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.transforms import Int, Text, ValidateTFRecords, validate_files

RUNNERS = {
    "direct": ["--runner=DirectRunner"],
    "multiprocess2": ["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
}
SPEC = {"i": Int(), "text": Text()}


def write(path, examples):
    """Write serialised examples; return the offset of each record."""
    offsets = []
    with RecordWriter(str(path)) as w:
        for ex in examples:
            offsets.append(w.bytes_written)
            w.write_record(ex)
    return offsets


@pytest.fixture
def damaged(tmp_path):
    """Three files: clean, damaged in three ways, and gzip; with what must be found."""
    good = [serialize_example({"i": i, "text": "x" * (i % 50)}) for i in range(300)]
    clean = tmp_path / "clean.tfrecord"
    write(clean, good)

    exs = list(good)
    exs[40] = serialize_example({"i": 40})  # missing 'text'
    exs[41] = serialize_example({"i": "forty-one", "text": "t"})  # wrong type
    exs[42] = serialize_example({"i": [1, 2], "text": "t"})  # wrong shape
    bad = tmp_path / "bad.tfrecord"
    offsets = write(bad, exs)
    data = bytearray(bad.read_bytes())
    data[offsets[100] + 14] ^= 0xFF  # data byte of record 100: data CRC fails
    data[offsets[200] + 2] ^= 0x01  # length of record 200: length CRC fails
    cut = offsets[299] + 5  # file ends inside record 299's header
    bad.write_bytes(bytes(data[:cut]))

    gz = tmp_path / "small.tfrecord.gz"
    raw = tmp_path / "tmp.tfrecord"
    write(raw, good[:10])
    gz.write_bytes(gzip.compress(raw.read_bytes()))
    raw.unlink()
    return {
        "pattern": str(tmp_path / "*.tfrecord*"),
        "bad": str(bad),
        "clean": str(clean),
        "gz": str(gz),
        "offsets": offsets,
        "sizes": {str(clean): clean.stat().st_size, str(bad): cut, str(gz): gz.stat().st_size},
    }


def check_report(report, d, with_spec):
    assert report["files"] == 3
    assert report["records_per_file"] == {d["bad"]: 300 - 3, d["clean"]: 300, d["gz"]: 10}
    assert report["records"] == 607
    assert report["bytes"] == sum(d["sizes"].values())
    bad = [p for p in report["problems"] if p["path"] == d["bad"]]
    corrupt = [p for p in bad if p["kind"] == "corrupt"]
    offs = d["offsets"]
    assert [p["offset"] for p in corrupt] == [offs[100], offs[200], offs[299]]
    assert corrupt[0]["end"] == offs[101] and corrupt[1]["end"] == offs[201]
    assert all(p["reason"] for p in corrupt)
    invalid = [p for p in bad if p["kind"] == "invalid"]
    if with_spec:
        assert [p["offset"] for p in invalid] == offs[40:43]
        assert "missing required feature 'text'" in invalid[0]["reason"]
        assert "int64_list" not in invalid[1]["reason"] or "spec says int" in invalid[1]["reason"]
        assert "has 2 values" in invalid[2]["reason"]
        assert report["invalid_records"] == 3
    else:
        assert invalid == []
    assert report["corrupt_regions"] == 3 and not report["ok"]
    assert all(p["path"] != d["clean"] for p in report["problems"])


@pytest.mark.parametrize("with_spec", [False, True])
def test_validate_files_in_process(damaged, with_spec):
    report = validate_files(damaged["pattern"], SPEC if with_spec else None)
    check_report(report, damaged, with_spec)


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_validate_split_read_matches_in_process_report(damaged, runner, tmp_path):
    # ranges of 1000 bytes: dozens per file, cut mid-record, read by both workers
    expected = validate_files(damaged["pattern"], SPEC)
    out = str(tmp_path / "report")
    p = beam.Pipeline(options=PipelineOptions(RUNNERS[runner]))
    report = p | ValidateTFRecords(damaged["pattern"], spec=SPEC, bundle_size=1000)
    # checked here, in the test process (worker processes cannot import this module)
    report | beam.Map(json.dumps) | beam.io.WriteToText(out, shard_name_template="")
    result = p.run()
    result.wait_until_finish()
    # The read really was split: about one restriction per 1000 bytes of each uncompressed
    # file (Beam folds a short tail into the range before it), one for the gzip file; an
    # unsplit read would be 3.
    restrictions = result.metrics().query(MetricsFilter().with_namespace(METRICS_NAMESPACE).with_name("restrictions"))
    uncompressed = sum(size for path, size in damaged["sizes"].items() if path != damaged["gz"])
    assert sum(c.committed for c in restrictions["counters"]) >= uncompressed // 1000
    with open(out) as f:
        reports = [json.loads(line) for line in f]
    assert len(reports) == 1
    check_report(reports[0], damaged, True)
    assert reports[0] == json.loads(json.dumps(expected))


def test_unmatched_pattern_and_clean_files(tmp_path, damaged):
    with beam.Pipeline(options=PipelineOptions(RUNNERS["direct"])) as p:
        report = p | ValidateTFRecords([damaged["clean"], str(tmp_path / "nothing-*.tfrecord")], bundle_size=777)

        def check(reports):
            (r,) = reports
            assert r["records"] == 300 and r["files"] == 1
            assert [(x["kind"], x["reason"]) for x in r["problems"]] == [("error", "no file matches this pattern")]

        assert_that(report, check)
    clean = validate_files(damaged["clean"], SPEC)
    assert clean["ok"] and clean["problems"] == [] and clean["records"] == 300
