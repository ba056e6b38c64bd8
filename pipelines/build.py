"""``tfrecord-io build``: media rows -> encoded Examples -> split, shuffled, sharded
TFRecord files with indexes, ``dataset_info.json`` last, then ``LATEST``.

Data path (why it is shaped this way): placement needs only each row's key, never its
media. So the launcher reads the manifest, hashes every key into its split, its shard
and its position (``splits.py``), and groups the *rows* (paths and small values, a few
hundred bytes each) into one task per shard, sorted by the shuffle hash. The pipeline
spreads those tasks over the workers; each worker, per shard, reads every row's
media, encodes it and streams the Example straight into the shard file. Encoded media
never crosses the runner's shuffle and is never held beyond one write batch. The rows
themselves do not travel inside the pipeline either: the launcher writes each task's
rows as JSON lines under the version's ``_tasks/`` (one file per shard, deleted before
``dataset_info.json`` is written, like ``_shards/``) and the pipeline's elements are only
(split, shard, file) references. Beam pickles and bz2-compresses what ``Create`` holds
into the job description at level 9: 16,000 rows in ``Create`` cost 2 s of the
launcher's time before any worker started, and the workers as much again. Peak
memory per worker is one shard's row list (about 0.3 KB per row) plus
``WRITE_BATCH`` encoded Examples plus one decoded image/clip, whatever the dataset
size. Parallelism is the number of shards (tasks are dealt out largest first).

``target_shard_bytes``: the shard count of a split is fixed before encoding, from an
estimate - the stored size of each row's media files plus the length of its other
values, summed over the split (one listing of the inputs, no encoding). With
``reencode``/``resize`` the shards come out smaller or larger than the target by the
codec's ratio; the estimate is deterministic, so reruns give the same shards.

Determinism (why a rerun is byte-identical): split, shard and order are hashes of the
row's key and the seed; encoders are deterministic; Examples are serialised with
sorted keys; frames are TensorFlow's. Nothing depends on input order, worker count,
runner or time; only ``dataset_info.json`` records when the build ran.

Storage and commit: every path goes through Beam's FileSystems (``tfrecord_io.files``),
local or ``s3://``/``gs://``/``hdfs://``; the output is checked (scheme known, listable)
before anything is written. The commit protocol is in ``dataset_dir.py``.

Scheduled retries: the input fingerprint (config + manifest rows + each media file's
size and modification time) is stored in ``dataset_info.json``. A rerun with the same
``--version``: after a failed/killed attempt removes it and builds again; after a
successful one with the same fingerprint verifies the shards' SHA-256 and exits 0
without rewriting; with another fingerprint it is refused.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from tfrecord_io import files
from tfrecord_io._version import __version__
from tfrecord_io.beam_sink import DEFAULT_SHARD_NAME_TEMPLATE, shard_name
from tfrecord_io.index import index_path_for
from tfrecord_io.writer import RecordWriter

from . import dataset_dir, splits
from .config import ConfigError
from .encoders_config import make_encoders, media_columns
from .manifest import load_rows, row_key
from .progress import CountProgress, ProgressPrinter

TOOL_VERSION = __version__
META_DIR = "_shards"
TASKS_DIR = "_tasks"
REJECTED_NAME = "rejected-00000-of-00001.jsonl"
WRITE_BATCH = 64


def dataset_shard_name(name: str, split: str, shard: int, num_shards: int, compression: str) -> str:
    """A built dataset's shard file name, TFDS's: ``<name>-<split>.tfrecord-00000-of-00004[.gz]``
    (the sink's :func:`~tfrecord_io.beam_sink.shard_name` with its default template)."""
    return shard_name(
        f"{name}-{split}.tfrecord",
        files.compression_suffix(compression),
        DEFAULT_SHARD_NAME_TEMPLATE,
        shard,
        num_shards,
    )


@dataclass
class ShardTask:
    """One shard to write: its place and its rows, already in shuffle order."""

    split: str
    shard: int
    num_shards: int
    rows: List[Dict[str, Any]]
    estimated_bytes: int = 0


def _task_path(version_dir: str, split: str, shard: int) -> str:
    return files.join(version_dir, TASKS_DIR, f"{split}-{shard:05d}.jsonl")


def write_task_files(tasks: List[ShardTask], version_dir: str) -> List[Dict[str, Any]]:
    """Each task's rows as JSON lines under ``_tasks/`` of the (unpublished) version;
    returns the pipeline's elements: one small reference per task, in the plan's order.

    Rows come from CSV/JSONL manifests or a folder listing, so JSON gives them back
    exactly; a value JSON cannot hold is an error here, never a silent change."""
    refs = []
    for task in tasks:
        path = _task_path(version_dir, task.split, task.shard)
        data = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in task.rows).encode("utf-8")
        files.write_bytes(path, data)
        refs.append(
            {
                "split": task.split,
                "shard": task.shard,
                "num_shards": task.num_shards,
                "rows_file": path,
                "rows": len(task.rows),
            }
        )
    return refs


