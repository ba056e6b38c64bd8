"""Golden files written by TensorFlow (tests/golden, made by make_golden.py): read
them here and compare with the manifest, write the same payloads here and compare
bytes, and (marked ``tensorflow``) have TensorFlow read what we write."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil

import numpy as np
import pytest

import tfrecord_io as tfio
from tfrecord_io.format import codec
from tfrecord_io.format.writer import RecordWriter, TFRecordWriter
from tfrecord_io.proto.example_pb2 import Feature

from tfio_testutil import expected_value, golden_path, golden_payloads, golden_records, manifest, run_tf

GOLDEN_FILES = {
    "records.tfrecord": None,
    "records.tfrecord.gz": None,
    "records.tfrecord.zz": None,
    "examples.tfrecord": "example",
    "sequence_examples.tfrecord": "sequence_example",
}


def _payloads_for(name):
    kind = GOLDEN_FILES[name]
    return golden_payloads(kind)


def test_manifest_matches_committed_files():
    files = manifest()["files"]
    assert set(files) == set(GOLDEN_FILES)
    for name, meta in files.items():
        with open(golden_path(name), "rb") as f:
            blob = f.read()
        assert len(blob) == meta["size"]
        assert hashlib.sha256(blob).hexdigest() == meta["sha256"], name
        assert meta["records"] == len(_payloads_for(name))
        assert meta["size"] < 16 * 1024  # golden files stay small


# ------------------------------------------------------------------ reading TF's files


@pytest.mark.parametrize("name", sorted(GOLDEN_FILES))
def test_read_golden_file_by_suffix(name):
    got = [bytes(r) for r in tfio.tfrecord_iterator(golden_path(name))]
    assert got == _payloads_for(name)


@pytest.mark.parametrize(
    "name,spellings",
    [
        ("records.tfrecord", [None, "", "NONE"]),
        ("records.tfrecord.gz", ["gzip", "GZIP"]),
        ("records.tfrecord.zz", ["zlib", "ZLIB"]),
    ],
)
def test_read_golden_with_explicit_compression(tmp_path, name, spellings):
    # copy to a name without a telling suffix: the explicit type alone must decide
    plain_name = tmp_path / "data.bin"
    shutil.copy(golden_path(name), plain_name)
    for spelling in spellings:
        got = [bytes(r) for r in tfio.tfrecord_iterator(str(plain_name), compression_type=spelling)]
        assert got == golden_payloads(), spelling


def test_plain_golden_offsets():
    offsets = [off for off, _ in tfio.read_records(golden_path("records.tfrecord"))]
    assert offsets == manifest()["records_offsets"]
    index = tfio.build_index(golden_path("records.tfrecord"))
    assert index.offsets.tolist() == offsets
    assert index.sizes.tolist() == [len(p) + 16 for p in golden_payloads()]


def test_compressed_golden_read_as_plain_is_an_error_not_garbage():
    with pytest.raises(tfio.TFRecordError) as err:
        list(tfio.tfrecord_iterator(golden_path("records.tfrecord.gz"), compression_type=""))
    assert "records.tfrecord.gz" in str(err.value)
    assert err.value.offset == 0


# ------------------------------------------------------------------ writing the same bytes


@pytest.mark.parametrize("name", ["records.tfrecord", "examples.tfrecord", "sequence_examples.tfrecord"])
def test_written_plain_file_is_byte_identical_to_tensorflow(tmp_path, name):
    payloads = _payloads_for(name)
    with open(golden_path(name), "rb") as f:
        expected = f.read()
    # one record at a time
    a = tmp_path / "a.tfrecord"
    with RecordWriter(str(a)) as w:
        for p in payloads:
            w.write_record(p)
    assert a.read_bytes() == expected
    # batched, from memoryviews, atomically
    b = tmp_path / "b.tfrecord"
    with RecordWriter(str(b), atomic=True) as w:
        w.write_records([memoryview(p) for p in payloads])
    assert b.read_bytes() == expected
    # the drop-in writer with already-serialised bytes
    c = tmp_path / "c.tfrecord"
    with TFRecordWriter(str(c)) as w:
        for p in payloads:
            w.write(p)
    assert c.read_bytes() == expected
    # framing helper
    assert b"".join(tfio.encode_frame(p) for p in payloads) == expected


def _datum_from_features(features):
    """Manifest features -> a tfrecord_io writer dict ({key: (values, type)})."""
    types = {"bytes_list": "byte", "float_list": "float", "int64_list": "int"}
    datum = {}
    for key, desc in features.items():
        kind, values = expected_value(desc)
        datum[key] = Feature() if kind is None else (values, types[kind])
    return datum


@pytest.mark.parametrize("rec", golden_records("example"), ids=lambda r: r["name"])
def test_example_serialization_is_byte_identical_to_tensorflow(rec):
    features = rec["decoded"]["features"]
    ours = codec.serialize_example(_datum_from_features(features))
    if not features:
        # TF's bytes depend on whether the empty Features message was set (b"" or
        # b"\n\x00"); both mean "no features", and so must ours
        assert ours in (b"", b"\n\x00")
        assert codec.parse_example(ours) == codec.parse_example(base64.b64decode(rec["payload_b64"])) == {}
        return
    assert ours == base64.b64decode(rec["payload_b64"])


def test_sequence_example_serialization_is_byte_identical_to_tensorflow():
    (rec,) = [r for r in golden_records("sequence_example") if r["name"] == "sequence/full"]
    decoded = rec["decoded"]
    types = {"bytes_list": "byte", "float_list": "float", "int64_list": "int"}
    lists = {}
    for key, steps in decoded["feature_lists"].items():
        kinds = {s["kind"] for s in steps}
        if None in kinds:
            continue  # a step with no kind cannot be written through the dict API
        kind = kinds.pop() if kinds else "int64_list"
        lists[key] = ([expected_value(s)[1] for s in steps], types[kind])
    seq = codec.build_sequence_example(_datum_from_features(decoded["context"]), lists)
    # add the step-without-kind list as TF has it, through the proto API
    flist = seq.feature_lists.feature_list["step_no_kind"]
    flist.feature.add()
    flist.feature.add().int64_list.value.append(9)
    assert seq.SerializeToString(deterministic=True) == base64.b64decode(rec["payload_b64"])


# ------------------------------------------------------------------ decoding


def _assert_decoded(key, got, desc, expected_kind_when_empty="float_list"):
    kind, values = expected_value(desc)
    if kind is None:
        kind = expected_kind_when_empty
    if kind == "bytes_list":
        if len(values) == 1:
            assert isinstance(got, bytes) and got == values[0], key
        else:
            assert isinstance(got, np.ndarray) and got.dtype == object, key
            assert list(got) == values, key  # trailing zero bytes kept
    elif kind == "float_list":
        assert got.dtype == np.float32, key
        assert got.view(np.uint32).tolist() == np.asarray(values).view(np.uint32).tolist(), key
    else:
        assert got.dtype == np.int64, key
        assert got.tolist() == values, key


@pytest.mark.parametrize("rec", golden_records("example"), ids=lambda r: r["name"])
def test_parse_golden_examples(rec):
    data = base64.b64decode(rec["payload_b64"])
    features = rec["decoded"]["features"]
    parsed = codec.parse_example(memoryview(data))
    assert sorted(parsed) == sorted(features)
    for key, desc in features.items():
        _assert_decoded(key, parsed[key], desc)
    # with a typed description (a feature with no kind takes the described type)
    names = {"bytes_list": "byte", "float_list": "float", "int64_list": "int", None: "int"}
    description = {k: names[d["kind"]] for k, d in features.items()}
    typed = codec.parse_example(data, description)
    for key, desc in features.items():
        _assert_decoded(key, typed[key], desc, expected_kind_when_empty="int64_list")


def test_parse_golden_example_type_mismatch_and_missing_key_are_clear_errors():
    data = golden_payloads("example")[0]
    with pytest.raises(tfio.ExampleCodecError, match="int_one"):
        codec.parse_example(data, {"int_one": "float"})
    with pytest.raises(tfio.ExampleCodecError, match="not_there"):
        codec.parse_example(data, {"not_there": "int"})


@pytest.mark.parametrize("rec", golden_records("sequence_example"), ids=lambda r: r["name"])
def test_parse_golden_sequence_examples(rec):
    data = base64.b64decode(rec["payload_b64"])
    context, lists = codec.parse_sequence_example(data)
    decoded = rec["decoded"]
    assert sorted(context) == sorted(decoded["context"])
    for key, desc in decoded["context"].items():
        _assert_decoded(key, context[key], desc)
    assert sorted(lists) == sorted(decoded["feature_lists"])
    for key, steps in decoded["feature_lists"].items():
        assert len(lists[key]) == len(steps)
        for got, desc in zip(lists[key], steps):
            _assert_decoded(key, got, desc)


def test_loaders_on_golden_files():
    recs = golden_records("example")
    got = list(tfio.example_loader(golden_path("examples.tfrecord"), None))
    assert len(got) == len(recs)
    simple = list(tfio.tfrecord_loader(golden_path("examples.tfrecord"), None, None))
    assert [sorted(d) for d in simple] == [sorted(r["decoded"]["features"]) for r in recs]
    # the first SequenceExample has no feature list "x": a clear error naming it
    with pytest.raises(tfio.ExampleCodecError, match="'x'"):
        list(tfio.sequence_loader(golden_path("sequence_examples.tfrecord"), None, None, ["x"]))
    seqs = list(tfio.sequence_loader(golden_path("sequence_examples.tfrecord"), None))
    assert [sorted(lists) for _, lists in seqs] == [
        sorted(r["decoded"]["feature_lists"]) for r in golden_records("sequence_example")
    ]
    # sequence_description selects SequenceExamples in tfrecord_loader
    full = next(
        tfio.tfrecord_loader(
            golden_path("sequence_examples.tfrecord"), None, {"int_one": "int"}, sequence_description={"tokens": "int"}
        )
    )
    context, lists = full
    assert context["int_one"].tolist() == [7]
    assert [s.tolist() for s in lists["tokens"]] == [[1, 2, 3], [], [-5]]


# ------------------------------------------------------------------ TensorFlow reads ours

_TF_READ = r"""
import base64, json, sys
import tensorflow as tf
out = {}
for path, comp in json.loads(sys.argv[1]):
    out[path] = [base64.b64encode(r.numpy()).decode() for r in tf.data.TFRecordDataset(path, compression_type=comp)]
