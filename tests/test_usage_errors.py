"""Exit status 2 is the usage-error family (tfrecord_io/usage_errors.py), and only that family.

Each kind of bad usage a person meets, run through the CLI as they would: the exit status
is 2, the terminal shows the failure block with a message naming what to change and
"nothing was written", no traceback, and indeed nothing was written.
"""

from __future__ import annotations

import os
import re

import pytest
import yaml

from tfrecord_io.dataset.dataset_writer import DatasetDirError, VersionTaken
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.pipelines.building.build_config import ConfigError
from tfrecord_io.pipelines.building.manifest import InputError
from tfrecord_io.pipelines.report.report_job import BuildReportError, ReportError
from tfrecord_io.pipelines.runtime.runners import RunnerSetupError
from tfrecord_io.usage_errors import ArgumentError, MissingDependencyError, NoInputError, UsageError

from tests.pipeline_support import IN_PROCESS, cli_env, run_cli


def test_the_family():
    for cls in (ConfigError, InputError, DatasetDirError, VersionTaken, ReportError, RunnerSetupError):
        assert issubclass(cls, UsageError), cls
    for cls, base in (
        (ArgumentError, ValueError),
        (NoInputError, FileNotFoundError),
        (MissingDependencyError, ImportError),
        (ConfigError, ValueError),
        (InputError, ValueError),
        (DatasetDirError, ValueError),
        (RunnerSetupError, RuntimeError),
    ):
        assert issubclass(cls, (UsageError)) and issubclass(cls, base), cls  # old `except` clauses still catch
    # a report that fails after its build was published is a failed job, not bad usage
    assert not issubclass(BuildReportError, UsageError)


