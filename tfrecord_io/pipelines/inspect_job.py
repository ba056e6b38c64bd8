"""``tfrecord-io inspect``: what is in these TFRecord files?

Records per file, every feature's type, how many records have it and its value-length
range, an inferred feature spec (types, and shapes where every record has the same
length), and the first records shown readably: images as format and size, long byte
strings elided, text shown as text. Counting and statistics run as a Beam pipeline
over the splitting read, in batches of records (one element per batch, summed from one
call of the compiled parser when the batch's records share their keys); the first
records are read directly.
"""

from __future__ import annotations

import io
import json
from typing import Any, Dict, List, Tuple

import apache_beam as beam
import numpy as np

from tfrecord_io.format.codec import BYTES, FLOAT, INT64, Example, uniform_features
from tfrecord_io.pipelines.runtime.collect import ResultDir
from tfrecord_io.pipelines.runtime.inputs import no_input_error, resolve_inputs
from tfrecord_io.pipelines.runtime.progress import CountProgress, ProgressPrinter

TYPE_NAMES = {BYTES: "byte", FLOAT: "float", INT64: "int", None: "empty"}
#: Records per element out of the read: their statistics are summed in one call.
READ_BATCH = 1024


def record_stats(path: str, data: bytes) -> Dict[str, Any]:
    """One record -> ``{path, features: {key: (type, length)}}`` (or a parse error)."""
    example = Example()
    try:
        example.ParseFromString(data)
    except Exception as err:  # noqa: BLE001 - not an Example: count it, do not fail the job
        return {"path": path, "error": f"not a tf.train.Example: {err}"}
    feats = {}
    for key, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        length = len(getattr(feature, kind).value) if kind else 0
        feats[key] = (TYPE_NAMES[kind], length)
    return {"path": path, "features": feats}


def feature_lengths(wanted: List[Tuple[str, str]], cols: List[Any]) -> Dict[str, Any]:
    """Values per record of each key (int64 arrays), from :func:`uniform_features`."""
    return {key: np.frombuffer(col[1], dtype=np.int64) for (key, _), col in zip(wanted, cols)}


class StatsFn(beam.CombineFn):
    """Merge per-record stats into per-file counts and per-feature statistics."""

    def create_accumulator(self):
        return {"files": {}, "features": {}, "errors": 0, "records": 0}

    def add_input(self, acc, item):
        acc["records"] += 1
        acc["files"][item["path"]] = acc["files"].get(item["path"], 0) + 1
        if "error" in item:
            acc["errors"] += 1
            return acc
        for key, (kind, length) in item["features"].items():
            f = acc["features"].setdefault(
                key, {"types": {}, "count": 0, "min_len": length, "max_len": length, "sum_len": 0}
            )
            f["types"][kind] = f["types"].get(kind, 0) + 1
            f["count"] += 1
            f["min_len"] = min(f["min_len"], length)
            f["max_len"] = max(f["max_len"], length)
            f["sum_len"] += length
        return acc

    def merge_accumulators(self, accs):
        out = self.create_accumulator()
        for a in accs:
            out["records"] += a["records"]
            out["errors"] += a["errors"]
            for p, n in a["files"].items():
                out["files"][p] = out["files"].get(p, 0) + n
            for key, f in a["features"].items():
                g = out["features"].get(key)
                if g is None:
                    out["features"][key] = {**f, "types": dict(f["types"])}
                    continue
                for t, n in f["types"].items():
                    g["types"][t] = g["types"].get(t, 0) + n
                g["count"] += f["count"]
                g["min_len"] = min(g["min_len"], f["min_len"])
                g["max_len"] = max(g["max_len"], f["max_len"])
                g["sum_len"] += f["sum_len"]
        return out

    def extract_output(self, acc):
        return acc


def batch_stats(batch: Tuple[str, List[int], List[bytes]]) -> Dict[str, Any]:
    """A batch ``(path, [offsets], [records])`` of one file -> a partial ``StatsFn``
    accumulator. A batch of records with the same keys and types (the usual case) is
    summed from the compiled parser's value counts; any other batch record by record."""
    path, _, records = batch
    stats = StatsFn()
    acc = stats.create_accumulator()
    uniform = uniform_features(records)
    if uniform is None:
        for data in records:
            stats.add_input(acc, record_stats(path, data))
        return acc
    n = len(records)
    acc["records"] = n
    acc["files"][path] = n
    wanted, cols = uniform
    kinds = dict(wanted)
    for key, lengths in feature_lengths(wanted, cols).items():
        acc["features"][key] = {
            "types": {TYPE_NAMES[kinds[key]]: n},
            "count": n,
            "min_len": int(lengths.min()),
            "max_len": int(lengths.max()),
            "sum_len": int(lengths.sum()),
        }
    return acc


class MergeStatsFn(StatsFn):
    """``StatsFn`` over partial accumulators (what :func:`batch_stats` gives)."""

    def add_input(self, acc, partial):
        return self.merge_accumulators([acc, partial])


def inferred_spec(stats: Dict[str, Any]) -> Dict[str, Any]:
    """``{key: {"type", "shape", "required"}}`` from the statistics."""
    spec = {}
    for key, f in sorted(stats["features"].items()):
        kinds = [t for t in f["types"] if t != "empty"]
        kind = kinds[0] if len(kinds) == 1 else ("mixed: " + "/".join(sorted(kinds)) if kinds else "float")
        fixed = f["min_len"] == f["max_len"]
        spec[key] = {
            "type": kind,
            "shape": ([] if f["max_len"] == 1 else [f["max_len"]]) if fixed else None,
            "required": f["count"] == stats["records"],
        }
    return spec


