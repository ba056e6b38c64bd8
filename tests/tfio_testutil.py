"""Shared helpers for the format-core tests: the golden manifest, and finding and
running a TensorFlow interpreter in a subprocess.

TensorFlow runs in its own interpreter (``scripts/setup-tf-env`` makes one) because
it must not be a dependency of tfrecord-io and cannot share a process with the
``tfrecord`` package. It is found through, in order: ``$TFRECORD_IO_TF_PYTHON``,
``$TFRECORD_IO_TF_VENV/bin/python``, ``~/.cache/tfrecord-io/tfenv/bin/python``,
``/opt/tfenv/bin/python``. Without one, TensorFlow tests skip with the reason, unless
``TFRECORD_IO_REQUIRE_TF=1`` (CI), where they fail.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import subprocess
import sys
from typing import Any, Dict, List, Optional

import numpy as np
import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
GOLDEN = os.path.join(TESTS, "golden")


@functools.cache
def manifest() -> Dict[str, Any]:
    with open(os.path.join(GOLDEN, "manifest.json"), encoding="utf-8") as f:
        return json.load(f)


def golden_path(name: str) -> str:
    return os.path.join(GOLDEN, name)


def golden_payloads(kind: Optional[str] = None) -> List[bytes]:
    """Payloads of the golden records (all, or those of one type: raw/example/sequence_example)."""
    return [base64.b64decode(r["payload_b64"]) for r in manifest()["records"] if kind in (None, r["type"])]


def golden_records(kind: Optional[str] = None) -> List[Dict[str, Any]]:
    return [r for r in manifest()["records"] if kind in (None, r["type"])]


def expected_value(desc: Dict[str, Any]):
    """A manifest feature description -> (kind, list of Python values) as TF decoded it.

    Floats come back as a float32 array built from their bit patterns (NaN-exact).
    """
    kind = desc["kind"]
    if kind is None:
        return None, []
    if kind == "bytes_list":
        return kind, [base64.b64decode(v) for v in desc["b64"]]
    if kind == "float_list":
        return kind, np.array(desc["f32_bits"], dtype=np.uint32).view(np.float32)
    return kind, list(desc["int"])


# ------------------------------------------------------------------ TensorFlow subprocess


def _candidates() -> List[str]:
    if os.environ.get("TFRECORD_IO_TF_PYTHON"):  # an explicit choice is the only one tried
        return [os.environ["TFRECORD_IO_TF_PYTHON"]]
    out = []
    if os.environ.get("TFRECORD_IO_TF_VENV"):
        out.append(os.path.join(os.environ["TFRECORD_IO_TF_VENV"], "bin", "python"))
    out.append(os.path.expanduser("~/.cache/tfrecord-io/tfenv/bin/python"))
    out.append("/opt/tfenv/bin/python")
    return out


def tf_env() -> Dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    env.setdefault("CUDA_VISIBLE_DEVICES", "")
    return env


@functools.cache
def find_tf_python() -> Optional[str]:
    """The first candidate interpreter that imports tensorflow, or None."""
    for py in _candidates():
        if not (os.path.isfile(py) and os.access(py, os.X_OK)):
            continue
        probe = subprocess.run([py, "-c", "import tensorflow"], env=tf_env(), capture_output=True, timeout=300)
        if probe.returncode == 0:
            return py
    return None


def require_tf_python() -> str:
    """The TF interpreter; skip (or, with TFRECORD_IO_REQUIRE_TF=1, fail) without one."""
    py = find_tf_python()
    if py is None:
        msg = (
            "no Python with TensorFlow found (tried: " + ", ".join(_candidates()) + "); "
            "run scripts/setup-tf-env or set TFRECORD_IO_TF_PYTHON"
        )
        if os.environ.get("TFRECORD_IO_REQUIRE_TF") == "1":
            pytest.fail("TFRECORD_IO_REQUIRE_TF=1 but " + msg)
        pytest.skip(msg)
    return py


def run_tf(code: str, *args: str, timeout: int = 600) -> Any:
    """Run ``code`` in the TF interpreter (checkout on PYTHONPATH); return the JSON it
    prints on its last stdout line."""
    py = require_tf_python()
    proc = subprocess.run(
        [py, "-c", code, *args], env=tf_env(), capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    if proc.returncode != 0:
        raise AssertionError(f"TensorFlow subprocess failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    return json.loads(lines[-1])


def run_python(code: str, env_extra: Optional[Dict[str, str]] = None, timeout: int = 300) -> str:
    """Run ``code`` in a fresh interpreter like this one; return its stdout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra or {})
    proc = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
