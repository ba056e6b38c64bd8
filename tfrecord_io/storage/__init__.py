"""Storage: open local or remote paths (Beam ``FileSystems`` for jobs, maintained
object-store libraries for S3 and GCS), ranged reads of S3, GCS and Azure objects
(``range_reads`` over ``s3_objects``, ``gcs_objects``, ``azure_objects``), retries, and
the mapping of each store's errors onto ``tfrecord_io.errors``.

Layer: the lowest after ``tfrecord_io.errors``; it imports nothing else of ours, so the
format core can read and write through it. Beam is imported inside functions only, when a
path needs it.
"""
