"""``tfrecord-io convert``: TFRecord Examples <-> Parquet, a Beam job on any filesystem
and runner.

TFRecord -> Parquet. The input is a built dataset (root or version; ``--split``
selects, TFDS-style, default every split) or TFRecord file patterns. Records are read
in parallel (a dataset in parts by record count, files in byte ranges) and turned into
Arrow batches by :mod:`tfrecord_io.arrow`; the schema is the dataset's
``features`` (shapes give scalar and fixed-size columns) or, for loose files, inferred
by a first Beam pass over every record (each key with its wire type; a type that
changes between records fails there, naming the file and offset). The split goes into
a string column ``split`` (``--split-as column``, the default) or into folders
``OUTPUT/<split>/`` (``--split-as folder``). Shards are ``OUTPUT/data-SSSSS-of-NNNNN.parquet``,
written by Beam's Parquet sink: temporary files, renamed once all are written.

Parquet -> TFRecord. The input is Parquet files, patterns or folders; a folder is read
as pyarrow's ``dataset``, Spark and Hugging Face ``datasets`` read one: every
``*.parquet`` file under it, sub-folders included, names starting with ``.`` or ``_``
left out, in path order (:func:`parquet_files_in`). Every column must have an Example equivalent (checked from the
files' footers before the job starts: a column that has none is a usage error naming
it, and nothing is written); nulls become absent features. Parquet written by this job
carries its split column's name and the splits in its schema metadata, and is written
back as ``OUTPUT/<split>/data-SSSSS-of-NNNNN.tfrecord`` per split (without the split
column), each shard with its index; other Parquet as ``OUTPUT/data-...tfrecord``.

Parquet written with ``--split-as folder`` (``OUTPUT/<split>/data-*.parquet``: the splits
in the schema metadata, no split column) goes back by its folders: each file's split is
the name of the folder it is in.

The round trip keeps every Example: values, wire types, absent and empty features.

Results (the written files' names and counts) come back through storage the cluster
shares when the workers may not share the launcher's disk: ``--temp_location``, else a
hidden folder inside ``OUTPUT`` (``runtime.collect``), removed at the end.

Nothing half-written: an ``OUTPUT`` that already holds converted shards is refused
before the job (a new set would mix with the old one), and a failed job's files under
``OUTPUT`` - Beam's ``beam-temp-*`` folders, the TFRecord sink's
``.tfrecord-io-temp-*``, the shards of splits that had finished - are removed
(:class:`OutputGuard`), so ``OUTPUT`` holds what it held before.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from tfrecord_io.errors import StorageAccessError
from tfrecord_io.usage_errors import UsageError

SPLIT_COLUMN = "split"
META_SPLITS = b"tfrecord_io.dataset.splits"
#: TFRecord shards written by convert: ``<prefix>-00000-of-00004.tfrecord`` (+ ``.index``).
SUFFIX = ".tfrecord"
META_SPLIT_COLUMN = b"tfrecord_io.split_column"
SHARD_PREFIX = "data"
DESCRIPTION = (
    "Convert Examples between TFRecord and Parquet with a Beam job. TFRecord -> Parquet: a dataset root or "
    "version (its features give the schema, --split selects) or TFRecord file patterns (schema inferred from "
    "every record); the split becomes a column or a folder. Parquet -> TFRecord: indexed shards, one set per "
    "split when the Parquet came from this command. Every Example survives the round trip."
)


class ConvertError(UsageError, ValueError):
    """Bad input found before anything is written (exit status 2)."""


def add_parser(sub: Any, common: Any, epilog: str) -> None:
    """The ``convert`` subcommand (registered by the CLI)."""
    from tfrecord_io.pipelines.runtime.arg_types import non_negative_int, positive_int

    c = sub.add_parser(
        "convert",
        help="TFRecord Examples <-> Parquet (a Beam job; the split as a column or folder)",
        description=DESCRIPTION,
        epilog=epilog,
        allow_abbrev=False,
    )
    c.add_argument(
        "paths",
        nargs="+",
        help="TFRecord: a dataset root or version directory, or file patterns; Parquet: files, patterns or "
        "folders (every *.parquet file under a folder, in path order)",
    )
    c.add_argument("--to", required=True, choices=["parquet", "tfrecord"], help="the output format")
    c.add_argument("--output", required=True, help="output directory (any Beam filesystem)")
    c.add_argument("--split", help="TFRecord -> Parquet of a dataset: the splits to convert (default: all)")
    c.add_argument(
        "--split-as",
        choices=["column", "folder"],
        default="column",
        help="TFRecord -> Parquet: the split as a string column 'split' (default) or as OUTPUT/<split>/",
    )
    c.add_argument(
        "--num-shards", type=non_negative_int, default=0, help="output shards (per split; 0: let the runner decide)"
    )
    c.add_argument("--batch-size", type=positive_int, default=1024, help="records per Arrow batch (default 1024)")
    common(c)


def cmd_convert(args: Any, beam_flags: List[str]) -> int:
    """The CLI command: run the job, print its summary."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.pipelines.runtime.beam_options import command_flags

    flags = command_flags(args.runner_config, beam_flags)
    guard = OutputGuard(args.output)
    args.failure_state = guard.failure_state  # runs after the workers are stopped: cleans up again, then tells
    summary = run_convert(
        args.paths,
        args.to,
        args.output,
        PipelineOptions(flags),
        split=args.split,
        split_as=args.split_as,
        num_shards=args.num_shards,
        batch_size=args.batch_size,
        progress=not args.no_progress,
        guard=guard,
    )
    print("\n".join(summary.lines()))
    return 0


