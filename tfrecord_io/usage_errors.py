"""The usage-error family: what a command refuses before it writes anything (exit status 2).

A person who typed a wrong path, a bad ``--where``, a config field the job does not know or
forgot an extra needs one line saying what to change, not a traceback and not "the job
failed". Every error of that kind is a :class:`UsageError`, raised where the problem is
found, with a message that names the argument, file or field at fault. The CLI maps exactly
this family to exit 2 and the failure block's "nothing was written"; anything else that
escapes a command is a failed job (exit 1).

The older, more specific classes keep their names and modules (``ConfigError``, defined here
and imported from ``pipelines.building.build_config`` as before, ``InputError`` in ``pipelines.building.manifest``,
``DatasetDirError`` in ``dataset.dataset_writer``, ``RunnerSetupError`` in
``pipelines.runtime.runners``, ``ReportError`` in ``pipelines.report.report_job``) and subclass
:class:`UsageError`; the ones here are for the cases that had no class of their own.
Each also keeps the built-in base callers caught before (``ValueError``,
``FileNotFoundError``, ``ImportError``), so ``except ValueError`` around a library call still
works.

This module imports nothing of the project: every layer may raise these.
"""

from __future__ import annotations


class UsageError(Exception):
    """Bad usage or input, found before the job wrote anything (exit status 2).

    The message is shown as is, after ``tfrecord-io COMMAND failed:``: it names what to
    change (the argument, file, field or missing package)."""


class ConfigError(UsageError, ValueError):
    """A config file (a job's or a ``--runner-config``) or an override is invalid; the
    message names the file and the field. Imported from ``pipelines.building.build_config`` as well."""


class ArgumentError(UsageError, ValueError):
    """A command-line value the command cannot use (e.g. ``--where label``)."""


class NoInputError(UsageError, FileNotFoundError):
    """The command's paths or patterns name no file it can read."""


class MissingDependencyError(UsageError, ImportError):
    """An optional dependency the command needs is not installed; the message names the
    extra that brings it (``pip install 'tfrecord-io[report]'``)."""
