"""Bad input at scale: a build of a million rows with bad ones among them, run twice.

Issue #21 asks that bad input at any scale be rejected rows with their reasons, written
by the workers, that counts in = written + rejected at 1,000,000 rows, and that a
rerun is byte-identical. The tests check each kind of bad row on small inputs; this
script checks the same at the scale where a launcher-side collection or a lost row
would show: it prints what it checked and exits 1 if any check fails.

The manifest: ``--rows`` rows over 1,000 tiny JPEGs (as ``bench_build.py --rows``),
with every ``--every``-th row made bad, in turn:

- ``missing``: a path to no file;
- ``truncated``: a JPEG cut after its first 120 bytes;
- ``bomb``: a PNG over the encoder's ``max_pixels`` (a decompression bomb);
- ``notimage``: a text file named ``.jpg``;
- ``directory``: a path that is a directory;
- ``nolabel``: an empty label cell;
- ``badlabel``: a label outside the vocabulary.

Each build runs through the CLI on 2 local workers (DirectRunner, multi_processing)
into its own output; then: ``rows_in`` is the manifest's row count, ``records +
rejected == rows_in``, ``rejected`` is the number of bad rows, every rejected row is a
bad one with a reason naming what failed, and the two builds' shards, indexes and
rejected files are byte-identical.

    python benchmarks/check_bad_rows.py [--rows 1000000] [--every 1000] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from typing import Dict, List

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_build import LABELS, make_rows

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ("missing", "truncated", "bomb", "notimage", "directory", "nolabel", "badlabel")
#: What each kind's rejection reason must say (lower case).
REASONS = {
    "missing": "no such file",
    "truncated": "truncated",
    "bomb": "decompression bomb",
    "notimage": "notimage.jpg",
    "directory": "is a directory",
    "nolabel": "label",
    "badlabel": "not-a-label",
}


def make_bad_media(root: str) -> Dict[str, str]:
    """The bad files under ``root/bad/``; ``{kind: path relative to root}``."""
    from PIL import Image

    bad = os.path.join(root, "bad")
    os.makedirs(bad, exist_ok=True)
    with open(os.path.join(root, "img", "0000.jpg"), "rb") as f:
        jpeg = f.read()
    with open(os.path.join(bad, "truncated.jpg"), "wb") as f:
        f.write(jpeg[:120])
    Image.new("RGB", (200, 200), (1, 2, 3)).save(os.path.join(bad, "bomb.png"))
    with open(os.path.join(bad, "notimage.jpg"), "w") as f:
        f.write("this is not an image\n")
    os.makedirs(os.path.join(bad, "directory.jpg"), exist_ok=True)
    return {
        "missing": "bad/no-such-file.jpg",
        "truncated": "bad/truncated.jpg",
        "bomb": "bad/bomb.png",
        "notimage": "bad/notimage.jpg",
        "directory": "bad/directory.jpg",
    }


def make_manifest(good: str, every: int) -> tuple:
    """A copy of the good manifest with every ``every``-th row bad; its path and the
    ``{row id: kind}`` of the bad rows."""
    root = os.path.dirname(good)
    paths = make_bad_media(root)
    out = os.path.join(root, f"manifest-bad-every-{every}.csv")
    bad: Dict[str, str] = {}
    with open(good, newline="") as src, open(out + ".tmp", "w", newline="") as dst:
        reader, writer = csv.reader(src), csv.writer(dst)
        writer.writerow(next(reader))
        for i, (row_id, path, label) in enumerate(reader):
            if i % every == every - 1:
                kind = KINDS[(i // every) % len(KINDS)]
                bad[row_id] = kind
                if kind in paths:
                    path = paths[kind]
                elif kind == "nolabel":
                    label = ""
                else:
                    label = "not-a-label"
            writer.writerow([row_id, path, label])
    os.replace(out + ".tmp", out)
    return out, bad


def write_config(path: str, manifest: str, out: str) -> None:
    cfg = {
        "name": "rows",
        "input": {"manifest": manifest},
        "key": "id",
        "columns": {
            "image": {"encoder": "image", "column": "path", "max_pixels": 5000},
            "label": {"encoder": "label", "vocabulary": LABELS},
        },
        "splits": {"train": 0.8, "test": 0.2},
        "sharding": {"num_shards": 4},
        "output": {"dir": out, "version": "v1"},
    }
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)


def build(config: str) -> float:
    flags = ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "tfrecord_io.pipelines", "build", config, "--no-progress", *flags],
        env=env,
        capture_output=True,
        text=True,
    )
    took = time.perf_counter() - t
    if proc.returncode != 0:
        sys.exit(f"the build failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return took


def version_digests(version_dir: str) -> Dict[str, str]:
    """SHA-256 of every file of a version but our metadata (which holds run ids and times)."""
    out = {}
    for base, _, names in os.walk(version_dir):
        for name in names:
            if name == "tfrecord_io_info.json":
                continue
            path = os.path.join(base, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, version_dir)] = hashlib.sha256(f.read()).hexdigest()
    return out


def rejected_rows(version_dir: str) -> List[dict]:
    rows = []
    for name in sorted(os.listdir(version_dir)):
        if name.startswith("rejected-"):
            with open(os.path.join(version_dir, name)) as f:
                rows += [json.loads(line) for line in f if line.strip()]
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--every", type=int, default=1000, help="every N-th row is bad")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="check-bad-rows-")
    os.makedirs(work, exist_ok=True)
    manifest, bad = make_manifest(make_rows(work, args.rows), args.every)
    print(
        f"{args.rows:,} rows, {len(bad):,} of them bad ({dict(Counter(bad.values()))}), load {os.getloadavg()[0]:.1f}"
    )
    failures: List[str] = []

    def check(ok: bool, what: str) -> None:
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            failures.append(what)

    versions = []
    for run in ("a", "b"):
        out = os.path.join(work, f"out-{run}")
        shutil.rmtree(out, ignore_errors=True)
        config = os.path.join(work, f"bad-{run}.yaml")
        write_config(config, manifest, out)
        took = build(config)
        version = os.path.join(out, "v1")
        with open(os.path.join(version, "tfrecord_io_info.json")) as f:
            info = json.load(f)
        print(
            f"build {run}: {took:.1f} s; rows_in {info['rows_in']:,}, "
            f"records {info['records']:,}, rejected {info['rejected']:,}"
        )
        check(info["rows_in"] == args.rows, f"rows_in == {args.rows:,} (the manifest's rows)")
        check(info["records"] + info["rejected"] == info["rows_in"], "records + rejected == rows_in")
        check(info["rejected"] == len(bad), f"rejected == {len(bad):,} (the bad rows)")
        rejected = rejected_rows(version)
        ids = [r["row"]["id"] for r in rejected]
        check(len(ids) == len(set(ids)) == info["rejected"], "each rejected row written once")
        check(set(ids) == set(bad), "the rejected rows are exactly the bad ones")
        wrong = [
            i for r in rejected for i in [r["row"]["id"]] if REASONS[bad.get(i, "missing")] not in r["reason"].lower()
        ]
        check(not wrong, f"every reason names what failed ({len(wrong)} do not{': ' + wrong[0] if wrong else ''})")
        versions.append(version)
    a, b = (version_digests(v) for v in versions)
    check(
        bool(a) and a == b, f"the rerun is byte-identical ({len(a)} files: shards, indexes, rejected rows, TFDS files)"
    )
    print(f"\n{'all checks passed' if not failures else f'{len(failures)} check(s) failed'}; data in {work}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
