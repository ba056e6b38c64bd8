"""``ValidateTFRecords``: file patterns -> the splitting read with both CRCs checked on
every record -> optional check of each record against a feature spec -> one report
dict (see ``transforms.checks`` for its fields).

Scales with the split read: each file is cut into ``bundle_size`` byte ranges, each
range is read by whichever worker gets it (a record belongs to the range it starts
in, found by resynchronisation), so one big file uses every worker. Compressed files
are read whole.

The read step is :class:`_SplitRead` (records as ``(path, offset, nbytes, problems)``,
bad regions as ``CorruptRegion``-like tuples). When ``tfrecord_io.ReadFromTFRecord``
offers ``with_metadata=True, on_corrupt="dead_letter"``, it replaces ``_SplitRead`` in
``expand`` below; nothing else changes.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from .checks import add_item, empty_report, finish_report, list_files, merge_reports, read_range, split_file
from .spec import FeatureSpec, SpecLike, feature_specs

NAMESPACE = "transforms.validate"
DEFAULT_BUNDLE_SIZE = 64 << 20


class _ReadRangeFn(beam.DoFn):
    """Read one byte range; emit a small item per record / bad region."""

    def __init__(self, specs: Sequence[FeatureSpec], compression_type: Optional[str], check_crc: bool):
        self._specs = list(specs)
        self._compression = compression_type
        self._check_crc = check_crc

    def setup(self):
        self.records = Metrics.counter(NAMESPACE, "records")
        self.bad = Metrics.counter(NAMESPACE, "bad")

    def process(self, rng):
        path, start, end = rng
        for item in read_range(path, start, end, self._specs, self._compression, self._check_crc):
            if item[0] == "record":
                self.records.inc()
                if item[4]:
                    self.bad.inc()
            else:
                self.bad.inc()
            yield item


class _SplitRead(beam.PTransform):
    """``(path, size)`` file entries -> validation items, split by byte ranges."""

    def __init__(self, specs, compression_type, check_crc, bundle_size):
        super().__init__()
        self._specs, self._compression, self._check_crc, self._bundle = specs, compression_type, check_crc, bundle_size

    def expand(self, file_entries):
        return (
            file_entries
            | "Split" >> beam.FlatMap(lambda e, b=self._bundle, c=self._compression: split_file(e[0], e[1], b, c))
            | "Spread" >> beam.Reshuffle()
            | "ReadRanges" >> beam.ParDo(_ReadRangeFn(self._specs, self._compression, self._check_crc))
        )


class _ReportFn(beam.CombineFn):
    def create_accumulator(self):
        return empty_report()

    def add_input(self, acc, item):
        return add_item(acc, item)

    def merge_accumulators(self, accs):
        return merge_reports(accs)

    def extract_output(self, acc):
        return finish_report(acc)


class ValidateTFRecords(beam.PTransform):
    """Pipeline root (apply to ``pipeline``) -> a one-element PCollection: the report.

    Args:
        file_patterns: a pattern or list of patterns (local or any Beam filesystem).
        spec: None (CRC checks only), ``{column: encoder}``, a list of ``FeatureSpec``
            or a description ``{"key": "int"}``.
        compression_type: None/"auto" (by suffix), "", "gzip" or "zlib".
        bundle_size: bytes per range of an uncompressed file.
    """

    def __init__(
        self,
        file_patterns,
        spec: SpecLike = None,
        compression_type: Optional[str] = None,
        check_crc: bool = True,
        bundle_size: int = DEFAULT_BUNDLE_SIZE,
        label: Optional[str] = None,
    ):
        super().__init__(label)
        self.patterns = [file_patterns] if isinstance(file_patterns, str) else list(file_patterns)
        self.specs = feature_specs(spec)
        self.compression_type = compression_type
        self.check_crc = check_crc
        if bundle_size <= 0:
            raise ValueError("bundle_size must be positive")
        self.bundle_size = bundle_size

    def expand(self, pbegin):
        file_entries = (
            pbegin
            | "Patterns" >> beam.Create(self.patterns)
            | "ListFiles" >> beam.FlatMap(lambda pattern: list_files([pattern]))
            | "Dedup" >> beam.Distinct()
        )
        unmatched = (
            pbegin
            | "PatternsToCheck" >> beam.Create(self.patterns)
            | "Unmatched" >> beam.FlatMap(lambda pattern: [] if list_files([pattern]) else [("nomatch", pattern)])
        )
        items = file_entries | "Read" >> _SplitRead(self.specs, self.compression_type, self.check_crc, self.bundle_size)
        entries = file_entries | "FileItems" >> beam.Map(lambda e: ("file", e[0], e[1]))
        return (items, entries, unmatched) | "All" >> beam.Flatten() | "Report" >> beam.CombineGlobally(_ReportFn())


__all__ = ["DEFAULT_BUNDLE_SIZE", "ValidateTFRecords"]
