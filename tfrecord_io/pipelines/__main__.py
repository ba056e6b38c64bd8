"""``python -m tfrecord_io.pipelines`` = the ``tfrecord-io`` command."""

from tfrecord_io.pipelines.cli import run

run()
