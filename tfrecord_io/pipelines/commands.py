"""The ``tfrecord-io`` commands: parsed arguments in, the job run, its summary printed,
the exit status out.

One ``cmd_*`` per command, each a thin shell around the job module's ``run_*``
(``build.job``, ``index_job``, ``validate``, ``inspect_job``, ``reshard``, ``report.job``);
the job modules never import this module or the CLI. Job modules are imported when their
command runs, so ``--help`` stays fast and a missing module is a real error, not a
missing command. Bad usage is raised where it is found, as a ``usage_errors.UsageError``:
the CLI turns exactly that family into exit status 2. What a failed ``build`` or
``reshard`` leaves is described by :class:`BuildState` and :func:`reshard_state` for the
CLI's failure block.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from tfrecord_io.pipelines.runtime.beam_options import beam_args, command_flags, pipeline_options, runner_section
from tfrecord_io.storage import files


def _forked_workers(options, *preload: str):
    """Local workers forked now for a record job on the DirectRunner's multi-process
    workers (already imported: no interpreter start-up per worker, see
    ``runtime.local_workers``), or None where the runner starts its own."""
    from tfrecord_io.pipelines.runtime.local_workers import fork_workers

    return fork_workers(options, preload=("tfrecord_io.beam.beam_source", "tfrecord_io.beam.beam_sink", *preload))


@contextlib.contextmanager
def _record_job(args, beam_flags: List[str], *preload: str) -> Iterator[Tuple[Any, bool, Any]]:
    """``(options, progress, workers)`` for a record job's ``run_*`` (validate, inspect,
    reshard, report), the same for each: the pipeline options from ``--runner-config``
    and the Beam flags; the progress line unless ``--no-progress`` (on a cluster it goes
    through shared storage, like the results: ``runtime/progress.py``); the local workers forked
    for the DirectRunner (``preload``: the job's modules), stopped when the job is over. A
    small local input runs in-process, with no worker to fork (``runtime/parallelism.py``)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.pipelines.runtime.parallelism import record_input_is_small

    flags = command_flags(args.runner_config, beam_flags, small_input=record_input_is_small(args.paths))
    options = PipelineOptions(flags)
    workers = _forked_workers(options, *preload)
    with workers or contextlib.nullcontext():
        yield options, not args.no_progress, workers


def cmd_build(args, beam_flags: List[str]) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.pipelines.building.build_config import load_config, parse_overrides
    from tfrecord_io.pipelines.building.build_job import run_build
    from tfrecord_io.pipelines.runtime.local_workers import fork_workers

    overrides = parse_overrides(args.set)
    if args.output:
        # URLs (s3://, gs:// ...) as given: abspath would turn them into a local "s3:" directory.
        overrides.append(("output.dir", args.output if "://" in args.output else os.path.abspath(args.output)))
    if args.version:
        overrides.append(("output.version", args.version))
    if args.num_shards:
        overrides.append(("sharding.num_shards", args.num_shards))
    cfg = load_config(args.config, overrides)
    runner_cfg = runner_section(args.runner_config) or cfg.runner.section()
    flags = beam_args(runner_cfg, beam_flags, small_input=cfg.input_is_small())
    # run_build names the version it claims (an `auto` name may get a suffix when taken);
    # the failure block then says exactly what this run left there.
    args.failure_state = BuildState(cfg.output.dir)
    options = PipelineOptions(flags)
    # DirectRunner's multi-process workers: forked now, already imported, while the
    # launcher plans (tfrecord_io/pipelines/runtime/local_workers.py); other runners start their own.
    workers = fork_workers(options, preload=("tfrecord_io.transforms.rows",))
    if getattr(args, "append", False) or getattr(args, "remove", None):
        from tfrecord_io.pipelines.building.derive_job import run_derive

        with workers or contextlib.nullcontext():
            summary = run_derive(
                cfg,
                options,
                append=bool(args.append),
                remove=args.remove,
                on_existing=args.on_existing,
                progress=not args.no_progress,
                on_version=args.failure_state.claimed,
                workers=workers,
            )
        print("\n".join(summary.lines()))
        return 0
    with workers or contextlib.nullcontext():
        summary = run_build(
            cfg,
            options,
            progress=not args.no_progress,
            on_version=args.failure_state.claimed,
            workers=workers,
        )
    print("\n".join(summary.lines()))
    return 0


def cmd_index(args, beam_flags: List[str]) -> int:
    from tfrecord_io.dataset.dataset_writer import use_filesystems
    from tfrecord_io.pipelines.index_job import run_index
    from tfrecord_io.pipelines.runtime.inputs import expand_patterns, no_input_error
    from tfrecord_io.pipelines.runtime.parallelism import record_input_is_small
    from tfrecord_io.pipelines.runtime.progress import ProgressPrinter

    small = record_input_is_small(args.paths)
    options = pipeline_options(runner_section(args.runner_config), beam_flags, small_input=small)
    use_filesystems(options, args.paths)  # S3 flags for the launcher; unknown scheme -> exit 2
    paths = expand_patterns(args.paths)
    if not paths:
        raise no_input_error(args.paths)
    progress = not args.no_progress  # on a cluster through shared storage, like the results (runtime/progress.py)
    workers = _forked_workers(options, "tfrecord_io.pipelines.index_job")
    with workers or contextlib.nullcontext():
        bar = ProgressPrinter("index", enabled=progress, rate_stage="files", total=len(paths), options=options)
        with bar:
            results = run_index(paths, options, force=args.force, progress_dir=bar.dir, workers=workers)
    counts: Dict[str, int] = {}
    for r in results:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
        if r.get("error"):
            print(f"  {r['path']}: {r['state']}: {r['error']}", file=sys.stderr)
    print(
        f"index: {len(results)} files in {bar.elapsed:.1f}s: "
        + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
    )
    return 1 if counts.get("corrupt") else 0


def cmd_validate(args, beam_flags: List[str]) -> int:
    from tfrecord_io.pipelines.validate_job import run_validate, summary_lines

    if args.report:
        _check_writable(args.report, "--report")
    job = _record_job(args, beam_flags, "tfrecord_io.transforms.validate", "tfrecord_io.pipelines.validate_job")
    with job as (options, progress, workers):
        report = run_validate(args.paths, options, checksums=not args.no_checksums, progress=progress, workers=workers)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, sort_keys=True)
    print("\n".join(summary_lines(report)))
    if args.report:
        print(f"report: {args.report}")
    return 0 if report["ok"] else 1


