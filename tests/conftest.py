"""Test session setup shared by every test module: the Beam pickler, and what Beam's
worker processes can import.

Pickler. Beam pickles the DoFns and functions of a pipeline with dill (the default up
to Beam 2.64, so in the pinned lane) or cloudpickle (the default from 2.65, so in the
newest lane). ``--beam-pickler=dill|cloudpickle`` (or ``TFRECORD_IO_BEAM_PICKLER``)
makes every ``beam.Pipeline`` built in the test process use that library -- written
into its options, so its workers load with the same one; ``default`` leaves Beam's.
``scripts/test`` runs the tests marked ``beam`` (modules that build pipelines in this
process) a second time under the other library. Jobs the tests start as CLI
subprocesses use Beam's default.

Worker processes. The ``multi_processing`` DirectRunner (and any runner whose SDK
workers are separate processes) starts workers that import code by module name, so
this checkout goes first on ``PYTHONPATH`` for every subprocess (else a worker could
import another installed copy of ``tfrecord_io``). Code that a test defines and runs
inside a pipeline (a DoFn class, a lambda, ``beam_support``'s collector) is shipped
differently by the two libraries:

- cloudpickle: every module under ``tests/`` is registered to be pickled *by value*
  (``cloudpickle.register_pickle_by_value``), so a worker never imports a test module
  and ``tests/`` is not on the workers' path -- as on a cluster whose workers have only
  the installed package.
- dill pickles a function's module globals by reference ("import test_beam_read" on
  the worker) and offers no by-value registration (its ``recurse`` setting, which
  would pickle just the globals a function uses, misreads Python 3.11+ bytecode and
  drops names), so under dill -- and only then -- ``tests/`` goes on ``PYTHONPATH`` too.

Which tests the rerun needs. A test marked ``beam`` whose pipelines all run in CLI
subprocesses runs Beam's default pickler under either option, so a rerun repeats it
unchanged. ``--beam-record=FILE`` writes the ids of the tests that did use Beam's pickler
in the test process (built a ``beam.Pipeline`` or called ``pickler.dumps``/``loads``,
fixtures included); ``--beam-only-recorded=FILE`` deselects every other test, so the
rerun under the other library runs exactly the tests the library can change.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import Any, Dict, NamedTuple, Optional, Set, Tuple

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(TESTS)
PICKLERS = ("default", "dill", "cloudpickle")

# The S3 server fixtures (``s3_server``, ``s3_bucket``): a real versitygw on 127.0.0.1;
# the GCS ones (``gcs_server``, ``gcs_bucket``): fake-gcs-server on 127.0.0.1;
# the Azure ones (``azurite``, ``az_container``): Azurite's Blob service on 127.0.0.1.
pytest_plugins = ["s3support", "gcs_support", "azure_support"]

# A test module that builds Beam pipelines in the test process (directly or through the
# project's job functions) calls one of these.
# (``demo_build(...)``: the fixture below, which calls run_build.)
_BUILDS_PIPELINES = re.compile(r"\b(Pipeline|run_pipeline|run_build|run_validate|demo_build)\(")


@pytest.fixture(scope="session")
def demo_media(tmp_path_factory):
    """The demo's media set (``make_demo_media``: images, audio, captions, a manifest and a
    build config, one row a truncated JPEG), made once per row count for the whole session:
    ``demo_media(rows) -> (root, config path)``. Tests only read it; their builds write
    under their own ``tmp_path`` (``pipeline_support.build_config``)."""
    made: Dict[int, tuple] = {}

    def get(rows: int = 12) -> tuple:
        if rows not in made:
            from tfrecord_io.pipelines.demo_data import make_demo_media

            root = tmp_path_factory.mktemp(f"demo-media-{rows}")
            made[rows] = (str(root), make_demo_media(str(root), rows=rows))
        return made[rows]

    return get


class DemoBuild(NamedTuple):
    """A build of the demo (``demo_build``): the dataset root, its version ``v1`` and the
    loaded build config."""

    root: str
    version_dir: str
    config: Dict[str, Any]


@pytest.fixture(scope="session")
def demo_build(demo_media, tmp_path_factory):
    """The demo media (``demo_media``) built in process (``run_build``, one DirectRunner
    worker) as version ``v1``, once per row count and config overrides for the whole
    session: ``demo_build(rows, **overrides) -> DemoBuild`` (``overrides``: dotted config
    keys, ``**{"report": True}``). Tests only read it; one that changes a build copies
    it first."""
    made: Dict[Tuple[int, Tuple[Tuple[str, Any], ...]], DemoBuild] = {}

    def get(rows: int = 12, **overrides: Any) -> DemoBuild:
        key = (rows, tuple(sorted(overrides.items())))
        if key not in made:
            from tfrecord_io.pipelines.building.build_job import run_build

            from tests.pipeline_support import build_config, options

            _, config_path = demo_media(rows)
            out = str(tmp_path_factory.mktemp(f"demo-build-{rows}"))
            config = build_config(config_path, out, "v1", **overrides)
            run_build(config, options(), progress=False, log=lambda *a, **k: None)
            made[key] = DemoBuild(out, os.path.join(out, "v1"), config)
        return made[key]

    return get


def pytest_addoption(parser):
    parser.addoption(
        "--beam-pickler",
        choices=PICKLERS,
        default=os.environ.get("TFRECORD_IO_BEAM_PICKLER") or "default",
        help="pickle library for every Beam pipeline the tests build "
        "(default: Beam's own; env TFRECORD_IO_BEAM_PICKLER)",
    )

    parser.addoption(
        "--beam-record",
        metavar="FILE",
        help="write the ids of the tests that used Beam's pickler in this process to FILE",
    )
    parser.addoption(
        "--beam-only-recorded",
        metavar="FILE",
        help="run only the tests listed in FILE (written by --beam-record)",
    )


# The test being run (setup, call and teardown), and the tests that used Beam's pickler.
_current_test: Optional[str] = None
_used_beam_pickler: Set[str] = set()


def _note_pickler_use() -> None:
    if _current_test is not None:
        _used_beam_pickler.add(_current_test)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _current_test
    _current_test = item.nodeid
    try:
        yield
    finally:
        _current_test = None


def pytest_sessionfinish(session):
    path = session.config.getoption("--beam-record")
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{nodeid}\n" for nodeid in sorted(_used_beam_pickler))


def pytest_configure(config):
    library = _use_pickler(config.getoption("--beam-pickler"))
    _set_worker_path([REPO, TESTS] if library == "dill" else [REPO])


def pytest_report_header(config):
    pickler = _effective(config.getoption("--beam-pickler"))
    return f"beam pickler: {pickler}; workers' PYTHONPATH: {os.environ['PYTHONPATH']}"


def pytest_collection_modifyitems(config, items):
    """Mark the tests of every module that builds pipelines (``-m beam`` selects them) and
    every test that uses the S3 server (``s3``) or the GCS emulator (``gcs``); with ``--beam-only-recorded``, keep only
    the recorded tests."""
    builds: Dict[str, bool] = {}
    for item in items:
        path = str(item.fspath)
        if path not in builds:
            with open(path, encoding="utf-8") as f:
                builds[path] = bool(_BUILDS_PIPELINES.search(f.read()))
        if builds[path]:
            item.add_marker(pytest.mark.beam)
        if "s3_server" in getattr(item, "fixturenames", ()):
            # every test on the real S3 server, not only the ones marked by hand (-m "not s3")
            item.add_marker(pytest.mark.s3)
        if "azurite" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.azure)
        if "gcs_server" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.gcs)  # likewise for the GCS emulator (-m "not gcs")
    recorded_path = config.getoption("--beam-only-recorded")
    if recorded_path:
        if not os.path.exists(recorded_path):
            raise pytest.UsageError(
                f"--beam-only-recorded: {recorded_path} does not exist (write it with --beam-record)"
            )
        with open(recorded_path, encoding="utf-8") as f:
            recorded = {line.rstrip("\n") for line in f if line.strip()}
        keep = [item for item in items if item.nodeid in recorded]
        dropped = [item for item in items if item.nodeid not in recorded]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep


def _set_worker_path(first: list) -> None:
    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in (REPO, TESTS)]
    os.environ["PYTHONPATH"] = os.pathsep.join(first + rest)


def _effective(library: str) -> str:
    """``default`` -> the library this Beam uses by default."""
    if library != "default":
        return library
    from apache_beam.internal import pickler

    return pickler.DEFAULT_PICKLE_LIB


def _register_test_modules_by_value() -> None:
    """cloudpickle: pickle everything defined under tests/ by value (see the docstring)."""
    from apache_beam.internal import cloudpickle_pickler

    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None) or ""
        if path.startswith(TESTS + os.sep):
            cloudpickle_pickler.cloudpickle.register_pickle_by_value(module)


def _use_pickler(library: str) -> str:
    """Make every Pipeline built from now on use ``library`` (unless its options name
    one) and ship test code by value under cloudpickle; returns the effective library."""
    import apache_beam as beam
    from apache_beam.internal import pickler
    from apache_beam.options.pipeline_options import SetupOptions

    if library != "default":
        pickler.set_library(library)  # fails here, not in a test, if the library is missing
    original = beam.Pipeline.__init__

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        _note_pickler_use()
        original(self, *args, **kwargs)
        setup = self.options.view_as(SetupOptions)
        if library != "default" and setup.pickle_library == "default":
            setup.pickle_library = library  # in the options, so the workers use it too
            pickler.set_library(library)
        if _effective(setup.pickle_library) == "cloudpickle":
            _register_test_modules_by_value()

    beam.Pipeline.__init__ = init
    for name in ("dumps", "loads"):
        setattr(pickler, name, _noting_use(getattr(pickler, name)))
    return _effective(library)


def _noting_use(function):
    """``function`` (one of Beam's pickler calls), noting that the current test used it."""

    @functools.wraps(function)
    def noted(*args, **kwargs):
        _note_pickler_use()
        return function(*args, **kwargs)

    return noted
