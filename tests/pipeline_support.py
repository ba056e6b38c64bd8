"""Helpers for the pipeline tests: local runner options and running the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List

from apache_beam.options.pipeline_options import PipelineOptions

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

IN_PROCESS = ["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory"]
TWO_WORKERS = ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def options(flags: List[str] = IN_PROCESS) -> PipelineOptions:
    return PipelineOptions(list(flags) + ["--default_sdk_harness_log_level=ERROR"])


def run_cli(*args: str, check: bool = False, timeout: int = 600) -> subprocess.CompletedProcess:
    """``python -m pipelines ARGS`` in a subprocess with this checkout first on the path."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        [sys.executable, "-m", "pipelines", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc
