"""Format-core benchmark: ours vs the ``tfrecord`` package, Beam's ``_TFRecordUtil`` and
(in a separate process, when available) TensorFlow, all measured in one run.

Prints records/s and MB/s (payload bytes) per case and the ratios the issue's targets
are stated in. Timings are medians of ``--repeat`` runs over the same files; nothing
here is asserted (timings are never tested).

    python benchmarks/bench_core.py               # 1,000,000 small + 2,000 x 150 KB records
    python benchmarks/bench_core.py --small 100000  # quicker
    TF_PYTHON=/opt/tfenv/bin/python python benchmarks/bench_core.py   # + TensorFlow peers

TensorFlow runs in its own interpreter (``benchmarks/_bench_tf.py``) because it and
the ``tfrecord`` package cannot be imported in one process; it reads the same files
and parses the same batches.
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
import time
from typing import Callable, Dict, List, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tfrecord_io.format import codec, framing, reader, writer

DESCRIPTION = {"label": "int", "floats": "float", "text": "byte"}
BATCH = 1024
LARGE_SIZE = 150 * 1024


def small_dicts(n: int, seed: int = 0) -> List[dict]:
    """``n`` dicts in the ``tfrecord`` package's ``{key: (value, type)}`` form (~121 B)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 1000, n).tolist()
    floats = rng.random((n, 8), dtype=np.float32).tolist()
    words = [b"lorem", b"ipsum", b"dolor", b"amet", b"tfrecord", b"beam", b"split"]
    out = []
    for i in range(n):
        text = b" ".join(words[(i + k) % len(words)] for k in range(7))[:40]
        out.append({"label": (labels[i], "int"), "floats": (floats[i], "float"), "text": (text, "byte")})
    return out


CLOCK = time.perf_counter  # --cpu-time: time.process_time (user + system CPU seconds)


