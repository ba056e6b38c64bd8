"""Old name of :mod:`tfrecord_io.path_specs` (turning "the files of a split" into a
list of files; ``tfrecord_io.sharding`` is what cuts files among readers), kept so
existing imports work."""

from .path_specs import (
    INDEX_SUFFIXES,
    TFDS_NAME,
    PathSpec,
    expand,
    has_glob,
    split_files,
    tfds_split,
    warn_missing_shards,
)

__all__ = [
    "INDEX_SUFFIXES",
    "TFDS_NAME",
    "PathSpec",
    "expand",
    "has_glob",
    "split_files",
    "tfds_split",
    "warn_missing_shards",
]
