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
from collections import Counter
from typing import Any, Dict, Iterable, List, Mapping, NamedTuple, Optional, Tuple

import apache_beam as beam
import numpy as np

from tfrecord_io.format.codec import BYTES, FLOAT, INT64, Example
from tfrecord_io.pipelines.runtime.collect import ResultDir
from tfrecord_io.pipelines.runtime.progress import CountProgress, ProgressPrinter

MAX_BINS = 40
#: Label columns with at most this many classes get a sample grid per label.
MAX_LABEL_GROUPS = 20
#: Distinct image sizes listed exactly; beyond this only width/height histograms.
MAX_IMAGE_SIZES = 50
#: Rejected rows kept (per reason) as examples.
REJECTED_EXAMPLES = 5
#: Records per element out of the read: folded into statistics in one DoFn call.
READ_BATCH = 1024

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
    """``tfrecord_io_info.json``'s ``encoders`` -> report columns (sequence encoders are not
    described by the report: the build writes Examples)."""
    out = []
    for name, cfg in sorted(encoders.items()):
        kind = KIND_OF_ENCODER.get(str(cfg.get("type", "")))
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
    """Columns of files without ``tfrecord_io_info.json``, from one record's keys: the key
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
        configs: Dict[str, Dict[str, Any]] = {
            "label": {"type": "Label", "key": key},
            "int": {"type": "Int", "key": key},
            "float": {"type": "Float", "key": key, "allow_nan": True},
            "text": {"type": "Text", "key": key, "normalize": None, "on_invalid": "keep"},
        }
        out.append(ReportColumn(key, kind, key, config=configs.get(kind)))
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


# --------------------------------------------------------------------------- a batch of records

# The single-value features each column kind reads (``_one``), by key suffix.
_SINGLE_KEYS = {
    "image": ("height", "width", "mode", "format", "encoded"),
    "audio": ("num_samples", "sample_rate", "channels"),
}


class _Columns:
    """A batch's features as the compiled parser gives them: per key, its values per
    record (numbers: one flat array + counts; bytes: (start, length) spans + counts)."""

    def __init__(self, records: List[bytes], kinds: Dict[str, str], cols: List[Any]):
        self.records = records
        self.kinds = kinds
        self._cols = dict(zip(kinds, cols))

    def counts(self, key: str) -> np.ndarray:
        return np.frombuffer(self._cols[key][1], dtype=np.int64)

    def numbers(self, key: str) -> np.ndarray:
        return np.frombuffer(self._cols[key][0], dtype=np.int64 if self.kinds[key] == INT64 else np.float32)

    def byte_lengths(self, key: str) -> np.ndarray:
        """The length of each value (flat, all records)."""
        return np.frombuffer(self._cols[key][0], dtype=np.int64).reshape(-1, 2)[:, 1]

    def first_bytes(self, key: str) -> List[bytes]:
        """The one value of each record (the caller checked every record has one)."""
        spans = np.frombuffer(self._cols[key][0], dtype=np.int64).reshape(-1, 2).tolist()
        return [bytes(r[a : a + n]) for r, (a, n) in zip(self.records, spans)]


def _per_record_sums(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Sum of each record's values (``counts`` of them per record, possibly 0)."""
    ends = np.cumsum(counts)
    totals = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return totals[ends] - totals[ends - counts]


def _columns_fast(records: List[bytes], columns: List[ReportColumn]) -> Optional[Tuple[Dict[str, str], _Columns]]:
    """``(wire kind per key, parsed batch)`` of a batch whose records share their keys
    and types (``tfrecord_io.format.codec.uniform_features``) and have one value in every
    single-value feature a column reads; None for any other batch (the caller then
    observes record by record)."""
    from tfrecord_io.format.codec import uniform_features

    uniform = uniform_features(records)
    if uniform is None:
        return None
    wanted, cols = uniform
    wire = dict(wanted)
    parsed = _Columns(records, wire, cols)
    for c in columns:
        single = [f"{c.prefix}/{t}" for t in _SINGLE_KEYS.get(c.kind, ())]
        if c.kind in ("text", "label"):
            single.append(c.prefix)
        for key in single:
            if key in wire and not np.all(parsed.counts(key) == 1):
                return None
    return wire, parsed


