"""ReadFromTFRecord / ReadAllFromTFRecord on real files and real Beam runners.

Exactly-once is the property everything here checks: whatever the byte ranges
(initial splits, arbitrary cut points, dynamic splits mid-range), with or without an
index, with a stale or broken index, the multiset of records read equals what was
written, and every corrupt region is reported exactly once.
"""

from __future__ import annotations

import glob
import gzip
import os
import tempfile
from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam import coders
from apache_beam.io import fileio
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.pvalue import TaggedOutput
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfrecord_io as tfio
from tfrecord_io.beam.beam_io import ReadAllFromTFRecord, ReadFromTFRecord
from tfrecord_io.beam.beam_source import _ReadTFRecordFn
from tfrecord_io.errors import CorruptRecordError
from tfrecord_io.format.framing import FRAME_OVERHEAD
from tfrecord_io.format.index import RecordIndex, build_index, write_index_atomic

from tests.beam_support import multiset, run_pipeline

NS = "tfrecord_io"
SLOW = settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))


def payloads(sizes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=n, dtype=np.uint8).tobytes() for n in sizes]


def write_file(path, records, index=True):
    with tfio.RecordWriter(path, index_path=path + ".index" if index else None) as w:
        w.write_records(records)
    return path


def offsets_of(records):
    out, pos = [], 0
    for r in records:
        out.append(pos)
        pos += len(r) + FRAME_OVERHEAD
    return out


def read_with(pattern, workdir, multi=False, **kwargs):
    def build(p):
        result = p | ReadFromTFRecord(pattern, **kwargs)
        if kwargs.get("on_corrupt") == "dead_letter":
            return {"records": result.records, "dead": result.dead_letter}
        return {"records": result}

    return run_pipeline(build, workdir, multi=multi)


def make_fn(desired=1 << 20, on_corrupt="fail", index_pattern=None, claim_chunk=None):
    fn = _ReadTFRecordFn(desired, coders.BytesCoder(), "bytes", None, False, None, on_corrupt, True, index_pattern)
    if claim_chunk:
        fn._claim_chunk = claim_chunk  # records read ahead per claim (256 by default)
    return fn


def run_ranges(fn, path, cuts):
    """Process ranges [cuts[i], cuts[i+1]) directly with Beam's real offset tracker."""
    element = (path, os.path.getsize(path), "")
    records, dead = [], []
    for a, b in zip(cuts, cuts[1:]):
        tracker = fn.create_tracker(OffsetRange(a, b))
        for item in fn.process(element, tracker):
            (dead.append(item.value) if isinstance(item, TaggedOutput) else records.append(item))
        tracker.check_done()
    return records, dead


# --------------------------------------------------------------------------- exactly once

index_modes = st.sampled_from(["none", "fresh", "stale_other_size", "stale_same_size", "garbage"])
record_sizes = st.lists(
    st.one_of(st.integers(0, 600), st.integers(0, 40), st.integers(3000, 9000)), min_size=0, max_size=30
)


def install_index(path, records, mode, stale_sizes=None):
    ipath = path + ".index"
    if mode == "none":
        if os.path.exists(ipath):
            os.unlink(ipath)
    elif mode == "fresh":
        write_index_atomic(build_index(path), ipath)
    elif mode == "stale_other_size":  # the index of the file before one more record was appended
        offs = offsets_of(records + [b"x"])
        sizes = [len(r) + FRAME_OVERHEAD for r in records + [b"x"]]
        write_index_atomic(RecordIndex(np.array(offs, np.int64), np.array(sizes, np.int64)), ipath)
    elif mode == "stale_same_size":  # tiles the same size with other boundaries
        sizes = [len(r) + FRAME_OVERHEAD for r in records]
        for j in range(len(sizes) - 1):
            if sizes[j + 1] > FRAME_OVERHEAD:
                sizes[j] += 1
                sizes[j + 1] -= 1
                break
        offs = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes else np.zeros(0, np.int64)
        write_index_atomic(RecordIndex(offs, np.array(sizes, np.int64)), ipath)
    elif mode == "garbage":
        with open(ipath, "w") as f:
            f.write("this is not an index\n")


