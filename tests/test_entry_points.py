"""The ways to start the command, and what ``--help`` shows a person."""

import os
import subprocess
import sys

import pytest

from tfrecord_io.pipelines.cli import build_parser

SUBCOMMANDS = ["build", "validate", "index", "inspect", "reshard", "report", "convert", "lookup", "diff"]


def parser_subcommands():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return list(sub.choices)


def test_the_list_of_subcommands_is_the_parsers():
    """The lists below (and the help tests) cover every command the parser has."""
    assert parser_subcommands() == SUBCOMMANDS


def test_python_dash_m_tfrecord_io_runs_the_command():
    done = subprocess.run([sys.executable, "-m", "tfrecord_io", "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: tfrecord-io")
    for command in SUBCOMMANDS:
        assert command in done.stdout


def test_python_dash_m_tfrecord_io_passes_the_exit_status_on():
    done = subprocess.run(
        [sys.executable, "-m", "tfrecord_io", "no-such-command"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "invalid choice" in done.stderr


@pytest.mark.parametrize("command", [None] + SUBCOMMANDS)
def test_help_is_plain_text_without_restructuredtext_literals(command):
    """``tfrecord-io --help`` and ``tfrecord-io COMMAND --help``, as the command prints them:
    no reStructuredText or Markdown literals (double or single backquotes)."""
    argv = [sys.executable, "-m", "tfrecord_io"] + ([command] if command else []) + ["--help"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=dict(os.environ, COLUMNS="100"))
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert text.startswith("usage: tfrecord-io")
    assert "``" not in text, [line for line in text.splitlines() if "``" in line]
    assert "`" not in text, [line for line in text.splitlines() if "`" in line]


def test_the_summary_line_names_every_subcommand():
    summary = build_parser().format_help().split("\n\n")[1]
    assert "\n" not in summary.strip(), f"the summary is one line: {summary!r}"
    words = set(summary.replace(",", " ").replace(":", " ").split())
    missing = [command for command in parser_subcommands() if command not in words]
    assert missing == [], f"the summary line {summary!r} does not name {missing}"


@pytest.mark.parametrize("command", [["inspect", "--head", "50"], ["validate", "--no-progress"]])
def test_a_read_only_command_whose_output_reader_is_gone_ends_as_a_unix_tool(command, tmp_path):
    """``tfrecord-io inspect ... | head``: the reader closes the pipe; the command ends with
    SIGPIPE's status (141) and no failure block, as ``cat`` or ``grep`` do."""
    import os

    import tfrecord_io as tfio

    path = str(tmp_path / "a.tfrecord")
    with tfio.RecordWriter(path) as writer:
        writer.write_records([tfio.serialize_example({"a": ([i], "int")}) for i in range(100)])
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tfrecord_io", command[0], path, *command[1:]],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(write_end)
    assert done.returncode == 141, done.stderr
    assert "failed" not in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_reshard_whose_summary_cannot_be_printed_says_its_shards_were_written(tmp_path):
    """``tfrecord-io reshard ... | true``: the shards are committed, then printing the
    summary fails on the closed pipe. The failure block must not say that nothing was
    written (what a reshard that failed while it ran leaves): it names the shards."""
    import os

    import tfrecord_io as tfio

    path = str(tmp_path / "a.tfrecord")
    with tfio.RecordWriter(path) as writer:
        writer.write_records([tfio.serialize_example({"a": ([i], "int")}) for i in range(100)])
    out = str(tmp_path / "out" / "part")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tfrecord_io", "reshard", path, "--output", out, "--num-shards", "2"],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    finally:
        os.close(write_end)
    assert sorted(os.listdir(tmp_path / "out")) == [
        "part-00000-of-00002.tfrecord",
        "part-00000-of-00002.tfrecord.index",
        "part-00001-of-00002.tfrecord",
        "part-00001-of-00002.tfrecord.index",
    ]
    assert done.returncode == 1, done.stderr
    assert "no shard" not in done.stderr, done.stderr
    assert f"2 shard(s) {out}-* written or replaced before the failure" in done.stderr, done.stderr
