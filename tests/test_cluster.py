"""The jobs on real standalone clusters: Flink (JobManager + 2 TaskManagers) and Spark
(master + 2 workers), each worker with its own Beam Python worker pool, all started as
separate processes by ``scripts/cluster`` (one cluster per engine for the module;
``scripts/cluster down`` at the end).

Every cluster process runs with a private /tmp (``scripts/cluster`` starts each in its
own mount namespace with a tmpfs on /tmp): as on separate machines, nothing the launcher
(this test process, whose pytest folders are under /tmp) writes to its disk is seen by
the cluster. So all data is on S3: versitygw (``s3_server`` from tests/s3support.py) --
the demo media and manifest, every job's input and output. Its flags reach the SDK
workers as pipeline options through the runner's provision service. The outputs are
compared through the files versitygw keeps behind the objects.

What is asserted (never timings):
- no cluster process (JVMs, job server, worker pools, their SDK workers) sees a file the
  launcher put in its /tmp, and a file an SDK worker puts in its /tmp is not in the
  launcher's;
- every job (build, validate, inspect, report, reshard, index) run with the CLI on the
  cluster on a dataset on S3 succeeds with the DirectRunner's result; the jobs' results
  come back through ``--temp_location`` on S3 (a folder in the launcher's /tmp, as they
  once did, is named as such by :class:`ResultsViaLauncherTmp`);
- a build to s3:// on the cluster gives the same shards, byte for byte, as the same
  build on the DirectRunner; validate on the cluster of those shards gives the same
  per-file counts as on the DirectRunner; reshard on the cluster, S3 to S3, puts the
  same records in each shard as on the DirectRunner;
- one file on S3 read as several byte ranges: every record exactly once, read in SDK
  workers of *both* worker pools (their parent pids are the two pools `up` started),
  the same (offset, record) pairs as on the DirectRunner;
- faults while a build runs (each on a freshly started cluster), per engine as found:
  see ``FAULT_OUTCOMES``. Recovered: the new version is published and byte-identical.
  Failed: ``tfrecord-io build`` ends with its one failure block (no stack traces) and
  ``LATEST`` still names the previous version, untouched.

Run: ``python -m pytest -m cluster tests/test_cluster.py`` (after scripts/fetch-runners).
"""

from __future__ import annotations

import filecmp
import glob as globlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from typing import Any, Dict, List

import apache_beam as beam
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from tfrecord_io.beam.beam_io import ReadFromTFRecord
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.format.reader import read_records
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.pipelines.building.build_config import load_config
from tfrecord_io.pipelines.building.build_job import run_build
from tfrecord_io.pipelines.demo_data import make_demo_media
from tfrecord_io.pipelines.runtime import processes
from tfrecord_io.pipelines.runtime.beam_options import beam_args, load_runner_section
from tfrecord_io.pipelines.runtime.collect import ResultDir
from tfrecord_io.storage import files
from tfrecord_io.storage.files import file_size

from tests.pipeline_support import run_cli, start_cli

pytestmark = pytest.mark.cluster

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "cluster")
WORKERS = 2
DEMO_ROWS = 24

# What a fault during a build leads to, per engine and fault (found by running it; see
# docs/clusters.md, "Trying a real cluster locally"): "recovers" or "fails".
FAULT_OUTCOMES = {
    ("flink", "taskmanager"): "recovers",
    ("flink", "pool"): "fails",
    ("spark", "taskmanager"): "recovers",
    ("spark", "pool"): "recovers",
}


