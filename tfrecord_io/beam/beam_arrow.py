"""Arrow in the Beam IO: ``ReadFromTFRecord(..., output="arrow")`` and RecordBatches
into ``WriteToTFRecord``.

Why a separate module: the read stays the splittable record read of
:mod:`tfrecord_io.beam.beam_source` (byte ranges, index, CRCs, dead letters); Arrow is one
DoFn after it that turns each list of ``(path, offset, record)`` (one restriction's
records, never mixed with another's) into one ``pyarrow.RecordBatch`` of a fixed schema,
by :func:`tfrecord_io.arrow.records_to_batch`. A fixed schema matters: every batch of
the PCollection has the same one, so a Parquet sink or ``pa.Table.from_batches`` takes
them as they come. The sink side expands RecordBatches (or Tables) into serialised
Examples before the shard assignment, so shards, index and atomic finalize are the
same as for records.

Between stages batches travel as Arrow IPC streams (:class:`RecordBatchCoder`), not
pickles.
"""

from __future__ import annotations

import io
from typing import Any, Iterator, List, NamedTuple, Optional, Sequence, Tuple, Union

import apache_beam as beam
import pyarrow as pa
from apache_beam import coders
from apache_beam.metrics import Metrics

from .. import arrow
from ..errors import ExampleCodecError, UnknownFeatureError
from ..format.framing import FRAME_OVERHEAD

DEFAULT_ARROW_BATCH_SIZE = 1024
_INFER_RECORDS = 1000
_METRICS_NAMESPACE = "tfrecord_io"  # beam_source.METRICS_NAMESPACE (not imported: no cycle)
_DEAD_LETTER = "dead_letter"  # beam_source.DEAD_LETTER


class RecordBatchCoder(coders.Coder):
    """A ``pyarrow.RecordBatch`` as one Arrow IPC stream (schema + batch)."""

    def encode(self, value: pa.RecordBatch) -> bytes:
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, value.schema) as writer:
            writer.write_batch(value)
        return sink.getvalue()

    def decode(self, encoded: bytes) -> pa.RecordBatch:
        return pa.ipc.open_stream(pa.py_buffer(encoded)).read_next_batch()

    def is_deterministic(self) -> bool:
        return False

    def to_type_hint(self):
        return pa.RecordBatch


coders.registry.register_coder(pa.RecordBatch, RecordBatchCoder)


class ArrowReadResult(NamedTuple):
    """What a read with ``output="arrow", on_corrupt="dead_letter"`` returns."""

    records: Any  # PCollection of RecordBatch
    dead_letter: Any  # PCollection of {path, start, end, reason}


def schema_of(description: Any) -> Optional[pa.Schema]:
    """The schema a description names, or None (inferred later, or a list of keys)."""
    if description is None or _keys_of(description) is not None:
        return None
    if isinstance(description, (pa.Schema, dict)) or hasattr(description, "items"):
        return arrow.schema_from_features(description)
    raise ValueError(
        "output='arrow' takes description as a pyarrow.Schema, a mapping of features "
        f"({{'label': 'int'}} or tfrecord_io_info.json's features) or a list of feature names, not {description!r:.80}"
    )


def _keys_of(description: Any) -> Optional[List[str]]:
    """The feature names of a description that is a list of them (as ``to_arrow`` takes:
    a name or a list/tuple of names), else None."""
    if isinstance(description, str):
        return [description]
    if isinstance(description, (list, tuple)) and description and all(isinstance(k, str) for k in description):
        return list(description)
    return None


def select_keys(schema: pa.Schema, keys: Sequence[str], sampled: str) -> pa.Schema:
    """``schema`` reduced to ``keys``, in their order; a key the sample did not have is
    an error naming it and where the sample came from."""
    missing = [k for k in keys if k not in schema.names]
    if missing:
        raise ValueError(
            f"features {missing} are not in the first {_INFER_RECORDS} records of {sampled} (they have: "
            f"{', '.join(schema.names) or 'none'}): check the names, or pass description= a pyarrow.Schema "
            "or {name: type} to read them"
        )
    return pa.schema([schema.field(k) for k in keys])


def infer_schema_of_pattern(
    file_pattern: str, records: int = _INFER_RECORDS, keys: Optional[Sequence[str]] = None
) -> pa.Schema:
    """The schema of the first ``records`` Examples of the first file matched, at
    pipeline construction (as ``validate`` matches the pattern then): every batch of
    the read then has this one schema, and a later record with a feature the sample
    lacked fails the job naming it (pass ``description=`` to read such files).
    ``keys``: only these features, their types from the sample (other features of
    later records are then not read, as ``to_arrow(description=[...])`` does)."""
    paths = arrow._data_files([file_pattern])
    sample: List[Any] = []
    locations: List[Tuple[Optional[str], Optional[int]]] = []
    for datas, places in arrow._record_batches(arrow._pieces(paths[:1]), records, 1 << 62, True):
        sample = [bytes(d) for d in datas]
        locations = [places[i] for i in range(len(datas))]
        break
    schema = arrow.infer_schema(sample, locations)
    return schema if keys is None else select_keys(schema, keys, paths[0] if paths else file_pattern)


