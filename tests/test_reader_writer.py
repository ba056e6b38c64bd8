"""Reader and writer: byte ranges that tile a file, shards, the drop-in loader API of
the ``tfrecord`` package, atomic writes, the protobuf backend, deterministic
serialisation across processes, and TensorFlow + tfrecord_io in one process."""

from __future__ import annotations

import collections
import hashlib
import inspect
import os
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfrecord_io as tfio
from tfrecord_io import iterator_utils
from tfrecord_io.format.framing import FRAME_OVERHEAD, write_frame
from tfrecord_io.format.reader import record_ranges, shard_range
from tfrecord_io.format.writer import RecordWriter

from tfio_testutil import golden_path, golden_payloads, run_python, run_tf

fixture_ok = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def write_payloads(path, payloads, index=False):
    with RecordWriter(str(path), index_path=str(path) + ".index" if index else None) as w:
        w.write_records(payloads)
    return str(path)


# ------------------------------------------------------------------ byte ranges


@settings(fixture_ok, max_examples=120)
@given(
    payloads=st.lists(st.binary(max_size=120), min_size=0, max_size=15),
    cuts=st.lists(st.integers(0, 4000), max_size=6),
    use_index=st.booleans(),
    chunk=st.sampled_from([64, 1 << 20]),
)
def test_ranges_that_tile_a_file_read_each_record_once(tmp_path, payloads, cuts, use_index, chunk):
    path = write_payloads(tmp_path / "t.tfrecord", payloads, index=True)
    size = os.path.getsize(path)
    points = sorted({0, size, *[c % (size + 1) for c in cuts]})
    index = tfio.load_index(path + ".index") if use_index else None
    got = []
    for start, end in zip(points, points[1:]):
        for off, data in tfio.read_records(path, start, end, index=index, chunk_size=chunk):
            assert start <= off < end  # a record belongs to the range it begins in
            got.append((off, bytes(data)))
    offsets = np.cumsum([0] + [len(p) + FRAME_OVERHEAD for p in payloads])[:-1].tolist()
    assert got == list(zip(offsets, payloads))


def test_ranges_on_golden_file_every_split_point():
    path = golden_path("records.tfrecord")
    size = os.path.getsize(path)
    expected = list(enumerate(golden_payloads()))
    for cut in range(size + 1):
        a = [bytes(d) for _, d in tfio.read_records(path, 0, cut)]
        b = [bytes(d) for _, d in tfio.read_records(path, cut, None)]
        assert a + b == golden_payloads(), cut
    assert expected


def test_range_edge_cases(tmp_path):
    path = write_payloads(tmp_path / "e.tfrecord", [b"a", b"b"])
    assert list(tfio.read_records(path, 10, 5)) == []
    assert list(tfio.read_records(path, 5, 5)) == []
    assert list(tfio.read_records(path, 10_000, None)) == []  # past the end
    assert len(list(tfio.read_records(path, 0, 10**12))) == 2
    with pytest.raises(ValueError, match="negative"):
        list(tfio.read_records(path, -1, None))
    with pytest.raises(ValueError, match="on_corrupt"):
        list(tfio.read_records(path, on_corrupt="ignore"))


def test_record_ranges_tile():
    for size in [0, 1, 7, 1000]:
        for n in [1, 2, 3, 8]:
            r = record_ranges(size, n)
            assert r[0][0] == 0 and r[-1][1] == size
            assert all(a[1] == b[0] for a, b in zip(r, r[1:]))


# ------------------------------------------------------------------ shards (drop-in)


@settings(fixture_ok, max_examples=60)
@given(
    sizes=st.lists(st.integers(0, 300), min_size=0, max_size=25),
    n=st.integers(1, 9),
    use_index=st.booleans(),
)
def test_shards_give_every_record_to_exactly_one_shard(tmp_path, sizes, n, use_index):
    payloads = [bytes([i % 251]) * s + i.to_bytes(2, "little") for i, s in enumerate(sizes)]
    path = write_payloads(tmp_path / "s.tfrecord", payloads, index=True)
    index_path = path + ".index" if use_index else None
    shards = [[bytes(r) for r in tfio.tfrecord_iterator(path, index_path, shard=(i, n))] for i in range(n)]
    assert [r for s in shards for r in s] == payloads  # in order, no duplicates, none lost
    if use_index and payloads:
        counts = [len(s) for s in shards]
        assert max(counts) - min(counts) <= 1  # by record count with an index


