"""WriteToTFRecord on real runners: sharding, indexes, atomicity, determinism, and
files that Beam's built-in reader and the ``tfrecord`` package read back."""

from __future__ import annotations

import glob
import gzip
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import zlib
from collections import Counter

import apache_beam as beam
import numpy as np
import pytest
from apache_beam import coders
from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.tfrecordio import _TFRecordUtil
from apache_beam.metrics import Metrics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfrecord_io as tfio
from tfrecord_io.beam.beam_io import WriteToTFRecord, shard_name
from tfrecord_io.format.index import build_index, load_index

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
    assert [s["path"] for s in shards] == [f"{prefix}-{i:05d}-of-00004" for i in range(4)]  # Beam's names
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
    assert multiset(read_back([s["path"] for s in shards])) == multiset(records)
    assert metrics[(NS, "records_written")] == len(records)
    # dealt round-robin: one instance of the dealing step leaves at most one record between shards
    counts = [s["records"] for s in shards]
    assert max(counts) - min(counts) <= 4, counts


def test_output_reads_back_with_beams_builtin_reader_and_the_tfrecord_package(tmp_path):
    records = payloads(500, seed=2)
    prefix = str(tmp_path / "x")
    shards, _ = write(records, prefix, str(tmp_path), num_shards=3)

    def build(p):
        return {"beam": p | beam.io.ReadFromTFRecord(prefix + "-*-of-00003")}

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


def test_same_input_same_bytes_with_bundle_files_and_the_same_records_with_a_shard_count(tmp_path):
    """``num_shards=0``: the same bundles give the same names and bytes. ``num_shards=5``:
    which shard a record lands in is not promised (the deal starts at a random shard, as
    Beam's sink does), but every record is written once and the shards are even."""
    records = payloads(2000, seed=4)
    bundle_files, dealt = [], []
    for run in range(2):
        prefix = str(tmp_path / f"run{run}" / "d")
        os.makedirs(os.path.dirname(prefix))
        shards, _ = write(records, prefix + "0", str(tmp_path), num_shards=0)
        bundle_files.append([(os.path.basename(s["path"]), open(s["path"], "rb").read()) for s in shards])
        shards, _ = write(records, prefix + "5", str(tmp_path), num_shards=5)
        dealt.append([s["records"] for s in shards])
        assert multiset(read_back([s["path"] for s in shards])) == multiset(records)
    assert bundle_files[0] == bundle_files[1]
    assert all(sorted(counts) == [400] * 5 for counts in dealt), dealt  # one bundle: exactly even


def test_rerun_with_another_shard_count_replaces_the_output(tmp_path):
    prefix = str(tmp_path / "d")
    (tmp_path / "d-unrelated.txt").write_text("keep me")
    write(payloads(300, seed=5), prefix, str(tmp_path), num_shards=4)
    second = payloads(100, seed=6)
    shards, _ = write(second, prefix, str(tmp_path), num_shards=2)
    names = sorted(os.listdir(tmp_path))
    data = [n for n in names if n.startswith("d-0") and not n.endswith(".index")]
    assert data == ["d-00000-of-00002", "d-00001-of-00002"]
    assert [n for n in names if n.endswith(".index")] == [n + ".index" for n in data]
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
    assert n >= 2 and [s["path"] for s in shards] == [f"{prefix}-{i:05d}-of-{n:05d}" for i in range(n)]
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
    assert one["path"].endswith("f-00000-of-00001") and one["records"] == 0


def test_single_file_template_and_custom_coder(tmp_path):
    prefix = str(tmp_path / "single")
    [shard], _ = write(["a", "bb", "ccc"], prefix, str(tmp_path), shard_name_template="", coder=coders.StrUtf8Coder())
    assert shard["path"] == prefix  # exactly the prefix, as Beam's sink
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


# ---------------------------------------------------------------------- names and compression as Beam's sink

