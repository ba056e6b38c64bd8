"""tfrecord-io: build, validate, index, inspect, reshard, report, convert, lookup and diff TFRecord datasets.

Each command is an Apache Beam pipeline. Beam's own flags pass straight through
(--runner, --direct_num_workers, --flink_master ...); without them jobs run
on the local DirectRunner with 2 worker processes.
"""

# The module docstring is the command's --help description: plain text, as a terminal shows
# it (no reStructuredText literals; tests/test_entry_points.py checks every help text).

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import List, Optional

from tfrecord_io.pipelines.runtime.arg_types import non_negative_int, positive_int

EPILOG = """Beam pipeline options (e.g. --runner=FlinkRunner --flink_master=[local]) may be
added to any command; they override the config's runner section.
A failure ends with a short block: what failed (file, byte offset or row; the job step),
what state is left, where the log with the full tracebacks is, and the exit status.
Exit status: 0 success, 1 the job found problems (validate) or failed, 2 bad usage or
input (found before anything is written), 130 / 143 stopped by Ctrl-C / SIGTERM."""


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true", help="do not print progress lines while running")
    parser.add_argument("--runner-config", metavar="YAML", help="a runner config (configs/flink.yaml ...) to run on")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also show Beam's and the workers' log messages and tracebacks here",
    )
    parser.add_argument(
        "--log-file",
        metavar="PATH",
        help="keep the job's log here (default: a new file under $TFRECORD_IO_LOG_DIR or ~/.cache/tfrecord-io/logs, "
        "kept only when the job fails)",
    )


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
            "<output>/<version>/. tfrecord_io_info.json is written last and LATEST moved to the new version only "
            "when everything is in place. Rows that cannot be encoded go to rejected-*.jsonl with the reason."
        ),
        epilog=EPILOG,
        allow_abbrev=False,
    )
    b.add_argument("config", help="job config YAML (see configs/)")
    b.add_argument("--output", help="override output.dir")
    b.add_argument("--version", help="override output.version (default: a UTC timestamp)")
    b.add_argument("--num-shards", type=positive_int, help="override sharding.num_shards")
    b.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override any config field, e.g. --set seed=3"
    )
    b.add_argument(
        "--append",
        action="store_true",
        help="publish a new version = the current one + the input's rows whose keys are new (unchanged shards "
        "linked or copied, not rewritten)",
    )
    b.add_argument(
        "--on-existing",
        choices=["error", "skip", "replace"],
        default="error",
        help="--append: a row whose key is already in the dataset is an error (default), skipped, or replaces it",
    )
    b.add_argument(
        "--remove",
        metavar="KEYS_FILE",
        help="publish a new version = the current one without the keys in KEYS_FILE (one per line); "
        "only the shards holding them are rewritten",
    )
    _common(b)

    v = sub.add_parser(
        "validate",
        help="check every record's CRCs, parse against the spec, compare counts and checksums",
        description=(
            "Validate TFRecord files or a built dataset. Reads every record with both CRCs checked (one big file "
            "is split across workers), parses each Example against tfrecord_io_info.json's feature spec when there "
            "is one, compares record counts and shard checksums with it, and writes a JSON report. "
            "Exits 1 if anything is wrong, naming each bad file and byte offset."
        ),
        epilog=EPILOG,
        allow_abbrev=False,
    )
    v.add_argument("paths", nargs="+", help="a dataset directory (a version or a root with LATEST) or file patterns")
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
    n.add_argument("--head", type=non_negative_int, default=3, help="show the first N records (default 3)")
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
    r.add_argument(
        "--output", required=True, help="output prefix, e.g. out/data (shards: out/data-00000-of-00008.tfrecord)"
    )
    r.add_argument(
        "--num-shards", type=non_negative_int, default=0, help="number of output shards (0: let the runner decide)"
    )
    r.add_argument("--compression", default="", choices=["", "none", "gzip", "zlib"], help="output compression")
    r.add_argument("--where", metavar="FEATURE=VALUE", help="keep only records whose feature has this value")
    r.add_argument("--no-index", action="store_true", help="do not write index files")
    _common(r)

    rp = sub.add_parser(
        "report",
        help="one self-contained HTML page showing a dataset: statistics, samples, rejected rows",
        description=(
            "Write one HTML file (no network, everything inline) that shows a dataset: records, bytes and shards "
            "per split, label balance, image sizes and modes, audio durations and sample rates, text lengths, "
            "numeric histograms, a deterministic sample grid per split and label (thumbnails, waveforms with a "
            "player, captions), rejected rows grouped by reason, and a validation result. Statistics come from one "
            "Beam job; the same version always gives the same page."
        ),
        epilog=EPILOG,
        allow_abbrev=False,
    )
    rp.add_argument("paths", nargs="+", help="a dataset root (follows LATEST), a version directory, or file patterns")
    rp.add_argument("--output", required=True, help="the HTML file to write (any Beam filesystem)")
    rp.add_argument("--split", action="append", metavar="S", help="only this split (repeatable; default: all)")
    rp.add_argument(
        "--samples",
        type=non_negative_int,
        default=6,
        metavar="N",
        help="samples per split, and per label for labelled data (default 6)",
    )
    rp.add_argument("--validation", metavar="JSON", help="a report written by tfrecord-io validate --report, to show")
    _common(rp)
    from tfrecord_io.pipelines.convert_job import add_parser as add_convert  # light: the job imports Beam when it runs

    add_convert(sub, _common, EPILOG)
    from tfrecord_io.pipelines.lookup_job import add_parser as add_lookup

    add_lookup(sub, _common, EPILOG)
    from tfrecord_io.pipelines.diff_job import add_parser as add_diff

    add_diff(sub, _common, EPILOG)
    return parser


