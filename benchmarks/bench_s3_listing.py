"""What a build's planning pays to learn the size and time of a manifest's media on S3,
as the manifest grows (issue 33): the rows' ``_stat_paths`` -> ``files.stat_many``.

Starts versitygw on 127.0.0.1 (``TFRECORD_IO_VERSITYGW`` or
``~/.cache/tfrecord-io/bin/versitygw``; ``bash scripts/setup-s3``; ``--keep-alive``, as
S3 keeps connections), puts ``N`` small files in a media folder of a bucket (one folder per case) (written
into the server's posix directory: uploading 100,000 objects would take longer than
the measurement), and then, in a fresh process per case, plans the rows of an
``N``-row manifest naming them (``media/img_000123.jpg``) as the build's planning
stage does: batches of 1,000 rows (``manifest.BATCH_ROWS``), ``prepare_batch`` on
each with the stage's ``FolderListings`` (as ``PrepareRows`` keeps it), in manifest
order (``--shuffled``: a manifest in random order). Prints wall and CPU seconds per
case, the S3 requests made (LIST and HEAD, counted by botocore's event hooks) and
seconds per 1,000 rows, for this checkout and, with ``--before REV``, for the code
at that git revision (exported with ``git archive``, this checkout's compiled core
copied in), alternately.

    python benchmarks/bench_s3_listing.py [--rows 10000,20000,40000,100000] [--before REV] [--shuffled]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests"))

PLAN = r"""
import json, random, resource, sys, time
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from tfrecord_io.storage import files
from tfrecord_io.pipelines.building.row_plan import prepare_batch

bucket, n, shuffled = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
FileSystems.set_options(PipelineOptions(sys.argv[4:]))
files.beam_filesystems()
requests = {"ListObjectsV2": 0, "ListObjects": 0, "HeadObject": 0}

def count(event_name, **kwargs):
    op = event_name.rsplit(".", 1)[-1]
    requests[op] = requests.get(op, 0) + 1

import botocore.client
_orig = botocore.client.BaseClient.__init__
def _init(self, *a, **k):
    _orig(self, *a, **k)
    self.meta.events.register("before-call.s3", count)
botocore.client.BaseClient.__init__ = _init
from tfrecord_io.storage import s3_clients
s3_clients._shared.clear()

names = [f"media{n}/img_{i:06d}.jpg" for i in range(n)]
if shuffled:
    random.Random(0).shuffle(names)
rows = [{"image": name} for name in names]
import inspect
keep = {}
if "listings" in inspect.signature(prepare_batch).parameters:  # what the planning stage keeps (newer code)
    from tfrecord_io.storage.s3_listing import FolderListings
    keep = {"listings": FolderListings()}
cpu0 = time.process_time()
t0 = time.perf_counter()
found = 0
for start in range(0, n, 1000):
    prepared, summary = prepare_batch(
        rows[start : start + 1000], key_column=None, cutoffs=[("train", 1.0)], seed=0, shuffle=True,
        media_columns=["image"], base_dir=bucket, vocab_sources={}, **keep,
    )
    found += summary.bytes["train"]
wall = time.perf_counter() - t0
cpu = time.process_time() - cpu0
print(json.dumps({"wall": wall, "cpu": cpu, "bytes": found, "requests": requests}))
"""


def export_tree(rev: str) -> str:
    into = tempfile.mkdtemp(prefix="bench-before-")
    archive = subprocess.run(["git", "-C", REPO, "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    for so in glob.glob(os.path.join(REPO, "tfrecord_io", "_speedups*.so")):
        shutil.copy(so, os.path.join(into, "tfrecord_io"))
    return into


def main() -> None:
    from s3support import find_versitygw, start_versitygw

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", default="10000,20000,40000,100000")
    parser.add_argument("--before", help="also run the code at this git revision")
    parser.add_argument("--before-max-rows", type=int, default=40000, help="skip larger cases for --before")
    parser.add_argument("--shuffled", action="store_true", help="manifest rows in random order")
    args = parser.parse_args()
    sizes = [int(x) for x in args.rows.split(",")]
    binary = find_versitygw()
    if binary is None:
        sys.exit("versitygw not found: bash scripts/setup-s3")
    work = tempfile.mkdtemp(prefix="bench-s3-listing-")
    server = start_versitygw(binary, work, keep_alive=True)
    trees: Dict[str, str] = {"after": REPO}
    try:
        if args.before:
            trees = {"before": export_tree(args.before), "after": REPO}
        bucket = server.make_bucket("listing")
        data = b"\xff\xd8\xff" + b"x" * 500
        for n in sizes:  # a folder of n files for the n-row case: the folder grows with the manifest
            media = os.path.join(server.root_dir, bucket, f"media{n}")
            os.makedirs(media)
            for i in range(n):
                with open(os.path.join(media, f"img_{i:06d}.jpg"), "wb") as f:
                    f.write(data)
        print(f"folders of {args.rows} objects in s3://{bucket}/media<N>; load average {os.getloadavg()[0]:.2f}")
        print("| rows | code | wall s | CPU s | LIST requests | HEAD requests | wall s per 1,000 rows |")
        print("|---|---|---|---|---|---|---|")
        for n in sizes:
            for which, tree in trees.items():
                if which == "before" and n > args.before_max_rows:
                    continue
                env = dict(os.environ, PYTHONPATH=tree, **server.env())
                proc = subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        PLAN,
                        f"s3://{bucket}",
                        str(n),
                        "1" if args.shuffled else "0",
                        *server.pipeline_args(),
                    ],
                    env=env,
                    cwd=tree,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if proc.returncode != 0:
                    print(proc.stderr[-3000:])
                    raise SystemExit(f"{which} {n}: failed")
                got = json.loads(proc.stdout.strip().splitlines()[-1])
                assert got["bytes"] == n * len(data), got  # every file found, with its size
                req: Dict[str, int] = got["requests"]
                lists = req.get("ListObjectsV2", 0) + req.get("ListObjects", 0)
                print(
                    f"| {n:,} | {which} | {got['wall']:.2f} | {got['cpu']:.2f} | {lists:,} | "
                    f"{req.get('HeadObject', 0):,} | {got['wall'] / n * 1000:.3f} |",
                    flush=True,
                )
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
        for which, tree in trees.items():
            if which != "after":
                shutil.rmtree(tree, ignore_errors=True)


if __name__ == "__main__":
    main()
