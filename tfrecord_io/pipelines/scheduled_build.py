"""A build entry point that takes everything as ``--flag=value`` options, for
schedulers that pass pipeline options that way (Airflow's Beam operators):

    python tfrecord_io/pipelines/scheduled_build.py --config=configs/datasets/speech.yaml \\
        --version=20261130T020000 --runner=FlinkRunner --flink_master=host:8081

``--config`` and ``--version`` (and ``--output``) are ours; every other flag goes to
Beam (``--s3_endpoint_url=...`` and the other S3 flags included).

Retries (schedulers rerun a failed task with the same ``--version``): after a failed
or killed attempt the build removes its leftovers and builds again; after a
successful one with the same config and inputs (fingerprint in ``tfrecord_io_info.json``)
it verifies the published shards and exits 0 without rewriting; a different config
or input under the same version is refused (exit 2). See ``tfrecord_io/pipelines/building/build_job.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

if __package__ in (None, ""):
    # Run as a file (py_file=...): Python put this file's folder, tfrecord_io/pipelines/,
    # first on sys.path, where its build/, report/, cli.py ... would shadow top-level
    # packages of those names; take it off, and put the checkout's root (the folder that
    # holds tfrecord_io/) first so ``tfrecord_io`` imports from this checkout, installed or not.
    _here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
    sys.path.insert(0, os.path.dirname(os.path.dirname(_here)))

from tfrecord_io.pipelines.cli import main as cli_main


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False
    )
    parser.add_argument("--config", required=True)
    parser.add_argument("--version")
    parser.add_argument("--output")
    args, beam_flags = parser.parse_known_args(argv)
    command = ["build", args.config, "--no-progress"]
    if args.version:
        command += ["--version", args.version]
    if args.output:
        command += ["--output", args.output]
    return cli_main(command + beam_flags)


if __name__ == "__main__":
    sys.exit(main())