def read_task(ref: Dict[str, Any]) -> ShardTask:
    """The worker's side of :func:`write_task_files`: the task with its rows, in order."""
    data = files.read_bytes(ref["rows_file"])
    # one JSON value a line (JSON escapes line breaks inside strings); the bytes are
    # split, not the decoded text, whose splitlines() would also cut at U+2028
    rows = [json.loads(line) for line in data.split(b"\n") if line]
    if len(rows) != ref["rows"]:
        raise RuntimeError(f"{ref['rows_file']}: {len(rows)} rows, the plan has {ref['rows']}")
    return ShardTask(ref["split"], ref["shard"], ref["num_shards"], rows)


class WriteShard(beam.DoFn):
    """Per shard task: read + encode each row, stream the Examples into the shard file
    (complete before it is visible under its final name), rejected rows kept with their
    reasons; emits the shard's metadata, also stored under ``_shards/`` for the launcher."""

    def __init__(
        self,
        version_dir: str,
        name: str,
        compression: str,
        write_index: bool,
        encoders: Dict[str, Any],
        sources: Dict[str, str],
        progress_dir: Optional[str],
    ):
        self._dir = version_dir
        self._name = name
        self._compression = compression
        self._write_index = write_index and not compression
        self._encoders = encoders
        self._sources = sources  # feature column -> input column
        self._progress_dir = progress_dir
        self.rows_in = Metrics.counter("build", "rows_in")
        self.examples_out = Metrics.counter("build", "examples_out")
        self.rejected = Metrics.counter("build", "rejected")

    def setup(self):
        self._encoded = CountProgress(self._progress_dir, "encoded")
        self._rejected = CountProgress(self._progress_dir, "rejected")
        self._encoded.setup()
        self._rejected.setup()

    def finish_bundle(self):
        self._encoded.finish_bundle()
        self._rejected.finish_bundle()

    def process(self, element):
        _, refs = element
        for ref in refs:
            yield self._write(read_task(ref))

    def _encode(self, task: ShardTask, rejected: List[str]) -> Iterable[bytes]:
        from transforms.errors import EncodeError, rejected_row
        from transforms.rows import encode_row

        for row in task.rows:
            self.rows_in.inc()
            view = {col: row.get(src) for col, src in self._sources.items()}
            try:
                data = encode_row(view, self._encoders)
            except EncodeError as err:
                self.rejected.inc()
                rejected.append(json.dumps(rejected_row(row, err), sort_keys=True, default=str, ensure_ascii=False))
                list(self._rejected.process(None))
                continue
            self.examples_out.inc()
            list(self._encoded.process(None))
            yield data

    def _write(self, task: ShardTask) -> Dict[str, Any]:
        relpath = (
            f"{task.split}/{dataset_shard_name(self._name, task.split, task.shard, task.num_shards, self._compression)}"
        )
        final = files.join(self._dir, relpath)
        index_path = index_path_for(final) if self._write_index else None
        if not files.is_remote(final):
            import os

            os.makedirs(os.path.dirname(final), exist_ok=True)
        # Local: a temporary name, renamed when complete. Object store: one upload,
        # visible only once complete (an abort leaves it in the unpublished version,
        # which the launcher removes).
        writer = RecordWriter(final, self._compression, atomic=not files.is_remote(final), index_path=index_path)
        rejected: List[str] = []
        records = 0
        try:
            batch: List[bytes] = []
            for data in self._encode(task, rejected):
                batch.append(data)
                if len(batch) >= WRITE_BATCH:
                    writer.write_records(batch)
                    records += len(batch)
                    batch = []
            if batch:
                writer.write_records(batch)
                records += len(batch)
            writer.close()
        except BaseException:
            writer.abort()
            raise
        meta = {
            "split": task.split,
            "shard": task.shard,
            "num_shards": task.num_shards,
            "path": relpath,
            "index": index_path_for(relpath) if index_path else None,
            "records": records,
            "bytes": files.file_size(final),
            "sha256": dataset_dir.sha256_file(final),
            "rejected": sorted(rejected),
        }
        files.write_bytes(
            files.join(self._dir, META_DIR, f"{task.split}-{task.shard:05d}.json"), json.dumps(meta).encode()
        )
        return meta


