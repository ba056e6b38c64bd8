"""``EncodeExample`` / ``EncodeSequenceExample``: rows -> serialised Examples, with a
dead-letter output for rows that cannot be encoded.

    result = rows | EncodeExample({"image": Image(reencode="jpeg"), "label": Label(names)})
    result.examples   # PCollection of serialised tf.train.Example bytes
    result.rejected   # PCollection of {"row", "column", "stage", "reason"}

Beam metrics (namespace ``tfrecord_io.transforms.beam_encode``, the module's name):
``rows_in``, ``examples_out``, ``rejected`` and ``rejected_<stage>``; ``rows_in ==
examples_out + rejected`` holds for every run, because each element takes exactly one of
the two exits. A library the encoders need that does not import on a worker (Pillow,
soundfile, soxr, librosa) fails the job when the worker sets up, naming it
(``transforms.requirements``): an environment problem, not a row's.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, NamedTuple, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from tfrecord_io.errors import StorageUnavailableError

from .encode_errors import EncodeError, rejected_row
from .encoders.base import ColumnEncoder, Encoder
from .encoders.sequence import SequenceEncoder
from .requirements import check_requirements
from .rows import check_sequence_spec, check_spec, encode_row, encode_sequence_row

NAMESPACE = "tfrecord_io.transforms.beam_encode"
REJECTED = "rejected"


class EncodeResult(NamedTuple):
    """The two outputs of an encode transform."""

    examples: beam.PCollection
    rejected: beam.PCollection


class _EncodeFn(beam.DoFn):
    """Apply ``encode`` to each row; failures go to the ``rejected`` output."""

    def __init__(self, encode: Callable[[Any], bytes], namespace: str = NAMESPACE):
        self._encode = encode
        self._namespace = namespace

    def setup(self):
        columns = getattr(self._encode, "columns", None)
        if columns is not None:
            check_requirements(columns())  # a library left out fails the job here, not each row
        ns = self._namespace
        self.rows_in = Metrics.counter(ns, "rows_in")
        self.examples_out = Metrics.counter(ns, "examples_out")
        self.rejected = Metrics.counter(ns, "rejected")
        self._by_stage = {}

    def process(self, row):
        self.rows_in.inc()
        try:
            data = self._encode(row)
        except EncodeError as err:
            yield self._reject(row, err)
            return
        except StorageUnavailableError:
            raise  # the store is down: the job fails, no row is rejected for it
        except Exception as err:  # noqa: BLE001 - never lose a row to an unexpected error
            yield self._reject(row, EncodeError("encode", f"{type(err).__name__}: {err}"))
            return
        self.examples_out.inc()
        yield data

    def _reject(self, row, err: EncodeError):
        self.rejected.inc()
        counter = self._by_stage.get(err.stage)
        if counter is None:
            counter = self._by_stage[err.stage] = Metrics.counter(self._namespace, f"rejected_{err.stage}")
        counter.inc()
        return beam.pvalue.TaggedOutput(REJECTED, rejected_row(row, err))


class _RowEncoder:
    """Picklable ``row -> Example bytes`` for a spec."""

    def __init__(self, spec: Mapping[str, Encoder]):
        self.spec = dict(spec)

    def columns(self) -> Dict[str, ColumnEncoder]:
        return dict(self.spec)

    def __call__(self, row) -> bytes:
        return encode_row(row, self.spec)


class _SequenceRowEncoder:
    def __init__(self, context: Optional[Mapping[str, Encoder]], sequence: Mapping[str, SequenceEncoder]):
        self.context = dict(context or {})
        self.sequence = dict(sequence)

    def columns(self) -> Dict[str, ColumnEncoder]:
        return {**self.context, **self.sequence}

    def __call__(self, row) -> bytes:
        return encode_sequence_row(row, self.context, self.sequence)


class EncodeExample(beam.PTransform):
    """Rows (dicts) -> :class:`EncodeResult` ``(examples, rejected)``.

    ``spec`` maps each column to an encoder (``Image``, ``Audio``, ``Text``, ``Int``,
    ``Float``, ``Label``, ``Array``, ``Bytes``); it is checked when the transform is
    built (unknown encoders and key collisions raise at once, not on a worker).
    """

    def __init__(self, spec: Mapping[str, Encoder], label: Optional[str] = None):
        super().__init__(label)
        self.specs = check_spec(spec)
        self.spec = dict(spec)

    def expand(self, rows):
        out = rows | "Encode" >> beam.ParDo(_EncodeFn(_RowEncoder(self.spec))).with_outputs(REJECTED, main="examples")
        return EncodeResult(out.examples, out[REJECTED])


class EncodeSequenceExample(beam.PTransform):
    """Rows -> :class:`EncodeResult` of serialised ``SequenceExample`` bytes.

    ``context``: column -> plain encoder; ``sequence``: column -> ``Steps`` /
    ``AudioFrames`` (or another :class:`SequenceEncoder`).
    """

    def __init__(
        self,
        context: Optional[Mapping[str, Encoder]],
        sequence: Mapping[str, SequenceEncoder],
        label: Optional[str] = None,
    ):
        super().__init__(label)
        self.specs = check_sequence_spec(context, sequence)
        self.context = dict(context or {})
        self.sequence = dict(sequence)

    def expand(self, rows):
        fn = _EncodeFn(_SequenceRowEncoder(self.context, self.sequence))
        out = rows | "EncodeSequence" >> beam.ParDo(fn).with_outputs(REJECTED, main="examples")
        return EncodeResult(out.examples, out[REJECTED])


__all__ = ["EncodeExample", "EncodeResult", "EncodeSequenceExample", "NAMESPACE"]
