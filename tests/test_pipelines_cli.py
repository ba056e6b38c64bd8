"""The tfrecord-io CLI: help, bad input, validate / index / inspect / reshard end to end."""

from __future__ import annotations

import collections
import glob
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

import tfrecord_io
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.pipelines.building.build_config import ConfigError, load_config
from tfrecord_io.pipelines.building.build_job import run_build

from tests.pipeline_support import IN_PROCESS, TWO_WORKERS, build_config, cli_env, options, run_cli


@pytest.fixture(scope="module")
def built(demo_media, tmp_path_factory):
    root, config = demo_media(12)
    out = str(tmp_path_factory.mktemp("built") / "out")
    run_build(build_config(config, out, "v1"), options(), progress=False)
    return root, config, out


@pytest.mark.parametrize("command", ["build", "validate", "index", "inspect", "reshard", "report"])
def test_every_command_has_help(command):
    proc = run_cli(command, "--help", check=True)
    assert "usage: tfrecord-io " + command in proc.stdout
    assert "Beam pipeline options" in proc.stdout


def test_top_level_help_lists_commands():
    # Each command on a line of its own with its one-line help (the module docstring at
    # the top names every command too, so a bare substring check would prove nothing).
    out = run_cli("--help", check=True).stdout
    for command in ("build", "validate", "index", "inspect", "reshard", "report"):
        assert re.search(rf"^ +{command} +\w", out, re.M), f"{command} missing from the command list:\n{out}"


def _write_config(tmp_path, **changes):
    raw = {
        "name": "t",
        "input": {"manifest": "m.csv"},
        "columns": {"caption": {"encoder": "text"}, "label": {"encoder": "int"}},
        "output": {"dir": "out"},
    }
    for key, value in changes.items():
        raw[key] = value
    (tmp_path / "m.csv").write_text("caption,label\nhello,1\nwelt,2\n")
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_unknown_encoder_names_the_field(tmp_path):
    config = _write_config(tmp_path, columns={"caption": {"encoder": "txt"}})
    proc = run_cli("build", config, *IN_PROCESS)
    assert proc.returncode == 2
    assert "columns.caption.encoder: unknown encoder 'txt'" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_bad_encoder_parameter_names_the_field(tmp_path):
    config = _write_config(tmp_path, columns={"caption": {"encoder": "text", "normalise": "NFC"}})
    with pytest.raises(ConfigError, match=r"columns.caption: unknown parameter\(s\) normalise"):
        from tfrecord_io.pipelines.building.encoders_config import make_encoders

        make_encoders(load_config(config)["columns"])


def test_missing_manifest_column_fails_before_writing(tmp_path):
    config = _write_config(tmp_path, columns={"caption": {"encoder": "text"}, "image": {"encoder": "image"}})
    proc = run_cli("build", config, *IN_PROCESS)
    assert proc.returncode == 2
    assert "column(s) image not found" in proc.stderr and "caption, label" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_empty_manifest_fails_before_writing(tmp_path):
    config = _write_config(tmp_path)
    (tmp_path / "m.csv").write_text("caption,label\n")
    proc = run_cli("build", config, *IN_PROCESS)
    assert proc.returncode == 2 and "has no rows" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_missing_manifest_file(tmp_path):
    config = _write_config(tmp_path, input={"manifest": "nope.csv"})
    proc = run_cli("build", config, *IN_PROCESS)
    assert proc.returncode == 2 and "nope.csv does not exist" in proc.stderr


def test_config_type_errors_name_each_field(tmp_path):
    config = _write_config(tmp_path, seed="abc", sharding={"num_shards": 0}, splits={"train": -1})
    with pytest.raises(ConfigError) as err:
        load_config(config)
    text = str(err.value)
    assert "seed: expected an integer, got 'abc'" in text
    assert "sharding.num_shards: must be >= 1, got 0" in text
    assert "splits.train: expected a non-negative number, got -1" in text