@dataclass
class BuildSummary:
    version: str
    version_dir: str
    rows_in: int
    written: int
    rejected: int
    shards: List[Dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    rejected_path: Optional[str] = None
    reused: bool = False

    def lines(self) -> List[str]:
        per_split: Dict[str, List[int]] = {}
        for s in self.shards:
            acc = per_split.setdefault(s["split"], [0, 0, 0])
            acc[0] += s["records"]
            acc[1] += s["bytes"]
            acc[2] += 1
        if self.reused:
            head = (
                f"version {self.version} at {self.version_dir} was already built from the same config and inputs: "
                f"verified {len(self.shards)} shards, nothing rewritten ({self.seconds:.1f}s)"
            )
        else:
            head = f"build finished in {self.seconds:.1f}s: version {self.version} at {self.version_dir}"
        out = [head, f"rows in: {self.rows_in}   written: {self.written}   rejected: {self.rejected}"]
        for split, (records, size, count) in per_split.items():
            out.append(f"  {split:<12} {records:>8} records  {count:>4} shards  {size / 1e6:10.2f} MB")
        if self.rejected:
            out.append(f"rejected rows and reasons: {self.rejected_path}")
        return out


def resolve_auto_vocabularies(
    columns: Dict[str, Dict[str, Any]], sources: Dict[str, str], rows: List[Dict[str, Any]]
) -> None:
    """``vocabulary: auto`` -> the sorted distinct values of the column, so label ids
    are the same on every rerun over the same inputs (and recorded in dataset_info.json)."""
    for name, settings in columns.items():
        if settings.get("vocabulary") == "auto":
            values = {str(r.get(sources[name])) for r in rows if r.get(sources[name]) not in (None, "")}
            settings["vocabulary"] = sorted(values)


def feature_spec(encoders: Dict[str, Any]) -> Dict[str, Any]:
    from transforms.rows import check_spec

    return {s.key: s.to_dict() for s in check_spec(encoders)}


def input_fingerprint(
    cfg: Dict[str, Any], rows: List[Dict[str, Any]], media: Dict[str, Optional[Tuple[int, float]]]
) -> str:
    """SHA-256 of what decides a build's content: the config (without where it is
    written and which runner runs it), the manifest rows, and each media file's size
    and modification time. A file rewritten in place with the same size and time is
    not noticed (hashing every input would cost a full read before every retry)."""
    settings = copy.deepcopy(cfg)
    settings.pop("runner", None)
    settings.get("output", {}).pop("version", None)
    settings.get("output", {}).pop("dir", None)
    canonical = json.dumps(
        {
            "config": settings,
            "rows": sorted(json.dumps(r, sort_keys=True, default=str) for r in rows),
            "media": sorted([p, v] for p, v in media.items()),
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _row_bytes(row: Dict[str, Any], media_cols: List[str], media: Dict[str, Optional[Tuple[int, float]]]) -> int:
    """Estimated Example bytes of a row: its media files' stored sizes plus its other values."""
    size = 0
    for col, value in row.items():
        if col == "_row":
            continue
        if col in media_cols and isinstance(value, str):
            stat = media.get(value)
            size += stat[0] if stat else 0
        else:
            size += len(str(value))
    return size


def plan_shards(
    rows: List[Dict[str, Any]],
    key_column: Optional[str],
    cutoffs,
    seed: int,
    num_shards: Optional[int],
    target_shard_bytes: int,
    media_cols: List[str],
    media: Dict[str, Optional[Tuple[int, float]]],
) -> List[ShardTask]:
    """Every row's split, shard and position from hashes of its key; one task per shard
    (empty shards too), rows sorted by shuffle hash (ties: the row's content)."""
    placed = []
    bytes_by_split = {name: 0 for name, _ in cutoffs}
    for row in rows:
        key = row_key(row, key_column)
        split = splits.assign_split(key, cutoffs, seed)
        size = _row_bytes(row, media_cols, media)
        bytes_by_split[split] += size
        placed.append((split, key, splits.shuffle_key(key, seed), size, row))
    counts = splits.shard_counts(bytes_by_split, num_shards, target_shard_bytes)
    tasks = {(s, i): ShardTask(s, i, n, []) for s, n in counts.items() for i in range(n)}
    keyed: Dict[Tuple[str, int], List[Tuple[int, str, Dict[str, Any]]]] = {k: [] for k in tasks}
    for split, key, order, size, row in placed:
        shard = splits.assign_shard(key, counts[split], seed)
        keyed[(split, shard)].append((order, json.dumps(row, sort_keys=True, default=str), row))
        tasks[(split, shard)].estimated_bytes += size
    for k, items in keyed.items():
        items.sort(key=lambda t: (t[0], t[1]))
        tasks[k].rows = [r for _, _, r in items]
    # Largest first: the runner deals tasks out in turn, so workers get similar loads.
    return sorted(tasks.values(), key=lambda t: (-t.estimated_bytes, -len(t.rows), t.split, t.shard))


def _claim_version(
    out_dir: str, requested: str, fingerprint: str, log
) -> Tuple[Dict[str, Any], Optional[dataset_dir.BuildClaim]]:
    auto = requested in ("", "auto", None)
    version = dataset_dir.new_version_name(requested)
    for _ in range(5):
        plan = dataset_dir.prepare_version(out_dir, version, fingerprint, auto, log=log)
        if plan["state"] == "published":
            return plan, None
        claim = dataset_dir.BuildClaim(files.join(out_dir, plan["version"]))
        try:
            claim.acquire()
        except dataset_dir.VersionTaken:
            if auto:
                continue  # another run took the name between our look and our claim
            raise
        return plan, claim
    raise dataset_dir.DatasetDirError(f"could not claim a version under {out_dir}: other runs keep taking the names")


@dataclass
class BuildPlan:
    """Everything known before the job runs: the rows, their encoders and the shards
    they go to. Made by :func:`plan_build`; nothing has been written yet."""

    name: str
    out_dir: str
    rows: List[Dict[str, Any]]
    sources: Dict[str, str]  # column -> the input column it is read from
    encoders: Dict[str, Any]
    spec: Dict[str, Any]
    compression: str
    fingerprint: str
    tasks: List[ShardTask]


def plan_build(cfg: Dict[str, Any]) -> BuildPlan:
    """Check everything that can be checked before anything is written (output
    reachable and compatible, input rows and media, key column, encoders) and cut the
    rows into shard tasks."""
    out_dir = cfg["output"]["dir"].rstrip("/") or "/"
    dataset_dir.check_reachable(out_dir)
    sources = {name: s.get("column") or name for name, s in cfg["columns"].items()}
    media_sources = [sources[c] for c in media_columns(cfg["columns"])]
    rows = load_rows(cfg["input"], media_sources, sorted(set(sources.values())))
    key_column = cfg.get("key")
    if key_column and not any(key_column in r for r in rows):
        raise ConfigError(f"key: column {key_column!r} is not in the input")
    media_paths = sorted({r[c] for r in rows for c in media_sources if isinstance(r.get(c), str) and r.get(c)})
    media = files.stat_many(media_paths)
    fingerprint = input_fingerprint(cfg, rows, media)
    resolve_auto_vocabularies(cfg["columns"], sources, rows)
    encoders = make_encoders(cfg["columns"])
    spec = feature_spec(encoders)
    name = cfg["name"]
    dataset_dir.check_output_dir(out_dir, name, spec)
    compression = files.normalize_compression(cfg["output"]["compression"] or None)
    cutoffs = splits.split_cutoffs({k: v for k, v in cfg["splits"].items() if v > 0})
    tasks = plan_shards(
        rows,
        key_column,
        cutoffs,
        cfg["seed"],
        cfg["sharding"].get("num_shards"),
        cfg["sharding"]["target_shard_bytes"],
        media_sources,
        media,
    )
    return BuildPlan(name, out_dir, rows, sources, encoders, spec, compression, fingerprint, tasks)


def run_build(
    cfg: Dict[str, Any],
    options,
    progress: bool = True,
    log=print,
    on_version: Optional[Callable[[str], None]] = None,
    workers=None,
) -> BuildSummary:
    """Plan (:func:`plan_build`), claim a version, run the pipeline, write
    ``dataset_info.json`` and publish; an unfinished version is removed on failure.

    ``on_version`` is told the version's name as soon as this run owns it, so a caller
    can say what a failure left there (the CLI's failure block). ``workers``: local
    workers forked before planning (``local_workers.ForkedWorkers``, the CLI's), else
    the runner starts its own."""
    from apache_beam.io.filesystems import FileSystems

    started = time.monotonic()
    FileSystems.set_options(options)  # the launcher reads and writes remote paths too
    plan = plan_build(cfg)
    out_dir, name, rows = plan.out_dir, plan.name, plan.rows

    claimed, claim = _claim_version(out_dir, cfg["output"]["version"], plan.fingerprint, log)
    version = claimed["version"]
    version_dir = files.join(out_dir, version)
    if on_version is not None and claim is not None:
        on_version(version)
    if claimed["state"] == "published":
        return _reuse_published(out_dir, version, claimed["info"], started, log)

    log(f"building {name!r}: {len(rows)} rows -> {version_dir} ({len(plan.tasks)} shards)")
    assert claim is not None
    try:
        refs = write_task_files(plan.tasks, version_dir)
        _run_pipeline(plan, refs, version_dir, cfg["output"]["write_index"], options, progress, workers)
        shards, rejected_lines, rejected_path = _collect_shards(plan, version_dir, version)
        written = sum(s["records"] for s in shards)
        info = _dataset_info(cfg, plan, version, shards, len(rejected_lines))
        files.delete_prefix(files.join(version_dir, META_DIR))
        files.delete_prefix(files.join(version_dir, TASKS_DIR))
        dataset_dir.write_info(version_dir, info)
    except BaseException as err:
        claim.release()
        try:
            dataset_dir.remove_version(version_dir)
            state = f"removed the unfinished version {version_dir}"
        except Exception as cleanup_err:  # noqa: BLE001 - the failure is reported with the state left, cleanup must not mask it
            state = (
                f"could not remove the unfinished version {version_dir} ({cleanup_err}); "
                f"readers ignore it (no {dataset_dir.INFO_NAME})"
            )
        log(
            f"build failed ({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}); {state}; "
            f"LATEST still names {dataset_dir.read_latest(out_dir) or 'nothing'}"
        )
        raise
    claim.release()
    dataset_dir.publish(out_dir, version)
    if cfg.get("report"):  # the dataset is published; the page is a by-product (pipelines/report.py)
        from .report import write_build_report

        log("\n".join(write_build_report(version_dir, options, progress=progress).lines()))
    return BuildSummary(
        version=version,
        version_dir=version_dir,
        rows_in=len(rows),
        written=written,
        rejected=len(rejected_lines),
        shards=shards,
        seconds=time.monotonic() - started,
        rejected_path=rejected_path if rejected_lines else None,
    )


def _dataset_info(
    cfg: Dict[str, Any], plan: BuildPlan, version: str, shards: List[Dict[str, Any]], rejected: int
) -> Dict[str, Any]:
    """``dataset_info.json`` of a finished version: what readers and reruns go by."""
    return {
        "name": plan.name,
        "description": cfg.get("description", ""),
        "version": version,
        "tool": "tfrecord-io",
        "tool_version": TOOL_VERSION,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "fingerprint": plan.fingerprint,
        "features": plan.spec,
        "encoders": {k: e.to_config() for k, e in plan.encoders.items()},
        "compression": plan.compression,
        "splits": _splits_info(shards),
        "rows_in": len(plan.rows),
        "records": sum(s["records"] for s in shards),
        "rejected": rejected,
        "config": cfg,
    }


def _run_pipeline(
    plan: BuildPlan,
    refs: List[Dict[str, Any]],
    version_dir: str,
    write_index: bool,
    options,
    progress: bool,
    workers=None,
) -> None:
    """The Beam job: each shard task (``refs``, see :func:`write_task_files`) encoded
    and written where it lands, shard files and their metadata under ``version_dir``."""
    runner = None
    if workers is not None:
        runner, options = workers.pipeline_runner(options)
    try:
        _run_shard_tasks(plan, refs, version_dir, write_index, options, progress, runner)
    except BaseException:
        if workers is not None:
            workers.close(kill=True)  # gone before run_build removes the version
        raise


def _run_shard_tasks(
    plan: BuildPlan, refs: List[Dict[str, Any]], version_dir: str, write_index: bool, options, progress: bool, runner
) -> None:
    with ProgressPrinter("build", enabled=progress, rate_stage="encoded", total=len(plan.rows)) as bar:
        with beam.Pipeline(runner=runner, options=options) as p:
            (
                p
                # Typed KV[Any, Any]: coded by Beam's deterministic FastPrimitivesCoder,
                # opaque bytes to the runner (Prism 2.62 cannot decode Python-specific
                # composite coders at a GroupByKey, apache/beam#32636).
                | "ShardTasks"
                >> beam.Create(list(enumerate(refs)), reshuffle=False).with_output_types(
                    beam.typehints.KV[beam.typehints.Any, beam.typehints.Any]
                )
                # Keyed by task number and grouped: the runner deals the tasks out to
                # its workers in that (largest-first) order.
                | "SpreadTasks" >> beam.GroupByKey()
                | "EncodeAndWrite"
                >> beam.ParDo(
                    WriteShard(
                        version_dir, plan.name, plan.compression, write_index, plan.encoders, plan.sources, bar.dir
                    )
                )
                | "CountShards" >> beam.ParDo(CountProgress(bar.dir, "shards"))
            )


def _collect_shards(plan: BuildPlan, version_dir: str, version: str) -> Tuple[List[Dict[str, Any]], List[str], str]:
    """The shards' metadata, checked against the plan (every row written or rejected,
    every shard there), and the rejected rows written to their file:
    ``(shards, rejected_lines, rejected_path)``."""
    shards = _read_shard_meta(version_dir)
    rejected_lines = sorted(line for s in shards for line in s.pop("rejected"))
    written = sum(s["records"] for s in shards)
    if len(shards) != len(plan.tasks) or written + len(rejected_lines) != len(plan.rows):
        raise RuntimeError(
            f"build lost rows: {len(plan.rows)} in, {written} written, {len(rejected_lines)} rejected, "
            f"{len(shards)} of {len(plan.tasks)} shards; not publishing {version}"
        )
    rejected_path = files.join(version_dir, REJECTED_NAME)
    files.write_bytes(rejected_path, "".join(line + "\n" for line in rejected_lines).encode("utf-8"))
    return shards, rejected_lines, rejected_path


def _reuse_published(out_dir: str, version: str, info: Dict[str, Any], started: float, log) -> BuildSummary:
    """A retry of a build that already succeeded: verify it, publish it if LATEST has
    not moved past it, and rewrite nothing."""
    version_dir = files.join(out_dir, version)
    log(f"version {version} already exists with the same config and inputs: verifying it")
    problems = dataset_dir.verify_version(version_dir, info)
    if problems:
        raise dataset_dir.DatasetDirError(
            f"version {version_dir} was built from the same config and inputs but fails verification "
            f"({len(problems)} problems, first: {problems[0]}); not overwriting a published version"
        )
    latest = dataset_dir.read_latest(out_dir)
    if latest != version:
        latest_info = dataset_dir.load_info(files.join(out_dir, latest)) if latest else None
        if latest_info is None or str(latest_info.get("created_utc", "")) <= str(info.get("created_utc", "")):
            dataset_dir.publish(out_dir, version)  # the earlier attempt died between its info file and LATEST
    shards = [{**s, "split": split} for split, e in sorted(info["splits"].items()) for s in e["shards"]]
    return BuildSummary(
        version=version,
        version_dir=version_dir,
        rows_in=info["rows_in"],
        written=info["records"],
        rejected=info["rejected"],
        shards=shards,
        seconds=time.monotonic() - started,
        rejected_path=files.join(version_dir, REJECTED_NAME) if info["rejected"] else None,
        reused=True,
    )


def _read_shard_meta(version_dir: str) -> List[Dict[str, Any]]:
    out = [json.loads(files.read_bytes(p)) for p in files.glob(files.join(version_dir, META_DIR, "*.json"))]
    return sorted(out, key=lambda m: (m["split"], m["shard"]))


def _splits_info(shards: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for s in shards:
        split = out.setdefault(s["split"], {"records": 0, "bytes": 0, "num_shards": s["num_shards"], "shards": []})
        split["records"] += s["records"]
        split["bytes"] += s["bytes"]
        split["shards"].append({k: s[k] for k in ("path", "index", "records", "bytes", "sha256")})
    return out
