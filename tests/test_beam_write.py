"""WriteToTFRecord on real runners: sharding, indexes, atomicity, determinism, and
files that Beam's built-in reader and the ``tfrecord`` package read back."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam import coders
from apache_beam.io.tfrecordio import _TFRecordUtil
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfrecord_io as tfio
from tfrecord_io.beam_io import WriteToTFRecord, shard_name
from tfrecord_io.index import build_index, load_index

from tests.beam_support import multiset, run_pipeline

NS = "tfrecord_io"


def payloads(n, seed=0, low=0, high=400):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=int(k), dtype=np.uint8).tobytes() for k in rng.integers(low, high, size=n)]


def write(records, prefix, workdir, multi=False, **kwargs):
    def build(p):
        return {"shards": p | beam.Create(records, reshuffle=False) | WriteToTFRecord(prefix, **kwargs)}

    out, metrics = run_pipeline(build, workdir, multi=multi)
    return sorted(out["shards"], key=lambda s: s["path"]), metrics


def read_back(paths):
    return [bytes(r) for p in paths for r in tfio.tfrecord_iterator(p)]


def beam_frames(records):
    """Frames as Beam's own (TensorFlow-compatible) TFRecord writer encodes them."""
    import io

    buf = io.BytesIO()
    for r in records:
        _TFRecordUtil.write_record(buf, r)
    return buf.getvalue()


# Frames TensorFlow 2.21 wrote for these payloads (tests/golden/records.tfrecord of the
# golden-files work, records raw/empty, raw/one_zero_byte, raw/ff_64, raw/length_like).
TF_GOLDEN = [
    (b"", "000000000000000029039807d8ea82a2"),
    (b"\x00", "01000000000000000175de4100d28f2549"),
    (b"\xff" * 64, "40000000000000002817f495" + "ff" * 64 + "724a4f3f"),
    (b"\x05" + b"\x00" * 7, "0800000000000000ff86240f0500000000000000eab2043e"),
]


def test_single_shard_is_byte_identical_to_tensorflow_golden_frames(tmp_path):
    payloads_ = [p for p, _ in TF_GOLDEN]
    [shard], _ = write(payloads_, str(tmp_path / "golden"), str(tmp_path), shard_name_template="")
    assert open(shard["path"], "rb").read() == bytes.fromhex("".join(h for _, h in TF_GOLDEN))
    assert load_index(shard["index_path"]).to_text() == "0 16\n16 17\n33 80\n113 24\n"


GOLDEN_DIR = os.path.join(os.path.dirname(__file__), "golden")


@pytest.mark.skipif(
    not os.path.exists(os.path.join(GOLDEN_DIR, "manifest.json")), reason="golden files not in this checkout"
)
def test_all_golden_payloads_rewritten_byte_identical(tmp_path):
    """With the committed TensorFlow golden files present: every payload, written by
    the sink as one shard in order, gives TensorFlow's file byte for byte."""
    import base64
    import json

    manifest = json.load(open(os.path.join(GOLDEN_DIR, "manifest.json")))
    payloads_ = [base64.b64decode(r["payload_b64"]) for r in manifest["records"]]
    [shard], _ = write(payloads_, str(tmp_path / "all"), str(tmp_path), shard_name_template="")
    assert open(shard["path"], "rb").read() == open(os.path.join(GOLDEN_DIR, "records.tfrecord"), "rb").read()


def test_sharded_write_with_indexes_and_result_dicts(tmp_path):
    records = payloads(3000, seed=1)
    prefix = str(tmp_path / "out" / "data")
    os.makedirs(tmp_path / "out")
    shards, metrics = write(records, prefix, str(tmp_path), num_shards=4)
    assert [s["path"] for s in shards] == [f"{prefix}-{i:05d}-of-00004.tfrecord" for i in range(4)]
    assert sorted(os.listdir(tmp_path / "out")) == sorted(
        [os.path.basename(s["path"]) for s in shards] + [os.path.basename(s["path"]) + ".index" for s in shards]
    )  # and no temporary directory left behind
    for s in shards:
        assert s["index_path"] == s["path"] + ".index"
        index = load_index(s["index_path"])
        assert index.to_text() == build_index(s["path"]).to_text()
        assert s["records"] == len(index) and s["bytes"] == os.path.getsize(s["path"])
        content = [bytes(r) for r in tfio.tfrecord_iterator(s["path"])]
        # the same frames Beam's TensorFlow-compatible writer makes for these records
        assert open(s["path"], "rb").read() == beam_frames(content)
        # stable shard key: each record is in the shard its CRC32C names
        assert all(tfio.crc.crc32c(r) % 4 == int(s["path"][-23:-18]) for r in content)
    assert multiset(read_back([s["path"] for s in shards])) == multiset(records)
    assert metrics[(NS, "records_written")] == len(records)


