"""The layout of a built dataset: versions, ``tfrecord_io_info.json``, ``LATEST``,
splits and split selections, TFDS files, and both halves of it: ``dataset_reader`` (open a
version, select a split) and ``dataset_writer`` (claim, write and publish a version).

Layer: above the format core and storage, below Beam IO, torch, transforms and the jobs;
it imports none of those (``tests/test_import_cycles.py``).
"""
