"""The module paths of 0.2 and earlier, still importable after the package was grouped
by layer (``format/``, ``storage/``, ``dataset/``, ``beam/``; CHANGELOG "Unreleased").

Why: ``tfrecord_io.files``, ``tfrecord_io.datasets``, ``tfrecord_io.pipelines.build.job``
and the like were named in the README and docs of 0.2, so user code imports them. An
old path imports the module at its new place, with a ``DeprecationWarning`` naming the
new path, and *is* that module (``sys.modules`` holds the same object under both names:
no second copy of a module, its classes or its state). Nothing in the package imports an
old path (``tests/test_public_api.py``). To be removed in 1.0.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Dict, Optional, Sequence

_P = "tfrecord_io"

#: old dotted module -> new; a package's entry covers its submodules (longest prefix wins)
MOVED: Dict[str, str] = {
    **{
        f"{_P}.{m}": f"{_P}.format.{m}"
        for m in (
            "crc",
            "framing",
            "codec",
            "index",
            "reader",
            "writer",
            "random_access",
            "frame_copy",
            "sharding",
            "remote_reader",
            "key_index",
        )
    },  # fmt: skip
    **{
        f"{_P}.{m}": f"{_P}.storage.{m}"
        for m in (
            "files",
            "storage_retry",
            "storage_errors",
            "s3_clients",
            "s3_listing",
            "gcs_clients",
        )
    },  # fmt: skip
    **{
        f"{_P}.{m}": f"{_P}.dataset.{m}"
        for m in (
            "datasets",
            "dataset_reader",
            "splits",
            "path_specs",
            "permutation",
            "tfds_info",
            "keyed_dataset",
        )
    },  # fmt: skip
    **{f"{_P}.{m}": f"{_P}.beam.{m}" for m in ("beam_source", "beam_sink", "beam_arrow", "beam_dataset", "beam_io")},
    f"{_P}.pipelines.runtime.dataset_dir": f"{_P}.dataset.dataset_writer",
    f"{_P}.pipelines.runtime.errors": f"{_P}.usage_errors",
    f"{_P}.pipelines.runtime.options": f"{_P}.pipelines.runtime.beam_options",
    f"{_P}.transforms.errors": f"{_P}.transforms.encode_errors",
    f"{_P}.pipelines.build": f"{_P}.pipelines.building",
    f"{_P}.pipelines.build.job": f"{_P}.pipelines.building.build_job",
    f"{_P}.pipelines.build.config": f"{_P}.pipelines.building.build_config",
    f"{_P}.pipelines.build.spec": f"{_P}.pipelines.building.build_spec",
    f"{_P}.pipelines.build.rows": f"{_P}.pipelines.building.row_plan",
    f"{_P}.pipelines.report.job": f"{_P}.pipelines.report.report_job",
    f"{_P}.pipelines.report.media": f"{_P}.pipelines.report.previews",
    f"{_P}.pipelines.validate": f"{_P}.pipelines.validate_job",
    f"{_P}.pipelines.reshard": f"{_P}.pipelines.reshard_job",
    f"{_P}.pipelines.convert": f"{_P}.pipelines.convert_job",
    f"{_P}.pipelines.diff": f"{_P}.pipelines.diff_job",
    f"{_P}.pipelines.lookup": f"{_P}.pipelines.lookup_job",
}


def new_name(old: str) -> Optional[str]:
    """The module path ``old`` moved to (by its longest moved prefix), or None."""
    parts = old.split(".")
    for i in range(len(parts), 1, -1):
        head = ".".join(parts[:i])
        if head in MOVED:
            return ".".join([MOVED[head], *parts[i:]])
    return None


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path before the path finder does (which would otherwise load a moved
    package's submodules a second time under the old name) and loads it as the module
    at its new place."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]] = None, target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if not fullname.startswith(_P + ".") or new_name(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return None  # a placeholder, replaced in sys.modules by exec_module

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        new = new_name(old)
        assert new is not None
        warnings.warn(
            f"{old} moved to {new} (tfrecord-io's modules are grouped by layer after 0.2); "
            "the old path is deprecated and goes away in 1.0",
            DeprecationWarning,
            stacklevel=2,
        )
        # the import system returns what sys.modules holds under the name after this runs
        sys.modules[old] = importlib.import_module(new)


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedModules())


__all__ = ["MOVED", "install", "new_name"]
