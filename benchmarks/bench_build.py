"""The build job against the loops a user would write instead, measured in one run.

Makes its own photo-like JPEGs (320x240, ~30 KB, noise over gradients; no downloads)
in an ImageNet-style folder (``root/<label>/<file>``), then times, each in its own
process (so CPU seconds and peak RSS are that process's and its children's):

- ``tfrecord-io build`` (label from the folder, 2 splits, 4 shards per split) with 1
  and with 2 local workers (DirectRunner, multi_processing);
- Beam's fixed start-up: the same build over 8 images (reported separately; the
  "after start-up" column subtracts it);
- the single-process loop: read the file, decode it with Pillow (proves it whole,
  gives its shape), build the Example, write it with the ``tfrecord`` package into
  the same split/shard files;
- the TensorFlow loop of the hands-on guide (``tf.io.decode_jpeg`` + ``tf.train.Example``
  + ``tf.io.TFRecordWriter``) in the TensorFlow venv's interpreter, when there is one.

Both cases: keep the bytes (``image`` encoder defaults) and re-encode
(``reencode: jpeg, resize: [224, 224]``). Ratios are loop time / build time from this
same run (> 1: the build is faster).

Fair comparison: every input file is read once before anything is timed (the page
cache holds them for every peer alike, not only for those that run later), then the
peers run in rounds (``--repeat``, default 3), each round in a rotated order (the loop
first in one round, a build first in the next ...), and each row shows the run with the
median wall time of its peer and the best wall time; ratios are of medians (and of
bests, in brackets).

``--rows N``: the many-rows case instead. A CSV manifest of N rows (``id``, a relative
``path``, ``label``) over 1,000 tiny JPEGs (16x16, ~700 bytes; rows share files, so the
page cache holds them for every peer alike), built keeping the bytes, against the
single-process loop that reads the manifest, reads each file, decodes it with Pillow
and writes with the ``tfrecord`` package. There the per-row overheads are what is
measured: planning, the shuffle, Beam's per-element costs.

Every build row also reports the launcher process alone (CPU seconds and peak RSS of
the ``tfrecord-io`` process itself, without its workers): what must not grow with the
rows on a cluster runner. ``--build-flags`` passes flags to the build, e.g.
``--build-flags="--runner-config configs/flink-cluster.yaml"`` (with ``--workers 0``:
run only with those flags).

    python benchmarks/bench_build.py [--images 16000] [--cases keep,reencode] [--tf-python PATH]
    python benchmarks/bench_build.py --rows 1000000 [--workers 2] [--repeat 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import shutil
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import yaml
from process_cpu import timed as timed_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LABELS = [f"class{i:02d}" for i in range(10)]
CASES = {
    "keep": {"encoder": "image", "column": "path"},
    "reencode": {"encoder": "image", "column": "path", "reencode": "jpeg", "quality": 90, "resize": [224, 224]},
}


def make_images(root: str, n: int, size=(320, 240)) -> None:
    """Photo-like JPEGs: smooth gradients with per-pixel noise (JPEG's hard case)."""
    from PIL import Image

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0 : size[1], 0 : size[0]]
    for label in LABELS:
        os.makedirs(os.path.join(root, label), exist_ok=True)
    for i in range(n):
        base = np.stack([(x + 3 * i) % 256, (y * 2 + i) % 256, (x + y) % 256], axis=-1)
        arr = np.clip(base + rng.integers(0, 48, size=base.shape), 0, 255).astype(np.uint8)
        Image.fromarray(arr).save(os.path.join(root, LABELS[i % len(LABELS)], f"img{i:06d}.jpg"), "JPEG", quality=90)


def write_config(path: str, root: str, out: str, image: Dict) -> None:
    cfg = {
        "name": "bench",
        "input": {"directory": root},
        "key": "path",
        "columns": {"image": image, "label": {"encoder": "label", "vocabulary": LABELS}},
        "splits": {"train": 0.8, "test": 0.2},
        "sharding": {"num_shards": 4},
        "output": {"dir": out},
    }
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)


