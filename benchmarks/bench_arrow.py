"""Examples -> Arrow: ours against our own batch parser, tfx-bsl's decoder and Ray Data's
``read_tfrecords``, all measured in one run on the same files.

Cases (each prints records/s and the ratios the issue states its targets in):

- in memory, the same serialised records in batches of 1024:
  ``parse_examples_batch`` (NumPy columns) vs ``arrow.records_to_batch`` (Arrow columns)
  vs tfx-bsl's ``ExamplesToRecordBatchDecoder`` (in its own venv: ``--tfx-python``);
- file -> table: ``tfrecord_io.to_arrow`` (CRCs checked) vs the file read +
  ``parse_examples_batch`` vs Ray Data's ``read_tfrecords(...).materialize()`` (its own
  venv: ``--ray-python``; Ray runs its reads in worker processes, so it is timed in wall
  seconds, ours in both).

Two datasets: SMALL (label, 8 floats, ~40 B of text: ~120 B records) and MEDIA (16,000
records of a ~10 KB byte string + label, the shape of an image dataset). Timings are
medians of ``--repeat`` rounds; the cases take turns within a round so a change of load
on a shared machine hits them alike. Nothing here is asserted.

    python benchmarks/bench_arrow.py                      # ours only
    python benchmarks/bench_arrow.py --tfx-python /work/venvs/tfxbsl/bin/python \\
        --ray-python /work/venvs/ray/bin/python --cpu-time
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Callable, Dict, List

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfrecord_io import arrow
from tfrecord_io.format import codec, reader, writer

BATCH = 1024
SMALL_DESC = {"label": "int", "floats": "float", "text": "byte"}
MEDIA_DESC = {"image": "byte", "label": "int"}


def make_small(n: int, seed: int = 0) -> List[bytes]:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 1000, n).tolist()
    floats = rng.random((n, 8), dtype=np.float32).tolist()
    words = [b"lorem", b"ipsum", b"dolor", b"amet", b"tfrecord", b"beam", b"split"]
    return [
        codec.serialize_example(
            {
                "label": (labels[i], "int"),
                "floats": (floats[i], "float"),
                "text": (b" ".join(words[(i + k) % 7] for k in range(7))[:40], "byte"),
            }
        )
        for i in range(n)
    ]


def make_media(n: int, size: int, seed: int = 1) -> List[bytes]:
    rng = np.random.default_rng(seed)
    blob = rng.bytes(size + 4096)
    return [
        codec.serialize_example({"image": (blob[i % 4096 : i % 4096 + size], "byte"), "label": (i % 10, "int")})
        for i in range(n)
    ]


def write(path: str, records: List[bytes]) -> str:
    with writer.RecordWriter(path) as w:
        w.write_records(records)
    return path


def rounds(cases: Dict[str, Callable[[], int]], repeat: int, clock) -> Dict[str, float]:
    times: Dict[str, List[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            gc.collect()
            t0 = clock()
            fn()
            times[name].append(clock() - t0)
    return {name: statistics.median(v) for name, v in times.items()}


def ours_in_memory(records: List[bytes], desc: Dict[str, str]) -> Dict[str, Callable[[], int]]:
    schema = arrow.schema_from_features(desc)

    def numpy_batches() -> int:
        for i in range(0, len(records), BATCH):
            codec.parse_examples_batch(records[i : i + BATCH], desc)
        return len(records)

    def arrow_batches() -> int:
        for i in range(0, len(records), BATCH):
            arrow.records_to_batch(records[i : i + BATCH], schema)
        return len(records)

    return {"parse_examples_batch": numpy_batches, "arrow.records_to_batch": arrow_batches}


def ours_from_file(path: str, desc: Dict[str, str]) -> Dict[str, Callable[[], int]]:
    """File -> columns, each result dropped at once (a stream) or all kept (a table:
    then every byte lands in fresh memory, whose page faults cost as much as the parse)."""

    def numpy_file(keep: bool) -> int:
        kept, n = [], 0
        batch: List[memoryview] = []
        for rec in reader.tfrecord_iterator(path):
            batch.append(rec)
            if len(batch) == BATCH:
                out = codec.parse_examples_batch(batch, desc)
                if keep:
                    kept.append(out)
                n += len(batch)
                batch = []
        if batch:
            kept.append(codec.parse_examples_batch(batch, desc))
            n += len(batch)
        return n

    def arrow_stream() -> int:
        return sum(b.num_rows for b in arrow.to_arrow_batches(path, desc))

    return {
        "file: read + parse_examples_batch (stream)": lambda: numpy_file(False),
        "file: tfrecord_io.to_arrow_batches (stream)": arrow_stream,
        "file: read + parse_examples_batch (all kept)": lambda: numpy_file(True),
        "file: tfrecord_io.to_arrow (table)": lambda: arrow.to_arrow(path, desc).num_rows,
    }


def beam_reads(path: str, desc: Dict[str, str]) -> Dict[str, Callable[[], int]]:
    """Beam (DirectRunner, in process) reading the file: records in lists of 1024 (bytes)
    against RecordBatches of 1024 (arrow): what the Arrow step costs inside Beam."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.beam.beam_io import ReadFromTFRecord

    flags = ["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory"]

    def run(output: str) -> int:
        with beam.Pipeline(options=PipelineOptions(flags)) as p:
            kwargs = {"description": arrow.schema_from_features(desc)} if output == "arrow" else {}
            _ = p | ReadFromTFRecord(path, output=output, batch_size=BATCH, **kwargs) | beam.Map(len)
        return 0

    return {
        "Beam ReadFromTFRecord bytes, batch_size=1024": lambda: run("bytes"),
        "Beam ReadFromTFRecord output='arrow'": lambda: run("arrow"),
    }


