"""The golden Example of the transforms package: committed bytes that the current
encoders must reproduce exactly, that our decoders read back, and that TensorFlow's
``tf.io.parse_single_example`` parses with the spec ``tf_parse_spec`` gives (run in a
separate TensorFlow interpreter: ``$TFRECORD_IO_TF_PYTHON``, ``$TFRECORD_IO_TF_VENV``,
``~/.cache/tfrecord-io/tfenv`` or ``/opt/tfenv``; skipped without one unless
``TFRECORD_IO_REQUIRE_TF=1``)."""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import subprocess

import numpy as np
import pytest

from tfrecord_io.format.reader import read_records
from tfrecord_io.transforms import decode_example, encode_row, feature_specs, tf_parse_spec

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "make_transforms_golden", os.path.join(HERE, "golden", "make_transforms_golden.py")
)
golden = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(golden)


def golden_record() -> bytes:
    records = [bytes(r) for _, r in read_records(golden.RECORD)]
    assert len(records) == 1
    return records[0]


def test_encoders_reproduce_the_golden_example_byte_for_byte():
    assert encode_row(golden.ROW, golden.SPEC) == golden_record()


def test_golden_example_decodes_to_the_inputs():
    out = decode_example(golden_record(), golden.SPEC)
    np.testing.assert_array_equal(out["image"], golden.rgb_pixels())
    rgb = golden.rgb_pixels().astype(np.float64)
    gray = np.asarray(__import__("PIL.Image").Image.fromarray(golden.rgb_pixels()).convert("L"))
    np.testing.assert_array_equal(out["gray"][..., 0], gray)
    assert abs(out["gray"].astype(float).mean() - (rgb @ [0.299, 0.587, 0.114]).mean()) < 1
    assert out["depth"].dtype == np.uint16
    np.testing.assert_array_equal(out["depth"][..., 0], golden.depth_pixels())
    np.testing.assert_array_equal(out["audio"].samples, golden.pcm_samples() / np.float32(32768))
    assert out["audio"].sample_rate == 8000
    assert out["caption"] == golden.ROW["caption"] and out["label"] == 1 and out["count"] == 42 and out["score"] == 0.5
    np.testing.assert_array_equal(out["emb"], np.float32(golden.ROW["emb"]))
    assert out["weights"].dtype == np.float64 and out["weights"].tolist() == golden.ROW["weights"]


# --------------------------------------------------------------------------- TensorFlow

TF_SCRIPT = r"""
import base64, json, sys
import numpy as np
import tensorflow as tf
from tfrecord_io.transforms.spec import tf_features

path, spec_json = sys.argv[1], sys.argv[2]
features, _ = tf_features(json.loads(spec_json), tf)
(record,) = list(tf.data.TFRecordDataset(path))
parsed = tf.io.parse_single_example(record, features)
out = {}
for key, value in parsed.items():
    if isinstance(value, tf.sparse.SparseTensor):
        value = tf.sparse.to_dense(value)
    arr = value.numpy()
    if isinstance(arr, bytes):
        arr = np.array([arr], dtype=object).reshape(())
    if arr.dtype == object:
        out[key] = {"bytes": [base64.b64encode(b).decode() for b in arr.reshape(-1)], "shape": list(arr.shape)}
    else:
        out[key] = {"values": arr.reshape(-1).tolist(), "shape": list(arr.shape), "dtype": str(arr.dtype)}
img = tf.io.decode_image(parsed["image/encoded"], channels=int(parsed["image/channels"]))
depth = tf.io.decode_png(parsed["depth/encoded"], channels=1, dtype=tf.uint16)
gray = tf.reshape(tf.io.decode_raw(parsed["gray/encoded"], tf.uint8), [parsed["gray/height"], parsed["gray/width"], parsed["gray/channels"]])
audio = tf.reshape(tf.io.decode_raw(parsed["audio/encoded"], tf.float32), [parsed["audio/num_samples"], parsed["audio/channels"]])
weights = tf.io.decode_raw(parsed["weights"], tf.float64)
out["decoded"] = {
    "image": img.numpy().tolist(), "depth": depth.numpy().tolist(), "gray": gray.numpy().tolist(),
    "audio": audio.numpy().tolist(), "weights": weights.numpy().tolist(),
}
print(json.dumps(out))
"""


