"""Datasets that grow, measured in one run: a full build of N rows against an append of M
rows to it (``build --append``), and look-ups by key (``open_dataset(root).get``) on
local disk and on the S3 server (versitygw on 127.0.0.1).

Rows (``--rows-kind``): ``text`` (default): ``id`` (the key), an int label and ~40 bytes
of text, no media: the build's own costs, not a decoder's, so the append's share is the
hardest case. ``images``: ``id``, a label and one 20x20 JPEG kept as bytes (the rows of
``bench_jobs.py --dataset images``: every row reads and checks its image, as a dataset
of images that grows does). Order: full build,
append, full build, append (each in its own process, 2 local workers), medians reported
with CPU seconds (user+sys of the process and its children). Look-ups: one cold look-up
(open the dataset: LATEST, tfrecord_io_info.json, the split's key index footer; then one
probe and one record read), then ``--lookups`` random keys one after another in one
process (the median and p99 latency and the rate).

    python benchmarks/bench_grow.py [--rows 1000000] [--append 10000] [--lookups 10000] [--s3] [--rows-kind images]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Any, Dict, List

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.bench_build import timed  # noqa: E402
from benchmarks.bench_jobs import write_tiny_jpeg  # noqa: E402

FLAGS = ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def manifest(path: str, start: int, n: int, kind: str = "text") -> str:
    """JSONL rows ``start`` .. ``start + n``; ``images``: each names ``image.jpg`` beside it."""
    if kind == "images":
        image = os.path.join(os.path.dirname(path), "image.jpg")
        if not os.path.exists(image):
            write_tiny_jpeg(image)
    with open(path, "w") as f:
        for i in range(start, start + n):
            row: Dict[str, Any] = {"id": f"row{i:09d}", "label": i % 10}
            if kind == "images":
                row["path"] = "image.jpg"
            else:
                row["text"] = f"caption number {i} of the set"
            f.write(json.dumps(row) + "\n")
    return path


COLUMNS = {
    "text": {"label": {"encoder": "int"}, "text": {"encoder": "text"}},
    "images": {"label": {"encoder": "int"}, "image": {"encoder": "image", "column": "path"}},
}


def config(path: str, rows: str, out: str, kind: str = "text") -> str:
    cfg = {
        "name": "grow",
        "input": {"manifest": rows},
        "key": "id",
        "columns": COLUMNS[kind],
        "splits": {"train": 0.8, "test": 0.2},
        "sharding": {"num_shards": 8},
        "output": {"dir": out},
    }
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def build(args: List[str]) -> Dict[str, float]:
    return timed([sys.executable, "-m", "tfrecord_io.pipelines", "build", *args, "--no-progress", *FLAGS])


def lookups(root: str, n: int, rows: int, env: Dict[str, str]) -> Dict[str, Any]:
    """Look-ups in a fresh process (so the first one is cold)."""
    code = f"""
import json, random, time
t = time.perf_counter()
import tfrecord_io
t_import = time.perf_counter() - t
t = time.perf_counter()
ds = tfrecord_io.open_dataset({root!r})
first = ds.get("row{rows // 2:09d}")
cold = time.perf_counter() - t
assert first is not None
rng = random.Random(1)
keys = [f"row{{rng.randrange({rows}):09d}}" for _ in range({n})]
lat = []
t0 = time.perf_counter()
for k in keys:
    t = time.perf_counter()
    assert ds.get(k) is not None
    lat.append(time.perf_counter() - t)
total = time.perf_counter() - t0
lat.sort()
print(json.dumps({{"import_s": t_import, "cold_s": cold, "median_ms": 1000 * lat[len(lat) // 2],
                  "p99_ms": 1000 * lat[int(len(lat) * 0.99)], "total_s": total, "per_s": len(lat) / total,
                  "cpu_s": time.process_time()}}))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    if proc.returncode:
        raise RuntimeError(proc.stderr[-3000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--append", type=int, default=10_000)
    ap.add_argument("--lookups", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--s3", action="store_true", help="also look up on versitygw (TFRECORD_IO_VERSITYGW)")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--rows-kind", choices=sorted(COLUMNS), default="text", help="what a row holds (see above)")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="bench-grow-")
    os.makedirs(work, exist_ok=True)
    base_rows = manifest(os.path.join(work, "base.jsonl"), 0, args.rows, args.rows_kind)
    new_rows = manifest(os.path.join(work, "new.jsonl"), args.rows, args.append, args.rows_kind)
    print(
        f"{args.rows:,} {args.rows_kind} rows + {args.append:,} appended; {os.cpu_count()} CPUs; "
        f"load {os.getloadavg()[0]:.1f}"
    )
    full, app = [], []
    for r in range(args.repeat):
        out = os.path.join(work, f"out{r}")
        shutil.rmtree(out, ignore_errors=True)
        full_config = config(os.path.join(work, f"full{r}.yaml"), base_rows, out, args.rows_kind)
        full.append(build([full_config, "--version", "v1"]))
        app_config = config(os.path.join(work, f"app{r}.yaml"), new_rows, out, args.rows_kind)
        app.append(build([app_config, "--append", "--version", "v2"]))
        print(
            f"  run {r}: full build {full[-1]['wall']:.1f}s (CPU {full[-1]['user'] + full[-1]['sys']:.1f}s), "
            f"append {app[-1]['wall']:.1f}s (CPU {app[-1]['user'] + app[-1]['sys']:.1f}s)",
            flush=True,
        )
    fw, aw = statistics.median(x["wall"] for x in full), statistics.median(x["wall"] for x in app)
    fc = statistics.median(x["user"] + x["sys"] for x in full)
    ac = statistics.median(x["user"] + x["sys"] for x in app)
    print(
        f"full build median {fw:.1f}s wall / {fc:.1f}s CPU; append {aw:.1f}s / {ac:.1f}s: {100 * aw / fw:.1f}% wall, "
        f"{100 * ac / fc:.1f}% CPU"
    )
    out = os.path.join(work, "out0")
    sys.path.insert(0, REPO)
    from tfrecord_io.dataset import dataset_writer

    info = dataset_writer.load_info(os.path.join(out, "v2"))
    kbytes = sum(e["key_index"]["bytes"] for e in info["splits"].values())
    dbytes = sum(e["bytes"] for e in info["splits"].values())
    print(
        f"key index: {kbytes / 1e6:.1f} MB for {info['records']:,} rows ({kbytes / info['records']:.1f} B/row; "
        f"shards {dbytes / 1e6:.1f} MB)"
    )
    print(
        f"changes: {json.dumps(info['changes']['splits'])}, shards carried {info['changes']['shards_carried']}, "
        f"written {info['changes']['shards_written']}"
    )
    env = dict(os.environ, PYTHONPATH=REPO)
    local = lookups(out, args.lookups, args.rows, env)
    print(f"local lookups: {json.dumps(local)}")
    if args.s3:
        from tests.s3support import find_versitygw, start_versitygw

        binary = find_versitygw()
        shutil.rmtree(os.path.join(work, "s3"), ignore_errors=True)
        server = start_versitygw(binary, os.path.join(work, "s3"))
        try:
            bucket = server.make_bucket()
            server.upload_tree(out, f"s3://{bucket}/ds")
            s3 = lookups(f"s3://{bucket}/ds", args.lookups, args.rows, dict(env, **server.env()))
            print(f"S3 lookups: {json.dumps(s3)}")
        finally:
            server.stop()
    print(f"load at end {os.getloadavg()[0]:.1f}; data in {work}")


if __name__ == "__main__":
    main()
