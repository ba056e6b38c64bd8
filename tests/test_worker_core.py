"""The jobs say which record core their workers ran (runtime/worker_core.py): a counter
named for the core, from a branch a worker runs, read back after the run. The clean
workers of tests/test_clean_workers.py check it on a cluster; these run it on the
DirectRunner, in the test process (quick)."""

from __future__ import annotations

import os

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

import tfrecord_io as tfio
from tfrecord_io.format import framing
from tfrecord_io.pipelines.runtime import worker_core

from tests.pipeline_support import IN_PROCESS, run_cli


def _run_note(monkeypatch, speedups: bool):
    monkeypatch.setattr(framing, "HAVE_SPEEDUPS", speedups)
    with beam.Pipeline(options=PipelineOptions(IN_PROCESS)) as p:
        _ = p | worker_core.NoteWorkerCore()
    return worker_core.core_line(p.result)


def test_the_line_names_the_core_the_worker_had(monkeypatch):
    here = os.path.dirname(os.path.abspath(tfio.__file__))
    line = _run_note(monkeypatch, True)
    assert line == f"workers: {worker_core.describe(worker_core.C_CORE)}, tfrecord_io from {here}"
    line = _run_note(monkeypatch, False)
    assert line == f"workers: {worker_core.describe(worker_core.PURE_PYTHON)}, tfrecord_io from {here}"
    assert "pure-Python core" in line


def test_only_jobs_whose_workers_install_the_package_note_it():
    install = worker_core.workers_install_the_package
    assert not install(PipelineOptions(IN_PROCESS))
    assert not install(PipelineOptions(["--environment_type=LOOPBACK"]))
    assert install(PipelineOptions(["--setup_file=./setup.py"]))
    assert install(PipelineOptions(["--extra_package=dist/x.whl"]))
    assert install(PipelineOptions(["--sdk_container_image=tfrecord-io:0.2.0"]))
    assert install(PipelineOptions(["--environment_type=PROCESS", '--environment_config={"command": "boot"}']))
    assert install(PipelineOptions(["--runner=DataflowRunner"]))


def test_validate_prints_the_workers_core_only_when_they_install_the_package(tmp_path):
    path = str(tmp_path / "ok.tfrecord")
    with tfio.RecordWriter(path) as w:
        w.write_records([tfio.serialize_example({"a": ([i], "int")}) for i in range(5)])
    plain = run_cli("validate", path, "--no-progress", *IN_PROCESS)
    assert plain.returncode == 0, plain.stderr
    assert "workers:" not in plain.stderr + plain.stdout
    # an image the DirectRunner does not use, but a job that names one says what its workers ran
    noted = run_cli("validate", path, "--no-progress", *IN_PROCESS, "--sdk_container_image=tfrecord-io:test")
    assert noted.returncode == 0, noted.stderr
    core = worker_core.C_CORE if framing.HAVE_SPEEDUPS else worker_core.PURE_PYTHON
    expected = f"workers: {worker_core.describe(core)}, tfrecord_io from "
    assert any(line.startswith(expected) for line in noted.stderr.splitlines()), noted.stderr
