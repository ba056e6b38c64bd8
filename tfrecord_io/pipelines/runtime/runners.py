"""Where the distributed runners' binaries live, and filling them into runner options.

``scripts/fetch-runners`` builds the Flink and Spark job-server jars (from
``runners/*/pom.xml``) and the Prism binary into one cache directory. Job configs
(``configs/flink.yaml`` ...) name the runner but not the machine-specific paths; this
module fills those in from the cache so the same config works on every machine, and
fails with a message naming the script when the cache is empty -- Beam would otherwise
try to download a jar or binary that this network does not serve.
"""

from __future__ import annotations

import os
from importlib.metadata import version
from typing import Dict, List, Sequence

from tfrecord_io.usage_errors import UsageError

# A job server or Prism must match the SDK that submits to it: the files of the
# installed apache-beam (scripts/fetch-runners builds them for that version too).
BEAM_VERSION = version("apache-beam")
FLINK_VERSION = "1.19"

FLINK_JAR = f"beam-runners-flink-{FLINK_VERSION}-job-server-{BEAM_VERSION}.jar"
SPARK_JAR = f"beam-runners-spark-3-job-server-{BEAM_VERSION}.jar"
PRISM_BIN = f"prism-{BEAM_VERSION}"

# runner name (lower case) -> (option that takes the path, file in the cache)
_CACHED: Dict[str, tuple] = {
    "flinkrunner": ("flink_job_server_jar", FLINK_JAR),
    "sparkrunner": ("spark_job_server_jar", SPARK_JAR),
    "prismrunner": ("prism_location", PRISM_BIN),
}


class RunnerSetupError(UsageError, RuntimeError):
    """A runner's job server jar or binary is missing; the message says how to get it."""


def cache_dir() -> str:
    """``$TFRECORD_IO_RUNNER_CACHE``, else ``~/.cache/tfrecord-io/runners``."""
    return os.environ.get("TFRECORD_IO_RUNNER_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "tfrecord-io", "runners"
    )


def cached_path(runner: str) -> str:
    """Path of ``runner``'s jar/binary in the cache; raises RunnerSetupError if absent."""
    key = runner.lower()
    if key not in _CACHED:
        raise ValueError(f"no cached binary for runner {runner!r} (known: FlinkRunner, SparkRunner, PrismRunner)")
    path = os.path.join(cache_dir(), _CACHED[key][1])
    if not os.path.isfile(path):
        raise RunnerSetupError(
            f"{runner}: {path} does not exist; run scripts/fetch-runners first "
            f"(or set TFRECORD_IO_RUNNER_CACHE to where it put its output)"
        )
    return path


def runner_name(args: Sequence[str]) -> str:
    """The runner ``args`` choose, parsed the way Beam parses them (``--runner=X`` and
    ``--runner X``; the last one wins), ``DirectRunner`` when none is named.

    The one place that reads the runner from flags: ``options.is_local``, the local
    defaults (``options.beam_args``) and the runner binaries (:func:`add_runner_binaries`)
    all ask here.
    """
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    runner = PipelineOptions(list(args)).view_as(StandardOptions).runner
    return str(runner) if runner else "DirectRunner"


def add_runner_binaries(flags: Sequence[str]) -> List[str]:
    """``flags`` plus the cached jar / Prism binary flag when the chosen runner needs
    one and neither it nor ``--job_endpoint`` (an already running job server) is given.

    Raises RunnerSetupError (naming scripts/fetch-runners) when the cache lacks it:
    left alone, Beam would try to download a jar or binary this network does not serve.
    """
    flags = list(flags)
    runner = runner_name(flags)
    key = runner.rsplit(".", 1)[-1].lower()  # also apache_beam....flink_runner.FlinkRunner
    if key not in _CACHED:
        return flags
    option = _CACHED[key][0]
    given = {f.split("=", 1)[0] for f in flags if f.startswith("--")}
    if f"--{option}" in given or "--job_endpoint" in given:
        return flags
    return flags + [f"--{option}={cached_path(runner.rsplit('.', 1)[-1])}"]