def test_nonexistent_media_path_is_a_rejected_row(tmp_path):
    (tmp_path / "m.csv").write_text("image,label\nmissing.png,1\n")
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "input": {"manifest": "m.csv"},
                "columns": {"image": {"encoder": "image"}, "label": {"encoder": "int"}},
                "output": {"dir": "out", "version": "v1"},
                "sharding": {"num_shards": 1},
            }
        )
    )
    proc = run_cli("build", str(config), "--no-progress", *IN_PROCESS, check=True)
    assert "rows in: 1   written: 0   rejected: 1" in proc.stdout
    line = json.loads(open(tmp_path / "out" / "v1" / "rejected-00000-of-00001.jsonl").read())
    assert line["stage"] == "read" and "missing.png" in line["reason"]


def test_output_holding_a_different_dataset_is_refused(built, tmp_path):
    root, config, out = built
    other = _write_config(tmp_path, output={"dir": out})
    proc = run_cli("build", other, *IN_PROCESS)
    assert proc.returncode == 2
    assert "holds dataset 'demo', not 't'" in proc.stderr
    assert sorted(os.listdir(out)) == ["LATEST", "v1"]


def test_validate_passes_then_fails_naming_file_and_offset(built, tmp_path):
    root, config, out = built
    report_path = tmp_path / "report.json"
    proc = run_cli("validate", out, "--report", str(report_path), "--no-progress", *IN_PROCESS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(report_path.read_text())
    assert report["ok"] and report["records"] == 12 and report["checksums_checked"]
    # flip one byte inside the data of the second record of the largest shard
    info = dataset_writer.load_info(os.path.join(out, "v1"))
    shard = max((s for e in info["splits"].values() for s in e["shards"]), key=lambda s: s["records"])
    path = os.path.join(out, "v1", shard["path"])
    index = tfrecord_io.load_index(os.path.join(out, "v1", shard["index"]))
    target = int(index.offsets[1]) + 40
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(out, copy)
    path = os.path.join(copy, "v1", shard["path"])
    data = bytearray(open(path, "rb").read())
    data[target] ^= 0x01
    open(path, "wb").write(bytes(data))
    proc = run_cli("validate", str(copy), "--report", str(report_path), "--no-progress", *IN_PROCESS)
    assert proc.returncode == 1
    assert f"{path} at byte offset {int(index.offsets[1])}" in proc.stdout
    kinds = {p["kind"] for p in json.loads(report_path.read_text())["problems"]}
    assert {"corrupt", "checksum", "count"} <= kinds


def test_validate_plain_files_reports_truncation(tmp_path):
    path = str(tmp_path / "x.tfrecord")
    with tfrecord_io.TFRecordWriter(path) as w:
        for i in range(5):
            w.write({"i": i})
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 3)
    proc = run_cli("validate", path, "--no-progress", *IN_PROCESS)
    assert proc.returncode == 1
    assert "truncated" in proc.stdout and path in proc.stdout


def test_index_command_creates_rebuilds_and_reports_corrupt(tmp_path):
    paths = []
    for n in range(3):
        p = str(tmp_path / f"f{n}.tfrecord")
        with tfrecord_io.TFRecordWriter(p) as w:
            for i in range(20 + n):
                w.write({"i": i})
        paths.append(p)
    proc = run_cli("index", str(tmp_path), "--no-progress", *TWO_WORKERS, check=True)
    assert "3 created" in proc.stdout
    for p in paths:
        assert tfrecord_io.load_index(p + ".index").matches(os.path.getsize(p))
    # append a record: the index is stale; corrupt another file
    with open(paths[0], "ab") as f:
        f.write(tfrecord_io.encode_frame(b"more"))
    data = bytearray(open(paths[1], "rb").read())
    data[30] ^= 0xFF
    open(paths[1], "wb").write(bytes(data))
    os.remove(paths[1] + ".index")
    proc = run_cli("index", str(tmp_path / "*.tfrecord"), "--no-progress", *IN_PROCESS)
    assert proc.returncode == 1
    assert "1 corrupt" in proc.stdout and "1 rebuilt" in proc.stdout and "1 ok" in proc.stdout
    assert paths[1] in proc.stderr and "byte offset" in proc.stderr
    assert not os.path.exists(paths[1] + ".index")
    assert len(tfrecord_io.load_index(paths[0] + ".index")) == 21
    # --force rewrites every index whatever it says (without reading it first)
    open(paths[2] + ".index", "w").write("0 16\n")  # looks like an index, describes nothing
    proc = run_cli("index", paths[0], paths[2], "--force", "--no-progress", *IN_PROCESS)
    assert proc.returncode == 0 and "2 rebuilt" in proc.stdout, proc.stdout
    assert len(tfrecord_io.load_index(paths[2] + ".index")) == 22


