"""Workers that start clean and install the job's package, as on Dataflow.

A standalone Flink cluster (``scripts/cluster up flink --clean-workers``: one TaskManager,
a private /tmp per process) whose SDK workers are Beam's own boot program (the Go ``boot``
of Beam's Python SDK container, built by scripts/setup-clean-workers) in a PROCESS
environment, with a Python that has apache-beam and nothing else. The boot does what it
does in Dataflow's containers: it fetches what the launcher staged, makes a venv, pip
installs the requirements file, the ``--extra_package`` and the ``--setup_file`` sdist,
then starts the SDK harness. So ``tfrecord-io build`` and ``validate`` pass here only if
the package installs from its sdist / wheel, the C core compiles there (or is left out
and the pure-Python core is used, as the job says), and the media libraries come with
the requirements file that docs/dataflow.md ("Running on Dataflow") names. Data on S3 (versitygw).

About 8 minutes here (2 cores; 2026-12-07: sdist case 234 s, wheel case 183 s, install
29 s): every stage's SDK worker is a new boot that makes its venv and pip-installs the
staged package and the media libraries from PyPI (as each new Dataflow worker does when
it starts). It was 14 minutes while the worker requirements had librosa (numba, llvmlite,
scipy, scikit-learn: 19.5 s and 502 MB a boot against 5.7 s and 87 MB without).
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
from typing import Dict, List

import pytest

from tfrecord_io.pipelines.demo_data import make_demo_media
from tfrecord_io.pipelines.runtime import worker_core

from tests.pipeline_support import cli_env, run_cli

pytestmark = pytest.mark.cluster

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "cluster")
CONFIG = os.path.join(REPO, "configs", "flink-cluster-clean.yaml")
WORKER_REQUIREMENTS = os.path.join("constraints", "workers-media.txt")
# What docs/dataflow.md ("Running on Dataflow") tells users to pass (tests/test_dataflow_docs.py checks it).
SETUP_FILE_STAGING = ["--setup_file=./setup.py"]
REQUIREMENTS_STAGING = [f"--requirements_file={WORKER_REQUIREMENTS}", "--requirements_cache=skip"]
DEMO_ROWS = 8
JOB_TIMEOUT_S = 600


def pinned_beam() -> str:
    with open(os.path.join(REPO, "constraints", "pinned.txt"), encoding="utf-8") as f:
        return next(line.split("==")[1].strip() for line in f if line.startswith("apache-beam=="))


def clean_workers_dir() -> str:
    """What scripts/setup-clean-workers built (scripts/test runs it before the cluster tests)."""
    base = os.environ.get("TFRECORD_IO_CLEAN_WORKERS") or os.path.expanduser("~/.cache/tfrecord-io/clean-workers")
    folder = os.path.join(base, f"beam-{pinned_beam()}")
    if not os.path.isfile(os.path.join(folder, ".complete")):
        pytest.fail(f"no clean workers in {folder}: run `bash scripts/setup-clean-workers`", pytrace=False)
    return folder


@pytest.fixture(scope="module")
def clean_cluster(tmp_path_factory):
    """A Flink cluster with one TaskManager whose SDK workers are Beam's boot (~20 s to start)."""
    folder = str(tmp_path_factory.mktemp("clean-cluster"))
    workers = clean_workers_dir()

    def script(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, SCRIPT, *args, "flink", "--dir", folder],
            capture_output=True,
            text=True,
            timeout=600,
        )

    up = script("up", "--workers", "1", "--timeout", "240", "--clean-workers", workers)
    if up.returncode != 0:
        script("down")
        pytest.fail(f"scripts/cluster up flink --clean-workers failed:\n{up.stdout}\n{up.stderr}", pytrace=False)
    with open(os.path.join(folder, "cluster.json"), encoding="utf-8") as f:
        state = json.load(f)
    yield {"dir": folder, "state": state}
    script("down")


def taskmanager_log(cluster) -> str:
    with open(os.path.join(cluster["dir"], "logs", "taskmanager-1.log"), encoding="utf-8", errors="replace") as f:
        return f.read()


