"""Apache Beam IO: the splittable TFRecord source, ``ReadAllFromTFRecord``, the sharded
atomic sink, Arrow record batches, and reading a built dataset in a pipeline.

The only package below the transforms and the jobs that imports Beam at module level;
``tfrecord_io`` loads these names on first use, so the format core works without Beam.
"""
