"""Runnable jobs and the ``tfrecord-io`` command line: build, validate, index, inspect,
reshard. Each job is an Apache Beam pipeline configured by a YAML file under
``configs/`` (see ``pipelines.config``) plus command-line overrides."""
