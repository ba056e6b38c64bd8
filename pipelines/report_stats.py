"""The statistics job behind ``tfrecord-io report``: one Beam pipeline that reads every
shard once (the splitting read) and reduces it with combiners, so it scales with the
data set the way the build does.

What it computes, per split:

- every feature key: its type, how many records have it, values per record (min, max, mean);
- per column, from the features the encoders wrote (no media is decoded for this):
  images: width, height, size, mode, format and encoded bytes; audio: duration, sample
  rate and channels; text: length in characters; labels: count per class; ints, floats
  and arrays: a histogram of their values; bytes: their length;
- a deterministic sample of records: the ``n`` with the smallest SHA-256 of
  ``"<shard path relative to the version>:<byte offset>"`` per split (and per label
  when the label has at most :data:`MAX_LABEL_GROUPS` classes). The same version
  always gives the same sample, whatever the runner, worker count or bundle split.

and, from the dead-letter file(s), the rejected rows grouped by column, stage and reason.

Histograms are mergeable without a first pass for the range: bins have a power-of-two
width, the narrowest that keeps the data within :data:`MAX_BINS` bins; merging two
partial histograms rebins the finer one (power-of-two bins nest exactly). The result
depends only on the values, never on how the runner split the work. (Means are sums in
merge order: with floats they may differ in the last bits between runs, far below the
three significant digits the page shows.)
"""

from __future__ import annotations

import base64
import hashlib
import heapq
import json
import math
import re
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple

import apache_beam as beam
import numpy as np

from tfrecord_io.codec import BYTES, FLOAT, INT64, Example

from .collect import ResultDir
from .progress import CountProgress, ProgressPrinter

MAX_BINS = 40
#: Label columns with at most this many classes get a sample grid per label.
MAX_LABEL_GROUPS = 20
#: Distinct image sizes listed exactly; beyond this only width/height histograms.
MAX_IMAGE_SIZES = 50
#: Rejected rows kept (per reason) as examples.
REJECTED_EXAMPLES = 5
#: Records per element out of the read: folded into statistics in one DoFn call.
READ_BATCH = 256

TYPE_NAMES = {BYTES: "bytes", FLOAT: "float", INT64: "int", None: "empty"}
KIND_OF_ENCODER = {
    "Image": "image",
    "Audio": "audio",
    "Text": "text",
    "Label": "label",
    "Int": "int",
    "Float": "float",
    "Array": "array",
    "Bytes": "bytes",
}


class ReportColumn(NamedTuple):
    """A column of the data set as the report sees it."""

    name: str
    kind: str  # image, audio, text, label, int, float, array, bytes
    prefix: str  # the Example key (single-feature columns) or key prefix (image, audio)
    names: Optional[Tuple[str, ...]] = None  # label vocabulary
    num_classes: Optional[int] = None
    config: Optional[Dict[str, Any]] = None  # the encoder's config: decodes the samples


class Shard(NamedTuple):
    split: str
    path: str  # as the filesystem opens it
    relpath: str  # relative to the version directory: names the shard in the report and the sample hash


# --------------------------------------------------------------------------- columns


def columns_from_encoders(encoders: Mapping[str, Mapping[str, Any]]) -> List[ReportColumn]:
    """``dataset_info.json``'s ``encoders`` -> report columns (sequence encoders are not
    described by the report: the build writes Examples)."""
    out = []
    for name, cfg in sorted(encoders.items()):
        kind = KIND_OF_ENCODER.get(cfg.get("type"))
        if kind is None:
            continue
        vocab = cfg.get("vocabulary") if kind == "label" else None
        out.append(
            ReportColumn(
                name,
                kind,
                cfg.get("key") or name,
                tuple(vocab) if vocab else None,
                len(vocab) if vocab else cfg.get("num_classes"),
                dict(cfg),
            )
        )
    return out


