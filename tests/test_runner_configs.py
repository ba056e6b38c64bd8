"""The runner configs and the runner cache plumbing, without starting any runner.

The end-to-end runs are in tests/test_runners.py (marker ``runners``); these check what
those runs depend on and what users get from a config: the flags each config turns
into, that the cached jar/binary is filled in (and never overrides one the user gave),
and that an empty cache stops a job with a message naming scripts/fetch-runners
instead of letting Beam try a download.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import yaml
from apache_beam.options.pipeline_options import (
    DebugOptions,
    FlinkRunnerOptions,
    PipelineOptions,
    PortableOptions,
    PrismRunnerOptions,
    SparkRunnerOptions,
    StandardOptions,
)

from tfrecord_io.pipelines.building.build_config import SCHEMA, _check
from tfrecord_io.pipelines.runtime.beam_options import beam_args
from tfrecord_io.pipelines.runtime.runners import (
    FLINK_JAR,
    PRISM_BIN,
    SPARK_JAR,
    RunnerSetupError,
    add_runner_binaries,
    cache_dir,
)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def section(name):
    with open(os.path.join(REPO, "configs", f"{name}.yaml"), encoding="utf-8") as f:
        data = yaml.safe_load(f)
    assert set(data) == {"runner"}, f"configs/{name}.yaml must hold only a runner section"
    return data["runner"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORD_IO_RUNNER_CACHE", str(tmp_path))
    for name in (FLINK_JAR, SPARK_JAR, PRISM_BIN):
        (tmp_path / name).write_bytes(b"x")
    return tmp_path


@pytest.mark.parametrize("name", ["flink", "spark", "prism", "dataflow", "local"])
def test_runner_sections_pass_the_job_config_schema(name):
    errors = []
    _check(SCHEMA["runner"], section(name), "runner.", errors)
    assert errors == []


def test_flink_config_flags(cache):
    opts = PipelineOptions(beam_args(section("flink"), []))
    assert opts.view_as(StandardOptions).runner == "FlinkRunner"
    flink = opts.view_as(FlinkRunnerOptions)
    assert flink.flink_master == "[local]"
    assert flink.parallelism == 2
    assert flink.flink_job_server_jar == str(cache / FLINK_JAR)
    assert opts.view_as(PortableOptions).environment_type == "LOOPBACK"
    assert opts.view_as(DebugOptions).lookup_experiment("pre_optimize") == "all"


def test_spark_config_flags(cache):
    opts = PipelineOptions(beam_args(section("spark"), []))
    assert opts.view_as(StandardOptions).runner == "SparkRunner"
    spark = opts.view_as(SparkRunnerOptions)
    assert spark.spark_master_url == "local[2]"
    assert spark.spark_job_server_jar == str(cache / SPARK_JAR)
    assert opts.view_as(DebugOptions).lookup_experiment("pre_optimize") == "all"


def test_prism_config_uses_the_local_binary_and_no_pre_optimize(cache):
    opts = PipelineOptions(beam_args(section("prism"), []))
    assert opts.view_as(StandardOptions).runner == "PrismRunner"
    assert opts.view_as(PrismRunnerOptions).prism_location == str(cache / PRISM_BIN)
    # Prism rejects the executable stages pre_optimize=all produces.
    assert opts.view_as(DebugOptions).lookup_experiment("pre_optimize") is None


def test_a_runner_named_on_the_command_line_gets_its_binary_too(cache):
    flags = beam_args(None, ["--runner=PrismRunner"])
    assert f"--prism_location={cache / PRISM_BIN}" in flags
    assert not any(f.startswith("--direct_") for f in flags)


def test_runner_flag_forms(cache):
    for flags in (["--runner", "SparkRunner"], ["--runner=apache_beam.runners.portability.spark_runner.SparkRunner"]):
        assert add_runner_binaries(flags)[-1] == f"--spark_job_server_jar={cache / SPARK_JAR}"
    # the last --runner wins; the local runner needs nothing
    assert add_runner_binaries(["--runner=FlinkRunner", "--runner=DirectRunner"]) == [
        "--runner=FlinkRunner",
        "--runner=DirectRunner",
    ]


def test_user_given_jar_or_endpoint_wins(cache):
    flags = beam_args(section("flink"), ["--flink_job_server_jar=/opt/my.jar"])
    assert [f for f in flags if f.startswith("--flink_job_server_jar")] == ["--flink_job_server_jar=/opt/my.jar"]
    flags = beam_args(section("spark"), ["--job_endpoint=localhost:8099"])
    assert not any(f.startswith("--spark_job_server_jar") for f in flags)


def test_local_and_dataflow_runs_need_no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORD_IO_RUNNER_CACHE", str(tmp_path / "empty"))
    assert beam_args(None, [])[1:] == [
        "--runner=DirectRunner",
        "--direct_num_workers=2",
        "--direct_running_mode=multi_processing",
    ]
    flags = beam_args(section("dataflow"), [])
    assert "--runner=DataflowRunner" in flags and "--experiments=use_runner_v2" in flags


@pytest.mark.parametrize("name", ["flink", "spark", "prism"])
def test_empty_cache_fails_naming_the_fetch_script(name, tmp_path, monkeypatch):
    monkeypatch.setenv("TFRECORD_IO_RUNNER_CACHE", str(tmp_path / "empty"))
    with pytest.raises(RunnerSetupError, match="scripts/fetch-runners") as err:
        beam_args(section(name), [])
    assert str(tmp_path / "empty") in str(err.value)


def test_cache_dir_default(monkeypatch):
    monkeypatch.delenv("TFRECORD_IO_RUNNER_CACHE", raising=False)
    assert cache_dir() == os.path.join(os.path.expanduser("~"), ".cache", "tfrecord-io", "runners")


def _fake_tools(tmp_path):
    """A PATH whose mvn and go only record that they were called, and fail."""
    fake = tmp_path / "fakebin"
    fake.mkdir()
    for tool in ("mvn", "go"):
        script = fake / tool
        script.write_text(f'#!/bin/sh\necho called >> "{tmp_path}/{tool}.called"\nexit 1\n')
        script.chmod(0o755)
    return f"{fake}:/usr/bin:/bin"


def _fetch_runners(cache, tmp_path, *args: str) -> subprocess.CompletedProcess:
    """``scripts/fetch-runners ARGS`` with ``cache`` as its cache, a fake ``mvn`` and
    ``go`` (``_fake_tools``) and nothing else of this environment."""
    env = {
        "PATH": _fake_tools(tmp_path),
        "HOME": str(tmp_path),
        "TFRECORD_IO_RUNNER_CACHE": str(cache),
        "PYTHON": sys.executable,
    }
    script = os.path.join(REPO, "scripts", "fetch-runners")
    return subprocess.run(["bash", script, *args], capture_output=True, text=True, env=env, timeout=60)


def test_fetch_runners_keeps_up_to_date_outputs(cache, tmp_path):
    """Every output present and stamped with its pom's hash: neither mvn nor go runs,
    and the three paths are printed."""
    import hashlib

    for module, jar in (("flink-job-server", FLINK_JAR), ("spark-job-server", SPARK_JAR)):
        with open(os.path.join(REPO, "runners", module, "pom.xml"), "rb") as f:
            (cache / f"{jar}.pom.sha256").write_text(hashlib.sha256(f.read()).hexdigest() + "\n")
        os.utime(cache / jar, (1, 1))  # older than the pom: only the stamp says "current"
    (cache / PRISM_BIN).chmod(0o755)
    proc = _fetch_runners(cache, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"flink_job_server_jar={cache / FLINK_JAR}",
        f"spark_job_server_jar={cache / SPARK_JAR}",
        f"prism_location={cache / PRISM_BIN}",
    ]
    assert not (tmp_path / "mvn.called").exists() and not (tmp_path / "go.called").exists()


def test_fetch_runners_rebuilds_a_stale_jar_and_reports_failure(cache, tmp_path):
    """A jar from another pom (stale stamp, older than the pom) is rebuilt; when Maven
    fails, the old jar stays, the exit status is 1 and the message names the pom."""
    (cache / f"{FLINK_JAR}.pom.sha256").write_text("0" * 64 + "\n")
    os.utime(cache / FLINK_JAR, (1, 1))
    proc = _fetch_runners(cache, tmp_path, "--only", "flink")
    assert proc.returncode == 1
    assert (tmp_path / "mvn.called").exists()
    assert "Maven failed for" in proc.stderr and "flink-job-server/pom.xml" in proc.stderr
    assert (cache / FLINK_JAR).read_bytes() == b"x"
    assert not [p for p in os.listdir(cache) if p.startswith(".build-")]  # scratch dir removed
