"""The package version, in one place: read by ``pyproject.toml`` (setuptools' dynamic
``version``, which parses this file without importing the package), exported as
``tfrecord_io.__version__`` and written by the build job into ``tfrecord_io_info.json`` as
``tool_version``."""

__version__ = "0.2.0"
