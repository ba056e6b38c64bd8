"""Checking records against a feature spec, and the validation report, as plain
functions (no Beam). ``ValidateTFRecords`` runs these on every record of a split read;
``validate_files`` runs them in one process for small data sets and tests.

A report is a JSON-ready dict::

    {"ok": bool, "files": 2, "records": 1000, "bytes": 123456,
     "bad_records": 1, "corrupt_regions": 1, "invalid_records": 0,
     "per_file": {path: {"records": n, "bytes": size, "bad": k}},
     "problems": [{"path", "offset", "end", "kind": "corrupt"|"invalid"|"error", "reason"}]}

``problems`` is sorted by path and offset and lists *every* bad record or region.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from tfrecord_io.errors import StorageUnavailableError
from tfrecord_io.format.codec import _fast_columns
from tfrecord_io.format.framing import CorruptRegion
from tfrecord_io.format.reader import read_records
from tfrecord_io.proto.example_pb2 import Example, SequenceExample
from tfrecord_io.storage import files

from .spec import FeatureSpec, SpecLike, feature_specs

_ONEOF = {"bytes": "bytes_list", "int": "int64_list", "float": "float_list"}


def _check_feature(feature, spec: FeatureSpec, what: str) -> Optional[str]:
    kind = feature.WhichOneof("kind")
    count = len(getattr(feature, kind).value) if kind else 0
    if kind is not None and kind != _ONEOF[spec.kind]:
        return f"{what} {spec.key!r} is {kind}, the spec says {spec.kind}"
    if spec.length is not None and count != spec.length:
        return f"{what} {spec.key!r} has {count} values, shape {list(spec.shape or ())} needs {spec.length}"
    return None


def _check_map(fmap, specs: Iterable[FeatureSpec], what: str) -> List[str]:
    problems = []
    for s in specs:
        if s.key not in fmap:
            if s.required:
                problems.append(f"missing required {what} {s.key!r}")
            continue
        problem = _check_feature(fmap[s.key], s, what)
        if problem:
            problems.append(problem)
    return problems


def check_record(data, specs: Sequence[FeatureSpec]) -> List[str]:
    """Everything wrong with one serialised record under ``specs`` ([] when it is fine).

    Specs with ``sequence=True`` make the record a SequenceExample (their keys are
    feature lists; the others context features); otherwise it is an Example.
    """
    if any(s.sequence for s in specs):
        seq = SequenceExample()
        try:
            seq.ParseFromString(data)
        except Exception as err:  # noqa: BLE001 - an unparsable record is a finding of the check
            return [f"not a valid tf.train.SequenceExample: {err}"]
        problems = _check_map(seq.context.feature, [s for s in specs if not s.sequence], "context feature")
        lists = seq.feature_lists.feature_list
        for s in (s for s in specs if s.sequence):
            if s.key not in lists:
                if s.required:
                    problems.append(f"missing required feature list {s.key!r}")
                continue
            for i, f in enumerate(lists[s.key].feature):
                problem = _check_feature(f, s, f"step {i} of feature list")
                if problem:
                    problems.append(problem)
                    break
        return problems
    example = Example()
    try:
        example.ParseFromString(data)
    except Exception as err:  # noqa: BLE001 - an unparsable record is a finding of the check
        return [f"not a valid tf.train.Example: {err}"]
    return _check_map(example.features.feature, specs, "feature")


_WIRE = {"bytes": "bytes_list", "int": "int64_list", "float": "float_list"}


def _fast_lengths(records: Sequence, specs: Sequence[FeatureSpec]) -> Optional[List[Any]]:
    """Values per record of every spec'd feature, from one call of the compiled parser
    (one int64 array per spec), or None when it leaves the batch to upb: no compiled
    core, a SequenceExample spec, or any record with a key missing, a type other than
    the spec's, or anything else it does not parse itself."""
    if not specs or any(s.sequence for s in specs):
        return None
    cols = _fast_columns(records, [(s.key, _WIRE[s.kind]) for s in specs], spans=True)
    if cols is None:
        return None
    return [np.frombuffer(col[1], dtype=np.int64) for col in cols]


def check_records(records: Sequence, specs: Sequence[FeatureSpec]) -> List[Tuple[int, List[str]]]:
    """``(position, problems)`` of every record of ``records`` with problems under
    ``specs``: what ``check_record`` finds, for a whole batch.

    The batch is parsed by the compiled core in one call; only the records whose value
    counts differ from the spec's are parsed again by upb (for the message). A batch
    the compiled parser leaves to upb (a missing key, a type other than the spec's, a
    record that is not an Example ...) is checked record by record, as before.
    """
    if not specs:
        return []
    lengths = _fast_lengths(records, specs)
    if lengths is None:
        found = ((i, check_record(r, specs)) for i, r in enumerate(records))
        return [(i, problems) for i, problems in found if problems]
    bad = np.zeros(len(records), dtype=bool)
    for s, counts in zip(specs, lengths):
        if s.length is not None:
            bad |= counts != s.length
    return [(int(i), check_record(records[i], specs)) for i in np.flatnonzero(bad)]


# --------------------------------------------------------------------------- files and ranges


def list_files(patterns: Iterable[str]) -> List[Tuple[str, int]]:
    """``(path, stored size)`` of every file matching the patterns (sorted, unique)."""
    out: Dict[str, int] = {}
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        matched = files.glob(pattern)
        for path in matched:
            out[path] = files.file_size(path)
    return sorted(out.items())