class OutputGuard:
    """What a failed conversion wrote under ``OUTPUT``, removed.

    :meth:`snapshot` lists ``OUTPUT`` before the job writes; :meth:`clean` deletes every
    file that was not there then (Beam's ``beam-temp-*`` folders, the TFRecord sink's
    ``.tfrecord-io-temp-*``, result files, and the finished shards of splits whose
    sink had already renamed them into place: a reader would take those for a whole
    conversion) and, locally, the folders it left empty. Safe to call again: the CLI
    does so once the workers are stopped, so a worker that was still writing leaves
    nothing either. Any filesystem."""

    def __init__(self, output: str):
        self.output = output
        self._before: Optional[set] = None
        self._dirs_before: set = set()
        self.removed = 0
        self.problem: Optional[str] = None

    def snapshot(self) -> None:
        from tfrecord_io.storage import files

        self._before = set(files.list_prefix(self.output))
        if not files.is_remote(self.output):
            import os

            self._dirs_before = {d for d, _, _ in os.walk(self.output)}

    def clean(self) -> None:
        """Remove what this run wrote; records how many files, or why it could not."""
        from tfrecord_io.storage import files

        if self._before is None:
            return
        try:
            new = sorted(set(files.list_prefix(self.output)) - self._before)
            files.delete(new)
            self.removed += len(new)
            if not files.is_remote(self.output):
                import os

                for directory, _, _ in sorted(os.walk(self.output), key=lambda w: -len(w[0])):
                    if directory not in self._dirs_before:
                        try:
                            os.rmdir(directory)  # only when empty
                        except OSError:
                            pass
            self.problem = None
        except Exception as err:  # noqa: BLE001 - the failure is reported with what is left, cleanup must not mask it
            self.problem = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"

    def failure_state(self) -> List[str]:
        """The failure block's state lines."""
        if self._before is None:
            return [f"nothing was written to {self.output}"]
        self.clean()
        if self.problem is not None:
            return [
                f"could not remove this run's files under {self.output} ({self.problem}): Parquet/TFRecord files "
                "there that were not there before the run are from an unfinished conversion"
            ]
        if self.removed:
            return [
                f"removed the {self.removed} files this run had written under {self.output} (temporary files and "
                "the shards of splits that had finished): it holds what it held before"
            ]
        return [f"nothing was written to {self.output}: it holds what it held before"]


@dataclass
class ConvertSummary:
    to: str
    output: str
    files: List[str] = field(default_factory=list)
    records: int = 0
    seconds: float = 0.0

    def lines(self) -> List[str]:
        out = [f"convert: {self.records:,} records -> {len(self.files)} {self.to} files in {self.seconds:.1f}s"]
        out += [f"  {p}" for p in self.files]
        return out


