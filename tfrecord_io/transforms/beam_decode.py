"""``DecodeExample`` / ``DecodeSequenceExample``: serialised records -> dicts of
decoded values (see ``tfrecord_io.transforms.decoders``), with records that do not decode sent to
``.rejected`` as ``{"record", "column", "stage", "reason"}``.

Metrics (namespace ``tfrecord_io.transforms.beam_decode``, the module's name):
``records_in``, ``decoded``, ``rejected``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, NamedTuple, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics

from .decoders import ExampleDecoder, decode_sequence_example
from .encoders.base import Encoder
from .encoders.sequence import SequenceEncoder
from .rows import check_sequence_spec, check_spec

NAMESPACE = "tfrecord_io.transforms.beam_decode"


class DecodeResult(NamedTuple):
    decoded: beam.PCollection
    rejected: beam.PCollection


class _DecodeFn(beam.DoFn):
    def __init__(self, decode: Callable[[Any], Any]):
        self._decode = decode

    def setup(self):
        self.records_in = Metrics.counter(NAMESPACE, "records_in")
        self.decoded = Metrics.counter(NAMESPACE, "decoded")
        self.rejected = Metrics.counter(NAMESPACE, "rejected")

    def process(self, record):
        self.records_in.inc()
        try:
            out = self._decode(record)
        except Exception as err:  # noqa: BLE001 - a bad record goes to the dead letter
            self.rejected.inc()
            stage = getattr(err, "stage", "decode")
            reason = getattr(err, "reason", f"{type(err).__name__}: {err}")
            yield beam.pvalue.TaggedOutput(
                "rejected",
                {"record": bytes(record), "column": getattr(err, "column", None), "stage": stage, "reason": reason},
            )
            return
        self.decoded.inc()
        yield out


class _SequenceDecoder:
    def __init__(self, context, sequence):
        self.context = dict(context or {})
        self.sequence = dict(sequence)

    def __call__(self, record):
        return decode_sequence_example(record, self.context, self.sequence)


class DecodeExample(beam.PTransform):
    """Serialised Example bytes -> :class:`DecodeResult` ``(decoded, rejected)``."""

    def __init__(self, spec: Mapping[str, Encoder], label: Optional[str] = None):
        super().__init__(label)
        check_spec(spec)
        self.spec = dict(spec)

    def expand(self, records):
        out = records | "Decode" >> beam.ParDo(_DecodeFn(ExampleDecoder(self.spec))).with_outputs(
            "rejected", main="decoded"
        )
        return DecodeResult(out.decoded, out.rejected)


class DecodeSequenceExample(beam.PTransform):
    """Serialised SequenceExample bytes -> :class:`DecodeResult`."""

    def __init__(
        self,
        context: Optional[Mapping[str, Encoder]],
        sequence: Mapping[str, SequenceEncoder],
        label: Optional[str] = None,
    ):
        super().__init__(label)
        check_sequence_spec(context, sequence)
        self.context = dict(context or {})
        self.sequence = dict(sequence)

    def expand(self, records):
        fn = _DecodeFn(_SequenceDecoder(self.context, self.sequence))
        out = records | "DecodeSequence" >> beam.ParDo(fn).with_outputs("rejected", main="decoded")
        return DecodeResult(out.decoded, out.rejected)


__all__ = ["DecodeExample", "DecodeResult", "DecodeSequenceExample", "NAMESPACE"]
