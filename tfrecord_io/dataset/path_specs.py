"""Turning what a user gives as "the files of a split" into a list of files: one path,
a glob, a list, or a ``'{}'`` pattern filled with split names; and reading the split of
TFDS-style shard names (``mnist-train.tfrecord-00001-of-01024``).
"""

from __future__ import annotations

import os
import re
import warnings
from typing import Dict, List, Mapping, Optional, Sequence, Union

from ..format.index import (
    INDEX_SUFFIXES,
)  # index files beside data files, which a glob such as data/train-* also matches
from ..storage import files

PathSpec = Union[str, Sequence[str]]

#: ``<dataset>-<split>.<ext>-<shard>-of-<count>``, as TFDS writes shard files.
TFDS_NAME = re.compile(r"^(?P<dataset>.+)-(?P<split>[^-/]+)\.(?P<ext>[^-/.]+)-(?P<shard>\d+)-of-(?P<count>\d+)$")

_GLOB_CHARS = set("*?[")


def has_glob(path: str) -> bool:
    return any(c in path for c in _GLOB_CHARS)


def expand(spec: PathSpec) -> List[str]:
    """A path, a glob or a list of paths -> paths. A glob gives its sorted matches
    except index files (names ending in ``INDEX_SUFFIXES``), and an error if none."""
    if isinstance(spec, (str, os.PathLike)):
        spec = str(spec)
        if has_glob(spec):
            found = [p for p in files.glob(spec) if not p.endswith(INDEX_SUFFIXES)]
            if not found:
                raise FileNotFoundError(f"no file matches {spec!r}")
            return found
        return [spec]
    out: List[str] = []
    for item in spec:
        out.extend(expand(item))
    return out


def tfds_split(path: str) -> Optional[str]:
    """The split of a TFDS-style shard file name, or None for other names."""
    m = TFDS_NAME.match(os.path.basename(str(path)))
    return m.group("split") if m else None


def warn_missing_shards(paths: Sequence[str]) -> List[str]:
    """Warn (and return the names) when TFDS-style ``-of-N`` shards are missing from a
    set that holds some of them: a partial set is allowed but never silent."""
    groups: Dict[tuple, set] = {}
    for p in paths:
        m = TFDS_NAME.match(os.path.basename(str(p)))
        if m:
            key = (os.path.dirname(str(p)), m.group("dataset"), m.group("split"), m.group("ext"), m.group("count"))
            groups.setdefault(key, set()).add(int(m.group("shard")))
    missing: List[str] = []
    for (directory, dataset, split, ext, count), have in groups.items():
        width = len(count)
        for k in range(int(count)):
            if k not in have:
                missing.append(os.path.join(directory, f"{dataset}-{split}.{ext}-{k:0{width}d}-of-{count}"))
    if missing:
        warnings.warn(
            f"{len(missing)} TFDS shard file(s) not given, e.g. {missing[0]}: reading a partial split",
            stacklevel=3,
        )
    return missing


def split_files(
    data_pattern: Union[PathSpec, Mapping[str, PathSpec]],
    names: Optional[Sequence[str]],
) -> Dict[str, List[str]]:
    """``{split: files}`` for the split ``names`` (None: one source named ``""``).

    - a mapping: ``data_pattern[name]`` is each split's path, glob or list;
    - a string with ``'{}'``: ``data_pattern.format(name)`` (a path or a glob);
    - any other glob or list: the files, grouped by their TFDS split name.
    """
    if isinstance(data_pattern, Mapping):
        if names is None:
            names = list(data_pattern)
        missing = [n for n in names if n not in data_pattern]
        if missing:
            raise ValueError(f"no files given for split(s) {missing}")
        out = {n: expand(data_pattern[n]) for n in names}
    elif isinstance(data_pattern, str) and "{}" in data_pattern:
        if names is None:
            raise ValueError("a data_pattern with '{}' needs splits to fill it")
        out = {n: expand(data_pattern.format(n)) for n in names}
    else:
        paths = expand(data_pattern)
        if names is None:
            out = {"": paths}
        else:
            out = {n: [p for p in paths if tfds_split(p) == n] for n in names}
            empty = [n for n, ps in out.items() if not ps]
            if empty:
                found = sorted({s for s in map(tfds_split, paths) if s is not None})
                raise ValueError(
                    f"no file of split(s) {empty} among {len(paths)} files (TFDS names "
                    f"'<name>-<split>.tfrecord-00000-of-00008'; splits found: {found})"
                )
    for ps in out.values():
        warn_missing_shards(ps)
    return out


__all__ = ["INDEX_SUFFIXES", "TFDS_NAME", "expand", "has_glob", "split_files", "tfds_split", "warn_missing_shards"]
