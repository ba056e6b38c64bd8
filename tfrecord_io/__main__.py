"""``python -m tfrecord_io`` = the ``tfrecord-io`` command (as ``python -m pip`` is pip).

Useful where the console script is not on ``PATH`` (a venv not activated, a worker image).
The command lives in ``tfrecord_io.pipelines`` (the top layer); it is imported by name at
run time so that the package's root keeps no import of the layer above it.
"""

import importlib

if __name__ == "__main__":
    importlib.import_module("tfrecord_io.pipelines.cli").run()