def columns_from_record(data: bytes) -> List[ReportColumn]:
    """Columns of files without ``dataset_info.json``, from one record's keys: the key
    groups our Image and Audio encoders write (``x/encoded``, ``x/height`` ... ;
    ``x/sample_rate``, ``x/num_samples`` ...), an int feature named ``label``, and every
    other feature by its type (UTF-8 bytes as text)."""
    example = Example()
    example.ParseFromString(data)
    fmap = example.features.feature
    groups: Dict[str, set] = {}
    for key in fmap:
        head, sep, tail = key.rpartition("/")
        if sep:
            groups.setdefault(head, set()).add(tail)
    out: List[ReportColumn] = []
    taken: set = set()
    for prefix, tails in sorted(groups.items()):
        if {"encoded", "format", "height", "width", "mode"} <= tails:
            out.append(ReportColumn(prefix, "image", prefix, config={"type": "Image", "key": prefix}))
        elif {"sample_rate", "num_samples", "channels"} <= tails and tails & {"encoded", "samples"}:
            storage = "bytes" if "encoded" in tails else "floats"
            out.append(
                ReportColumn(prefix, "audio", prefix, config={"type": "Audio", "key": prefix, "storage": storage})
            )
        else:
            continue
        taken.update(f"{prefix}/{t}" for t in tails)
    for key in sorted(set(fmap) - taken):
        feature = fmap[key]
        kind = TYPE_NAMES[feature.WhichOneof("kind")]
        values = getattr(feature, feature.WhichOneof("kind")).value if kind != "empty" else []
        if kind == "int":
            kind = "label" if key == "label" else ("int" if len(values) <= 1 else "array")
        elif kind == "float":
            kind = "float" if len(values) <= 1 else "array"
        elif kind == "bytes":
            kind = "text" if all(_is_text(v) for v in values) else "bytes"
        else:
            continue
        config = {
            "label": {"type": "Label", "key": key},
            "int": {"type": "Int", "key": key},
            "float": {"type": "Float", "key": key, "allow_nan": True},
            "text": {"type": "Text", "key": key, "normalize": None, "on_invalid": "keep"},
        }.get(kind)
        out.append(ReportColumn(key, kind, key, config=config))
    return sorted(out, key=lambda c: c.name)


def _is_text(value: bytes) -> bool:
    try:
        return value.decode("utf-8").isprintable() or not value
    except UnicodeDecodeError:
        return False


def label_column(columns: List[ReportColumn]) -> Optional[ReportColumn]:
    """The column samples are grouped by: the first label column."""
    return next((c for c in columns if c.kind == "label"), None)


def groups_by_label(columns: List[ReportColumn]) -> bool:
    label = label_column(columns)
    return bool(label and label.num_classes and label.num_classes <= MAX_LABEL_GROUPS)


# --------------------------------------------------------------------------- mergeable summaries


def hist_new(start_exp: int = 0) -> Dict[str, Any]:
    """An empty histogram whose narrowest bin is ``2**start_exp`` wide."""
    return {
        "exp": start_exp,
        "bins": {},
        "lo": None,
        "hi": None,
        "n": 0,
        "sum": 0.0,
        "min": None,
        "max": None,
        "nonfinite": 0,
    }


