"""Test session setup shared by every test module.

Beam's multi-processing runner starts worker processes that unpickle DoFns and
functions by module name (Beam 2.62 pickles with dill, by reference), so those workers
must be able to import this checkout and the test modules (imported by pytest under
their bare names from ``tests/``): put both folders on ``PYTHONPATH`` for every
subprocess the tests start.
"""

from __future__ import annotations

import os

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join([REPO, TESTS, *[p for p in _paths if p not in (REPO, TESTS)]])

# The S3 server fixtures (``s3_server``, ``s3_bucket``): a real versitygw on 127.0.0.1.
pytest_plugins = ["s3support"]