@pytest.mark.parametrize("spelling", [None, "gzip", "zlib"])
def test_shards_of_compressed_and_plain_files(tmp_path, spelling):
    suffix = {None: "", "gzip": ".gz", "zlib": ".zz"}[spelling]
    path = str(tmp_path / ("c.tfrecord" + suffix))
    payloads = golden_payloads()
    with RecordWriter(path, spelling) as w:
        w.write_records(payloads)
    got = collections.Counter()
    for i in range(3):
        for r in tfio.tfrecord_iterator(path, None, shard=(i, 3), compression_type=spelling):
            got[bytes(r)] += 1
    assert got == collections.Counter(payloads)


def test_bad_shard_and_stale_index_are_clear_errors(tmp_path):
    path = write_payloads(tmp_path / "b.tfrecord", [b"a", b"b", b"c"], index=True)
    with pytest.raises(ValueError, match="shard"):
        list(tfio.tfrecord_iterator(path, None, shard=(3, 3)))
    with open(path, "ab") as f:
        write_frame(f, b"d")  # the index no longer describes the file
    with pytest.raises(tfio.IndexFileError, match="stale") as err:
        list(tfio.tfrecord_iterator(path, path + ".index", shard=(0, 2)))
    assert path in str(err.value)


def test_shard_range_uses_index_records():
    path = golden_path("records.tfrecord")
    index = tfio.build_index(path)
    n = len(index)
    starts = [shard_range(path, (i, 4), index)[0] for i in range(4)]
    assert starts == [int(index.offsets[n * i // 4]) for i in range(4)]


# ------------------------------------------------------------------ drop-in signatures


def test_drop_in_signatures_match_the_tfrecord_package():
    tfrecord_reader = pytest.importorskip("tfrecord.reader")
    tfrecord_writer = pytest.importorskip("tfrecord.writer")
    for name in ["tfrecord_iterator", "example_loader", "sequence_loader", "tfrecord_loader", "multi_tfrecord_loader"]:
        theirs = list(inspect.signature(getattr(tfrecord_reader, name)).parameters)
        ours = list(inspect.signature(getattr(tfio, name)).parameters)
        assert ours[: len(theirs)] == theirs, name  # same names in the same positions
    theirs = list(inspect.signature(tfrecord_writer.TFRecordWriter.write).parameters)
    assert list(inspect.signature(tfio.TFRecordWriter.write).parameters)[: len(theirs)] == theirs


def test_tfrecord_loader_description_and_shuffle(tmp_path):
    path = str(tmp_path / "l.tfrecord")
    with tfio.TFRecordWriter(path) as w:
        for i in range(50):
            w.write({"label": (i, "int"), "name": (f"n{i}", "byte"), "v": ([i / 2, 1.0], "float")})
    tfio.create_index(path, path + ".index")
    rows = list(tfio.tfrecord_loader(path, path + ".index", {"label": "int", "name": "byte"}))
    assert [int(r["label"][0]) for r in rows] == list(range(50))
    assert rows[3]["name"] == b"n3" and set(rows[3]) == {"label", "name"}
    shuffled = list(tfio.tfrecord_loader(path, None, ["label"], shuffle_queue_size=10))
    labels = [int(r["label"][0]) for r in shuffled]
    assert sorted(labels) == list(range(50))
    sharded = [
        int(r["label"][0])
        for i in range(3)
        for r in tfio.tfrecord_loader(path, path + ".index", ["label"], shard=(i, 3))
    ]
    assert sharded == list(range(50))
    # positional arguments as the tfrecord package takes them
    halves = [list(tfio.tfrecord_loader(path, None, {"v": "float"}, (i, 2), None, None)) for i in range(2)]
    assert [r["v"][0] for h in halves for r in h] == [i / 2 for i in range(50)]
    assert all(r["v"].dtype == np.float32 for h in halves for r in h)


def test_sequence_loader_and_writer(tmp_path):
    path = str(tmp_path / "seq.tfrecord")
    with tfio.TFRecordWriter(path) as w:
        for i in range(4):
            w.write(
                {"id": (i, "int")}, {"tokens": ([[i], [i, i + 1], []], "int"), "frames": ([b"a", b"b\x00"], "byte")}
            )
    got = list(tfio.sequence_loader(path, None, {"id": "int"}, {"tokens": "int", "frames": "byte"}))
    assert len(got) == 4
    ctx, lists = got[2]
    assert ctx["id"].tolist() == [2]
    assert [t.tolist() for t in lists["tokens"]] == [[2], [2, 3], []]
    assert lists["frames"] == [b"a", b"b\x00"]
    same = list(tfio.tfrecord_loader(path, None, {"id": "int"}, sequence_description={"tokens": "int"}))
    assert [c["id"].tolist() for c, _ in same] == [[0], [1], [2], [3]]


def _two_splits(tmp_path):
    pattern = str(tmp_path / "{}.tfrecord")
    for split, base in [("train", 0), ("val", 1000)]:
        with tfio.TFRecordWriter(pattern.format(split)) as w:
            for i in range(20):
                w.write({"x": (base + i, "int")})
        tfio.create_index(pattern.format(split), pattern.format(split) + ".index")
    return pattern


def test_multi_tfrecord_loader_finite_reads_everything_once(tmp_path):
    pattern = _two_splits(tmp_path)
    got = [
        int(r["x"][0]) for r in tfio.multi_tfrecord_loader(pattern, None, {"train": 1, "val": 3}, ["x"], infinite=False)
    ]
    assert sorted(got) == list(range(20)) + list(range(1000, 1020))
    # zero weight: that split is never read
    got = [int(r["x"][0]) for r in tfio.multi_tfrecord_loader(pattern, None, {"train": 0, "val": 1}, infinite=False)]
    assert sorted(got) == list(range(1000, 1020))


def test_multi_tfrecord_loader_infinite_and_shard(tmp_path):
    pattern = _two_splits(tmp_path)
    it = tfio.multi_tfrecord_loader(pattern, pattern + ".index", {"train": 1, "val": 1}, ["x"])
    got = [int(next(it)["x"][0]) for _ in range(200)]  # more than both files hold: it cycles
    assert set(got) <= set(range(20)) | set(range(1000, 1020)) and len(set(got)) > 30
    # shard=(i, n) as the tfrecord package's 8th argument: shards split each split's records
    seen = []
    for i in range(2):
        loader = tfio.multi_tfrecord_loader(
            pattern, pattern + ".index", {"train": 1, "val": 1}, ["x"], None, None, False, (i, 2)
        )
        seen += [int(r["x"][0]) for r in loader]
    assert sorted(seen) == list(range(20)) + list(range(1000, 1020))


def test_iterator_utils_like_the_tfrecord_package():
    rng = random.Random(0)
    # shuffle keeps every element once
    items = list(range(100))
    out = list(iterator_utils.shuffle_iterator(iter(items), 7, rng=rng))
    assert sorted(out) == items and out != items
    # sample_iterators with iterator *functions*, as the tfrecord package takes them
    fns = [lambda: iter("ab"), lambda: iter("xyz")]
    assert sorted(iterator_utils.sample_iterators(fns, [1, 1], infinite=False)) == list("abxyz")
    inf = iterator_utils.sample_iterators(fns, [1, 1], infinite=True)
    assert set(next(inf) for _ in range(100)) == set("abxyz")
    # and with iterators
    assert sorted(iterator_utils.sample_iterators([iter([1, 2]), iter([3])], [1, 2], infinite=False)) == [1, 2, 3]
    with pytest.raises(ValueError):
        list(iterator_utils.sample_iterators([iter([1])], [-1]))
    # cycle stops on an empty source instead of spinning
    assert list(iterator_utils.cycle(lambda: iter([]))) == []


# ------------------------------------------------------------------ writer behaviour


def test_atomic_writer_leaves_nothing_on_error(tmp_path):
    path = str(tmp_path / "a.tfrecord")
    with open(path, "wb") as f:
        f.write(b"old contents")
    with pytest.raises(KeyError):
        with RecordWriter(path, atomic=True) as w:
            w.write_record(b"new")
            raise KeyError("boom")
    assert open(path, "rb").read() == b"old contents"
    assert os.listdir(tmp_path) == ["a.tfrecord"]  # no temporary file left behind


@settings(fixture_ok, max_examples=60)
@given(
    batches=st.lists(st.lists(st.binary(max_size=3000), max_size=6), max_size=5),
    compression=st.sampled_from([None, "GZIP", "ZLIB"]),
    atomic=st.booleans(),
)
def test_the_digest_kept_while_writing_is_the_stored_files(tmp_path, batches, compression, atomic):
    """``digest=True``: the SHA-256 and size of the file as stored (compressed bytes
    included), never a read back; every record written is in it."""
    path = tmp_path / f"d-{compression}-{atomic}.tfrecord"
    writer = RecordWriter(str(path), compression, atomic=atomic, digest=True)
    for batch in batches:
        writer.write_records(batch)
    assert writer.sha256 is None  # known only once the file is whole
    writer.close()
    stored = path.read_bytes()
    assert writer.sha256 == hashlib.sha256(stored).hexdigest()
    assert writer.stored_bytes == len(stored)
    assert [bytes(r) for r in tfio.tfrecord_iterator(str(path), compression_type=compression)] == [
        r for b in batches for r in b
    ]


def test_writer_index_matches_built_index(tmp_path):
    payloads = golden_payloads()
    path = write_payloads(tmp_path / "i.tfrecord", payloads, index=True)
    written = tfio.load_index(path + ".index")
    built = tfio.build_index(path)
    assert written.offsets.tolist() == built.offsets.tolist()
    assert written.sizes.tolist() == built.sizes.tolist()
    assert written.matches(os.path.getsize(path))


def test_writer_rejects_wrong_types_with_the_key():
    with pytest.raises(tfio.ExampleCodecError, match="'label'"):
        tfio.serialize_example({"label": ("seven", "int")})
    with pytest.raises(TypeError):
        tfio.TFRecordWriter.write(tfio.TFRecordWriter.__new__(tfio.TFRecordWriter), 123)


# ------------------------------------------------------------------ protobuf, processes, TF


def test_upb_backend_in_use():
    from google.protobuf.internal import api_implementation

    assert api_implementation.Type() == "upb"


_SERIALIZE = r"""
import hashlib, numpy as np, tfrecord_io as tfio
datum = {f"key{i:03d}": ([i, -i], "int") for i in range(60)}
datum.update({"img": (b"\x00\xff" * 50, "byte"), "f": (np.arange(10, dtype=np.float32), "float"), "s": "ünï"})
seq = tfio.serialize_sequence_example({f"c{i}": (i, "int") for i in range(30)}, {f"l{i}": ([[i], [i, 1]], "int") for i in range(30)})
print(hashlib.sha256(tfio.serialize_example(datum) + seq).hexdigest())
"""


def test_serialization_is_deterministic_across_processes():
    digests = {run_python(_SERIALIZE, {"PYTHONHASHSEED": seed}).strip() for seed in ["0", "1", "12345", "random"]}
    assert len(digests) == 1


_IMPORT_ORDER = r"""
import json, os, sys, tempfile
order = sys.argv[1]
if order == "tf-first":
    import tensorflow as tf
    import tfrecord_io as tfio
else:
    import tfrecord_io as tfio
    import tensorflow as tf
from google.protobuf.internal import api_implementation
d = tempfile.mkdtemp()
path = os.path.join(d, "x.tfrecord")
with tfio.TFRecordWriter(path) as w:
    w.write({"label": (7, "int"), "text": ("héllo", "byte"), "v": ([0.5, 1.5], "float")})
ex = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(path))).numpy())
tf_path = os.path.join(d, "tf.tfrecord")
with tf.io.TFRecordWriter(tf_path) as w:
    w.write(ex.SerializeToString(deterministic=True))
ours = tfio.parse_example(next(tfio.tfrecord_iterator(tf_path)))
print(json.dumps({
    "label": list(ex.features.feature["label"].int64_list.value),
    "text": ex.features.feature["text"].bytes_list.value[0].decode(),
    "ours_label": ours["label"].tolist(), "ours_v": ours["v"].tolist(),
    "same_bytes": open(path, "rb").read() == open(tf_path, "rb").read(),
    "backend": api_implementation.Type(),
    "tfio_file": tfio.__file__,
}))
"""


@pytest.mark.tensorflow
@pytest.mark.parametrize("order", ["tf-first", "tfio-first"])
def test_tensorflow_and_tfrecord_io_in_one_process(order):
    out = run_tf(_IMPORT_ORDER, order)
    assert out["label"] == [7] and out["text"] == "héllo"
    assert out["ours_label"] == [7] and out["ours_v"] == [0.5, 1.5]
    assert out["same_bytes"]
    assert out["tfio_file"].startswith(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_ranges_with_index_are_exact_even_when_payloads_embed_frames(tmp_path):
    """A payload holding a whole TFRecord frame can fool resynchronisation (documented
    in FrameStream.resync); with an index, ranges still read each record once."""
    inner = tfio.encode_frame(b"I am a frame inside a record")
    payloads = [b"x" * 10, b"pre" + inner + b"post", inner, b"y" * 5]
    path = write_payloads(tmp_path / "nested.tfrecord", payloads, index=True)
    index = tfio.load_index(path + ".index")
    size = os.path.getsize(path)
    for cut in range(size + 1):
        got = [bytes(d) for _, d in tfio.read_records(path, 0, cut, index=index)]
        got += [bytes(d) for _, d in tfio.read_records(path, cut, None, index=index)]
        assert got == payloads, cut


def test_ranges_without_crc_checks_tile_too(tmp_path):
    payloads = golden_payloads()
    path = write_payloads(tmp_path / "n.tfrecord", payloads)
    size = os.path.getsize(path)
    for cut in range(0, size + 1, 7):
        got = [bytes(d) for _, d in tfio.read_records(path, 0, cut, check_crc=False)]
        got += [bytes(d) for _, d in tfio.read_records(path, cut, None, check_crc=False)]
        assert got == payloads, cut


_FULL_DISK_CHILD = r"""
import os, resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, 32 * 1024))
from tfrecord_io.format.key_index import KeyIndexWriter
from tfrecord_io.format.writer import RecordWriter
folder, kind = sys.argv[1], sys.argv[2]
path = os.path.join(folder, "out")
try:
    if kind == "records":
        with RecordWriter(path, atomic=True) as w:
            for _ in range(20):
                w.write_records([os.urandom(1000)] * 3)
    else:
        w = KeyIndexWriter(path, block_entries=64)
        try:
            w.add_many([b"%08d" % i for i in range(5000)], [0] * 5000, list(range(5000)), [1] * 5000, os.urandom(16) * 5000)
            w.close()
        except BaseException:
            w.abort()
            raise
except OSError as err:
    print(err.errno, err.filename, sorted(os.listdir(folder)))
"""


@pytest.mark.parametrize("kind", ["records", "key_index"])
def test_a_write_past_the_disks_end_names_the_file_and_leaves_nothing(tmp_path, kind):
    """A full disk (here a file-size limit: EFBIG) fails the write with an error that
    names the file, the first error and not one from closing the half-written file
    on the way out, and removes the temporary file."""
    import errno
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _FULL_DISK_CHILD, str(tmp_path), kind], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    code, name, left = proc.stdout.split(" ", 2)
    assert int(code) == errno.EFBIG
    assert name.startswith(str(tmp_path / "out")), proc.stdout
    assert left.strip() == "[]", proc.stdout