class RunningCluster:
    """A cluster started by ``scripts/cluster up`` in its own folder."""

    def __init__(self, engine: str, folder: str):
        self.engine = engine
        self.dir = folder
        self.state: Dict[str, Any] = {}

    def script(self, command: str, check: bool = True) -> subprocess.CompletedProcess:
        args = [sys.executable, SCRIPT, command, self.engine, "--dir", self.dir]
        if command == "up":
            args += ["--workers", str(WORKERS), "--timeout", "240"]
        done = subprocess.run(args, capture_output=True, text=True, timeout=600)
        if check and done.returncode != 0:
            pytest.fail(f"scripts/cluster {command} {self.engine} failed:\n{done.stdout}\n{done.stderr}", pytrace=False)
        return done

    def up(self) -> None:
        self.script("up")
        with open(os.path.join(self.dir, "cluster.json"), encoding="utf-8") as f:
            self.state = json.load(f)
        os.environ.update(self.state["endpoints"])  # what `source cluster.env` does

    def down(self) -> None:
        self.script("down", check=False)
        for key in self.state.get("endpoints", {}):
            os.environ.pop(key, None)

    def restart(self) -> None:
        self.down()
        self.up()

    def process(self, name: str) -> Dict[str, Any]:
        return next(p for p in self.state["processes"] if p["name"] == name)

    def pool_pids(self) -> Dict[int, str]:
        return {p["pid"]: p["name"] for p in self.state["processes"] if p["name"].startswith("pool-")}

    def flags(self) -> List[str]:
        return beam_args(load_runner_section(os.path.join(REPO, "configs", f"{self.engine}-cluster.yaml")), [])

    def options(self, s3_server=None) -> PipelineOptions:
        """The cluster config's options (+ the S3 server's flags: they reach the SDK
        workers through the runner's provision service, like every pipeline option)."""
        return PipelineOptions(self.flags() + (s3_server.pipeline_args() if s3_server else []))


@pytest.fixture(scope="module", params=["flink", "spark"])
def cluster(request, tmp_path_factory):
    """One cluster per engine for the whole module (started once, ~20 s)."""
    running = RunningCluster(request.param, str(tmp_path_factory.mktemp(f"cluster-{request.param}")))
    running.up()
    yield running
    running.down()
    for proc in running.state["processes"]:  # `down` ended every process it started
        assert not processes.running(proc["pid"]), proc


@pytest.fixture(scope="module")
def s3_demo(s3_server, demo_config, tmp_path_factory) -> Dict[str, str]:
    """The demo media and manifest uploaded to a bucket, and a build config (the
    launcher's, so local) whose manifest is that object: the workers read the media from
    S3, not from the launcher's disk, which they cannot see."""
    bucket = "s3://" + s3_server.make_bucket()
    config = s3_server.upload_demo(
        demo_config, f"{bucket}/demo", str(tmp_path_factory.mktemp("s3-config") / "build.yaml")
    )
    return {"bucket": bucket, "config": config}


def direct_options(s3_server=None) -> PipelineOptions:
    return PipelineOptions(beam_args(None, s3_server.pipeline_args() if s3_server else []))


@pytest.fixture(scope="module")
def demo_config(tmp_path_factory):
    return make_demo_media(str(tmp_path_factory.mktemp("cluster-media")), rows=DEMO_ROWS)


@pytest.fixture(scope="module")
def direct_build(s3_server, s3_demo, tmp_path_factory):
    """The reference: the same build (media on S3) on the DirectRunner (2 worker
    processes), written to the launcher's disk."""
    out = str(tmp_path_factory.mktemp("direct") / "dataset")
    cfg = load_config(s3_demo["config"], [("output.dir", out), ("output.version", "v1")])
    # the launcher checks the manifest's header and claims the version on S3
    FileSystems.set_options(direct_options(s3_server))
    run_build(cfg, direct_options(s3_server), progress=False)
    return out


def version_files(version_dir: str) -> Dict[str, bytes]:
    """Every file of a version except our metadata (tfrecord_io_info.json), by relative path."""
    found = {}
    for root, _, names in os.walk(version_dir):
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, version_dir)
            if rel != dataset_writer.INFO_NAME:
                with open(path, "rb") as f:
                    found[rel] = f.read()
    return found


