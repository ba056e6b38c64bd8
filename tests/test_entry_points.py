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
