"""The optional C core of tfrecord-io; everything else is in ``pyproject.toml``.

``tfrecord_io/_speedups.c`` is built when a C compiler is present; if the build fails
(or ``TFRECORD_IO_PURE_PYTHON`` is set) the package installs without it and the
pure-Python implementation is used (same results).
"""

import os

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError, ExecError, PlatformError

HERE = os.path.dirname(os.path.abspath(__file__))
SPEEDUPS = os.path.join("tfrecord_io", "_speedups.c")

# What a missing or failing C toolchain raises: no compiler for this platform
# (PlatformError), the compiler or linker not found or not runnable (ExecError, OSError),
# a compile or link error (CCompilerError: CompileError, LinkError).
BUILD_FAILURES = (CCompilerError, ExecError, PlatformError, OSError)


class OptionalBuildExt(build_ext):
    """Build the C core if possible; fall back to pure Python if the toolchain fails."""

    def run(self):
        try:
            super().run()
        except BUILD_FAILURES as err:
            print(f"tfrecord-io: C speedups not built ({err}); using the pure-Python core")

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except BUILD_FAILURES as err:
            print(f"tfrecord-io: C speedups not built ({err}); using the pure-Python core")


ext_modules = []
if os.path.exists(os.path.join(HERE, SPEEDUPS)) and not os.environ.get("TFRECORD_IO_PURE_PYTHON"):
    ext_modules.append(Extension("tfrecord_io._speedups", sources=[SPEEDUPS], extra_compile_args=["-O3"]))

setup(ext_modules=ext_modules, cmdclass={"build_ext": OptionalBuildExt})