def _utf8_lengths(values: List[bytes]) -> Optional[np.ndarray]:
    """Characters in each value when every value is valid UTF-8, else None.

    One decode of all of them joined: when no value starts with a continuation byte,
    a value that is not valid UTF-8 on its own cannot become valid next to another
    (a cut sequence at its end meets a byte that does not continue it), so the joined
    text decodes exactly when every value does. Characters are then bytes that are
    not continuation bytes (``0b10xxxxxx``)."""
    if any(v[:1] and 0x80 <= v[0] < 0xC0 for v in values):
        return None
    joined = b"".join(values)
    try:
        joined.decode("utf-8")
    except UnicodeDecodeError:
        return None
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    starts = np.frombuffer(joined, dtype=np.uint8) & 0xC0 != 0x80
    totals = np.concatenate([[0], np.cumsum(starts, dtype=np.int64)])
    ends = np.cumsum(lengths)
    return totals[ends] - totals[ends - lengths]


def _observe_columns(
    acc: Dict[str, Any], columns: List[ReportColumn], wire: Dict[str, str], parsed: _Columns
) -> Dict[str, Any]:
    """Fold a uniform batch's columns into ``acc`` (a ``SplitStatsFn`` accumulator);
    what ``observe_record`` + ``_column_add`` do per record. Returns label ids per
    record (or None) for the samples."""
    n = len(parsed.records)
    label_ids = {}
    for c in columns:
        p, col = c.prefix, acc["columns"][c.name]
        if c.kind == "image":
            keys = {t: f"{p}/{t}" for t in _SINGLE_KEYS["image"]}
            if keys["height"] not in wire or keys["width"] not in wire:
                continue
            heights, widths = parsed.numbers(keys["height"]), parsed.numbers(keys["width"])
            col["present"] += n
            hist_add(col["width"], widths)
            hist_add(col["height"], heights)
            if wire.get(keys["encoded"]) == BYTES:
                sizes = parsed.byte_lengths(keys["encoded"])
            else:
                sizes = np.zeros(n, dtype=np.int64)
            hist_add(col["bytes"], sizes)
            if col["sizes"]["counts"] is not None:
                pairs, counts = np.unique(np.stack([widths, heights], axis=1), axis=0, return_counts=True)
                for (w, h), k in zip(pairs.tolist(), counts.tolist()):
                    count_add(col["sizes"]["counts"], f"{w}x{h}", k)
                if len(col["sizes"]["counts"]) > MAX_IMAGE_SIZES:
                    col["sizes"]["counts"] = None
            for name, target in (("mode", col["modes"]), ("format", col["formats"])):
                values = parsed.first_bytes(keys[name]) if wire.get(keys[name]) == BYTES else [None] * n
                for value, k in Counter(_text(v) for v in values).items():
                    count_add(target, value, k)
        elif c.kind == "audio":
            keys = {t: f"{p}/{t}" for t in _SINGLE_KEYS["audio"]}
            if keys["num_samples"] not in wire or keys["sample_rate"] not in wire:
                continue
            samples, rates = parsed.numbers(keys["num_samples"]), parsed.numbers(keys["sample_rate"])
            keep = rates != 0
            col["present"] += int(keep.sum())
            hist_add(col["seconds"], samples[keep] / rates[keep])
            values, counts = np.unique(rates[keep], return_counts=True)
            for value, k in zip(values.tolist(), counts.tolist()):
                count_add(col["rates"], value, k)
            if keys["channels"] in wire:
                channels = parsed.numbers(keys["channels"])[keep].tolist()
            else:
                channels = [None] * int(keep.sum())
            for value, k in Counter(channels).items():
                count_add(col["channels"], value, k)
        elif c.kind == "text":
            if p not in wire:
                continue
            col["present"] += n
            values = parsed.first_bytes(p)
            chars = _utf8_lengths(values)
            if chars is not None:
                hist_add(col["chars"], chars)
                continue
            for raw in values:
                try:
                    _hist_add_one(col["chars"], float(len(raw.decode("utf-8"))))
                except UnicodeDecodeError:
                    col["invalid"] += 1
        elif c.kind == "label":
            if p not in wire:
                continue
            ids = parsed.numbers(p).astype(np.int64)
            col["present"] += n
            values, counts = np.unique(ids, return_counts=True)
            for value, k in zip(values.tolist(), counts.tolist()):
                count_add(col["ids"], value, k)
            label_ids[c.name] = ids
        elif c.kind in ("int", "float", "array", "bytes"):
            if p not in wire:
                continue
            col["present"] += n
            counts = parsed.counts(p)
            if wire[p] == BYTES:
                sums = _per_record_sums(parsed.byte_lengths(p), counts)
                # a numeric column's record with no values counts as numbers (none), not 0 bytes
                hist_add(col["bytes"], sums if c.kind == "bytes" else sums[counts > 0])
            elif c.kind == "bytes":
                continue  # numbers in a bytes column: observe_record ignores them as well
            else:
                hist_add(col["values"], parsed.numbers(p))
    return label_ids


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
        return [ReportColumn._make(c) for c in self._columns]

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
    """A batch ``(path, [offsets], [records])`` of one file -> one partial accumulator per split
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
        if batch[2]:
            fast = _columns_fast(batch[2], self._cols)
            if fast is not None:
                yield from self._fast(batch, *fast)
                return
        yield from self._each(batch)

    def _fast(self, batch, wire: Dict[str, str], parsed: _Columns):
        """A uniform batch (one file's records, the same keys and types): statistics
        from the compiled parser's columns, in a few NumPy calls per column."""
        path, offsets, records = batch
        split, relpath = self._where.get(path, ("all", path.rsplit("/", 1)[-1]))
        n = len(records)
        acc = self._stats.create_accumulator()
        acc["records"] = n
        for key, kind in wire.items():
            lengths = parsed.counts(key)
            acc["features"][key] = {
                "types": {TYPE_NAMES[kind]: n},
                "present": n,
                "min_len": int(lengths.min()),
                "max_len": int(lengths.max()),
                "sum_len": int(lengths.sum()),
            }
        label_ids = _observe_columns(acc, self._cols, wire, parsed)
        yield split, acc
        keys = [sample_key(relpath, offset) for offset in offsets]
        ids = label_ids.get(self._label.name) if self._label is not None else None
        groups: Dict[Optional[int], List[int]] = {}
        if ids is None:
            groups[None] = list(range(n))
        else:
            for i, group in enumerate(ids.tolist()):
                groups.setdefault(group, []).append(i)
        for group, members in groups.items():
            for i in heapq.nsmallest(self._samples, members, key=keys.__getitem__):
                item = (keys[i], relpath, offsets[i], bytes(records[i]))
                yield beam.pvalue.TaggedOutput(self.SAMPLES, ((split, group), item))

    def _each(self, batch):
        """Any other batch: each record observed on its own (``observe_record``)."""
        accs: Dict[str, Dict[str, Any]] = {}
        candidates: Dict[Tuple[str, Optional[int]], List[Tuple[str, str, int, bytes]]] = {}
        path, offsets, records = batch
        split, relpath = self._where.get(path, ("all", path.rsplit("/", 1)[-1]))
        for offset, record in zip(offsets, records):
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


def _batch_length(batch) -> int:
    return len(batch[2])


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
    output: Optional[str] = None,
    workers=None,
) -> JobResult:
    """Run the statistics pipeline over ``shards`` (and the dead-letter files). Its
    results come back through ``--temp_location`` or beside ``output`` (the page) when
    the workers may not share this machine's disk (``runtime.collect``)."""
    from tfrecord_io.beam.beam_source import ReadAllRecordBatches

    rejected_paths = list(rejected_paths)
    by_label = groups_by_label(columns)
    results = ResultDir.for_job(options, "report", output)  # before the job runs: a usage error if none
    with ProgressPrinter("report", enabled=progress, rate_stage="records", options=options, output=output) as bar:
        with results:
            runner, run_options = workers.pipeline_runner(options) if workers is not None else (None, options)
            with beam.Pipeline(runner=runner, options=run_options) as p:
                tagged = []
                if shards:
                    observed = (
                        p
                        | "Shards" >> beam.Create(sorted({s.path for s in shards}))
                        | "Read" >> ReadAllRecordBatches(batch_size=READ_BATCH)
                        | "Count" >> beam.ParDo(CountProgress(bar.dir, "records", weigh=_batch_length))
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