@SLOW
@given(
    files_sizes=st.lists(record_sizes, min_size=1, max_size=3),
    bundle=st.integers(16, 6000),
    mode=index_modes,
)
def test_exactly_once_over_sizes_bundles_and_indexes(files_sizes, bundle, mode):
    with tempfile.TemporaryDirectory() as d:
        expected = []
        for k, sizes in enumerate(files_sizes):
            records = payloads(sizes, seed=k)
            path = write_file(os.path.join(d, f"f{k}.tfrecord"), records, index=False)
            install_index(path, records, mode)
            expected += records
        out, metrics = read_with(os.path.join(d, "*.tfrecord"), d, desired_bundle_size=bundle)
        assert multiset(out["records"]) == multiset(expected)
        assert metrics[(NS, "records")] == len(expected)
        assert metrics[(NS, "bytes")] == sum(map(len, expected))
        if mode in ("stale_other_size", "garbage") and metrics[(NS, "restrictions")] > len(files_sizes):
            assert metrics[(NS, "stale_index")] > 0


@settings(max_examples=150, deadline=None)
@given(
    sizes=record_sizes,
    cut_fracs=st.lists(st.floats(0, 1), max_size=12),
    use_index=st.booleans(),
)
def test_exactly_once_at_arbitrary_cut_points(sizes, cut_fracs, use_index):
    """Any tiling of the file into ranges, including cuts inside headers and footers."""
    with tempfile.TemporaryDirectory() as d:
        records = payloads(sizes, seed=1)
        path = write_file(os.path.join(d, "a.tfrecord"), records, index=use_index)
        size = os.path.getsize(path)
        cuts = sorted({0, size, *(int(f * size) for f in cut_fracs)})
        got, dead = run_ranges(make_fn(index_pattern=None if use_index else False), path, cuts)
        assert Counter(got) == Counter(records)
        assert dead == []


@settings(max_examples=150, deadline=None)
@given(
    sizes=record_sizes,
    after=st.integers(0, 30),
    fraction=st.floats(0, 1),
    use_index=st.booleans(),
    claim_chunk=st.integers(1, 6),
)
def test_dynamic_split_mid_range_reads_each_record_once(sizes, after, fraction, use_index, claim_chunk):
    """``try_split`` while a range is being read: primary + residual = the whole range,
    including splits that land inside a chunk of records read ahead of their claim."""
    with tempfile.TemporaryDirectory() as d:
        records = payloads(sizes, seed=2)
        path = write_file(os.path.join(d, "a.tfrecord"), records, index=use_index)
        size = os.path.getsize(path)
        fn = make_fn(index_pattern=None if use_index else False, claim_chunk=claim_chunk)
        element = (path, size, "")
        tracker = fn.create_tracker(OffsetRange(0, size))
        got, residual = [], None
        for i, item in enumerate(fn.process(element, tracker)):
            got.append(item)
            if i == after:
                split = tracker.try_split(fraction)
                if split is not None:
                    residual = split[1]
        tracker.check_done()
        if residual is not None:
            more, _ = run_ranges(fn, path, [residual.start, residual.stop])
            got += more
        assert Counter(got) == Counter(records)


def test_empty_file_one_record_file_and_empty_records(tmp_path):
    write_file(str(tmp_path / "empty.tfrecord"), [])
    write_file(str(tmp_path / "one.tfrecord"), [b"only"])
    write_file(str(tmp_path / "zeros.tfrecord"), [b""] * 5)
    out, metrics = read_with(str(tmp_path / "*.tfrecord"), str(tmp_path), desired_bundle_size=7)
    assert multiset(out["records"]) == Counter({b"only": 1, b"": 5})
    assert metrics[(NS, "records")] == 6


@pytest.mark.parametrize("index", [True, False])
def test_records_larger_than_the_bundle_size(tmp_path, index):
    records = payloads([200_000, 5, 300_000, 0, 150_000], seed=3)
    write_file(str(tmp_path / "big.tfrecord"), records, index=index)
    out, metrics = read_with(str(tmp_path / "big.tfrecord"), str(tmp_path), desired_bundle_size=4096)
    assert multiset(out["records"]) == multiset(records)
    assert metrics[(NS, "restrictions")] > 100  # the file really was cut into many ranges