NAMING_CASES = [
    # (prefix, kwargs): every file_path_prefix / file_name_suffix / shard_name_template /
    # compression_type shape Beam's WriteToTFRecord takes
    ("data", {}),
    ("data", {"num_shards": 3}),
    ("data", {"file_name_suffix": ".tfrecord", "num_shards": 2}),
    ("data", {"file_name_suffix": ".tfrecord.gz", "num_shards": 2}),
    ("data", {"file_name_suffix": ".tfrecord.gz"}),  # num_shards=0, GZIP
    ("data", {"file_name_suffix": ".tfrecord.deflate", "num_shards": 2}),
    ("data.gz", {"shard_name_template": ""}),  # the idiom of issue #24: exactly out/data.gz, GZIP
    ("data", {"file_name_suffix": ".gz", "shard_name_template": ""}),
    ("data.deflate", {"shard_name_template": ""}),  # Beam's DEFLATE: a zlib stream
    ("data", {"shard_name_template": ""}),
    ("data", {"shard_name_template": "_SSS_of_NNN", "file_name_suffix": ".rec", "num_shards": 2}),
    ("data", {"shard_name_template": "-SS", "num_shards": 2}),
    ("data", {"shard_name_template": "-SSSSS-of-NNNNN-NNNNN", "num_shards": 2}),  # Beam fills every run of N
    ("data", {"shard_name_template": "-SS-SSS-of-NN", "num_shards": 2}),  # ... every "SS": data-01-01S-of-02
    ("data", {"shard_name_template": "-SS-SS-of-N-NN", "num_shards": 2}),  # ... every "N": data-01-01-of-2-22
    ("data.gz", {"num_shards": 2}),  # compression from the prefix when the suffix says nothing
    ("data", {"compression_type": "gzip", "num_shards": 2}),
    ("data", {"compression_type": CompressionTypes.DEFLATE, "num_shards": 2}),  # Beam's own constant
    ("data", {"compression_type": "deflate"}),
    ("data", {"compression_type": "zlib", "num_shards": 2}),  # ours' name for Beam's DEFLATE
    ("data.gz", {"compression_type": "uncompressed", "shard_name_template": ""}),
    ("data.deflate", {"compression_type": CompressionTypes.UNCOMPRESSED, "num_shards": 2}),
]

# compression_type as ours takes it -> as Beam's takes it (CompressionTypes; no ZLIB there)
BEAM_COMPRESSION = {
    "gzip": CompressionTypes.GZIP,
    "deflate": CompressionTypes.DEFLATE,
    "zlib": CompressionTypes.DEFLATE,
    "uncompressed": CompressionTypes.UNCOMPRESSED,
}


def _kind_of(path):
    head = open(path, "rb").read(2)
    if head == b"\x1f\x8b":
        return "gzip"
    if len(head) == 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0:
        return "zlib"
    return "plain"


@pytest.mark.parametrize("prefix_name,kwargs", NAMING_CASES)
def test_names_and_compression_are_beams(tmp_path, prefix_name, kwargs):
    """Each combination written by Beam's sink and by ours: the same file names (ours adds
    an index beside each uncompressed shard, on purpose), the same compression, and each
    reader reads the other's files back."""
    records = payloads(40, seed=20, low=1)
    beam_kwargs = dict(kwargs)
    if isinstance(beam_kwargs.get("compression_type"), str):
        beam_kwargs["compression_type"] = BEAM_COMPRESSION[beam_kwargs["compression_type"]]
    theirs_dir, ours_dir = tmp_path / "beam", tmp_path / "ours"
    theirs_dir.mkdir()
    ours_dir.mkdir()

    def build(p):
        data = p | beam.Create(records, reshuffle=False)
        data | "Beam" >> beam.io.WriteToTFRecord(str(theirs_dir / prefix_name), **beam_kwargs)
        return {"ours": data | "Ours" >> WriteToTFRecord(str(ours_dir / prefix_name), **kwargs)}

    out, _ = run_pipeline(build, str(tmp_path))
    theirs = sorted(os.listdir(theirs_dir))
    ours = sorted(n for n in os.listdir(ours_dir) if not n.endswith(".index"))
    if not kwargs.get("num_shards"):  # num_shards=0: the runner decides; here one bundle, so one file each
        assert len(theirs) == 1
    assert theirs == ours
    if kwargs.get("shard_name_template") == "":
        assert ours == [prefix_name + kwargs.get("file_name_suffix", "")]
    for name in ours:
        mine = ours_dir / name
        assert _kind_of(mine) == _kind_of(theirs_dir / (theirs[0] if len(theirs) == 1 else name))
        index = str(mine) + ".index"
        assert os.path.exists(index) == (_kind_of(mine) == "plain")
    # each reads the other's, told the compression the bytes have (a name like
    # data.gz-00000-of-00002 is GZIP but ends in no suffix AUTO knows, for Beam's reader too)
    compression = {
        "gzip": CompressionTypes.GZIP,
        "zlib": CompressionTypes.DEFLATE,
        "plain": CompressionTypes.UNCOMPRESSED,
    }[_kind_of(ours_dir / ours[0])]

    def read(p):
        return {
            "beam_reads_ours": p
            | "ReadOurs" >> beam.io.ReadFromTFRecord(str(ours_dir / ours[0]), compression_type=compression),
            "ours_reads_beams": p
            | "ReadTheirs"
            >> tfio.ReadFromTFRecord(str(theirs_dir / (prefix_name + "*")), compression_type=compression),
        }

    got, _ = run_pipeline(read, str(tmp_path))
    assert multiset(got["ours_reads_beams"]) == multiset(records)
    kind = _kind_of(ours_dir / ours[0])
    first = [bytes(r) for r in tfio.tfrecord_iterator(str(ours_dir / ours[0]), compression_type=kind)]
    assert first and multiset(got["beam_reads_ours"]) == multiset(first)
    assert sum(s["records"] for s in out["ours"]) == len(records)


