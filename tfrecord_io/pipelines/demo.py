"""The demo job: make a small multimodal media set locally, build a dataset from it on
the local runner (with its HTML report), validate the result, and show one decoded
record. The local runner's parallelism follows the input's size as for every command
(``runtime/parallelism.py``): the default 48 rows run in-process; ``--rows`` in the
thousands runs on 2 forked worker processes; Beam's flags (``--direct_num_workers=2
--direct_running_mode=multi_processing``) choose for themselves.

    python -m tfrecord_io.pipelines.demo [--out DIR] [--rows N]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import List, Optional

import numpy as np

from tfrecord_io.pipelines.runtime.arg_types import positive_int


def _show(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array shape={value.shape} dtype={value.dtype} mean={value.mean():.1f}"
    if hasattr(value, "samples") and hasattr(value, "sample_rate"):
        s = np.asarray(value.samples)
        channels = s.shape[1] if s.ndim > 1 else 1
        return f"audio {s.shape[0]} samples x {channels} channel(s) float32 at {value.sample_rate} Hz"
    return repr(value)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfrecord_io.pipelines.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", default="demo-output", help="working directory (default ./demo-output)")
    parser.add_argument("--rows", type=positive_int, default=48, help="how many media rows to generate")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also show Beam's and the workers' log messages here"
    )
    parser.add_argument("--log-file", metavar="PATH", help="keep the log here (default: kept only on failure)")
    args, beam_flags = parser.parse_known_args(argv)

    from tfrecord_io.pipelines.runtime.failures import JobLog, format_exception, root_cause
    from tfrecord_io.pipelines.runtime.startup import import_google_api_core_without_package_scan, no_ipython_probe

    # Everything Beam and its workers log (notes on optional dependencies when Beam is
    # imported, each worker's start-up) goes to the log file, as for every command: the
    # terminal shows the demo's own lines.
    with no_ipython_probe(), JobLog("demo", args.verbose, args.log_file) as log:
        try:
            import_google_api_core_without_package_scan()  # start-up probes (runtime/startup.py)
            return _run(args, beam_flags)
        except Exception as err:  # noqa: BLE001 - every failure ends in one line and the log kept
            log.keep = True
            log.record(format_exception(err))
            print(f"demo failed: {root_cause(err, log.thread_errors).line}\n  log: {log.path}", file=log.terminal)
            return 1


def _run(args: argparse.Namespace, beam_flags: List[str]) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.dataset import dataset_writer
    from tfrecord_io.format.reader import tfrecord_iterator
    from tfrecord_io.pipelines.building.build_config import load_config
    from tfrecord_io.pipelines.building.build_job import run_build
    from tfrecord_io.pipelines.building.encoders_config import make_encoders
    from tfrecord_io.pipelines.demo_data import make_demo_media
    from tfrecord_io.pipelines.runtime.beam_options import beam_args
    from tfrecord_io.pipelines.runtime.local_workers import fork_workers
    from tfrecord_io.pipelines.runtime.parallelism import record_input_is_small
    from tfrecord_io.pipelines.validate_job import run_validate, summary_lines
    from tfrecord_io.transforms import decode_example

    root = os.path.abspath(args.out)
    print(f"1/3 generating {args.rows} images, audio clips and captions (+1 broken image) in {root}")
    config_path = make_demo_media(root, args.rows)
    cfg = load_config(config_path, [("report", True)])  # and <version>/report.html (tfrecord-io report)
    flags = beam_args(cfg.runner.section(), beam_flags, small_input=cfg.input_is_small())
    print(f"2/3 building the dataset on the local runner ({' '.join(flags)})")
    options = PipelineOptions(flags)
    # as `tfrecord-io build` does: on 2 local workers, forked now (already imported)
    workers = fork_workers(options, preload=("tfrecord_io.transforms.rows",))
    with workers or contextlib.nullcontext():
        summary = run_build(cfg, options, workers=workers)
    print("\n".join("    " + line for line in summary.lines()))
    print("3/3 validating it (CRCs, feature spec, counts, checksums)")
    small = record_input_is_small([cfg.output.dir])
    report = run_validate(
        [cfg.output.dir], PipelineOptions(beam_args(cfg.runner.section(), beam_flags, small_input=small))
    )
    print("\n".join("    " + line for line in summary_lines(report)))

    version_dir = dataset_writer.resolve_dataset_dir(cfg.output.dir)
    first = next(s for s in summary.shards if s["records"])
    record = next(iter(tfrecord_iterator(os.path.join(version_dir, first["path"]))))
    decoded = decode_example(record, make_encoders(cfg.column_settings()))
    print(f"one decoded record from {first['path']}:")
    for key, value in decoded.items():
        print(f"    {key:<8} {_show(value)}")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