def test_a_real_split_is_processed_by_both_workers(tmp_path):
    records = payloads([1000] * 4000, seed=4)
    path = write_file(str(tmp_path / "one_big_file.tfrecord"), records)

    class TagWorker(beam.DoFn):
        def process(self, record):
            beam.metrics.Metrics.counter("worker", str(os.getpid())).inc()
            yield record

    def build(p):
        return {"records": p | ReadFromTFRecord(path, desired_bundle_size=64 << 10) | beam.ParDo(TagWorker())}

    out, metrics = run_pipeline(build, str(tmp_path), multi=True)
    assert multiset(out["records"]) == multiset(records)
    per_worker = {name: n for (ns, name), n in metrics.items() if ns == "worker"}
    assert len(per_worker) == 2, per_worker  # two worker processes read parts of one file
    assert all(n > 0 for n in per_worker.values())
    assert sum(per_worker.values()) == len(records)


# --------------------------------------------------------------------------- corruption


def corrupt_middle(path, records, k):
    """Flip a data byte of record k and a length byte of record k+1; returns the
    region [offset k, offset k+2) that no longer holds readable records."""
    offs = offsets_of(records)
    with open(path, "r+b") as f:
        f.seek(offs[k] + 12)
        b = f.read(1)
        f.seek(offs[k] + 12)
        f.write(bytes([b[0] ^ 0xFF]))
        f.seek(offs[k + 1])
        b = f.read(1)
        f.seek(offs[k + 1])
        f.write(bytes([b[0] ^ 0x01]))
    return offs[k], offs[k + 2]


@pytest.mark.parametrize("bundle", [50, 333, 1000, 1 << 20])
def test_dead_letter_reports_the_corrupt_middle_once_and_keeps_the_rest(tmp_path, bundle):
    records = payloads([100 + i for i in range(60)], seed=5)
    path = write_file(str(tmp_path / "bad.tfrecord"), records, index=False)
    start, end = corrupt_middle(path, records, 30)
    out, metrics = read_with(path, str(tmp_path), desired_bundle_size=bundle, on_corrupt="dead_letter")
    good = records[:30] + records[32:]
    assert multiset(out["records"]) == multiset(good)
    assert len(out["dead"]) == 1
    entry = out["dead"][0]
    assert (entry["path"], entry["start"], entry["end"]) == (path, start, end)
    assert "CRC32C" in entry["reason"]
    assert metrics[(NS, "corrupt_regions")] == 1


@settings(max_examples=200, deadline=None)
@given(
    cut_fracs=st.lists(st.floats(0, 1), max_size=10),
    k=st.integers(0, 17),
    use_index=st.booleans(),
    claim_chunk=st.integers(1, 4),
)
def test_dead_letter_exactly_once_at_any_cut_points(cut_fracs, k, use_index, claim_chunk):
    """Including a cut right after the last good record before the corruption: the
    range before the cut must report it, the range after must not skip it silently."""
    with tempfile.TemporaryDirectory() as d:
        records = payloads([40 + 7 * i for i in range(20)], seed=6)
        path = write_file(os.path.join(d, "bad.tfrecord"), records, index=use_index)
        start, end = corrupt_middle(path, records, k)
        size = os.path.getsize(path)
        offs = offsets_of(records)
        edge = [start, start + 1, start - 1, offs[k + 1]] if k > 0 else [start + 1]
        cuts = sorted({0, size, *(int(f * size) for f in cut_fracs), *(c for c in edge if 0 <= c <= size)})
        fn = make_fn(on_corrupt="dead_letter", index_pattern=None if use_index else False, claim_chunk=claim_chunk)
        got, dead = run_ranges(fn, path, cuts)
        assert Counter(got) == Counter(records[:k] + records[k + 2 :])
        assert [(e["start"], e["end"]) for e in dead] == [(start, end)]


@settings(max_examples=150, deadline=None)
@given(
    k=st.integers(0, 17),
    after=st.integers(0, 20),
    fraction=st.floats(0, 1),
    claim_chunk=st.integers(1, 5),
    use_index=st.booleans(),
)
def test_dead_letter_exactly_once_with_a_dynamic_split(k, after, fraction, claim_chunk, use_index):
    with tempfile.TemporaryDirectory() as d:
        records = payloads([40 + 7 * i for i in range(20)], seed=6)
        path = write_file(os.path.join(d, "bad.tfrecord"), records, index=use_index)
        start, end = corrupt_middle(path, records, k)
        size = os.path.getsize(path)
        fn = make_fn(on_corrupt="dead_letter", index_pattern=None if use_index else False, claim_chunk=claim_chunk)
        tracker = fn.create_tracker(OffsetRange(0, size))
        got, dead, residual = [], [], None
        for i, item in enumerate(fn.process((path, size, ""), tracker)):
            (dead.append(item.value) if isinstance(item, TaggedOutput) else got.append(item))
            if i == after:
                split = tracker.try_split(fraction)
                residual = split[1] if split else None
        tracker.check_done()
        if residual is not None:
            more, more_dead = run_ranges(fn, path, [residual.start, residual.stop])
            got, dead = got + more, dead + more_dead
        assert Counter(got) == Counter(records[:k] + records[k + 2 :])
        assert [(e["start"], e["end"]) for e in dead] == [(start, end)]


