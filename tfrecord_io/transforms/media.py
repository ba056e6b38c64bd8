"""Getting a media value's bytes: from bytes in the row, or from a path on any
filesystem ``tfrecord_io.storage.files`` can open (local, or ``gs://``/``s3://``/... through
Beam's FileSystems).

Failures become :class:`EncodeError` at stage ``read`` with the path, so a missing or
empty file is reported, not raised out of a worker.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Tuple

from tfrecord_io.errors import StorageUnavailableError
from tfrecord_io.storage import files

from .encode_errors import EncodeError


def load_media(value: Any, max_bytes: Optional[int] = None) -> Tuple[bytes, Optional[str]]:
    """``(data, path)``: the bytes of ``value`` and the path they came from (None for bytes).

    ``value`` is ``bytes``/``bytearray``/``memoryview`` (used as is) or a path
    (``str``/``os.PathLike``). Empty data is refused: nothing can decode zero bytes, and
    an empty file is almost always a failed download or copy.
    """
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if not data:
            raise EncodeError("read", "the value is empty (0 bytes)")
        return data, None
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise EncodeError("input", f"expected a path or bytes, got {type(value).__name__}")
    if not value:
        raise EncodeError("input", "empty path")
    path = value
    try:
        data = files.read_bytes(path, max_bytes)
    except FileNotFoundError:
        raise EncodeError("read", f"{path}: no such file") from None
    except IsADirectoryError:
        raise EncodeError("read", f"{path}: is a directory, not a file") from None
    except StorageUnavailableError:
        raise  # the store is down, not this row's file: the job fails (rejecting every row would hide it)
    except Exception as err:  # noqa: BLE001 - any filesystem error is a read failure of this row
        raise EncodeError("read", f"{path}: cannot read ({type(err).__name__}: {err})") from None
    if not data:
        raise EncodeError("read", f"{path}: file is empty (0 bytes)")
    if max_bytes is not None and len(data) > max_bytes:
        raise EncodeError("read", f"{path}: larger than the {max_bytes}-byte limit")
    return data, path


def describe(path: Optional[str]) -> str:
    """``"path: "`` for messages about a file, ``""`` for in-row bytes."""
    return f"{path}: " if path else ""


__all__ = ["describe", "load_media"]
