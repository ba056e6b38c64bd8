"""tfrecord-io: TFRecord files without TensorFlow, and Apache Beam IO that splits them.

The format core (framing, codec, index, reader, writer) imports neither Beam nor
torch. Beam transforms (``ReadFromTFRecord``, ``ReadAllFromTFRecord``,
``WriteToTFRecord``, ``ReadDataset``, and ``BuildDataset``, which builds a versioned
dataset from a PCollection of rows) are loaded on first use; the PyTorch datasets live
in ``tfrecord_io.torch``. ``to_arrow``/``to_arrow_batches`` give Examples as Arrow
(``tfrecord_io.arrow``). ``select_dataset``/``iter_dataset`` open a built dataset by
its root and a TFDS-style split selection (``"train[:90%]"``).
"""

from __future__ import annotations

from . import _moved, iterator_utils
from ._lazy import lazy_getattr
from ._version import __version__  # noqa: F401 - the package version
from .dataset.dataset_reader import DatasetSelection, iter_dataset, select_dataset
from .errors import (
    CorruptRecordError,
    ExampleCodecError,
    IndexFileError,
    RecordTooLargeError,
    TFRecordError,
    TruncatedRecordError,
    UnknownFeatureError,
)
from .format.codec import (
    build_example,
    build_sequence_example,
    infer_description,
    parse_example,
    parse_examples_batch,
    parse_sequence_example,
    serialize_example,
    serialize_sequence_example,
)
from .format.framing import CorruptRegion, encode_frame
from .format.index import RecordIndex, build_index, create_index, find_index, load_index
from .format.reader import (
    example_loader,
    multi_tfrecord_loader,
    read_records,
    sequence_loader,
    tfrecord_iterator,
    tfrecord_loader,
)
from .format.writer import RecordWriter, TFRecordWriter

# Beam-facing names, imported lazily so the format core works without Beam loaded.
_LAZY = {
    "ReadFromTFRecord": "tfrecord_io.beam.beam_io",
    "ReadAllFromTFRecord": "tfrecord_io.beam.beam_io",
    "WriteToTFRecord": "tfrecord_io.beam.beam_io",
    "ReadDataset": "tfrecord_io.beam.beam_dataset",
    # pyarrow loads on first use too (it is a large import).
    "to_arrow": "tfrecord_io.arrow",
    "to_arrow_batches": "tfrecord_io.arrow",
    "BuildDataset": "tfrecord_io.pipelines.building.transform",
    # look records up by key (a built dataset's key index)
    "open_dataset": "tfrecord_io.dataset.keyed_dataset",
}


__getattr__ = lazy_getattr(__name__, _LAZY)
_moved.install()  # the module paths of 0.2 (tfrecord_io.files, ...) import, with a DeprecationWarning


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
    "UnknownFeatureError",
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
