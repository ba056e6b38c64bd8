"""Two costs of a command's start-up that buy it nothing, avoided while the command runs.

Each is a probe a library makes on import or on first use whose answer is known for a
command started from a shell; each is measured in benchmarks/README.md ("Start-up").

- ``import IPython`` (Beam's ``is_in_ipython()``, on every transform applied): ~0.25 s.
- ``importlib.metadata.packages_distributions()`` (google-api-core, imported by Beam
  when the ``[gcp]`` extra is installed): a scan of every installed distribution's files,
  0.4-0.7 s here, made only to name the package in a Python-version ``FutureWarning``
  (on Python 3.11 since 2026-10-24, one year before its end of life). google-api-core
  2.44 stopped making that scan; with it the deferral below changes nothing.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import sys
from typing import Any, Callable, Dict, Iterator, List


@contextlib.contextmanager
def no_ipython_probe() -> Iterator[None]:
    """Refuse ``import IPython`` while a command runs, unless IPython is already loaded.

    Why: Beam asks ``is_in_ipython()`` whenever a transform is applied to a pipeline,
    which imports IPython when it is installed (it is, wherever Jupyter is) only to learn
    that no notebook is running. A command started from a shell is never inside an
    IPython session; Beam treats the refused import as "not in IPython", which is the
    answer it would have found. Where IPython is already loaded (``main`` called from a
    notebook) nothing changes; the refusal is lifted when the command returns.
    """
    if "IPython" in sys.modules:
        yield
        return
    # None in sys.modules makes `import IPython` raise ImportError
    sys.modules["IPython"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.modules.get("IPython", 0) is None:
            del sys.modules["IPython"]


class _ScanOnDemand(Dict[str, List[str]]):
    """``packages_distributions()``'s mapping, scanned only when an answer needs it.

    Its keys are top-level import names, never dotted, so ``"google.api_core" in it``
    is False without a scan (google-api-core asks exactly that, for each Google package
    it imports, to name it in a warning). Every other read scans once and then answers
    from the real mapping."""

    def __init__(self, scan: Callable[[], Any]) -> None:
        super().__init__()
        self._scan: Any = scan

    def _filled(self) -> None:
        if self._scan is not None:
            scan, self._scan = self._scan, None
            self.update(scan())

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str) and "." in key:
            return False
        self._filled()
        return super().__contains__(key)

    def __getitem__(self, key: str) -> List[str]:
        self._filled()
        return super().__getitem__(key)

    def get(self, key: str, default: Any = None) -> Any:
        if "." in key:
            return default
        self._filled()
        return super().get(key, default)

    def __iter__(self) -> Iterator[str]:
        self._filled()
        return super().__iter__()

    def __len__(self) -> int:
        self._filled()
        return super().__len__()

    def keys(self) -> Any:
        self._filled()
        return super().keys()

    def values(self) -> Any:
        self._filled()
        return super().values()

    def items(self) -> Any:
        self._filled()
        return super().items()

    def __repr__(self) -> str:
        self._filled()
        return super().__repr__()


def import_google_api_core_without_package_scan() -> None:
    """Import google-api-core (when installed and not yet imported) with its
    ``packages_distributions()`` scan deferred to the first answer that needs it.

    Why: google-api-core checks the Python version on import and, within a year of that
    version's end of life, names the importing package in a ``FutureWarning``; to name it,
    it calls ``importlib.metadata.packages_distributions()`` (cached for the process),
    which reads the file list of every installed distribution: 0.4-0.7 s of a job's
    start-up with a few hundred packages installed, for a lookup of dotted module names
    that such a mapping never holds. Only google-api-core's own cache receives the
    deferred mapping: ``importlib.metadata`` is restored before this returns, and the
    warnings are the same as without it.
    """
    if "google.api_core" in sys.modules:
        return
    real = importlib.metadata.packages_distributions
    importlib.metadata.packages_distributions = lambda: _ScanOnDemand(real)
    try:
        import google.api_core  # noqa: F401
    except ImportError:  # no [gcp] extra: nothing to defer
        pass
    finally:
        importlib.metadata.packages_distributions = real


__all__ = ["import_google_api_core_without_package_scan", "no_ipython_probe"]
