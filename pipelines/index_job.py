"""``tfrecord-io index``: build missing or stale indexes for many files, in parallel.

An index is *stale* when it does not describe the file as it is now: its frames do
not tile the file exactly (the file grew, shrank or is another file), or it is older
than the file. Every file is read with both CRCs checked before its index is written
(atomically), so a corrupt file gets no index and is reported with path and offset.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional

import apache_beam as beam

from tfrecord_io import files
from tfrecord_io.errors import TFRecordError
from tfrecord_io.index import create_index, find_index, index_path_for, load_index


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


class IndexFile(beam.DoFn):
    """Check one file's index; rebuild it when missing or stale (or always, with force)."""

    def __init__(self, force: bool = False):
        self._force = force

    def process(self, path: str) -> Iterable[Dict[str, Any]]:
        status = index_status(path)
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
    paths: List[str], options, force: bool = False, progress_dir: Optional[str] = None
) -> List[Dict[str, Any]]:
    """Run the index pipeline; returns one status dict per file, sorted by path."""
    from .collect import ResultDir
    from .progress import CountProgress

    with ResultDir() as results:
        with beam.Pipeline(options=options) as p:
            (
                p
                | "Files" >> beam.Create(paths)
                | "Spread" >> beam.Reshuffle()
                | "Index" >> beam.ParDo(IndexFile(force))
                | "Progress" >> beam.ParDo(CountProgress(progress_dir, "files"))
                | "Collect" >> results.sink()
            )
        return sorted(results.read(), key=lambda r: r["path"])