def timeit_group(cases: Dict[str, Callable[[], int]], repeat: int) -> Dict[str, float]:
    """Median seconds per case, the cases taking turns in each round, so that a change
    of load on a shared machine hits every case of a comparison alike."""
    times: Dict[str, List[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            gc.collect()
            t0 = CLOCK()
            fn()
            times[name].append(CLOCK() - t0)
    return {name: statistics.median(v) for name, v in times.items()}


class Table:
    def __init__(self) -> None:
        self.rows: Dict[str, tuple] = {}

    def add(self, name: str, seconds: float, records: int, nbytes: int) -> None:
        self.rows[name] = (seconds, records, nbytes)
        print(f"  {name:<52} {records / seconds:>12,.0f} rec/s {nbytes / seconds / 1e6:>10,.1f} MB/s", flush=True)

    def rate(self, name: str) -> Optional[float]:
        r = self.rows.get(name)
        return None if r is None else r[1] / r[0]

    def mbs(self, name: str) -> Optional[float]:
        r = self.rows.get(name)
        return None if r is None else r[2] / r[0] / 1e6


# ----------------------------------------------------------------- readers


def ours_iter(path: str) -> int:
    n = 0
    for _ in reader.tfrecord_iterator(path):
        n += 1
    return n


def pkg_iter(path: str) -> int:
    from tfrecord.reader import tfrecord_iterator

    n = 0
    for _ in tfrecord_iterator(path):
        n += 1
    return n


def beam_util():
    """Beam's ``_TFRecordUtil``, its CRC hook given a hardware CRC32C.

    Beam looks for python-snappy, google-crc32c or crcmod; none is installed here, so
    we hand it the ``crc32c`` package (google-crc32c's speed class): Beam at its best.
    """
    from apache_beam.io import tfrecordio
    from crc32c import crc32c

    if not getattr(tfrecordio._default_crc32c_fn, "fn", None):
        tfrecordio._default_crc32c_fn.fn = crc32c
    return tfrecordio._TFRecordUtil


def beam_iter(path: str) -> int:
    _TFRecordUtil = beam_util()

    read = _TFRecordUtil.read_record
    n = 0
    with open(path, "rb", buffering=1 << 20) as f:
        while read(f) is not None:
            n += 1
    return n


def page_cache(path: str) -> int:
    """Bytes of the file read through the page cache into one reused buffer."""
    buf = bytearray(1 << 20)
    total = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            k = f.readinto(buf)
            if not k:
                return total
            total += k


def ours_loader(path: str) -> int:
    n = 0
    for _ in reader.tfrecord_loader(path, None, DESCRIPTION):
        n += 1
    return n


def pkg_loader(path: str) -> int:
    from tfrecord.reader import tfrecord_loader

    n = 0
    for _ in tfrecord_loader(path, None, DESCRIPTION):
        n += 1
    return n


def upb_numpy_loop(records: List[bytes]) -> int:
    """The plain baseline: protobuf (upb) parse + NumPy per record, no framing."""
    ex = codec.Example()
    for r in records:
        ex.ParseFromString(r)
        f = ex.features.feature
        np.fromiter(f["label"].int64_list.value, np.int64)
        np.fromiter(f["floats"].float_list.value, np.float32)
        f["text"].bytes_list.value[0]
    return len(records)


def batched(records: List[bytes]) -> int:
    for i in range(0, len(records), BATCH):
        codec.parse_examples_batch(records[i : i + BATCH], DESCRIPTION)
    return len(records)


# ----------------------------------------------------------------- writers


def ours_write_dicts(path: str, dicts: List[dict]) -> int:
    with writer.TFRecordWriter(path) as w:
        for d in dicts:
            w.write(d)
    return len(dicts)


def pkg_write_dicts(path: str, dicts: List[dict]) -> int:
    from tfrecord.writer import TFRecordWriter

    w = TFRecordWriter(path)
    for d in dicts:
        w.write(d)
    w.close()
    return len(dicts)


def ours_write_bytes(path: str, records: List[bytes]) -> int:
    with writer.RecordWriter(path) as w:
        for i in range(0, len(records), 4096):
            w.write_records(records[i : i + 4096])
    return len(records)


def ours_write_bytes_each(path: str, records: List[bytes]) -> int:
    with writer.RecordWriter(path) as w:
        for r in records:
            w.write_record(r)
    return len(records)


def beam_write_bytes(path: str, records: List[bytes]) -> int:
    _TFRecordUtil = beam_util()

    write = _TFRecordUtil.write_record
    with open(path, "wb", buffering=1 << 20) as f:
        for r in records:
            write(f, r)
    return len(records)


# ----------------------------------------------------------------- TensorFlow


def tf_python() -> Optional[str]:
    exe = os.environ.get("TF_PYTHON")
    if exe:
        return exe
    if os.path.exists("/opt/tfenv/bin/python"):
        return "/opt/tfenv/bin/python"
    return None


def run_tf(small: str, large: str, repeat: int) -> Optional[dict]:
    exe = tf_python()
    if not exe:
        print("  (TensorFlow peers skipped: set TF_PYTHON to a python with tensorflow)")
        return None
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_bench_tf.py")
    proc = subprocess.run(
        [exe, script, small, large, str(BATCH), str(repeat), "cpu" if CLOCK is time.process_time else "wall"],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
    )
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        print(f"  (TensorFlow peers skipped: {exe} failed: {tail[0]})")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=1_000_000, help="number of small Examples")
    ap.add_argument("--large", type=int, default=2_000, help="number of 150 KB records")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case (median)")
    ap.add_argument("--no-tf", action="store_true", help="skip the TensorFlow process")
    ap.add_argument("--dir", default=None, help="where to write the data (default: a temp dir)")
    ap.add_argument(
        "--cpu-time",
        action="store_true",
        help="time CPU seconds of the process (all threads) instead of wall-clock: steadier on a "
        "shared machine; TensorFlow's threads then count in full",
    )
    args = ap.parse_args()
    global CLOCK
    if args.cpu_time:
        CLOCK = time.process_time

    speed = "C speedups" if framing.HAVE_SPEEDUPS else "pure Python (no C speedups built)"
    crc_impl = None
    if framing.HAVE_SPEEDUPS:
        from tfrecord_io import _speedups

        crc_impl = _speedups.CRC_IMPL
    clock = "CPU time (process_time)" if args.cpu_time else "wall-clock"
    print(
        f"tfrecord_io core: {speed} (CRC32C: {crc_impl or 'crc32c package'}); python {sys.version.split()[0]}; {clock}"
    )
    tmp = tempfile.TemporaryDirectory(dir=args.dir)
    d = tmp.name
    small_path, large_path = os.path.join(d, "small.tfrecord"), os.path.join(d, "large.tfrecord")

    dicts = small_dicts(args.small)
    records = [codec.serialize_example(x) for x in dicts]
    small_bytes = sum(map(len, records))
    n = len(records)
    print(f"\nsmall: {n:,} Examples, mean payload {small_bytes / n:.0f} B")
    with writer.RecordWriter(small_path) as w:
        w.write_records(records)
    rng = np.random.default_rng(1)
    large_records = [rng.bytes(LARGE_SIZE) for _ in range(args.large)]
    large_bytes = sum(map(len, large_records))
    with writer.RecordWriter(large_path) as w:
        w.write_records(large_records)
    assert ours_iter(small_path) == n == pkg_iter(small_path) == beam_iter(small_path)

    t = Table()
    rep = args.repeat
    nl = args.large
    out = os.path.join(d, "out.tfrecord")

    def group(title: str, cases: Dict[str, tuple], repeat: int) -> None:
        print(title)
        secs = timeit_group({name: fn for name, (fn, _, _) in cases.items()}, repeat)
        for name, (_, count, nbytes) in cases.items():
            t.add(name, secs[name], count, nbytes)

    group(
        "read, raw records (ours and Beam check both CRCs; the tfrecord package checks none)",
        {
            "read small: ours tfrecord_iterator": (lambda: ours_iter(small_path), n, small_bytes),
            "read small: tfrecord pkg tfrecord_iterator": (lambda: pkg_iter(small_path), n, small_bytes),
            "read small: Beam _TFRecordUtil.read_record loop": (lambda: beam_iter(small_path), n, small_bytes),
        },
        rep,
    )
    group(
        "read, 150 KB records (short runs: more rounds)",
        {
            "read large: page cache (readinto, 1 MiB)": (lambda: page_cache(large_path), nl, large_bytes),
            "read large: ours tfrecord_iterator": (lambda: ours_iter(large_path), nl, large_bytes),
            "read large: tfrecord pkg tfrecord_iterator": (lambda: pkg_iter(large_path), nl, large_bytes),
            "read large: Beam _TFRecordUtil.read_record loop": (lambda: beam_iter(large_path), nl, large_bytes),
        },
        max(rep, 7),
    )
    group(
        "parse to NumPy dicts (description: int label, 8 floats, bytes text)",
        {
            "parse per record: ours tfrecord_loader": (lambda: ours_loader(small_path), n, small_bytes),
            "parse per record: tfrecord pkg tfrecord_loader": (lambda: pkg_loader(small_path), n, small_bytes),
            "parse per record: upb + NumPy loop (no framing)": (lambda: upb_numpy_loop(records), n, small_bytes),
            f"parse batched: ours parse_examples_batch ({BATCH})": (lambda: batched(records), n, small_bytes),
        },
        rep,
    )
    group(
        "write",
        {
            "write dicts: ours TFRecordWriter.write": (lambda: ours_write_dicts(out, dicts), n, small_bytes),
            "write dicts: tfrecord pkg TFRecordWriter.write": (lambda: pkg_write_dicts(out, dicts), n, small_bytes),
            "write bytes: ours RecordWriter.write_records": (lambda: ours_write_bytes(out, records), n, small_bytes),
            "write bytes: ours RecordWriter.write_record": (
                lambda: ours_write_bytes_each(out, records),
                n,
                small_bytes,
            ),
            "write bytes: Beam _TFRecordUtil.write_record": (lambda: beam_write_bytes(out, records), n, small_bytes),
        },
        rep,
    )
    os.unlink(out)

    if not args.no_tf:
        print("TensorFlow (separate process, same files and batches)")
        tf = run_tf(small_path, large_path, rep)
        if tf:
            for name, (secs, count, nbytes) in tf.items():
                t.add(name, secs, count, nbytes)

    print("\nratios (targets from issue 2)")

    def ratio(label: str, a: str, b: str, target: float, mb: bool = False) -> None:
        ra = t.mbs(a) if mb else t.rate(a)
        rb = t.mbs(b) if mb else t.rate(b)
        if ra is None or rb is None:
            print(f"  {label:<58} n/a (peer not measured)")
            return
        r = ra / rb
        print(f"  {label:<58} {r:6.2f}x  target >= {target}x  {'MET' if r >= target else 'not met'}")

    ratio(
        "raw read small, both CRCs / Beam loop",
        "read small: ours tfrecord_iterator",
        "read small: Beam _TFRecordUtil.read_record loop",
        2.0,
    )
    ratio(
        "raw read small, both CRCs / tfrecord pkg iterator",
        "read small: ours tfrecord_iterator",
        "read small: tfrecord pkg tfrecord_iterator",
        1.2,
    )
    ratio(
        "raw read large / page cache",
        "read large: ours tfrecord_iterator",
        "read large: page cache (readinto, 1 MiB)",
        0.7,
        mb=True,
    )
    ratio(
        "per-record parse / tfrecord pkg loader",
        "parse per record: ours tfrecord_loader",
        "parse per record: tfrecord pkg tfrecord_loader",
        3.0,
    )
    ratio(
        "batched parse / tf.io.parse_example",
        f"parse batched: ours parse_examples_batch ({BATCH})",
        f"parse batched: tf.io.parse_example ({BATCH})",
        0.5,
    )
    ratio(
        "write from dicts / tfrecord pkg",
        "write dicts: ours TFRecordWriter.write",
        "write dicts: tfrecord pkg TFRecordWriter.write",
        1.8,
    )
    ratio(
        "write bytes / Beam write_record",
        "write bytes: ours RecordWriter.write_records",
        "write bytes: Beam _TFRecordUtil.write_record",
        1.0,
    )
    ratio(
        "write bytes / tf.io.TFRecordWriter",
        "write bytes: ours RecordWriter.write_records",
        "write bytes: tf.io.TFRecordWriter",
        1.0,
    )
    tmp.cleanup()


if __name__ == "__main__":
    main()
