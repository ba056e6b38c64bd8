"""``ReadDataset``: a split selection of a built dataset as a Beam PCollection.

The selection is resolved when the pipeline is built (``dataset_reader.select_dataset``:
``LATEST``, ``tfrecord_io_info.json``, TFDS-style slices); its records are then cut into
parts by record count (``sharding.plan_shard``: byte ranges where a dataset has no
indexes, whole files where compressed), the parts are spread over the workers by a
``Reshuffle``, and each worker reads its parts, streaming remote shards. Every record of
the selection is read exactly once.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Sequence

import apache_beam as beam

from ..dataset.dataset_reader import DatasetSelection, located_records, parse_located, select_dataset
from ..format.sharding import Piece, plan_shard

#: records per part when ``num_parts`` is not given (enough work per part to pay for
#: opening a shard and its index, small enough to spread a split over many workers)
RECORDS_PER_PART = 50_000


class _ReadParts(beam.DoFn):
    def __init__(self, description: Any, output: str, check_crc: bool) -> None:
        self._description = description
        self._output = output
        self._check_crc = check_crc

    def process(self, pieces: List[Piece]) -> Iterator[Any]:
        if self._output == "arrow":  # RecordBatches of the dataset's schema (tfrecord_io.arrow)
            from ..arrow import DEFAULT_BATCH_SIZE, DEFAULT_MAX_BATCH_BYTES, _record_batches, records_to_batch

            for datas, places in _record_batches(pieces, DEFAULT_BATCH_SIZE, DEFAULT_MAX_BATCH_BYTES, self._check_crc):
                yield records_to_batch(datas, self._description, places)
            return
        records = located_records(pieces, self._check_crc)
        if self._output == "bytes":
            for _, _, data in records:
                yield bytes(data)
        else:
            yield from parse_located(records, self._description)


class ReadDataset(beam.PTransform):
    """``p | ReadDataset(root, split="train[:90%]", version=None)``: the records of a
    split selection of the dataset at ``root`` (local or any Beam filesystem), as dicts
    of NumPy arrays (``output="example"``, the ``features`` of the version's metadata, by
    default every required non-sequence one), serialised bytes (``output="bytes"``) or
    ``pyarrow.RecordBatch``es of those features (``output="arrow"``, see ``tfrecord_io.arrow``).
    ``num_parts``: how many independent reads (default: about one per
    ``RECORDS_PER_PART`` records, at least one per shard). The resolved selection is
    ``.selection`` (its ``count`` is the exact number of records the PCollection holds).
    """

    def __init__(
        self,
        root: str,
        split: str = "train",
        version: Optional[str] = None,
        *,
        features: Optional[Sequence[str]] = None,
        output: str = "example",
        num_parts: Optional[int] = None,
        rounding: Optional[str] = None,
        check_crc: bool = True,
    ) -> None:
        super().__init__()
        if output not in ("example", "bytes", "arrow"):
            raise ValueError(f"output={output!r}: use 'example', 'bytes' or 'arrow'")
        self.selection: DatasetSelection = select_dataset(root, split, version, features=features, rounding=rounding)
        files = self.selection.files
        parts = num_parts or max(len(files), -(-self.selection.count // RECORDS_PER_PART), 1)
        self._parts = [p for p in (plan_shard(files, k, parts) for k in range(parts)) if p]
        self._output = output
        self._check_crc = check_crc

    def _description(self) -> Any:
        """What the parts parse by: the selection's description, or for ``output="arrow"``
        the Arrow schema of its features (shapes give scalar and fixed-size columns)."""
        if self._output != "arrow":
            return self.selection.description
        from ..arrow import schema_from_features

        features = self.selection.info.get("features") or {}
        return schema_from_features({k: features[k] for k in self.selection.description})

    def expand(self, pbegin: Any) -> Any:
        return (
            pbegin
            | "Parts" >> beam.Create(self._parts).with_output_types(Any)
            | "Spread" >> beam.Reshuffle().with_output_types(Any)
            | "Read"
            >> beam.ParDo(_ReadParts(self._description(), self._output, self._check_crc)).with_output_types(Any)
        )


__all__ = ["RECORDS_PER_PART", "ReadDataset"]
