"""Test session setup shared by every test module.

Worker processes. Beam's ``multi_processing`` DirectRunner (and any runner whose SDK
workers are separate processes) starts workers that import ``tfrecord_io`` and friends
by module name, so this checkout goes first on ``PYTHONPATH`` for every subprocess the
tests start (else a worker could import another installed copy). The ``tests/`` folder
does **not** go there: workers never import a test module. Code that a test runs inside
a pipeline (a DoFn, a lambda) is defined *inside* the test function (or comes from the
package), and such code is pickled by value:

- cloudpickle (Beam's default from 2.65) pickles classes and functions that cannot be
  found by their qualified name (anything defined inside a function) by value, with
  only the globals they use;
- dill (Beam 2.62's default) does so too, but puts the *whole module's* globals in by
  reference -- i.e. "import test_beam_read" on the worker -- unless its ``recurse``
  setting is on, which makes it pickle only the globals the function uses. So it is on
  for the whole session.

Pickler. ``--beam-pickler=dill|cloudpickle`` (or ``TFRECORD_IO_BEAM_PICKLER``) makes
every ``beam.Pipeline`` built in this process use that library, in the launcher and,
through the pipeline options, in its workers; the default (``default``) leaves Beam's
own default (dill on 2.62, cloudpickle later). ``scripts/test`` runs the Beam tests
under both. Jobs started as CLI subprocesses keep Beam's default.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Dict

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
_paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
os.environ["PYTHONPATH"] = os.pathsep.join([REPO, *[p for p in _paths if p not in (REPO, TESTS)]])

PICKLERS = ("default", "dill", "cloudpickle")


def pytest_addoption(parser):
    parser.addoption(
        "--beam-pickler",
        choices=PICKLERS,
        default=os.environ.get("TFRECORD_IO_BEAM_PICKLER") or "default",
        help="pickle library for every Beam pipeline the tests build (default: Beam's own; "
        "env TFRECORD_IO_BEAM_PICKLER)",
    )


def pytest_configure(config):
    _pickle_by_value()
    _use_pickler(config.getoption("--beam-pickler"))


def pytest_report_header(config):
    try:
        from apache_beam.internal import pickler
    except ImportError:
        return None
    name = "dill" if pickler.desired_pickle_lib.__name__.endswith("dill_pickler") else "cloudpickle"
    chosen = config.getoption("--beam-pickler")
    return f"beam pickler: {chosen} ({name} unless a pipeline's options say otherwise)"


# A test module that builds Beam pipelines in the test process (directly or through the
# project's job functions) calls one of these.
_BUILDS_PIPELINES = re.compile(r"\b(Pipeline|run_pipeline|run_build|run_validate)\(")


def pytest_collection_modifyitems(config, items):
    """Mark the tests of every module that builds pipelines (``-m beam`` selects them)."""
    import pytest

    builds: Dict[str, bool] = {}
    for item in items:
        path = str(item.fspath)
        if path not in builds:
            with open(path, encoding="utf-8") as f:
                builds[path] = bool(_BUILDS_PIPELINES.search(f.read()))
        if builds[path]:
            item.add_marker(pytest.mark.beam)


def _pickle_by_value() -> None:
    """dill: pickle a function's used globals, not its module (see the docstring)."""
    try:
        import dill
    except ImportError:  # Beam >= 2.65 without the [dill] extra: cloudpickle only
        return
    dill.settings["recurse"] = True


def _use_pickler(library: str) -> None:
    """Make every Pipeline built from now on use ``library`` unless its options name one."""
    if library == "default":
        return
    import apache_beam as beam
    from apache_beam.internal import pickler
    from apache_beam.options.pipeline_options import SetupOptions

    pickler.set_library(library)  # fails now, not in a test, when the library is missing
    original = beam.Pipeline.__init__

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        setup = self.options.view_as(SetupOptions)
        if setup.pickle_library == "default":
            # Set in the options (not just in this process) so workers load with it too.
            setup.pickle_library = library
            pickler.set_library(library)

    beam.Pipeline.__init__ = init