def timed(cmd: List[str], env: Optional[Dict[str, str]] = None) -> Dict[str, float]:
    """Wall, CPU (user+sys of the process and every process it started, its forked
    workers included: ``process_cpu.py``) and peak RSS of one command."""
    result = timed_command(cmd, env=env, cwd=REPO)  # cwd: ``python -m tfrecord_io.pipelines`` puts it first on sys.path
    if result["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {result['stderr'][-2000:]}")
    return result


# The CLI, run so that its own process (not its workers: they are forked children, and
# leave with os._exit) reports its CPU time and peak RSS when it exits.
LAUNCHER = r"""
import atexit, json, os, resource, runpy, sys
def report():
    r = resource.getrusage(resource.RUSAGE_SELF)
    with open(os.environ["BENCH_LAUNCHER_OUT"], "w") as f:
        json.dump({"cpu": r.ru_utime + r.ru_stime, "rss_mb": r.ru_maxrss / 1024}, f)
pid = os.getpid()
atexit.register(lambda: os.getpid() == pid and report())
sys.argv = ["tfrecord-io", *sys.argv[1:]]
runpy.run_module("tfrecord_io.pipelines", run_name="__main__")
"""


def timed_build(args: List[str], env: Dict[str, str], work: str) -> Dict[str, float]:
    """:func:`timed` of ``tfrecord-io build ARGS``, plus the launcher process alone
    (``launcher_cpu``, ``launcher_rss_mb``)."""
    out = os.path.join(work, "launcher.json")
    if os.path.exists(out):
        os.remove(out)
    result = timed([sys.executable, "-c", LAUNCHER, "build", *args], dict(env, BENCH_LAUNCHER_OUT=out))
    with open(out) as f:
        own = json.load(f)
    result["launcher_cpu"], result["launcher_rss_mb"] = own["cpu"], own["rss_mb"]
    return result


LOOP = r"""
import hashlib, io, os, sys
from PIL import Image
import tfrecord

root, out, case = sys.argv[1], sys.argv[2], sys.argv[3]
labels = sorted(os.listdir(root))
writers = {}
def h(purpose, key):
    return int.from_bytes(hashlib.sha256(f"0\x1f{purpose}\x1f{key}".encode()).digest()[:8], "big")
for label_id, label in enumerate(labels):
    for name in sorted(os.listdir(os.path.join(root, label))):
        path = os.path.join(root, label, name)
        with open(path, "rb") as f:
            data = f.read()
        img = Image.open(io.BytesIO(data))
        img.load()                                   # full decode: proves the file whole
        if case == "reencode":
            img = img.convert("RGB").resize((224, 224), Image.BILINEAR)
            buf = io.BytesIO()
            img.save(buf, "JPEG", quality=90)
            data = buf.getvalue()
        width, height = img.size
        split = "train" if h("split", path) / 2**64 < 0.8 else "test"
        shard = h("shard", path) % 4
        w = writers.get((split, shard))
        if w is None:
            w = writers[(split, shard)] = tfrecord.TFRecordWriter(os.path.join(out, f"{split}-{shard}.tfrecord"))
        w.write({"image/encoded": (data, "byte"), "image/format": (b"jpeg", "byte"), "image/height": (height, "int"),
                 "image/width": (width, "int"), "image/channels": (3, "int"), "label": (label_id, "int")})
for w in writers.values():
    w.close()
"""

TF_LOOP = r"""
import hashlib, os, sys
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf

root, out, case = sys.argv[1], sys.argv[2], sys.argv[3]
labels = sorted(os.listdir(root))
writers = {}
def h(purpose, key):
    return int.from_bytes(hashlib.sha256(f"0\x1f{purpose}\x1f{key}".encode()).digest()[:8], "big")
def feature_bytes(v): return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))
def feature_int(v): return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))
for label_id, label in enumerate(labels):
    for name in sorted(os.listdir(os.path.join(root, label))):
        path = os.path.join(root, label, name)
        data = tf.io.read_file(path)
        pixels = tf.io.decode_jpeg(data, channels=3)
        if case == "reencode":
            pixels = tf.cast(tf.image.resize(pixels, (224, 224)), tf.uint8)
            data = tf.io.encode_jpeg(pixels, quality=90)
        height, width, channels = pixels.shape
        split = "train" if h("split", path) / 2**64 < 0.8 else "test"
        shard = h("shard", path) % 4
        w = writers.get((split, shard))
        if w is None:
            w = writers[(split, shard)] = tf.io.TFRecordWriter(os.path.join(out, f"{split}-{shard}.tfrecord"))
        example = tf.train.Example(features=tf.train.Features(feature={
            "image/encoded": feature_bytes(data.numpy()), "image/format": feature_bytes(b"jpeg"),
            "image/height": feature_int(height), "image/width": feature_int(width),
            "image/channels": feature_int(channels), "label": feature_int(label_id)}))
        w.write(example.SerializeToString())
for w in writers.values():
    w.close()
"""


