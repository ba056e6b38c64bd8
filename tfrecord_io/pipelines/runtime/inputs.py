"""Which TFRecord files a command reads: the one place the jobs resolve their inputs.

A dataset (its root with ``LATEST``, or a version directory with ``tfrecord_io_info.json``;
local or any Beam filesystem) means the shards it lists; a directory or URL prefix
means every ``*.tfrecord*`` file under it (index files excluded); anything else is a
glob. ``validate``, ``index``, ``inspect`` and ``reshard`` all ask here.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Optional, Tuple

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.dataset.path_specs import has_glob
from tfrecord_io.format.index import INDEX_SUFFIXES
from tfrecord_io.storage import files
from tfrecord_io.usage_errors import NoInputError


def dataset_target(paths: List[str]) -> Tuple[Optional[str], Optional[Dict[str, Any]]]:
    """``(version_dir, info)`` when ``paths`` names one built dataset (its root, following
    ``LATEST``, or a version directory; local or any Beam filesystem), else ``(None, None)``."""
    version_dir, info = dataset_writer.find_dataset(paths)
    return (version_dir, info) if info is not None else (None, None)


def _tfrecord_files(names: Iterable[str]) -> List[str]:
    return [
        p
        for p in names
        if ".tfrecord" in p.rsplit("/", 1)[-1]
        and not p.endswith((*INDEX_SUFFIXES, ".tmp"))
        and not p.rsplit("/", 1)[-1].startswith((".", "_"))
    ]


def expand_patterns(patterns: Iterable[str]) -> List[str]:
    """Files matching the patterns, each pattern on its own. A dataset root (with
    ``LATEST``) means the shards of its current version; a directory or URL prefix means
    every ``*.tfrecord*`` file under it (index files excluded); anything else is a glob."""
    out: List[str] = []
    for pattern in patterns:
        version_dir, info = dataset_writer.find_dataset([pattern])
        if version_dir is not None and info is not None:
            out.extend(s["abspath"] for s in dataset_writer.dataset_shards(version_dir, info))
        elif os.path.isdir(pattern):
            for root, _, names in os.walk(pattern):
                out.extend(_tfrecord_files(os.path.join(root, name) for name in sorted(names)))
        elif files.is_remote(pattern) and not has_glob(pattern) and not files.exists(pattern):
            out.extend(_tfrecord_files(files.list_prefix(pattern)))  # a "directory" on an object store
        else:
            out.extend(p for p in files.glob(pattern) if not p.endswith(INDEX_SUFFIXES))
    return sorted(dict.fromkeys(out))


def resolve_inputs(paths: List[str]) -> List[str]:
    """The shards of the dataset ``paths`` names together (see :func:`dataset_target`),
    else :func:`expand_patterns` of them."""
    version_dir, info = dataset_target(paths)
    if version_dir is not None and info is not None:
        return [s["abspath"] for s in dataset_writer.dataset_shards(version_dir, info)]
    return expand_patterns(paths)


def no_input_error(paths: List[str]) -> NoInputError:
    """The usage error for ``paths`` that name no TFRecord file: which of them do not
    exist at all, and which exist but hold none (``*.tfrecord*``, index files excluded)."""
    missing, empty = [], []
    for path in paths:
        if has_glob(path):
            missing.append(path)  # a pattern that matched nothing
        elif files.exists(path) or os.path.isdir(path) or (files.is_remote(path) and files.list_prefix(path)):
            empty.append(path)
        else:
            missing.append(path)
    parts = []
    if missing:
        parts.append(f"nothing matches {' '.join(missing)}")
    if empty:
        parts.append(f"no *.tfrecord* file in {' '.join(empty)}")
    return NoInputError(f"no TFRecord files to read: {'; '.join(parts)}")