TFX_PEER = textwrap.dedent(
    """
    import json, os, statistics, sys, time, gc
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from tfx_bsl.coders import example_coder
    import tfx_bsl
    paths, batch, repeat, clock = sys.argv[1].split(","), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    clock = time.process_time if clock == "cpu" else time.perf_counter
    def frames(path):  # the records of a TFRecord file, untimed (no TensorFlow read)
        out, data, pos = [], open(path, "rb").read(), 0
        while pos < len(data):
            n = int.from_bytes(data[pos:pos + 8], "little")
            out.append(data[pos + 12:pos + 12 + n])
            pos += n + 16
        return out
    result = {"version": tfx_bsl.__version__}
    for path in paths:
        records = frames(path)
        decoder = example_coder.ExamplesToRecordBatchDecoder()
        decoder.DecodeBatch(records[:batch])  # warm-up
        times = []
        for _ in range(repeat):
            gc.collect()
            t0 = clock()
            for i in range(0, len(records), batch):
                decoder.DecodeBatch(records[i:i + batch])
            times.append(clock() - t0)
        result[path] = [statistics.median(times), len(records)]
    print(json.dumps(result))
    """
)

RAY_PEER = textwrap.dedent(
    """
    import json, os, statistics, sys, time, logging
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("RAY_DATA_DISABLE_PROGRESS_BARS", "1")
    import ray
    warm, paths, repeat = sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    result = {"version": ray.__version__}
    ray.data.read_tfrecords(warm).materialize()  # warm-up on a small file: workers started, TensorFlow imported
    for path in paths:
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            n = ray.data.read_tfrecords(path).materialize().count()
            times.append(time.perf_counter() - t0)
        result[path] = [statistics.median(times), n]
    print(json.dumps(result))
    """
)


