"""``from_dataset``: a built dataset (``tfrecord-io build``) as a PyTorch dataset, by its
root, split selection and version (see ``tfrecord_io.dataset.dataset_reader``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Optional, Sequence, Union

from ..dataset.dataset_reader import DatasetSelection, select_dataset
from ..format import remote_reader
from ..format.sharding import FileInfo, describe_file
from ..storage.remote_objects import RemoteObject, handles
from .batched import TFRecordBatchDataset
from .dataset import TFRecordDataset
from .options import ReadOptions


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
    ``tfrecord_io.dataset.splits``). ``features``: the keys to parse (default: every required,
    non-sequence feature of ``tfrecord_io_info.json``), with their recorded types and shapes.

    ``batch_size=None``: a ``TFRecordDataset`` of single records (use it with
    ``DataLoader(ds, batch_size=...)``); ``len`` = records this rank reads.
    ``batch_size=N``: a ``TFRecordBatchDataset`` making whole batches in the worker (use
    ``DataLoader(ds, batch_size=None)``), fixed-shape features stacked to their recorded
    shapes; ``len`` = batches this rank yields. Other keyword arguments go to that class:
    the reading options (``ReadOptions``: ``shuffle_queue_size``, ``seed``, ``shuffle_files``,
    ``rank``, ..., or one ``options=``) and the class's own (``drop_last``, ``transform``,
    ``record_decoder``, ``batch_transform``, ...): e.g.
    ``record_decoder=tfrecord_io.transforms.ExampleDecoder(spec)`` decodes images in the workers.
    Every record of the selection is read once per epoch across workers and ranks. The
    selection is on the returned dataset as ``ds.selection`` (counts, files, info).

    ``shuffle="global"``: each epoch one permutation of every record of the selection
    (see ``TFRecordDataset``). ``state_dict()``/``load_state_dict()`` resume mid-epoch
    (``StatefulDataLoader``); a state of another root, version, split or seed is refused.
    ``s3://``, ``gs://`` and ``azfs://`` roots are read with range requests, read-ahead and parallel fetches
    (``tfrecord_io.format.remote_reader``; its ``configure`` sets the optional local cache).
    """
    objects: Dict[str, RemoteObject] = {}

    def describe(path: str, index: Optional[str], compression: Optional[str]) -> FileInfo:
        # S3 and GCS shards by the range reader's own requests (Beam's S3 filesystem makes
        # a boto3 client per call, ~0.8 s each), pinned to the ETag or generation they have now
        if not handles(path) or (index is not None and not handles(index)):
            return describe_file(path, index, compression)
        info, obj = remote_reader.describe(path, index, compression)
        objects[path] = obj
        return info

    selection: DatasetSelection = select_dataset(
        root, split, version, features=features, rounding=rounding, describe=describe
    )
    files = list(selection.files)
    # the reading options once (given as keywords or options=), with the versions stat'ed above
    options = ReadOptions.take(kwargs)
    options = replace(options, remote_objects={**objects, **options.remote_objects})
    if batch_size is None:
        ds: Union[TFRecordDataset, TFRecordBatchDataset] = TFRecordDataset(
            files, None, selection.description, options=options, **kwargs
        )
    else:
        kwargs.setdefault("shapes", selection.shapes)
        ds = TFRecordBatchDataset(files, None, selection.description, batch_size, options=options, **kwargs)
    ds.selection = selection  # type: ignore[union-attr]
    # a resume state names the selection: a state of another root, version or split is refused
    ds.origin = f"{selection.root.rstrip('/')} version {selection.version} split {split}"
    return ds


__all__ = ["from_dataset"]