def cmd_inspect(args, beam_flags: List[str]) -> int:
    from tfrecord_io.pipelines.inspect_job import run_inspect, summary_lines

    with _record_job(args, beam_flags, "tfrecord_io.pipelines.inspect_job") as (options, progress, workers):
        result = run_inspect(args.paths, options, args.head, progress=progress, workers=workers)
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print("\n".join(summary_lines(result)))
    return 0


def cmd_reshard(args, beam_flags: List[str]) -> int:
    from tfrecord_io.pipelines.reshard_job import parse_where, run_reshard

    where = parse_where(args.where)
    compression = "" if args.compression in ("", "none") else args.compression
    with _record_job(args, beam_flags, "tfrecord_io.pipelines.reshard_job") as (options, progress, workers):
        result = run_reshard(
            args.paths,
            args.output,
            options,
            args.num_shards,
            compression,
            where,
            not args.no_index,
            progress=progress,
            workers=workers,
        )
    print(
        f"resharded {len(result['inputs'])} files into {len(result['shards'])} shards, "
        f"{result['records']:,} records in {result['seconds']:.1f}s"
    )
    for s in result["shards"]:
        print(f"  {s['records']:>10,}  {s['path']}")
    return 0


def cmd_report(args, beam_flags: List[str]) -> int:
    from tfrecord_io.pipelines.report.report_job import run_report

    with _record_job(args, beam_flags, "tfrecord_io.pipelines.report.stats") as (options, progress, workers):
        summary = run_report(
            args.paths,
            options,
            args.output,
            splits=args.split or None,
            samples=args.samples,
            validation=args.validation,
            progress=progress,
            workers=workers,
        )
    print("\n".join(summary.lines()))
    return 0


def cmd_convert(args, beam_flags: List[str]) -> int:
    from tfrecord_io.pipelines.convert_job import cmd_convert as convert

    return convert(args, beam_flags)


def cmd_lookup(args, beam_flags: List[str]) -> int:
    from tfrecord_io.pipelines.lookup_job import cmd_lookup as lookup

    return lookup(args, beam_flags)


def cmd_diff(args, beam_flags: List[str]) -> int:
    from tfrecord_io.pipelines.diff_job import cmd_diff as diff

    return diff(args, beam_flags)


def _check_writable(path: str, option: str) -> None:
    """A local file the command writes at its end: its directory must exist and be
    writable now, so a typo costs nothing rather than the whole job."""
    from tfrecord_io.usage_errors import ArgumentError

    parent = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ArgumentError(f"{option} {path}: is a directory")
    if not os.path.isdir(parent):
        raise ArgumentError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ArgumentError(f"{option} {path}: directory {parent} is not writable")


