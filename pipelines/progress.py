"""Progress for long local jobs: records/s and files done, while the pipeline runs.

Beam's metrics are only readable when a job ends, so for live progress each counting
DoFn writes its running count to a small file in a shared directory (workers of the
local runners - in-process, multi-processing, LOOPBACK Flink/Spark - all run on this
machine), and a thread in the launching process sums those files every second or two
and prints one line to stderr. On a remote cluster the files are simply not seen and
only the final summary prints.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
import time
import uuid
from typing import Dict, Optional, TextIO

import apache_beam as beam


class CountProgress(beam.DoFn):
    """Pass elements through, publishing how many this instance has seen under ``stage``."""

    def __init__(self, progress_dir: Optional[str], stage: str, weigh=None):
        self._dir = progress_dir
        self._stage = stage
        self._weigh = weigh  # optional element -> number (e.g. records in a batch)
        self._count = 0
        self._last = 0.0
        self._file: Optional[str] = None

    def setup(self):
        if self._dir and os.path.isdir(self._dir):
            self._file = os.path.join(self._dir, f"{self._stage}.{os.getpid()}.{uuid.uuid4().hex[:8]}")

    def _publish(self) -> None:
        if not self._file:
            return
        tmp = self._file + ".tmp"
        try:
            with open(tmp, "w") as f:
                f.write(str(self._count))
            os.replace(tmp, self._file)
        except OSError:
            self._file = None  # the directory went away: the job is over

    def process(self, element):
        self._count += self._weigh(element) if self._weigh else 1
        now = time.monotonic()
        if now - self._last > 0.5:
            self._last = now
            self._publish()
        yield element

    def finish_bundle(self):
        self._publish()


def read_counts(progress_dir: str) -> Dict[str, int]:
    totals: Dict[str, int] = {}
    try:
        names = os.listdir(progress_dir)
    except OSError:
        return totals
    for name in names:
        if name.endswith(".tmp"):
            continue
        stage = name.split(".", 1)[0]
        try:
            with open(os.path.join(progress_dir, name)) as f:
                totals[stage] = totals.get(stage, 0) + int(f.read() or 0)
        except (OSError, ValueError):
            continue
    return totals


class ProgressPrinter:
    """Context manager: a temporary progress directory and a thread that prints
    ``label: stage N (rate/s) | ...`` lines while the block runs."""

    def __init__(
        self,
        label: str,
        enabled: bool = True,
        interval: float = 2.0,
        stream: Optional[TextIO] = None,
        rate_stage: Optional[str] = None,
        total: Optional[int] = None,
    ):
        self.label = label
        self.enabled = enabled
        self.interval = interval
        # sys.stderr as it is now: during a CLI command that is the terminal, while file
        # descriptor 2 goes to the job's log (see pipelines.failures.JobLog)
        self.stream = stream if stream is not None else sys.stderr
        self.rate_stage = rate_stage
        self.total = total
        self.dir: Optional[str] = None
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._start = 0.0

    def __enter__(self) -> ProgressPrinter:
        self._start = time.monotonic()
        if self.enabled:
            self.dir = tempfile.mkdtemp(prefix="tfrecord-io-progress-")
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def line(self) -> str:
        counts = read_counts(self.dir) if self.dir else {}
        elapsed = max(time.monotonic() - self._start, 1e-9)
        parts = []
        for stage, n in sorted(counts.items()):
            text = f"{stage} {n:,}"
            if stage == self.rate_stage:
                text += f" ({n / elapsed:,.0f}/s)"
                if self.total:
                    text += f" of {self.total:,}"
            parts.append(text)
        return f"[{self.label} {elapsed:6.1f}s] " + (" | ".join(parts) if parts else "starting workers ...")

    def _run(self) -> None:
        last_counts: Dict[str, int] = {}
        last_print = time.monotonic()
        while not self._stop.wait(self.interval):
            counts = read_counts(self.dir) if self.dir else {}
            # Print when something moved, else at most every 10 s (a heartbeat).
            if counts != last_counts or time.monotonic() - last_print >= 10:
                print(self.line(), file=self.stream, flush=True)
                last_counts = counts
                last_print = time.monotonic()

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        if self.dir:
            import shutil

            shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start
