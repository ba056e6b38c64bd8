"""tfrecord2idx: write the index (``offset size`` per record) of TFRecord files.

    tfrecord2idx FILE INDEX     index one file
    tfrecord2idx DIR            index every *.tfrecord in DIR as *.tfindex

Every record is read with both CRCs checked first; the index is written atomically
only when the whole file is valid, so a corrupt file exits non-zero and leaves no
index (an existing index stays as it was). Compatible with the ``tfrecord`` package's
tool and with NVIDIA DALI.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional, Tuple

from ..errors import TFRecordError
from ..format.index import create_index


def _jobs(source: str, index: Optional[str]) -> List[Tuple[str, str]]:
    if os.path.isdir(source):
        if index is not None:
            raise SystemExit("tfrecord2idx: give only a directory, or a FILE and an INDEX")
        names = sorted(n for n in os.listdir(source) if n.endswith(".tfrecord"))
        return [(os.path.join(source, n), os.path.join(source, n[: -len(".tfrecord")] + ".tfindex")) for n in names]
    if index is None:
        raise SystemExit("tfrecord2idx: FILE needs an INDEX path (or give a directory)")
    return [(source, index)]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tfrecord2idx",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("source", help="a TFRecord file, or a directory of *.tfrecord files")
    parser.add_argument("index", nargs="?", help="the index file to write (with FILE)")
    parser.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    args = parser.parse_args(argv)
    if not os.path.exists(args.source):
        print(f"tfrecord2idx: {args.source}: no such file or directory", file=sys.stderr)
        return 2
    jobs = _jobs(args.source, args.index)
    failures = 0
    total = 0
    for data_path, index_path in jobs:
        try:
            index = create_index(data_path, index_path)
        except TFRecordError as err:
            failures += 1
            print(f"tfrecord2idx: error: {err} (no index written)", file=sys.stderr)
            continue
        total += len(index)
        if not args.quiet:
            print(f"{data_path}: {len(index)} records -> {index_path}")
    if not args.quiet and len(jobs) != 1:
        print(f"indexed {len(jobs) - failures} of {len(jobs)} files, {total} records")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
