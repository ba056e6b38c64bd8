"""The ``tfrecord2idx`` command, run as ``python -m tfrecord_io.tools.tfrecord2idx``
(the console script in pyproject.toml calls the same ``main``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import tomllib

import tfrecord_io as tfio

from tfio_testutil import REPO, golden_path


def run_cli(*args):
    env = dict(os.environ, PYTHONPATH=REPO)
    return subprocess.run(
        [sys.executable, "-m", "tfrecord_io.tools.tfrecord2idx", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_console_script_points_at_main():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert scripts["tfrecord2idx"] == "tfrecord_io.tools.tfrecord2idx:main"
    from tfrecord_io.tools.tfrecord2idx import main

    assert callable(main)


def test_file_and_index(tmp_path):
    index_path = str(tmp_path / "r.index")
    proc = run_cli(golden_path("records.tfrecord"), index_path)
    assert proc.returncode == 0, proc.stderr
    assert "17 records" in proc.stdout
    assert open(index_path).read() == tfio.build_index(golden_path("records.tfrecord")).to_text()


def test_directory(tmp_path):
    for name in ["a", "b"]:
        shutil.copy(golden_path("records.tfrecord"), tmp_path / f"{name}.tfrecord")
    shutil.copy(golden_path("records.tfrecord.gz"), tmp_path / "c.tfrecord.gz")  # not *.tfrecord: ignored
    (tmp_path / "notes.txt").write_text("hi")
    proc = run_cli(str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert sorted(os.listdir(tmp_path)) == [
        "a.tfindex",
        "a.tfrecord",
        "b.tfindex",
        "b.tfrecord",
        "c.tfrecord.gz",
        "notes.txt",
    ]
    expected = tfio.build_index(golden_path("records.tfrecord")).to_text()
    assert (tmp_path / "a.tfindex").read_text() == expected == (tmp_path / "b.tfindex").read_text()
    assert "indexed 2 of 2 files" in proc.stdout


def _corrupt_copy(path, at=40):
    blob = bytearray(open(golden_path("records.tfrecord"), "rb").read())
    blob[at] ^= 0x40
    with open(path, "wb") as f:
        f.write(blob)


def test_corrupt_file_fails_clearly_and_writes_nothing(tmp_path):
    data = str(tmp_path / "bad.tfrecord")
    _corrupt_copy(data)
    index_path = str(tmp_path / "bad.index")
    proc = run_cli(data, index_path)
    assert proc.returncode != 0
    assert data in proc.stderr and "byte offset" in proc.stderr and "no index written" in proc.stderr
    assert not os.path.exists(index_path)
    # an old index stays as it was
    with open(index_path, "w") as f:
        f.write("0 16\n")
    proc = run_cli(data, index_path)
    assert proc.returncode != 0 and open(index_path).read() == "0 16\n"
    assert sorted(os.listdir(tmp_path)) == ["bad.index", "bad.tfrecord"]


def test_directory_with_one_corrupt_file(tmp_path):
    shutil.copy(golden_path("records.tfrecord"), tmp_path / "good.tfrecord")
    _corrupt_copy(str(tmp_path / "bad.tfrecord"))
    proc = run_cli(str(tmp_path))
    assert proc.returncode != 0
    assert "bad.tfrecord" in proc.stderr
    assert os.path.exists(tmp_path / "good.tfindex") and not os.path.exists(tmp_path / "bad.tfindex")
    assert "indexed 1 of 2 files" in proc.stdout


@pytest.mark.parametrize("name,kind", [("records.tfrecord.gz", "GZIP"), ("records.tfrecord.zz", "ZLIB")])
def test_compressed_file_is_a_clear_error(tmp_path, name, kind):
    for target in [golden_path(name), str(tmp_path / "plainname.tfrecord")]:
        if not os.path.exists(target):
            shutil.copy(golden_path(name), target)
        index_path = str(tmp_path / "c.index")
        proc = run_cli(target, index_path)
        assert proc.returncode != 0
        assert kind in proc.stderr and "cannot index" in proc.stderr
        assert not os.path.exists(index_path)


def test_usage_errors(tmp_path):
    proc = run_cli(str(tmp_path / "missing.tfrecord"), str(tmp_path / "x.index"))
    assert proc.returncode != 0 and "no such file" in proc.stderr
    proc = run_cli(golden_path("records.tfrecord"))
    assert proc.returncode != 0 and "INDEX" in proc.stderr