def tf_python():
    candidates = []
    if os.environ.get("TFRECORD_IO_TF_PYTHON"):
        candidates.append(os.environ["TFRECORD_IO_TF_PYTHON"])
    if os.environ.get("TFRECORD_IO_TF_VENV"):
        candidates.append(os.path.join(os.environ["TFRECORD_IO_TF_VENV"], "bin", "python"))
    candidates += [os.path.expanduser("~/.cache/tfrecord-io/tfenv/bin/python"), "/opt/tfenv/bin/python"]
    tried = []
    for exe in candidates:
        if not os.path.exists(exe):
            tried.append(f"{exe}: absent")
            continue
        probe = subprocess.run([exe, "-c", "import tensorflow"], capture_output=True, text=True, timeout=300)
        if probe.returncode == 0:
            return exe
        tried.append(f"{exe}: cannot import tensorflow")
    reason = "no TensorFlow interpreter (" + "; ".join(tried) + ")"
    if os.environ.get("TFRECORD_IO_REQUIRE_TF") == "1":
        pytest.fail("TFRECORD_IO_REQUIRE_TF=1 but " + reason)
    pytest.skip(reason)


@pytest.mark.tensorflow
def test_tensorflow_parses_the_golden_example_with_our_spec():
    exe = tf_python()
    spec = tf_parse_spec(feature_specs(golden.SPEC))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [exe, "-c", TF_SCRIPT, golden.RECORD, json.dumps(spec)], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = decode_example(golden_record(), golden.SPEC)

    assert set(out) - {"decoded"} == set(spec)
    assert out["image/height"]["values"] == [5] and out["image/width"]["values"] == [6]
    assert base64.b64decode(out["caption"]["bytes"][0]).decode() == golden.ROW["caption"]
    assert out["label"]["values"] == [1] and out["count"]["values"] == [42] and out["score"]["values"] == [0.5]
    assert out["emb"]["shape"] == [2, 3] and out["emb"]["values"] == np.float32(golden.ROW["emb"]).reshape(-1).tolist()
    assert out["emb/shape"]["values"] == [2, 3]
    dec = out["decoded"]
    np.testing.assert_array_equal(np.array(dec["image"], dtype=np.uint8), ours["image"])
    np.testing.assert_array_equal(np.array(dec["depth"], dtype=np.uint16), ours["depth"])
    np.testing.assert_array_equal(np.array(dec["gray"], dtype=np.uint8), ours["gray"])
    np.testing.assert_array_equal(np.array(dec["audio"], dtype=np.float32), ours["audio"].samples)
    assert dec["weights"] == golden.ROW["weights"]


TF_SEQ_SCRIPT = r"""
import json, sys
import tensorflow as tf

from tfrecord_io.transforms.spec import tf_features

path, spec_json = sys.argv[1], sys.argv[2]
context, sequence = tf_features(json.loads(spec_json), tf)
(record,) = list(tf.data.TFRecordDataset(path))
ctx, seq = tf.io.parse_single_sequence_example(record, context, sequence)
out = {}
for part in (ctx, seq):
    for key, value in part.items():
        if isinstance(value, tf.sparse.SparseTensor):
            value = tf.sparse.to_dense(value)
        arr = value.numpy()
        out[key] = {"shape": list(getattr(arr, "shape", [])), "values": [v.decode() if isinstance(v, bytes) else v for v in arr.reshape(-1).tolist()] if hasattr(arr, "reshape") else [arr.decode()]}
print(json.dumps(out))
"""


@pytest.mark.tensorflow
def test_tensorflow_parses_our_sequence_examples(tmp_path):
    from tfrecord_io.format.writer import RecordWriter
    from tfrecord_io.transforms import AudioFrames, Steps, Text, decode_sequence_example, encode_sequence_row

    from transforms_media import audio_bytes, sine

    exe = tf_python()
    context = {"caption": Text()}
    sequence = {
        "tokens": Steps("int", vocabulary=["a", "b", "c"]),
        "audio": AudioFrames(frame_length=64, hop_length=32),
        "emb": Steps("float", step_length=2),
    }
    row = {
        "caption": "abc",
        "tokens": ["a", "c", "b", "b"],
        "audio": audio_bytes(sine(8000, 0.02, 1), 8000, "WAV", "FLOAT"),
        "emb": [[0.5, 1.5], [2.5, 3.5]],
    }
    path = str(tmp_path / "seq.tfrecord")
    with RecordWriter(path) as w:
        w.write_record(encode_sequence_row(row, context, sequence))
    spec = tf_parse_spec(feature_specs({**context, **sequence}))
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(
        [exe, "-c", TF_SEQ_SCRIPT, path, json.dumps(spec)], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    ours = decode_sequence_example(next(read_records(path))[1], context, sequence)
    assert out["caption"]["values"] == ["abc"]
    assert out["tokens"]["shape"] == [4] and out["tokens"]["values"] == [0, 2, 1, 1] == ours["tokens"].tolist()
    assert out["tokens/length"]["values"] == [4]
    assert out["emb"]["shape"] == [2, 2] and out["emb"]["values"] == [0.5, 1.5, 2.5, 3.5]
    frames = ours["audio"].frames
    assert out["audio"]["shape"] == [frames.shape[0], 64]
    np.testing.assert_array_equal(np.float32(out["audio"]["values"]), frames.reshape(-1))
