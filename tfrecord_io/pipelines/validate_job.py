"""``tfrecord-io validate``: every record's CRCs, parsed against the feature spec,
record counts and shard checksums compared with ``tfrecord_io_info.json``.

Input is a dataset (its root with ``LATEST``, or a version directory with
``tfrecord_io_info.json``) or plain file patterns (CRC checks only). The read is the
splitting read of ``tfrecord_io.transforms.ValidateTFRecords``, so one big file keeps every worker
busy. The report lists every problem with its file, byte offset and reason; the exit
status is 1 when there is any.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Tuple

import apache_beam as beam

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.errors import StorageAccessError
from tfrecord_io.pipelines.runtime import worker_core
from tfrecord_io.pipelines.runtime.collect import ResultDir
from tfrecord_io.pipelines.runtime.inputs import dataset_target, expand_patterns, no_input_error
from tfrecord_io.pipelines.runtime.progress import CountProgress, ProgressPrinter
from tfrecord_io.storage import files


def _unlisted_files(version_dir: str, listed: List[str]) -> List[str]:
    known = set(listed)
    extra = []
    for full in files.list_prefix(version_dir):
        name = full.rsplit("/", 1)[-1]
        if ".tfrecord" in name and not name.endswith(".index") and full not in known:
            extra.append(full)
    return sorted(extra)


def _checksum(path: str) -> Dict[str, Any]:
    try:
        return {"path": path, "sha256": dataset_writer.sha256_file(path)}
    except StorageAccessError:  # credentials or permissions: fails the job, naming what to set
        raise
    except Exception as err:  # noqa: BLE001 - reported as a problem of this file
        return {"path": path, "sha256": None, "error": getattr(err, "strerror", None) or str(err).splitlines()[0]}


def run_validate(
    paths: List[str], options, checksums: bool = True, progress: bool = True, workers=None
) -> Dict[str, Any]:
    """Run the validation pipeline and compare with ``tfrecord_io_info.json``; the report.
    ``workers``: local workers forked by the CLI (``local_workers.ForkedWorkers``) to run on."""
    dataset_writer.use_filesystems(options, paths)
    results = ResultDir.for_job(options, "validate")  # before anything runs: a usage error if there is none
    version_dir, info = dataset_target(paths)
    shards: List[Dict[str, Any]] = []
    spec = None
    if version_dir is not None and info is not None:
        shards = dataset_writer.dataset_shards(version_dir, info)
        patterns = [s["abspath"] for s in shards if files.exists(s["abspath"])]
        spec = list(info.get("features", {}).values()) or None
    else:
        # A path or pattern that names no TFRecord file is a mistake in the command (exit
        # 2 before the job, as every job does), not a problem found in the data (exit 1);
        # a directory means the *.tfrecord* files under it, as for the other jobs.
        matched = {p: expand_patterns([p]) for p in paths}
        unmatched = [p for p, found in matched.items() if not found]
        if unmatched:
            raise no_input_error(unmatched)
        patterns = list(dict.fromkeys(f for p in paths for f in matched[p]))
    missing = [
        {
            "path": s["abspath"],
            "offset": None,
            "kind": "missing",
            "reason": "shard listed in tfrecord_io_info.json is missing",
        }
        for s in shards
        if not files.exists(s["abspath"])
    ]
    with ProgressPrinter("validate", enabled=progress, rate_stage="records", options=options) as bar:
        with results:
            report, sums, key_problems = _run_pipeline(
                patterns, spec, checksums and bool(shards), options, bar.dir, results, workers, (version_dir, info)
            )
    problems = list(report.get("problems", [])) + missing
    if version_dir is not None and info is not None:
        problems += _dataset_problems(version_dir, info, shards, report, sums if checksums else None, bool(missing))
        problems += key_problems
    problems.sort(key=lambda p: (p["path"], p["offset"] if p["offset"] is not None else -1))
    return {
        "ok": not problems,
        "dataset": version_dir,
        "name": info.get("name") if info else None,
        "files": report.get("files", 0),
        "records": report.get("records", 0),
        "bytes": report.get("bytes", 0),
        "records_per_file": report.get("records_per_file", {}),
        "checksums_checked": bool(checksums and shards),
        "problems": problems,
        "seconds": round(bar.elapsed, 3),
    }


def key_index_problems(version_dir: str, info: Dict[str, Any], split: str) -> List[Dict[str, Any]]:
    """A split's key index against ``tfrecord_io_info.json`` and the shards' indexes:
    its size and SHA-256, every block's CRC32C, one entry per record, each pointing at a
    record's offset and length in its shard (the shard's ``.index``). The content hashes
    would need every record read again; the shard checksums above cover the records.
    Cost: one read of the index and of the shard indexes (about 50 bytes a row)."""
    import numpy as np

    from tfrecord_io.format.framing import FRAME_OVERHEAD
    from tfrecord_io.format.index import load_index
    from tfrecord_io.format.key_index import KeyIndexReader

    problems: List[Dict[str, Any]] = []

    def problem(path: str, reason: str) -> None:
        problems.append({"path": path, "offset": None, "kind": "key_index", "reason": reason})

    for entry in [(info.get("splits") or {}).get(split) or {}]:
        note = entry.get("key_index")
        if not note:
            continue  # built before key indexes: nothing promised
        path = files.join(version_dir, note["path"])
        try:
            data = files.read_bytes(path)
        except Exception as err:  # noqa: BLE001 - reported as this file's problem
            problem(path, f"key index listed in tfrecord_io_info.json cannot be read ({str(err).splitlines()[0]})")
            continue
        import hashlib

        if len(data) != note["bytes"] or hashlib.sha256(data).hexdigest() != note["sha256"]:
            problem(path, "size or SHA-256 differs from tfrecord_io_info.json")
            continue
        try:
            reader = KeyIndexReader(path, data=data)
            located: Dict[int, List[Any]] = {}
            for blk in reader.blocks_in_order():
                for shard in np.unique(blk.shards).tolist():
                    mask = blk.shards == shard
                    located.setdefault(int(shard), []).append(
                        (blk.offsets[mask].astype(np.int64), blk.lengths[mask].astype(np.int64))
                    )
        except Exception as err:  # noqa: BLE001 - a corrupt index: its own problem
            problem(path, str(err).splitlines()[0])
            continue
        shards = entry.get("shards", [])
        for n, shard in enumerate(shards):
            parts = located.pop(n, [])
            offsets = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
            lengths = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
            if len(offsets) != shard["records"]:
                problem(
                    path, f"{len(offsets)} entries point into {shard['path']}, which holds {shard['records']} records"
                )
                continue
            if not shard.get("index"):
                continue
            try:
                idx = load_index(files.join(version_dir, shard["index"]))
            except Exception:  # noqa: BLE001 - the shard's own check reports its index
                continue
            order = np.argsort(offsets, kind="stable")
            if not (
                np.array_equal(offsets[order], idx.offsets)
                and np.array_equal(lengths[order] + FRAME_OVERHEAD, idx.sizes)
            ):
                problem(path, f"its entries for {shard['path']} do not match the records' offsets and lengths")
        for n in sorted(located):
            problem(path, f"entries point into shard {n}, which the split does not have")
    return problems


def _records_in(item) -> int:
    """Records an item of ``ValidateTFRecords`` stands for (the progress count)."""
    return item[2]["records"] if item[0] == "batch" else 0


def _run_pipeline(
    patterns: List[str],
    spec,
    checksums: bool,
    options,
    progress_dir: Optional[str],
    results: ResultDir,
    workers=None,
    dataset: Tuple[Optional[str], Optional[Dict[str, Any]]] = (None, None),
) -> Tuple[Dict[str, Any], Dict[str, Optional[str]], List[Dict[str, Any]]]:
    """The Beam job: ``ValidateTFRecords`` over ``patterns`` and, with ``checksums``,
    the SHA-256 of each file beside it, collected in ``results``. ``(report, {path:
    sha256}, key index problems)``; an empty report when there is nothing to read. The key
    indexes of ``dataset`` (version directory, info) are checked in a stage per split."""
    from tfrecord_io.transforms.validate import ValidateTFRecords

    report: Dict[str, Any] = {}
    sums: Dict[str, Optional[str]] = {}
    key_problems: List[Dict[str, Any]] = []
    version_dir, info = dataset
    indexed = []
    if version_dir is not None and info is not None:
        indexed = sorted(s for s, e in (info.get("splits") or {}).items() if e.get("key_index"))
    if patterns:
        runner, options = workers.pipeline_runner(options) if workers is not None else (None, options)
        with beam.Pipeline(runner=runner, options=options) as p:
            monitor = CountProgress(progress_dir, "records", weigh=_records_in)
            reports = p | "Validate" >> ValidateTFRecords(patterns, spec, monitor=monitor)
            tagged = [reports | "TagReport" >> beam.Map(lambda r: {"report": r})]
            if checksums:
                tagged.append(
                    p
                    | "Shards" >> beam.Create(patterns)
                    | "Spread" >> beam.Reshuffle()
                    | "Checksum" >> beam.Map(lambda path: {"checksum": _checksum(path)})
                )
            if indexed and version_dir is not None and info is not None:
                tagged.append(
                    p
                    | "KeyIndexes" >> beam.Create(indexed)
                    | "SpreadSplits" >> beam.Reshuffle()
                    | "CheckKeyIndex"
                    >> beam.Map(lambda split: {"key_index": key_index_problems(version_dir, info, split)})
                )
            tagged | "All" >> beam.Flatten() | "Collect" >> results.sink()
            noted = worker_core.workers_install_the_package(options)
            if noted:
                _ = p | "WorkerCore" >> worker_core.NoteWorkerCore()
        line = worker_core.core_line(p.result) if noted else None
        if line:
            print(line, file=sys.stderr)
    for item in results.read():
        if "report" in item:
            report = item["report"]
        elif "key_index" in item:
            key_problems += item["key_index"]
        else:
            sums[item["checksum"]["path"]] = item["checksum"]["sha256"]
    return report, sums, key_problems


def _dataset_problems(
    version_dir: str,
    info: Dict[str, Any],
    shards: List[Dict[str, Any]],
    report: Dict[str, Any],
    sums: Optional[Dict[str, Optional[str]]],
    shards_missing: bool,
) -> List[Dict[str, Any]]:
    """What the read found against what ``tfrecord_io_info.json`` says: per-shard record
    counts and (unless ``sums`` is None) checksums, files it does not list, the total."""
    problems: List[Dict[str, Any]] = []
    counts = report.get("records_per_file", {})
    for s in shards:
        path = s["abspath"]
        if not files.exists(path):
            continue
        if counts.get(path, 0) != s["records"]:
            problems.append(
                {
                    "path": path,
                    "offset": None,
                    "kind": "count",
                    "reason": f"tfrecord_io_info.json lists {s['records']} records, the file has {counts.get(path, 0)}",
                }
            )
        if sums is not None and sums.get(path) != s.get("sha256"):
            problems.append(
                {
                    "path": path,
                    "offset": None,
                    "kind": "checksum",
                    "reason": f"SHA-256 {sums.get(path)} differs from tfrecord_io_info.json's {s.get('sha256')}",
                }
            )
    for extra in _unlisted_files(version_dir, [s["abspath"] for s in shards]):
        problems.append(
            {
                "path": extra,
                "offset": None,
                "kind": "unlisted",
                "reason": "TFRecord file not listed in tfrecord_io_info.json",
            }
        )
    expected = info.get("records")
    if (
        expected is not None
        and report.get("records") is not None
        and report["records"] != expected
        and not shards_missing
    ):
        problems.append(
            {
                "path": version_dir,
                "offset": None,
                "kind": "count",
                "reason": f"tfrecord_io_info.json lists {expected} records in all, validation read {report['records']}",
            }
        )
    return problems


def summary_lines(report: Dict[str, Any], limit: int = 20) -> List[str]:
    what = f"dataset {report['name']!r} at {report['dataset']}" if report.get("dataset") else "files"
    rate = report["records"] / report["seconds"] if report.get("seconds") else 0.0
    lines = [
        f"validated {what}: {report['files']} files, {report['records']:,} records, "
        f"{report['bytes'] / 1e6:.2f} MB in {report['seconds']:.1f}s ({rate:,.0f} records/s)"
    ]
    if report["ok"]:
        lines.append(
            "OK: every record's CRCs hold"
            + (
                ", every record matches the feature spec, counts and checksums match tfrecord_io_info.json"
                if report.get("dataset")
                else ""
            )
        )
        return lines
    lines.append(f"FAILED: {len(report['problems'])} problem(s)")
    for p in report["problems"][:limit]:
        where = f"{p['path']}" + (f" at byte offset {p['offset']}" if p.get("offset") is not None else "")
        lines.append(f"  {p['kind']}: {where}: {p['reason']}")
    if len(report["problems"]) > limit:
        lines.append(f"  ... and {len(report['problems']) - limit} more (see the JSON report)")
    return lines