def run_peer(python: str, code: str, *args: str) -> Dict:
    proc = subprocess.run([python, "-c", code, *args], capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        print(f"  peer failed ({python}):\n{proc.stderr[-2000:]}", file=sys.stderr)
        return {}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=50_000, help="records in the SMALL file")
    ap.add_argument("--media", type=int, default=16_000, help="records in the MEDIA file")
    ap.add_argument("--media-bytes", type=int, default=10_000, help="bytes of each MEDIA record's image")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--cpu-time", action="store_true", help="time our cases and tfx-bsl in CPU seconds")
    ap.add_argument("--tfx-python", help="python of a venv with tfx-bsl")
    ap.add_argument("--ray-python", help="python of a venv with ray[data] and tensorflow")
    ap.add_argument("--ray-repeat", type=int, default=1, help="Ray reads per file (each takes minutes)")
    ap.add_argument("--beam", action="store_true", help="also time Beam reads of the MEDIA file (wall seconds)")
    args = ap.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    unit = "CPU s" if args.cpu_time else "wall s"
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; ours timed in {unit}")
    with tempfile.TemporaryDirectory() as tmp:
        data = {
            "SMALL": (make_small(args.small), SMALL_DESC),
            "MEDIA": (make_media(args.media, args.media_bytes), MEDIA_DESC),
        }
        paths = {name: write(os.path.join(tmp, f"{name.lower()}.tfrecord"), recs) for name, (recs, _) in data.items()}
        tfx = (
            run_peer(
                args.tfx_python,
                TFX_PEER,
                ",".join(paths.values()),
                str(BATCH),
                str(args.repeat),
                "cpu" if args.cpu_time else "wall",
            )
            if args.tfx_python
            else {}
        )
        warm = write(os.path.join(tmp, "warm.tfrecord"), make_small(1000))
        ray_res = (
            run_peer(args.ray_python, RAY_PEER, warm, ",".join(paths.values()), str(args.ray_repeat))
            if args.ray_python
            else {}
        )
        for name, (records, desc) in data.items():
            mb = sum(map(len, records)) / 1e6
            print(f"\n{name}: {len(records):,} records, {mb:,.1f} MB of Examples")
            t = rounds(ours_in_memory(records, desc), args.repeat, clock)
            t.update(rounds(ours_from_file(paths[name], desc), args.repeat, clock))
            wall = rounds(ours_from_file(paths[name], desc), max(1, args.repeat // 2), time.perf_counter)
            if paths[name] in tfx:
                t[f"tfx-bsl {tfx['version']} ExamplesToRecordBatchDecoder"] = tfx[paths[name]][0]
            for case, sec in t.items():
                print(f"  {case:<52} {len(records) / sec:>12,.0f} rec/s  ({sec:.3f} {unit})")
            if args.beam and name == "MEDIA":
                for case, sec in rounds(
                    beam_reads(paths[name], desc), max(1, args.repeat // 2), time.perf_counter
                ).items():
                    print(f"  {case:<52} {len(records) / sec:>12,.0f} rec/s  ({sec:.3f} wall s)")
            if paths[name] in ray_res:
                sec = ray_res[paths[name]][0]
                case = f"Ray {ray_res['version']} read_tfrecords().materialize()"
                print(f"  {case:<52} {len(records) / sec:>12,.0f} rec/s  ({sec:.3f} wall s)")
            ratios = {
                "records_to_batch / parse_examples_batch (in memory)": t["parse_examples_batch"]
                / t["arrow.records_to_batch"],
                "to_arrow_batches / read + parse_examples_batch (stream)": t[
                    "file: read + parse_examples_batch (stream)"
                ]
                / t["file: tfrecord_io.to_arrow_batches (stream)"],
                "to_arrow / read + parse_examples_batch (all kept)": t["file: read + parse_examples_batch (all kept)"]
                / t["file: tfrecord_io.to_arrow (table)"],
            }
            tfx_key = next((k for k in t if k.startswith("tfx-bsl")), None)
            if tfx_key:
                ratios["records_to_batch / tfx-bsl decoder (in memory)"] = t[tfx_key] / t["arrow.records_to_batch"]
            if paths[name] in ray_res:
                ours_wall = wall["file: tfrecord_io.to_arrow (table)"]
                ratios["to_arrow / Ray read_tfrecords (file, wall)"] = ray_res[paths[name]][0] / ours_wall
            for label, ratio in ratios.items():
                print(f"  ratio {label:<58} {ratio:.2f}x")
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