class _RecordsToArrow(beam.DoFn):
    """``[(path, offset, record), ...]`` -> one RecordBatch of the schema. A record the
    schema does not fit raises (file, offset), or with dead letters goes there and the
    rest of the list still makes a batch. ``strict`` (an inferred schema): a record with
    a feature the schema lacks fails the job (:class:`UnknownFeatureError`), dead
    letters or not: the record is sound, the sample the schema came from was short."""

    def __init__(self, schema: pa.Schema, dead_letter: bool, strict: bool = False):
        self._schema = schema
        self._dead_letter = dead_letter
        self._strict = strict
        self._bad = Metrics.counter(_METRICS_NAMESPACE, "corrupt_regions")

    def process(self, items: Sequence[Tuple[str, int, bytes]]) -> Iterator[Any]:
        datas = [d for _, _, d in items]
        locations = [(p, o) for p, o, _ in items]
        try:
            yield arrow.records_to_batch(datas, self._schema, locations, self._strict)
            return
        except UnknownFeatureError:
            raise
        except ExampleCodecError:
            if not self._dead_letter:
                raise
        good: List[bytes] = []
        good_at: List[Tuple[str, int]] = []
        for data, (path, offset) in zip(datas, locations):
            try:
                arrow.records_to_batch([data], self._schema, [(path, offset)], self._strict)
            except UnknownFeatureError:
                raise
            except ExampleCodecError as err:
                self._bad.inc()
                yield beam.pvalue.TaggedOutput(
                    _DEAD_LETTER,
                    {"path": path, "start": offset, "end": offset + len(data) + FRAME_OVERHEAD, "reason": err.reason},
                )
                continue
            good.append(data)
            good_at.append((path, offset))
        if good:
            yield arrow.records_to_batch(good, self._schema, good_at, self._strict)


class ArrowBatches:
    """The Arrow step of a read: built by ``ReadAllFromTFRecord`` for ``output="arrow"``."""

    def __init__(self, description: Any, on_corrupt: str, with_metadata: Any):
        if with_metadata:
            raise ValueError("output='arrow' gives RecordBatches: with_metadata/with_filename do not apply")
        self.schema = schema_of(description)
        self.keys = _keys_of(description)  # the features to keep, their types from the first file
        self._dead_letter = on_corrupt == "dead_letter"
        self._inferred = False

    def require_schema(self, file_pattern: str, validate: bool) -> None:
        """Infer the schema from the pattern's first file when none was given, or the
        types of the features ``description`` lists (not with ``validate=False``,
        which promises not to open the files before the job)."""
        if self.schema is None:
            if not validate:
                raise ValueError(
                    "output='arrow' with validate=False needs description= a pyarrow.Schema or {name: type} "
                    "(the schema of the batches; a list of names takes its types from the files)"
                )
            self.schema = infer_schema_of_pattern(file_pattern, keys=self.keys)
            self._inferred = self.keys is None  # every feature: a later unknown one fails; chosen ones: others skipped

    def attach(self, read: Any) -> Any:
        """The read's output (lists of ``(path, offset, record)``) -> RecordBatches."""
        if self.schema is None:
            raise ValueError(
                "ReadAllFromTFRecord(output='arrow') needs description= a pyarrow.Schema or a mapping of "
                "features ({name: type}; a list of names is not enough): the files are not known when the "
                "pipeline is built, so no types can be read from them"
            )
        fn = beam.ParDo(_RecordsToArrow(self.schema, self._dead_letter, strict=self._inferred))
        if not self._dead_letter:
            return read | "ToArrow" >> fn.with_output_types(pa.RecordBatch)
        converted = read.records | "ToArrow" >> fn.with_outputs(_DEAD_LETTER, main="records")
        converted.records.element_type = pa.RecordBatch
        dead = (read.dead_letter, converted.dead_letter) | "DeadLetters" >> beam.Flatten()
        return ArrowReadResult(converted.records, dead)


class _ArrowToRecords(beam.DoFn):
    """RecordBatches and Tables -> their rows as serialised Examples; anything else
    passes through unchanged."""

    def process(self, element: Any) -> Iterator[Any]:
        if isinstance(element, (pa.RecordBatch, pa.Table)):
            yield from arrow.batch_to_records(element)
        else:
            yield element


def expand_record_batches(pcoll: Any) -> Any:
    """``pcoll`` with RecordBatches/Tables expanded to records (a step only when the
    element type may be Arrow: a PCollection typed ``bytes`` goes on as it is)."""
    hint = pcoll.element_type
    if isinstance(hint, type) and not issubclass(hint, (pa.RecordBatch, pa.Table)):
        return pcoll
    return pcoll | "ArrowToExamples" >> beam.ParDo(_ArrowToRecords())


ArrowElement = Union[pa.RecordBatch, pa.Table]

__all__ = [
    "DEFAULT_ARROW_BATCH_SIZE",
    "ArrowReadResult",
    "RecordBatchCoder",
    "expand_record_batches",
    "infer_schema_of_pattern",
]
