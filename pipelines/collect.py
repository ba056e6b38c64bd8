"""Bring a pipeline's (small) results back to the launching process.

Beam has no "collect" for a finished batch job, so each result element is written as
a small JSON file into a directory the launcher reads after ``run()``: a local
temporary directory for local runners, or a directory under the job's output on a
shared filesystem (any Beam FileSystems path) for a cluster.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from typing import Any, List, Optional

import apache_beam as beam

from tfrecord_io import files


class WriteJson(beam.DoFn):
    """Each element -> ``<directory>/<uuid>.json``."""

    def __init__(self, directory: str):
        self._dir = directory

    def process(self, element: Any):
        path = f"{self._dir.rstrip('/')}/{uuid.uuid4().hex}.json"
        with files.open_raw(path, "wb") as f:
            f.write(json.dumps(element, default=str).encode("utf-8"))
        return iter(())  # a sink: nothing flows on (an iterator keeps Beam from warning)


class ResultDir:
    """A place for results: ``with ResultDir() as rd: ... pcoll | rd.sink(); rd.read()``."""

    def __init__(self, directory: Optional[str] = None):
        self._own = directory is None
        self.path = directory or tempfile.mkdtemp(prefix="tfrecord-io-results-")
        if not files.is_remote(self.path):
            os.makedirs(self.path, exist_ok=True)

    def sink(self) -> beam.ParDo:
        return beam.ParDo(WriteJson(self.path))

    def read(self) -> List[Any]:
        out = []
        for path in files.glob(f"{self.path.rstrip('/')}/*.json"):
            with files.open_raw(path, "rb") as f:
                out.append(json.loads(f.read().decode("utf-8")))
        return out

    def __enter__(self) -> ResultDir:
        return self

    def __exit__(self, *exc) -> None:
        if self._own:
            shutil.rmtree(self.path, ignore_errors=True)
