"""A build whose images and output are on S3, against the loop a user would write, in one run.

Starts versitygw on 127.0.0.1 (``TFRECORD_IO_VERSITYGW`` or
``~/.cache/tfrecord-io/bin/versitygw``; ``bash scripts/setup-s3``), makes ``--images``
photo-like JPEGs (``bench_build.make_images``: 320x240, ~30 KB) and uploads them as an
ImageNet-style prefix (``images/<label>/<file>.jpg``). Then, each in its own process:

- ``tfrecord-io build`` with ``input.directory: s3://BUCKET/images`` and the output on
  ``s3://BUCKET/out-...`` (keep the bytes, 2 splits, 4 shards per split), on 2 local
  workers; with ``--checkout DIR`` also the same build run from another checkout of
  this repository (e.g. a git worktree of an older commit: before/after in one run);
- the plain loop: one boto3 client (made once), list the prefix, GET each object,
  decode it with Pillow, write Examples with the ``tfrecord`` package into local
  split/shard files, upload the 8 shards.

The server runs on the same cores as the jobs: its CPU seconds over each case are
printed beside the jobs' own. Ratios are loop time / this (> 1: faster than the loop).

    python benchmarks/bench_s3_build.py [--images 2000] [--checkout /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Dict

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))

from bench_build import LABELS, make_images, timed  # noqa: E402

LOOP = r"""
import hashlib, io, os, sys, tempfile
import boto3
from PIL import Image
import tfrecord

bucket, prefix, out_prefix = sys.argv[1], sys.argv[2], sys.argv[3]
s3 = boto3.client("s3")  # endpoint and credentials from the AWS_* environment
labels = []
keys = []
for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
    keys.extend(o["Key"] for o in page.get("Contents", []))
keys.sort()
labels = sorted({k[len(prefix) + 1 :].split("/")[0] for k in keys})
tmp = tempfile.mkdtemp()
writers = {}
def h(purpose, key):
    return int.from_bytes(hashlib.sha256(f"0\x1f{purpose}\x1f{key}".encode()).digest()[:8], "big")
for key in keys:
    data = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    img = Image.open(io.BytesIO(data))
    img.load()                                       # full decode: proves the file whole
    width, height = img.size
    split = "train" if h("split", key) / 2**64 < 0.8 else "test"
    shard = h("shard", key) % 4
    w = writers.get((split, shard))
    if w is None:
        w = writers[(split, shard)] = tfrecord.TFRecordWriter(os.path.join(tmp, f"{split}-{shard}.tfrecord"))
    w.write({"image/encoded": (data, "byte"), "image/format": (b"jpeg", "byte"), "image/height": (height, "int"),
             "image/width": (width, "int"), "image/channels": (3, "int"),
             "label": (labels.index(key[len(prefix) + 1 :].split("/")[0]), "int")})
for (split, shard), w in sorted(writers.items()):
    w.close()
    s3.upload_file(os.path.join(tmp, f"{split}-{shard}.tfrecord"), bucket, f"{out_prefix}/{split}-{shard}.tfrecord")
"""


# ``tfrecord-io ARGS`` run from the checkout given first (ahead of the working directory
# that ``timed`` runs in, this repository's root).
CLI_FROM = (
    "import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'tfrecord-io'; "
    "runpy.run_module('tfrecord_io.pipelines', run_name='__main__')"
)


def server_cpu(pid: int) -> float:
    """CPU seconds (user+sys) the server process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def write_config(path: str, images_url: str, out_url: str) -> None:
    cfg = {
        "name": "bench-s3",
        "input": {"directory": images_url},
        "key": "path",
        "columns": {
            "image": {"encoder": "image", "column": "path"},
            "label": {"encoder": "label", "vocabulary": LABELS},
        },
        "splits": {"train": 0.8, "test": 0.2},
        "sharding": {"num_shards": 4},
        "output": {"dir": out_url},
    }
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)


def row(what: str, r: Dict[str, float], server_s: float, base: float) -> str:
    return (
        f"| {what} | {r['wall']:.1f} | {r['user'] + r['sys']:.1f} | {server_s:.1f} | {r['rss_mb']:.0f} | "
        f"{base / r['wall']:.2f}x |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--checkout", default=None, help="also build from this checkout (e.g. an older commit)")
    parser.add_argument("--workdir", default=None, help="keep the generated images here (reused if present)")
    args = parser.parse_args()

    from s3support import find_versitygw, start_versitygw

    binary = find_versitygw()
    if binary is None:
        raise SystemExit("versitygw not found: run `bash scripts/setup-s3` (or set TFRECORD_IO_VERSITYGW)")
    work = args.workdir or tempfile.mkdtemp(prefix="bench-s3-build-")
    images = os.path.join(work, f"images-{args.images}")
    if not os.path.isdir(images):
        t = time.perf_counter()
        make_images(images, args.images)
        print(f"made {args.images} JPEGs in {time.perf_counter() - t:.0f}s", file=sys.stderr)
    server = start_versitygw(binary, os.path.join(work, "s3"))
    try:
        bucket = server.make_bucket()
        server.upload_tree(images, f"s3://{bucket}/images")
        env = dict(os.environ, **server.env())
        flags = [
            "--no-progress",
            "--runner=DirectRunner",
            f"--direct_num_workers={args.workers}",
            "--direct_running_mode=multi_processing",
            *server.pipeline_args(),
        ]
        size_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(images) for f in fs) / 1e6
        print(
            f"\n{args.images} JPEGs ({size_mb:.0f} MB) on versitygw (127.0.0.1), {os.cpu_count()} CPUs, "
            f"load average at start {os.getloadavg()[0]:.1f}\n"
        )
        print("| what | wall s | CPU s (user+sys) | server CPU s | peak RSS MB | loop / this |")
        print("|---|---:|---:|---:|---:|---:|")
        cpu0 = server_cpu(server.process.pid)
        loop = timed([sys.executable, "-c", LOOP, bucket, "images", "out-loop"], env)
        loop_server = server_cpu(server.process.pid) - cpu0
        print(row("plain loop: boto3 GET + Pillow + tfrecord, upload 8 shards", loop, loop_server, loop["wall"]))
        checkouts = [("tfrecord-io build (this checkout)", REPO)]
        if args.checkout:
            checkouts.append((f"tfrecord-io build ({args.checkout})", os.path.abspath(args.checkout)))
        for i, (what, checkout) in enumerate(checkouts):
            cfg = os.path.join(work, f"build-{i}.yaml")
            write_config(cfg, f"s3://{bucket}/images", f"s3://{bucket}/out-{i}")
            cpu0 = server_cpu(server.process.pid)
            result = timed([sys.executable, "-c", CLI_FROM, checkout, "build", cfg, *flags], env)
            print(row(f"{what}, {args.workers} workers", result, server_cpu(server.process.pid) - cpu0, loop["wall"]))
        print(f"\nload average at end {os.getloadavg()[0]:.1f}; data in {work}")
    finally:
        server.stop()
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
