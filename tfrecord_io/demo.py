"""A small write-then-read demonstration of the format core.

Writes 1,000 Examples (a label, a float vector, a caption) to a TFRecord file with an
index, reads them back in 4 shards with both CRCs checked, and prints a summary and
one decoded record. The dataset-build job (``tfrecord-io build``) supersedes this.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import List, Optional

import numpy as np

from .codec import parse_example
from .index import load_index
from .reader import tfrecord_iterator
from .writer import TFRecordWriter


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfrecord_io.demo", description=__doc__)
    parser.add_argument("--out", default=None, help="directory to write into (default: a temporary one)")
    parser.add_argument("--records", type=int, default=1000)
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="tfrecord-io-demo-")
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, "demo.tfrecord")
    rng = np.random.default_rng(0)
    t0 = time.perf_counter()
    with TFRecordWriter(path, atomic=True, index_path=path + ".index") as writer:
        for i in range(args.records):
            writer.write(
                {
                    "label": (i % 10, "int"),
                    "embedding": (rng.standard_normal(8).astype(np.float32), "float"),
                    "caption": (f"record {i}: ein Beispiel, un exemple, 例子", "byte"),
                }
            )
    t1 = time.perf_counter()
    index = load_index(path + ".index")
    counts = [sum(1 for _ in tfrecord_iterator(path, path + ".index", shard=(s, 4))) for s in range(4)]
    t2 = time.perf_counter()
    first = parse_example(next(iter(tfrecord_iterator(path))), {"label": "int", "embedding": "float", "caption": "byte"})
    print(f"wrote {args.records} records ({os.path.getsize(path):,} bytes) to {path} in {t1 - t0:.2f}s")
    print(f"index: {len(index)} entries; read back in 4 shards: {counts} = {sum(counts)} records in {t2 - t1:.2f}s")
    print("first record:")
    print(f"  label     = {int(first['label'][0])}")
    print(f"  embedding = {np.array2string(first['embedding'], precision=3)}")
    print(f"  caption   = {first['caption'].decode('utf-8')}")
    return 0 if sum(counts) == args.records else 1


if __name__ == "__main__":
    raise SystemExit(main())
