"""Every CLI job on a standalone Flink cluster against the same job on the local runner,
and where the cluster's time goes.

    python benchmarks/bench_cluster_jobs.py [--rows 200] [--repeat 1]

Data: the demo media (``make_demo_media``: PNG/JPEG images, WAV/FLAC clips, captions)
uploaded to a versitygw S3 server this script starts (``scripts/setup-s3``); the build
reads media and manifest from S3 and writes the dataset there; the other jobs read that
dataset. Each job runs with the ``tfrecord-io`` CLI twice in the same run: locally (the
default DirectRunner, 2 worker processes) and on ``scripts/cluster up flink --workers 2``
(JobManager, 2 TaskManagers, a Beam worker pool each, ``configs/flink-cluster.yaml``).

Printed per job: wall seconds (local, cluster) and their ratio, the launcher's own CPU
seconds (the CLI process and its children), and for the cluster run the split of its
time as the JobManager saw it: the Flink job's duration (from the REST API: submitted
-> finished), the part of that before the first task ran (scheduling, deploying tasks,
starting SDK workers in the pools) and the rest of the wall time (the launcher: Python
start-up and imports, planning, staging the pipeline to the job server, translation
and submission, collecting results and publishing). A trivial pipeline (one element
through a Map) gives the fixed cost of any job on each runner.

The cluster runs as other machines would: every process with a private /tmp
(``scripts/cluster up`` without ``--shared-tmp``; needs root), so nothing can pass
through the launcher's disk. The cluster jobs get ``--temp_location`` on the S3 server
(``s3://<bucket>/tmp``), where their results and progress travel
(``tfrecord_io/pipelines/runtime/collect.py``). Timings are for reading as ratios
within one run (the machine is shared: the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any, Dict, List, Optional

from process_cpu import timed as timed_command

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tfrecord_io.pipelines.demo_data import make_demo_media  # noqa: E402

from tests.s3support import find_versitygw, start_versitygw  # noqa: E402

TRIVIAL = """
import sys
import apache_beam as beam
from tfrecord_io.pipelines.runtime.beam_options import beam_args, load_runner_section
config = sys.argv[1]
section = load_runner_section(config) if config else None
with beam.Pipeline(argv=beam_args(section, [])) as p:
    _ = p | beam.Create([1]) | beam.Map(lambda x: x + 1)
