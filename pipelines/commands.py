"""The ``tfrecord-io`` commands: parsed arguments in, the job run, its summary printed,
the exit status out.

One ``cmd_*`` per command, each a thin shell around the job module's ``run_*``
(``build``, ``index_job``, ``validate``, ``inspect_job``, ``reshard``, ``report``); the
job modules never import this module or the CLI. Job modules are imported when their
command runs, so ``--help`` stays fast and a missing module is a real error, not a
missing command. What a failed ``build`` or ``reshard`` leaves is described by
:class:`BuildState` and :func:`reshard_state` for the CLI's failure block.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import Callable, Dict, List, Optional

from .options import beam_args, command_flags, is_local, pipeline_options, runner_section


def cmd_build(args, beam_flags: List[str]) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from .build import run_build
    from .config import load_config, parse_overrides
    from .local_workers import fork_workers

    overrides = parse_overrides(args.set)
    if args.output:
        # URLs (s3://, gs:// ...) as given: abspath would turn them into a local "s3:" directory.
        overrides.append(("output.dir", args.output if "://" in args.output else os.path.abspath(args.output)))
    if args.version:
        overrides.append(("output.version", args.version))
    if args.num_shards:
        overrides.append(("sharding.num_shards", args.num_shards))
    cfg = load_config(args.config, overrides)
    runner_cfg = runner_section(args.runner_config) or cfg["runner"]
    flags = beam_args(runner_cfg, beam_flags)
    # run_build names the version it claims (an `auto` name may get a suffix when taken);
    # the failure block then says exactly what this run left there.
    args.failure_state = BuildState(cfg["output"]["dir"])
    options = PipelineOptions(flags)
    # DirectRunner's multi-process workers: forked now, already imported, while the
    # launcher plans (pipelines/local_workers.py); other runners start their own.
    workers = fork_workers(options, preload=("transforms.rows",))
    with workers or contextlib.nullcontext():
        summary = run_build(
            cfg,
            options,
            progress=not args.no_progress and is_local(flags),
            on_version=args.failure_state.claimed,
            workers=workers,
        )
    print("\n".join(summary.lines()))
    return 0


def cmd_index(args, beam_flags: List[str]) -> int:
    from .dataset_dir import use_filesystems
    from .index_job import run_index
    from .inputs import expand_patterns
    from .progress import ProgressPrinter

    options = pipeline_options(runner_section(args.runner_config), beam_flags)
    use_filesystems(options, args.paths)  # S3 flags for the launcher; unknown scheme -> exit 2
    paths = expand_patterns(args.paths)
    if not paths:
        print(f"tfrecord-io index: no TFRecord files match {' '.join(args.paths)}", file=sys.stderr)
        return 2
    with ProgressPrinter("index", enabled=not args.no_progress, rate_stage="files", total=len(paths)) as bar:
        results = run_index(paths, options, force=args.force, progress_dir=bar.dir)
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
    from apache_beam.options.pipeline_options import PipelineOptions

    from .validate import run_validate, summary_lines

    flags = command_flags(args.runner_config, beam_flags)
    report = run_validate(
        args.paths,
        PipelineOptions(flags),
        checksums=not args.no_checksums,
        progress=not args.no_progress and is_local(flags),
    )
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, sort_keys=True)
    print("\n".join(summary_lines(report)))
    if args.report:
        print(f"report: {args.report}")
    return 0 if report["ok"] else 1


def cmd_inspect(args, beam_flags: List[str]) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from .inspect_job import run_inspect, summary_lines

    flags = command_flags(args.runner_config, beam_flags)
    try:
        result = run_inspect(
            args.paths, PipelineOptions(flags), args.head, progress=not args.no_progress and is_local(flags)
        )
    except FileNotFoundError as err:
        print(f"tfrecord-io inspect: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print("\n".join(summary_lines(result)))
    return 0


def cmd_reshard(args, beam_flags: List[str]) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from .reshard import parse_where, run_reshard

    try:
        where = parse_where(args.where)
    except ValueError as err:
        print(f"tfrecord-io reshard: {err}", file=sys.stderr)
        return 2
    flags = command_flags(args.runner_config, beam_flags)
    compression = "" if args.compression in ("", "none") else args.compression
    try:
        result = run_reshard(
            args.paths,
            args.output,
            PipelineOptions(flags),
            args.num_shards,
            compression,
            where,
            not args.no_index,
            progress=not args.no_progress and is_local(flags),
        )
    except FileNotFoundError as err:
        print(f"tfrecord-io reshard: {err}", file=sys.stderr)
        return 2
    print(
        f"resharded {len(result['inputs'])} files into {len(result['shards'])} shards, "
        f"{result['records']:,} records in {result['seconds']:.1f}s"
    )
    for s in result["shards"]:
        print(f"  {s['records']:>10,}  {s['path']}")
    return 0


def cmd_report(args, beam_flags: List[str]) -> int:
    from apache_beam.options.pipeline_options import PipelineOptions

    from .report import run_report

    flags = command_flags(args.runner_config, beam_flags)
    try:
        summary = run_report(
            args.paths,
            PipelineOptions(flags),
            args.output,
            splits=args.split or None,
            samples=args.samples,
            validation=args.validation,
            progress=not args.no_progress and is_local(flags),
        )
    except (FileNotFoundError, ImportError) as err:
        print(f"tfrecord-io report: {err}", file=sys.stderr)
        return 2
    print("\n".join(summary.lines()))
    return 0


COMMANDS: Dict[str, Callable[..., int]] = {
    "build": cmd_build,
    "validate": cmd_validate,
    "index": cmd_index,
    "inspect": cmd_inspect,
    "reshard": cmd_reshard,
    "report": cmd_report,
}


# --------------------------------------------------------------------------- state left by a failure


class BuildState:
    """What a failed build leaves, described after the build's own clean-up
    (``run_build`` removes an unfinished version itself): where ``LATEST`` points, and
    whether the version this run claimed is gone, unfinished or complete. Any filesystem."""

    def __init__(self, out_dir: str):
        self.out_dir = out_dir.rstrip("/") or "/"
        self.version: Optional[str] = None
        self.latest_before: Optional[str] = None

    def claimed(self, version: str) -> None:
        """Called by ``run_build`` once it owns ``version``: the filesystem options
        (S3 credentials ...) are set by then, and nothing is published yet, so this is
        where the ``LATEST`` the run started from is read."""
        from .dataset_dir import read_latest

        self.version = version
        self.latest_before = read_latest(self.out_dir)

    def __call__(self) -> List[str]:
        from tfrecord_io import files

        from .dataset_dir import load_info, read_latest

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
                f"partial output left in {version_dir} (no dataset_info.json: no reader takes it; "
                "a rerun with the same --version removes it)"
            )
        else:
            lines.append(f"{version_dir} is complete (dataset_info.json written) but LATEST was not moved to it")
        return lines


def reshard_state(args) -> Callable[[], List[str]]:
    """A failed reshard replaced nothing (the sink renames shards into place only
    after all were written); its temporary directory is removed."""
    out_dir = os.path.dirname(os.path.abspath(args.output))
    before = set(_temp_dirs(out_dir))

    def state() -> List[str]:
        import shutil

        for name in set(_temp_dirs(out_dir)) - before:
            shutil.rmtree(os.path.join(out_dir, name), ignore_errors=True)
        return [f"no shard {args.output}-* was written or replaced; temporary files removed"]

    return state


def _temp_dirs(directory: str) -> List[str]:
    try:
        return [n for n in os.listdir(directory) if n.startswith(".tfrecord-io-temp-")]
    except OSError:
        return []
