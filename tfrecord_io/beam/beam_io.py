"""Apache Beam IO for TFRecord files: the splittable source and the sharded atomic sink.

Re-exports the transforms from their modules (``beam_source``, ``beam_sink``) so that
``from tfrecord_io.beam.beam_io import ReadFromTFRecord`` and ``tfrecord_io.ReadFromTFRecord``
both work; importing this module imports Beam.
"""

from .beam_sink import DEFAULT_SHARD_NAME_TEMPLATE, WriteToTFRecord, shard_name
from .beam_source import DEAD_LETTER, METRICS_NAMESPACE, ReadAllFromTFRecord, ReadFromTFRecord, resolve_index_path

__all__ = [
    "DEFAULT_SHARD_NAME_TEMPLATE",
    "WriteToTFRecord",
    "shard_name",
    "DEAD_LETTER",
    "METRICS_NAMESPACE",
    "ReadAllFromTFRecord",
    "ReadFromTFRecord",
    "resolve_index_path",
]