def test_output_reads_back_with_beams_builtin_reader_and_the_tfrecord_package(tmp_path):
    records = payloads(500, seed=2)
    prefix = str(tmp_path / "x")
    shards, _ = write(records, prefix, str(tmp_path), num_shards=3)

    def build(p):
        return {"beam": p | beam.io.ReadFromTFRecord(prefix + "-*-of-00003.tfrecord")}

    out, _ = run_pipeline(build, str(tmp_path))
    assert multiset(out["beam"]) == multiset(records)

    # The tfrecord package pulls in torch: run it in its own interpreter.
    script = textwrap.dedent(
        """
        import sys
        from tfrecord.reader import tfrecord_iterator
        for path in sys.argv[1:]:
            for rec in tfrecord_iterator(path, path + ".index"):
                sys.stdout.write("R" + bytes(rec).hex() + "\\n")
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, *[s["path"] for s in shards]], capture_output=True, text=True, check=True
    )
    got = [bytes.fromhex(line[1:]) for line in proc.stdout.splitlines()]
    assert multiset(got) == multiset(records)


def test_tfrecord_package_reads_shards_by_its_index(tmp_path):
    """The sidecar index drives the tfrecord package's sharded reads (offset ranges)."""
    records = payloads(200, seed=3, low=1)
    prefix = str(tmp_path / "y")
    [shard], _ = write(records, prefix, str(tmp_path), num_shards=1)
    script = textwrap.dedent(
        """
        import sys
        from tfrecord.reader import tfrecord_iterator
        path = sys.argv[1]
        n = 0
        for i in range(3):
            n += sum(1 for _ in tfrecord_iterator(path, path + ".index", shard=(i, 3)))
        print(n)
        """
    )
    proc = subprocess.run([sys.executable, "-c", script, shard["path"]], capture_output=True, text=True, check=True)
    assert int(proc.stdout) == len(records)


def test_same_input_same_bytes(tmp_path):
    records = payloads(2000, seed=4)
    contents = []
    for run in range(2):
        prefix = str(tmp_path / f"run{run}" / "d")
        os.makedirs(os.path.dirname(prefix))
        for num_shards in (5, 0):
            shards, _ = write(records, prefix + str(num_shards), str(tmp_path), num_shards=num_shards)
            contents.append([(os.path.basename(s["path"]), open(s["path"], "rb").read()) for s in shards])
    assert contents[0] == contents[2] and contents[1] == contents[3]


def test_rerun_with_another_shard_count_replaces_the_output(tmp_path):
    prefix = str(tmp_path / "d")
    (tmp_path / "d-unrelated.txt").write_text("keep me")
    write(payloads(300, seed=5), prefix, str(tmp_path), num_shards=4)
    second = payloads(100, seed=6)
    shards, _ = write(second, prefix, str(tmp_path), num_shards=2)
    names = sorted(os.listdir(tmp_path))
    assert [n for n in names if n.endswith(".tfrecord")] == ["d-00000-of-00002.tfrecord", "d-00001-of-00002.tfrecord"]
    assert [n for n in names if n.endswith(".index")] == [n + ".index" for n in names if n.endswith(".tfrecord")]
    assert "d-unrelated.txt" in names
    assert multiset(read_back([s["path"] for s in shards])) == multiset(second)


class _FailOn(coders.Coder):
    """Encodes bytes as themselves, and raises on one chosen record: an injected failure
    in the middle of writing a shard."""

    def __init__(self, poison):
        self._poison = poison

    def encode(self, value):
        if value == self._poison:
            raise RuntimeError("injected failure while writing")
        return value

    def decode(self, encoded):
        return encoded

    def is_deterministic(self):
        return True


@pytest.mark.parametrize(
    "options,wrote_before_failing",
    [({"num_shards": 3}, False), ({"max_records_per_shard": 500}, True)],
)
def test_failed_write_leaves_nothing_under_final_names_and_keeps_old_output(tmp_path, options, wrote_before_failing):
    prefix = str(tmp_path / "out")
    old, _ = write(payloads(50, seed=7), prefix, str(tmp_path), num_shards=2)
    old_bytes = {s["path"]: open(s["path"], "rb").read() for s in old}
    records = payloads(4000, seed=8, low=1)
    poison = records[3000]
    with pytest.raises(Exception, match="injected failure"):
        write(records, prefix, str(tmp_path), coder=_FailOn(poison), **options)
    finals = sorted(glob.glob(prefix + "*"))
    assert finals == sorted(list(old_bytes) + [p + ".index" for p in old_bytes])
    assert all(open(p, "rb").read() == b for p, b in old_bytes.items())  # the old output is untouched
    # with rolling shards, five whole shards (records 0..2499) were closed before the
    # failure (the sixth, still open, was aborted): they exist only in the hidden
    # temporary directory
    temps = glob.glob(str(tmp_path / ".tfrecord-io-temp-*" / "*.tfrecord"))
    assert len(temps) == (5 if wrote_before_failing else 0)


def test_failed_write_in_a_fresh_directory_leaves_no_final_file(tmp_path):
    prefix = str(tmp_path / "fresh")
    records = payloads(1000, seed=9, low=1)
    with pytest.raises(Exception, match="injected failure"):
        write(records, prefix, str(tmp_path), num_shards=2, coder=_FailOn(records[700]))
    assert glob.glob(prefix + "*") == []


@pytest.mark.parametrize("limit", [{"max_records_per_shard": 70}, {"max_bytes_per_shard": 10_000}])
def test_max_records_and_bytes_per_shard(tmp_path, limit):
    records = payloads(1000, seed=10, high=200)
    prefix = str(tmp_path / "m")
    shards, _ = write(records, prefix, str(tmp_path), **limit)
    n = len(shards)
    assert n >= 2 and [s["path"] for s in shards] == [f"{prefix}-{i:05d}-of-{n:05d}.tfrecord" for i in range(n)]
    for s in shards:
        if "max_records_per_shard" in limit:
            assert s["records"] <= 70
        else:
            assert s["bytes"] <= 10_000
    assert sum(s["records"] for s in shards) == len(records)
    assert multiset(read_back([s["path"] for s in shards])) == multiset(records)


def test_gzip_shards_have_no_index_and_read_back(tmp_path):
    records = payloads(300, seed=11)
    prefix = str(tmp_path / "z")
    shards, _ = write(records, prefix, str(tmp_path), num_shards=2, file_name_suffix=".tfrecord.gz")
    assert all(s["index_path"] is None and s["path"].endswith(".gz") for s in shards)
    assert glob.glob(str(tmp_path / "*.index")) == []
    assert all(s["bytes"] == os.path.getsize(s["path"]) for s in shards)
    assert multiset(read_back([s["path"] for s in shards])) == multiset(records)

    def build(p):
        return {"beam": p | beam.io.ReadFromTFRecord(prefix + "*")}

    out, _ = run_pipeline(build, str(tmp_path))
    assert multiset(out["beam"]) == multiset(records)


def test_empty_input_still_writes_every_shard(tmp_path):
    shards, _ = write([], str(tmp_path / "e"), str(tmp_path), num_shards=3)
    assert [s["records"] for s in shards] == [0, 0, 0]
    assert all(os.path.getsize(s["path"]) == 0 and os.path.getsize(s["index_path"]) == 0 for s in shards)
    [one], _ = write([], str(tmp_path / "f"), str(tmp_path))
    assert one["path"].endswith("f-00000-of-00001.tfrecord") and one["records"] == 0


def test_single_file_template_and_custom_coder(tmp_path):
    prefix = str(tmp_path / "single")
    [shard], _ = write(["a", "bb", "ccc"], prefix, str(tmp_path), shard_name_template="", coder=coders.StrUtf8Coder())
    assert shard["path"] == prefix + ".tfrecord"
    assert Counter(read_back([shard["path"]])) == Counter([b"a", b"bb", b"ccc"])


def test_write_with_two_workers(tmp_path):
    records = payloads(5000, seed=12)
    shards, _ = write(records, str(tmp_path / "mp"), str(tmp_path), multi=True, num_shards=4)
    assert len(shards) == 4
    assert multiset(read_back([s["path"] for s in shards])) == multiset(records)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    sizes=st.lists(st.integers(0, 3000), max_size=60),
    num_shards=st.integers(0, 6),
)
def test_roundtrip_property(sizes, num_shards):
    rng = np.random.default_rng(len(sizes))
    records = [rng.integers(0, 256, size=n, dtype=np.uint8).tobytes() for n in sizes]
    with tempfile.TemporaryDirectory() as d:
        shards, _ = write(records, os.path.join(d, "p"), d, num_shards=num_shards)
        if num_shards:
            assert len(shards) == num_shards
        assert sum(s["records"] for s in shards) == len(records)
        assert multiset(read_back([s["path"] for s in shards])) == multiset(records)
        for s in shards:
            assert load_index(s["index_path"]).to_text() == build_index(s["path"]).to_text()


def test_option_errors(tmp_path):
    with pytest.raises(ValueError):
        WriteToTFRecord(str(tmp_path / "a"), num_shards=2, max_records_per_shard=5)
    with pytest.raises(ValueError):
        WriteToTFRecord(str(tmp_path / "a"), shard_name_template="-NNNN")
    with pytest.raises(ValueError):
        WriteToTFRecord(str(tmp_path / "a"), num_shards=-1)
    assert shard_name("p", ".t", "-SSSSS-of-NNNNN", 3, 12) == "p-00003-of-00012.t"
