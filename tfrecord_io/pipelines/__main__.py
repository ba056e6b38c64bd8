"""``python -m tfrecord_io.pipelines`` = the ``tfrecord-io`` command."""

import sys

from tfrecord_io.pipelines.cli import main

sys.exit(main())
