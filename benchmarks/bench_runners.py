"""The validate job on one big TFRecord file, on each runner, in one run.

Runners: FnApiRunner (Beam's DirectRunner, 2 worker processes), Prism, Flink
(parallelism 2, embedded mini-cluster) and Spark (``local[2]``), the last three as
``configs/*.yaml`` set them up (LOOPBACK workers, binaries from scripts/fetch-runners).
Also ``flink-cluster`` and ``spark-cluster``: standalone clusters started by
``scripts/cluster up`` (2 TaskManagers / workers, each with its own Beam worker pool,
EXTERNAL environment) and submitted to with ``configs/*-cluster.yaml``; each is started
right before its run (that time is its start-up cost) and stopped right after.
Prints wall seconds and records/s per runner, and each runner's time relative to the
FnApiRunner measured in the same run; with ``--startup`` also each runner's fixed cost
per job (validate of a 1,000-record file). Nothing here is asserted.

    python benchmarks/bench_runners.py                      # one ~500 MB file
    python benchmarks/bench_runners.py --mb 100 --runners fnapi,prism
    python benchmarks/bench_runners.py --mb 1000 --runners fnapi,flink,spark,flink-cluster,spark-cluster --startup
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The DirectRunner's worker processes import our modules by name: give them the checkout.
os.environ["PYTHONPATH"] = os.pathsep.join(
    [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
)

import yaml
from apache_beam.options.pipeline_options import PipelineOptions

from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.pipelines.runtime.beam_options import beam_args, load_runner_section
from tfrecord_io.pipelines.validate_job import run_validate

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD_BYTES = 1000  # ~ a small serialized Example


def write_big_file(path: str, megabytes: int) -> int:
    """~``megabytes`` MB of ~1 KB random records (distinct payloads); returns the count."""
    rnd = random.Random(0)
    block = rnd.randbytes(1 << 20)
    n = megabytes * (1 << 20) // (RECORD_BYTES + 16)
    with RecordWriter(path) as w:
        for i in range(n):
            start = (i * 7919) % ((1 << 20) - RECORD_BYTES)
            w.write_record(b"%09d" % i + block[start : start + RECORD_BYTES - 9])
    return n


def flags_for(runner: str) -> List[str]:
    if runner == "fnapi":
        return beam_args(None, [])  # DirectRunner = FnApiRunner, 2 worker processes
    if runner.endswith("-cluster"):  # addresses from the environment (cluster_up)
        return beam_args(load_runner_section(os.path.join(REPO, "configs", f"{runner}.yaml")), [])
    with open(os.path.join(REPO, "configs", f"{runner}.yaml"), encoding="utf-8") as f:
        return beam_args(yaml.safe_load(f)["runner"], [])


def cluster_command(command: str, engine: str, folder: str) -> None:
    args = [sys.executable, os.path.join(REPO, "scripts", "cluster"), command, engine, "--dir", folder]
    if command == "up":
        # --shared-tmp: the one input file (and validate's results) are in this machine's
        # temp folder, read by every cluster process; the measurement is about the engines.
        args += ["--workers", "2", "--shared-tmp"]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def cluster_up(engine: str, folder: str) -> float:
    """Start ``scripts/cluster up ENGINE``, put its addresses into the environment; seconds taken."""
    t = time.perf_counter()
    cluster_command("up", engine, folder)
    seconds = time.perf_counter() - t
    with open(os.path.join(folder, "cluster.json"), encoding="utf-8") as f:
        os.environ.update(json.load(f)["endpoints"])
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=int, default=500, help="size of the one input file in MB (default 500)")
    parser.add_argument("--runners", default="fnapi,prism,flink,spark")
    parser.add_argument("--dir", default=None, help="where to write the file (default: a temp dir)")
    parser.add_argument(
        "--startup", action="store_true", help="also time each runner on a 1,000-record file (its fixed cost per job)"
    )
    args = parser.parse_args()

    work = args.dir or tempfile.mkdtemp(prefix="bench-runners-")
    path = os.path.join(work, "big.tfrecord")
    t = time.perf_counter()
    n = write_big_file(path, args.mb)
    size = os.path.getsize(path)
    print(f"input: {path}: {n:,} records, {size / 1e6:.0f} MB (written in {time.perf_counter() - t:.1f}s)")
    print(f"machine: {os.cpu_count()} cores; validate job = CRC-checked split read, default 64 MiB ranges")

    small = os.path.join(work, "small.tfrecord")
    if args.startup:
        write_big_file(small, 1)

    results: Dict[str, float] = {}
    fixed: Dict[str, float] = {}
    cluster_start: Dict[str, float] = {}
    for runner in args.runners.split(","):
        engine = runner[: -len("-cluster")] if runner.endswith("-cluster") else None
        if engine:
            folder = os.path.join(work, f"cluster-{engine}")
            cluster_start[runner] = cluster_up(engine, folder)
            print(f"{runner}: scripts/cluster up {engine} took {cluster_start[runner]:.1f} s", flush=True)
        try:
            opts = PipelineOptions(flags_for(runner))
            if args.startup:
                t = time.perf_counter()
                run_validate([small], opts, checksums=False, progress=False)
                fixed[runner] = time.perf_counter() - t
            t = time.perf_counter()
            report = run_validate([path], opts, checksums=False, progress=False)
            seconds = time.perf_counter() - t
        finally:
            if engine:
                cluster_command("down", engine, folder)
        if report["records"] != n or not report["ok"]:
            print(f"{runner}: WRONG RESULT: {report['records']} records, problems {report['problems'][:3]}")
            return 1
        results[runner] = seconds
        print(
            f"{runner:>13}: {seconds:7.1f} s  {n / seconds:>10,.0f} records/s  {size / seconds / 1e6:6.1f} MB/s",
            flush=True,
        )

    base = results.get("fnapi")
    if base:
        print("\n| runner | seconds | records/s | vs FnApiRunner | job on 1,000 records (s) | cluster start (s) |")
        print("|---|---:|---:|---:|---:|---:|")
        for runner, seconds in results.items():
            small_s = f"{fixed[runner]:.1f}" if runner in fixed else ""
            start_s = f"{cluster_start[runner]:.1f}" if runner in cluster_start else ""
            print(f"| {runner} | {seconds:.1f} | {n / seconds:,.0f} | {base / seconds:.2f}x | {small_s} | {start_s} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
