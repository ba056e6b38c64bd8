"""The ``tfrecord-io`` jobs and their command line.

Layout (each layer imports only itself and the ones listed before it; a test,
tests/test_import_cycles.py, checks it and that no import cycle exists, imports inside
functions included):

- ``runtime/``: what every job shares: Beam options and runner sections, local and cluster
  worker pools, the process tree, progress, results that travel through shared storage,
  failure reports, the usage errors (``errors``: exit status 2), input patterns and the
  dataset-version layout (``dataset_dir``).
- ``report/``: the HTML report: statistics job, charts and media previews, the page.
- ``build/``: the build job: its YAML config, encoders from config, manifest rows,
  placement of rows into splits and shards, and the pipeline (``job``, which writes the
  build's report with ``report/``).
- ``validate``, ``inspect_job``, ``reshard``, ``index_job``: one module per job
  (``demo_data``: the demo's media).
- ``commands`` / ``cli``: the ``tfrecord-io`` command (``python -m tfrecord_io.pipelines``);
  ``scheduled_build``: the entry point a scheduler (Airflow) runs; ``demo``: the demo.
"""