COMMANDS: Dict[str, Callable[..., int]] = {
    "build": cmd_build,
    "validate": cmd_validate,
    "index": cmd_index,
    "inspect": cmd_inspect,
    "reshard": cmd_reshard,
    "report": cmd_report,
    "convert": cmd_convert,
    "lookup": cmd_lookup,
    "diff": cmd_diff,
}


# --------------------------------------------------------------------------- state left by a failure


class BuildState:
    """What a failed build leaves, described after the build's own clean-up
    (``run_build`` removes an unpublished version itself and keeps a published one):
    where ``LATEST`` points, and whether the version this run claimed is gone,
    unfinished, complete or published. Any filesystem."""

    def __init__(self, out_dir: str):
        self.out_dir = out_dir.rstrip("/") or "/"
        self.version: Optional[str] = None
        self.latest_before: Optional[str] = None

    def claimed(self, version: str) -> None:
        """Called by ``run_build`` once it owns ``version``: the filesystem options
        (S3 credentials ...) are set by then, and nothing is published yet, so this is
        where the ``LATEST`` the run started from is read."""
        from tfrecord_io.dataset.dataset_writer import read_latest

        self.version = version
        self.latest_before = read_latest(self.out_dir)

    def __call__(self) -> List[str]:
        from tfrecord_io.dataset.dataset_writer import load_info, read_latest
        from tfrecord_io.storage import files

        lines = []
        latest = read_latest(self.out_dir)
        if self.version is None:  # failed before claiming a version: LATEST was not touched
            self.latest_before = latest
        if latest and latest == self.latest_before:
            lines.append(f"LATEST still points at {latest}; readers see that version, unchanged")
        elif latest:
            lines.append(f"LATEST points at {latest} (it was {self.latest_before or 'absent'} before this run)")
        else:
            lines.append(f"no LATEST in {self.out_dir}: no version of this dataset has been published")
        if self.version is None:
            lines.append("no version was started: nothing was written")
            return lines
        version_dir = files.join(self.out_dir, self.version)
        if not files.list_prefix(version_dir):
            lines.append(f"partial output {version_dir} removed")
        elif load_info(version_dir) is None:
            lines.append(
                f"partial output left in {version_dir} (no tfrecord_io_info.json: no reader takes it; "
                "a rerun with the same --version removes it)"
            )
        elif latest == self.version:
            lines.append(
                f"{version_dir} was published by this run before the failure (tfrecord_io_info.json written, "
                "LATEST moved to it): kept, whole; the failure came after the build's finalize stage"
            )
        else:
            lines.append(
                f"{version_dir} is complete (tfrecord_io_info.json written) but LATEST was not moved to it: kept; "
                "a rerun with the same --version verifies it and moves LATEST"
            )
        return lines


def reshard_state(args) -> Callable[[], List[str]]:
    """What a failed reshard left, told from the output's files before and after.

    The sink renames shards into place only after all were written, so a reshard that
    failed while it ran replaced nothing; one that failed after its commit (say, while
    printing its summary into a closed pipe) has written every shard, and the state must
    say so rather than "nothing". Its temporary directory is removed either way."""
    out_dir = os.path.dirname(os.path.abspath(args.output))
    before_temp = set(_temp_dirs(out_dir))
    before = _output_files(args.output)

    def state() -> List[str]:
        import shutil

        for name in set(_temp_dirs(out_dir)) - before_temp:
            shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)
        after = _output_files(args.output)
        written = sorted(p for p, st in after.items() if st != before.get(p) and not p.endswith(".index"))
        if not written:
            return [f"no shard {args.output}-* was written or replaced; temporary files removed"]
        shown = ", ".join(os.path.basename(p) for p in written[:3]) + (" ..." if len(written) > 3 else "")
        return [
            f"{len(written)} shard(s) {args.output}-* written or replaced before the failure ({shown}); "
            f"check them with `tfrecord-io validate {args.output}-*`; temporary files removed"
        ]

    return state


def _output_files(prefix: str) -> Dict[str, Optional[Tuple[int, float]]]:
    """``{path: (size, mtime)}`` of the files named ``PREFIX-*`` now."""
    try:
        return files.stat_many(files.glob(f"{prefix}-*"))
    except Exception:  # noqa: BLE001 - an unreadable output folder: nothing to compare, the job says why
        return {}


def _temp_dirs(directory: str) -> List[str]:
    try:
        return [n for n in os.listdir(directory) if n.startswith(".tfrecord-io-temp-")]
    except OSError:
        return []