@pytest.mark.parametrize("cut", ["inside", "after_last_good"])
def test_fail_mode_raises_with_path_and_offset_even_at_a_range_edge(tmp_path, cut):
    records = payloads([100] * 20, seed=7)
    path = write_file(str(tmp_path / "bad.tfrecord"), records, index=False)
    offs = offsets_of(records)
    with open(path, "r+b") as f:  # break record 10's data CRC
        f.seek(offs[10] + 20)
        f.write(b"\x00\x01\x02")
    cuts = [0, offs[10] - 3, os.path.getsize(path)] if cut == "after_last_good" else [0, os.path.getsize(path)]
    with pytest.raises(CorruptRecordError) as err:
        run_ranges(make_fn(), path, cuts)
    assert err.value.path == path and err.value.offset == offs[10]


def test_fail_mode_fails_the_pipeline_naming_file_and_offset(tmp_path):
    records = payloads([100] * 20, seed=8)
    path = write_file(str(tmp_path / "bad.tfrecord"), records, index=False)
    offs = offsets_of(records)
    with open(path, "r+b") as f:
        f.seek(offs[12] + 30)
        f.write(b"\xff\xfe")
    with pytest.raises(Exception) as err:
        read_with(path, str(tmp_path), desired_bundle_size=500)
    assert path in str(err.value) and f"byte offset {offs[12]}" in str(err.value)


def test_truncated_last_record_goes_to_dead_letter(tmp_path):
    records = payloads([300] * 10, seed=9)
    path = write_file(str(tmp_path / "cut.tfrecord"), records, index=False)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 10)
    out, _ = read_with(path, str(tmp_path), desired_bundle_size=700, on_corrupt="dead_letter")
    assert multiset(out["records"]) == multiset(records[:-1])
    [entry] = out["dead"]
    assert entry["start"] == offsets_of(records)[-1] and entry["end"] == size - 10
    assert "truncated" in entry["reason"]


# --------------------------------------------------------------------------- vs Beam's reader


def test_same_output_as_beams_builtin_reader(tmp_path):
    plain = payloads(list(range(0, 5000, 37)), seed=10)
    write_file(str(tmp_path / "a.tfrecord"), plain)
    write_file(str(tmp_path / "b.tfrecord"), payloads([3, 0, 70000], seed=11), index=False)
    write_file(str(tmp_path / "c.tfrecord"), [])
    with tfio.RecordWriter(str(tmp_path / "d.tfrecord.gz")) as w:
        w.write_records(payloads([10, 20, 30], seed=12))

    def build(p):
        files = glob.glob(str(tmp_path / "*.tfrecord")) + glob.glob(str(tmp_path / "*.gz"))
        ours = [p | f"Ours{i}" >> ReadFromTFRecord(f, desired_bundle_size=1000) for i, f in enumerate(files)]
        beams = [p | f"Beam{i}" >> beam.io.ReadFromTFRecord(f) for i, f in enumerate(files)]
        return {"ours": ours | "FlattenOurs" >> beam.Flatten(), "beam": beams | "FlattenBeam" >> beam.Flatten()}

    out, _ = run_pipeline(build, str(tmp_path))
    assert len(out["ours"]) == len(plain) + 3 + 3
    assert multiset(out["ours"]) == multiset(out["beam"])


def test_reads_files_written_by_beams_builtin_sink(tmp_path):
    records = payloads([5, 500, 0, 5000] * 50, seed=13)
    prefix = str(tmp_path / "beamout")
    p = beam.Pipeline("DirectRunner")
    p | beam.Create(records) | beam.io.WriteToTFRecord(prefix, num_shards=2)
    p.run().wait_until_finish()
    out, _ = read_with(prefix + "*", str(tmp_path), desired_bundle_size=2048)
    assert multiset(out["records"]) == multiset(records)