def run_convert(
    paths: Sequence[str],
    to: str,
    output: str,
    options: Any,
    *,
    split: Optional[str] = None,
    split_as: str = "column",
    num_shards: int = 0,
    batch_size: int = 1024,
    progress: bool = False,
    guard: Optional[OutputGuard] = None,
) -> ConvertSummary:
    """Run the conversion (see the module doc); ConvertError for bad input, before
    anything is written. When the job fails, what it wrote under ``output`` is removed
    (``guard``, which the caller may pass to report on it) and the error raised."""
    from tfrecord_io.dataset import dataset_writer

    if to not in ("parquet", "tfrecord"):
        raise ConvertError(f"--to {to!r}: use parquet or tfrecord")
    if split_as not in ("column", "folder"):
        raise ConvertError(f"--split-as {split_as!r}: use column or folder")
    if num_shards < 0 or batch_size < 1:
        raise ConvertError("--num-shards must be >= 0 and --batch-size positive")
    if to == "tfrecord" and split is not None:
        raise ConvertError("--split selects splits of a TFRecord dataset; Parquet -> TFRecord writes every split")
    dataset_writer.use_filesystems(options, [*paths, output])
    dataset_writer.check_reachable(output)
    _check_no_shards(output)
    guard = guard if guard is not None else OutputGuard(output)
    started = time.monotonic()
    try:
        if to == "parquet":
            summary = _to_parquet(
                list(paths), output, options, split, split_as, num_shards, batch_size, progress, guard
            )
        else:
            summary = _to_tfrecord(list(paths), output, options, num_shards, progress, guard)
    except ConvertError:
        raise  # found before the job: nothing written
    except BaseException:
        guard.clean()
        raise
    summary.seconds = time.monotonic() - started
    return summary


def _check_no_shards(output: str) -> None:
    """Refuse an output that already holds converted shards (``data-*`` at its top or in
    a split folder): a new set would mix with them, and a reader of the folder would
    take the mixture for one conversion."""
    from tfrecord_io.storage import files

    found = []
    for pattern in (f"{SHARD_PREFIX}-*-of-*", f"*/{SHARD_PREFIX}-*-of-*"):
        try:
            found += files.glob(files.join(output, pattern))
        except Exception:  # noqa: BLE001 - nothing listable: nothing to mix with (the write fails by itself)
            pass
    if found:
        raise ConvertError(
            f"--output {output} already holds converted files ({found[0]}{' ...' if len(found) > 1 else ''}): "
            "choose a new or empty output directory, or remove them"
        )


# --------------------------------------------------------------------------- TFRecord -> Parquet


@dataclass
class _Source:
    """What a TFRecord -> Parquet job reads: per split (None: loose files) the work
    items, and the schema if it is known before the job."""

    parts: Dict[Optional[str], List[Any]]
    schema: Any  # pyarrow.Schema or None (inferred by the job)
    patterns: List[str]