def test_inspect_shows_counts_spec_and_readable_records(built):
    root, config, out = built
    proc = run_cli("inspect", out, "--head", "2", "--no-progress", *IN_PROCESS, check=True)
    assert "6 files, 12 records" in proc.stdout
    assert "<PNG image 64x64 RGB" in proc.stdout
    assert "image/encoded" in proc.stdout and '"label": "int"' in proc.stdout
    result = json.loads(run_cli("inspect", out, "--json", "--no-progress", *IN_PROCESS, check=True).stdout)
    assert result["records"] == 12
    assert result["inferred_spec"]["image/height"] == {"type": "int", "shape": [], "required": True}


@pytest.mark.skipif(importlib.util.find_spec("IPython") is None, reason="IPython is not installed: nothing to skip")
def test_a_command_does_not_import_ipython_and_lifts_the_refusal_after(built):
    """Beam's notebook probe (``is_in_ipython`` at every ``Pipeline.apply``) imports
    IPython where it is installed; a command refuses that import while it runs (it is
    never inside a notebook) and leaves ``import IPython`` working once it returns."""
    root, config, out = built
    code = (
        "import sys\n"
        "from tfrecord_io.pipelines.cli import main\n"
        f"rc = main(['inspect', {out!r}, '--head', '0', '--no-progress', *{IN_PROCESS!r}])\n"
        "loaded = 'IPython' in sys.modules\n"
        "import IPython\n"
        "print(rc, loaded, IPython.get_ipython())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[-3:] == ["0", "False", "None"], proc.stdout


@pytest.mark.skipif(importlib.util.find_spec("google.api_core") is None, reason="no [gcp] extra: no scan to skip")
def test_a_command_skips_google_api_cores_package_scan_and_keeps_importlib_metadata(built):
    """google-api-core scans every installed distribution (``packages_distributions``)
    on import to name itself in a Python-version warning, 0.4-0.7 s of every job; a
    command imports it with that scan deferred, and ``importlib.metadata`` is the real
    one again afterwards, giving the full mapping. google-api-core 2.44 dropped the scan
    itself (no ``_cached_packages_distributions``): there the command must still make
    none and leave ``importlib.metadata`` as it found it."""
    root, config, out = built
    code = (
        "import importlib.metadata as md, sys\n"
        "real = md.packages_distributions\n"
        "scans = []\n"
        "def counted():\n"
        "    scans.append(1)\n"
        "    return real()\n"
        "md.packages_distributions = counted\n"
        "from tfrecord_io.pipelines.cli import main\n"
        f"rc = main(['inspect', {out!r}, '--head', '0', '--no-progress', *{IN_PROCESS!r}])\n"
        "from google.api_core import _python_version_support as v\n"
        "cached = getattr(v, '_cached_packages_distributions', None)\n"
        "held = cached() if cached else {}\n"
        "print(rc, 'google.api_core' in sys.modules, len(scans), md.packages_distributions is counted,\n"
        "      'google.api_core' in held, len(scans), not cached or held.get('numpy') == real().get('numpy'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), timeout=600)
    assert proc.returncode == 0, proc.stderr
    # no scan during the command; the function restored; a dotted name answered without a scan
    # (as the real mapping answers it), and any other question answered by one real scan
    assert proc.stdout.split()[-7:] == ["0", "True", "0", "True", "False", "0", "True"], proc.stdout


def test_reshard_preserves_multiset_and_filters(built, tmp_path):
    root, config, out = built
    version = os.path.join(out, "v1")
    before = collections.Counter(
        bytes(r)
        for p in glob.glob(os.path.join(version, "*", "*.tfrecord-*[0-9]"))
        for r in tfrecord_io.tfrecord_iterator(p)
    )
    proc = run_cli(
        "reshard",
        out,
        "--output",
        str(tmp_path / "r" / "data"),
        "--num-shards",
        "3",
        "--no-progress",
        *TWO_WORKERS,
        check=True,
    )
    assert "into 3 shards, 12 records" in proc.stdout
    shards = sorted(glob.glob(str(tmp_path / "r" / "data-*-of-00003.tfrecord")))
    assert len(shards) == 3
    after = collections.Counter(bytes(r) for p in shards for r in tfrecord_io.tfrecord_iterator(p, p + ".index"))
    assert after == before
    proc = run_cli(
        "reshard",
        out,
        "--output",
        str(tmp_path / "g" / "zero"),
        "--where",
        "label=0",
        "--compression",
        "gzip",
        "--num-shards",
        "1",
        "--no-progress",
        *IN_PROCESS,
        check=True,
    )
    (gz,) = glob.glob(str(tmp_path / "g" / "zero-*.tfrecord.gz"))
    labels = [
        int(tfrecord_io.parse_example(r, {"label": "int"})["label"][0]) for r in tfrecord_io.tfrecord_iterator(gz)
    ]
    expected = sum(n for r, n in before.items() if tfrecord_io.parse_example(r, {"label": "int"})["label"][0] == 0)
    assert labels == [0] * expected and expected > 0


def test_shipped_configs_are_valid(tmp_path, monkeypatch):
    import glob as _glob

    from tfrecord_io.pipelines.runtime.runners import FLINK_JAR, PRISM_BIN, SPARK_JAR

    # Flink/Spark/Prism configs get their jar/binary from the runner cache (and fail
    # without it): give them a stand-in cache so this test does not need fetch-runners.
    monkeypatch.setenv("TFRECORD_IO_RUNNER_CACHE", str(tmp_path))
    for name in (FLINK_JAR, SPARK_JAR, PRISM_BIN):
        (tmp_path / name).write_bytes(b"")

    from tfrecord_io.pipelines.building.build_config import validate_config
    from tfrecord_io.pipelines.building.encoders_config import make_encoders
    from tfrecord_io.pipelines.runtime.beam_options import beam_args

    from tests.pipeline_support import REPO

    datasets = sorted(_glob.glob(os.path.join(REPO, "configs", "datasets", "*.yaml")))
    assert len(datasets) >= 3
    for path in datasets:
        raw = yaml.safe_load(open(path))
        cfg = validate_config(raw, os.path.dirname(path))
        columns = {
            k: dict(v, vocabulary=["a", "b"]) if v.get("vocabulary") == "auto" else v for k, v in cfg["columns"].items()
        }
        assert make_encoders(columns)
    runners = sorted(_glob.glob(os.path.join(REPO, "configs", "*.yaml")))
    assert any(p.endswith("local.yaml") for p in runners)
    for path in runners:
        section = yaml.safe_load(open(path))["runner"]
        flags = beam_args(section, [])
        assert any(f.startswith("--runner=") for f in flags), path


def test_dockerfile_is_well_formed_and_matches_the_beam_pin():
    import re

    import dockerfile

    from tests.pipeline_support import REPO

    commands = dockerfile.parse_file(os.path.join(REPO, "Dockerfile"))
    by_cmd = {}
    for c in commands:
        by_cmd.setdefault(c.cmd, []).append(c)
    (base,) = by_cmd["FROM"]
    with open(os.path.join(REPO, "constraints", "pinned.txt")) as f:
        pin = re.search(r"^apache-beam==([0-9.]+)$", f.read(), re.M).group(1)
    assert base.value[0] == f"apache/beam_python3.11_sdk:{pin}"
    installs = [" ".join(r.value) for r in by_cmd["RUN"] if "pip install" in " ".join(r.value)]
    assert installs and all("-c constraints/pinned.txt" in r for r in installs), installs
    # As the SDK image for Dataflow (--sdk_container_image) the image must carry what the
    # jobs' workers import that Beam's image lacks (docs/dataflow.md): the
    # encoders' media libraries and boto3 for s3://, and a C compiler for the C core.
    extras = {e for r in installs for group in re.findall(r'"\.\[([a-z,]+)\]"', r) for e in group.split(",")}
    assert {"media", "aws"} <= extras, installs
    apt = " ".join(" ".join(r.value) for r in by_cmd["RUN"] if "apt-get install" in " ".join(r.value))
    assert all(package in apt.split() for package in ("gcc", "libc6-dev", "libsndfile1")), apt
    for copy in by_cmd["COPY"]:
        for src in copy.value[:-1]:
            assert os.path.exists(os.path.join(REPO, src)), f"COPY source {src} does not exist"
    assert by_cmd["ENTRYPOINT"][0].value == ("/opt/apache/beam/boot",)


def test_scheduled_build_entry_takes_flags(tmp_path):
    import subprocess
    import sys

    from tests.pipeline_support import REPO

    (tmp_path / "m.csv").write_text("caption,label\nhello,1\nwelt,2\n")
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "input": {"manifest": "m.csv"},
                "sharding": {"num_shards": 1},
                "columns": {"caption": {"encoder": "text"}, "label": {"encoder": "int"}},
                "output": {"dir": "out"},
            }
        )
    )
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "tfrecord_io", "pipelines", "scheduled_build.py"),
            f"--config={tmp_path / 'c.yaml'}",
            "--version=20261130T020000",
            *IN_PROCESS,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert dataset_writer.read_latest(str(tmp_path / "out")) == "20261130T020000"
    assert "written: 2" in proc.stdout