# --------------------------------------------------------------------------- compressed


@pytest.mark.parametrize("kind,suffix", [("gzip", ".gz"), ("zlib", ".zz")])
def test_compressed_files_are_read_whole_once(tmp_path, kind, suffix):
    all_records = []
    for k in range(3):
        records = payloads([50 * (k + 1)] * (100 + k), seed=20 + k)
        with tfio.RecordWriter(str(tmp_path / f"c{k}.tfrecord{suffix}"), kind) as w:
            w.write_records(records)
        all_records += records
    out, metrics = read_with(str(tmp_path / f"*{suffix}"), str(tmp_path), desired_bundle_size=64)
    assert multiset(out["records"]) == multiset(all_records)
    assert metrics[(NS, "restrictions")] == 3  # one unsplittable restriction per file


def test_dead_letter_inside_a_gzip_stream(tmp_path):
    """Offsets of a compressed file are positions in the decompressed stream."""
    records = payloads([60] * 40, seed=31)
    raw = bytearray(b"".join(tfio.encode_frame(r) for r in records))
    offs = offsets_of(records)
    raw[offs[20] + 30] ^= 0xFF  # break record 20's data CRC
    (tmp_path / "bad.tfrecord.gz").write_bytes(gzip.compress(bytes(raw)))
    out, metrics = read_with(str(tmp_path / "bad.tfrecord.gz"), str(tmp_path), on_corrupt="dead_letter")
    assert multiset(out["records"]) == multiset(records[:20] + records[21:])
    assert [(e["start"], e["end"]) for e in out["dead"]] == [(offs[20], offs[21])]
    assert metrics[(NS, "corrupt_regions")] == 1


def test_gzip_with_explicit_compression_type_and_no_suffix(tmp_path):
    records = payloads([10] * 30, seed=30)
    raw = b"".join(tfio.encode_frame(r) for r in records)
    (tmp_path / "data.bin").write_bytes(gzip.compress(raw))
    out, _ = read_with(str(tmp_path / "data.bin"), str(tmp_path), compression_type="gzip")
    assert multiset(out["records"]) == multiset(records)


# --------------------------------------------------------------------------- output choices


def test_examples_metadata_batches_and_coder(tmp_path):
    path = str(tmp_path / "ex.tfrecord")
    with tfio.TFRecordWriter(path, index_path=path + ".index") as w:
        for i in range(200):
            w.write({"label": (i, "int"), "name": (f"n{i}", "byte")})
    records = [bytes(r) for r in tfio.tfrecord_iterator(path)]
    offs = offsets_of(records)

    def build(p):
        return {
            "examples": p
            | "Ex" >> ReadFromTFRecord(path, output="example", description={"label": "int"}, desired_bundle_size=300),
            "meta": p | "Meta" >> ReadFromTFRecord(path, with_metadata=True, desired_bundle_size=300),
            "batches": p | "Batch" >> ReadFromTFRecord(path, batch_size=16, desired_bundle_size=1000),
            "decoded": p | "Coder" >> ReadFromTFRecord(path, coder=_LengthCoder(), desired_bundle_size=500),
        }

    out, _ = run_pipeline(build, str(tmp_path))
    labels = sorted(int(e["label"][0]) for e in out["examples"])
    assert labels == list(range(200)) and all(set(e) == {"label"} for e in out["examples"])
    assert sorted((o, r) for _, o, r in out["meta"]) == sorted(zip(offs, records))
    assert all(pth == path for pth, _, _ in out["meta"])
    assert all(1 <= len(b) <= 16 for b in out["batches"])
    assert multiset(r for b in out["batches"] for r in b) == multiset(records)
    assert sorted(out["decoded"]) == sorted(len(r) for r in records)


class _LengthCoder(coders.Coder):
    """A non-bytes coder: the decoded value is the record's length."""

    def decode(self, encoded):
        return len(encoded)

    def encode(self, value):
        return b"x" * value

    def is_deterministic(self):
        return True


def test_bad_example_goes_to_dead_letter_with_offset(tmp_path):
    path = str(tmp_path / "mixed.tfrecord")
    good = tfio.serialize_example({"label": (1, "int")})
    write_file(path, [good, b"\xff\xff\xff not a proto", good])
    out, _ = read_with(path, str(tmp_path), output="example", on_corrupt="dead_letter")
    assert len(out["records"]) == 2
    [entry] = out["dead"]
    assert entry["start"] == len(good) + FRAME_OVERHEAD and "Example" in entry["reason"]