READ_ONLY_STATE = {
    "inspect": ["nothing was written (inspect only reads)"],
    "lookup": ["nothing was written (lookup only reads)"],
    "diff": ["nothing was written (diff only reads)"],
    "validate": ["nothing was written (a --report is written only when validation completes)"],
    "index": [
        "indexes are written one by one, each under a temporary name then renamed: "
        "those done are whole, the others unchanged"
    ],
}


def _failure_state(args, cause: str = "") -> List[str]:
    """What the failed job left (its ``failure_state``, or the read-only commands' line).
    After an outage (``cause`` a store that kept failing) the look waits on storage for
    at most ``storage_retry.AFTER_OUTAGE_TIMEOUT_S``, and says so if the store is still down."""
    state = getattr(args, "failure_state", None)
    if state is None:
        return list(READ_ONLY_STATE.get(args.command, ["unknown"]))
    from tfrecord_io.storage import storage_retry

    with storage_retry.after_failure(cause) as timeout:
        try:
            return state()
        except Exception as err:  # noqa: BLE001 - the block must still print
            if storage_retry.is_outage(cause) and storage_retry.is_outage(err):
                what = str(err).split("; gave up at", 1)[0]
                return [
                    f"could not be determined: {what}; looked for up to {timeout:g}s after the job failed on storage"
                ]
            return [f"could not be determined: {err}"]


def main(argv: Optional[List[str]] = None) -> int:
    from tfrecord_io.pipelines.runtime.startup import no_ipython_probe  # ~0.25 s of every job

    with no_ipython_probe():
        return _main(argv)


def run() -> None:
    """The ``tfrecord-io`` command (and ``python -m tfrecord_io.pipelines``): :func:`main`,
    then leave without tearing the interpreter down.

    Why: a process that has imported Apache Beam spends 0.3-0.5 s at exit freeing its
    modules one by one (measured: ``python -c "import apache_beam"`` takes ~25% longer
    than the same with ``os._exit``; benchmarks/README.md), a quarter of a small job's
    wall time. Everything a normal exit does for the job is still done, in order:
    non-daemon threads are waited for, ``atexit`` handlers run (logging's flush and
    close, ``weakref.finalize`` clean-ups, temporary directories), stdout and stderr are
    flushed; only the freeing of memory the kernel reclaims anyway is skipped. ``main``
    itself returns normally, for callers that run it in their own process.
    """
    import atexit
    import os
    import threading

    try:
        code = main()
    except SystemExit as err:  # argparse's --help and usage errors; as the interpreter treats it
        if err.code is None or isinstance(err.code, int):
            code = err.code or 0
        else:
            print(err.code, file=sys.stderr)
            code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can reach it
            pass
    os._exit(code)


