"""Quiet by default: a command's terminal shows our lines only; Beam and the workers go to the log.

Newer Beam releases log notes with ``logging.warning()`` when their modules are imported
(2.77: ``WARNING:root:apitools not found ...`` from every process that imports Beam), and
their SDK workers log their start-up (``INFO:__main__:Logging handler created.``). The
pinned Beam is quieter, so this test makes the noise itself, the same way: a
``sitecustomize`` on the subprocesses' path logs a warning with ``logging.warning()`` and
writes a line on file descriptor 2 (like gRPC's C core) in every process, launcher and
workers alike, the moment it imports ``apache_beam``. The noise must reach the job's log
file, and the terminal must show nothing but the command's own lines; with ``--verbose``
the noise is on the terminal (which also shows the test's noise is real).
"""

from __future__ import annotations

import re

import pytest

from tests.pipeline_support import TWO_WORKERS, cli_env, run_cli

NOISE = "NOISE-FROM-IMPORT"

SITECUSTOMIZE = f'''
import logging, os, sys

class _NoisyImport:
    """Logs and writes to fd 2 when apache_beam is first imported (as Beam 2.77 does)."""

    done = False

    def find_spec(self, name, path=None, target=None):
        if name == "apache_beam" and not self.done:
            self.done = True
            logging.warning("{NOISE} logged by pid %d", os.getpid())
            os.write(2, b"{NOISE} written on fd 2\\n")
        return None

sys.meta_path.insert(0, _NoisyImport())
'''

# What a command may print on stderr by itself: progress lines ("[build   4.0s] ...").
PROGRESS = re.compile(r"^\[\w+ +\d+\.\ds\] ")


@pytest.fixture(scope="module")
def noisy_env(tmp_path_factory):
    site = tmp_path_factory.mktemp("noisy-site")
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return cli_env(PYTHONPATH=str(site))


@pytest.fixture(scope="module")
def demo_dataset(tmp_path_factory, noisy_env):
    """A small build (the demo's media) through the CLI, forked workers, with noise on."""
    from tfrecord_io.pipelines.demo_data import make_demo_media

    root = tmp_path_factory.mktemp("quiet")
    config = make_demo_media(str(root), rows=8)
    log = str(root / "build.log")
    proc = run_cli(
        "build",
        config,
        "--output",
        str(root / "out"),
        "--version",
        "v1",
        "--no-progress",
        "--log-file",
        log,
        *TWO_WORKERS,
        env=noisy_env,
    )
    return root, proc, log


def _noise_count(path: str) -> int:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read().count(NOISE)


def test_build_shows_only_its_summary(demo_dataset):
    root, proc, log = demo_dataset
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""  # --no-progress: nothing at all on stderr
    assert NOISE not in proc.stdout
    ours = ("building 'demo' -> ", "build finished in ", "rows in: 9 ", "  ", "rejected rows and reasons: ")
    assert [line for line in proc.stdout.splitlines() if not line.startswith(ours)] == [], proc.stdout
    # the launcher's import-time note (logged and on fd 2) is in the log, not lost
    assert _noise_count(log) >= 2, open(log).read()[-2000:]


def test_a_command_with_beams_own_worker_processes_is_quiet(demo_dataset, noisy_env):
    """convert runs on Beam's own multi-processing workers (new interpreters, each importing
    Beam and logging its start-up; the record jobs fork theirs instead): their output goes
    to the log as well."""
    root, _, _ = demo_dataset
    log = str(root / "convert.log")
    out = str(root / "parquet-quiet")
    proc = run_cli(
        "convert", str(root / "out"), "--to", "parquet", "--output", out, "--log-file", log, *TWO_WORKERS, env=noisy_env
    )
    assert proc.returncode == 0, proc.stderr
    assert NOISE not in proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if not PROGRESS.match(line)] == [], proc.stderr
    assert "parquet" in proc.stdout
    # launcher + 2 worker interpreters, each logging and writing on fd 2
    assert _noise_count(log) >= 6, open(log).read()[-3000:]


def test_verbose_shows_the_noise(demo_dataset, noisy_env):
    root, _, _ = demo_dataset
    proc = run_cli("inspect", str(root / "out"), "--head", "1", "--no-progress", "--verbose", env=noisy_env)
    assert proc.returncode == 0, proc.stderr
    assert NOISE in proc.stderr


def test_the_demo_shows_only_its_own_lines(tmp_path, noisy_env):
    import subprocess
    import sys

    log = str(tmp_path / "demo.log")
    proc = subprocess.run(
        [sys.executable, "-m", "tfrecord_io.pipelines.demo", "--out", str(tmp_path / "d"), "--rows", "8"]
        + ["--log-file", log],
        capture_output=True,
        text=True,
        env=noisy_env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert NOISE not in proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if not PROGRESS.match(line)] == [], proc.stderr
    ours = ("1/3 ", "2/3 ", "3/3 ", "building ", "report: ", "one decoded record", "    ")
    assert [line for line in proc.stdout.splitlines() if not line.startswith(ours)] == [], proc.stdout
    # 8 rows run in-process (runtime/parallelism.py): the launcher's note, logged and on fd 2
    assert _noise_count(log) >= 2, open(log).read()[-3000:]
    assert "runs it in-process" in open(log).read() or "builds in-process" in open(log).read()
