"""Whether the libraries a spec's encoders import are there, checked before the first row.

Why: on workers that start clean and install what the job stages (Dataflow, a PROCESS or
DOCKER environment on Flink or Spark), a media library left out of the staged
requirements is not bad input: without this check each row would fail on the import and
go to the dead-letter output, a whole dataset rejected row by row. Checked once per
worker (the encode DoFns' set-up), it fails the job at once with what to install, and
the heavy imports happen then, not in the first row's time.
"""

from __future__ import annotations

import importlib
from typing import List, Mapping, Tuple

from tfrecord_io.usage_errors import MissingDependencyError

from .encoders.base import ColumnEncoder, Requirement

#: What a worker that starts clean needs staged (docs/dataflow.md).
STAGING_HINT = (
    "Install it where the rows are encoded: pip install 'tfrecord-io[media]'; on workers that start clean "
    "(Dataflow, PROCESS / DOCKER environments) stage it with --requirements_file constraints/workers-media.txt, "
    "adding librosa for resamplers other than soxr_* (docs/dataflow.md)"
)


def _importable(module: str) -> str:
    """'' when ``module`` imports here, else why not (a library can be installed and
    still fail to load, as soundfile does without libsndfile)."""
    try:
        importlib.import_module(module)
    except (ImportError, OSError) as err:
        return f"{type(err).__name__}: {err}"
    return ""


def missing_requirements(spec: Mapping[str, ColumnEncoder]) -> List[Tuple[str, Requirement, str]]:
    """``(column, requirement, why it does not import)`` for each library a column's
    encoder needs and this process cannot import."""
    found: List[Tuple[str, Requirement, str]] = []
    for column, encoder in spec.items():
        for need in encoder.requirements():
            error = _importable(need.module)
            if error:
                found.append((column, need, error))
    return found


def check_requirements(spec: Mapping[str, ColumnEncoder]) -> None:
    """Import what ``spec``'s encoders need; :class:`MissingDependencyError` naming each
    column, library and use, and what to install, if any does not import."""
    missing = missing_requirements(spec)
    if missing:
        what = "; ".join(
            f"column {column!r} ({type(spec[column]).__name__}) needs {need.package} ({need.why}), "
            f"which does not import here ({error})"
            for column, need, error in missing
        )
        raise MissingDependencyError(f"{what}. {STAGING_HINT}")


__all__ = ["check_requirements", "missing_requirements"]
