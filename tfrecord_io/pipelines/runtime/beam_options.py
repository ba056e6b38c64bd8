"""Beam pipeline options for our jobs: local defaults, config ``runner`` sections, and
whatever Beam flags the user passes through on the command line.

Local default: ``DirectRunner`` with 2 workers in multi-processing mode, named
explicitly so Beam never goes looking for a runner to download; a small local input
runs in-process instead (one worker, ``in_memory``: ``runtime/parallelism.py``) unless
the command line or the config names ``--direct_num_workers`` / ``--direct_running_mode``.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence

from tfrecord_io.pipelines.runtime.runners import add_runner_binaries, runner_name

# runner_name is read here and re-exported: the options and the runner binaries parse
# the runner the same way, in runners (which needs nothing from this module).
from tfrecord_io.usage_errors import ConfigError

LOCAL_DEFAULTS: Dict[str, Any] = {
    "runner": "DirectRunner",
    "direct_num_workers": 2,
    "direct_running_mode": "multi_processing",
}

# Worker processes log every bundle at INFO; users see only problems unless --verbose.
QUIET = {"default_sdk_harness_log_level": "ERROR"}

LOCAL_RUNNERS = {"directrunner", "fnapirunner", "bundlebaseddirectrunner", "switchingdirectrunner", "prismrunner"}


def _flag(name: str, value: Any) -> List[str]:
    if isinstance(value, bool):
        return [f"--{name}"] if value else []
    if isinstance(value, (list, tuple)):
        return [f"--{name}={v}" for v in value]
    return [f"--{name}={value}"]


def runner_section(path: Optional[str]) -> Optional[Dict[str, Any]]:
    """The runner section of a ``--runner-config`` YAML (see :func:`load_runner_section`),
    or None without a file."""
    if not path:
        return None
    return load_runner_section(path)


def command_flags(runner_config: Optional[str], passthrough: Sequence[str], small_input: bool = False) -> List[str]:
    """Flags for a command without a job config: ``--runner-config``'s section under
    the Beam flags given on the command line (see :func:`beam_args`)."""
    return beam_args(runner_section(runner_config), passthrough, small_input=small_input)


def beam_args(
    runner_cfg: Optional[Mapping[str, Any]],
    passthrough: Sequence[str],
    quiet: bool = True,
    small_input: bool = False,
) -> List[str]:
    """Flags for ``PipelineOptions``: local defaults < config < command line.

    ``small_input``: the job's input is small (``runtime/parallelism.py``): on the local
    DirectRunner it runs in-process with one worker, unless the config or the command
    line names the local parallelism (``--direct_num_workers``, ``--direct_running_mode``).
    """
    from tfrecord_io.pipelines.runtime.parallelism import PARALLELISM_FLAGS, local_overrides

    merged: Dict[str, Any] = dict(LOCAL_DEFAULTS)
    cfg = dict(runner_cfg or {})
    chosen = set(cfg.get("options") or {}) | {a.split("=", 1)[0].lstrip("-") for a in passthrough if a.startswith("--")}
    if not chosen & set(PARALLELISM_FLAGS):
        merged.update(local_overrides(small_input))
    runner = cfg.get("runner")
    if runner and runner.lower() not in ("directrunner",):
        # Non-local runners do not take the direct runner's options.
        merged = {"runner": runner}
    elif runner:
        merged["runner"] = runner
    merged.update(cfg.get("options") or {})
    if quiet:
        merged = {**QUIET, **merged}
    passed = {a.split("=", 1)[0].lstrip("-") for a in passthrough if a.startswith("--")}
    if "runner" in passed and runner_name(passthrough).rsplit(".", 1)[-1].lower() != "directrunner":
        # another runner on the command line: the direct runner's defaults do not apply
        merged = {k: v for k, v in merged.items() if not k.startswith("direct_")}
    args: List[str] = []
    for name, value in merged.items():
        if name not in passed:
            args += _flag(name, value)
    # Flink / Spark / Prism: the job-server jar or binary from scripts/fetch-runners.
    return add_runner_binaries(args + list(passthrough))


def pipeline_options(runner_cfg: Optional[Mapping[str, Any]], passthrough: Sequence[str], small_input: bool = False):
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.storage import storage_retry  # noqa: F401 - registers --storage_timeout with Beam's options

    return PipelineOptions(beam_args(runner_cfg, passthrough, small_input=small_input))


def is_local(args: Sequence[str]) -> bool:
    """Does this run on this machine's DirectRunner (or Prism)? (Where the workers'
    progress and results go is decided from the options' environment as well:
    ``collect.workers_share_local_disk``.)"""
    name = runner_name(args).rsplit(".", 1)[-1].lower()
    return name in LOCAL_RUNNERS or name + "runner" in LOCAL_RUNNERS or name == "fn_api_runner"


_ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand_env(value: Any, where: str, source: str) -> Any:
    """``value`` with every ``${NAME}`` in its strings replaced by the environment's NAME."""
    if isinstance(value, dict):
        return {k: _expand_env(v, f"{where}.{k}", source) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_env(v, f"{where}[{i}]", source) for i, v in enumerate(value)]
    if not isinstance(value, str):
        return value

    def substitute(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ConfigError(
                f"{source}: {where}: environment variable {name} is not set "
                f"(for configs/*-cluster.yaml: run scripts/cluster up and source the cluster.env it prints)"
            )
        return os.environ[name]

    return _ENV_VAR.sub(substitute, value)


def load_runner_section(path: str) -> Dict[str, Any]:
    """The ``runner`` section of a runner config file (or the whole file if it has none),
    with ``${NAME}`` replaced from the environment -- how ``configs/*-cluster.yaml`` get the
    addresses ``scripts/cluster up`` wrote to its ``cluster.env``. An unset variable, a
    file that cannot be read or is not YAML is a ConfigError naming the file (and the
    field and the variable)."""
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except OSError as err:
        raise ConfigError(f"--runner-config {path}: cannot read it ({err.strerror or err})") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"--runner-config {path}: not valid YAML ({err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--runner-config {path}: expected a mapping with a runner section")
    return _expand_env(data.get("runner", data), "runner", path)
