"""Airflow DAG: build a tfrecord-io dataset on a schedule, then validate what ``LATEST`` names.

Two tasks, one version directory per scheduled run (``{{ ts_nodash }}``, e.g.
``20261130T020000``):

- ``build``: ``BeamRunPythonPipelineOperator`` runs ``tfrecord_io/pipelines/scheduled_build.py``
  with ``--config``, ``--version`` and ``--output`` plus the Beam flags of the chosen
  runner. It runs in ``TFRECORD_IO_PYTHON``, an interpreter that has tfrecord-io
  installed, not in Airflow's own (the Beam provider brings its own apache-beam).
  A retry, and a rerun of the same logical date, pass the same ``--version``: the build
  then finishes a failed attempt's version or, if that version is already complete,
  checks it and exits 0 without rewriting it.
- ``validate``: ``tfrecord-io validate <output>`` in the same interpreter, on the same
  runner with the same Beam flags: it follows
  ``<output>/LATEST``, checks every record's CRCs, parses each Example against the
  feature spec and compares counts and SHA-256 with ``tfrecord_io_info.json``; any problem
  fails the task.

Settings come from the environment of the Airflow processes that parse the DAG and
run its tasks (README "Running on a schedule"):

==================================  =====================================================
``TFRECORD_IO_PYTHON``              interpreter with tfrecord-io (required)
``TFRECORD_IO_CONFIG``              dataset config YAML (required)
``TFRECORD_IO_OUTPUT``              dataset root holding ``LATEST`` (required)
``TFRECORD_IO_SCHEDULED_BUILD``     path of ``tfrecord_io/pipelines/scheduled_build.py``
                                    (default: the checkout this file is in)
``TFRECORD_IO_RUNNER``              Beam runner (default ``DirectRunner``)
``TFRECORD_IO_BEAM_OPTIONS``        JSON object of further Beam flags, e.g.
                                    ``{"flink_master": "host:8081"}`` (default ``{}``);
                                    on any runner but the local one include
                                    ``temp_location`` (e.g. ``s3://bucket/tmp``): validate's
                                    results come back through it
``TFRECORD_IO_SCHEDULE``            cron expression or preset (default ``@daily``)
``TFRECORD_IO_RETRIES``             retries per task (default 2)
``TFRECORD_IO_RETRY_DELAY_SECONDS`` wait before a retry (default 300)
==================================  =====================================================
"""

from __future__ import annotations

import json
import os
import shlex
from datetime import datetime, timedelta
from typing import Any, Dict, List

from airflow.providers.apache.beam.operators.beam import BeamRunPythonPipelineOperator
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

DAG_ID = "tfrecord_io_build"
CHECKOUT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _required(name: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise RuntimeError(
            f"{DAG_ID}: set {name} in the environment of the Airflow scheduler and workers "
            "(see README 'Running on a schedule')"
        )
    return value


def _beam_options() -> Dict[str, Any]:
    raw = os.environ.get("TFRECORD_IO_BEAM_OPTIONS", "").strip() or "{}"
    options = json.loads(raw)
    if not isinstance(options, dict):
        raise RuntimeError(f"{DAG_ID}: TFRECORD_IO_BEAM_OPTIONS must be a JSON object, got {raw!r}")
    return options


def _as_flags(options: Dict[str, Any]) -> List[str]:
    """Beam options as command-line flags, the way the Beam operator writes them."""
    flags: List[str] = []
    for name, value in options.items():
        if value is True:
            flags.append(f"--{name}")
        elif isinstance(value, list):
            flags += [f"--{name}={item}" for item in value]
        elif value is not None and value is not False:
            flags.append(f"--{name}={json.dumps(value) if isinstance(value, dict) else value}")
    return flags


PYTHON = _required("TFRECORD_IO_PYTHON")
CONFIG = _required("TFRECORD_IO_CONFIG")
OUTPUT = _required("TFRECORD_IO_OUTPUT")
SCHEDULED_BUILD = os.environ.get("TFRECORD_IO_SCHEDULED_BUILD") or os.path.join(
    CHECKOUT, "tfrecord_io", "pipelines", "scheduled_build.py"
)
RUNNER = os.environ.get("TFRECORD_IO_RUNNER", "DirectRunner")

with DAG(
    dag_id=DAG_ID,
    description="tfrecord-io: build a dataset version per run, then validate LATEST",
    schedule=os.environ.get("TFRECORD_IO_SCHEDULE", "@daily"),
    start_date=datetime(2026, 1, 1),
    catchup=False,
    # Two builds writing into one output at once would race for LATEST.
    max_active_runs=1,
    default_args={
        "retries": int(os.environ.get("TFRECORD_IO_RETRIES", "2")),
        "retry_delay": timedelta(seconds=float(os.environ.get("TFRECORD_IO_RETRY_DELAY_SECONDS", "300"))),
    },
    tags=["tfrecord-io"],
) as dag:
    build = BeamRunPythonPipelineOperator(
        task_id="build",
        py_file=SCHEDULED_BUILD,
        py_interpreter=PYTHON,
        runner=RUNNER,
        pipeline_options={
            **_beam_options(),
            "config": CONFIG,
            "output": OUTPUT,
            # One version directory per logical date: a retry or rerun reuses it.
            "version": "{{ ts_nodash }}",
        },
    )
    # The same runner and Beam flags as the build: validate reads every record.
    validate_command = [
        PYTHON,
        "-m",
        "tfrecord_io.pipelines",
        "validate",
        OUTPUT,
        "--no-progress",
        *_as_flags({"runner": RUNNER, **_beam_options()}),
    ]
    validate = BashOperator(task_id="validate", bash_command=" ".join(shlex.quote(arg) for arg in validate_command))
    build >> validate
