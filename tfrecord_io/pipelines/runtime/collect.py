"""Bring a pipeline's (small) results back to the launching process.

Beam has no "collect" for a finished batch job, so each result element is written as
a JSON line in a file per bundle in a directory the launcher reads after ``run()``. Where that
directory is depends on where the workers run (:meth:`ResultDir.for_job`):

- **Workers on this machine** (the DirectRunner / FnApiRunner with their own local
  workers, in memory, threads, processes or forked from the launcher; any runner with
  ``--environment_type=LOOPBACK``, whose SDK harness is the launcher itself): a local
  temporary directory, which every one of those processes sees.
- **Anything else** (Flink, Spark, Prism or Dataflow with DOCKER / PROCESS / EXTERNAL
  workers, a DirectRunner pointed at a user's EXTERNAL pool): the workers may be on
  other machines, or in containers with a private ``/tmp``, so the directory is on
  storage the cluster shares: under ``--temp_location`` when given, else under the
  job's output location when it has one (beside ``reshard --output`` and ``report
  --output``, inside ``build``'s and ``convert``'s output directory).
  With neither, the job is refused before it starts (:class:`ResultLocationError`, a
  usage error, exit 2) naming the flag to set.

The directory is removed when the ``with`` block ends, on any filesystem.
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid
from typing import Any, List, Optional

import apache_beam as beam

from tfrecord_io.storage import files
from tfrecord_io.usage_errors import UsageError

# Runners whose workers, unless an environment says otherwise, are this machine's processes.
_LOCAL_RUNNERS = {"directrunner", "switchingdirectrunner", "bundlebaseddirectrunner", "fnapirunner"}


class ResultLocationError(UsageError, ValueError):
    """A job on workers that may not share the launcher's disk has no shared place for
    its results; the message names the flag to set (a usage error, exit 2)."""


class WriteJson(beam.DoFn):
    """Elements -> ``<directory>/<uuid>.jsonl``, one JSON line per element and one file
    per bundle (or per ``FLUSH_BYTES`` of lines).

    Why per bundle: on an object store every file is a request or three (Beam's S3
    writes are multipart uploads); a file per element made a 20,000-element result take
    tens of minutes on a cluster whose results go through S3."""

    FLUSH_BYTES = 8 << 20

    def __init__(self, directory: str):
        self._dir = directory
        self._lines: List[bytes] = []
        self._size = 0

    def start_bundle(self) -> None:
        self._lines, self._size = [], 0

    def process(self, element: Any):
        line = json.dumps(element, default=str).encode("utf-8") + b"\n"
        self._lines.append(line)
        self._size += len(line)
        if self._size >= self.FLUSH_BYTES:
            self._flush()
        return iter(())  # a sink: nothing flows on (an iterator keeps Beam from warning)

    def finish_bundle(self) -> None:
        self._flush()

    def _flush(self) -> None:
        if not self._lines:
            return
        path = f"{self._dir.rstrip('/')}/{uuid.uuid4().hex}.jsonl"
        with files.open_raw(path, "wb") as f:
            f.write(b"".join(self._lines))
        self._lines, self._size = [], 0


def workers_share_local_disk(options) -> bool:
    """Do this job's SDK workers see the launcher's local disk? True for the local
    runners with their own workers and for any ``LOOPBACK`` environment (see the module
    docstring); False for every other runner or environment."""
    from apache_beam.options.pipeline_options import PortableOptions, StandardOptions

    environment = (options.view_as(PortableOptions).environment_type or "").upper()
    if environment == "LOOPBACK":
        return True
    if environment:  # DOCKER, PROCESS, EXTERNAL, BEAM_JAVA_...: the runner starts them elsewhere
        return False
    runner = options.view_as(StandardOptions).runner
    name = (str(runner) if runner else "DirectRunner").rsplit(".", 1)[-1].lower()
    return name in _LOCAL_RUNNERS or name + "runner" in _LOCAL_RUNNERS


def temp_location(options) -> Optional[str]:
    from apache_beam.options.pipeline_options import GoogleCloudOptions

    return options.view_as(GoogleCloudOptions).temp_location or None


def _output_parent(output: str) -> str:
    """The directory (or URL prefix) an output path is written into."""
    if files.is_remote(output):
        return output.rstrip("/").rsplit("/", 1)[0]
    return os.path.dirname(os.path.abspath(output)) or "."


def shared_location(
    options, prefix: str, output: Optional[str] = None, output_dir: Optional[str] = None
) -> Optional[str]:
    """A fresh directory name on storage the cluster shares, for what a job's workers
    hand the launcher (results, progress): ``<--temp_location>/<prefix>-<uuid>``, else
    hidden beside ``output`` (``.<prefix>-<uuid>`` in its folder) or inside
    ``output_dir``; None when the job has none of them. The directory is not created."""
    name = f"{prefix}-{uuid.uuid4().hex}"
    base = temp_location(options)
    if base is not None:
        return files.join(base, name)
    if output_dir:
        return files.join(output_dir, "." + name)
    if output:
        return files.join(_output_parent(output), "." + name)
    return None


class ResultDir:
    """A place for results: ``with ResultDir.for_job(options) as rd: ... pcoll | rd.sink(); rd.read()``.

    ``ResultDir(directory)`` uses ``directory`` (created if local; left in place at the
    end); ``ResultDir()`` a local temporary directory, removed at the end.
    """

    def __init__(self, directory: Optional[str] = None, *, remove: Optional[bool] = None):
        self._own = directory is None if remove is None else remove
        self.path = directory or tempfile.mkdtemp(prefix="tfrecord-io-results-")
        if not files.is_remote(self.path):
            os.makedirs(self.path, exist_ok=True)

    @classmethod
    def for_job(
        cls, options, command: str, output: Optional[str] = None, *, output_dir: Optional[str] = None
    ) -> ResultDir:
        """The result directory of a ``command`` run with these pipeline ``options``:
        local when the workers share this machine's disk, else a fresh directory under
        ``--temp_location``, or hidden beside ``output`` (a file or prefix the job writes)
        or inside ``output_dir`` (a directory the job writes into);
        :class:`ResultLocationError` when there is none of them."""
        if workers_share_local_disk(options):
            return cls()
        where = shared_location(options, f"tfrecord-io-{command}-results", output, output_dir)
        if where is None:
            from apache_beam.options.pipeline_options import StandardOptions

            runner = options.view_as(StandardOptions).runner or "DirectRunner"
            flag = {"report": " or an --output on that storage", "reshard": " or --output"}.get(command, "")
            raise ResultLocationError(
                f"tfrecord-io {command}: the {runner} workers may not share this machine's disk, so the job's "
                f"results need storage the whole cluster shares: set --temp_location{flag} "
                "(e.g. --temp_location=s3://bucket/tmp)"
            )
        return cls(where, remove=True)

    def sink(self) -> beam.ParDo:
        return beam.ParDo(WriteJson(self.path))

    def read(self) -> List[Any]:
        out: List[Any] = []
        for path in files.glob(f"{self.path.rstrip('/')}/*.jsonl"):
            with files.open_raw(path, "rb") as f:
                out.extend(json.loads(line) for line in f.read().decode("utf-8").splitlines() if line)
        return out

    def remove(self) -> None:
        """Delete the directory and what is in it (any filesystem; absent is fine)."""
        files.delete_prefix(self.path)

    def __enter__(self) -> ResultDir:
        return self

    def __exit__(self, *exc) -> None:
        if self._own:
            self.remove()
