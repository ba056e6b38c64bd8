"""Benchmark: tfrecord_io's Beam IO against Beam's built-in TFRecord IO, in one run.

Not a test: it prints a table of records/s and ratios to the built-in measured in the
same run on the same files, so machine load cancels out as far as it can.

Cases (issue 3):
- ``ReadFromTFRecord | Count`` on one uncompressed file of small Examples and one of
  large records: built-in vs ours vs ours batched, on 1 and 2 workers
  (DirectRunner -> FnApiRunner ``multi_processing``).
- ``read | WriteToTFRecord(num_shards=4)``: built-in read + built-in sink vs ours.

Usage::

    python benchmarks/bench_beam_io.py               # ~100 MB per file
    python benchmarks/bench_beam_io.py --size 500    # the issue's ~500 MB
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Callable, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import apache_beam as beam  # noqa: E402
import numpy as np  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

import tfrecord_io as tfio  # noqa: E402
from tfrecord_io.beam.beam_io import ReadFromTFRecord, WriteToTFRecord  # noqa: E402


def options(workers: int) -> PipelineOptions:
    return PipelineOptions(["--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"])


def make_small(path: str, target_bytes: int) -> int:
    """Small Examples (~100 bytes): a label, three floats and a short name."""
    rng = np.random.default_rng(0)
    n = 0
    written = 0
    with tfio.RecordWriter(path, index_path=path + ".index") as w:
        while written < target_bytes:
            batch = [
                tfio.serialize_example(
                    {
                        "label": (int(i), "int"),
                        "scores": (rng.random(3).tolist(), "float"),
                        "name": (f"item-{n + i:09d}-{'x' * int(i % 40)}", "byte"),
                    }
                )
                for i in range(10_000)
            ]
            w.write_records(batch)
            written += sum(len(b) + 16 for b in batch)
            n += len(batch)
    return n


def make_large(path: str, target_bytes: int, record_bytes: int = 1 << 20) -> int:
    rng = np.random.default_rng(1)
    block = rng.integers(0, 256, size=record_bytes + 4096, dtype=np.uint8).tobytes()
    n = 0
    with tfio.RecordWriter(path, index_path=path + ".index") as w:
        while n * (record_bytes + 16) < target_bytes:
            start = n % 4096
            w.write_record(block[start : start + record_bytes])
            n += 1
    return n


def startup_seconds(workers: int) -> float:
    """Wall time of a trivial pipeline: the runner's fixed cost, printed for reference."""
    return timed(lambda p: p | beam.Create([1]) | beam.Map(lambda x: x), workers)


def timed(build: Callable[[beam.Pipeline], None], workers: int) -> float:
    p = beam.Pipeline("DirectRunner", options=options(workers))
    build(p)
    t0 = time.perf_counter()
    p.run().wait_until_finish()
    return time.perf_counter() - t0


class _Check(beam.DoFn):
    """Fail the run if the count is wrong: a fast wrong reader must not win."""

    def __init__(self, expected: int):
        self._expected = expected

    def process(self, n):
        if n != self._expected:
            raise AssertionError(f"counted {n} records, expected {self._expected}")


def read_case(path: str, n: int, impl: str, workers: int, bundle: int) -> float:
    def build(p):
        if impl == "builtin":
            recs = p | beam.io.ReadFromTFRecord(path)
            count = recs | beam.combiners.Count.Globally()
        elif impl == "ours":
            recs = p | ReadFromTFRecord(path, desired_bundle_size=bundle)
            count = recs | beam.combiners.Count.Globally()
        else:  # batched
            recs = p | ReadFromTFRecord(path, desired_bundle_size=bundle, batch_size=1000)
            count = recs | beam.Map(len) | beam.CombineGlobally(sum)
        count | beam.ParDo(_Check(n))

    return timed(build, workers)


def write_case(path: str, n: int, impl: str, workers: int, out_dir: str, bundle: int) -> float:
    prefix = os.path.join(out_dir, impl, "shard")
    os.makedirs(os.path.dirname(prefix), exist_ok=True)

    def build(p):
        if impl == "builtin":
            p | beam.io.ReadFromTFRecord(path) | beam.io.WriteToTFRecord(prefix, num_shards=4)
        else:
            p | ReadFromTFRecord(path, desired_bundle_size=bundle) | WriteToTFRecord(prefix, num_shards=4)

    seconds = timed(build, workers)
    got = sum(
        1
        for f in os.listdir(os.path.dirname(prefix))
        if not f.endswith(".index")
        for _ in tfio.tfrecord_iterator(os.path.join(os.path.dirname(prefix), f))
    )
    if got != n:
        raise AssertionError(f"{impl} wrote {got} records, expected {n}")
    shutil.rmtree(os.path.dirname(prefix))
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=100, help="MB per data file (default 100)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--bundle-mb", type=int, default=16, help="our desired_bundle_size in MB")
    ap.add_argument("--skip-small", action="store_true")
    ap.add_argument("--skip-large", action="store_true")
    ap.add_argument("--skip-write", action="store_true")
    args = ap.parse_args()
    work = args.dir or tempfile.mkdtemp(prefix="bench-beam-io-")
    os.makedirs(work, exist_ok=True)
    target = args.size << 20
    bundle = args.bundle_mb << 20
    files: List[Tuple[str, str, int]] = []
    small = os.path.join(work, "small.tfrecord")
    if not args.skip_small:
        files.append(("small Examples", small, make_small(small, target)))
    if not args.skip_large:
        large = os.path.join(work, "large.tfrecord")
        files.append(("1 MiB records", large, make_large(large, target)))

    rows: List[Tuple[str, str, int, float, float, float]] = []
    print(
        f"runner start-up (trivial pipeline): 1 worker {startup_seconds(1):.1f} s, 2 workers {startup_seconds(2):.1f} s"
    )
    print(f"files: {', '.join(f'{name}: {n} records, {os.path.getsize(p) / 1e6:.0f} MB' for name, p, n in files)}")
    for name, path, n in files:
        base: Dict[int, float] = {}
        for workers in (1, 2):
            for impl in ("builtin", "ours", "batched"):
                secs = read_case(path, n, impl, workers, bundle)
                rate = n / secs
                if impl == "builtin":
                    base[workers] = rate
                mb = os.path.getsize(path) / 1e6 / secs
                rows.append((f"read \\| Count, {name}", impl, workers, rate, mb, rate / base[1]))
                print(f"  {name:15s} {impl:8s} {workers}w {rate:12,.0f} rec/s {secs:7.2f} s", flush=True)
    if not args.skip_write and not args.skip_small:
        name, path, n = files[0]
        base_rate = None
        for impl in ("builtin", "ours"):
            for workers in (1, 2):
                secs = write_case(path, n, impl, workers, work, bundle)
                rate = n / secs
                base_rate = base_rate or rate
                mb = os.path.getsize(path) / 1e6 / secs
                rows.append((f"read \\| Write(4 shards), {name}", impl, workers, rate, mb, rate / base_rate))
                print(f"  write {impl:8s} {workers}w {rate:12,.0f} rec/s {secs:7.2f} s", flush=True)

    print()
    print("| case | impl | workers | records/s | MB/s | vs built-in, 1 worker |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for case, impl, workers, rate, mb, ratio in rows:
        print(f"| {case} | {impl} | {workers} | {rate:,.0f} | {mb:,.1f} | {ratio:.2f}x |")
    if not args.dir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
