"""Progress for long jobs: records/s and files done, while the pipeline runs.

Beam's metrics are only readable when a job ends, so for live progress each counting
DoFn writes its running count to a small file in a progress directory, and a thread in
the launching process sums those files every few seconds and prints one line to
stderr. Where that directory is follows the job's results (``runtime.collect``):

- **Workers on this machine** (the local runners, LOOPBACK): a local temporary
  directory, files replaced atomically, counts published twice a second.
- **Workers that may be elsewhere** (a cluster, containers with a private ``/tmp``):
  a directory on storage the cluster shares - under ``--temp_location``, else hidden
  beside or inside the job's output (``collect.shared_location``) - written through
  Beam's filesystems (an object store's upload is atomic), at most every
  :data:`REMOTE_PUBLISH_S` within a bundle and at its end, so a worker makes a few
  small requests a minute. With no shared location there is no live progress, only the final summary.

A store that is being retried (Beam retries a failing S3 / GCS request for minutes
before it gives up) shows on the line as "retrying ...": every process that runs a
CountProgress writes the last retry it saw to ``retrying.<pid>`` in the progress
directory (``tfrecord_io/storage/storage_retry.py`` announces them; on shared storage from a
thread of its own, never inside Beam's retry loop), and the launcher keeps its own in a
local directory, so a store that is down - the shared one included - is still named
on the line.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Dict, Optional, TextIO, Tuple

import apache_beam as beam

from tfrecord_io.storage import files, storage_retry

RETRY_PREFIX = "retrying."
RETRY_FRESH_S = 30.0  # a retry note older than this is over (a success leaves no word)
REMOTE_PUBLISH_S = 5.0  # a counting DoFn writes to shared storage at most this often
REMOTE_INTERVAL_S = 5.0  # the launcher reads shared storage at most this often


def _shared(directory: str) -> bool:
    """A progress directory written through Beam's filesystems (a URL), not ``os``."""
    return files.is_remote(directory)


