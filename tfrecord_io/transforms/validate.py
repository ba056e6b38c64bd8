"""``ValidateTFRecords``: file patterns -> the splitting read with both CRCs checked on
every record -> optional check of each record against a feature spec -> one report
dict (see ``tfrecord_io.transforms.checks`` for its fields).

Scales with the split read: each file is cut into ``bundle_size`` byte ranges, each
range is read by whichever worker gets it (a record belongs to the range it starts
in, found by resynchronisation), so one big file uses every worker. Compressed files
are read whole.

The read step is :class:`_SplitRead`: ``tfrecord_io``'s ``ReadAllRecordBatches`` (the
splitting read, ``(path, [offsets], [records])`` per batch) with
``on_corrupt="dead_letter"`` and no index (record boundaries are
found from the bytes, so a stale index cannot hide damage). Records leave the read in
batches of up to :data:`READ_BATCH` (one range, one file each); each batch is checked
against the spec next to where it is read, by the compiled parser in one call, and only
its partial report reaches the combine: Beam's per-element cost is paid per batch.
"""

from __future__ import annotations

from typing import Optional, Sequence

import apache_beam as beam
from apache_beam.metrics import Metrics

from .checks import add_item, batch_report, empty_report, finish_report, list_files, merge_reports
from .spec import FeatureSpec, SpecLike, feature_specs

NAMESPACE = "tfrecord_io.transforms.validate"
DEFAULT_BUNDLE_SIZE = 64 << 20
#: Records per element out of the read (at most ~4 MiB of them): checked in one call,
#: so Beam's per-element cost is paid per batch, not per record.
READ_BATCH = 1024


class _CheckBatchFn(beam.DoFn):
    """A batch ``(path, [offsets], [records])`` of one range -> ``("batch", path, partial report)``.

    A batch is checked by one call of the compiled parser (``checks.check_records``),
    and only its partial report (counts, bytes, the records it rejects) goes on to the
    combine: no element per record.
    """

    def __init__(self, specs: Sequence[FeatureSpec]):
        self._specs = list(specs)

    def setup(self):
        self.invalid = Metrics.counter(NAMESPACE, "invalid_records")

    def process(self, batch):
        path, offsets, records = batch
        report = batch_report(path, offsets, records, self._specs)
        if report["problems"]:
            self.invalid.inc(len(report["problems"]))
        yield ("batch", path, report)


def _corrupt_item(entry):
    return ("corrupt", entry["path"], entry["start"], entry["end"], entry["reason"])


class _SplitRead(beam.PTransform):
    """``(path, size)`` file entries -> validation items, through the package's
    splittable read (``ReadAllFromTFRecord``: byte ranges, both CRCs checked, bad
    regions to a dead-letter output instead of failing)."""

    def __init__(self, specs, compression_type, check_crc, bundle_size):
        super().__init__()
        self._specs, self._compression, self._check_crc, self._bundle = specs, compression_type, check_crc, bundle_size

    def expand(self, file_entries):
        from tfrecord_io.beam.beam_source import ReadAllRecordBatches

        read = (
            file_entries
            | "Paths" >> beam.Map(lambda e: e[0])
            | "SplitRead"
            >> ReadAllRecordBatches(
                compression_type="auto" if self._compression is None else self._compression,
                index_pattern=False,  # validate the bytes themselves: boundaries by resynchronisation
                desired_bundle_size=self._bundle,
                batch_size=READ_BATCH,
                on_corrupt="dead_letter",
                check_crc=self._check_crc,
            )
        )
        records = read.records | "Check" >> beam.ParDo(_CheckBatchFn(self._specs))
        corrupt = read.dead_letter | "Corrupt" >> beam.Map(_corrupt_item)
        return (records, corrupt) | "Items" >> beam.Flatten()


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
        monitor: an optional DoFn every checked item passes through on its way to the
            report (e.g. the CLI's live progress counter); it must yield its input.
            Records come as ``("batch", path, partial report)`` items (the
            partial report's ``records`` says how many), corrupt regions one each.
    """

    def __init__(
        self,
        file_patterns,
        spec: SpecLike = None,
        compression_type: Optional[str] = None,
        check_crc: bool = True,
        bundle_size: int = DEFAULT_BUNDLE_SIZE,
        label: Optional[str] = None,
        monitor: Optional[beam.DoFn] = None,
    ):
        super().__init__(label)
        self.monitor = monitor
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
        if self.monitor is not None:
            items = items | "Monitor" >> beam.ParDo(self.monitor)
        entries = file_entries | "FileItems" >> beam.Map(lambda e: ("file", e[0], e[1]))
        return (items, entries, unmatched) | "All" >> beam.Flatten() | "Report" >> beam.CombineGlobally(_ReportFn())


__all__ = ["DEFAULT_BUNDLE_SIZE", "ValidateTFRecords"]
