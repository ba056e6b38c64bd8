"""``from_dataset``: a built dataset (``tfrecord-io build``) as a PyTorch dataset, by its
root, split selection and version (see ``tfrecord_io.dataset_reader``)."""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from ..dataset_reader import DatasetSelection, select_dataset
from .batched import TFRecordBatchDataset
from .dataset import TFRecordDataset


def from_dataset(
    root: str,
    split: str = "train",
    version: Optional[str] = None,
    batch_size: Optional[int] = None,
    *,
    features: Optional[Sequence[str]] = None,
    rounding: Optional[str] = None,
    **kwargs: Any,
) -> Union[TFRecordDataset, TFRecordBatchDataset]:
    """The records of ``split`` of the dataset at ``root`` (local or ``s3://``, ``gs://``,
    ...), following ``<root>/LATEST`` unless ``version`` names one.

    ``split`` is a TFDS-style selection: ``"train"``, ``"train[:90%]"``,
    ``"train[10%:]"``, ``"validation[:1000]"``, ``"train+validation"`` (percent rounding:
    ``tfrecord_io.splits``). ``features``: the keys to parse (default: every required,
    non-sequence feature of ``dataset_info.json``), with their recorded types and shapes.

    ``batch_size=None``: a ``TFRecordDataset`` of single records (use it with
    ``DataLoader(ds, batch_size=...)``); ``len`` = records this rank reads.
    ``batch_size=N``: a ``TFRecordBatchDataset`` making whole batches in the worker (use
    ``DataLoader(ds, batch_size=None)``), fixed-shape features stacked to their recorded
    shapes; ``len`` = batches this rank yields. Other keyword arguments go to that class
    (``shuffle_queue_size``, ``seed``, ``shuffle_files``, ``drop_last``, ``transform``,
    ``record_decoder``, ``batch_transform``, ``rank``, ``world_size``, ...): e.g.
    ``record_decoder=transforms.ExampleDecoder(spec)`` decodes images in the workers.
    Every record of the selection is read once per epoch across workers and ranks. The
    selection is on the returned dataset as ``ds.selection`` (counts, files, info).
    """
    selection: DatasetSelection = select_dataset(root, split, version, features=features, rounding=rounding)
    files = list(selection.files)
    if batch_size is None:
        ds: Union[TFRecordDataset, TFRecordBatchDataset] = TFRecordDataset(files, None, selection.description, **kwargs)
    else:
        kwargs.setdefault("shapes", selection.shapes)
        ds = TFRecordBatchDataset(files, None, selection.description, batch_size, **kwargs)
    ds.selection = selection  # type: ignore[union-attr]
    return ds


__all__ = ["from_dataset"]
