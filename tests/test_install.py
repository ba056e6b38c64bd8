"""The built wheel installs beside the apache-beam and TensorFlow a user already has.

A fresh venv gets the newest lane's apache-beam and tensorflow-cpu (exact versions from
``constraints/newest.txt``, i.e. what the newest lane tested); then ``pip install`` of
the wheel built from this checkout -- pip's own choices, no constraints -- must change
the version of nothing that was there. Then ``tfrecord_io``, ``tensorflow`` and
``apache_beam`` are imported in one process (the installed wheel, not this checkout)
and an Example goes both ways: written here and parsed by ``tf.io.parse_single_example``,
built by ``tf.train.Example`` and parsed here.

Heavy (a new venv with Beam and TensorFlow, about 1.5 GB installed), so marked
``install``; ``scripts/test`` runs it in the newest lane, on Python 3.13.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from typing import Dict

import pytest
from test_wheel import wheel_problems

from tfio_testutil import REPO

pytestmark = pytest.mark.install

NEWEST = os.path.join(REPO, "constraints", "newest.txt")
ALREADY_THERE = ["apache-beam", "tensorflow-cpu"]

_ROUND_TRIP = r"""
import json, os, sys, tempfile
import numpy as np
import tfrecord_io as tfio
import tensorflow as tf
import apache_beam as beam
from google.protobuf.internal import api_implementation

d = tempfile.mkdtemp()
# ours -> TensorFlow
ours_path = os.path.join(d, "ours.tfrecord")
with tfio.TFRecordWriter(ours_path) as w:
    w.write({"label": (7, "int"), "caption": ("h\u00e9llo", "byte"), "scores": ([0.5, -1.25], "float")})
spec = {
    "label": tf.io.FixedLenFeature([], tf.int64),
    "caption": tf.io.FixedLenFeature([], tf.string),
    "scores": tf.io.FixedLenFeature([2], tf.float32),
}
(record,) = list(tf.data.TFRecordDataset(ours_path))
parsed = tf.io.parse_single_example(record, spec)
# TensorFlow -> ours
tf_path = os.path.join(d, "tf.tfrecord")
example = tf.train.Example(features=tf.train.Features(feature={
    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[-3, 2**40])),
    "caption": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"from tf"])),
    "scores": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5])),
}))
with tf.io.TFRecordWriter(tf_path) as w:
    w.write(example.SerializeToString())
(ours,) = list(tfio.example_loader(tf_path, None, {"label": "int", "caption": "byte", "scores": "float"}))
print(json.dumps({
    "tf_label": int(parsed["label"].numpy()),
    "tf_caption": parsed["caption"].numpy().decode("utf-8"),
    "tf_scores": parsed["scores"].numpy().tolist(),
    "ours_label": ours["label"].tolist(),
    "ours_caption": bytes(ours["caption"]).decode("utf-8"),
    "ours_scores": ours["scores"].tolist(),
    "tfio_file": tfio.__file__,
    "versions": {"tensorflow": tf.__version__, "apache_beam": beam.__version__},
    "protobuf_backend": api_implementation.Type(),
}))
"""


def run(*cmd: str, **kwargs) -> str:
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=1800, **kwargs)
    assert proc.returncode == 0, (
        f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


def installed(python: str) -> Dict[str, str]:
    listing = json.loads(run(python, "-m", "pip", "list", "--format=json", "--disable-pip-version-check"))
    return {p["name"].lower().replace("_", "-"): p["version"] for p in listing}


def clean_env() -> Dict[str, str]:
    """This environment without anything that would put the checkout on the path."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PIP_CONSTRAINT", "VIRTUAL_ENV")
    }
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


def test_wheel_installs_beside_the_newest_beam_and_tensorflow(tmp_path):
    env = clean_env()
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "-w",
        str(tmp_path / "dist"),
        REPO,
        env=env,
        cwd=str(tmp_path),
    )
    (wheel,) = glob.glob(str(tmp_path / "dist" / "tfrecord_io-*.whl"))
    assert wheel_problems(wheel) == []  # only tfrecord_io/, all of it (test_wheel)

    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", str(venv), env=env)
    python = str(venv / "bin" / "python")
    run(python, "-m", "pip", "install", "--quiet", "-c", NEWEST, *ALREADY_THERE, env=env, cwd=str(tmp_path))
    before = installed(python)
    assert all(name in before for name in ALREADY_THERE), before

    run(python, "-m", "pip", "install", "--quiet", wheel, env=env, cwd=str(tmp_path))
    after = installed(python)
    changed = {name: (version, after.get(name)) for name, version in before.items() if after.get(name) != version}
    assert changed == {}, f"installing the wheel changed {changed}"
    assert "tfrecord-io" in after

    out = json.loads(run(python, "-c", _ROUND_TRIP, env=env, cwd=str(tmp_path)).strip().splitlines()[-1])
    assert out["tfio_file"].startswith(str(venv)), out["tfio_file"]  # the wheel, not the checkout
    assert out["versions"] == {"tensorflow": before["tensorflow-cpu"], "apache_beam": before["apache-beam"]}
    assert (out["tf_label"], out["tf_caption"], out["tf_scores"]) == (7, "h\u00e9llo", [0.5, -1.25])
    assert (out["ours_label"], out["ours_caption"], out["ours_scores"]) == ([-3, 2**40], "from tf", [1.5])
    assert out["protobuf_backend"] == "upb"
