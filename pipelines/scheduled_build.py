"""A build entry point that takes everything as ``--flag=value`` options, for
schedulers that pass pipeline options that way (Airflow's Beam operators):

    python pipelines/scheduled_build.py --config=configs/datasets/speech.yaml \\
        --version=20261130T020000 --runner=FlinkRunner --flink_master=host:8081

``--config`` and ``--version`` (and ``--output``) are ours; every other flag goes to
Beam (``--s3_endpoint_url=...`` and the other S3 flags included).

Retries (schedulers rerun a failed task with the same ``--version``): after a failed
or killed attempt the build removes its leftovers and builds again; after a
successful one with the same config and inputs (fingerprint in ``dataset_info.json``)
it verifies the published shards and exits 0 without rewriting; a different config
or input under the same version is refused (exit 2). See ``pipelines/build.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

if __package__ in (None, ""):  # run as a file (py_file=...): make the repository importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipelines.cli import main as cli_main


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