@pytest.mark.parametrize(
    "prefix_name,kwargs",
    [
        ("data", {"file_name_suffix": ".gz"}),
        ("data", {"file_name_suffix": ".gz", "num_shards": 2}),
        ("data.gz", {"shard_name_template": ""}),
        ("data", {"compression_type": "deflate", "num_shards": 2}),
    ],
)
def test_empty_compressed_output_is_beams(tmp_path, prefix_name, kwargs):
    """No records: the same names as Beam's sink, each a valid empty stream of the same
    compression (not a 0-byte file), and the same bytes on a second run (the GZIP header
    once held the temporary file's random name)."""
    beam_kwargs = dict(kwargs)
    if isinstance(beam_kwargs.get("compression_type"), str):
        beam_kwargs["compression_type"] = BEAM_COMPRESSION[beam_kwargs["compression_type"]]
    dirs = [tmp_path / "beam", tmp_path / "ours", tmp_path / "ours-again"]
    for d in dirs:
        d.mkdir()

    def build(p):
        empty = p | beam.Create([], reshuffle=False).with_output_types(bytes)
        empty | "Beam" >> beam.io.WriteToTFRecord(str(dirs[0] / prefix_name), **beam_kwargs)
        empty | "Ours" >> WriteToTFRecord(str(dirs[1] / prefix_name), **kwargs)
        return {"again": empty | "Again" >> WriteToTFRecord(str(dirs[2] / prefix_name), **kwargs)}

    run_pipeline(build, str(tmp_path))
    theirs, ours, again = (sorted(os.listdir(d)) for d in dirs)
    assert theirs == ours == again and len(ours) == kwargs.get("num_shards", 1)
    for name in ours:
        kind = _kind_of(dirs[0] / name)
        assert kind != "plain" and _kind_of(dirs[1] / name) == kind
        data = open(dirs[1] / name, "rb").read()
        assert (gzip.decompress(data) if kind == "gzip" else zlib.decompress(data)) == b""
        assert data == open(dirs[2] / name, "rb").read() and b"tfrecord" not in data
        assert list(tfio.tfrecord_iterator(str(dirs[0] / name), compression_type=kind)) == []


def test_compressions_no_tfrecord_reader_knows_are_refused(tmp_path):
    for name in ("data.bz2", "data.zst", "data.xz"):
        with pytest.raises(ValueError, match="TFRecord readers cannot read"):
            WriteToTFRecord(str(tmp_path / name), shard_name_template="")
    with pytest.raises(ValueError, match="exactly one file"):
        WriteToTFRecord(str(tmp_path / "data"), shard_name_template="", num_shards=3)  # Beam: silently one file