_PATH_PROBE = """
import importlib.util, json
names = ("tfrecord_io", "torch", "datasets", "arrow", "build", "report", "validate", "cli")
print("PROBE " + json.dumps({n: getattr(importlib.util.find_spec(n), "origin", None) for n in names}))
"""


def test_scheduled_build_runs_by_path_from_a_checkout_that_is_not_installed(tmp_path):
    """``python <checkout>/tfrecord_io/pipelines/scheduled_build.py`` from another folder,
    in an interpreter that has the dependencies but not tfrecord-io (``-S``: no site
    initialisation, so no editable install; the dependencies from site-packages by
    PYTHONPATH): it builds, ``tfrecord_io`` comes from the checkout, and neither
    tfrecord_io/ nor tfrecord_io/pipelines/ is on sys.path to shadow ``torch``,
    ``datasets``, ``arrow``, ``build`` ... (before: ModuleNotFoundError, and
    tfrecord_io/ first on sys.path)."""
    import json
    import subprocess
    import sys
    import sysconfig

    from tests.pipeline_support import REPO

    script = os.path.join(REPO, "tfrecord_io", "pipelines", "scheduled_build.py")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "PYTHONPATH": sysconfig.get_paths()["purelib"],
    }
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    bare = subprocess.run([sys.executable, "-S", "-c", "import tfrecord_io"], capture_output=True, env=env, cwd=cwd)
    assert bare.returncode != 0, "tfrecord_io is importable without the checkout: the test would prove nothing"
    probe = subprocess.run(
        [sys.executable, "-S", "-i", script, "--help"],
        input=_PATH_PROBE,
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=120,
    )
    lines = [line for line in probe.stdout.splitlines() if "PROBE " in line]
    assert lines, probe.stdout + probe.stderr
    origins = json.loads(lines[0].split("PROBE ", 1)[1])
    assert origins["tfrecord_io"] == os.path.join(REPO, "tfrecord_io", "__init__.py"), origins
    shadowed = {n: o for n, o in origins.items() if n != "tfrecord_io" and o and o.startswith(REPO)}
    assert not shadowed, shadowed
    (tmp_path / "m.csv").write_text("caption,label\nhello,1\nwelt,2\n")
    (tmp_path / "c.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "t",
                "input": {"manifest": "m.csv"},
                "sharding": {"num_shards": 1},
                "columns": {"caption": {"encoder": "text"}, "label": {"encoder": "int"}},
                "output": {"dir": "out"},
            }
        )
    )
    proc = subprocess.run(
        [sys.executable, "-S", script, f"--config={tmp_path / 'c.yaml'}", "--version=v1", *IN_PROCESS],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "written: 2" in proc.stdout and dataset_writer.read_latest(str(tmp_path / "out")) == "v1"