print(json.dumps(out))
"""


@pytest.mark.tensorflow
def test_tensorflow_reads_files_written_here(tmp_path):
    payloads = golden_payloads()
    jobs = []
    for fname, ours, tf_comp in [
        ("plain.tfrecord", None, ""),
        ("g.tfrecord", "gzip", "GZIP"),
        ("z.tfrecord", "ZLIB", "ZLIB"),
        ("suffix.tfrecord.gz", None, "GZIP"),
        ("suffix.tfrecord.zz", None, "ZLIB"),
    ]:
        path = str(tmp_path / fname)
        with RecordWriter(path, ours) as w:
            w.write_records(payloads)
        jobs.append((path, tf_comp))
    # a big-ish compressed file, so more than one deflate block / chunk is involved
    rng = np.random.default_rng(1)
    big = [rng.integers(0, 4, int(n), dtype=np.uint8).tobytes() for n in rng.integers(0, 200_000, 40)]
    for fname, comp in [("big.tfrecord.gz", "GZIP"), ("big.tfrecord.zz", "ZLIB")]:
        path = str(tmp_path / fname)
        with RecordWriter(path) as w:
            for p in big:
                w.write_record(p)
        jobs.append((path, comp))
    result = run_tf(_TF_READ, json.dumps(jobs))
    for path, _ in jobs:
        want = big if "big" in path else payloads
        assert [base64.b64decode(x) for x in result[path]] == want, path


_TF_PARSE = r"""
import json, sys
import numpy as np
import tensorflow as tf
spec = {
    "label": tf.io.FixedLenFeature([], tf.int64),
    "scores": tf.io.VarLenFeature(tf.float32),
    "text": tf.io.VarLenFeature(tf.string),
    "big": tf.io.FixedLenFeature([3], tf.int64),
}
out = []
for rec in tf.data.TFRecordDataset(sys.argv[1]):
    ex = tf.io.parse_single_example(rec, spec)
    out.append({
        "label": int(ex["label"].numpy()),
        "scores": [int(b) for b in ex["scores"].values.numpy().view(np.uint32)],
        "text": [t.hex() for t in ex["text"].values.numpy().tolist()],
        "big": [int(v) for v in ex["big"].numpy()],
    })
