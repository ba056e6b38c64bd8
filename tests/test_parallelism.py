"""The local runner's parallelism from the input's size (runtime/parallelism.py): a small
input runs in-process on one worker, a large one on 2 forked worker processes, and
Beam's own flags (or a runner config's options) always win."""

from __future__ import annotations

import os

import pytest
from apache_beam.options.pipeline_options import DirectOptions, PipelineOptions

import tfrecord_io as tfio
from tfrecord_io.pipelines.runtime import parallelism
from tfrecord_io.pipelines.runtime.beam_options import beam_args
from tfrecord_io.pipelines.runtime.local_workers import worker_count

from pipeline_support import run_cli


def _records(path, n, size=100):
    with tfio.RecordWriter(str(path)) as w:
        w.write_records([tfio.serialize_example({"a": ([i], "int"), "b": (b"x" * size, "bytes")}) for i in range(n)])
    return str(path)


def _direct(flags):
    options = PipelineOptions(flags).view_as(DirectOptions)
    return options.direct_running_mode, options.direct_num_workers


def test_small_input_runs_in_process_and_large_keeps_two_workers():
    assert _direct(beam_args(None, [], small_input=True)) == ("in_memory", 1)
    assert worker_count(PipelineOptions(beam_args(None, [], small_input=True))) is None  # nothing forked
    assert _direct(beam_args(None, [], small_input=False)) == ("multi_processing", 2)
    assert worker_count(PipelineOptions(beam_args(None, [], small_input=False))) == 2


@pytest.mark.parametrize(
    "given,expect",
    [
        (["--direct_num_workers=2"], ("multi_processing", 2)),
        (["--direct_num_workers", "3"], ("multi_processing", 3)),
        (["--direct_running_mode=multi_threading"], ("multi_threading", 2)),
        (["--direct_running_mode", "multi_processing"], ("multi_processing", 2)),
    ],
)
def test_an_explicit_beam_flag_wins_over_the_size(given, expect):
    assert _direct(beam_args(None, given, small_input=True)) == expect


def test_a_runner_configs_options_win_over_the_size():
    section = {
        "runner": "DirectRunner",
        "options": {"direct_num_workers": 2, "direct_running_mode": "multi_processing"},
    }
    assert _direct(beam_args(section, [], small_input=True)) == ("multi_processing", 2)
    # another runner takes none of the direct runner's options
    # (a running job server's endpoint: the flags need no job-server jar in the cache)
    flink = {"runner": "FlinkRunner", "options": {"flink_master": "[local]", "job_endpoint": "localhost:8099"}}
    flags = beam_args(flink, [], small_input=True)
    assert not [f for f in flags if f.startswith("--direct_")]


def test_input_size_is_measured_as_the_jobs_resolve_their_inputs(tmp_path):
    small = _records(tmp_path / "small.tfrecord", 10)
    assert parallelism.record_input_is_small([small])
    assert parallelism.record_input_is_small([str(tmp_path)])  # a directory: its *.tfrecord* files
    assert parallelism.record_input_is_small([str(tmp_path / "*.tfrecord")])
    big = tmp_path / "big" / "big.tfrecord"
    big.parent.mkdir()
    with open(big, "wb") as f:  # sparse: its size is what counts, not what it holds
        f.truncate(parallelism.SMALL_INPUT_BYTES)
    assert not parallelism.record_input_is_small([str(big)])
    assert not parallelism.record_input_is_small([small, str(big)])  # together
    assert not parallelism.record_input_is_small(["s3://bucket/data/*.tfrecord"])  # not measured: the defaults
    assert not parallelism.record_input_is_small([str(tmp_path / "nothing-*.tfrecord")])  # the job says so


def test_a_builds_input_size(tmp_path):
    media = tmp_path / "media"
    media.mkdir()
    for i in range(5):
        (media / f"{i}.bin").write_bytes(b"x" * 1000)
    manifest = tmp_path / "manifest.csv"
    manifest.write_text("path\n" + "".join(f"media/{i}.bin\n" for i in range(5)))
    assert parallelism.build_input_is_small(manifest=str(manifest))
    assert parallelism.build_input_is_small(directory=str(media))
    for i in range(parallelism.SMALL_BUILD_FILES):  # many rows: not small, however tiny
        (media / f"many-{i}.bin").write_bytes(b"x")
    assert not parallelism.build_input_is_small(manifest=str(manifest))
    assert not parallelism.build_input_is_small(directory=str(media))
    assert not parallelism.build_input_is_small(manifest="s3://bucket/manifest.csv")


def _validate(tmp_path, path, *flags):
    log = tmp_path / f"validate-{len(os.listdir(tmp_path))}.log"
    proc = run_cli("validate", path, "--no-progress", "--log-file", str(log), *flags)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return open(log).read()


def test_the_cli_runs_small_in_process_large_on_two_workers_and_a_flag_wins(tmp_path):
    small = _records(tmp_path / "small.tfrecord", 100)
    log = _validate(tmp_path, small)
    assert "runs it in-process on one worker" in log and "forked" not in log, log[-2000:]
    # the same small file, two workers asked for: they are forked
    log = _validate(tmp_path, small, "--direct_num_workers=2")
    assert "forked 2 local SDK workers" in log, log[-2000:]
    # a large input (over the bound, ~33 MB of records) keeps both workers
    big_dir = tmp_path / "big"
    big_dir.mkdir()
    n = parallelism.SMALL_INPUT_BYTES // 1000 + 1000
    big = _records(big_dir / "big.tfrecord", n, size=1000)
    assert os.path.getsize(big) >= parallelism.SMALL_INPUT_BYTES
    log = _validate(tmp_path, big)
    assert "forked 2 local SDK workers" in log and "in-process" not in log, log[-2000:]