class RetryNotes:
    """A storage-retry listener writing each retry this process sees to
    ``<progress_dir>/retrying.<pid>`` (one JSON object with the time it was noted,
    replaced whole). On shared storage a thread of its own writes the newest note: the
    listener runs inside Beam's retry loop, which must not wait on another request."""

    def __init__(self, progress_dir: str):
        self.path = files.join(progress_dir, f"{RETRY_PREFIX}{os.getpid()}")
        self._remote = _shared(progress_dir)
        self._pending: Optional[dict] = None
        self._wake = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._lock = threading.Lock()
        self._closed = False

    def close(self) -> None:
        """Write nothing more: a note still pending is dropped and the writer ends (the
        job is over; its progress directory is being removed)."""
        with self._lock:
            self._closed = True
            self._pending = None
        self._wake.set()

    def __call__(self, event: dict) -> None:
        if self._closed:
            return
        note = dict(event, noted=time.time())
        if not self._remote:
            tmp = f"{self.path}.tmp"
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    json.dump(note, f)
                os.replace(tmp, self.path)
            except OSError:
                pass  # the directory went away: the job is over
            return
        with self._lock:
            self._pending = note
            if self._thread is None:
                self._thread = threading.Thread(target=self._write_notes, daemon=True, name="progress-retry-notes")
                self._thread.start()
        self._wake.set()

    def _write_notes(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                if self._closed:
                    return
                note, self._pending = self._pending, None
            if note is None:
                continue
            try:
                files.write_bytes(self.path, json.dumps(note).encode("utf-8"))
            except Exception:  # noqa: BLE001 - progress must never end the job (the store may be the one down)
                pass


# progress directory -> (its listener in this process, how many users hold it)
_notes_by_dir: Dict[str, Tuple[RetryNotes, int]] = {}
_notes_lock = threading.Lock()


def note_retries(progress_dir: str) -> RetryNotes:
    """Register (once per process and directory) a :class:`RetryNotes` for
    ``progress_dir``; each call is one more user, to be ended by :func:`release_retries`."""
    with _notes_lock:
        notes, users = _notes_by_dir.get(progress_dir, (None, 0))
        if notes is None:
            notes = RetryNotes(progress_dir)
            storage_retry.install()
            storage_retry.add_listener(notes)
        _notes_by_dir[progress_dir] = (notes, users + 1)
    return notes


def release_retries(progress_dir: str) -> None:
    """One user of ``progress_dir``'s listener is done; the last one unregisters and
    closes it. Without this a long-lived process (a notebook running jobs in process, a
    reused worker) kept one listener per job ever run, writing later retries of any
    store into directories long deleted."""
    with _notes_lock:
        notes, users = _notes_by_dir.get(progress_dir, (None, 0))
        if notes is None:
            return
        if users > 1:
            _notes_by_dir[progress_dir] = (notes, users - 1)
            return
        del _notes_by_dir[progress_dir]
    storage_retry.remove_listener(notes)
    notes.close()


def _entries(progress_dir: str) -> Dict[str, str]:
    """``{name: path}`` of the files in a progress directory (local or shared)."""
    if _shared(progress_dir):
        try:
            paths = files.glob(files.join(progress_dir, "*"))
        except Exception:  # noqa: BLE001 - an unreadable store shows as no progress, the job reports it
            return {}
        return {p.rstrip("/").rsplit("/", 1)[-1]: p for p in paths}
    try:
        return {n: os.path.join(progress_dir, n) for n in os.listdir(progress_dir)}
    except OSError:
        return {}


def _read_text(path: str) -> Optional[str]:
    try:
        if files.is_remote(path):
            return files.read_bytes(path).decode("utf-8")
        with open(path, encoding="utf-8") as f:
            return f.read()
    except Exception:  # noqa: BLE001 - a file being replaced or gone: skipped this round
        return None


def _newest_retry(progress_dir: str, now: Optional[float] = None) -> Optional[dict]:
    now = time.time() if now is None else now
    newest: Optional[Tuple[float, dict]] = None
    for name, path in _entries(progress_dir).items():
        if not name.startswith(RETRY_PREFIX) or name.endswith(".tmp"):
            continue
        text = _read_text(path)
        try:
            event = json.loads(text) if text else None
        except ValueError:
            event = None
        if not isinstance(event, dict):
            continue
        noted = event.get("noted")
        if not isinstance(noted, (int, float)):
            try:
                noted = os.path.getmtime(path)
            except OSError:
                continue
        if now - noted <= RETRY_FRESH_S and (newest is None or noted > newest[0]):
            newest = (float(noted), event)
    return newest[1] if newest is not None else None


def describe_retry(event: dict) -> str:
    limit = f", gives up at {event['timeout']:g}s" if event.get("timeout") else ""
    return (
        f"retrying {event.get('store', 'the store')}: {event.get('what', '?')} failing for "
        f"{event.get('failing_for', 0):.0f}s{limit} ({event.get('error', '')})"
    )


class CountProgress(beam.DoFn):
    """Pass elements through, publishing how many this instance has seen under ``stage``."""

    def __init__(self, progress_dir: Optional[str], stage: str, weigh=None):
        self._dir = progress_dir
        self._stage = stage
        self._weigh = weigh  # optional element -> number (e.g. records in a batch)
        self._count = 0
        self._published = -1
        self._last = 0.0
        self._file: Optional[str] = None
        self._remote = False
        self._noting = False  # this instance holds a use of the directory's retry notes

    def setup(self):
        if not self._dir:
            return
        self._remote = _shared(self._dir)
        if self._remote or os.path.isdir(self._dir):
            self._file = files.join(self._dir, f"{self._stage}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
            note_retries(self._dir)
            self._noting = True

    def _publish(self) -> None:
        if not self._file or self._count == self._published:
            return
        try:
            if self._remote:
                files.write_bytes(self._file, str(self._count).encode("ascii"))
            else:
                tmp = self._file + ".tmp"
                with open(tmp, "w") as f:
                    f.write(str(self._count))
                os.replace(tmp, self._file)
            self._published = self._count
        except OSError:
            self._file = None  # the directory went away: the job is over
        except Exception:  # noqa: BLE001 - progress must never end the job (a store that fails is reported by the job)
            pass

    def _due(self) -> bool:
        now = time.monotonic()
        if now - self._last > (REMOTE_PUBLISH_S if self._remote else 0.5):
            self._last = now
            return True
        return False

    def process(self, element):
        self.add(self._weigh(element) if self._weigh else 1)
        yield element

    def add(self, count: int) -> None:
        """Count ``count`` more (for a stage that counts its own work, not elements)."""
        self._count += count
        if self._due():
            self._publish()

    def finish_bundle(self):
        # every bundle's end (when the count moved): a bundle of a cluster runner's batch
        # job is a large part of the input, so on shared storage that is a few writes
        self._publish()

    def teardown(self):
        if not self._remote:  # on shared storage a late write would outlive the launcher's clean-up
            self._publish()
        if self._noting and self._dir:
            self._noting = False
            release_retries(self._dir)


def read_counts(progress_dir: str) -> Dict[str, int]:
    totals: Dict[str, int] = {}
    for name, path in _entries(progress_dir).items():
        if name.endswith(".tmp") or name.startswith(RETRY_PREFIX):
            continue
        stage = name.split(".", 1)[0]
        try:
            totals[stage] = totals.get(stage, 0) + int(_read_text(path) or 0)
        except ValueError:
            continue
    return totals


class ProgressPrinter:
    """Context manager: a progress directory for the job's workers (:attr:`dir`, for
    their :class:`CountProgress`) and a thread that prints
    ``label: stage N (rate/s) | ...`` lines while the block runs.

    ``options``: the job's pipeline options; when its workers may not share this
    machine's disk (``collect.workers_share_local_disk``) the directory is on storage
    the cluster shares, like the job's results: under ``--temp_location``, else hidden
    beside ``output`` (a file or prefix the job writes) or inside ``output_dir``; with
    none of them :attr:`dir` is None (no live counts). Without ``options``, or for
    local workers, a local temporary directory.

    A directory on an object store is read by a thread of its own, so the line never
    waits on the store: when that store is the one failing, the line still comes out
    on time and says "retrying" (the launcher's own retries are noted locally).
    ``interval``: seconds between lines (default 2, or 5 when reading an object store)."""

    def __init__(
        self,
        label: str,
        enabled: bool = True,
        interval: Optional[float] = None,
        stream: Optional[TextIO] = None,
        rate_stage: Optional[str] = None,
        total: Optional[int] = None,
        *,
        options: Any = None,
        output: Optional[str] = None,
        output_dir: Optional[str] = None,
    ):
        self.label = label
        self.enabled = enabled
        self._interval = interval
        self.interval = 2.0 if interval is None else interval
        # sys.stderr as it is now: during a CLI command that is the terminal, while file
        # descriptor 2 goes to the job's log (see tfrecord_io.pipelines.runtime.failures.JobLog)
        self.stream = stream if stream is not None else sys.stderr
        self.rate_stage = rate_stage
        self.total = total
        self._options = options
        self._output = output
        self._output_dir = output_dir
        self.dir: Optional[str] = None
        self._local: Optional[str] = None  # the launcher's own retry notes (and the workers' dir when local)
        self._stop = threading.Event()
        self._printing = threading.Lock()
        self.join_timeout = 5.0  # how long the exit waits for the printing thread (it prints nothing after)
        self._thread: Optional[threading.Thread] = None
        self._poller: Optional[threading.Thread] = None
        self._polled: Tuple[Dict[str, int], Optional[dict]] = ({}, None)
        self._start = 0.0
        self._notes: Optional[RetryNotes] = None

    def _workers_dir(self) -> Optional[str]:
        from tfrecord_io.pipelines.runtime.collect import shared_location, workers_share_local_disk

        if self._options is None or workers_share_local_disk(self._options):
            return self._local
        where = shared_location(self._options, f"tfrecord-io-{self.label}-progress", self._output, self._output_dir)
        if where is not None and not files.is_remote(where):
            os.makedirs(where, exist_ok=True)
        return where

    @property
    def _remote(self) -> bool:
        return self.dir is not None and _shared(self.dir)

    def __enter__(self) -> ProgressPrinter:
        self._start = time.monotonic()
        if self.enabled:
            self._local = tempfile.mkdtemp(prefix="tfrecord-io-progress-")
            self.dir = self._workers_dir()
            if self._remote:
                if self._interval is None:
                    self.interval = REMOTE_INTERVAL_S
                self._poller = threading.Thread(target=self._poll, daemon=True, name="progress-poll")
                self._poller.start()
            self._notes = note_retries(self._local)  # the launcher's own requests (listings, commit)
            self._thread = threading.Thread(target=self._run, daemon=True, name="progress")
            self._thread.start()
        return self

    def _poll(self) -> None:
        """Read the object-store directory, one round per interval, into :attr:`_polled`."""
        assert self.dir is not None
        while not self._stop.is_set():
            self._polled = (read_counts(self.dir), _newest_retry(self.dir))
            self._stop.wait(self.interval)

    def _read(self) -> Tuple[Dict[str, int], Optional[str]]:
        """The workers' counts and the newest fresh retry, the launcher's or a worker's."""
        if self._remote:
            counts, worker_retry = self._polled
            retries = [worker_retry]
        else:
            counts = read_counts(self.dir) if self.dir else {}
            retries = [_newest_retry(self.dir)] if self.dir and self.dir != self._local else []
        if self._local:
            retries.append(_newest_retry(self._local))
        fresh = [r for r in retries if r]
        newest = max(fresh, key=lambda r: r.get("noted", 0)) if fresh else None
        return counts, describe_retry(newest) if newest is not None else None

    def line(self, state: Optional[Tuple[Dict[str, int], Optional[str]]] = None) -> str:
        counts, retrying = state if state is not None else self._read()
        elapsed = max(time.monotonic() - self._start, 1e-9)
        parts = []
        for stage, n in sorted(counts.items()):
            text = f"{stage} {n:,}"
            if stage == self.rate_stage:
                text += f" ({n / elapsed:,.0f}/s)"
                if self.total:
                    text += f" of {self.total:,}"
            parts.append(text)
        if retrying:
            parts.append(retrying)
        return f"[{self.label} {elapsed:6.1f}s] " + (" | ".join(parts) if parts else "starting workers ...")

    def _run(self) -> None:
        last: Tuple[Dict[str, int], Optional[str]] = ({}, None)
        last_print = time.monotonic()
        while not self._stop.wait(self.interval):
            now = self._read()
            # Print when something moved or a store is being retried, else at most every 10 s (a heartbeat).
            if now != last or time.monotonic() - last_print >= 10:
                with self._printing:
                    if self._stop.is_set():  # the job is over: its summary may be printed already
                        return
                    print(self.line(now), file=self.stream, flush=True)
                last = now
                last_print = time.monotonic()

    def __exit__(self, *exc) -> None:
        # Under the print lock: a line being printed is finished first, and none comes
        # after this (the thread may still be reading counts when the join below gives
        # up on it, and a line printed then would follow the command's summary).
        with self._printing:
            self._stop.set()
        if self._notes is not None and self._local:
            release_retries(self._local)
            self._notes = None
        if self._thread:
            self._thread.join(timeout=self.join_timeout)
        if self._local:
            import shutil

            shutil.rmtree(self._local, ignore_errors=True)
        if self.dir and self.dir != self._local:
            _remove_soon(self.dir, wait_s=CLEANUP_WAIT_S)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start


CLEANUP_WAIT_S = 10.0  # how long the end of a job waits for its shared progress files to be deleted


def _remove_soon(directory: str, wait_s: float) -> None:
    """Delete a shared progress directory, waiting at most ``wait_s``: when its store is
    the one that failed the job, the job's failure is not held up by Beam's retries of
    the deletion (a few small files are then left under the temp location)."""

    def remove() -> None:
        try:
            files.delete_prefix(directory)
        except Exception:  # noqa: BLE001 - leftovers under the temp location must not mask the job's outcome
            pass

    worker = threading.Thread(target=remove, daemon=True, name="progress-cleanup")
    worker.start()
    worker.join(timeout=wait_s)
