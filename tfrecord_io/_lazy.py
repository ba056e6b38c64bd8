"""Names a package answers to without importing their module up front (PEP 562).

Why: ``tfrecord_io`` and ``tfrecord_io.transforms`` are usable without Apache Beam
(the format core, the encoders); their Beam-facing names (and pyarrow's) load on first
use, through a module ``__getattr__`` made here from a name -> module table.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable, Mapping


def lazy_getattr(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module-level ``__getattr__`` for ``package``: ``name`` is imported from
    ``modules[name]`` when first asked for; any other name is an ``AttributeError``."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(import_module(module), name)

    return __getattr__