def _describe_bytes(value: bytes) -> str:
    head = bytes(value[:12])
    fmt = None
    if head.startswith(b"\x89PNG"):
        fmt = "PNG"
    elif head.startswith(b"\xff\xd8\xff"):
        fmt = "JPEG"
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        fmt = "WEBP"
    elif head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return f"<WAV audio, {len(value):,} bytes>"
    elif head.startswith(b"fLaC"):
        return f"<FLAC audio, {len(value):,} bytes>"
    elif head.startswith((b"GIF87a", b"GIF89a")):
        fmt = "GIF"
    if fmt:
        try:
            from PIL import Image

            with Image.open(io.BytesIO(bytes(value))) as img:
                return f"<{fmt} image {img.width}x{img.height} {img.mode}, {len(value):,} bytes>"
        except Exception:  # noqa: BLE001 - a broken image is still described
            return f"<{fmt} image (unreadable), {len(value):,} bytes>"
    try:
        text = bytes(value).decode("utf-8")
        if text.isprintable():
            return repr(text if len(text) <= 80 else text[:77] + "...")
    except UnicodeDecodeError:
        pass
    shown = bytes(value[:24]).hex(" ")
    return f"<{len(value):,} bytes: {shown}{' ...' if len(value) > 24 else ''}>"


def show_value(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return _describe_bytes(bytes(value))
    if isinstance(value, np.ndarray):
        if value.dtype == object:
            return "[" + ", ".join(_describe_bytes(v) for v in value[:4]) + (", ..." if len(value) > 4 else "") + "]"
        if value.size > 8:
            return f"{value.dtype}[{value.size}] {np.array2string(value[:8], precision=4)[:-1]} ...]"
        return np.array2string(value, precision=4)
    return repr(value)


def head_records(paths: List[str], n: int) -> List[Dict[str, Any]]:
    """The first ``n`` records (from the first files), decoded and shown readably."""
    from tfrecord_io.format.codec import parse_example
    from tfrecord_io.format.reader import tfrecord_iterator

    out: List[Dict[str, Any]] = []
    for path in paths:
        for data in tfrecord_iterator(path):
            if len(out) >= n:
                return out
            try:
                parsed = parse_example(data)
                out.append({"path": path, "features": {k: show_value(v) for k, v in parsed.items()}})
            except Exception as err:  # noqa: BLE001 - a record that does not parse is shown, not fatal
                out.append({"path": path, "error": str(err)})
        if len(out) >= n:
            break
    return out


def _batch_length(batch) -> int:
    return len(batch[2])


def run_inspect(paths: List[str], options, head: int = 3, progress: bool = True, workers=None) -> Dict[str, Any]:
    from tfrecord_io.beam.beam_source import ReadAllRecordBatches
    from tfrecord_io.dataset import dataset_writer

    dataset_writer.use_filesystems(options, paths)
    files_ = resolve_inputs(paths)
    if not files_:
        raise no_input_error(paths)
    results = ResultDir.for_job(options, "inspect")  # before anything runs: a usage error if there is none
    with ProgressPrinter("inspect", enabled=progress, rate_stage="records", options=options) as bar, results:
        runner, run_options = workers.pipeline_runner(options) if workers is not None else (None, options)
        with beam.Pipeline(runner=runner, options=run_options) as p:
            (
                p
                | "Files" >> beam.Create(files_)
                | "Read" >> ReadAllRecordBatches(batch_size=READ_BATCH)
                | "Count" >> beam.ParDo(CountProgress(bar.dir, "records", weigh=_batch_length))
                | "Stats" >> beam.Map(batch_stats)
                | "Combine" >> beam.CombineGlobally(MergeStatsFn())
                | "Collect" >> results.sink()
            )
        stats = results.read()[0]
    return {
        "files": {p: stats["files"].get(p, 0) for p in files_},
        "records": stats["records"],
        "not_examples": stats["errors"],
        "features": {
            k: {
                "types": f["types"],
                "present_in": f["count"],
                "min_len": f["min_len"],
                "max_len": f["max_len"],
                "mean_len": round(f["sum_len"] / f["count"], 3) if f["count"] else 0,
            }
            for k, f in sorted(stats["features"].items())
        },
        "inferred_spec": inferred_spec(stats),
        "head": head_records(files_, head),
        "seconds": round(bar.elapsed, 3),
    }


def summary_lines(result: Dict[str, Any]) -> List[str]:
    lines = [
        f"{len(result['files'])} files, {result['records']:,} records"
        + (f" ({result['not_examples']} not Examples)" if result["not_examples"] else "")
    ]
    for path, n in result["files"].items():
        lines.append(f"  {n:>10,}  {path}")
    lines.append("features:")
    lines.append(f"  {'key':<28} {'type':<8} {'present':>9} {'values/record (min..max, mean)':>32}")
    for key, f in result["features"].items():
        spec = result["inferred_spec"][key]
        lines.append(
            f"  {key:<28} {spec['type']:<8} {f['present_in']:>9,} "
            f"{f['min_len']:>14}..{f['max_len']:<6} {f['mean_len']:>9}"
        )
    lines.append("inferred spec: " + json.dumps({k: v["type"] for k, v in result["inferred_spec"].items()}))
    for i, rec in enumerate(result["head"]):
        lines.append(f"record {i} ({rec['path']}):")
        if "error" in rec:
            lines.append(f"  error: {rec['error']}")
            continue
        for key, shown in rec["features"].items():
            lines.append(f"  {key}: {shown}")
    return lines