ROWS_LOOP = r"""
import csv, hashlib, io, os, sys
from PIL import Image
import tfrecord

manifest, out = sys.argv[1], sys.argv[2]
base = os.path.dirname(manifest)
labels = {}
writers = {}
def h(key):
    d = hashlib.sha256(f"0\x1f{key}".encode()).digest()
    return int.from_bytes(d[:8], "big"), int.from_bytes(d[8:16], "big")
with open(manifest, newline="") as f:
    for row in csv.DictReader(f):
        with open(os.path.join(base, row["path"]), "rb") as g:
            data = g.read()
        img = Image.open(io.BytesIO(data))
        img.load()                                   # full decode: proves the file whole
        width, height = img.size
        label_id = labels.setdefault(row["label"], len(labels))
        a, b = h(row["id"])
        split = "train" if a / 2**64 < 0.8 else "test"
        shard = b % 4
        w = writers.get((split, shard))
        if w is None:
            w = writers[(split, shard)] = tfrecord.TFRecordWriter(os.path.join(out, f"{split}-{shard}.tfrecord"))
        w.write({"image/encoded": (data, "byte"), "image/format": (b"jpeg", "byte"), "image/height": (height, "int"),
                 "image/width": (width, "int"), "image/channels": (3, "int"), "label": (label_id, "int")})
for w in writers.values():
    w.close()
"""


def make_rows(work: str, n: int, files_n: int = 1000) -> str:
    """A manifest of ``n`` rows over ``files_n`` tiny JPEGs; its path."""
    from PIL import Image

    root = os.path.join(work, f"rows-{n}")
    manifest = os.path.join(root, "manifest.csv")
    if os.path.exists(manifest):
        return manifest
    os.makedirs(os.path.join(root, "img"), exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(min(n, files_n)):
        arr = rng.integers(0, 256, size=(16, 16, 3), dtype=np.uint8)
        Image.fromarray(arr).save(os.path.join(root, "img", f"{i:04d}.jpg"), "JPEG", quality=90)
    with open(manifest + ".tmp", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "path", "label"])
        for i in range(n):
            w.writerow([f"row{i:08d}", f"img/{i % files_n:04d}.jpg", LABELS[i % len(LABELS)]])
    os.replace(manifest + ".tmp", manifest)
    return manifest


def rows_config(path: str, manifest: str, out: str) -> None:
    cfg = {
        "name": "rows",
        "input": {"manifest": manifest},
        "key": "id",
        "columns": {
            "image": {"encoder": "image", "column": "path"},
            "label": {"encoder": "label", "vocabulary": LABELS},
        },
        "splits": {"train": 0.8, "test": 0.2},
        "sharding": {"num_shards": 4},
        "output": {"dir": out},
    }
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)


def _row(what: str, r: Dict[str, Any], base: Dict[str, Any], startup: Optional[Dict[str, Any]] = None) -> str:
    """One table row: ``r`` (a peer's median run, with its ``best``) against ``base`` (the loop's)."""
    after = r["wall"] - startup["wall"] if startup else None
    launcher = f"{r['launcher_cpu']:.1f} / {r['launcher_rss_mb']:.0f}" if "launcher_cpu" in r else ""
    return (
        f"| {what} | {r['wall']:.1f} | {r['best']:.1f} | {'' if after is None else f'{after:.1f}'} | "
        f"{r['user'] + r['sys']:.1f} ({r['user']:.1f}+{r['sys']:.1f}) | {r['rss_mb']:.0f} | {launcher} | "
        f"{base['wall'] / r['wall']:.2f}x ({base['best'] / r['best']:.2f}x) |"
    )