@pytest.fixture()
def files(tmp_path):
    """A small valid TFRecord file, and a build config over a two-row manifest."""
    from tfrecord_io.format.codec import serialize_example

    data = tmp_path / "data.tfrecord"
    with RecordWriter(str(data)) as w:
        w.write_records([serialize_example({"label": ([i], "int")}) for i in range(3)])
    (tmp_path / "m.csv").write_text("caption,label\nhello,1\nwelt,2\n")
    config = {
        "name": "t",
        "input": {"manifest": "m.csv"},
        "columns": {"caption": {"encoder": "text"}, "label": {"encoder": "int"}},
        "output": {"dir": "out"},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    bad = dict(config, columns={"caption": {"encoder": "text", "nope": 1}})
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    missing_manifest = dict(config, input={"manifest": "gone.csv"})
    (tmp_path / "gone.yaml").write_text(yaml.safe_dump(missing_manifest))
    return tmp_path


# (case, argv, what the message must say); {d} is the test's directory
CASES = [
    ("config field", ["build", "{d}/bad.yaml"], "columns.caption"),
    ("config file", ["build", "{d}/absent.yaml"], "cannot read config"),
    ("runner config file", ["build", "{d}/c.yaml", "--runner-config", "{d}/absent.yaml"], "--runner-config"),
    ("manifest", ["build", "{d}/gone.yaml"], "gone.csv does not exist"),
    ("output scheme", ["build", "{d}/c.yaml", "--output", "nosuchfs://b/ds"], "nosuchfs://"),
    ("runner binary", ["inspect", "{d}/data.tfrecord", "--runner=FlinkRunner"], "scripts/fetch-runners"),
    ("no input: inspect", ["inspect", "{d}/nothing-*.tfrecord"], "nothing matches {d}/nothing-*.tfrecord"),
    ("no input: index", ["index", "{d}/empty"], "no *.tfrecord* file in {d}/empty"),
    ("no input: reshard", ["reshard", "{d}/absent.tfrecord", "--output", "{d}/o/x"], "nothing matches"),
    ("no input: validate", ["validate", "{d}/absent.tfrecord"], "nothing matches {d}/absent.tfrecord"),
    ("no input: validate dir", ["validate", "{d}/data.tfrecord", "{d}/empty"], "no *.tfrecord* file in {d}/empty"),
    ("no input: report", ["report", "{d}/absent.tfrecord", "--output", "{d}/r.html"], "no TFRecord files"),
    ("--where", ["reshard", "{d}/data.tfrecord", "--output", "{d}/o/x", "--where", "label"], "FEATURE=VALUE"),
    ("--report dir", ["validate", "{d}/data.tfrecord", "--report", "{d}/no/such/r.json"], "does not exist"),
    ("--split", ["report", "{d}/data.tfrecord", "--output", "{d}/r.html", "--split", "x"], "--split x"),
]


@pytest.mark.parametrize("case,argv,message", CASES, ids=[c[0] for c in CASES])
def test_bad_usage_exits_2_before_anything_is_written(files, case, argv, message):
    d = str(files)
    os.makedirs(files / "empty")
    before = sorted(os.listdir(d))
    env = cli_env(log_dir=str(files / "logs"), TFRECORD_IO_RUNNER_CACHE=str(files / "no-runners"))
    runner = [] if any(a.startswith("--runner=") for a in argv) else IN_PROCESS
    proc = run_cli(*[a.format(d=d) for a in argv], "--no-progress", *runner, cwd=d, env=env, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith(f"tfrecord-io {argv[0]} failed: "), proc.stderr
    assert message.format(d=d) in proc.stderr.split("  state:")[0], proc.stderr
    assert "state: nothing was written" in proc.stderr and "exit:  2 (bad usage or input" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert sorted(n for n in os.listdir(d) if n != "logs") == before  # nothing written, not even a log kept


def test_a_missing_extra_is_a_usage_error(files, tmp_path_factory):
    """report without matplotlib (hidden from the subprocess): exit 2 naming the extra,
    before the statistics job runs."""
    site = tmp_path_factory.mktemp("no-matplotlib")
    (site / "sitecustomize.py").write_text(
        "import sys\n"
        "class _Hide:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'matplotlib' or name.startswith('matplotlib.'):\n"
        "            raise ImportError(f'No module named {name!r}')\n"
        "sys.meta_path.insert(0, _Hide())\n"
    )
    d = str(files)
    env = cli_env(log_dir=str(files / "logs"), PYTHONPATH=str(site))
    proc = run_cli("report", f"{d}/data.tfrecord", "--output", f"{d}/r.html", *IN_PROCESS, env=env, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "matplotlib" in proc.stderr and "pip install 'tfrecord-io[report]'" in proc.stderr, proc.stderr
    assert not re.search(r"^\[report ", proc.stderr, re.M)  # no progress line: no job was started
    assert not os.path.exists(f"{d}/r.html")


def test_other_errors_are_not_usage_errors(tmp_path):
    """A corrupt file found while the job runs is a failed job (exit 1), not bad usage."""
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(b"\x05" * 40)
    proc = run_cli("inspect", str(path), "--no-progress", *IN_PROCESS, log_dir=str(tmp_path / "logs"))
    assert proc.returncode == 1, proc.stderr
    assert "exit:  1 (the job failed)" in proc.stderr


# Every numeric option of every command, with a value it cannot use: refused by argparse
# while parsing (pipelines/runtime/arg_types.py): exit 2, the option named, nothing started.
NUMERIC = [
    (["build", "c.yaml", "--num-shards", "0"], "--num-shards: must be 1 or more, got 0"),
    (["build", "c.yaml", "--num-shards", "-3"], "--num-shards: must be 1 or more, got -3"),
    (["inspect", "x.tfrecord", "--head", "-5"], "--head: must be 0 or more, got -5"),
    (["reshard", "x.tfrecord", "--output", "o", "--num-shards", "-1"], "--num-shards: must be 0 or more, got -1"),
    (["report", "x.tfrecord", "--output", "r.html", "--samples", "-2"], "--samples: must be 0 or more, got -2"),
    (["convert", "x", "--to", "parquet", "--output", "o", "--num-shards", "-1"], "--num-shards: must be 0 or more"),
    (["convert", "x", "--to", "parquet", "--output", "o", "--batch-size", "0"], "--batch-size: must be 1 or more"),
    (["inspect", "x.tfrecord", "--head", "three"], "--head: expected a whole number, got 'three'"),
]


@pytest.mark.parametrize("argv,message", NUMERIC, ids=[" ".join(a[0:1] + a[-2:]) for a, _ in NUMERIC])
def test_numeric_options_refuse_nonsense_while_parsing(argv, message, capsys):
    from tfrecord_io.pipelines.cli import build_parser

    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_known_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"tfrecord-io {argv[0]}: error: argument {message}" in err, err


def test_numeric_options_keep_their_meaningful_values():
    from tfrecord_io.pipelines.cli import build_parser

    parse = build_parser().parse_known_args
    assert parse(["inspect", "x", "--head", "0"])[0].head == 0
    assert parse(["reshard", "x", "--output", "o", "--num-shards", "0"])[0].num_shards == 0
    assert parse(["report", "x", "--output", "r", "--samples", "0"])[0].samples == 0
    assert parse(["build", "c.yaml", "--num-shards", "4"])[0].num_shards == 4


def test_a_negative_shard_count_is_a_usage_error_not_a_traceback(files):
    """As a person meets it: ``reshard --num-shards -1`` ended in a ValueError traceback,
    exit 1; now argparse's message, exit 2, nothing written."""
    d = str(files)
    before = sorted(os.listdir(d))
    proc = run_cli("reshard", f"{d}/data.tfrecord", "--output", f"{d}/o/x", "--num-shards", "-1", cwd=d)
    assert proc.returncode == 2, proc.stderr
    assert "argument --num-shards: must be 0 or more, got -1" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert sorted(os.listdir(d)) == before


def test_validate_reads_a_directory_as_its_tfrecord_files(files):
    """A directory is its *.tfrecord* files (index files excluded), as for index, inspect
    and reshard; validate passed it to the read as a pattern and failed on it
    (IsADirectoryError, exit 1)."""
    d = str(files)
    proc = run_cli("validate", d, "--no-progress", *IN_PROCESS, cwd=d, log_dir=str(files / "logs"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 files, 3 records" in proc.stdout, proc.stdout
