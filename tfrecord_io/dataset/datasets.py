"""Reading the layout of a built dataset, on any filesystem Beam opens.

::

    <root>/LATEST                            text: the name of the current version
    <root>/<version>/tfrecord_io_info.json   written last: its presence means the version is whole
    <root>/<version>/dataset_info.json       TFDS's DatasetInfo (+ features.json, *.labels.txt)
    <root>/<version>/<split>/<name>-<split>.tfrecord-00000-of-00004 (+ .index)

Readers trust only what ``LATEST`` and our metadata name: a version without it is
unfinished (being built, or left by a failed run) and is never resolved to.

Two metadata files, because TFDS opens a version directory by a ``dataset_info.json``
that it parses strictly as its own proto (a field of ours in it is an error), so ours
cannot carry that name and TFDS's at once. Ours is ``tfrecord_io_info.json``; TFDS's
files beside it (``tfrecord_io.dataset.tfds_info``) are written before it, so they are part
of a whole version too. Versions built before TFDS's files existed have our metadata
in ``dataset_info.json``: :func:`load_info` still reads those (a ``dataset_info.json``
that is TFDS's alone, a version whose own metadata is missing, is unfinished).

This is the read side only; ``tfrecord_io/dataset/dataset_writer.py`` writes and
publishes. Paths are local or URLs (``s3://``, ``gs://`` ...) through
:mod:`tfrecord_io.storage.files`; no Beam pipeline is involved.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from ..storage import files

INFO_NAME = "tfrecord_io_info.json"
#: where our metadata was before TFDS's ``dataset_info.json`` took that name
LEGACY_INFO_NAME = "dataset_info.json"
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
    """The version's metadata as a dict (``tfrecord_io_info.json``, or the
    ``dataset_info.json`` of a version built before it), or None if it has none
    (unfinished)."""
    for name in (INFO_NAME, LEGACY_INFO_NAME):
        path = files.join(version_dir, name)
        text = _read_text(path)
        if text is None:
            continue
        try:
            info = json.loads(text)
        except json.JSONDecodeError as err:
            raise DatasetLayoutError(f"{path}: not valid JSON ({err.msg})") from None
        if name == LEGACY_INFO_NAME and is_tfds_info(info):
            return None  # TFDS's file: ours is missing, so the version is not whole
        return info
    return None


def is_tfds_info(info: Any) -> bool:
    """Is this JSON TFDS's ``DatasetInfo`` (splits as a list, a file format) rather than ours?"""
    return isinstance(info, dict) and (isinstance(info.get("splits"), list) or "fileFormat" in info)


def resolve_version_dir(root: str, version: Optional[str] = None) -> str:
    """The directory of one whole version.

    - ``version`` given: ``root/version`` (it must hold ``tfrecord_io_info.json``, or,
      built before that file existed, our ``dataset_info.json``: :func:`load_info`);
    - ``root`` has ``LATEST``: ``root/<latest>``;
    - ``root`` is itself a version directory (holds that metadata): ``root``;
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
