"""Helpers for the pipeline tests: local runner options and running the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Dict, List, Optional

from apache_beam.options.pipeline_options import PipelineOptions

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

IN_PROCESS = ["--runner=DirectRunner", "--direct_num_workers=1", "--direct_running_mode=in_memory"]
TWO_WORKERS = ["--runner=DirectRunner", "--direct_num_workers=2", "--direct_running_mode=multi_processing"]


def options(flags: List[str] = IN_PROCESS) -> PipelineOptions:
    return PipelineOptions(list(flags) + ["--default_sdk_harness_log_level=ERROR"])


def build_config(config_path: str, out, version: str, **extra: Any) -> Dict[str, Any]:
    """A build config (``load_config``) writing version ``version`` under ``out``, with
    more ``dotted.key=value`` overrides as keyword arguments (``sharding__num_shards`` is
    not a thing: pass ``**{"sharding.num_shards": 4}``)."""
    from tfrecord_io.pipelines.building.build_config import load_config

    overrides = [("output.dir", str(out)), ("output.version", version), *extra.items()]
    return load_config(config_path, overrides)


def cli_command(*args: str) -> List[str]:
    """The argv of ``tfrecord-io ARGS`` as a user runs it: ``python -m tfrecord_io.pipelines``."""
    return [sys.executable, "-m", "tfrecord_io.pipelines", *args]


def cli_env(log_dir: Optional[str] = None, **extra: str) -> Dict[str, str]:
    """This environment with the checkout first on ``PYTHONPATH`` (the subprocess imports
    the code under test, not an installed copy) and, with ``log_dir``, the job logs there
    (``TFRECORD_IO_LOG_DIR``) instead of under ``~/.cache``."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    if log_dir is not None:
        env["TFRECORD_IO_LOG_DIR"] = str(log_dir)
    return env


def run_cli(
    *args: str,
    check: bool = False,
    timeout: int = 600,
    cwd: Optional[str] = None,
    log_dir: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
) -> subprocess.CompletedProcess:
    """Run ``tfrecord-io ARGS`` in a subprocess to the end (see :func:`cli_env`); stdout and
    stderr captured as text. ``check``: fail with both shown unless it exits 0."""
    proc = subprocess.run(
        cli_command(*args),
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env if env is not None else cli_env(log_dir),
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc


def start_cli(
    *args: str,
    cwd: Optional[str] = None,
    log_dir: Optional[str] = None,
    env: Optional[Dict[str, str]] = None,
    capture: bool = True,
    **popen: Any,
) -> subprocess.Popen:
    """Start ``tfrecord-io ARGS`` in a subprocess and return at once (for the tests that
    kill or signal a running job). ``capture``: stdout and stderr as text pipes, else
    both discarded. ``popen``: more ``subprocess.Popen`` arguments (``start_new_session``,
    ``preexec_fn`` ...)."""
    stream = subprocess.PIPE if capture else subprocess.DEVNULL
    return subprocess.Popen(
        cli_command(*args),
        cwd=cwd,
        env=env if env is not None else cli_env(log_dir),
        stdout=stream,
        stderr=stream,
        text=True,
        **popen,
    )


def wait_for_file(element: Any, path: str, timeout: float = 300.0) -> Any:
    """A pipeline stage that holds its element until ``path`` exists (or ``timeout``):
    the fault tests put it after a job's last real stage to signal the launcher while
    the job is still running, at a point of their choosing."""
    import time

    deadline = time.monotonic() + timeout
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.05)
    return element


def write_rows_manifest(path, ids) -> None:
    """A JSON-lines manifest of rows ``{"id": i, "text": "t<i>"}`` for ``ids``: the small
    keyed dataset of the grow tests on object stores (tests/test_grow_s3.py, _gcs.py)."""
    import json

    with open(path, "w", encoding="utf-8") as f:
        f.write("".join(json.dumps({"id": i, "text": f"t{i}"}) + "\n" for i in ids))


def write_rows_config(tmp_path, name: str, out: str) -> tuple:
    """The build config of those rows (key ``id``, two splits, two shards) writing to
    ``out``, over ``tmp_path/m.jsonl`` with ids 0-59: (manifest path, config path)."""
    import yaml

    manifest = tmp_path / "m.jsonl"
    write_rows_manifest(manifest, range(60))
    cfg = {
        "name": name,
        "input": {"manifest": str(manifest)},
        "key": "id",
        "columns": {"id": "int", "text": "text"},
        "splits": {"train": 0.5, "test": 0.5},
        "sharding": {"num_shards": 2},
        "output": {"dir": out},
    }
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(cfg))
    return manifest, config