@pytest.mark.parametrize("suffix,kind", [(".gzip", "gzip"), (".zz", "zlib"), (".zlib", "zlib"), (".ZZ", "zlib")])
def test_suffixes_only_our_readers_take_as_compressed_need_a_compression_type(tmp_path, suffix, kind):
    """Beam's AUTO writes data.zz (.zlib, .gzip) uncompressed; tfrecord-io's readers read
    those names as compressed. AUTO refuses them rather than pick one side; an explicit
    compression_type writes either, and our readers read the compressed one by its name."""
    assert CompressionTypes.detect_compression_type("data" + suffix) == CompressionTypes.UNCOMPRESSED
    with pytest.raises(ValueError, match=f"ending in {re.escape(suffix.lower())} uncompressed.*set compression_type"):
        WriteToTFRecord(str(tmp_path / "data"), file_name_suffix=suffix, shard_name_template="")
    [shard], _ = write(
        [b"a", b"b"],
        str(tmp_path / "data"),
        str(tmp_path),
        file_name_suffix=suffix,
        shard_name_template="",
        compression_type=kind,
    )
    assert shard["path"] == str(tmp_path / "data") + suffix and _kind_of(shard["path"]) == kind
    assert read_back([shard["path"]]) == [b"a", b"b"]  # AUTO by the name
    [plain], _ = write(
        [b"c"],
        str(tmp_path / "plain"),
        str(tmp_path),
        file_name_suffix=suffix,
        shard_name_template="",
        compression_type=CompressionTypes.UNCOMPRESSED,
    )
    assert _kind_of(plain["path"]) == "plain" and plain["index_path"] == plain["path"] + ".index"


def test_where_names_differ_from_beams_on_purpose(tmp_path):
    """A ``%`` in the template is written as it is (Beam's %-formatting fails on it at
    finalize, after writing everything). With the default suffix the ``.index`` sidecars
    match ``prefix*``: our reader skips them, Beam's reads them as records and fails; a
    ``file_name_suffix`` keeps them out of ``prefix*<suffix>``."""
    [shard], _ = write([b"x"], str(tmp_path / "pct"), str(tmp_path), shard_name_template="-SS%", num_shards=1)
    assert shard["path"] == str(tmp_path / "pct-00%")
    with pytest.raises(Exception, match="format"):
        run_pipeline(
            lambda p: {
                "x": p | beam.Create([b"x"]) | beam.io.WriteToTFRecord(str(tmp_path / "b"), shard_name_template="-SS%")
            },
            str(tmp_path),
        )
    records = payloads(30, seed=22, low=1)
    write(records, str(tmp_path / "out" / "part"), str(tmp_path), num_shards=2)
    write(records, str(tmp_path / "out" / "named"), str(tmp_path), num_shards=2, file_name_suffix=".tfrecord")
    assert len(glob.glob(str(tmp_path / "out" / "part*"))) == 4  # two shards, two indexes

    def ours(p):
        return {"r": p | tfio.ReadFromTFRecord(str(tmp_path / "out" / "part*"))}

    assert multiset(run_pipeline(ours, str(tmp_path))[0]["r"]) == multiset(records)
    with pytest.raises(ValueError, match="Not a valid TFRecord"):  # Beam's reader on an index file
        run_pipeline(lambda p: {"r": p | beam.io.ReadFromTFRecord(str(tmp_path / "out" / "part*"))}, str(tmp_path))

    def theirs(p):
        return {"r": p | beam.io.ReadFromTFRecord(str(tmp_path / "out" / "named*.tfrecord"))}

    assert multiset(run_pipeline(theirs, str(tmp_path))[0]["r"]) == multiset(records)


@pytest.mark.parametrize("distinct", [1, 4, 1000])
def test_fixed_shards_are_even_whatever_the_records_hold(tmp_path, distinct):
    """Repeated records are normal: 4,000 records with 1, 4 or 1000 distinct contents all
    spread evenly (a hash of the bytes put every copy of a record in one shard)."""
    contents = payloads(distinct, seed=21, low=5)
    records = [contents[i % distinct] for i in range(4000)]
    shards, _ = write(records, str(tmp_path / "even"), str(tmp_path), num_shards=4)
    counts = [s["records"] for s in shards]
    assert sum(counts) == 4000 and max(counts) - min(counts) <= 4, counts
    assert multiset(read_back([s["path"] for s in shards])) == multiset(records)


class _CountBundles(beam.DoFn):
    """Passes records on and counts its bundles: fused with the sink's dealing step, it
    sees the same bundles."""

    def __init__(self):
        self._bundles = Metrics.counter("test", "bundles")

    def process(self, element):
        yield element

    def finish_bundle(self):
        self._bundles.inc()


def test_fixed_shards_are_even_over_many_small_bundles_of_one_record(tmp_path):
    """Runners cut the input into bundles (Flink: 1,000 records each by default). 32
    bundles of ~801 copies of one record, 16 shards: every shard within 1% of the mean.
    (Starting each bundle at the shard its first record's CRC picked gave that one shard
    a record more per bundle, ~1.9% over the mean; on 32 threads each bundle is a new
    instance of the dealing step, so this checks the random start, not only the deal
    going on across one instance's bundles.)"""
    records = [b"one record, repeated"] * (32 * 801)

    def build(p):
        data = p | beam.Create(records) | beam.ParDo(_CountBundles())
        return {"shards": data | WriteToTFRecord(str(tmp_path / "s"), num_shards=16)}

    flags = ["--direct_running_mode=multi_threading", "--direct_num_workers=32"]
    out, metrics = run_pipeline(build, str(tmp_path), flags=flags)
    assert metrics[("test", "bundles")] >= 32
    counts = [s["records"] for s in sorted(out["shards"], key=lambda s: s["path"])]
    mean = len(records) / 16
    assert len(counts) == 16 and sum(counts) == len(records)
    assert all(abs(n - mean) <= 0.01 * mean for n in counts), counts


def test_shard_batches_go_where_the_caller_placed_them(tmp_path):
    from tfrecord_io.beam.beam_sink import WriteShardBatchesToTFRecord

    batches = [(0, [b"a", b"b"]), (2, [b"c"]), (0, [b"d"])]

    def build(p):
        return {"shards": p | beam.Create(batches) | WriteShardBatchesToTFRecord(str(tmp_path / "s"), 3)}

    out, _ = run_pipeline(build, str(tmp_path))
    shards = sorted(out["shards"], key=lambda s: s["path"])
    assert [os.path.basename(s["path"]) for s in shards] == [f"s-0000{i}-of-00003" for i in range(3)]
    assert [sorted(read_back([s["path"]])) for s in shards] == [[b"a", b"b", b"d"], [], [b"c"]]
    with pytest.raises(Exception, match="not in 0..2"):
        run_pipeline(
            lambda p: {"x": p | beam.Create([(3, [b"x"])]) | WriteShardBatchesToTFRecord(str(tmp_path / "t"), 3)},
            str(tmp_path),
        )


def test_a_finalize_run_again_after_failing_part_way_keeps_every_shard(tmp_path):
    """A runner may retry the finalize step after it renamed some files and failed (Spark
    does): the retry finishes the renames and never deletes a shard the first attempt
    already moved into place."""
    from tfrecord_io.beam.beam_sink import _finalize, _rename, _WriteSpec

    spec = _WriteSpec(str(tmp_path / ".temp"), "", True)
    results = []
    for shard in range(3):
        writer, path, index_path = spec.open(f"shard-{shard}.tfrecord")
        for i in range(5):
            writer.write_record(f"shard {shard} record {i}".encode())
        writer.close()
        results.append(spec.result(writer, path, index_path, (shard, 0)))
    prefix, suffix, template = str(tmp_path / "out" / "part"), ".tfrecord", "-SSSSS-of-NNNNN"
    os.makedirs(tmp_path / "out")
    # The first attempt moved shard 0 and shard 1's index, then failed.
    first = shard_name(prefix, suffix, template, 0, 3)
    _rename(results[0]["temp_index_path"], first + ".index")
    _rename(results[0]["temp_path"], first)
    _rename(results[1]["temp_index_path"], shard_name(prefix, suffix, template, 1, 3) + ".index")
    outputs = list(_finalize(None, results, spec, prefix, suffix, template, 3))
    assert [o["records"] for o in outputs] == [5, 5, 5]
    for shard, out in enumerate(outputs):
        got = [bytes(r) for r in tfio.tfrecord_iterator(out["path"], out["index_path"])]
        assert got == [f"shard {shard} record {i}".encode() for i in range(5)]
        assert load_index(out["index_path"]).matches(os.path.getsize(out["path"]))
    # ... and once more, after everything is in place: nothing changes.
    again = list(_finalize(None, results, spec, prefix, suffix, template, 3))
    assert [o["path"] for o in again] == [o["path"] for o in outputs]
    assert all(os.path.exists(o["path"]) and os.path.exists(o["index_path"]) for o in again)
