"""The ways to start the command, and what ``--help`` shows a person."""

import subprocess
import sys

import pytest

from tfrecord_io.pipelines.cli import build_parser

SUBCOMMANDS = ["build", "validate", "index", "inspect", "reshard", "report", "convert"]


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
    parser = build_parser()
    if command is None:
        text = parser.format_help()
    else:
        sub = next(a for a in parser._actions if a.dest == "command")
        text = sub.choices[command].format_help()
    assert "``" not in text
    assert text.startswith("usage: tfrecord-io")


def test_the_summary_line_names_every_subcommand():
    summary = build_parser().format_help().split("\n\n")[1]
    for command in SUBCOMMANDS:
        assert command in summary, command


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
