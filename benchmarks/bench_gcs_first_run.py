"""The first run on gs:// as a user makes it (issue 30's goal: under 60 s here): a build
of an image folder on gs:// into gs://, ``validate`` of what it wrote, and a PyTorch read
of the built dataset (``from_dataset("gs://...")``), each a fresh process, against
fake-gcs-server on 127.0.0.1 (``STORAGE_EMULATOR_HOST``; the test harness's proxy in
front, as in tests/gcs_support.py).

Data: 36 small JPEGs over three labels plus one broken file (the folder of
tests/test_gcs.py), two shards, splits train/validation. The build runs on the local
runner's default workers (an object-store input is not sized, so 2 workers). Each step
is timed from outside (wall, and CPU of the process and everything it started:
``process_cpu.py``); ``--repeat`` runs the three steps again into a new output
directory and the median is shown.

    python benchmarks/bench_gcs_first_run.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from typing import Dict, List

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import yaml  # noqa: E402
from process_cpu import timed  # noqa: E402

from tests.gcs_support import find_fake_gcs_server, start_fake_gcs_server  # noqa: E402

LABELS = ("cat", "dog", "owl")
TORCH_READ = r"""
import sys
from tfrecord_io.torch import from_dataset
n = sum(len(batch["label"]) for batch in from_dataset(sys.argv[1], "train", batch_size=8, features=["label"]))
assert n > 0, n
print(n)
"""


def image_folder(root: str, n: int = 36) -> str:
    from PIL import Image

    for i in range(n):
        label = LABELS[i % 3]
        os.makedirs(os.path.join(root, label), exist_ok=True)
        Image.new("RGB", (16, 12), (7 * i % 256, 90, 250 - 6 * i)).save(os.path.join(root, label, f"im{i:03d}.jpg"))
    with open(os.path.join(root, "owl", "broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 not really a jpeg")
    return root


def config(path: str, directory: str, out: str) -> str:
    cfg = {
        "name": "pets",
        "input": {"directory": directory},
        "columns": {
            "image": {"encoder": "image", "column": "path"},
            "label": {"encoder": "label", "vocabulary": list(LABELS)},
        },
        "splits": {"train": 0.75, "validation": 0.25},
        "sharding": {"num_shards": 2},
        "output": {"dir": out, "version": "v1"},
    }
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    binary = find_fake_gcs_server()
    if not binary:
        sys.exit("fake-gcs-server not found: run `bash scripts/setup-gcs` (or set TFRECORD_IO_FAKE_GCS_SERVER)")
    work = tempfile.mkdtemp(prefix="bench-gcs-")
    server = start_fake_gcs_server(binary, work)
    try:
        env = dict(os.environ, **server.env(), PYTHONPATH=REPO)
        bucket = "gs://" + server.make_bucket()
        server.upload_tree(image_folder(os.path.join(work, "images")), bucket + "/images")
        steps: Dict[str, List[Dict[str, float]]] = {"build": [], "validate": [], "torch read": []}
        for r in range(args.repeat):
            out = f"{bucket}/ds{r}"
            cfg = config(os.path.join(work, f"c{r}.yaml"), bucket + "/images", out)
            commands = {
                "build": ["tfrecord-io", "build", cfg, "--no-progress"],
                "validate": ["tfrecord-io", "validate", out, "--no-progress"],
                "torch read": [sys.executable, "-c", TORCH_READ, out],
            }
            for name, cmd in commands.items():
                result = timed(cmd, env=env, cwd=work)
                if result["rc"] != 0:
                    sys.exit(f"{name} failed ({result['rc']}): {result['stderr'][-3000:]}")
                steps[name].append(result)
            total = sum(steps[n][-1]["wall"] for n in steps)
            print(f"round {r}: " + ", ".join(f"{n} {steps[n][-1]['wall']:.1f} s" for n in steps) + f"; {total:.1f} s")
        print(f"\n36 images on fake-gcs-server, {args.repeat} rounds, medians; load average {os.getloadavg()[0]:.1f}\n")
        print("| step | wall s | CPU s |")
        print("|---|---:|---:|")
        for name, runs in steps.items():
            wall = statistics.median(x["wall"] for x in runs)
            cpu = statistics.median(x["cpu"] for x in runs)
            print(f"| {name} | {wall:.1f} | {cpu:.1f} |")
        totals = [sum(steps[n][i]["wall"] for n in steps) for i in range(args.repeat)]
        print(f"| all three (goal < 60 s) | {statistics.median(totals):.1f} | |")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
