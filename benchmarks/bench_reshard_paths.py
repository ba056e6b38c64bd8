"""``reshard``'s batched path before and after issue 33: no ``--num-shards`` (one Beam
element per record, then one per batch) and ``--where`` (a protobuf parse per record,
then the compiled parser per batch), in one run, interleaved.

"Before" is this repository at ``--before`` (a git revision), exported with ``git
archive`` into a temporary folder with this checkout's compiled core copied in; "after"
is this checkout. Each case runs the CLI (``python -m tfrecord_io.pipelines reshard``,
DirectRunner, 2 workers, multi_processing) in its own process, before and after
alternately, ``--repeat`` times; wall time and CPU seconds (the process and its
children) per run, and the median of each. The input is ``--records`` small Examples
(an int64 ``label`` of 10 classes, 8 float ``scores``, a 40-byte ``text``) in 16 files
without indexes (so neither case takes the slice path).

    python benchmarks/bench_reshard_paths.py [--records 1000000] [--repeat 3] [--before REV]
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

from process_cpu import timed as timed_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

LOCAL_FLAGS = ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]
CASES = {
    "no --num-shards": [],
    "--num-shards 4 --where label=3": ["--num-shards", "4", "--where", "label=3"],
    "no --num-shards --where label=3": ["--where", "label=3"],
}


def make_inputs(folder: str, n: int, files: int = 16) -> List[str]:
    import numpy as np

    from tfrecord_io.format.codec import serialize_example
    from tfrecord_io.format.writer import RecordWriter

    os.makedirs(folder, exist_ok=True)
    scores = np.random.default_rng(0).random((4096, 8), dtype=np.float32)
    paths = []
    for f in range(files):
        path = os.path.join(folder, f"in-{f:02d}.tfrecord")
        first, count = f * n // files, (f + 1) * n // files - f * n // files
        with RecordWriter(path) as w:  # no index: the batched path
            w.write_records(
                serialize_example(
                    {
                        "label": [(first + i) % 10],
                        "scores": scores[(first + i) % 4096],
                        "text": f"record {first + i:>12} of the benchmark...".encode()[:40].ljust(40, b"."),
                    }
                )
                for i in range(count)
            )
        paths.append(path)
    return paths


def export_before(rev: str, into: str) -> str:
    """The repository at ``rev`` in ``into``, with this checkout's compiled core."""
    archive = subprocess.run(["git", "-C", REPO, "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    for so in glob.glob(os.path.join(REPO, "tfrecord_io", "_speedups*.so")):
        shutil.copy(so, os.path.join(into, "tfrecord_io"))
    return into


def run(tree: str, inputs: List[str], out: str, extra: List[str]) -> Tuple[float, float]:
    """One reshard through the CLI of ``tree``: (wall s, CPU s of it and its children)."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ, PYTHONPATH=tree)
    done = timed_command(
        [
            sys.executable,
            "-m",
            "tfrecord_io.pipelines",
            "reshard",
            *inputs,
            "--output",
            f"{out}/part",
            "--no-progress",
            *extra,
            *LOCAL_FLAGS,
        ],
        env=env,
        cwd=tree,
    )
    if done["rc"] != 0:
        raise RuntimeError(f"reshard with {tree} failed: {done['stderr'][-3000:]}")
    return done["wall"], done["cpu"]  # CPU of it and every process it started: process_cpu.py


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", default="3b21dc7", help="git revision of the code before (default: 3b21dc7)")
    parser.add_argument("--workdir", help="keep inputs here (default: a temporary folder)")
    args = parser.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="bench-reshard-")
    inputs = sorted(glob.glob(os.path.join(work, "in", "*.tfrecord"))) or make_inputs(
        os.path.join(work, "in"), args.records
    )
    trees = {"before": export_before(args.before, tempfile.mkdtemp(prefix="bench-before-")), "after": REPO}
    print(
        f"{args.records:,} records in {len(inputs)} files, {sum(map(os.path.getsize, inputs)) / 1e6:.0f} MB; "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    results: Dict[Tuple[str, str], List[Tuple[float, float]]] = {}
    for name in inputs:  # warm the page cache
        with open(name, "rb") as f:
            while f.read(1 << 24):
                pass
    for rep in range(args.repeat):
        for case, extra in CASES.items():
            for which in ("before", "after") if rep % 2 == 0 else ("after", "before"):
                got = run(trees[which], inputs, os.path.join(work, "out"), extra)
                results.setdefault((case, which), []).append(got)
                print(f"  {case:35s} {which:6s} wall {got[0]:6.2f} s  CPU {got[1]:6.2f} s", flush=True)
    print("\n| case | before wall (CPU) s | after wall (CPU) s | wall ratio | CPU ratio |\n|---|---|---|---|---|")
    for case in CASES:
        b, a = results[(case, "before")], results[(case, "after")]
        bw, bc = statistics.median(x[0] for x in b), statistics.median(x[1] for x in b)
        aw, ac = statistics.median(x[0] for x in a), statistics.median(x[1] for x in a)
        print(f"| {case} | {bw:.2f} ({bc:.2f}) | {aw:.2f} ({ac:.2f}) | {bw / aw:.2f}x | {bc / ac:.2f}x |")
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    shutil.rmtree(trees["before"], ignore_errors=True)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
