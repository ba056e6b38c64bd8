"""The layout of a built dataset, and the atomic steps that publish it.

::

    <out>/LATEST                      text: the name of the current version
    <out>/<version>/dataset_info.json written last: its presence means the build completed
    <out>/<version>/<split>/<name>-<split>.tfrecord-00000-of-00004 (+ .index)
    <out>/<version>/rejected-00000-of-00001.jsonl

A build writes into a fresh version directory; only after every shard is in place is
``dataset_info.json`` written (to a temporary name, then renamed), and only after that
is ``LATEST`` replaced (also by rename). A reader that follows ``LATEST`` therefore
never sees a half-built version, and a failed run leaves the previous version current.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Any, Dict, Optional

from tfrecord_io import files
from tfrecord_io.datasets import INFO_NAME, LATEST_NAME, DatasetLayoutError, load_info, read_latest  # noqa: F401


class DatasetDirError(ValueError):
    """The output directory cannot take this build; the message says why."""


def new_version_name(requested: str = "auto") -> str:
    """``auto`` -> a UTC timestamp such as ``20261130T081500Z`` (sortable)."""
    if requested and requested != "auto":
        if "/" in requested or requested.startswith("."):
            raise DatasetDirError(f"output.version {requested!r}: must be a plain directory name")
        return requested
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def _atomic_write(path: str, data: bytes) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def resolve_dataset_dir(path: str) -> str:
    """A dataset root (with LATEST) -> its current version directory; else ``path``
    unchanged (a version directory, or file patterns the caller treats as such)."""
    latest = read_latest(path)
    return files.join(path, latest) if latest else path


def check_output_dir(out_dir: str, name: str, feature_spec: Dict[str, Any], version: str) -> None:
    """Refuse to build into a directory that holds another dataset or this version.

    Another dataset: the current version's ``dataset_info.json`` has a different name or
    feature spec. A version directory that already exists is never overwritten.
    """
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise DatasetDirError(f"output {out_dir} exists and is not a directory")
    latest = read_latest(out_dir) if os.path.isdir(out_dir) else None
    if latest:
        info = load_info(os.path.join(out_dir, latest))
        if info is not None:
            if info.get("name") != name:
                raise DatasetDirError(
                    f"output {out_dir} holds dataset {info.get('name')!r}, not {name!r}; choose another output directory"
                )
            if info.get("features") != feature_spec:
                raise DatasetDirError(
                    f"output {out_dir} holds a {name!r} dataset with different features; "
                    "choose another output directory (or a new dataset name)"
                )
    elif os.path.isdir(out_dir) and any(
        n.endswith((".tfrecord", ".index")) or ".tfrecord-" in n for n in os.listdir(out_dir)
    ):
        raise DatasetDirError(f"output {out_dir} already holds TFRecord files that are not a versioned dataset")
    if os.path.exists(os.path.join(out_dir, version)):
        raise DatasetDirError(f"version directory {os.path.join(out_dir, version)} already exists")


def sha256_file(path: str, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def write_info(version_dir: str, info: Dict[str, Any]) -> str:
    """Write ``dataset_info.json`` atomically; call only when every shard is in place."""
    path = os.path.join(version_dir, INFO_NAME)
    _atomic_write(path, (json.dumps(info, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return path


def publish(out_dir: str, version: str) -> None:
    """Point ``LATEST`` at ``version`` (atomic rename), after its info file landed."""
    if load_info(os.path.join(out_dir, version)) is None:
        raise DatasetDirError(f"refusing to publish {version}: it has no {INFO_NAME}")
    _atomic_write(os.path.join(out_dir, LATEST_NAME), (version + "\n").encode("utf-8"))
