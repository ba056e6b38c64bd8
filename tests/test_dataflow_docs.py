"""docs/dataflow.md ("Running on Dataflow"): its flags are Beam's, its files exist, and they are what
tests/test_clean_workers.py runs on clean workers; the worker requirements file is the
[media] and [aws] extras at the pinned lane's versions. Quick (no cluster, no network)."""

from __future__ import annotations

import os
import re
import shlex
import sys
from typing import Dict, List

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.9 / 3.10
    import tomli as tomllib

from apache_beam.options.pipeline_options import PipelineOptions

from tfio_testutil import REPO

WORKER_REQUIREMENTS = os.path.join("constraints", "workers-media.txt")


DATAFLOW_PAGE = os.path.join("docs", "dataflow.md")


def dataflow_section() -> str:
    """The docs page "Running on Dataflow" (it was the README's section of that name)."""
    with open(os.path.join(REPO, DATAFLOW_PAGE), encoding="utf-8") as f:
        text = f.read()
    assert text.startswith("# Running on Dataflow\n"), f"{DATAFLOW_PAGE} is no longer the Dataflow page"
    return text


def dataflow_command() -> List[str]:
    """The section's command, its lines joined."""
    (block,) = re.findall(r"```bash\n(.*?)```", dataflow_section(), re.S)
    return shlex.split(block.replace("\\\n", " "))


def flags(words: List[str]) -> Dict[str, str]:
    return dict(w[2:].split("=", 1) for w in words if w.startswith("--") and "=" in w)


def pinned() -> Dict[str, str]:
    with open(os.path.join(REPO, "constraints", "pinned.txt"), encoding="utf-8") as f:
        return dict(line.strip().lower().split("==") for line in f if "==" in line and not line.startswith("#"))


def requirement_lines() -> List[str]:
    with open(os.path.join(REPO, WORKER_REQUIREMENTS), encoding="utf-8") as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def test_docs_dataflow_flags_are_beams_and_name_files_that_exist():
    command = dataflow_command()
    assert command[:2] == ["tfrecord-io", "build"], command
    given = flags(command)
    known = PipelineOptions([]).get_all_options()
    beam_flags = {k: v for k, v in given.items() if k != "output"}
    unknown = sorted(k for k in beam_flags if k not in known)
    assert unknown == [], f"{DATAFLOW_PAGE} names flags Beam does not know: {unknown}"
    for flag in ("runner", "project", "region", "temp_location", "setup_file", "requirements_file"):
        assert flag in given, flag
    assert given["runner"] == "DataflowRunner" and given["temp_location"].startswith("gs://")
    assert os.path.basename(given["setup_file"]) == "setup.py"
    assert os.path.isfile(os.path.join(REPO, given["setup_file"]))
    assert given["requirements_file"] == WORKER_REQUIREMENTS
    assert given["requirements_cache"] == "skip"
    # the other ways it names: a wheel, the image
    section = dataflow_section()
    assert "--extra_package=dist/" in section and "--sdk_container_image=" in section


def test_docs_dataflow_flags_are_what_the_clean_worker_tests_stage():
    import test_clean_workers

    given = flags(dataflow_command())
    assert test_clean_workers.WORKER_REQUIREMENTS == given["requirements_file"]
    assert f"--setup_file={given['setup_file']}" in test_clean_workers.SETUP_FILE_STAGING
    assert f"--requirements_cache={given['requirements_cache']}" in test_clean_workers.REQUIREMENTS_STAGING


def test_worker_requirements_are_the_media_and_aws_extras_at_the_pinned_versions():
    """All of ``[media]`` and ``[aws]`` but librosa, which the default encoders do not
    import (soxr resamples; tests/test_encoder_requirements.py)."""
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        extras = tomllib.load(f)["project"]["optional-dependencies"]
    wanted = {re.split(r"[<>=!~\[ ]", spec, maxsplit=1)[0].lower() for spec in extras["media"] + extras["aws"]}
    assert "librosa" in wanted
    wanted.discard("librosa")
    lines = requirement_lines()
    named = {line.split("==")[0].lower() for line in lines}
    assert named == wanted, f"{WORKER_REQUIREMENTS} names {sorted(named)}, the extras {sorted(wanted)}"
    pins = pinned()
    for line in lines:
        name, version = line.lower().split("==")
        assert pins.get(name) == version, f"{line}: constraints/pinned.txt has {name}=={pins.get(name)}"