def comparable_info(version_dir: str) -> Dict[str, Any]:
    """tfrecord_io_info.json without what differs by design (creation time, run id, output dir, version name)."""
    info = dataset_writer.load_info(version_dir)
    info.pop("created_utc")
    info.pop("version")
    info.pop("run_id")  # which run wrote it: as run-specific as created_utc
    info["config"]["output"].pop("dir")
    info["config"]["output"].pop("version")
    return info


def assert_same_build(version_dir: str, reference_dir: str) -> None:
    got, want = version_files(version_dir), version_files(reference_dir)
    assert sorted(got) == sorted(want)
    differing = [rel for rel in want if got[rel] != want[rel]]
    assert not differing, f"files differ from the DirectRunner build: {differing}"
    assert comparable_info(version_dir) == comparable_info(reference_dir)


# Jobs whose results came back to the launcher through a folder in *its* /tmp
# (tfrecord-io-results-*) failed on a cluster whose processes have their own /tmp: the SDK
# workers wrote the result files into theirs and the launcher found nothing. Results now
# travel through --temp_location (runtime/collect.py); a failure naming such a folder is
# reported as this error, so a regression says what it is.
class ResultsViaLauncherTmp(AssertionError):
    """A job on the cluster failed because its results were looked for in the launcher's /tmp."""


RESULTS_MARK = "tfrecord-io-results-"
CLUSTER_JOB_TIMEOUT_S = 300


def _log_sizes(cluster: RunningCluster) -> Dict[str, int]:
    """The size of every file under the cluster's logs/ and tmp/ (Spark executors' stderr)."""
    sizes = {}
    for sub in ("logs", "tmp"):
        for root, _, names in os.walk(os.path.join(cluster.dir, sub)):
            for name in names:
                path = os.path.join(root, name)
                try:
                    sizes[path] = os.path.getsize(path)
                except OSError:
                    continue
    return sizes


def _new_log_lines_naming(cluster: RunningCluster, before: Dict[str, int], text: str) -> List[str]:
    """Lines containing ``text`` that the cluster's processes logged since ``before``."""
    found = []
    for path, size in _log_sizes(cluster).items():
        start = before.get(path, 0)
        if size <= start:
            continue
        with open(path, "rb") as f:
            f.seek(start)
            found += [line for line in f.read().decode("utf-8", "replace").splitlines() if text in line]
    return found