"""


def run(args: List[str], env: Dict[str, str]) -> Dict[str, float]:
    """Run a command; wall and CPU seconds (it and every process it started: ``process_cpu.py``)."""
    done = timed_command(args, env=env, cwd=REPO)
    if done["rc"] != 0:
        raise RuntimeError(f"{' '.join(args[:5])} ... failed ({done['rc']}):\n{done['stderr'][-3000:]}")
    return {"wall": done["wall"], "cpu": done["cpu"]}


def flink_jobs(rest: str) -> List[Dict[str, Any]]:
    with urllib.request.urlopen(f"{rest}/jobs/overview", timeout=30) as r:
        return json.load(r)["jobs"]


def flink_job_split(rest: str, known: set) -> Optional[Dict[str, float]]:
    """The newest job not in ``known``: its duration and the time before its first task ran."""
    new = [j for j in flink_jobs(rest) if j["jid"] not in known]
    if not new:
        return None
    job = max(new, key=lambda j: j["start-time"])
    known.add(job["jid"])
    with urllib.request.urlopen(f"{rest}/jobs/{job['jid']}", timeout=30) as r:
        detail = json.load(r)
    first_running = min(
        (v.get("start-time", 0) for v in detail.get("vertices", []) if v.get("start-time", 0) > 0),
        default=job["start-time"],
    )
    return {"flink": job["duration"] / 1000.0, "before_tasks": (first_running - job["start-time"]) / 1000.0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=200, help="demo rows (default 200)")
    parser.add_argument("--repeat", type=int, default=1, help="runs per job and runner; the fastest counts")
    args = parser.parse_args()

    binary = find_versitygw()
    if not binary:
        raise SystemExit("versitygw not found: bash scripts/setup-s3")
    work = tempfile.mkdtemp(prefix="bench-cluster-jobs-")
    s3 = start_versitygw(binary, os.path.join(work, "s3"))
    cluster_dir = os.path.join(work, "cluster")
    cluster_cmd = [sys.executable, os.path.join(REPO, "scripts", "cluster")]
    try:
        bucket = "s3://" + s3.make_bucket()
        demo = make_demo_media(os.path.join(work, "demo"), rows=args.rows)
        client = s3.client()
        for root, _, names in os.walk(os.path.dirname(demo)):
            for name in names:
                path = os.path.join(root, name)
                rel = os.path.relpath(path, os.path.dirname(demo))
                client.upload_file(path, bucket[len("s3://") :], f"demo/{rel}")
        config = os.path.join(work, "build.yaml")
        with open(demo, encoding="utf-8") as f, open(config, "w", encoding="utf-8") as out:
            out.write(f.read().replace("  manifest: manifest.csv\n", f"  manifest: {bucket}/demo/manifest.csv\n"))

        t = time.perf_counter()
        up = [*cluster_cmd, "up", "flink", "--workers", "2", "--dir", cluster_dir]
        subprocess.run(up, check=True, stdout=subprocess.DEVNULL)  # a private /tmp per process
        up_s = time.perf_counter() - t
        with open(os.path.join(cluster_dir, "cluster.json"), encoding="utf-8") as f:
            endpoints = json.load(f)["endpoints"]
        rest = endpoints["TFRECORD_IO_FLINK_REST"]
        env = dict(os.environ, PYTHONPATH=REPO, **endpoints)
        cluster_flags = [
            "--runner-config",
            os.path.join(REPO, "configs", "flink-cluster.yaml"),
            f"--temp_location={bucket}/tmp",  # results and progress: storage the whole cluster shares
        ]
        common = ["--no-progress", *s3.pipeline_args()]
        cli = [sys.executable, "-m", "tfrecord_io.pipelines"]
        jobs = {
            "trivial (1 element)": lambda where: [sys.executable, "-c", TRIVIAL, where or ""],
            "build": lambda where: [*cli, "build", config, "--output", f"{bucket}/ds-{time.time_ns()}", *common],
            "validate": lambda where: [*cli, "validate", f"{bucket}/ds", *common],
            "inspect": lambda where: [*cli, "inspect", f"{bucket}/ds", "--head", "1", *common],
            "report": lambda where: [*cli, "report", f"{bucket}/ds", "--output", os.path.join(work, "r.html"), *common],
            "reshard": lambda where: [
                *cli,
                "reshard",
                f"{bucket}/ds",
                "--output",
                f"{bucket}/rs-{time.time_ns()}/data",
                "--num-shards",
                "3",
                *common,
            ],
            "index": lambda where: [*cli, "index", f"{bucket}/ds", "--force", *common],
        }
        # the dataset the other jobs read
        run([*cli, "build", config, "--output", f"{bucket}/ds", "--version", "v1", *common], env)
        known = {j["jid"] for j in flink_jobs(rest)}
        rows = []
        print(
            f"load average before: {os.getloadavg()}; cluster up in {up_s:.1f}s "
            f"(a private /tmp per process, --temp_location={bucket}/tmp); {args.rows} demo rows",
            flush=True,
        )
        for name, make in jobs.items():
            best: Dict[str, Dict[str, float]] = {}
            for _ in range(args.repeat):
                local = run(make(None), env)
                where = os.path.join(REPO, "configs", "flink-cluster.yaml")
                cmd = make(where)
                on_cluster = run(cmd + ([] if name.startswith("trivial") else cluster_flags), env)
                on_cluster.update(flink_job_split(rest, known) or {})
                if "local" not in best or local["wall"] < best["local"]["wall"]:
                    best["local"] = local
                if "cluster" not in best or on_cluster["wall"] < best["cluster"]["wall"]:
                    best["cluster"] = on_cluster
            rows.append((name, best))
            c = best["cluster"]
            print(
                f"{name}: local {best['local']['wall']:.1f}s, cluster {c['wall']:.1f}s "
                f"(flink job {c.get('flink', float('nan')):.1f}s, of which before the first task "
                f"{c.get('before_tasks', float('nan')):.1f}s)",
                flush=True,
            )
        print(f"\nload average after: {os.getloadavg()}")
        print(
            "| job | local s | cluster s | cluster / local | launcher CPU s local / cluster "
            "| Flink job s | before first task s | outside the Flink job s |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, best in rows:
            lo, c = best["local"], best["cluster"]
            flink = c.get("flink", float("nan"))
            print(
                f"| {name} | {lo['wall']:.1f} | {c['wall']:.1f} | {c['wall'] / lo['wall']:.2f}x "
                f"| {lo['cpu']:.1f} / {c['cpu']:.1f} | {flink:.1f} | {c.get('before_tasks', float('nan')):.1f} "
                f"| {c['wall'] - flink:.1f} |"
            )
    finally:
        subprocess.run([*cluster_cmd, "down", "flink", "--dir", cluster_dir], stdout=subprocess.DEVNULL)
        s3.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
