"""How many local workers a job gets: from the size of its input.

Why: two local worker processes cost a fixed ~0.5-1 s (forking them, Beam's gRPC
control and data planes between launcher and workers, one round trip per stage and
bundle) and save at most half of the job's work. Below a few tens of MB the work is
smaller than that cost, so a small ``validate`` or ``inspect`` would wait on Beam's
plumbing, not on its data. A small input runs in-process instead: Beam's DirectRunner
in ``in_memory`` mode with one worker (the same FnApiRunner, bundles and transforms,
in the launcher's own process); a large one keeps the local defaults (2 workers,
``multi_processing``).

Only the local DirectRunner's defaults change, and only when neither the command
line nor the runner config names ``--direct_num_workers`` or
``--direct_running_mode``: those flags always win. Inputs on an object store (``s3://``,
``gs://`` ...) are not measured (that would cost a listing before the job) and keep
the defaults.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Dict, Iterable, Optional

from tfrecord_io.dataset.path_specs import has_glob
from tfrecord_io.storage import files

#: Record jobs (validate, inspect, report, reshard, index): inputs below this many bytes
#: run in-process. A single core validates ~60-100 MB/s through Beam here, so 32 MiB
#: is ~0.3-0.5 s of work: less than what a second worker would save minus what it costs
#: (benchmarks/README.md, "Small inputs run small").
SMALL_INPUT_BYTES = 32 << 20
#: Builds: a media tree (or a manifest's folder) below this many bytes and files, and a
#: manifest below SMALL_MANIFEST_BYTES, runs in-process. A row costs far more than a byte
#: of a record (decode, resize, encode), so the bounds are lower.
SMALL_BUILD_BYTES = 16 << 20
SMALL_BUILD_FILES = 1000
SMALL_MANIFEST_BYTES = 256 << 10

_log = logging.getLogger(__name__)

#: What a small input runs on: the DirectRunner in the launcher's process, one worker.
IN_PROCESS: Dict[str, Any] = {"direct_running_mode": "in_memory", "direct_num_workers": 1}
#: Beam flags that decide the local parallelism; any of them given means the user chose.
PARALLELISM_FLAGS = ("direct_num_workers", "direct_running_mode")


def local_input_bytes(paths: Iterable[str], limit: int) -> Optional[int]:
    """Bytes of the TFRecord files ``paths`` name (a dataset, directories, files,
    globs: as the jobs resolve them), counted up to ``limit`` (a larger input returns a
    number >= ``limit`` without being listed to the end). None when any path is on an
    object store, or names nothing (the job reports that itself)."""
    from tfrecord_io.pipelines.runtime.inputs import expand_patterns

    paths = list(paths)
    if not paths or any(files.is_remote(p) for p in paths):
        return None
    try:
        matched = expand_patterns(paths)
    except Exception:  # noqa: BLE001 - an unreadable input is the job's to report, with its own message
        return None
    if not matched:
        return None
    total = 0
    for path in matched:
        try:
            total += os.path.getsize(path)
        except OSError:
            continue
        if total >= limit:
            break
    return total


def _tree_is_small(root: str, glob: str = "*") -> bool:
    """Is the local tree under ``root`` below SMALL_BUILD_BYTES and SMALL_BUILD_FILES?
    Stops walking as soon as it is not."""
    import fnmatch

    total, count = 0, 0
    for folder, _, names in os.walk(root):
        for name in names:
            if glob != "*" and not fnmatch.fnmatch(name, glob):
                continue
            count += 1
            try:
                total += os.path.getsize(os.path.join(folder, name))
            except OSError:
                continue
            if count >= SMALL_BUILD_FILES or total >= SMALL_BUILD_BYTES:
                return False
    return True


def build_input_is_small(manifest: Optional[str] = None, directory: Optional[str] = None, glob: str = "*") -> bool:
    """Is a build's input (a config's ``input``: its ``manifest``, or its ``directory``
    and ``glob``) small enough to run in-process? A local manifest below
    SMALL_MANIFEST_BYTES whose folder holds less than SMALL_BUILD_BYTES in fewer than
    SMALL_BUILD_FILES files, or a local media tree as small. Anything on an object
    store: no."""
    if manifest:
        if files.is_remote(manifest) or has_glob(manifest):
            return False
        try:
            if os.path.getsize(manifest) >= SMALL_MANIFEST_BYTES:
                return False
        except OSError:
            return False  # the build reports a missing manifest itself
        small = _tree_is_small(os.path.dirname(os.path.abspath(manifest)))
    else:
        if not directory or files.is_remote(directory) or not os.path.isdir(directory):
            return False
        small = _tree_is_small(directory, glob)
    if small:
        _log.info(
            "small input (a local tree under %d bytes and %d files): "
            "the local runner builds in-process on one worker unless Beam flags choose",
            SMALL_BUILD_BYTES,
            SMALL_BUILD_FILES,
        )
    return small


def local_overrides(small: bool) -> Dict[str, Any]:
    """The local-runner options for an input of this size: :data:`IN_PROCESS` when
    small, else nothing (the local defaults: 2 workers, ``multi_processing``)."""
    return dict(IN_PROCESS) if small else {}


def record_input_is_small(paths: Iterable[str]) -> bool:
    """Is a record job's input local and below SMALL_INPUT_BYTES? (Said in the job's log.)"""
    size = local_input_bytes(paths, SMALL_INPUT_BYTES)
    small = size is not None and size < SMALL_INPUT_BYTES
    if small:
        _log.info(
            "small input (%d bytes of TFRecord files): "
            "the local runner runs it in-process on one worker unless Beam flags choose",
            size,
        )
    return small


__all__ = [
    "IN_PROCESS",
    "PARALLELISM_FLAGS",
    "SMALL_BUILD_BYTES",
    "SMALL_BUILD_FILES",
    "SMALL_INPUT_BYTES",
    "SMALL_MANIFEST_BYTES",
    "build_input_is_small",
    "local_input_bytes",
    "local_overrides",
    "record_input_is_small",
]
