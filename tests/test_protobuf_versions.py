"""The generated ``tfrecord_io/proto/example_pb2.py`` under every protobuf major that
``pyproject.toml`` allows: the oldest allowed runtime (5.26.1, the gencode's own version) and
the newest 6.x and 7.x that PyPI serves.

Each runtime is installed (once, cached under ``~/.cache/tfrecord-io/protobuf/``) into
a folder of its own that goes first on ``PYTHONPATH`` of a fresh interpreter, so the
lane's own protobuf (5.x on the pinned lane, 6.x on the newest; Beam caps it below 7)
is left alone. Every runtime must parse the golden Examples written by TensorFlow and
serialise them, and Examples built here, to exactly the bytes the lane's runtime gives.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tfio_testutil import REPO, TESTS

RUNTIMES = ["protobuf==5.26.1", "protobuf==6.*", "protobuf==7.*"]
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "tfrecord-io", "protobuf")

_PROBE = r"""
import base64, hashlib, json
import google.protobuf
from google.protobuf.internal import api_implementation
from tfrecord_io.format.codec import build_example, build_sequence_example, parse_example, parse_sequence_example
from tfrecord_io.proto.example_pb2 import Example, SequenceExample
from tfio_testutil import golden_records

def plain(value):
    return value.tolist() if hasattr(value, "tolist") else value

digest = hashlib.sha256()
for record in golden_records():
    payload = base64.b64decode(record["payload_b64"])
    if record["type"] == "example":
        digest.update(Example.FromString(payload).SerializeToString(deterministic=True))
        parsed = parse_example(payload)
        digest.update(repr(sorted((k, plain(v)) for k, v in parsed.items())).encode())
    elif record["type"] == "sequence_example":
        digest.update(SequenceExample.FromString(payload).SerializeToString(deterministic=True))
        context, lists = parse_sequence_example(payload)
        digest.update(repr(sorted((k, plain(v)) for k, v in context.items())).encode())
        digest.update(repr(sorted((k, [plain(s) for s in v]) for k, v in lists.items())).encode())
built = build_example({"label": (7, "int"), "text": ([b"a", "\u00fc".encode()], "byte"), "v": ([0.5, -1.5], "float")})
digest.update(built.SerializeToString(deterministic=True))
seq = build_sequence_example({"id": (1, "int")}, {"tokens": ([[1, 2], [], [3]], "int")})
digest.update(seq.SerializeToString(deterministic=True))
print(json.dumps({"version": google.protobuf.__version__, "backend": api_implementation.Type(), "digest": digest.hexdigest()}))
"""


def runtime_dir(requirement: str) -> str:
    """A folder holding just ``requirement`` (installed once with pip --target)."""
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    target = os.path.join(CACHE, python + "-" + requirement.replace("==", "-").replace("*", "x"))
    done = os.path.join(target, ".complete")
    if not os.path.exists(done):
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--upgrade",
                "--no-deps",
                "--target",
                target,
                requirement,
            ],
            check=True,
            timeout=600,
        )
        open(done, "w").close()
    return target


def probe(first_on_path: str = "") -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in [first_on_path, REPO, TESTS] if p))
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def lane_runtime() -> dict:
    return probe()


@pytest.mark.parametrize("requirement", RUNTIMES)
def test_generated_code_works_the_same_under_every_allowed_protobuf(requirement, lane_runtime):
    got = probe(runtime_dir(requirement))
    wanted = requirement.split("==")[1]  # "5.26.1" or "7.*"
    assert got["version"] == wanted or (wanted.endswith(".*") and got["version"].split(".")[0] == wanted[:-2]), got
    assert got["backend"] == "upb"
    assert got["digest"] == lane_runtime["digest"], (requirement, got, lane_runtime)
