"""examples/airflow/tfrecord_io_dag.py under a real Airflow scheduler loop.

Airflow lives in its own venv (``scripts/setup-airflow``; ``TFRECORD_IO_AIRFLOW_PYTHON``
to use another). Each test runs ``airflow dags test`` against a temporary
``AIRFLOW_HOME`` with a SQLite metadata DB, so the DAG file, the Beam provider's
operator, Airflow's retry loop and the task subprocesses are all the real ones. The
build task's interpreter is this test's Python (it has tfrecord-io), with this
checkout first on ``PYTHONPATH``.

Without an Airflow venv the tests skip, unless ``TFRECORD_IO_REQUIRE_AIRFLOW=1`` (CI),
where they fail.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from typing import Dict, List, Optional, Tuple

import pytest

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.pipelines.demo_data import make_demo_media
from tfrecord_io.pipelines.runtime import processes

from tests.pipeline_support import REPO, run_cli

pytestmark = pytest.mark.airflow

DAG_ID = "tfrecord_io_build"
DAG_FOLDER = os.path.join(REPO, "examples", "airflow")
SCHEDULED_BUILD = os.path.join(REPO, "tfrecord_io", "pipelines", "scheduled_build.py")
DEFAULT_VENV_PYTHON = os.path.expanduser("~/.cache/tfrecord-io/airflow-venv/bin/python")
DAG_RUN_TIMEOUT = 600


def _airflow_python() -> str:
    """Airflow's interpreter; skip (or, with TFRECORD_IO_REQUIRE_AIRFLOW=1, fail) without one."""
    py = os.environ.get("TFRECORD_IO_AIRFLOW_PYTHON") or DEFAULT_VENV_PYTHON
    airflow = os.path.join(os.path.dirname(py), "airflow")
    if os.access(py, os.X_OK) and os.access(airflow, os.X_OK):
        return py
    msg = f"no Airflow venv at {py}; run scripts/setup-airflow or set TFRECORD_IO_AIRFLOW_PYTHON"
    if os.environ.get("TFRECORD_IO_REQUIRE_AIRFLOW") == "1":
        pytest.fail("TFRECORD_IO_REQUIRE_AIRFLOW=1 but " + msg)
    pytest.skip(msg)


