"""``python -m pipelines`` = the ``tfrecord-io`` command."""

import sys

from .cli import main

sys.exit(main())
