"""PyTorch datasets over TFRecord files (install with the ``[torch]`` extra).

Drop-in for the ``tfrecord`` package's ``tfrecord.torch``: ``TFRecordDataset`` and
``MultiTFRecordDataset`` take the same arguments, and here read every record exactly
once per epoch across DataLoader workers and distributed ranks, with or without an
index; ``TFRecordIndexedDataset`` gives map-style random access for ``Sampler``s.
``pad_collate``/``PadCollate`` and ``PadTo`` batch variable-length features.
``TFRecordBatchDataset`` makes whole batches in the worker (``DataLoader(ds,
batch_size=None)``), several times faster; ``from_dataset(root, "train[:90%]")`` opens a
built dataset by its root and a TFDS-style split selection; its workers reuse their
shared-memory batch buffers (``free_batch_buffers()`` lets the kept ones go).

Every iterable dataset here is ``Stateful`` (torchdata): ``state_dict()`` /
``load_state_dict()`` resume mid-epoch by seeking to index offsets, not by replaying;
``shuffle="global"`` permutes all the records of an epoch; ``s3://``, ``gs://`` and
``azfs://`` files are read with range requests (``tfrecord_io.format.remote_reader``).

This is the only part of ``tfrecord_io`` that imports torch.
"""

from .batched import TFRecordBatchDataset, batch_tensor
from .built import from_dataset
from .collate import PadCollate, PadTo, pad_collate, pad_stack
from .context import ReadContext, current_context, distributed_rank
from .dataset import MultiTFRecordDataset, RecordDecoder, TFRecordDataset, TFRecordIndexedDataset
from .options import ReadOptions
from .resume import StateError
from .shm_pool import free_batch_buffers

__all__ = [
    "MultiTFRecordDataset",
    "PadCollate",
    "PadTo",
    "ReadContext",
    "ReadOptions",
    "RecordDecoder",
    "StateError",
    "TFRecordDataset",
    "TFRecordBatchDataset",
    "TFRecordIndexedDataset",
    "batch_tensor",
    "current_context",
    "distributed_rank",
    "free_batch_buffers",
    "from_dataset",
    "pad_collate",
    "pad_stack",
]
