"""``python -m tfrecord_io`` = the ``tfrecord-io`` command (as ``python -m pip`` is pip).

Useful where the console script is not on ``PATH`` (a venv not activated, a worker image).
"""

import sys

from tfrecord_io.pipelines.cli import main

if __name__ == "__main__":
    sys.exit(main())
