"""Only tfrecord_io.torch may import torch: the format core, the Beam modules and
everything else in the package must work where torch is not installed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCRIPT = r"""
import importlib, importlib.util, json, pkgutil, sys
import tfrecord_io
names = []

def walk(name):  # like pkgutil.walk_packages, but never imports the skipped subpackage
    if name == "tfrecord_io.torch" or name.endswith(".__main__"):
        return
    mod = importlib.import_module(name)
    names.append(name)
    for info in pkgutil.iter_modules(getattr(mod, "__path__", [])):
        walk(name + "." + info.name)

for pkg in ("tfrecord_io",):
    if importlib.util.find_spec(pkg) is not None:
        walk(pkg)
for lazy in ("ReadFromTFRecord",):
    try:
        getattr(tfrecord_io, lazy)
    except (AttributeError, ImportError):
        pass
print(json.dumps({"modules": names, "torch": sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))}))
"""


def test_nothing_outside_tfrecord_io_torch_imports_torch():
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, check=True, timeout=300
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert {"tfrecord_io.format.reader", "tfrecord_io.format.sharding", "tfrecord_io.format.random_access"} <= set(
        result["modules"]
    )
    assert result["torch"] == [], f"torch imported by one of {result['modules']}"


def test_tfrecord_io_torch_does_import_torch():
    # the check above is only meaningful if the same probe sees torch when it is imported
    out = subprocess.run(
        [sys.executable, "-c", "import sys, tfrecord_io.torch; print('torch' in sys.modules)"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    assert out.stdout.strip() == "True"
