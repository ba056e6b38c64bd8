"""tfrecord-io: TFRecord files without TensorFlow, and Apache Beam IO that splits them.

The format core (framing, codec, index, reader, writer) imports neither Beam nor
torch. Beam transforms (``ReadFromTFRecord``, ``ReadAllFromTFRecord``,
``WriteToTFRecord``, ``ReadDataset``) are loaded on first use; the PyTorch datasets live
in ``tfrecord_io.torch``. ``select_dataset``/``iter_dataset`` open a built dataset by
its root and a TFDS-style split selection (``"train[:90%]"``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from . import iterator_utils
from ._version import __version__  # noqa: F401 - the package version
from .codec import (
    build_example,
    build_sequence_example,
    infer_description,
    parse_example,
    parse_examples_batch,
    parse_sequence_example,
    serialize_example,
    serialize_sequence_example,
)
from .dataset_reader import DatasetSelection, iter_dataset, select_dataset
from .errors import (
    CorruptRecordError,
    ExampleCodecError,
    IndexFileError,
    RecordTooLargeError,
    TFRecordError,
    TruncatedRecordError,
)
from .framing import CorruptRegion, encode_frame
from .index import RecordIndex, build_index, create_index, find_index, load_index
from .reader import (
    example_loader,
    multi_tfrecord_loader,
    read_records,
    sequence_loader,
    tfrecord_iterator,
    tfrecord_loader,
)
from .writer import RecordWriter, TFRecordWriter

# Beam-facing names, imported lazily so the format core works without Beam loaded.
_LAZY = {
    "ReadFromTFRecord": "tfrecord_io.beam_io",
    "ReadAllFromTFRecord": "tfrecord_io.beam_io",
    "WriteToTFRecord": "tfrecord_io.beam_io",
    "ReadDataset": "tfrecord_io.beam_dataset",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tfrecord_io' has no attribute {name!r}")
    return getattr(import_module(module), name)


__all__ = [
    "CorruptRecordError",
    "CorruptRegion",
    "DatasetSelection",
    "ExampleCodecError",
    "IndexFileError",
    "RecordIndex",
    "RecordWriter",
    "TFRecordError",
    "TFRecordWriter",
    "RecordTooLargeError",
    "TruncatedRecordError",
    "build_example",
    "build_index",
    "build_sequence_example",
    "create_index",
    "encode_frame",
    "example_loader",
    "find_index",
    "infer_description",
    "iter_dataset",
    "iterator_utils",
    "load_index",
    "multi_tfrecord_loader",
    "parse_example",
    "parse_examples_batch",
    "parse_sequence_example",
    "read_records",
    "select_dataset",
    "sequence_loader",
    "serialize_example",
    "serialize_sequence_example",
    "tfrecord_iterator",
    "tfrecord_loader",
    *_LAZY,
]