HEADER = (
    "| what | median wall s | best wall s | after start-up s | CPU s (user+sys) | peak RSS MB (largest process) "
    "| launcher alone: CPU s / peak RSS MB | loop / this: median (best) |"
)


def warm(paths: List[str]) -> None:
    """Read every file under ``paths`` once, so each peer finds them in the page cache."""
    for path in paths:
        walk = os.walk(path) if os.path.isdir(path) else [(os.path.dirname(path), [], [os.path.basename(path)])]
        for folder, _, names in walk:
            for name in names:
                with open(os.path.join(folder, name), "rb") as f:
                    while f.read(1 << 20):
                        pass


def rounds(peers: Dict[str, Callable[[], Dict[str, float]]], repeat: int) -> Dict[str, Dict[str, Any]]:
    """Run every peer ``repeat`` times, in rounds, each round starting one peer later
    (so no peer is always first after the inputs were written, or always last); per
    peer: its median run (by wall time) with ``best`` (the lowest wall) and ``runs``."""
    names = list(peers)
    runs: Dict[str, List[Dict[str, float]]] = {name: [] for name in names}
    for r in range(repeat):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            runs[name].append(peers[name]())
    out: Dict[str, Dict[str, Any]] = {}
    for name, results in runs.items():
        ranked = sorted(results, key=lambda x: x["wall"])
        out[name] = dict(ranked[(len(ranked) - 1) // 2], best=ranked[0]["wall"], runs=len(ranked))
    return out


def _direct_flags(workers: int) -> List[str]:
    """The DirectRunner with ``workers`` worker processes; 0: no flags (the config's runner
    and ``--build-flags`` alone)."""
    if not workers:
        return []
    return ["--runner=DirectRunner", f"--direct_num_workers={workers}", "--direct_running_mode=multi_processing"]


def run_rows(args, work: str, env: Dict[str, str]) -> None:
    t = time.perf_counter()
    manifest = make_rows(work, args.rows)
    tiny = make_rows(work, 8)
    print(f"manifest of {args.rows:,} rows ready in {time.perf_counter() - t:.0f}s", file=sys.stderr)
    extra = shlex.split(args.build_flags)
    warm([os.path.dirname(manifest), os.path.dirname(tiny)])
    load = os.getloadavg()[0]
    print(f"\n{args.rows:,} rows over tiny JPEGs, {os.cpu_count()} CPUs, load average at start {load:.1f}")
    print(f"{args.repeat} interleaved rounds; each row: the median run, the best wall time\n")
    loop_out = os.path.join(work, "loop-rows")

    def loop() -> Dict[str, float]:
        shutil.rmtree(loop_out, ignore_errors=True)
        os.makedirs(loop_out)
        return timed([sys.executable, "-c", ROWS_LOOP, manifest, loop_out], env)

    def build(workers: int, name: str, source: str) -> Callable[[], Dict[str, float]]:
        out = os.path.join(work, f"out-rows-{workers}-{name}")
        cfg = os.path.join(work, f"rows-{workers}-{name}.yaml")
        rows_config(cfg, source, out)

        def run() -> Dict[str, float]:
            shutil.rmtree(out, ignore_errors=True)
            return timed_build([cfg, "--no-progress", *_direct_flags(workers), *extra], env, work)

        return run

    worker_counts = [int(w) for w in args.workers.split(",")]
    peers: Dict[str, Callable[[], Dict[str, float]]] = {"loop": loop}
    for workers in worker_counts:
        peers[f"build-{workers}"] = build(workers, "build", manifest)
        peers[f"startup-{workers}"] = build(workers, "startup", tiny)
    results = rounds(peers, args.repeat)
    print(HEADER)
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    base = results["loop"]
    print(_row("Pillow + tfrecord loop (1 process)", base, base))
    for workers in worker_counts:
        label = f"{workers} worker(s)" if workers else "--build-flags only"
        startup = results[f"startup-{workers}"]
        print(_row(f"tfrecord-io build, {label}", results[f"build-{workers}"], base, startup))
        print(_row(f"  start-up (8 rows), {label}", startup, base))
    print(f"\nload average at end {os.getloadavg()[0]:.1f}; data in {work}")


def find_tf_python(given: Optional[str]) -> Optional[str]:
    for path in (
        given,
        os.environ.get("TFRECORD_IO_TF_PYTHON"),
        os.path.expanduser("~/.cache/tfrecord-io/tfenv/bin/python"),
    ):
        if path and os.path.exists(path):
            return path
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=16000)
    parser.add_argument("--cases", default="keep,reencode")
    parser.add_argument("--tf-python", default=None)
    parser.add_argument("--workdir", default=None, help="keep the generated images here (reused if present)")
    parser.add_argument("--rows", type=int, default=0, help="the many-rows case: a manifest of N rows (see above)")
    parser.add_argument("--workers", default=None, help="local worker counts to run (default 1,2; --rows: 2)")
    parser.add_argument("--build-flags", default="", help="extra flags for every build (quoted, shell syntax)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds of every peer (median and best)")
    args = parser.parse_args()

    work = args.workdir or tempfile.mkdtemp(prefix="bench-build-")
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if args.rows:
        args.workers = args.workers or "2"
        run_rows(args, work, env)
        return
    args.workers = args.workers or "1,2"
    root = os.path.join(work, f"images-{args.images}")
    tiny = os.path.join(work, "images-8")
    if not os.path.isdir(root):
        t = time.perf_counter()
        make_images(root, args.images)
        print(f"made {args.images} JPEGs in {time.perf_counter() - t:.0f}s", file=sys.stderr)
    if not os.path.isdir(tiny):
        make_images(tiny, 8)
    size_mb = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs) / 1e6
    tf_python = find_tf_python(args.tf_python)
    warm([root, tiny])
    load = os.getloadavg()[0]
    print(f"\n{args.images} JPEGs, {size_mb:.0f} MB, {os.cpu_count()} CPUs, load average at start {load:.1f}")
    print(f"{args.repeat} interleaved rounds; each row: the median run, the best wall time\n")
    worker_counts = [int(w) for w in args.workers.split(",")]
    extra = shlex.split(args.build_flags)
    print("| case " + HEADER)
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for case in args.cases.split(","):

        def build(workers: int, name: str, images: str, case: str = case) -> Callable[[], Dict[str, float]]:
            out = os.path.join(work, f"out-{case}-{workers}-{name}")
            cfg = os.path.join(work, f"{case}-{workers}-{name}.yaml")
            write_config(cfg, images, out, CASES[case])

            def run() -> Dict[str, float]:
                shutil.rmtree(out, ignore_errors=True)
                return timed_build([cfg, "--no-progress", *_direct_flags(workers), *extra], env, work)

            return run

        def loop_in(python: str, script: str, out: str, case: str = case) -> Callable[[], Dict[str, float]]:
            def run() -> Dict[str, float]:
                shutil.rmtree(out, ignore_errors=True)
                os.makedirs(out)
                return timed([python, "-c", script, root, out, case], env)

            return run

        peers: Dict[str, Callable[[], Dict[str, float]]] = {
            "loop": loop_in(sys.executable, LOOP, os.path.join(work, f"loop-{case}"))
        }
        if tf_python:
            peers["tf"] = loop_in(tf_python, TF_LOOP, os.path.join(work, f"tf-{case}"))
        for workers in worker_counts:
            peers[f"build-{workers}"] = build(workers, "build", root)
            peers[f"startup-{workers}"] = build(workers, "startup", tiny)
        results = rounds(peers, args.repeat)
        base = results["loop"]
        rows = [("Pillow + tfrecord loop (1 process)", base, None)]
        if tf_python:
            rows.append(("TensorFlow loop (1 process)", results["tf"], None))
        for workers in worker_counts:
            startup = results[f"startup-{workers}"]
            rows.append((f"tfrecord-io build, {workers} worker(s)", results[f"build-{workers}"], startup))
            rows.append((f"  Beam start-up (8 images), {workers} worker(s)", startup, None))
        for what, r, start in rows:
            print(f"| {case} " + _row(what, r, base, start))
    print(f"\nload average at end {os.getloadavg()[0]:.1f}; images in {work}")


if __name__ == "__main__":
    main()
