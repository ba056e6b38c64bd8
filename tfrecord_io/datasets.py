"""The read side of a built dataset's layout, on any filesystem Beam opens.

::

    <root>/LATEST                       the current version's name
    <root>/<version>/dataset_info.json  features, splits (shard paths relative to the
                                        version directory, index paths, records, bytes)

A reader trusts only what ``LATEST`` and ``dataset_info.json`` name: ``dataset_info.json``
is written after every shard is in place and ``LATEST`` after that.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional

from . import files

INFO_NAME = "dataset_info.json"
LATEST_NAME = "LATEST"


def _join(root: str, name: str) -> str:
    return root.rstrip("/") + "/" + name


def _read_text(path: str) -> Optional[str]:
    try:
        with files.open_raw(path, "rb") as f:
            return f.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except OSError:
        if files.exists(path):
            raise
        return None


def read_latest(root: str) -> Optional[str]:
    """The name in ``<root>/LATEST``, or None when there is none."""
    text = _read_text(_join(root, LATEST_NAME))
    name = text.strip() if text else ""
    return name or None


def resolve_version_dir(root: str, version: Optional[str] = None) -> str:
    """``<root>/<version>``, the version ``LATEST`` names when ``version`` is None;
    ``FileNotFoundError`` when there is no ``LATEST`` to follow."""
    if version is None:
        version = read_latest(root)
        if version is None:
            raise FileNotFoundError(f"{_join(root, LATEST_NAME)} does not exist: {root} is not a built dataset")
    return _join(root, version)


def load_info(version_dir: str) -> Optional[Dict[str, Any]]:
    """The parsed ``dataset_info.json`` of a version directory, or None when absent."""
    text = _read_text(_join(version_dir, INFO_NAME))
    return None if text is None else json.loads(text)


__all__ = ["INFO_NAME", "LATEST_NAME", "load_info", "read_latest", "resolve_version_dir"]
