"""The record jobs (validate, inspect, report, reshard, index) against the loops a user
would write instead, measured in one run.

Makes its own dataset (no downloads), ``--records`` records in 16 indexed shards:

- ``--dataset numeric`` (default): small Examples (an int64 ``label`` of 10 classes, 8
  float ``scores``, a 40-byte ``text``; ~150 bytes each) with the metadata
  ``tfrecord-io build`` writes (``tfrecord_io_info.json``: counts, SHA-256 and feature
  spec per shard; TFDS's ``dataset_info.json`` beside it, by ``dataset_writer.write_info``);
- ``--dataset images``: the dataset of issue #24's table, made by ``tfrecord-io build``
  itself (so it is what a build writes: ``tfrecord_io_info.json``, TFDS's files,
  indexes, ``LATEST``): a CSV manifest of ``--records`` rows over one tiny JPEG (20x20)
  with one of four labels, kept as bytes (~840 bytes a record, 16 shards). Four distinct
  records in all, repeated: the case where placing by a hash of the bytes filled two
  shards and left two empty. The build runs once (a few minutes at 1,000,000) and is
  reused from ``--workdir``.

Then, each in its own process (so CPU seconds are that process's and its children's):

- every job through the CLI (``python -m tfrecord_io.pipelines``) with the Beam flags
  given after ``--`` (default: DirectRunner, 2 workers, multi_processing), or the
  runner section of ``--runner-config``; ``reshard`` takes the slice path (the shards
  are indexed), ``reshard-unindexed`` the scanned path (the same files, hard-linked into
  a folder without their indexes: the plan is made in the pipeline by scanning them);
  after each, the records in each of its 4 shards;
- Beam's fixed start-up: the same job over a 16-record copy of the dataset (the
  "after start-up" column subtracts it);
- the single-process loops over our own core that issue #24 names: ``example_loader``
  (both CRCs) over every shard + the SHA-256 of each file, for validate, inspect and
  report; ``tfrecord_iterator`` into 4 ``RecordWriter``s for reshard;
  ``create_index`` per file for index.

Ratios are loop time / job time from this same run (> 1: the job is faster), in wall
time and in CPU seconds; the load average is printed at the start and the end.

    python benchmarks/bench_jobs.py [--records 1000000] [--dataset numeric|images] [--jobs validate,reshard,...]
    python benchmarks/bench_jobs.py --runner-config configs/flink-cluster.yaml   # on a cluster
    python benchmarks/bench_jobs.py -- --runner=DirectRunner --direct_num_workers=1
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

from process_cpu import timed as timed_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

SHARDS = 16
CLASSES = 10
LOCAL_FLAGS = ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def make_dataset(root: str, n: int, shards: int = SHARDS) -> None:
    """A version ``v1`` under ``root`` (``LATEST`` -> ``v1``): ``shards`` indexed shards of
    ``n`` small Examples and the metadata a build would write for them
    (``tfrecord_io_info.json`` and TFDS's files, by ``dataset_writer.write_info``)."""
    import hashlib

    import numpy as np

    from tfrecord_io.dataset import dataset_writer
    from tfrecord_io.format.codec import serialize_example
    from tfrecord_io.format.writer import RecordWriter

    version = os.path.join(root, "v1")
    os.makedirs(version, exist_ok=True)
    rng = np.random.default_rng(0)
    scores = rng.random((min(n, 4096), 8), dtype=np.float32)
    listed = []
    per = [n // shards + (1 if i < n % shards else 0) for i in range(shards)]
    done = 0
    for s, count in enumerate(per):
        name = f"data-train.tfrecord-{s:05d}-of-{shards:05d}"
        path = os.path.join(version, name)
        records = [
            serialize_example(
                {
                    "label": [(done + i) % CLASSES],
                    "scores": scores[(done + i) % len(scores)],
                    "text": f"record {done + i:>12} of the benchmark...".encode()[:40].ljust(40, b"."),
                }
            )
            for i in range(count)
        ]
        with RecordWriter(path, index_path=path + ".index") as w:
            w.write_records(records)
        digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
        listed.append(
            {
                "path": name,
                "index": name + ".index",
                "records": count,
                "bytes": os.path.getsize(path),
                "sha256": digest,
            }
        )
        done += count
    info = {
        "name": "bench",
        "version": "v1",
        "records": n,
        "features": {
            "label": {"key": "label", "kind": "int", "shape": [], "required": True},
            "scores": {"key": "scores", "kind": "float", "shape": [8], "required": True},
            "text": {"key": "text", "kind": "bytes", "shape": [], "required": True},
        },
        "encoders": {
            "label": {"type": "Label", "key": "label", "num_classes": CLASSES},
            "scores": {"type": "Array", "key": "scores", "dtype": "float32", "shape": [8]},
            "text": {"type": "Text", "key": "text"},
        },
        "splits": {
            "train": {
                "records": n,
                "bytes": sum(s["bytes"] for s in listed),
                "num_shards": shards,
                "shards": listed,
            }
        },
    }
    # what a build writes: TFDS's files, then tfrecord_io_info.json (the commit protocol's
    # own function), then LATEST
    dataset_writer.write_info(version, info)
    dataset_writer.publish(root, "v1")


IMAGE_LABELS = ["cat", "dog", "bird", "fish"]


def write_tiny_jpeg(path: str) -> None:
    """One 20x20 JPEG of ~630 bytes (a noisy gradient): with a build's other features an
    Example of ~820 bytes, as in issue #24."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:20, 0:20]
    gradient = np.stack([x * 255 / 20, y * 255 / 20, (x + y) * 128 / 20], -1)
    pixels = np.clip(gradient + rng.normal(0, 20, gradient.shape), 0, 255).astype(np.uint8)
    Image.fromarray(pixels).save(path, "JPEG", quality=90, optimize=True)


def make_image_dataset(root: str, n: int, shards: int = SHARDS) -> None:
    """Version ``v1`` under ``root``, built by ``tfrecord-io build`` (2 local workers) from a
    manifest of ``n`` rows over one 20x20 JPEG, label ``IMAGE_LABELS[i % 4]``, image bytes
    kept: what a build writes, every file included."""
    import csv

    import yaml

    media = root + "-media"
    os.makedirs(media, exist_ok=True)
    write_tiny_jpeg(os.path.join(media, "image.jpg"))
    manifest = os.path.join(media, "manifest.csv")
    with open(manifest, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "path", "label"])
        for i in range(n):
            w.writerow([f"row{i:08d}", "image.jpg", IMAGE_LABELS[i % len(IMAGE_LABELS)]])
    config = {
        "name": "images",
        "input": {"manifest": manifest},
        "key": "id",
        "columns": {
            "image": {"encoder": "image", "column": "path"},
            "label": {"encoder": "label", "vocabulary": IMAGE_LABELS},
        },
        "sharding": {"num_shards": shards},
        "output": {"dir": root, "version": "v1"},
    }
    config_path = os.path.join(media, "build.yaml")
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f)
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "tfrecord_io.pipelines", "build", config_path, "--no-progress", *LOCAL_FLAGS]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"tfrecord-io build of the images dataset failed: {proc.stderr[-3000:]}")


DATASETS = {"numeric": make_dataset, "images": make_image_dataset}


def shard_files(root: str) -> List[str]:
    """The data shards of the dataset at ``root`` (its ``LATEST`` version), sorted."""
    from tfrecord_io.dataset import dataset_writer

    with open(os.path.join(root, "LATEST")) as f:
        version_dir = os.path.join(root, f.read().strip())
    return sorted(
        s["abspath"] for s in dataset_writer.dataset_shards(version_dir, dataset_writer.load_info(version_dir))
    )


def unindexed_copy(root: str, to: str) -> str:
    """Hard links to the shards of ``root`` in ``to``, without their indexes (so reshard
    plans in the pipeline by scanning the very same bytes); a pattern matching them."""
    if not os.path.isdir(to):
        os.makedirs(to + ".tmp", exist_ok=True)
        for path in shard_files(root):
            os.link(path, os.path.join(to + ".tmp", os.path.basename(path)))
        os.replace(to + ".tmp", to)
    return os.path.join(to, "*.tfrecord-*[0-9]")


def shard_counts(prefix: str) -> List[int]:
    """Records in each shard a reshard wrote under ``prefix`` (from their indexes)."""
    import glob

    from tfrecord_io.format.index import load_index

    return [len(load_index(p)) for p in sorted(glob.glob(prefix + "-*.index"))]


def timed(cmd: List[str], env: Optional[Dict[str, str]] = None) -> Dict[str, float]:
    """Wall, CPU (user+sys of the process and every process it started, its forked
    workers included: ``process_cpu.py``) of one command."""
    result = timed_command(cmd, env=env, cwd=REPO)
    if result["rc"] not in (0, 1):  # validate exits 1 when it finds problems: still a run
        raise RuntimeError(f"{' '.join(cmd)} failed: {result['stderr'][-3000:]}")
    return result


# The plain loops, each a script run in its own interpreter.
LOOP_READ = r"""
import hashlib, sys
from tfrecord_io.format.reader import example_loader
n = 0
for path in open(sys.argv[1]).read().split():
    for example in example_loader(path, None):
        n += 1
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
assert n == int(sys.argv[2]), n
"""

LOOP_RESHARD = r"""
import os, sys
from tfrecord_io.format.reader import tfrecord_iterator
from tfrecord_io.format.writer import RecordWriter
out = sys.argv[2]
os.makedirs(out, exist_ok=True)
names = [f"{out}/loop-{i:05d}-of-00004.tfrecord" for i in range(4)]
writers = [RecordWriter(name, index_path=name + ".index") for name in names]
i = 0
for path in open(sys.argv[1]).read().split():
    for record in tfrecord_iterator(path):
        writers[i % 4].write_record(record)
        i += 1
for w in writers:
    w.close()
"""

LOOP_INDEX = r"""
import sys
from tfrecord_io.format.index import create_index
for path in open(sys.argv[1]).read().split():
    create_index(path, path + ".index")
"""


def job_command(job: str, root: str, work: str, flags: List[str], tag: str) -> List[str]:
    cli = [sys.executable, "-m", "tfrecord_io.pipelines"]
    if job == "validate":
        return [*cli, "validate", root, "--no-progress", *flags]
    if job == "inspect":
        return [*cli, "inspect", root, "--head", "0", "--no-progress", *flags]
    if job == "report":
        return [*cli, "report", root, "--output", os.path.join(work, f"report-{tag}.html"), "--no-progress", *flags]
    if job in ("reshard", "reshard-unindexed"):
        source = root if job == "reshard" else unindexed_copy(root, root + "-unindexed")
        out = reshard_prefix(work, job, tag)
        return [*cli, "reshard", source, "--output", out, "--num-shards", "4", "--no-progress", *flags]
    if job == "index":
        return [*cli, "index", root, "--force", "--no-progress", *flags]
    raise ValueError(job)


def reshard_prefix(work: str, job: str, tag: str) -> str:
    return os.path.join(work, f"{job}-{tag}", "part")


def loop_command(job: str, listing: str, work: str, n: int) -> List[str]:
    if job.startswith("reshard"):
        return [sys.executable, "-c", LOOP_RESHARD, listing, os.path.join(work, "loop-reshard")]
    if job == "index":
        return [sys.executable, "-c", LOOP_INDEX, listing]
    return [sys.executable, "-c", LOOP_READ, listing, str(n)]


LOOP_NAMES = {
    "validate": "example_loader (both CRCs) + SHA-256 per file",
    "inspect": "example_loader (both CRCs) + SHA-256 per file",
    "report": "example_loader (both CRCs) + SHA-256 per file",
    "reshard": "tfrecord_iterator into 4 RecordWriters",
    "reshard-unindexed": "tfrecord_iterator into 4 RecordWriters",
    "index": "create_index per file",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dataset", choices=sorted(DATASETS), default="numeric", help="see above")
    parser.add_argument("--jobs", default="validate,reshard,reshard-unindexed,inspect,report,index")
    parser.add_argument("--runner-config", default=None, help="a runner config YAML (e.g. configs/flink-cluster.yaml)")
    parser.add_argument("--workdir", default=None, help="keep the generated dataset here (reused if present)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each case; the median is shown")
    parser.add_argument("beam_flags", nargs="*", help="Beam flags after --, for every job")
    args = parser.parse_args()

    flags = list(args.beam_flags) or ([] if args.runner_config else LOCAL_FLAGS)
    if args.runner_config:
        flags = ["--runner-config", args.runner_config, *flags]
    work = args.workdir or tempfile.mkdtemp(prefix="bench-jobs-")
    suffix = "" if args.dataset == "numeric" else f"-{args.dataset}"  # numeric keeps its old folder names
    root = os.path.join(work, f"data-{args.records}{suffix}")
    tiny = os.path.join(work, f"data-16{suffix}")
    for path, n in ((root, args.records), (tiny, 16)):
        if not os.path.exists(os.path.join(path, "LATEST")):
            t = time.perf_counter()
            DATASETS[args.dataset](path, n)
            print(f"made {n:,} records ({args.dataset}) in {time.perf_counter() - t:.0f}s", file=sys.stderr)
    listing = os.path.join(work, f"shards{suffix}-{args.records}.txt")
    with open(listing, "w") as f:
        f.write("\n".join(shard_files(root)) + "\n")
    size_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs) / 1e6
    data_mb = sum(os.path.getsize(p) for p in shard_files(root)) / 1e6
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print(
        f"\n{args.records:,} records ({args.dataset}), {size_mb:.0f} MB ({data_mb:.0f} MB of shards, "
        f"{data_mb * 1e6 / args.records:.0f} bytes a record) in {SHARDS} shards, {os.cpu_count()} CPUs, "
        f"load average at start {os.getloadavg()[0]:.1f}; flags: {' '.join(flags)}\n"
    )
    print("| job | what | wall s | after start-up s | CPU s (user+sys) | loop / this, wall | after start-up | CPU |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")

    def median(cmd: List[str], before=None) -> Dict[str, float]:
        runs = []
        for _ in range(args.rounds):
            if before:
                before()
            runs.append(timed(cmd, env))
        runs.sort(key=lambda r: r["wall"])
        return runs[len(runs) // 2]

    for job in args.jobs.split(","):
        out_dir = os.path.dirname(reshard_prefix(work, job, "big"))
        clean = lambda d=out_dir: shutil.rmtree(d, ignore_errors=True)  # noqa: E731
        startup = median(job_command(job, tiny, work, flags, "tiny"))
        result = median(job_command(job, root, work, flags, "big"), clean if job.startswith("reshard") else None)
        loop = median(loop_command(job, listing, work, args.records))
        cpu = {k: v["user"] + v["sys"] for k, v in (("job", result), ("loop", loop), ("startup", startup))}
        after = result["wall"] - startup["wall"]
        rows = [
            (f"plain loop: {LOOP_NAMES[job]}", loop, None, "", "", ""),
            (
                f"tfrecord-io {job}",
                result,
                after,
                f"{loop['wall'] / result['wall']:.2f}x",
                f"{loop['wall'] / after:.2f}x" if after > 0 else "",
                f"{cpu['loop'] / cpu['job']:.2f}x",
            ),
            ("  Beam start-up (16 records)", startup, None, "", "", ""),
        ]
        for what, r, aft, ratio, ratio_after, ratio_cpu in rows:
            print(
                f"| {job} | {what} | {r['wall']:.2f} | {'' if aft is None else f'{aft:.2f}'} | "
                f"{r['user'] + r['sys']:.2f} | {ratio} | {ratio_after} | {ratio_cpu} |",
                flush=True,
            )
        if job.startswith("reshard"):
            counts = shard_counts(reshard_prefix(work, job, "big"))
            mean = sum(counts) / len(counts) if counts else 0.0
            off = max(abs(c - mean) for c in counts) / mean * 100 if mean else 0.0
            print(
                f"| {job} | records per output shard: {' / '.join(f'{c:,}' for c in counts)} "
                f"(largest difference from the mean {off:.2f}%) | | | | | | |",
                flush=True,
            )
    print(f"\nload average at end {os.getloadavg()[0]:.1f}; data in {work}")


if __name__ == "__main__":
    main()