@pytest.fixture(scope="module")
def s3_demo(s3_server, tmp_path_factory) -> Dict[str, str]:
    """A small demo (images and audio at three sample rates) on S3 and its build config."""
    config = make_demo_media(str(tmp_path_factory.mktemp("clean-media")), rows=DEMO_ROWS)
    bucket = "s3://" + s3_server.make_bucket()
    out = str(tmp_path_factory.mktemp("clean-config") / "build.yaml")
    return {"bucket": bucket, "config": s3_server.upload_demo(config, f"{bucket}/demo", out)}


def launcher_env(cluster) -> Dict[str, str]:
    """The launcher: this checkout, and the cluster's addresses (what `source cluster.env` does)."""
    return cli_env(**cluster["state"]["endpoints"])


def staged_job(cluster, s3_server, bucket: str, staging: List[str], *args: str) -> subprocess.CompletedProcess:
    """A CLI job on the clean cluster, staging the package with ``staging`` and the media
    libraries with the worker requirements file, as docs/dataflow.md ("Running on Dataflow") says."""
    done = run_cli(
        *args,
        "--runner-config",
        CONFIG,
        "--no-progress",
        *s3_server.pipeline_args(),
        f"--temp_location={bucket}/tmp",
        *staging,
        *REQUIREMENTS_STAGING,
        cwd=REPO,
        env=launcher_env(cluster),
        timeout=JOB_TIMEOUT_S,
    )
    assert done.returncode == 0, (
        f"{done.stdout}\n{done.stderr}\n--- TaskManager log:\n{taskmanager_log(cluster)[-6000:]}"
    )
    return done


def build_and_validate(cluster, s3_server, s3_demo, name: str, staging: List[str]) -> Dict[str, object]:
    root = f"{s3_demo['bucket']}/{name}"
    build = staged_job(
        cluster, s3_server, s3_demo["bucket"], staging, "build", s3_demo["config"], "--output", root, "--version", "v1"
    )
    validate = staged_job(cluster, s3_server, s3_demo["bucket"], staging, "validate", f"{root}/v1")
    return {"build": build, "validate": validate}


def assert_installed_from_the_stage(run, core: str) -> None:
    """Each job says which core its workers ran and where they imported tfrecord_io from:
    the venv the boot made and installed it in, never this checkout (which they see)."""
    expected = f"workers: {worker_core.describe(core)}, tfrecord_io from /opt/apache/beam-venv/beam-venv-worker-"
    for job in ("build", "validate"):
        lines = [line for line in run[job].stderr.splitlines() if line.startswith("workers: ")]
        assert len(lines) == 1 and lines[0].startswith(expected), f"{job}: {run[job].stderr}"
        assert lines[0].endswith("/site-packages/tfrecord_io") and REPO not in lines[0], lines[0]
    assert "rows in: " in run["build"].stdout, run["build"].stdout


def test_setup_file_sdist_builds_with_the_c_core_on_the_workers(clean_cluster, s3_server, s3_demo):
    """--setup_file ./setup.py: the boot pip-installs the sdist Beam built from this
    checkout; the worker has a compiler and Python's headers, so the C core compiles there."""
    run = build_and_validate(clean_cluster, s3_server, s3_demo, "from-sdist", SETUP_FILE_STAGING)
    assert_installed_from_the_stage(run, worker_core.C_CORE)


@pytest.fixture(scope="module")
def pure_wheel(tmp_path_factory) -> str:
    """A wheel built without the C core (TFRECORD_IO_PURE_PYTHON, as on a machine without
    a compiler): py3-none-any, so the workers run the pure-Python core."""
    out = str(tmp_path_factory.mktemp("dist"))
    env = dict(os.environ, TFRECORD_IO_PURE_PYTHON="1")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", out, REPO],
        check=True,
        capture_output=True,
        env=env,
        timeout=300,
    )
    (wheel,) = glob.glob(os.path.join(out, "tfrecord_io-*.whl"))
    assert wheel.endswith("-py3-none-any.whl"), wheel
    return wheel


