"""Where a ``tfrecord-io`` job's fixed time goes: a timeline of the launcher's steps.

Runs one CLI command in this process with timestamps wrapped around its steps (no
change to the package: the probes are wrappers installed before the command runs) and
prints, in milliseconds from the interpreter's start (``/proc/self/stat``):

- interpreter start -> this script's first line (Python itself, ``site``);
- the CLI's own imports (argparse, the command table);
- ``import apache_beam`` (done by the probe before the command, as the command would);
- the job module's imports (our transforms) and its pipeline options;
- pipeline options and the choice of runner and workers (forking local workers);
- pipeline construction (``Pipeline.__exit__`` is where Beam's ``run`` starts);
- ``Pipeline.run``: the runner, its workers and the job's bundles;
- after the run: results collected, summary printed;
- the end of ``main`` -> process exit (teardown: atexit, module finalisers).

The last step is measured from outside: the parent runs this script as a child with
``--child`` and takes its exit time.

    python benchmarks/startup_timeline.py -- validate /tmp/one.tfrecord
    python benchmarks/startup_timeline.py --repeat 5 -- validate /tmp/one.tfrecord --direct_num_workers=2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Dict, List


def _process_start() -> float:
    """This process's start time on the ``time.time()`` clock (Linux)."""
    with open("/proc/self/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = int(fields[19])  # starttime, in clock ticks after boot
    with open("/proc/uptime", encoding="ascii") as f:
        uptime = float(f.read().split()[0])
    return time.time() - uptime + ticks / os.sysconf("SC_CLK_TCK")


def _child(argv: List[str]) -> None:
    """Run ``tfrecord-io argv`` here with probes; print the stamps as one JSON line on the parent's pipe."""
    start = _process_start()
    stamps: Dict[str, float] = {"script": time.time()}

    def stamp(name: str) -> None:
        stamps.setdefault(name, time.time())

    from tfrecord_io.pipelines import cli

    stamp("cli imported")
    import apache_beam as beam

    stamp("apache_beam imported")
    from tfrecord_io.pipelines.runtime import local_workers

    original_fork = local_workers.fork_workers

    def fork_workers(*args, **kwargs):
        stamp("options ready")
        try:
            return original_fork(*args, **kwargs)
        finally:
            stamp("workers chosen/forked")

    local_workers.fork_workers = fork_workers  # type: ignore[assignment]
    original_enter, original_exit, original_run = beam.Pipeline.__enter__, beam.Pipeline.__exit__, beam.Pipeline.run

    def enter(self):
        stamp("pipeline started")
        return original_enter(self)

    def exit_(self, *exc):
        stamp("pipeline constructed")
        try:
            return original_exit(self, *exc)
        finally:
            stamp("pipeline finished")

    def run(self, *args, **kwargs):
        stamp("run started")
        return original_run(self, *args, **kwargs)

    beam.Pipeline.__enter__, beam.Pipeline.__exit__, beam.Pipeline.run = enter, exit_, run  # type: ignore[method-assign]
    code = 1
    try:
        code = cli.main(argv)
    finally:
        stamp("main returned")
        with os.fdopen(int(os.environ["STARTUP_TIMELINE_FD"]), "w") as out:
            json.dump({"start": start, "stamps": stamps, "code": code}, out)
    if hasattr(cli, "run"):  # the command's own exit (cli.run): atexit, flush, os._exit
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


STEPS = [
    ("interpreter start + site", "start", "script"),
    ("CLI imports", "script", "cli imported"),
    ("import apache_beam", "cli imported", "apache_beam imported"),
    ("job imports, pipeline options", "apache_beam imported", "options ready"),
    ("choose runner, fork workers", "options ready", "workers chosen/forked"),
    ("until the pipeline object", "workers chosen/forked", "pipeline started"),
    ("pipeline construction", "pipeline started", "run started"),
    ("Pipeline.run (runner, workers, bundles)", "run started", "pipeline finished"),
    ("after the run (results, summary)", "pipeline finished", "main returned"),
    ("teardown to process exit", "main returned", "exit"),
]


def _once(argv: List[str]) -> Dict[str, float]:
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--child", "--", *argv],
        pass_fds=(write_fd,),
        stdout=subprocess.DEVNULL,
        env={**os.environ, "STARTUP_TIMELINE_FD": str(write_fd)},
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as f:
        data = f.read()
    proc.wait()
    end = time.time()
    report = json.loads(data)
    times = dict(report["stamps"], start=report["start"], exit=end)
    # 'apache_beam imported' is reached inside the CLI import when it is cheap: order by the steps
    out = {}
    for name, a, b in STEPS:
        if a in times and b in times:
            out[name] = max(0.0, times[b] - times[a])
    out["whole process"] = end - report["start"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("argv", nargs="+", help="the tfrecord-io command line (after --)")
    args = parser.parse_args()
    if args.child:
        _child(args.argv)
        return
    runs = [_once(args.argv) for _ in range(args.repeat)]
    print(f"tfrecord-io {' '.join(args.argv)}: median of {args.repeat} runs (min-max), ms")
    for name in [s[0] for s in STEPS] + ["whole process"]:
        values = [r[name] for r in runs if name in r]
        if values:
            print(
                f"  {name:<42} {1000 * statistics.median(values):7.0f}"
                f"  ({1000 * min(values):.0f}-{1000 * max(values):.0f})"
            )


if __name__ == "__main__":
    main()