def read_range(
    path: str,
    start: int,
    end: Optional[int],
    specs: Sequence[FeatureSpec],
    compression_type: Optional[str] = None,
    check_crc: bool = True,
) -> Iterable[Tuple]:
    """Validation items for one byte range: ``("record", path, offset, nbytes, problems)``
    per record and ``("corrupt", path, start, end, reason)`` per bad region (or read error)."""
    try:
        for offset, data in read_records(
            path, start, end, compression_type=compression_type, check_crc=check_crc, on_corrupt="report"
        ):
            if isinstance(data, CorruptRegion):
                yield ("corrupt", path, data.start, data.end, data.reason)
            else:
                yield ("record", path, offset, len(data), check_record(data, specs) if specs else [])
    except StorageUnavailableError:  # the store, not the file: the job fails naming it
        raise
    except Exception as err:  # noqa: BLE001 - a read that fails is a finding, not a crash
        yield (
            "error",
            path,
            getattr(err, "offset", None) or start,
            end,
            f"{type(err).__name__}: {getattr(err, 'reason', err)}",
        )


# --------------------------------------------------------------------------- the report


def empty_report() -> Dict[str, Any]:
    return {"per_file": {}, "problems": [], "records": 0, "record_bytes": 0}


def add_item(report: Dict[str, Any], item: Tuple) -> Dict[str, Any]:
    """Fold one item (``("file", path, size)``, a record or a corrupt region) in."""
    kind, path = item[0], item[1]
    if kind == "nomatch":
        report["problems"].append(
            {"path": path, "offset": None, "end": None, "kind": "error", "reason": "no file matches this pattern"}
        )
        return report
    entry = report["per_file"].setdefault(path, {"records": 0, "bytes": 0, "bad": 0})
    if kind == "file":
        entry["bytes"] = item[2]
    elif kind == "batch":
        merge_into(report, item[2])
    elif kind == "record":
        _, _, offset, nbytes, problems = item
        entry["records"] += 1
        report["records"] += 1
        report["record_bytes"] += nbytes
        if problems:
            entry["bad"] += 1
            report["problems"].append(
                {"path": path, "offset": offset, "end": None, "kind": "invalid", "reason": "; ".join(problems)}
            )
    else:
        _, _, start, end, reason = item
        entry["bad"] += 1
        report["problems"].append({"path": path, "offset": start, "end": end, "kind": kind, "reason": reason})
    return report


def batch_report(path: str, offsets: Sequence[int], records: Sequence, specs: Sequence[FeatureSpec]) -> Dict[str, Any]:
    """The partial report of a batch of records of one file (read in one range):
    counts and bytes, and an ``invalid`` problem for each record the spec rejects."""
    report = empty_report()
    entry = report["per_file"][path] = {"records": len(records), "bytes": 0, "bad": 0}
    report["records"] = len(records)
    report["record_bytes"] = sum(map(len, records))
    for i, problems in check_records(records, specs):
        entry["bad"] += 1
        report["problems"].append(
            {"path": path, "offset": offsets[i], "end": None, "kind": "invalid", "reason": "; ".join(problems)}
        )
    return report


def merge_into(acc: Dict[str, Any], other: Dict[str, Any]) -> Dict[str, Any]:
    """Fold the partial report ``other`` into ``acc`` (in place; returns ``acc``)."""
    for path, e in other["per_file"].items():
        mine = acc["per_file"].setdefault(path, {"records": 0, "bytes": 0, "bad": 0})
        mine["records"] += e["records"]
        mine["bad"] += e["bad"]
        mine["bytes"] = max(mine["bytes"], e["bytes"])
    acc["problems"].extend(other["problems"])
    acc["records"] += other["records"]
    acc["record_bytes"] += other["record_bytes"]
    return acc


def merge_reports(reports: Iterable[Dict[str, Any]]) -> Dict[str, Any]:
    out = empty_report()
    for r in reports:
        merge_into(out, r)
    return out


def finish_report(report: Dict[str, Any]) -> Dict[str, Any]:
    """The final, sorted report with totals."""
    problems = sorted(report["problems"], key=lambda p: (p["path"], p["offset"] if p["offset"] is not None else -1))
    per_file = {p: dict(report["per_file"][p]) for p in sorted(report["per_file"])}
    counts = {k: sum(1 for p in problems if p["kind"] == k) for k in ("corrupt", "invalid", "error")}
    return {
        "ok": not problems,
        "files": len(per_file),
        "records": report["records"],
        "bytes": sum(e["bytes"] for e in per_file.values()),
        "record_bytes": report["record_bytes"],
        "bad_records": len(problems),
        "corrupt_regions": counts["corrupt"],
        "invalid_records": counts["invalid"],
        "read_errors": counts["error"],
        "records_per_file": {p: e["records"] for p, e in per_file.items()},
        "per_file": per_file,
        "problems": problems,
    }


def validate_files(
    patterns, spec: SpecLike = None, compression_type: Optional[str] = None, check_crc: bool = True
) -> Dict[str, Any]:
    """Validate files in this process (no Beam): the same report as ``ValidateTFRecords``."""
    specs = feature_specs(spec)
    report = empty_report()
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        if not files.glob(pattern):
            add_item(report, ("nomatch", pattern))
    for path, size in list_files(patterns):
        add_item(report, ("file", path, size))
        for item in read_range(path, 0, None, specs, compression_type, check_crc):
            add_item(report, item)
    return finish_report(report)


__all__ = [
    "add_item",
    "batch_report",
    "check_records",
    "check_record",
    "empty_report",
    "finish_report",
    "list_files",
    "merge_into",
    "merge_reports",
    "read_range",
    "validate_files",
]
