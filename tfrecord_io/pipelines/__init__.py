"""The ``tfrecord-io`` jobs and their command line.

Layout (each layer imports only itself and the ones listed before it, and the layers of
``tfrecord_io`` below the pipelines: storage, format, dataset, beam, transforms; a test,
tests/test_import_cycles.py, checks it and that no import cycle exists, imports inside
functions included):

- ``runtime/``: what every job shares: Beam options (``beam_options``) and runner sections,
  local and cluster worker pools, the process tree, progress, results that travel through
  shared storage, failure reports and input patterns. The usage errors (exit status 2) are
  ``tfrecord_io.usage_errors`` and the dataset-version layout is ``tfrecord_io.dataset``
  (``dataset_writer``), below the pipelines, since the dataset layout raises and uses them.
- ``report/``: the HTML report: statistics job (``report_job``), charts and media previews
  (``previews``), the page.
- ``building/``: the build job (``build_job``; ``derive_job``: append and remove): its YAML
  config (``build_config``), encoders from config, manifest rows, the per-row plan
  (``row_plan``), placement of rows into splits and shards, and the pipeline.
- ``validate_job``, ``inspect_job``, ``reshard_job``, ``index_job``, ``convert_job``,
  ``diff_job``, ``lookup_job``: one module per job, each named ``<name>_job``
  (``demo_data``: the demo's media).
- ``commands`` / ``cli``: the ``tfrecord-io`` command (``python -m tfrecord_io.pipelines``);
  ``scheduled_build``: the entry point a scheduler (Airflow) runs; ``demo``: the demo.
"""
