"""validate's work on 1,000,000 numeric records against the plain loop a user writes with
a description (issue 33): ``example_loader(path, None, description)`` + SHA-256 per file,
one process, against ``tfrecord-io validate`` (2 local workers) of the same shards and of a
one-record file (its fixed cost). Interleaved rounds, medians; wall and CPU seconds
(user+sys of the process and its children).

    python benchmarks/bench_validate_loop.py DATA_DIR [--rounds 3]

DATA_DIR: the 16 shards ``bench_jobs.py --records 1000000`` makes (``WORKDIR/data-1000000``;
its version folder is searched).
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import sys
import tempfile

from process_cpu import timed as timed_command

LOOP = r"""
import hashlib, sys
from tfrecord_io.format.reader import example_loader
description = {"label": "int", "scores": "float", "text": "byte"}
n = 0
for path in sys.argv[1:]:
    for example in example_loader(path, None, description):
        n += 1
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
print(n)
"""


def timed(cmd):
    """(wall s, CPU s of the command and every process it started: ``process_cpu.py``)."""
    done = timed_command(cmd)
    if done["rc"] != 0:
        raise RuntimeError(f"{' '.join(cmd[:5])} failed: {done['stderr'][-3000:]}")
    return done["wall"], done["cpu"]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("data")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    pattern = os.path.join(args.data, "**", "*.tfrecord*")
    shards = sorted(p for p in glob.glob(pattern, recursive=True) if not p.endswith(".index"))
    one = os.path.join(tempfile.mkdtemp(), "one.tfrecord")
    with open(shards[0], "rb") as src, open(one, "wb") as dst:  # the first record's frame
        head = src.read(12)
        length = int.from_bytes(head[:8], "little")
        dst.write(head + src.read(length + 4))
    cli = [sys.executable, "-m", "tfrecord_io", "validate", "--no-progress"]
    runs = {
        "loop (example_loader + description + SHA-256)": [sys.executable, "-c", LOOP, *shards],
        "tfrecord-io validate, 1,000,000 records": cli + shards,
        "tfrecord-io validate, 1 record": cli + [one],
    }
    for cmd in runs.values():  # warm the files and the imports
        timed(cmd)
    got = {name: [] for name in runs}
    for r in range(args.rounds):
        names = list(runs)[r % 3 :] + list(runs)[: r % 3]  # rotated, interleaved
        for name in names:
            got[name].append(timed(runs[name]))
    print(f"{len(shards)} shards, {args.rounds} interleaved rounds, load average {os.getloadavg()[0]:.1f}; medians")
    med = {name: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for name, v in got.items()}
    for name, (wall, cpu) in med.items():
        print(f"  {name:48s} wall {wall:6.2f} s   CPU {cpu:6.2f} s")
    loop = med["loop (example_loader + description + SHA-256)"]
    job = med["tfrecord-io validate, 1,000,000 records"]
    fixed = med["tfrecord-io validate, 1 record"]
    print(f"  loop / job, wall: {loop[0] / job[0]:.2f}x")
    print(f"  loop / job's work (job minus the 1-record job), wall: {loop[0] / (job[0] - fixed[0]):.2f}x")


if __name__ == "__main__":
    main()