def _main(argv: Optional[List[str]] = None) -> int:
    # Newer Beam releases (2.77) log notes on optional dependencies with logging.warning()
    # when imported, which would configure the root logger and print them on every run;
    # the job's own log (JobLog, below) takes logging over from here.
    if not logging.getLogger().handlers:
        logging.getLogger().addHandler(logging.NullHandler())
    from tfrecord_io.pipelines.commands import COMMANDS, reshard_state
    from tfrecord_io.pipelines.runtime.failures import (
        ACCESS_MEANING,
        EXIT_USAGE,
        JobLog,
        Terminated,
        WorkerDied,
        access_refused,
        failure_block,
        format_exception,
        stop_children,
    )
    from tfrecord_io.pipelines.runtime.startup import import_google_api_core_without_package_scan
    from tfrecord_io.usage_errors import UsageError

    parser = build_parser()
    args, beam_flags = parser.parse_known_args(argv)
    unknown = [a for a in beam_flags if a.startswith("-") and not a.startswith("--")]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    command = COMMANDS[args.command]
    if args.command == "reshard":
        args.failure_state = reshard_state(args)
    with JobLog(args.command, args.verbose, args.log_file) as log:
        try:
            import_google_api_core_without_package_scan()  # its warnings go to the log, as Beam's do
            return command(args, beam_flags)
        except UsageError as err:  # the whole family, raised where the problem was found (tfrecord_io/usage_errors.py)
            log.record(format_exception(err))
            print(
                failure_block(args.command, str(err), ["nothing was written"], EXIT_USAGE),
                file=log.terminal,
            )
            return EXIT_USAGE
        except BrokenPipeError as err:
            if args.command in READS_ONLY and _stdout_reader_gone():
                return _output_reader_gone(log, err)
            # a worker's or a server's connection, or a writing job's output: a failure like any other
            return _failed(args, log, err)
        except Exception as err:  # noqa: BLE001 - every failure ends in a block: a refusal in its own, the rest in _failed
            refused = access_refused(err, log.thread_errors) if log.terminated_by is None else None
            if refused is None:
                return _failed(args, log, err)
            # credentials, permissions, no such bucket: the user's to fix, like a usage error
            # (the message names the object and what to set), in the launcher or a worker
            log.record(format_exception(err))
            log.stopping = True
            stop_children()
            state = _failure_state(args)
            print(
                failure_block(args.command, refused.line, state, EXIT_USAGE, meaning=ACCESS_MEANING), file=log.terminal
            )
            return EXIT_USAGE
        except (KeyboardInterrupt, Terminated, WorkerDied) as err:
            return _failed(args, log, err)


#: Commands that only read: ``tfrecord-io inspect ... | head`` ends as a Unix tool does.
READS_ONLY = ("inspect", "lookup", "diff", "validate")
#: Exit status of a command whose output's reader went away: a Unix tool killed by
#: SIGPIPE ends with 128 + 13.
EXIT_OUTPUT_CLOSED = 128 + 13


def _stdout_reader_gone() -> bool:
    """Has whoever reads our stdout (a pipe) closed it? (poll reports POLLERR on a pipe's
    write end once its read end is closed.)"""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # error events are always reported
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll(), or stdout is not a file
        return False


def _output_reader_gone(log, err: BrokenPipeError) -> int:
    """``tfrecord-io inspect ... | head``: the reader of a read-only command's output went
    away. As a Unix tool does on SIGPIPE, the command stops with status 141, without a
    failure block or traceback (its user has the lines they wanted; nothing was written);
    the log keeps the traceback. (A writing job whose output's reader goes away fails as
    any job does, with the state it left.)"""
    from tfrecord_io.pipelines.runtime.failures import format_exception, stop_children

    log.record(format_exception(err))
    log.stopping = True
    stop_children()
    devnull = os.open(os.devnull, os.O_WRONLY)  # the final flush must not raise again
    os.dup2(devnull, sys.stdout.fileno())
    return EXIT_OUTPUT_CLOSED


def _failed(args, log, err: BaseException) -> int:
    """The failure block of a job that failed (exit 1) or was stopped, with the log kept."""
    from tfrecord_io.pipelines.runtime.failures import (
        EXIT_FAILED,
        Terminated,
        WorkerDied,
        failure_block,
        format_exception,
        root_cause,
        stop_children,
    )

    log.keep = True
    log.stopping = True  # worker exits from here on are ours
    log.record(format_exception(err))
    stop_children()  # no worker goes on writing after the state below is taken
    if log.terminated_by is not None and not isinstance(err, Terminated):
        # a signal stopped the job and something raised on the way out (the
        # runner's shutdown meeting the stopped workers): the signal is the cause
        err = Terminated(log.terminated_by)
    if isinstance(err, WorkerDied):
        what, where, code = str(err), None, EXIT_FAILED
    elif isinstance(err, Terminated):
        what, where, code = f"interrupted: {err}", None, 128 + err.signum
    elif isinstance(err, KeyboardInterrupt):
        what, where, code = "interrupted (Ctrl-C)", None, 130
    else:
        cause = root_cause(err, log.thread_errors)
        what, where, code = cause.line, cause.where(), EXIT_FAILED
    block = failure_block(args.command, what, _failure_state(args, what), code, where, log.path)
    log.record(block)
    if not log.verbose:
        print(block, file=log.terminal, flush=True)
    return code


if __name__ == "__main__":
    run()
