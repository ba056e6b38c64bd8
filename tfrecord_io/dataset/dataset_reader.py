"""Open a built dataset by its root: version, split selection, features, exact counts.

``select_dataset(root, "train[:90%]")`` follows ``<root>/LATEST`` (or a given version),
reads ``tfrecord_io_info.json`` and turns a TFDS-style split selection (``dataset/splits.py``)
into the shard files to read, each with the range of its records that the selection
takes (through the shard's index), plus the feature description and fixed shapes the
build recorded. The readers built on it (``iter_dataset`` here, ``tfrecord_io.torch.
from_dataset``, the Beam ``ReadDataset``) cut that list into parts by record count
(``sharding.plan_shard``), so every record of the selection is read exactly once
whatever the number of readers. Roots may be local or anything Beam's ``FileSystems``
opens (``s3://``, ``gs://``): shards are then read in blocks of whole records, never
copied whole first.

Nothing here imports torch or Beam (a remote root loads Beam's filesystems).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from ..errors import ExampleCodecError, IndexFileError, TFRecordError
from ..format.codec import parse_example, parse_examples
from ..format.index import find_index
from ..format.sharding import FileInfo, Piece, describe_file, plan_shard, read_piece
from ..storage import files
from .datasets import INFO_NAME, load_info, resolve_version_dir
from .splits import SplitRange, resolve_split


@dataclass(frozen=True)
class DatasetSelection:
    """What a split selection of a built dataset reads (see the module doc)."""

    root: str
    version_dir: str
    split: str
    ranges: Tuple[SplitRange, ...]
    files: Tuple[FileInfo, ...]
    description: Dict[str, str]
    shapes: Dict[str, Optional[Tuple[int, ...]]]
    info: Dict[str, Any] = field(repr=False)

    @property
    def count(self) -> int:
        """Records in the selection (from ``tfrecord_io_info.json``'s counts)."""
        return sum(r.count for r in self.ranges)

    @property
    def version(self) -> str:
        """The name of the version directory read."""
        return self.version_dir.rstrip("/").rsplit("/", 1)[-1]


def _description(
    features: Mapping[str, Mapping[str, Any]], wanted: Optional[Sequence[str]]
) -> Tuple[Dict[str, str], Dict[str, Optional[Tuple[int, ...]]]]:
    flat = {k: f for k, f in features.items() if not f.get("sequence")}
    if wanted is None:
        keys = [k for k, f in flat.items() if f.get("required", True)]
    else:
        unknown = [k for k in wanted if k not in flat]
        if unknown:
            raise ValueError(f"features {unknown} are not in the dataset (it has: {', '.join(sorted(flat))})")
        keys = list(wanted)
    description = {k: str(flat[k]["kind"]) for k in keys}  # "bytes", "int", "float": codec type names
    shapes = {k: (None if flat[k].get("shape") is None else tuple(flat[k]["shape"])) for k in keys}
    return description, shapes


#: ``describe_file``'s signature: (path, index path or None, compression) -> FileInfo
Describe = Callable[[str, Optional[str], Optional[str]], FileInfo]


def _shard_files(
    version_dir: str,
    split: str,
    entry: Mapping[str, Any],
    rng: SplitRange,
    compression: str,
    describe: Describe = describe_file,
) -> List[FileInfo]:
    """The shards of ``split`` holding records ``rng.start`` .. ``rng.stop - 1``, each
    restricted to its records in the range."""
    out: List[FileInfo] = []
    before = 0
    for shard in entry["shards"]:
        n = int(shard["records"])
        a, b = max(rng.start - before, 0), min(rng.stop - before, n)
        before += n
        if a >= b:
            continue
        path = files.join(version_dir, shard["path"])
        index = files.join(version_dir, shard["index"]) if shard.get("index") else None
        if index is None and not compression and (a, b) != (0, n):
            index = find_index(path)
            if index is None:
                raise IndexFileError(
                    f"split {split!r}: slicing inside a shard needs its index; this dataset was built "
                    "without (output.write_index: false): run `tfrecord-io index` on it, or select whole splits",
                    path,
                )
        info = describe(path, index, compression or None)
        if info.count is not None and info.count != n:
            raise IndexFileError(
                f"{INFO_NAME} says {n} records but the index has {info.count}: the shard or its index "
                "changed after the build",
                path,
            )
        if (a, b) != (0, n):
            if info.compression:
                raise TFRecordError(
                    f"split {split!r}: a {info.compression.upper()} shard cannot be sliced by record "
                    "(it cannot be cut); select whole splits of a compressed dataset",
                    path,
                )
            info = info.with_records(a, b)
        out.append(info)
    return out


def select_dataset(
    root: str,
    split: str = "train",
    version: Optional[str] = None,
    *,
    features: Optional[Sequence[str]] = None,
    rounding: Optional[str] = None,
    describe: Describe = describe_file,
) -> DatasetSelection:
    """Resolve ``split`` (``"train"``, ``"train[:90%]"``, ``"train+validation"``, ...) of
    the dataset at ``root`` (its ``LATEST`` version, or ``version``). ``features``: the
    keys to parse (default: every required, non-sequence feature). Errors name what is
    missing: no ``LATEST``, no ``tfrecord_io_info.json`` (an unfinished build), an unknown
    split or feature, an index that disagrees with the recorded counts. ``describe``
    stats each shard and loads its index (``sharding.describe_file``, through Beam's
    filesystems for URLs; the torch readers pass their own S3 reader's)."""
    version_dir = resolve_version_dir(root, version)
    info = load_info(version_dir)
    if info is None:
        raise FileNotFoundError(
            f"{files.join(version_dir, INFO_NAME)} does not exist: not a finished build of a dataset"
        )
    splits = info.get("splits") or {}
    counts = {name: int(entry["records"]) for name, entry in splits.items()}
    ranges = resolve_split(split, counts, rounding)
    compression = str(info.get("compression") or "")
    chosen: List[FileInfo] = []
    for rng in ranges:
        chosen += _shard_files(version_dir, rng.split, splits[rng.split], rng, compression, describe)
    description, shapes = _description(info.get("features") or {}, features)
    return DatasetSelection(root, version_dir, split, tuple(ranges), tuple(chosen), description, shapes, info)


def iter_dataset(
    root: str,
    split: str = "train",
    version: Optional[str] = None,
    *,
    features: Optional[Sequence[str]] = None,
    output: str = "example",
    decode: Optional[Callable[[Any], Any]] = None,
    shard: Tuple[int, int] = (0, 1),
    rounding: Optional[str] = None,
    check_crc: bool = True,
) -> Iterator[Any]:
    """The records of a split selection, in order, in this process.

    ``output="example"``: dicts of NumPy arrays (the selection's features, parsed in
    batches); ``"bytes"``: the serialised records. ``decode``: a callable applied to each
    serialised record instead (e.g. ``tfrecord_io.transforms.ExampleDecoder(spec)``). ``shard=(i, n)``
    reads part ``i`` of ``n`` (by record count when indexed): the ``n`` parts together
    read each record once. A corrupt record raises ``CorruptRecordError`` with its file
    and byte offset."""
    if output not in ("example", "bytes"):
        raise ValueError(f"output={output!r}: use 'example' or 'bytes'")
    selection = select_dataset(root, split, version, features=features, rounding=rounding)
    records = located_records(plan_shard(selection.files, *shard), check_crc)
    if decode is not None:
        return (decode(data) for _, _, data in records)
    if output == "bytes":
        return (bytes(data) for _, _, data in records)
    return parse_located(records, selection.description)


def located_records(pieces: Sequence[Piece], check_crc: bool = True) -> Iterator[Tuple[str, int, Any]]:
    """``(path, offset, data)`` for every record of ``pieces``, in order."""
    for piece in pieces:
        for offset, data in read_piece(piece, check_crc):
            yield piece.path, offset, data


def parse_located(
    records: Iterable[Tuple[str, int, Any]], description: Mapping[str, str], batch_size: int = 256
) -> Iterator[Dict[str, Any]]:
    """Parsed Examples of located records, ``batch_size`` at a time (the compiled batch
    parser); a record that does not parse raises ``ExampleCodecError`` with its file and
    offset, after the records before it."""
    it = iter(records)
    while True:
        batch = list(islice(it, batch_size))
        if not batch:
            return
        try:
            parsed = parse_examples([data for _, _, data in batch], description)
        except ExampleCodecError:
            parsed = []
            for path, offset, data in batch:
                try:
                    parsed.append(parse_example(data, description))
                except ExampleCodecError as err:
                    yield from parsed
                    raise ExampleCodecError(err.reason, path, offset) from None
        yield from parsed


__all__ = ["DatasetSelection", "iter_dataset", "located_records", "parse_located", "select_dataset"]
