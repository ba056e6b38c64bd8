"""Reading the layout of a built dataset, on any filesystem Beam opens.

::

    <root>/LATEST                        text: the name of the current version
    <root>/<version>/dataset_info.json   written last: its presence means the version is whole
    <root>/<version>/<split>/<name>-<split>.tfrecord-00000-of-00004 (+ .index)

Readers trust only what ``LATEST`` and ``dataset_info.json`` name: a version without
``dataset_info.json`` is unfinished (being built, or left by a failed run) and is never
resolved to. This is the read side only; ``pipelines/dataset_dir.py`` writes and
publishes. Paths are local or URLs (``s3://``, ``gs://`` ...) through
:mod:`tfrecord_io.files`; no Beam pipeline is involved.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from . import files

INFO_NAME = "dataset_info.json"
LATEST_NAME = "LATEST"


class DatasetLayoutError(ValueError):
    """A path is not a dataset root or version directory; the message says why."""


def _read_text(path: str) -> Optional[str]:
    try:
        if not files.exists(path):
            return None
        return files.read_bytes(path).decode("utf-8")
    except FileNotFoundError:
        return None


def read_latest(root: str) -> Optional[str]:
    """The name of the current version under ``root`` (from ``LATEST``), or None."""
    text = _read_text(files.join(root, LATEST_NAME))
    name = text.strip() if text else ""
    return name or None


def load_info(version_dir: str) -> Optional[Dict[str, Any]]:
    """The version's ``dataset_info.json`` as a dict, or None if it has none (unfinished)."""
    text = _read_text(files.join(version_dir, INFO_NAME))
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise DatasetLayoutError(f"{files.join(version_dir, INFO_NAME)}: not valid JSON ({err.msg})") from None


def resolve_version_dir(root: str, version: Optional[str] = None) -> str:
    """The directory of one whole version.

    - ``version`` given: ``root/version`` (it must hold ``dataset_info.json``);
    - ``root`` has ``LATEST``: ``root/<latest>``;
    - ``root`` is itself a version directory (holds ``dataset_info.json``): ``root``;
    - otherwise :class:`DatasetLayoutError` naming what was looked for.
    """
    root = str(root).rstrip("/") or "/"
    if version:
        candidate = files.join(root, version)
        if load_info(candidate) is None:
            raise DatasetLayoutError(f"{candidate}: no {INFO_NAME} (no such version, or its build did not finish)")
        return candidate
    latest = read_latest(root)
    if latest:
        candidate = files.join(root, latest)
        if load_info(candidate) is None:
            raise DatasetLayoutError(f"{root}/{LATEST_NAME} names {latest!r}, but {candidate} has no {INFO_NAME}")
        return candidate
    if load_info(root) is not None:
        return root
    raise DatasetLayoutError(f"{root}: not a dataset (no {LATEST_NAME}) and not a version directory (no {INFO_NAME})")