def cluster_job(cluster: RunningCluster, s3_server, *args: str) -> subprocess.CompletedProcess:
    """A CLI job on the cluster. If it fails, or hangs past CLUSTER_JOB_TIMEOUT_S (Spark
    does when a task fails on both executors: excludeOnFailure), because its results were
    looked for in the launcher's /tmp -- named in its error or in what the cluster's
    processes logged meanwhile (the SDK workers' FileNotFoundError) -- raise
    :class:`ResultsViaLauncherTmp`, the one expected failure; a hung job's cluster is
    restarted so the next test starts clean."""
    before = _log_sizes(cluster)
    bucket = next(a for a in args if a.startswith("s3://")).split("/")[2]
    temp = f"--temp_location=s3://{bucket}/tmp-{cluster.engine}"  # where the results come back
    try:
        done = run_cli(*args, *on_cluster(cluster, s3_server), temp, cwd=REPO, timeout=CLUSTER_JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired as hung:
        named = _new_log_lines_naming(cluster, before, RESULTS_MARK)
        cluster.restart()
        if named:
            message = f"timed out after {CLUSTER_JOB_TIMEOUT_S}s; the cluster logged: {named[0]}"
            raise ResultsViaLauncherTmp(message) from hung
        raise
    if done.returncode != 0:
        named = [line for line in done.stderr.splitlines() if RESULTS_MARK in line]
        named += _new_log_lines_naming(cluster, before, RESULTS_MARK)
        if named:
            raise ResultsViaLauncherTmp(f"{done.stderr}\nfirst mention: {named[0]}")
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def on_cluster(cluster: RunningCluster, s3_server) -> List[str]:
    """The flags that send a CLI job to the cluster, with data on S3."""
    config = os.path.join(REPO, "configs", f"{cluster.engine}-cluster.yaml")
    return ["--runner-config", config, "--no-progress", *s3_server.pipeline_args()]


def on_direct_runner(s3_server) -> List[str]:
    return ["--no-progress", *s3_server.pipeline_args()]


def test_up_refuses_without_what_a_private_tmp_needs(tmp_path):
    """Without `unshare` (here: not on PATH) `up` starts nothing, exits 2 and says why and
    what to do; --shared-tmp is the way round it."""
    folder = str(tmp_path / "cluster")
    done = subprocess.run(
        [sys.executable, SCRIPT, "up", "flink", "--dir", folder],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PATH=str(tmp_path)),
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "`unshare` (util-linux) is not on PATH" in done.stderr and "--shared-tmp" in done.stderr, done.stderr
    assert not os.path.exists(folder)  # nothing started, nothing written


PORT_TAKEN_UP = r"""
import importlib.machinery, importlib.util, socket, sys
loader = importlib.machinery.SourceFileLoader("cluster_script", sys.argv[1])
spec = importlib.util.spec_from_loader("cluster_script", loader)
script = importlib.util.module_from_spec(spec)
loader.exec_module(script)
busy = socket.socket()
busy.bind(("127.0.0.1", 0))
busy.listen()
real, calls = script.free_port, []
def taken_once(*hosts):  # Flink's second port (REST) is one another process holds
    calls.append(hosts)
    return busy.getsockname()[1] if len(calls) == 2 else real(*hosts)
script.free_port = taken_once
cluster = script.Cluster("flink", sys.argv[2])
rc = script.cmd_up(cluster, 1, 180.0)
script.cmd_down(cluster)
sys.exit(rc)
"""


@pytest.mark.cluster
def test_up_tries_again_when_a_port_it_picked_was_taken(tmp_path):
    """free_port probes a port and lets it go; a process of another job can bind it
    before the JobManager does (seen in CI: BindException on the REST port). `up` then
    stops what it started and comes up on new ports; any other failure is not retried."""
    done = subprocess.run(
        [sys.executable, "-c", PORT_TAKEN_UP, SCRIPT, str(tmp_path / "cluster")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BindException" in done.stderr and "trying again with new ports" in done.stderr, done.stderr
    assert done.stdout.count("up in ") == 1, done.stdout


def test_cluster_processes_do_not_see_the_launchers_tmp(cluster, s3_server, tmp_path):
    """A file the launcher puts in its /tmp is invisible to every cluster process (JVMs,
    job server, worker pools and the SDK workers they start, seen through
    /proc/PID/root, and from inside the SDK workers while they run a job); a file the
    SDK workers put in their /tmp does not appear in the launcher's."""
    assert cluster.state["isolated"], "scripts/cluster up started the cluster without a private /tmp"
    fd, marker = tempfile.mkstemp(prefix="tfrecord-io-launcher-only-", dir="/tmp")
    os.close(fd)
    try:
        procs = cluster.state["processes"]
        for proc in procs:
            root = f"/proc/{proc['pid']}/root"
            # The check itself works: the process sees its own cluster folder ...
            assert os.path.exists(root + os.path.join(cluster.dir, "cluster.json")), proc["name"]
            # ... but not the launcher's file.
            assert not os.path.exists(root + marker), f"{proc['name']} sees {marker} in the launcher's /tmp"

        bucket = "s3://" + s3_server.make_bucket()
        worker_tmp = f"/tmp/tfrecord-io-sdk-worker-{uuid.uuid4().hex}"

        def probe(i: int) -> str:
            with open(worker_tmp, "w") as f:  # the SDK worker's own /tmp
                f.write(str(i))
            return json.dumps({"sees_marker": os.path.exists(marker), "pid": os.getpid(), "ppid": os.getppid()})

        options = cluster.options(s3_server)
        with beam.Pipeline(options=options) as p:
            _ = (
                p
                | beam.Create(range(40), reshuffle=True)
                | beam.Map(probe)
                | beam.io.WriteToText(f"{bucket}/probe/out")
            )
        FileSystems.set_options(options)
        seen = []
        for path in files.glob(f"{bucket}/probe/out*"):
            seen += [json.loads(line) for line in files.read_bytes(path).decode("utf-8").splitlines()]
        assert len(seen) == 40
        assert not any(item["sees_marker"] for item in seen), seen
        assert {item["ppid"] for item in seen} <= set(cluster.pool_pids()), "not run in the cluster's pools"
        assert not os.path.exists(worker_tmp), "an SDK worker's /tmp is the launcher's"
        for pid in {item["pid"] for item in seen}:  # the SDK workers, if still running
            if os.path.exists(f"/proc/{pid}/root/tmp"):
                assert not os.path.exists(f"/proc/{pid}/root{marker}")
    finally:
        os.remove(marker)


@pytest.fixture(scope="module")
def cluster_dataset(cluster, s3_server, s3_demo) -> Dict[str, Any]:
    """``tfrecord-io build`` on the cluster: media and manifest on S3, output to S3."""
    root = f"{s3_demo['bucket']}/built-on-{cluster.engine}"
    build = run_cli(
        "build", s3_demo["config"], "--output", root, "--version", "v1", *on_cluster(cluster, s3_server), cwd=REPO
    )
    return {"root": root, "proc": build}


def test_build_on_the_cluster_equals_the_direct_runner(cluster, s3_server, cluster_dataset, direct_build):
    build = cluster_dataset["proc"]
    assert build.returncode == 0, build.stderr
    assert "written: 24" in build.stdout and "rejected: 1" in build.stdout, build.stdout  # the truncated JPEG
    root = cluster_dataset["root"]
    assert dataset_writer.read_latest(s3_server.object_path(root)) == "v1"
    # versitygw keeps each object as a file: compare the bytes behind s3://.../v1/...
    assert_same_build(s3_server.object_path(f"{root}/v1"), os.path.join(direct_build, "v1"))


def _built(cluster_dataset) -> str:
    if cluster_dataset["proc"].returncode != 0:
        pytest.fail(f"the build on the cluster failed: {cluster_dataset['proc'].stderr}")
    return cluster_dataset["root"]


def test_validate_on_the_cluster(cluster, s3_server, cluster_dataset):
    root = _built(cluster_dataset)
    done = cluster_job(cluster, s3_server, "validate", root)
    assert "6 files, 24 records" in done.stdout and "OK: every record's CRCs hold" in done.stdout, done.stdout


def test_inspect_on_the_cluster(cluster, s3_server, cluster_dataset):
    root = _built(cluster_dataset)
    done = cluster_job(cluster, s3_server, "inspect", root, "--json", "--head", "1")
    direct = run_cli("inspect", root, "--json", "--head", "1", *on_direct_runner(s3_server), cwd=REPO)
    assert direct.returncode == 0, direct.stderr
    got, want = json.loads(done.stdout), json.loads(direct.stdout)
    assert got["records"] == 24
    for key in ("records", "files", "features", "inferred_spec", "head"):
        assert got[key] == want[key], key


def test_report_on_the_cluster(cluster, s3_server, cluster_dataset, tmp_path):
    root = _built(cluster_dataset)
    page = str(tmp_path / "report.html")
    done = cluster_job(cluster, s3_server, "report", root, "--output", page)
    info = dataset_writer.load_info(s3_server.object_path(f"{root}/v1"))
    counts = ", ".join(f"{split} {info['splits'][split]['records']}" for split in ("train", "validation", "test"))
    assert f"records {counts}" in done.stdout, done.stdout
    with open(page, encoding="utf-8") as f:
        assert "demo" in f.read()


def test_reshard_on_the_cluster(cluster, s3_server, cluster_dataset):
    root = _built(cluster_dataset)
    bucket = root.rsplit("/", 1)[0]
    out = f"{bucket}/reshard-{cluster.engine}"
    cluster_job(cluster, s3_server, "reshard", root, "--output", f"{out}/cluster/data", "--num-shards", "3")
    direct = run_cli(
        "reshard", root, "--output", f"{out}/direct/data", "--num-shards", "3", *on_direct_runner(s3_server), cwd=REPO
    )
    assert direct.returncode == 0, direct.stderr
    # The built shards are indexed: the slice path, whose shards are the same bytes on
    # every runner.
    local = s3_server.object_path(out)
    got = sorted(globlib.glob(f"{local}/cluster/data-*-of-00003*.tfrecord"))
    want = sorted(globlib.glob(f"{local}/direct/data-*-of-00003*.tfrecord"))
    assert [os.path.basename(p) for p in got] == [os.path.basename(p) for p in want]
    assert sum(len(list(read_records(p))) for p in got) == 24
    assert all(filecmp.cmp(a, b, shallow=False) for a, b in zip(got, want))
    # Without their indexes (removed behind the server), the same shards take the
    # scanned path: planned in the cluster's workers from a scan of each file; shard k
    # holds records [k*T//2, (k+1)*T//2) in path order.
    for index in globlib.glob(f"{local}/direct/*.index"):
        os.remove(index)
    cluster_job(
        cluster, s3_server, "reshard", f"{out}/direct/data-*", "--output", f"{out}/scanned/data", "--num-shards", "2"
    )
    records = [bytes(r) for p in want for _, r in read_records(p)]
    scanned = sorted(globlib.glob(f"{local}/scanned/data-*-of-00002*.tfrecord"))
    assert [[bytes(r) for _, r in read_records(p)] for p in scanned] == [records[:12], records[12:]]


def test_index_on_the_cluster(cluster, s3_server, cluster_dataset):
    root = _built(cluster_dataset)
    version = s3_server.object_path(f"{root}/v1")
    indexes = sorted(globlib.glob(f"{version}/*/*.index"))
    assert len(indexes) == 6
    before = {path: open(path, "rb").read() for path in indexes}
    for path in indexes:
        os.remove(path)  # behind the server: the objects are gone
    done = cluster_job(cluster, s3_server, "index", root)
    assert "6 files" in done.stdout, done.stdout
    assert {path: open(path, "rb").read() for path in indexes if os.path.exists(path)} == before


def write_big_file(path: str, n: int) -> List[bytes]:
    records = [b"%07d:" % i + bytes([i % 251]) * (200 + i % 300) for i in range(n)]
    with RecordWriter(path) as w:
        for r in records:
            w.write_record(r)
    return records


def read_with_workers(path: str, options: PipelineOptions, folder: str) -> List[Dict[str, Any]]:
    """One file read as 8 byte ranges; each record with the pid and parent pid of the
    SDK worker that read it (the Map is fused with the read, so it runs there). The
    results come back through ``folder`` (on S3: the workers cannot see the launcher's disk)."""
    FileSystems.set_options(options)  # the launcher sizes the s3:// file
    desired = file_size(path) // 8 + 1
    with ResultDir(folder) as results:
        with beam.Pipeline(options=options) as p:
            (
                p
                | ReadFromTFRecord(path, desired_bundle_size=desired, with_metadata=True)
                | beam.Map(
                    lambda t: {"offset": t[1], "record": bytes(t[2]).hex(), "pid": os.getpid(), "ppid": os.getppid()}
                )
                | results.sink()
            )
        return results.read()


def test_an_image_folder_on_s3_builds_on_the_cluster_as_locally(cluster, s3_server, s3_bucket, tmp_path):
    """``input.directory`` as a bucket prefix (keys ``images/<label>/<file>.jpg``), listed
    and read by the cluster's workers, which see nothing of the launcher's disk: the
    shards of the same folder built locally, byte for byte (keys are relative to the
    root), with the broken JPEG rejected there too."""
    from tests.pipeline_support import IN_PROCESS
    from tests.test_build_transform import _dir_config, _shards, _tree

    local = _tree(str(tmp_path / "images"))
    bucket = s3_bucket[len("s3://") :]
    client = s3_server.client()
    for label in sorted(os.listdir(local)):
        for name in sorted(os.listdir(os.path.join(local, label))):
            client.upload_file(os.path.join(local, label, name), bucket, f"images/{label}/{name}")
    out_local = str(tmp_path / "out-local")
    run_cli("build", _dir_config(tmp_path / "l.yaml", local, out_local), "--no-progress", *IN_PROCESS, check=True)
    out = f"{s3_bucket}/folder-on-{cluster.engine}"
    proc = run_cli(
        "build",
        _dir_config(tmp_path / "s.yaml", f"{s3_bucket}/images", out),
        *on_cluster(cluster, s3_server),
        cwd=REPO,
        timeout=CLUSTER_JOB_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr
    assert "written: 30" in proc.stdout and "rejected: 1" in proc.stdout, proc.stdout
    want = _shards(os.path.join(out_local, "v1"))
    assert want and _shards(s3_server.object_path(f"{out}/v1")) == want


def test_one_file_on_s3_is_split_across_both_workers_exactly_once(cluster, s3_server, s3_bucket, tmp_path):
    local = str(tmp_path / "big.tfrecord")
    records = write_big_file(local, 20000)
    bucket = s3_bucket[len("s3://") :]
    s3_server.client().upload_file(local, bucket, "big.tfrecord")
    path = f"{s3_bucket}/big.tfrecord"
    items = read_with_workers(path, cluster.options(s3_server), f"{s3_bucket}/cluster-results")
    assert Counter(bytes.fromhex(i["record"]) for i in items) == Counter(records)  # each exactly once
    pools = cluster.pool_pids()
    by_pool = Counter(pools.get(i["ppid"], f"not a pool: {i['ppid']}") for i in items)
    assert set(by_pool) == set(pools.values()), f"records per worker pool: {by_pool}"
    assert len({i["pid"] for i in items}) >= WORKERS

    direct = read_with_workers(path, direct_options(s3_server), f"{s3_bucket}/direct-results")
    assert sorted((i["offset"], i["record"]) for i in items) == sorted((i["offset"], i["record"]) for i in direct)


def _connected_sdk_workers(pool_pid: int) -> List[int]:
    """The SDK workers a pool started (its child processes, each running
    ``sdk_worker_main`` with ``CONTROL_API_SERVICE_DESCRIPTOR=url: "localhost:PORT"``)
    that hold an established TCP connection to that control port, i.e. that the engine
    is running code in."""
    established = {}  # socket inode -> remote port, for ESTABLISHED TCP connections
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="utf-8") as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "01":
                    established[fields[9]] = int(fields[2].rsplit(":", 1)[1], 16)
    found = []
    for entry in processes.children(pool_pid):
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = dict(v.split("=", 1) for v in f.read().decode("utf-8", "replace").split("\0") if "=" in v)
            control_port = int(environ["CONTROL_API_SERVICE_DESCRIPTOR"].split('"')[1].rsplit(":", 1)[1])
            sockets = {
                os.readlink(f"/proc/{entry}/fd/{fd}")[8:-1]
                for fd in os.listdir(f"/proc/{entry}/fd")
                if os.readlink(f"/proc/{entry}/fd/{fd}").startswith("socket:[")
            }
        except (OSError, IndexError, KeyError, ValueError):
            continue  # gone meanwhile, or not (yet) an SDK worker
        if any(established.get(inode) == control_port for inode in sockets):
            found.append(entry)
    return found


def _kill(cluster: RunningCluster, target: str) -> str:
    """SIGKILL worker 2's TaskManager/Spark worker (the JVM; a Spark worker's executor
    notices and exits), or worker 2's pool with the SDK workers it started (its process
    group, as when a sidecar container dies)."""
    if target == "taskmanager":
        name = "taskmanager-2" if cluster.engine == "flink" else "worker-2"
        os.kill(cluster.process(name)["pid"], signal.SIGKILL)
    else:
        name = "pool-2"
        os.killpg(cluster.process(name)["pid"], signal.SIGKILL)
    return name


@pytest.mark.parametrize("target", ["taskmanager", "pool"])
def test_a_worker_killed_during_a_build(cluster, target, s3_server, s3_bucket, s3_demo, direct_build):
    """`tfrecord-io build` on the cluster (the CLI, as a user runs it); worker 2's
    TaskManager / Spark worker, or its worker pool, is killed midway."""
    cluster.restart()  # a fresh cluster: the previous fault test left one damaged
    out = f"{s3_bucket}/dataset"
    s3_server.upload_tree(direct_build, out)  # v1 is current
    local_out = s3_server.object_path(out)  # the files behind the objects
    build = start_cli(
        "build",
        s3_demo["config"],
        "--output",
        out,
        "--version",
        "v2",
        "--runner-config",
        os.path.join(REPO, "configs", f"{cluster.engine}-cluster.yaml"),
        "--no-progress",
        *s3_server.pipeline_args(),
        cwd=REPO,
    )
    try:
        # Midway: once an SDK worker of worker 2's pool is connected to the engine. (Killing
        # the pool between its accepting a StartWorker request and the SDK worker
        # connecting back hangs the job: Beam's ExternalEnvironmentFactory waits for that
        # connection without a time limit -- see docs/clusters.md.)
        # And settled: every process the pool started is a connected SDK worker (none
        # between StartWorker and connecting back), twice, 0.2 s apart.
        pool_pid = cluster.process("pool-2")["pid"]
        deadline = time.monotonic() + 300
        settled = 0
        seen = []  # (connected, alive, children) of worker 2's pool, as it changed: for the message
        while settled < 2:
            assert build.poll() is None, (
                f"the build ended before worker 2 ran it (pool-2: {seen}): {build.communicate()}"
            )
            assert time.monotonic() < deadline, "worker 2's pool never got a connected SDK worker"
            connected = _connected_sdk_workers(pool_pid)
            # (an SDK worker that exited and is not reaped yet counts as none of them)
            alive = [p for p in processes.children(pool_pid) if processes.running(p)]
            state = (len(connected), len(alive), len(processes.children(pool_pid)))
            if not seen or seen[-1] != state:
                seen.append(state)
            settled = settled + 1 if connected and len(connected) == len(alive) else 0
            # (a Spark stage's SDK worker may live well under a second on a busy machine)
            time.sleep(0.2 if settled == 1 else 0.05)
        assert build.poll() is None, "the build was over before the kill"
        killed = _kill(cluster, target)
        stdout, stderr = build.communicate(timeout=600)
    finally:
        if build.poll() is None:
            build.kill()

    expected = FAULT_OUTCOMES[(cluster.engine, target)]
    print(f"{cluster.engine}, {killed} killed: exit {build.returncode}\n{stdout}\n{stderr}")
    if expected == "recovers":
        assert build.returncode == 0, f"{cluster.engine} did not recover from killing {killed}: {stderr}"
        assert dataset_writer.read_latest(local_out) == "v2"
        assert_same_build(os.path.join(local_out, "v2"), os.path.join(direct_build, "v1"))
    else:
        assert build.returncode == 1, f"{cluster.engine}: the build did not fail although {killed} was killed: {stderr}"
        assert "Traceback" not in stderr and "\tat " not in stderr, stderr  # one message, no stacks
        assert "tfrecord-io build failed:" in stderr, stderr
        assert "LATEST still points at v1" in stderr, stderr
        assert dataset_writer.read_latest(local_out) == "v1"
        assert not os.path.exists(os.path.join(local_out, "v2", dataset_writer.INFO_NAME))
        v1_files = [*version_files(os.path.join(direct_build, "v1")), dataset_writer.INFO_NAME]
        _, differing, unreadable = filecmp.cmpfiles(
            os.path.join(local_out, "v1"), os.path.join(direct_build, "v1"), v1_files, shallow=False
        )
        assert (differing, unreadable) == ([], []), "the previous version was changed"
