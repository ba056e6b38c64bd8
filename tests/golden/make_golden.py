"""Write the golden TFRecord files with TensorFlow, and a JSON manifest of what they hold.

Run with an interpreter that has TensorFlow (see ``scripts/setup-tf-env``)::

    /opt/tfenv/bin/python tests/golden/make_golden.py

The outputs are small (a few KB) and committed, so the tests that read them need no
TensorFlow: ``manifest.json`` lists every record's payload (base64) and, for Examples
and SequenceExamples, the features as TensorFlow decoded them (floats as float32 bit
patterns, so NaN, infinities and -0.0 compare exactly).

Every Example/SequenceExample payload is ``SerializeToString(deterministic=True)``
(sorted map keys), the serialisation ``tfrecord_io`` promises to reproduce byte for byte.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import struct
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

HERE = os.path.dirname(os.path.abspath(__file__))

BINARY = bytes(range(256))
UNICODE = "ünïcødé, 例子, пример, 🙂".encode()
FLOATS = [0.0, -0.0, 1.5, -2.25, float("nan"), float("inf"), float("-inf"), 1e-45, 3.4028235e38, 0.1]
INTS = [0, 1, -1, 2**63 - 1, -(2**63), 2**40 + 3, -(2**31) - 7]


def bytes_feature(values):
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=list(values)))


def float_feature(values):
    return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def int_feature(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def all_kinds_features():
    """One Features message with every feature kind and edge case the format has."""
    return {
        "bytes_one": bytes_feature([b"hello"]),
        "bytes_empty_string": bytes_feature([b""]),
        "bytes_multi_trailing_zeros": bytes_feature([b"a\x00\x00", b"\x00", b"", b"bc\x00"]),
        "bytes_unicode": bytes_feature([UNICODE]),
        "bytes_binary": bytes_feature([BINARY]),
        "bytes_empty_list": bytes_feature([]),
        "float_one": float_feature([0.5]),
        "float_special": float_feature(FLOATS),
        "float_empty_list": float_feature([]),
        "int_one": int_feature([7]),
        "int_extremes": int_feature(INTS),
        "int_empty_list": int_feature([]),
        "no_kind": tf.train.Feature(),
        "ключ ünicode key": int_feature([42]),
    }


def examples():
    """(name, tf.train.Example) pairs."""
    out = [("all_kinds", tf.train.Example(features=tf.train.Features(feature=all_kinds_features())))]
    out.append(("no_features_field", tf.train.Example()))  # serialises to zero bytes
    out.append(("empty_features", tf.train.Example(features=tf.train.Features())))
    for i in range(3):
        out.append(
            (
                f"simple_{i}",
                tf.train.Example(
                    features=tf.train.Features(
                        feature={
                            "label": int_feature([i]),
                            "scores": float_feature([i / 4, -i / 8]),
                            "caption": bytes_feature([f"record {i}".encode()]),
                        }
                    )
                ),
            )
        )
    return out


def sequence_examples():
    """(name, tf.train.SequenceExample) pairs."""
    ctx = all_kinds_features()
    lists = {
        "tokens": tf.train.FeatureList(feature=[int_feature([1, 2, 3]), int_feature([]), int_feature([-5])]),
        "frames": tf.train.FeatureList(feature=[bytes_feature([b"f0\x00"]), bytes_feature([b"", BINARY[:16]])]),
        "probs": tf.train.FeatureList(feature=[float_feature([0.25, float("nan")]), float_feature([float("inf")])]),
        "empty_list": tf.train.FeatureList(feature=[]),
        "step_no_kind": tf.train.FeatureList(feature=[tf.train.Feature(), int_feature([9])]),
    }
    full = tf.train.SequenceExample(
        context=tf.train.Features(feature=ctx), feature_lists=tf.train.FeatureLists(feature_list=lists)
    )
    only_lists = tf.train.SequenceExample(
        feature_lists=tf.train.FeatureLists(
            feature_list={"x": tf.train.FeatureList(feature=[float_feature([1.0]), float_feature([2.0, 3.0])])}
        )
    )
    return [("full", full), ("only_feature_lists", only_lists), ("empty", tf.train.SequenceExample())]


def raw_payloads():
    """(name, bytes) pairs that are not protos: framing edge cases."""
    rng = np.random.default_rng(20240607)
    return [
        ("empty", b""),
        ("one_zero_byte", b"\x00"),
        ("zeros_300", b"\x00" * 300),
        ("ff_64", b"\xff" * 64),
        ("binary_256", BINARY),
        ("random_1000", rng.integers(0, 256, 1000, dtype=np.uint8).tobytes()),
        ("text", b"the quick brown fox jumps over the lazy dog\n" * 3),
        # looks like the start of a frame header (a small length), but is only 8 bytes
        ("length_like", b"\x05" + b"\x00" * 7),
    ]


def f32_bits(values):
    return [int(b) for b in np.asarray(list(values), dtype=np.float32).view(np.uint32)]


def describe_feature(feature):
    kind = feature.WhichOneof("kind")
    if kind is None:
        return {"kind": None}
    values = getattr(feature, kind).value
    if kind == "bytes_list":
        return {"kind": kind, "b64": [base64.b64encode(v).decode() for v in values]}
    if kind == "float_list":
        return {"kind": kind, "f32_bits": f32_bits(values)}
    return {"kind": kind, "int": [int(v) for v in values]}


def describe_features(features):
    return {key: describe_feature(features.feature[key]) for key in sorted(features.feature.keys())}


def describe_example(example):
    return {"has_features": example.HasField("features"), "features": describe_features(example.features)}


def describe_sequence_example(seq):
    lists = seq.feature_lists.feature_list
    return {
        "context": describe_features(seq.context),
        "feature_lists": {k: [describe_feature(f) for f in lists[k].feature] for k in sorted(lists.keys())},
    }


def write(path, payloads, compression):
    options = tf.io.TFRecordOptions(compression_type=compression)
    with tf.io.TFRecordWriter(path, options) as writer:
        for data in payloads:
            writer.write(data)


def read_back(path, compression):
    return [r.numpy() for r in tf.data.TFRecordDataset(path, compression_type=compression)]


def main() -> int:
    entries = []
    for name, data in raw_payloads():
        entries.append({"name": f"raw/{name}", "type": "raw", "payload": data})
    for name, ex in examples():
        data = ex.SerializeToString(deterministic=True)
        # TF's own parser must agree with the proto (sanity check of this script)
        assert tf.train.Example.FromString(data) == ex
        entries.append({"name": f"example/{name}", "type": "example", "payload": data, "decoded": describe_example(ex)})
    for name, seq in sequence_examples():
        data = seq.SerializeToString(deterministic=True)
        assert tf.train.SequenceExample.FromString(data) == seq
        entries.append(
            {
                "name": f"sequence/{name}",
                "type": "sequence_example",
                "payload": data,
                "decoded": describe_sequence_example(seq),
            }
        )

    payloads = [e["payload"] for e in entries]
    ex_payloads = [e["payload"] for e in entries if e["type"] == "example"]
    seq_payloads = [e["payload"] for e in entries if e["type"] == "sequence_example"]
    outputs = {
        "records.tfrecord": (payloads, ""),
        "records.tfrecord.gz": (payloads, "GZIP"),
        "records.tfrecord.zz": (payloads, "ZLIB"),
        "examples.tfrecord": (ex_payloads, ""),
        "sequence_examples.tfrecord": (seq_payloads, ""),
    }
    files = {}
    for fname, (records, compression) in outputs.items():
        path = os.path.join(HERE, fname)
        write(path, records, compression)
        assert read_back(path, compression) == records, fname
        with open(path, "rb") as f:
            blob = f.read()
        files[fname] = {
            "compression": compression,
            "records": len(records),
            "size": len(blob),
            "sha256": hashlib.sha256(blob).hexdigest(),
        }

    # record offsets of the plain file, computed from the format (checked by the tests
    # against the file TF wrote)
    offsets, pos = [], 0
    for data in payloads:
        offsets.append(pos)
        pos += len(data) + 16
    manifest = {
        "generator": f"tensorflow {tf.__version__}, protobuf {__import__('google.protobuf').protobuf.__version__}, "
        f"python {sys.version.split()[0]}",
        "files": files,
        "records_offsets": offsets,
        "records": [
            {**{k: v for k, v in e.items() if k != "payload"}, "payload_b64": base64.b64encode(e["payload"]).decode()}
            for e in entries
        ],
    }
    with open(os.path.join(HERE, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, ensure_ascii=False, sort_keys=True)
        f.write("\n")
    total = sum(v["size"] for v in files.values())
    print(f"wrote {len(files)} files ({total} bytes) and manifest.json with {len(entries)} records")
    return 0


if __name__ == "__main__":
    assert struct.calcsize("<Q") == 8
    sys.exit(main())
