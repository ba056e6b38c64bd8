"""A minimal splittable read used to check how the distributed runners split work.

Each TFRecord file is one element; its restriction is the byte range [0, size), cut into
``num_splits`` ranges up front. A record belongs to the range in which it starts (the
same rule as ``tfrecord_io.format.reader.read_records``), so every record is read once whatever
the cuts. Every output carries the start of the restriction that produced it and the
process/thread that ran it, so a test can see how many restrictions a runner actually
processed and where -- which is what Beam issue #24422 was about.
"""

from __future__ import annotations

import os
import threading
from typing import Iterator, Tuple

import apache_beam as beam
from apache_beam.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from apache_beam.metrics import Metrics
from apache_beam.transforms.core import RestrictionProvider

from tfrecord_io.format.reader import read_records
from tfrecord_io.storage.files import file_size


class ProbeReadFn(beam.DoFn, RestrictionProvider):
    """path -> (restriction start, "pid/thread", record bytes) for each record.

    The DoFn is its own restriction provider: [0, size) cut into ``num_splits``
    near-equal byte ranges by the initial split.
    """

    def __init__(self, num_splits: int):
        super().__init__()
        self._num_splits = num_splits
        self._restrictions = Metrics.counter("runner_probe", "restrictions")

    def initial_restriction(self, path: str) -> OffsetRange:
        return OffsetRange(0, file_size(path))

    def split(self, path: str, restriction: OffsetRange) -> Iterator[OffsetRange]:
        step = max(1, -(-restriction.size() // self._num_splits))
        for start in range(restriction.start, restriction.stop, step):
            yield OffsetRange(start, min(start + step, restriction.stop))

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, path: str, restriction: OffsetRange) -> int:
        return restriction.size()

    def process(self, path: str, tracker=beam.DoFn.RestrictionParam()) -> Iterator[Tuple[int, str, bytes]]:
        restriction = tracker.current_restriction()
        self._restrictions.inc()
        where = f"{os.getpid()}/{threading.current_thread().name}"
        for offset, data in read_records(path, start=restriction.start, end=restriction.stop):
            if not tracker.try_claim(offset):
                return
            yield restriction.start, where, bytes(data)
        # Claim the end so the tracker knows the range is done even when the last
        # record starts well before it.
        tracker.try_claim(tracker.current_restriction().stop)