def test_extra_package_wheel_without_the_c_core_runs_pure_python(clean_cluster, s3_server, s3_demo, pure_wheel):
    """--extra_package dist/<wheel>: the boot installs the wheel (and its dependencies from
    PyPI); a wheel without the C core runs the pure-Python core, and the job says so."""
    run = build_and_validate(clean_cluster, s3_server, s3_demo, "from-wheel", [f"--extra_package={pure_wheel}"])
    assert_installed_from_the_stage(run, worker_core.PURE_PYTHON)


CHECK_INSTALLED = r"""
import json, os, sys
import apache_beam, tfrecord_io, tfrecord_io.format.framing, tfrecord_io.pipelines.cli, tfrecord_io.transforms
from tfrecord_io.format.framing import HAVE_SPEEDUPS
out = {"file": tfrecord_io.__file__, "speedups": HAVE_SPEEDUPS, "beam": apache_beam.__version__}
if sys.argv[1] == "media":
    import boto3, PIL, soundfile, soxr
    out["media"] = [PIL.__version__, soundfile.__version__, soxr.__version__, boto3.__version__]
print(json.dumps(out))
"""


def venv_of_the_workers_python(folder: str, where: str) -> str:
    """A venv made the way Beam's boot makes the workers' (``--system-site-packages``,
    from the clean Python); its python."""
    subprocess.run(
        [os.path.join(folder, "python", "bin", "python"), "-m", "venv", "--system-site-packages", where],
        check=True,
        timeout=120,
    )
    return os.path.join(where, "bin", "python")


def pip_install(python: str, *what: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_CONSTRAINT", "VIRTUAL_ENV")}
    done = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *what],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.dirname(python),
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def installed(python: str, media: bool) -> Dict[str, object]:
    done = subprocess.run(
        [python, "-c", CHECK_INSTALLED, "media" if media else "core"],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(python),
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_the_sdist_and_the_wheel_install_in_a_venv_of_the_workers_python(tmp_path):
    """What docs/dataflow.md ("Running on Dataflow") stages, installed as the boot installs it: the
    sdist Beam builds from ``--setup_file`` (its own Stager), with the worker
    requirements, compiles the C core; the wheel installs too. Neither changes the
    workers' apache-beam, and both are imported from the venv, not this checkout."""
    from apache_beam.runners.portability.stager import Stager

    folder = clean_workers_dir()
    sdist_dir = tmp_path / "sdist"
    sdist_dir.mkdir()
    cwd = os.getcwd()
    try:
        sdist = Stager._build_setup_package(os.path.join(REPO, "setup.py"), str(sdist_dir), None)
    finally:
        os.chdir(cwd)  # the Stager changes directory while it builds
    assert os.path.basename(sdist).startswith("tfrecord_io-") and sdist.endswith(".tar.gz"), sdist
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path / "dist"),
            REPO,
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = glob.glob(str(tmp_path / "dist" / "tfrecord_io-*.whl"))

    python = venv_of_the_workers_python(folder, str(tmp_path / "venv-sdist"))
    pip_install(python, sdist, "-r", os.path.join(REPO, WORKER_REQUIREMENTS))
    got = installed(python, media=True)
    assert got["file"].startswith(str(tmp_path / "venv-sdist")), got
    assert got["speedups"] is True, "the C core did not compile from the sdist"
    assert got["beam"] == pinned_beam()
    pins = dict(
        line.strip().split("==")
        for line in open(os.path.join(REPO, WORKER_REQUIREMENTS))
        if "==" in line and not line.startswith("#")
    )
    assert got["media"] == [pins["pillow"], pins["soundfile"], pins["soxr"], pins["boto3"]]

    python = venv_of_the_workers_python(folder, str(tmp_path / "venv-wheel"))
    pip_install(python, wheel)
    got = installed(python, media=False)
    assert got["file"].startswith(str(tmp_path / "venv-wheel")) and got["speedups"] is True, got
    assert got["beam"] == pinned_beam()