print(json.dumps(out))
"""


@pytest.mark.tensorflow
def test_tensorflow_parses_examples_written_here(tmp_path):
    path = str(tmp_path / "ex.tfrecord")
    rows = []
    with TFRecordWriter(path) as w:
        for i in range(5):
            row = {
                "label": i - 2,
                "scores": np.array([i, np.nan, -np.inf][: i % 4], dtype=np.float32),
                "text": [f"ü{i}".encode(), b"\x00\x01\x00"] if i % 2 else ("", "byte"),
                "big": np.array([2**63 - 1, -(2**63), i], dtype=np.int64),
            }
            rows.append(row)
            w.write(row)
    got = run_tf(_TF_PARSE, path)
    assert len(got) == 5
    for row, g in zip(rows, got):
        assert g["label"] == row["label"]
        assert g["scores"] == row["scores"].view(np.uint32).tolist()
        text = row["text"] if isinstance(row["text"], list) else [b""]
        assert [bytes.fromhex(t) for t in g["text"]] == text
        assert g["big"] == row["big"].tolist()


_NO_TF = r"""
import pytest, tfio_testutil
try:
    tfio_testutil.require_tf_python()
except pytest.skip.Exception:
    print("skipped")
except pytest.fail.Exception:
    print("failed")
"""


@pytest.mark.parametrize("require,outcome", [("", "skipped"), ("1", "failed")])
def test_missing_tensorflow_skips_or_fails_in_ci(tmp_path, require, outcome):
    """Without TF the TF tests skip with a reason, but CI (TFRECORD_IO_REQUIRE_TF=1) fails."""
    import subprocess
    import sys

    from tfio_testutil import TESTS

    env = dict(os.environ, TFRECORD_IO_TF_PYTHON=str(tmp_path / "no-python"), TFRECORD_IO_REQUIRE_TF=require)
    env["PYTHONPATH"] = TESTS
    proc = subprocess.run([sys.executable, "-c", _NO_TF], env=env, capture_output=True, text=True, timeout=120)
    assert proc.stdout.strip() == outcome, proc.stderr