def _halve(bins: Mapping[int, int], times: int = 1) -> Dict[int, int]:
    """Bins of width w -> bins of width ``w * 2**times`` (power-of-two bins nest)."""
    out = dict(bins)
    for _ in range(times):
        merged: Dict[int, int] = {}
        for i, c in out.items():
            merged[i // 2] = merged.get(i // 2, 0) + c
        out = merged
    return out


def _fit(h: Dict[str, Any], lo: int, hi: int) -> None:
    """Widen ``h``'s bins until ``lo..hi`` (bin indices at its width) fit in MAX_BINS."""
    while hi - lo + 1 > MAX_BINS:
        h["bins"] = _halve(h["bins"])
        h["exp"] += 1
        lo, hi = lo // 2, hi // 2
    h["lo"], h["hi"] = lo, hi


def _hist_add_one(h: Dict[str, Any], x: float) -> None:
    """One number (the common case: a size, a length, a duration per record), without NumPy."""
    if not math.isfinite(x):
        h["nonfinite"] += 1
        return
    h["n"] += 1
    h["sum"] += x
    if h["lo"] is None:
        h["min"] = h["max"] = x
    elif x < h["min"]:
        h["min"] = x
    elif x > h["max"]:
        h["max"] = x
    i = math.floor(math.ldexp(x, -h["exp"]))
    lo, hi = (i, i) if h["lo"] is None else (min(i, h["lo"]), max(i, h["hi"]))
    if hi - lo + 1 > MAX_BINS:
        _fit(h, lo, hi)
        i = math.floor(math.ldexp(x, -h["exp"]))
    else:
        h["lo"], h["hi"] = lo, hi
    h["bins"][i] = h["bins"].get(i, 0) + 1


def hist_add(h: Dict[str, Any], values: Any) -> None:
    """Add numbers (a scalar, list or array) to ``h``."""
    if isinstance(values, (int, float)):
        _hist_add_one(h, float(values))
        return
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size == 0:
        return
    finite = np.isfinite(arr)
    if not finite.all():
        h["nonfinite"] += int((~finite).sum())
        arr = arr[finite]
        if arr.size == 0:
            return
    vmin, vmax = float(arr.min()), float(arr.max())
    h["n"] += int(arr.size)
    h["sum"] += float(arr.sum())
    h["min"] = vmin if h["min"] is None else min(h["min"], vmin)
    h["max"] = vmax if h["max"] is None else max(h["max"], vmax)
    lo = math.floor(math.ldexp(vmin, -h["exp"]))
    hi = math.floor(math.ldexp(vmax, -h["exp"]))
    if h["lo"] is not None:
        lo, hi = min(lo, h["lo"]), max(hi, h["hi"])
    _fit(h, lo, hi)
    if arr.size == 1:
        i = math.floor(math.ldexp(vmin, -h["exp"]))
        h["bins"][i] = h["bins"].get(i, 0) + 1
        return
    idx, counts = np.unique(np.floor(np.ldexp(arr, -h["exp"])).astype(np.int64), return_counts=True)
    for i, c in zip(idx.tolist(), counts.tolist()):
        h["bins"][i] = h["bins"].get(i, 0) + c


def hist_merge(h: Dict[str, Any], other: Dict[str, Any]) -> None:
    """Fold ``other`` into ``h``. Exact: both are rebinned to the wider of their widths,
    then widened until the union fits, which is the width a single pass would reach."""
    h["nonfinite"] += other["nonfinite"]
    if other["n"] == 0:
        return
    exp = max(h["exp"], other["exp"])
    bins = _halve(h["bins"], exp - h["exp"])
    for i, c in _halve(other["bins"], exp - other["exp"]).items():
        bins[i] = bins.get(i, 0) + c
    h["bins"], h["exp"] = bins, exp
    _fit(h, min(bins), max(bins))
    h["n"] += other["n"]
    h["sum"] += other["sum"]
    h["min"] = other["min"] if h["min"] is None else min(h["min"], other["min"])
    h["max"] = other["max"] if h["max"] is None else max(h["max"], other["max"])


def hist_output(h: Dict[str, Any]) -> Dict[str, Any]:
    """JSON-ready: ``{"width", "bins": [[left edge, count], ...], n, mean, min, max, nonfinite}``."""
    width = math.ldexp(1.0, h["exp"])
    return {
        "width": width,
        "bins": [[i * width, h["bins"][i]] for i in sorted(h["bins"])],
        "n": h["n"],
        "mean": h["sum"] / h["n"] if h["n"] else None,
        "min": h["min"],
        "max": h["max"],
        "nonfinite": h["nonfinite"],
    }


def count_add(counter: Dict[str, int], key: Any, n: int = 1) -> None:
    key = str(key)
    counter[key] = counter.get(key, 0) + n


def count_merge(counter: Dict[str, int], other: Mapping[str, int]) -> None:
    for k, n in other.items():
        counter[k] = counter.get(k, 0) + n


def capped_merge(acc: Dict[str, Any], other: Mapping[str, Any], cap: int) -> None:
    """A counter that gives up (``counts: None``) past ``cap`` distinct keys: deterministic,
    since a partial count can only exceed the cap if the whole does."""
    if acc["counts"] is None or other["counts"] is None:
        acc["counts"] = None
        return
    count_merge(acc["counts"], other["counts"])
    if len(acc["counts"]) > cap:
        acc["counts"] = None


# --------------------------------------------------------------------------- one record


def _values(fmap, key: str) -> Optional[list]:
    if key not in fmap:
        return None
    feature = fmap[key]
    kind = feature.WhichOneof("kind")
    return list(getattr(feature, kind).value) if kind else []


def _one(fmap, key: str) -> Any:
    values = _values(fmap, key)
    return values[0] if values else None


def _text(value: Any) -> Optional[str]:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else None


def observe_record(data: bytes, columns: List[ReportColumn]) -> Dict[str, Any]:
    """One serialised Example -> what the statistics need from it (small)."""
    example = Example()
    try:
        example.ParseFromString(data)
    except Exception as err:  # noqa: BLE001 - counted, never fails the job
        return {"error": f"not a tf.train.Example: {err}"}
    fmap = example.features.feature
    features = {}
    for key, feature in fmap.items():
        kind = feature.WhichOneof("kind")
        features[key] = (TYPE_NAMES[kind], len(getattr(feature, kind).value) if kind else 0)
    cols: Dict[str, Any] = {}
    for c in columns:
        p = c.prefix
        if c.kind == "image":
            h, w = _one(fmap, f"{p}/height"), _one(fmap, f"{p}/width")
            if h is None or w is None:
                continue
            cols[c.name] = {
                "height": h,
                "width": w,
                "mode": _text(_one(fmap, f"{p}/mode")),
                "format": _text(_one(fmap, f"{p}/format")),
                "bytes": len(_one(fmap, f"{p}/encoded") or b""),
            }
        elif c.kind == "audio":
            n, rate = _one(fmap, f"{p}/num_samples"), _one(fmap, f"{p}/sample_rate")
            if n is None or not rate:
                continue
            cols[c.name] = {"seconds": n / rate, "rate": rate, "channels": _one(fmap, f"{p}/channels")}
        elif c.kind == "text":
            value = _one(fmap, p)
            if value is None:
                continue
            try:
                cols[c.name] = {"chars": len(value.decode("utf-8"))}
            except UnicodeDecodeError:
                cols[c.name] = {"invalid": 1}
        elif c.kind == "label":
            value = _one(fmap, p)
            if value is not None:
                cols[c.name] = {"id": int(value)}
        elif c.kind in ("int", "float", "array"):
            values = _values(fmap, p)
            if values is None:
                continue
            if values and isinstance(values[0], bytes):  # an Array stored as bytes
                cols[c.name] = {"bytes": sum(len(v) for v in values)}
            else:
                cols[c.name] = {"values": values[0] if len(values) == 1 else values}
        elif c.kind == "bytes":
            values = _values(fmap, p)
            if values is not None:
                cols[c.name] = {"bytes": sum(len(v) for v in values)}
    return {"features": features, "columns": cols}


# --------------------------------------------------------------------------- combiners


def _column_acc(kind: str) -> Dict[str, Any]:
    if kind == "image":
        return {
            "present": 0,
            "width": hist_new(),
            "height": hist_new(),
            "bytes": hist_new(),
            "sizes": {"counts": {}},
            "modes": {},
            "formats": {},
        }
    if kind == "audio":
        return {"present": 0, "seconds": hist_new(-10), "rates": {}, "channels": {}}
    if kind == "text":
        return {"present": 0, "chars": hist_new(), "invalid": 0}
    if kind == "label":
        return {"present": 0, "ids": {}}
    return {"present": 0, "values": hist_new(0 if kind == "int" else -24), "bytes": hist_new()}


def _column_add(acc: Dict[str, Any], kind: str, seen: Mapping[str, Any]) -> None:
    acc["present"] += 1
    if kind == "image":
        hist_add(acc["width"], seen["width"])
        hist_add(acc["height"], seen["height"])
        hist_add(acc["bytes"], seen["bytes"])
        if acc["sizes"]["counts"] is not None:
            count_add(acc["sizes"]["counts"], f"{seen['width']}x{seen['height']}")
            if len(acc["sizes"]["counts"]) > MAX_IMAGE_SIZES:
                acc["sizes"]["counts"] = None
        count_add(acc["modes"], seen["mode"])
        count_add(acc["formats"], seen["format"])
    elif kind == "audio":
        hist_add(acc["seconds"], seen["seconds"])
        count_add(acc["rates"], seen["rate"])
        count_add(acc["channels"], seen["channels"])
    elif kind == "text":
        if "chars" in seen:
            hist_add(acc["chars"], seen["chars"])
        else:
            acc["invalid"] += 1
    elif kind == "label":
        count_add(acc["ids"], seen["id"])
    elif "values" in seen:
        hist_add(acc["values"], seen["values"])
    else:
        hist_add(acc["bytes"], seen["bytes"])


def _column_merge(acc: Dict[str, Any], other: Dict[str, Any], kind: str) -> None:
    acc["present"] += other["present"]
    for key, value in other.items():
        if key == "present":
            continue
        if key == "sizes":
            capped_merge(acc[key], value, MAX_IMAGE_SIZES)
        elif isinstance(value, dict) and "bins" in value:
            hist_merge(acc[key], value)
        elif isinstance(value, dict):
            count_merge(acc[key], value)
        else:
            acc[key] += value


def _column_output(acc: Dict[str, Any]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in acc.items():
        if isinstance(value, dict) and "bins" in value:
            out[key] = hist_output(value)
        elif key == "sizes":
            out[key] = (
                dict(sorted(value["counts"].items(), key=lambda kv: (-kv[1], kv[0])))
                if value["counts"] is not None
                else None
            )
        elif isinstance(value, dict):
            out[key] = dict(sorted(value.items(), key=lambda kv: (-kv[1], kv[0])))
        else:
            out[key] = value
    return out


class SplitStatsFn(beam.CombineFn):
    """Per-record observations -> one split's statistics (see the module docstring)."""

    def __init__(self, columns: List[ReportColumn]):
        self._columns = [tuple(c) for c in columns]

    def _cols(self) -> List[ReportColumn]:
        return [ReportColumn(*c) for c in self._columns]

    def create_accumulator(self) -> Dict[str, Any]:
        return {
            "records": 0,
            "not_examples": 0,
            "features": {},
            "columns": {c.name: _column_acc(c.kind) for c in self._cols()},
        }

    def add_input(self, acc, seen):
        acc["records"] += 1
        if "error" in seen:
            acc["not_examples"] += 1
            return acc
        for key, (kind, length) in seen["features"].items():
            f = acc["features"].get(key)
            if f is None:
                f = acc["features"][key] = {
                    "types": {},
                    "present": 0,
                    "min_len": length,
                    "max_len": length,
                    "sum_len": 0,
                }
            count_add(f["types"], kind)
            f["present"] += 1
            f["min_len"] = min(f["min_len"], length)
            f["max_len"] = max(f["max_len"], length)
            f["sum_len"] += length
        kinds = {c.name: c.kind for c in self._cols()}
        for name, value in seen["columns"].items():
            _column_add(acc["columns"][name], kinds[name], value)
        return acc

    def merge_accumulators(self, accs):
        accs = iter(accs)
        out = next(accs)
        kinds = {c.name: c.kind for c in self._cols()}
        for a in accs:
            out["records"] += a["records"]
            out["not_examples"] += a["not_examples"]
            for key, f in a["features"].items():
                g = out["features"].get(key)
                if g is None:
                    out["features"][key] = f
                    continue
                count_merge(g["types"], f["types"])
                g["present"] += f["present"]
                g["min_len"] = min(g["min_len"], f["min_len"])
                g["max_len"] = max(g["max_len"], f["max_len"])
                g["sum_len"] += f["sum_len"]
            for name, col in a["columns"].items():
                _column_merge(out["columns"][name], col, kinds[name])
        return out

    def extract_output(self, acc):
        return {
            "records": acc["records"],
            "not_examples": acc["not_examples"],
            "features": {
                key: {
                    "types": f["types"],
                    "present": f["present"],
                    "min_len": f["min_len"],
                    "max_len": f["max_len"],
                    "mean_len": f["sum_len"] / f["present"] if f["present"] else 0.0,
                }
                for key, f in sorted(acc["features"].items())
            },
            "columns": {name: _column_output(col) for name, col in sorted(acc["columns"].items())},
        }


def sample_key(relpath: str, offset: int) -> str:
    """The order samples are chosen in: a hash of where the record is, stable per version."""
    return hashlib.sha256(f"{relpath}:{offset}".encode()).hexdigest()


class ObserveBatch(beam.DoFn):
    """A batch of ``(path, offset, record)`` -> one partial accumulator per split
    ``(split, acc)`` and, to the ``samples`` output, the batch's ``n`` sample candidates
    per group ``((split, group), (sample key, relpath, offset, record))``.

    Folding a batch here (rather than sending every record on as an element) keeps
    Beam's per-element cost off the per-record path: the combiners then merge a few
    accumulators and a few candidates per batch.
    """

    SAMPLES = "samples"

    def __init__(self, shards: List[Shard], columns: List[ReportColumn], samples: int, by_label: bool):
        self._where = {s.path: (s.split, s.relpath) for s in shards}
        self._columns = [tuple(c) for c in columns]
        self._samples = samples
        self._by_label = by_label

    def setup(self):
        self._cols = [ReportColumn(*c) for c in self._columns]
        self._stats = SplitStatsFn(self._cols)
        self._label = label_column(self._cols) if self._by_label else None

    def process(self, batch):
        accs: Dict[str, Dict[str, Any]] = {}
        candidates: Dict[Tuple[str, Optional[int]], List[Tuple[str, str, int, bytes]]] = {}
        for path, offset, record in batch:
            split, relpath = self._where.get(path, ("all", path.rsplit("/", 1)[-1]))
            seen = observe_record(record, self._cols)
            acc = accs.get(split)
            if acc is None:
                acc = accs[split] = self._stats.create_accumulator()
            self._stats.add_input(acc, seen)
            group = None
            if self._label is not None:
                group = seen.get("columns", {}).get(self._label.name, {}).get("id")
            candidates.setdefault((split, group), []).append((sample_key(relpath, offset), relpath, offset, record))
        for split, acc in accs.items():
            yield split, acc
        for key, items in candidates.items():
            for key_hash, relpath, offset, record in heapq.nsmallest(self._samples, items, key=lambda t: t[0]):
                yield beam.pvalue.TaggedOutput(self.SAMPLES, (key, (key_hash, relpath, offset, bytes(record))))


class MergeStatsFn(SplitStatsFn):
    """``SplitStatsFn`` over partial accumulators (what :class:`ObserveBatch` emits)."""

    def add_input(self, acc, partial):
        return self.merge_accumulators([acc, partial])


# --------------------------------------------------------------------------- rejected rows


def reason_group(line: str, key_column: Optional[str]) -> Tuple[str, Dict[str, Any]]:
    """One dead-letter line -> (group key JSON, example). The reason's leading
    ``<path>: `` (which file failed) is cut for grouping, kept in the example."""
    try:
        entry = json.loads(line)
        row = entry.get("row") if isinstance(entry.get("row"), dict) else {}
        column, stage, reason = entry.get("column"), entry.get("stage"), str(entry.get("reason", ""))
    except (ValueError, AttributeError) as err:
        return json.dumps([None, None, f"unreadable dead-letter line ({err})"]), {"row": line[:200], "reason": ""}
    general = reason
    for value in sorted((v for v in row.values() if isinstance(v, str) and v), key=len, reverse=True):
        if general.startswith(value + ": "):
            general = general[len(value) + 2 :]
            break
    else:
        general = re.sub(r"^\S+/\S+: ", "", general)  # a path the row does not hold as is
    who = (
        row.get(key_column)
        if key_column and key_column in row
        else json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)
    )
    return json.dumps([column, stage, general]), {"row": str(who)[:200], "reason": reason}


class RejectedGroupFn(beam.CombineFn):
    """Count the rows of one reason; keep the first few (by their text) as examples."""

    def create_accumulator(self):
        return {"count": 0, "examples": []}

    def add_input(self, acc, example):
        acc["count"] += 1
        acc["examples"] = sorted(acc["examples"] + [example], key=lambda e: (e["row"], e["reason"]))[:REJECTED_EXAMPLES]
        return acc

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for a in accs:
            out["count"] += a["count"]
            out["examples"] = sorted(out["examples"] + a["examples"], key=lambda e: (e["row"], e["reason"]))[
                :REJECTED_EXAMPLES
            ]
        return out

    def extract_output(self, acc):
        return acc


# --------------------------------------------------------------------------- the job


class JobResult(NamedTuple):
    splits: Dict[str, Dict[str, Any]]  # split -> statistics
    samples: Dict[str, Dict[Optional[int], List[Tuple[str, int, bytes]]]]  # split -> group -> (relpath, offset, record)
    rejected: List[Dict[str, Any]]  # {column, stage, reason, count, examples}, most frequent first
    seconds: float


def _any_kv():
    return beam.typehints.KV[beam.typehints.Any, beam.typehints.Any]


def run_stats_job(
    shards: List[Shard],
    columns: List[ReportColumn],
    options,
    samples: int = 6,
    rejected_paths: Iterable[str] = (),
    key_column: Optional[str] = None,
    progress: bool = True,
) -> JobResult:
    """Run the statistics pipeline over ``shards`` (and the dead-letter files)."""
    import tfrecord_io

    rejected_paths = list(rejected_paths)
    by_label = groups_by_label(columns)
    with ProgressPrinter("report", enabled=progress, rate_stage="records") as bar:
        with ResultDir() as results:
            with beam.Pipeline(options=options) as p:
                tagged = []
                if shards:
                    observed = (
                        p
                        | "Shards" >> beam.Create(sorted({s.path for s in shards}))
                        | "Read" >> tfrecord_io.ReadAllFromTFRecord(with_metadata=True, batch_size=READ_BATCH)
                        | "Count" >> beam.ParDo(CountProgress(bar.dir, "records", weigh=len))
                        | "Observe"
                        >> beam.ParDo(ObserveBatch(shards, columns, samples, by_label))
                        .with_output_types(_any_kv())  # not Tuple[...]: see README, Prism and tuple coders
                        .with_outputs(ObserveBatch.SAMPLES, main="observed")
                    )
                    tagged.append(
                        observed.observed
                        | "SplitStats" >> beam.CombinePerKey(MergeStatsFn(columns))
                        | "TagStats" >> beam.MapTuple(lambda split, stats: {"split": split, "stats": stats})
                    )
                    tagged.append(
                        observed[ObserveBatch.SAMPLES]
                        | "Sample" >> beam.combiners.Top.SmallestPerKey(samples, key=lambda item: item[0])
                        | "TagSamples"
                        >> beam.MapTuple(
                            lambda key, items: {
                                "samples": list(key),
                                "items": [
                                    [rel, off, base64.b64encode(rec).decode("ascii")] for _, rel, off, rec in items
                                ],
                            }
                        )
                    )
                if rejected_paths:
                    tagged.append(
                        p
                        | "RejectedFiles" >> beam.Create(rejected_paths)
                        | "ReadRejected" >> beam.io.ReadAllFromText()
                        | "NonEmpty" >> beam.Filter(lambda line: line.strip())
                        | "Reason" >> beam.Map(reason_group, key_column).with_output_types(_any_kv())
                        | "PerReason" >> beam.CombinePerKey(RejectedGroupFn())
                        | "TagRejected" >> beam.MapTuple(lambda key, acc: {"rejected": json.loads(key), **acc})
                    )
                if tagged:
                    tagged | "All" >> beam.Flatten() | "Collect" >> results.sink()
            items = results.read()
    splits: Dict[str, Dict[str, Any]] = {}
    sampled: Dict[str, Dict[Optional[int], List[Tuple[str, int, bytes]]]] = {}
    rejected: List[Dict[str, Any]] = []
    for item in items:
        if "stats" in item:
            splits[item["split"]] = item["stats"]
        elif "samples" in item:
            split, group = item["samples"]
            sampled.setdefault(split, {})[group] = [
                (rel, off, base64.b64decode(rec)) for rel, off, rec in item["items"]
            ]
        else:
            column, stage, reason = item["rejected"]
            rejected.append(
                {
                    "column": column,
                    "stage": stage,
                    "reason": reason,
                    "count": item["count"],
                    "examples": item["examples"],
                }
            )
    rejected.sort(key=lambda r: (-r["count"], str(r["column"]), str(r["stage"]), r["reason"]))
    return JobResult(splits, sampled, rejected, bar.elapsed)