def _plan_source(paths: List[str], split: Optional[str], batch_size: int) -> _Source:
    from tfrecord_io import arrow
    from tfrecord_io.beam.beam_dataset import RECORDS_PER_PART
    from tfrecord_io.dataset.dataset_reader import select_dataset
    from tfrecord_io.format.sharding import plan_shard
    from tfrecord_io.pipelines.runtime.inputs import dataset_target, expand_patterns

    version_dir, info = dataset_target(paths)
    if version_dir is None or info is None:
        if split is not None:
            raise ConvertError(f"--split {split!r} selects from a built dataset; {' '.join(paths)} is not one")
        inputs = expand_patterns(paths)
        if not inputs:
            raise ConvertError(f"no TFRecord files match {' '.join(paths)}")
        return _Source({None: inputs}, None, inputs)
    features = info.get("features") or {}
    sequence = sorted(k for k, f in features.items() if f.get("sequence"))
    if sequence:
        raise ConvertError(
            f"{version_dir}: features {sequence} are SequenceExample feature lists; convert handles Examples"
        )
    schema = arrow.schema_from_features(features)
    # Every split by default, less the empty ones (a small build can have a split with no
    # records, and a selection of nothing is refused by select_dataset).
    names = sorted(n for n, e in (info.get("splits") or {}).items() if e.get("records", 1))
    selections = [s.strip() for s in (split or "+".join(names)).split("+") if s.strip()]
    parts: Dict[Optional[str], List[Any]] = {}
    for selection in selections:
        sel = select_dataset(version_dir, selection)
        name = selection.split("[", 1)[0]
        n = max(len(sel.files), -(-sel.count // RECORDS_PER_PART), 1)
        parts[name] = parts.get(name, []) + [p for p in (plan_shard(sel.files, k, n) for k in range(n)) if p]
    return _Source(parts, schema, [version_dir])


def _infer_part(items: Sequence[Tuple[str, int, bytes]]) -> Dict[str, Tuple[str, str, int]]:
    """One batch's ``{key: (wire kind, path, offset of the first record with it)}``."""
    from tfrecord_io import arrow

    places = [(p, o) for p, o, _ in items]
    kinds = arrow.infer_kinds([d for _, _, d in items], places)
    names = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int"}
    return {key: (names[kind], *places[i]) for key, (kind, i) in kinds.items()}


class _MergeKinds:
    """Combine fn: the union of the batches' kinds; a key with two wire types fails,
    naming where each was seen."""

    @staticmethod
    def merge(parts: Iterator[Dict[str, Tuple[str, str, int]]]) -> Dict[str, Tuple[str, str, int]]:
        from tfrecord_io.errors import ExampleCodecError

        merged: Dict[str, Tuple[str, str, int]] = {}
        for part in parts:
            for key, (kind, path, offset) in part.items():
                seen = merged.setdefault(key, (kind, path, offset))
                if seen[0] != kind:
                    raise ExampleCodecError(
                        f"feature {key!r} is {kind} here but {seen[0]} in {seen[1]} at byte offset {seen[2]}: "
                        "a feature's type must not change between records",
                        path,
                        offset,
                    )
        return merged


def _schema_of_kinds(kinds: Dict[str, Tuple[str, str, int]]) -> Any:
    import pyarrow as pa

    from tfrecord_io import arrow

    return pa.schema([arrow.feature_field(k, kinds[k][0]) for k in sorted(kinds)])


class _ToTables:
    """Records ``[(path, offset, data)]`` or dataset parts -> ``pyarrow.Table``s of the
    schema, with the split column when asked."""

    def __init__(self, schema: Any, split: Optional[str], batch_size: int):
        self._schema = schema
        self._split = split
        self._batch_size = batch_size

    def tables(self, batches: Iterator[Tuple[List[Any], Any]], schema: Any) -> Iterator[Any]:
        import pyarrow as pa

        from tfrecord_io import arrow

        for datas, places in batches:
            batch = arrow.records_to_batch(datas, schema, places)
            table = pa.Table.from_batches([batch])
            if self._split is not None:
                table = table.append_column(
                    pa.field(SPLIT_COLUMN, pa.string(), nullable=False), pa.array([self._split] * len(datas))
                )
            yield table

    def from_records(self, items: Sequence[Tuple[str, int, bytes]]) -> Iterator[Any]:
        datas = [d for _, _, d in items]
        places = [(p, o) for p, o, _ in items]
        yield from self.tables(iter([(datas, places)]), self._schema)

    def from_parts(self, pieces: List[Any]) -> Iterator[Any]:
        from tfrecord_io import arrow

        yield from self.tables(
            arrow._record_batches(pieces, self._batch_size, arrow.DEFAULT_MAX_BATCH_BYTES, True), self._schema
        )


def _output_schema(schema: Any, splits: List[str], split_as: str) -> Any:
    import pyarrow as pa

    meta = {META_SPLITS: json.dumps(splits).encode()} if splits else {}
    if splits and split_as == "column":
        if SPLIT_COLUMN in schema.names:
            raise ConvertError(f"the dataset has a feature named {SPLIT_COLUMN!r}: use --split-as folder")
        schema = schema.append(pa.field(SPLIT_COLUMN, pa.string(), nullable=False))
        meta[META_SPLIT_COLUMN] = SPLIT_COLUMN.encode()
    return schema.with_metadata(meta)


def _infer_schema(patterns: List[str], output: str, options: Any, batch_size: int) -> Any:
    """A first job over every record of the files: the union of their keys, each with
    its wire type (the Parquet sink needs the schema before the job that writes)."""
    import apache_beam as beam

    from tfrecord_io.beam.beam_io import ReadAllFromTFRecord
    from tfrecord_io.pipelines.runtime.collect import ResultDir

    with ResultDir.for_job(options, "convert", output_dir=output) as results:
        with beam.Pipeline(options=options) as p:
            (
                p
                | "Files" >> beam.Create(patterns)
                | "Read" >> ReadAllFromTFRecord(with_metadata=True, batch_size=batch_size)
                | "Kinds" >> beam.Map(_infer_part)
                | "Merge" >> beam.CombineGlobally(_MergeKinds.merge)
                | "Collect" >> results.sink()
            )
        merged = results.read()
    return _schema_of_kinds(merged[0] if merged else {})


def _write_parquet(tables: Any, label: str, prefix: str, schema: Any, num_shards: int) -> Any:
    """Tables -> ``PREFIX-SSSSS-of-NNNNN.parquet`` by Beam's Parquet sink (temporary
    files, renamed into place once every shard is written); the final paths out."""
    from apache_beam.io.parquetio import WriteToParquetBatched

    return tables | label >> WriteToParquetBatched(
        prefix, schema, file_name_suffix=".parquet", num_shards=num_shards, shard_name_template="-SSSSS-of-NNNNN"
    )


def _to_parquet(
    paths: List[str],
    output: str,
    options: Any,
    split: Optional[str],
    split_as: str,
    num_shards: int,
    batch_size: int,
    progress: bool,
    guard: OutputGuard,
) -> ConvertSummary:
    import apache_beam as beam

    from tfrecord_io.beam.beam_io import ReadAllFromTFRecord
    from tfrecord_io.pipelines.runtime.collect import ResultDir
    from tfrecord_io.pipelines.runtime.progress import CountProgress, ProgressPrinter
    from tfrecord_io.storage import files

    source = _plan_source(paths, split, batch_size)
    splits = [s for s in source.parts if s is not None]
    results = ResultDir.for_job(options, "convert", output_dir=output)  # before anything runs
    guard.snapshot()
    if source.schema is not None:
        schema = source.schema
    else:
        schema = _infer_schema(source.patterns, output, options, batch_size)
    out_schema = _output_schema(schema, splits, split_as)
    summary = ConvertSummary("parquet", output)
    bar = ProgressPrinter("convert", enabled=progress, rate_stage="records", options=options, output_dir=output)
    with bar, results:
        with beam.Pipeline(options=options) as p:
            written = []
            for name, parts in source.parts.items():
                if name is None:  # loose files, read in byte ranges
                    tables = (
                        p
                        | "Files" >> beam.Create(parts)
                        | "Read" >> ReadAllFromTFRecord(with_metadata=True, batch_size=batch_size)
                        | "ToArrow" >> beam.FlatMap(_ToTables(schema, None, batch_size).from_records)
                        | "Count" >> beam.ParDo(CountProgress(bar.dir, "records", weigh=_table_rows))
                    )
                else:  # a dataset's split, read in parts by record count
                    column = name if split_as == "column" else None
                    tables = (
                        p
                        | f"Parts[{name}]" >> beam.Create(parts).with_output_types(Any)
                        | f"Spread[{name}]" >> beam.Reshuffle().with_output_types(Any)
                        | f"ToArrow[{name}]" >> beam.FlatMap(_ToTables(schema, column, batch_size).from_parts)
                        | f"Count[{name}]" >> beam.ParDo(CountProgress(bar.dir, "records", weigh=_table_rows))
                    )
                if name is not None and split_as == "folder":
                    prefix = files.join(output, name, SHARD_PREFIX)
                    written.append(_write_parquet(tables, f"Write[{name}]", prefix, out_schema, num_shards))
                else:
                    written.append(tables)
            if splits and split_as == "folder":
                done = tuple(written) | "Written" >> beam.Flatten()
            else:
                done = _write_parquet(
                    tuple(written) | "AllSplits" >> beam.Flatten(),
                    "Write",
                    files.join(output, SHARD_PREFIX),
                    out_schema,
                    num_shards,
                )
            done | "Collect" >> results.sink()
        summary.files = sorted(results.read())
    summary.records = _parquet_rows(summary.files)
    return summary


def _table_rows(table: Any) -> int:
    """Rows of an Arrow table (the progress count)."""
    return int(table.num_rows)


def _file_table_rows(item: Tuple[str, Any]) -> int:
    """Rows of a ``(file, table)`` pair (the progress count)."""
    return int(item[1].num_rows)


def _parquet_rows(paths: List[str]) -> int:
    import pyarrow.parquet as pq

    from tfrecord_io.storage import files

    total = 0
    for path in paths:
        with files.open_raw(path, "rb") as f:
            total += pq.ParquetFile(f).metadata.num_rows
    return total


# --------------------------------------------------------------------------- Parquet -> TFRecord


def _parquet_inputs(paths: List[str]) -> Tuple[List[str], Any]:
    """The Parquet files and their common schema; ConvertError when none match, a
    footer does not read, the schemas differ or a column has no Example equivalent."""
    import pyarrow.parquet as pq

    from tfrecord_io import arrow
    from tfrecord_io.errors import ExampleCodecError
    from tfrecord_io.storage import files

    inputs: List[str] = []
    for pattern in paths:
        if any(c in pattern for c in "*?["):
            inputs += [m for m in files.glob(pattern) if files.exists(m)]
        elif _is_folder(pattern):
            inputs += parquet_files_in(pattern)
        elif files.exists(pattern):
            inputs.append(pattern)
    inputs = sorted(dict.fromkeys(inputs))
    if not inputs:
        raise ConvertError(f"no Parquet files match {' '.join(paths)}")
    schema = None
    for path in inputs:
        try:
            with files.open_raw(path, "rb") as f:
                this = pq.read_schema(f)
        except StorageAccessError:  # credentials or permissions: fails the job, naming what to set
            raise
        except Exception as err:  # noqa: BLE001 - any failure to read a footer is bad input
            raise ConvertError(f"{path}: not a readable Parquet file ({err})") from None
        if schema is None:
            schema = this
        elif not this.equals(schema, check_metadata=False):
            raise ConvertError(f"{path}: its schema differs from {inputs[0]}'s:\n{this}\nvs\n{schema}")
    split_column = _split_column(schema)
    try:
        arrow.check_schema(_without(schema, split_column))
    except ExampleCodecError as err:
        raise ConvertError(f"{inputs[0]}: {err.reason}") from None
    return inputs, schema


def _is_folder(path: str) -> bool:
    """A local directory, or a URL that is no object but a prefix with objects under it."""
    from tfrecord_io.storage import files

    if not files.is_remote(path):
        import os

        return os.path.isdir(path)
    return not files.exists(path) and bool(files.list_prefix(path.rstrip("/") + "/"))


def parquet_files_in(folder: str) -> List[str]:
    """A folder as pyarrow's ``dataset``, Spark and Hugging Face ``datasets`` read one:
    every ``*.parquet`` file under it, in its sub-folders too (``--split-as folder``
    writes ``OUTPUT/<split>/``), sorted by path; names (of files or of folders below
    ``folder``) that start with ``.`` or ``_`` are left out, as those readers leave them
    (``_SUCCESS``, ``_metadata``, ``.tmp`` files, Beam's and our hidden work folders)."""
    from tfrecord_io.storage import files

    base = folder.rstrip("/")
    out = []
    for path in files.list_prefix(base + "/" if files.is_remote(base) else base):
        rel = path[len(base) + 1 :] if path.startswith(base + "/") else path.rsplit("/", 1)[-1]
        if rel.endswith(".parquet") and not any(part.startswith((".", "_")) for part in rel.split("/")):
            out.append(path)
    return sorted(out)


def _split_column(schema: Any) -> Optional[str]:
    meta = schema.metadata or {}
    name = meta.get(META_SPLIT_COLUMN)
    return name.decode() if name and name.decode() in schema.names else None


def _without(schema: Any, column: Optional[str]) -> Any:
    return schema if column is None else schema.remove(schema.get_field_index(column))


def split_folder(path: str) -> str:
    """The name of the folder a file is in (``OUTPUT/<split>/data-...parquet`` -> ``<split>``)."""
    parts = path.rstrip("/").split("/")
    return parts[-2] if len(parts) >= 2 else ""


def _table_records(
    item: Tuple[str, Any], column: Optional[str], splits: List[str], by_folder: bool = False
) -> Iterator[Any]:
    """``(file, row group)`` -> its rows as serialised Examples, each tagged with its split
    when the Parquet has a split column (dropped) or, ``by_folder``, by the folder the
    file is in; errors name the file."""
    import apache_beam as beam
    import pyarrow.compute as pc

    from tfrecord_io import arrow
    from tfrecord_io.errors import ExampleCodecError

    path, table = item
    parts: List[Tuple[Optional[str], Any]] = [(None, table)]
    if by_folder:
        folder = split_folder(path)
        if folder not in splits:
            raise ExampleCodecError(f"is in folder {folder!r}, not one of the splits {splits}", path)
        parts = [(folder, table)]
    elif column is not None:
        values = table.column(column)
        unknown = set(pc.unique(values).to_pylist()) - set(splits)
        if unknown:
            raise ExampleCodecError(
                f"split column {column!r} holds {sorted(map(str, unknown))}, not one of the schema's {splits}", path
            )
        rest = table.drop_columns([column])
        parts = [(name, rest.filter(pc.equal(values, name))) for name in splits]
    for name, part in parts:
        if not part.num_rows:
            continue
        try:
            records = arrow.batch_to_records(part)
        except ExampleCodecError as err:
            raise ExampleCodecError(f"a row group: {err.reason}", path) from None
        for record in records:
            yield record if name is None else beam.pvalue.TaggedOutput(name, record)


def _splits_of(inputs: List[str], schema: Any) -> Tuple[Optional[str], List[str], bool]:
    """How the Parquet's rows map to splits: ``(split column, splits, by folder)``.

    A split column (``--split-as column``) gives each row's split; without one, a schema
    that lists splits (``--split-as folder``) means each file's folder is its split, and
    every file must sit in a folder named after one (else ConvertError: merging them
    into one set of shards would lose the splits). Other Parquet: no splits."""
    column = _split_column(schema)
    listed = json.loads((schema.metadata or {}).get(META_SPLITS, b"[]"))
    if column is not None:
        return (column, listed, False) if listed else (None, [], False)
    if not listed:
        return None, [], False
    outside = [p for p in inputs if split_folder(p) not in listed]
    if outside:
        raise ConvertError(
            f"{outside[0]}: its schema lists the splits {listed} (written with --split-as folder) but it is not "
            "in a folder named after one of them; keep the OUTPUT/<split>/ layout, or convert each split's files "
            "on their own"
        )
    return None, sorted({split_folder(p) for p in inputs}), True


def _to_tfrecord(
    paths: List[str], output: str, options: Any, num_shards: int, progress: bool, guard: OutputGuard
) -> ConvertSummary:
    import apache_beam as beam
    from apache_beam.io.parquetio import ReadAllFromParquetBatched

    from tfrecord_io.beam.beam_io import WriteToTFRecord
    from tfrecord_io.pipelines.runtime.collect import ResultDir
    from tfrecord_io.pipelines.runtime.progress import CountProgress, ProgressPrinter
    from tfrecord_io.storage import files

    inputs, schema = _parquet_inputs(paths)
    column, splits, by_folder = _splits_of(inputs, schema)
    results = ResultDir.for_job(options, "convert", output_dir=output)  # before anything runs
    guard.snapshot()
    summary = ConvertSummary("tfrecord", output)
    bar = ProgressPrinter("convert", enabled=progress, rate_stage="rows", options=options, output_dir=output)
    with bar, results:
        with beam.Pipeline(options=options) as p:
            tables = (
                p
                | "Files" >> beam.Create(inputs)
                | "Read" >> ReadAllFromParquetBatched(with_filename=True).with_output_types(Any)
                | "Count" >> beam.ParDo(CountProgress(bar.dir, "rows", weigh=_file_table_rows)).with_output_types(Any)
            )
            convert = beam.FlatMap(_table_records, column, splits, by_folder).with_output_types(bytes)
            if splits:
                parts = tables | "ToExamples" >> convert.with_outputs(*splits)
                for name in splits:
                    prefix = files.join(output, name, SHARD_PREFIX)
                    (
                        parts[name]
                        | f"Write[{name}]" >> WriteToTFRecord(prefix, file_name_suffix=SUFFIX, num_shards=num_shards)
                        | f"Collect[{name}]" >> results.sink()
                    )
            else:
                (
                    tables
                    | "ToExamples" >> convert
                    | "Write"
                    >> WriteToTFRecord(files.join(output, SHARD_PREFIX), file_name_suffix=SUFFIX, num_shards=num_shards)
                    | "Collect" >> results.sink()
                )
        shards = sorted(results.read(), key=lambda s: s["path"])
    summary.files = [s["path"] for s in shards]
    summary.records = sum(int(s["records"]) for s in shards)
    return summary
