"""``tfrecord-io index``: build missing or stale indexes for many files, in parallel.

An index is *stale* when it does not describe the file as it is now: its frames do
not tile the file exactly (the file grew, shrank or is another file), or it is older
than the file. Every file is read with both CRCs checked before its index is written
(atomically), so a corrupt file gets no index and is reported with path and offset.

Records never travel through Beam here: one element per file, each indexed where it is
read (``create_index`` scans it in the compiled core), and one small status per file
goes to the launcher through the job's result directory (``runtime.collect``). So the
job is Beam's start-up plus what the plain loop does: with ``--force`` an existing index
is not read first (it is rewritten whatever it says), and the files are spread over the
workers by ``Create``'s own reshuffle (a second one was a stage for nothing).
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional

import apache_beam as beam

from tfrecord_io.errors import TFRecordError
from tfrecord_io.format.index import create_index, find_index, index_path_for, load_index
from tfrecord_io.storage import files


def index_status(path: str) -> Dict[str, Any]:
    """``{"path", "index", "state"}`` with state ``ok``, ``missing``, ``stale`` or
    ``compressed`` (cannot be indexed)."""
    if files.normalize_compression(None, path):
        return {"path": path, "index": None, "state": "compressed"}
    existing = find_index(path)
    if existing is None:
        return {"path": path, "index": index_path_for(path), "state": "missing"}
    try:
        idx = load_index(existing)
    except TFRecordError:
        return {"path": path, "index": existing, "state": "stale"}
    size = files.file_size(path)
    fresh = idx.matches(size)
    if fresh and not files.is_remote(path):
        fresh = os.path.getmtime(existing) >= os.path.getmtime(path)
    return {"path": path, "index": existing, "state": "ok" if fresh else "stale"}


def _forced_status(path: str) -> Dict[str, Any]:
    """:func:`index_status` for ``--force``: the index is rebuilt whatever it holds, so it
    is not loaded and checked first (that cost ~40% of building it); state ``stale`` when
    one exists (reported as rebuilt), else ``missing``."""
    if files.normalize_compression(None, path):
        return {"path": path, "index": None, "state": "compressed"}
    existing = find_index(path)
    if existing is None:
        return {"path": path, "index": index_path_for(path), "state": "missing"}
    return {"path": path, "index": existing, "state": "stale"}


class IndexFile(beam.DoFn):
    """Check one file's index; rebuild it when missing or stale (or always, with force)."""

    def __init__(self, force: bool = False):
        self._force = force

    def process(self, path: str) -> Iterable[Dict[str, Any]]:
        status = _forced_status(path) if self._force else index_status(path)
        if status["state"] == "compressed":
            status["error"] = "compressed files cannot be indexed by offset"
            yield status
            return
        if status["state"] == "ok" and not self._force:
            yield status
            return
        try:
            idx = create_index(path, status["index"])
        except TFRecordError as err:
            status.update(state="corrupt", error=str(err))
            yield status
            return
        status.update(state="rebuilt" if status["state"] == "stale" else "created", records=len(idx))
        yield status


def run_index(
    paths: List[str], options, force: bool = False, progress_dir: Optional[str] = None, workers=None
) -> List[Dict[str, Any]]:
    """Run the index pipeline; returns one status dict per file, sorted by path."""
    from tfrecord_io.pipelines.runtime.collect import ResultDir
    from tfrecord_io.pipelines.runtime.progress import CountProgress

    with ResultDir.for_job(options, "index") as results:
        runner, run_options = workers.pipeline_runner(options) if workers is not None else (None, options)
        with beam.Pipeline(runner=runner, options=run_options) as p:
            (
                p
                | "Files" >> beam.Create(paths)  # reshuffles two or more paths over the workers
                | "Index" >> beam.ParDo(IndexFile(force))
                | "Progress" >> beam.ParDo(CountProgress(progress_dir, "files"))
                | "Collect" >> results.sink()
            )
        return sorted(results.read(), key=lambda r: r["path"])
