"""Which record core (C or pure Python) the job's workers run, said by the job.

On Dataflow and on shared clusters the workers install the package from what the
launcher staged (``--setup_file``, ``--extra_package``): the C core compiles there if
the worker image has a C compiler and the Python headers, else the package installs
without it and the pure-Python core (same results, slower) is used. The launcher
cannot know which from its own environment, so a job adds :class:`NoteWorkerCore`: one
element on a worker that logs where ``tfrecord_io`` was imported from and which core it
has (in the worker's log, e.g. Cloud Logging on Dataflow) and counts it in a Beam counter
whose name carries both (a counter comes back to the launcher on every runner that
reports metrics; log lines may not); after the run :func:`core_line` turns the counters
into one line the CLI prints.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Optional

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter

NAMESPACE = "tfrecord_io.worker"
C_CORE = "c"
PURE_PYTHON = "pure-python"
LOG_PREFIX = "tfrecord-io worker:"
_SEP = "|"

_LOGGER = logging.getLogger(__name__)


def this_core() -> Dict[str, Any]:
    """This process's record core and where the package came from."""
    import tfrecord_io
    from tfrecord_io.format import framing

    return {
        "core": C_CORE if framing.HAVE_SPEEDUPS else PURE_PYTHON,
        "package": os.path.dirname(os.path.abspath(tfrecord_io.__file__)),
        "version": tfrecord_io.__version__,
    }


def describe(core: str) -> str:
    if core == C_CORE:
        return "C core (tfrecord_io._speedups)"
    return "pure-Python core (the C core is not built there: no C compiler or Python headers on the worker)"


def _note(_: Any) -> None:
    found = this_core()
    _LOGGER.warning(
        "%s tfrecord_io %s from %s, %s", LOG_PREFIX, found["version"], found["package"], describe(found["core"])
    )
    # The counter's name carries the core and where the package was imported from, so
    # the launcher can say both (a name is all a counter can carry back).
    Metrics.counter(NAMESPACE, f"{found['core']}{_SEP}{found['package']}").inc()


class NoteWorkerCore(beam.PTransform):
    """A branch of one element that a worker runs: see the module docstring."""

    def expand(self, pbegin):
        return pbegin | "One" >> beam.Create([None]) | "Note" >> beam.Map(_note)


def core_line(result: Any) -> Optional[str]:
    """``workers: ...`` from a finished run's counters, or None when the runner gave none
    (a runner without metrics, or a run that failed before the branch ran)."""
    try:
        counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    except Exception:  # noqa: BLE001 - metrics are optional: no line rather than a failed job
        return None
    seen: Dict[str, set] = {}
    for counter in counters:
        if max(counter.committed or 0, counter.attempted or 0) <= 0:
            continue
        core, _, package = counter.key.metric.name.partition(_SEP)
        seen.setdefault(core, set()).add(package)
    if not seen:
        return None
    return "workers: " + "; ".join(
        f"{describe(core)}, tfrecord_io from {', '.join(sorted(seen[core]))}" for core in sorted(seen)
    )


#: Environment types whose workers do not run the launcher's Python environment.
_OWN_ENVIRONMENTS = ("PROCESS", "DOCKER")


def workers_install_the_package(options: Any) -> bool:
    """Whether this job's workers run a Python of their own that installs the package
    from what the launcher staged or from an image: ``--setup_file``,
    ``--extra_package``, ``--sdk_container_image``, a PROCESS or DOCKER environment, or
    Dataflow. Only those jobs note the workers' core; a job whose workers are this
    Python (the local runners, LOOPBACK, a worker pool beside a checkout) stays as it was."""
    from apache_beam.options.pipeline_options import PortableOptions, SetupOptions, StandardOptions, WorkerOptions

    setup = options.view_as(SetupOptions)
    if setup.setup_file or setup.extra_packages:
        return True
    if options.view_as(WorkerOptions).sdk_container_image:
        return True
    if (options.view_as(PortableOptions).environment_type or "").upper() in _OWN_ENVIRONMENTS:
        return True
    runner = options.view_as(StandardOptions).runner or ""
    return "dataflow" in str(runner).lower()