# --------------------------------------------------------------------------- ReadAll, options


def test_read_all_from_patterns_metadata_and_readable_files(tmp_path):
    recs_a = payloads([100] * 50, seed=40)
    recs_b = payloads([7] * 30, seed=41)
    write_file(str(tmp_path / "a.tfrecord"), recs_a)
    write_file(str(tmp_path / "b.tfrecord"), recs_b, index=False)
    pattern = str(tmp_path / "*.tfrecord")

    def build(p):
        patterns = p | "Patterns" >> beam.Create([pattern, str(tmp_path / "nothing-*.tfrecord")])
        return {
            "from_patterns": patterns | "ReadPatterns" >> ReadAllFromTFRecord(desired_bundle_size=500),
            "from_metadata": patterns | fileio.MatchAll() | "ReadMeta" >> ReadAllFromTFRecord(desired_bundle_size=500),
            "with_filename": patterns | "ReadNamed" >> ReadAllFromTFRecord(with_filename=True, desired_bundle_size=500),
            "from_readable": p
            | "P2" >> beam.Create([pattern])
            | "M2" >> fileio.MatchAll()
            | fileio.ReadMatches()
            | "ReadReadable" >> ReadAllFromTFRecord(desired_bundle_size=500),
        }

    out, _ = run_pipeline(build, str(tmp_path))
    for name in ("from_patterns", "from_metadata", "from_readable"):
        assert multiset(out[name]) == multiset(recs_a + recs_b), name
    named = Counter((os.path.basename(f), r) for f, r in out["with_filename"])
    assert named == Counter([("a.tfrecord", r) for r in recs_a] + [("b.tfrecord", r) for r in recs_b])


def test_validate_and_option_errors(tmp_path):
    with pytest.raises(IOError):
        ReadFromTFRecord(str(tmp_path / "missing-*.tfrecord"))
    ReadFromTFRecord(str(tmp_path / "missing-*.tfrecord"), validate=False)
    with pytest.raises(ValueError):
        ReadFromTFRecord(str(tmp_path / "x"), validate=False, on_corrupt="ignore")
    with pytest.raises(ValueError):
        ReadFromTFRecord(str(tmp_path / "x"), validate=False, output="arrow")
    with pytest.raises(ValueError):
        ReadFromTFRecord(str(tmp_path / "x"), validate=False, batch_size=0)


def test_explicit_index_pattern_is_used(tmp_path):
    records = payloads([1000] * 40, seed=50)
    path = write_file(str(tmp_path / "data.tfrecord"), records, index=False)
    os.makedirs(tmp_path / "idx")
    write_index_atomic(build_index(path), str(tmp_path / "idx" / "data.idx"))
    out, metrics = read_with(
        path, str(tmp_path), desired_bundle_size=3000, index_pattern=str(tmp_path / "idx" / "{stem}.idx")
    )
    assert multiset(out["records"]) == multiset(records)
    assert metrics[(NS, "stale_index")] == 0


def test_lazy_package_attribute():
    assert tfio.ReadFromTFRecord is ReadFromTFRecord
    assert tfio.ReadAllFromTFRecord is ReadAllFromTFRecord
    from tfrecord_io.beam.beam_sink import WriteToTFRecord

    assert tfio.WriteToTFRecord is WriteToTFRecord


GOLDEN_DIR = os.path.join(os.path.dirname(__file__), "golden")


@pytest.mark.skipif(
    not os.path.exists(os.path.join(GOLDEN_DIR, "manifest.json")), reason="golden files not in this checkout"
)
def test_reads_tensorflow_golden_files_plain_gzip_zlib(tmp_path):
    """With the committed TensorFlow golden files present: split reads of the plain file
    (1-byte cuts exercise resync through every frame) and whole reads of GZIP/ZLIB."""
    import base64
    import json

    manifest = json.load(open(os.path.join(GOLDEN_DIR, "manifest.json")))
    expected = [base64.b64decode(r["payload_b64"]) for r in manifest["records"]]
    for name in ("records.tfrecord", "records.tfrecord.gz", "records.tfrecord.zz"):
        out, _ = read_with(os.path.join(GOLDEN_DIR, name), str(tmp_path), desired_bundle_size=64, index_pattern=False)
        assert multiset(out["records"]) == multiset(expected), name
