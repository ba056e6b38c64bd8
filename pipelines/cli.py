"""``tfrecord-io``: build, validate, index, inspect and reshard TFRecord datasets.

Each command is an Apache Beam pipeline. Beam's own flags pass straight through
(``--runner``, ``--direct_num_workers``, ``--flink_master`` ...); without them jobs run
on the local DirectRunner with 2 worker processes.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Callable, Dict, List, Optional

EPILOG = """Beam pipeline options (e.g. --runner=FlinkRunner --flink_master=[local]) may be
added to any command; they override the config's runner section.
Exit status: 0 success, 1 the job found problems (validate) or failed, 2 bad usage or input."""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="do not print progress lines while running")
    parser.add_argument("--runner-config", metavar="YAML", help="a runner config (configs/flink.yaml ...) to run on")
    parser.add_argument("-v", "--verbose", action="store_true", help="show Beam's own log messages")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfrecord-io",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # so Beam's --runner is never taken for our --runner-config
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    b = sub.add_parser(
        "build",
        help="build a dataset from a manifest or directory of media",
        description=(
            "Build a TFRecord dataset: read rows from a CSV/JSONL manifest or a root/<label>/<file> tree, "
            "encode each configured column (image, audio, text, label, ...), split by a hash of the key column, "
            "shuffle deterministically and write sharded, indexed TFRecord files into a new version directory "
            "<output>/<version>/. dataset_info.json is written last and LATEST moved to the new version only "
            "when everything is in place. Rows that cannot be encoded go to rejected-*.jsonl with the reason."
        ),
        epilog=EPILOG,
        allow_abbrev=False,
    )
    b.add_argument("config", help="job config YAML (see configs/)")
    b.add_argument("--output", help="override output.dir")
    b.add_argument("--version", help="override output.version (default: a UTC timestamp)")
    b.add_argument("--num-shards", type=int, help="override sharding.num_shards")
    b.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override any config field, e.g. --set seed=3")
    _common(b)

    v = sub.add_parser(
        "validate",
        help="check every record's CRCs, parse against the spec, compare counts and checksums",
        description=(
            "Validate TFRecord files or a built dataset. Reads every record with both CRCs checked (one big file "
            "is split across workers), parses each Example against dataset_info.json's feature spec when there "
            "is one, compares record counts and shard checksums with it, and writes a JSON report. "
            "Exits 1 if anything is wrong, naming each bad file and byte offset."
        ),
        epilog=EPILOG,
        allow_abbrev=False,
    )
    v.add_argument("paths", nargs="+", help="a dataset directory (with dataset_info.json or LATEST) or file patterns")
    v.add_argument("--report", help="write the JSON report here (default: print a summary only)")
    v.add_argument("--no-checksums", action="store_true", help="skip the SHA-256 check of shard files")
    _common(v)

    i = sub.add_parser(
        "index",
        help="build missing or stale index files, in parallel",
        description=(
            "Write the index (offset size per record, the format of the tfrecord package and DALI) of every "
            "TFRecord file that has none or whose index is stale. Each file is read with CRCs checked first; "
            "a corrupt file gets no index and is reported."
        ),
        epilog=EPILOG,
        allow_abbrev=False,
    )
    i.add_argument("paths", nargs="+", help="files, glob patterns or directories")
    i.add_argument("--force", action="store_true", help="rebuild every index, even fresh ones")
    _common(i)

    n = sub.add_parser(
        "inspect",
        help="records per file, features, types, value lengths, an inferred spec, sample records",
        description="Summarise TFRecord files of Examples: counts, feature statistics, inferred spec, first records.",
        epilog=EPILOG,
        allow_abbrev=False,
    )
    n.add_argument("paths", nargs="+", help="a dataset directory or file patterns")
    n.add_argument("--head", type=int, default=3, help="show the first N records (default 3)")
    n.add_argument("--json", action="store_true", help="print the summary as JSON")
    _common(n)

    r = sub.add_parser(
        "reshard",
        help="rewrite N files as M shards; change compression; re-index; filter",
        description=(
            "Read TFRecord files (split across workers) and write them as a new set of shards, optionally "
            "changing compression and keeping only records whose feature matches --where."
        ),
        epilog=EPILOG,
        allow_abbrev=False,
    )
    r.add_argument("paths", nargs="+", help="input files, patterns or a dataset directory")
    r.add_argument("--output", required=True, help="output prefix, e.g. out/data (shards: out/data-00000-of-00008.tfrecord)")
    r.add_argument("--num-shards", type=int, default=0, help="number of output shards (0: let the runner decide)")
    r.add_argument("--compression", default="", choices=["", "none", "gzip", "zlib"], help="output compression")
    r.add_argument("--where", metavar="FEATURE=VALUE", help="keep only records whose feature has this value")
    r.add_argument("--no-index", action="store_true", help="do not write index files")
    _common(r)
    return parser


def _quiet_beam(verbose: bool) -> None:
    if not verbose:
        logging.getLogger().setLevel(logging.ERROR)
        for name in ("apache_beam", "root"):
            logging.getLogger(name).setLevel(logging.ERROR)


def _runner_section(path: Optional[str]) -> Optional[dict]:
    if not path:
        return None
    from .options import load_runner_section

    return load_runner_section(path)


def cmd_build(args, beam_flags: List[str]) -> int:
    from .build import run_build
    from .config import load_config, parse_overrides
    from apache_beam.options.pipeline_options import PipelineOptions

    from .options import beam_args, is_local

    overrides = parse_overrides(args.set)
    if args.output:
        overrides.append(("output.dir", os.path.abspath(args.output)))
    if args.version:
        overrides.append(("output.version", args.version))
    if args.num_shards:
        overrides.append(("sharding.num_shards", args.num_shards))
    cfg = load_config(args.config, overrides)
    runner_cfg = _runner_section(args.runner_config) or cfg["runner"]
    flags = beam_args(runner_cfg, beam_flags)
    summary = run_build(cfg, PipelineOptions(flags), progress=not args.no_progress and is_local(flags))
    print("\n".join(summary.lines()))
    return 0


def cmd_index(args, beam_flags: List[str]) -> int:
    from .index_job import expand_patterns, run_index
    from .options import pipeline_options
    from .progress import ProgressPrinter

    paths = expand_patterns(args.paths)
    if not paths:
        print(f"tfrecord-io index: no TFRecord files match {' '.join(args.paths)}", file=sys.stderr)
        return 2
    options = pipeline_options(_runner_section(args.runner_config), beam_flags)
    with ProgressPrinter("index", enabled=not args.no_progress, rate_stage="files", total=len(paths)) as bar:
        results = run_index(paths, options, force=args.force, progress_dir=bar.dir)
    counts: Dict[str, int] = {}
    for r in results:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
        if r.get("error"):
            print(f"  {r['path']}: {r['state']}: {r['error']}", file=sys.stderr)
    print(f"index: {len(results)} files in {bar.elapsed:.1f}s: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return 1 if counts.get("corrupt") else 0


COMMANDS: Dict[str, Callable] = {"build": cmd_build, "index": cmd_index}


def _register_optional() -> None:
    """Commands whose modules need the Beam IO / transforms layers."""
    try:
        from .validate import cmd_validate

        COMMANDS["validate"] = cmd_validate
    except ImportError:  # pragma: no cover - present in a complete install
        pass
    try:
        from .inspect_job import cmd_inspect

        COMMANDS["inspect"] = cmd_inspect
    except ImportError:  # pragma: no cover
        pass
    try:
        from .reshard import cmd_reshard

        COMMANDS["reshard"] = cmd_reshard
    except ImportError:  # pragma: no cover
        pass


def main(argv: Optional[List[str]] = None) -> int:
    from .config import ConfigError
    from .dataset_dir import DatasetDirError
    from .manifest import InputError

    parser = build_parser()
    args, beam_flags = parser.parse_known_args(argv)
    unknown = [a for a in beam_flags if a.startswith("-") and not a.startswith("--")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    _quiet_beam(args.verbose)
    _register_optional()
    command = COMMANDS.get(args.command)
    if command is None:
        print(f"tfrecord-io: the {args.command} command is not available in this install", file=sys.stderr)
        return 2
    try:
        return command(args, beam_flags)
    except (ConfigError, InputError, DatasetDirError) as err:
        print(f"tfrecord-io {args.command}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"tfrecord-io {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - e.g. the job failed on the runner: one line, not a Java stack
        if args.verbose:
            raise
        print(f"tfrecord-io {args.command}: FAILED: {_first_line(err)}", file=sys.stderr)
        if args.command == "build":
            print("tfrecord-io build: nothing was published: LATEST is unchanged "
                  "(the new version's directory, if any, is incomplete)", file=sys.stderr)
        print(f"tfrecord-io {args.command}: run with --verbose for the full error", file=sys.stderr)
        return 1


def _first_line(err: BaseException, limit: int = 400) -> str:
    """The first non-empty line of an error (a failed Beam job's message carries the
    runner's whole stack trace after it)."""
    text = next((line.strip() for line in str(err).splitlines() if line.strip()), "") or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


if __name__ == "__main__":
    sys.exit(main())