class Airflow:
    """One temporary Airflow installation state: AIRFLOW_HOME, its SQLite DB, the DAG folder."""

    def __init__(self, python: str, home: str, config: str):
        self.bin = os.path.join(os.path.dirname(python), "airflow")
        self.home = home
        self.config = config

    def env(self, output: str, **extra: str) -> Dict[str, str]:
        env = dict(os.environ)
        env.update(
            AIRFLOW_HOME=self.home,
            AIRFLOW__CORE__DAGS_FOLDER=DAG_FOLDER,
            AIRFLOW__CORE__LOAD_EXAMPLES="False",
            # The DAG's settings (docs/scheduling.md, "Airflow").
            TFRECORD_IO_PYTHON=sys.executable,
            TFRECORD_IO_CONFIG=self.config,
            TFRECORD_IO_OUTPUT=output,
            TFRECORD_IO_RETRY_DELAY_SECONDS="1",
            # The build's and validate's interpreter (and its Beam workers) import this checkout.
            PYTHONPATH=REPO,
        )
        env.update(extra)
        return env

    def run(self, args: List[str], output: str, log_path: str, timeout: int = DAG_RUN_TIMEOUT, **env: str) -> int:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [self.bin, *args],
                env=self.env(output, **env),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            return _wait(proc, timeout)

    def start_dag_test(self, logical_date: str, output: str, log_path: str) -> subprocess.Popen:
        log = open(log_path, "ab")
        try:
            return subprocess.Popen(
                [self.bin, "dags", "test", DAG_ID, logical_date],
                env=self.env(output),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()

    def task_tries(self, logical_date_sql: str) -> Dict[str, List[Tuple[int, str]]]:
        """task_id -> [(try_number, state), ...] of the DAG run at that logical date, oldest first."""
        with sqlite3.connect(os.path.join(self.home, "airflow.db")) as db:
            (run_id,) = db.execute(
                "SELECT run_id FROM dag_run WHERE dag_id = ? AND logical_date = ? ORDER BY id DESC LIMIT 1",
                (DAG_ID, logical_date_sql),
            ).fetchone()
            rows = db.execute(
                "SELECT task_id, try_number, state FROM task_instance_history WHERE dag_id = ? AND run_id = ? "
                "UNION SELECT task_id, try_number, state FROM task_instance WHERE dag_id = ? AND run_id = ?",
                (DAG_ID, run_id, DAG_ID, run_id),
            ).fetchall()
        tries: Dict[str, List[Tuple[int, str]]] = {}
        for task_id, try_number, state in sorted(rows):
            tries.setdefault(task_id, []).append((try_number, state))
        return tries

    def run_state(self, logical_date_sql: str) -> str:
        with sqlite3.connect(os.path.join(self.home, "airflow.db")) as db:
            (state,) = db.execute(
                "SELECT state FROM dag_run WHERE dag_id = ? AND logical_date = ? ORDER BY id DESC LIMIT 1",
                (DAG_ID, logical_date_sql),
            ).fetchone()
        return state


def _wait(proc: subprocess.Popen, timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the session this test started, nothing else
        proc.wait()
        raise


def _tail(path: str, lines: int = 15) -> str:
    """What went wrong, from an ``airflow dags test`` log: the job's own messages and
    exit codes, then the last lines."""
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.readlines()
    job = [
        line
        for line in text
        if any(
            k in line for k in ("tfrecord-io build", "tfrecord-io validate", "exited with return code", "new_state=")
        )
    ]
    return "".join(job[-20:]) + "...\n" + "".join(text[-lines:])


@pytest.fixture(scope="module")
def airflow(tmp_path_factory) -> Airflow:
    python = _airflow_python()
    root = tmp_path_factory.mktemp("airflow")
    config = make_demo_media(str(root / "media"), rows=12)  # 12 good rows + 1 truncated JPEG
    af = Airflow(python, str(root / "home"), config)
    log = str(root / "db-migrate.log")
    rc = af.run(["db", "migrate"], output=str(root / "unused"), log_path=log, timeout=300)
    assert rc == 0, _tail(log)
    return af


def _snapshot(root: str) -> Dict[str, Tuple[int, int, int]]:
    """relative path -> (inode, mtime_ns, size) of every file and directory under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            st = os.stat(path)
            out[os.path.relpath(path, root)] = (st.st_ino, st.st_mtime_ns, st.st_size)
    return out


def _assert_one_whole_version(out: str, version: str) -> None:
    """LATEST names ``version``; it holds exactly the files its dataset_info.json lists
    (shards with matching SHA-256, their indexes, each split's key index, the rejected rows) and nothing else;
    the dataset root holds nothing but LATEST and that version."""
    assert dataset_writer.read_latest(out) == version
    assert sorted(os.listdir(out)) == sorted([dataset_writer.LATEST_NAME, version])
    version_dir = os.path.join(out, version)
    info = dataset_writer.load_info(version_dir)
    assert info is not None and info["version"] == version
    assert info["rows_in"] == 13 and info["records"] == 12 and info["rejected"] == 1
    expected = {dataset_writer.INFO_NAME, "rejected-00000-of-00001.jsonl", *info.get("tfds", {}).get("files", [])}
    for split in info["splits"].values():
        for shard in split["shards"]:
            assert dataset_writer.sha256_file(os.path.join(version_dir, shard["path"])) == shard["sha256"]
            expected.add(shard["path"])
            expected.add(shard["index"])
        key_index = split["key_index"]  # each split's key index (lookup, append, diff), checksummed too
        assert dataset_writer.sha256_file(os.path.join(version_dir, key_index["path"])) == key_index["sha256"]
        expected.add(key_index["path"])
    present = {os.path.relpath(os.path.join(d, f), version_dir) for d, _, files in os.walk(version_dir) for f in files}
    assert present == expected, f"unexpected: {sorted(present - expected)}; missing: {sorted(expected - present)}"


def test_dag_builds_and_validates_and_a_rerun_of_the_same_date_rewrites_nothing(airflow, tmp_path):
    out, log = str(tmp_path / "dataset"), str(tmp_path / "dags-test.log")
    date, date_sql, version = "2026-11-30T02:00:00+00:00", "2026-11-30 02:00:00.000000", "20261130T020000"

    rc = airflow.run(["dags", "test", DAG_ID, date], output=out, log_path=log)
    assert rc == 0, _tail(log)
    assert airflow.run_state(date_sql) == "success"
    assert airflow.task_tries(date_sql) == {"build": [(1, "success")], "validate": [(1, "success")]}
    _assert_one_whole_version(out, version)
    validated = run_cli("validate", out, "--no-progress")
    assert validated.returncode == 0, validated.stdout + validated.stderr

    before = _snapshot(out)
    rc = airflow.run(["dags", "test", DAG_ID, date], output=out, log_path=log)
    assert rc == 0, _tail(log)
    assert airflow.run_state(date_sql) == "success"
    # The rerun's build succeeded at its first try: it found the version complete and
    # left it alone (same inodes, same mtimes: nothing rewritten, nothing replaced).
    assert airflow.task_tries(date_sql) == {"build": [(1, "success")], "validate": [(1, "success")]}
    assert _snapshot(out) == before


def _build_process(airflow_pid: int, out: str) -> Optional[int]:
    """The build task's Beam process (py_interpreter running scheduled_build.py) under our ``airflow dags test``."""
    for pid in processes.descendants(airflow_pid):
        cmd = processes.cmdline(pid)
        if SCHEDULED_BUILD in cmd and f"--output={out}" in cmd:
            return pid
    return None


def _files_under(path: str) -> List[str]:
    return [os.path.join(d, f) for d, _, files in os.walk(path) for f in files]


def _shard_files_under(path: str) -> List[str]:
    """TFRecord shards (final or still under a temporary name) written so far."""
    return [f for f in _files_under(path) if ".tfrecord" in os.path.basename(f)]


def test_build_attempt_killed_mid_write_is_retried_into_one_whole_version(airflow, tmp_path):
    """The first try's Beam process is SIGKILLed (as by the OOM killer or a lost node)
    once it has written its first shard into the version directory; Airflow retries the task with the
    same ``--version``, and the retry must finish the version cleanly."""
    out, log = str(tmp_path / "dataset"), str(tmp_path / "dags-test.log")
    date, date_sql, version = "2026-11-29T02:00:00+00:00", "2026-11-29 02:00:00.000000", "20261129T020000"
    version_dir = os.path.join(out, version)

    proc = airflow.start_dag_test(date, out, log)
    try:
        killed: List[int] = []
        deadline = time.monotonic() + DAG_RUN_TIMEOUT
        while not killed and proc.poll() is None and time.monotonic() < deadline:
            build = _build_process(proc.pid, out)
            if build is not None and _shard_files_under(version_dir):
                killed = [build, *processes.descendants(build)]
                for pid in killed:  # the build's whole process tree (it and its Beam workers)
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                break
            time.sleep(0.02)
        assert killed, "the build task finished before it could be killed:\n" + _tail(log)
        assert _shard_files_under(version_dir) and dataset_writer.read_latest(out) is None  # partial, not published
        assert not os.path.exists(os.path.join(version_dir, dataset_writer.INFO_NAME))
        rc = _wait(proc, DAG_RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert rc == 0, _tail(log)
    assert airflow.run_state(date_sql) == "success"
    tries = airflow.task_tries(date_sql)
    assert tries["build"] == [(1, "failed"), (2, "success")], tries
    assert tries["validate"] == [(1, "success")], tries
    _assert_one_whole_version(out, version)


@pytest.mark.cluster
def test_dag_on_flink_runner_against_a_standalone_cluster(airflow, tmp_path):
    """The same DAG with ``TFRECORD_IO_RUNNER=FlinkRunner``, submitting through the job
    server of a Flink session cluster started by ``scripts/cluster`` (JobManager, two
    TaskManagers, a Beam worker pool beside each): the build runs on the cluster."""
    cluster_dir = str(tmp_path / "cluster")
    script = [sys.executable, os.path.join(REPO, "scripts", "cluster")]
    up = subprocess.run(
        # --shared-tmp: this DAG writes its dataset to a local folder (under /tmp) that the
        # cluster must see; a private /tmp per process is tested in tests/test_cluster.py.
        [*script, "up", "flink", "--dir", cluster_dir, "--workers", "2", "--timeout", "240", "--shared-tmp"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        with open(os.path.join(cluster_dir, "cluster.json"), encoding="utf-8") as f:
            endpoints = json.load(f)["endpoints"]
        beam_options = {
            "job_endpoint": endpoints["TFRECORD_IO_FLINK_JOB_ENDPOINT"],
            "environment_type": "EXTERNAL",
            "environment_config": endpoints["TFRECORD_IO_FLINK_WORKER_POOL"],
            "parallelism": 2,
            # validate's results come back through storage the workers share (a runner
            # other than the local one needs it: exit 2 otherwise); this cluster shares /tmp.
            "temp_location": str(tmp_path / "beam-temp"),
        }
        os.makedirs(beam_options["temp_location"])
        out, log = str(tmp_path / "dataset"), str(tmp_path / "dags-test.log")
        date, date_sql, version = "2026-11-28T02:00:00+00:00", "2026-11-28 02:00:00.000000", "20261128T020000"
        rc = airflow.run(
            ["dags", "test", DAG_ID, date],
            output=out,
            log_path=log,
            TFRECORD_IO_RUNNER="FlinkRunner",
            TFRECORD_IO_BEAM_OPTIONS=json.dumps(beam_options),
        )
        assert rc == 0, _tail(log)
        assert airflow.run_state(date_sql) == "success"
        assert airflow.task_tries(date_sql) == {"build": [(1, "success")], "validate": [(1, "success")]}
        with open(log, encoding="utf-8", errors="replace") as f:
            assert "--runner=FlinkRunner" in f.read()
        _assert_one_whole_version(out, version)
        # Both tasks ran as jobs on the cluster: the build, then validate.
        with urllib.request.urlopen(endpoints["TFRECORD_IO_FLINK_REST"] + "/jobs/overview", timeout=30) as response:
            jobs = json.load(response)["jobs"]
        assert [job["state"] for job in jobs] == ["FINISHED", "FINISHED"], jobs
    finally:
        subprocess.run([*script, "down", "flink", "--dir", cluster_dir], capture_output=True, timeout=300)
