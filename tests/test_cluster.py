"""The jobs on real standalone clusters: Flink (JobManager + 2 TaskManagers) and Spark
(master + 2 workers), each worker with its own Beam Python worker pool, all started as
separate processes by ``scripts/cluster`` (one cluster per engine for the module;
``scripts/cluster down`` at the end).

Data on S3: versitygw (``s3_server``/``s3_bucket`` from tests/s3support.py); its flags
reach the SDK workers as pipeline options through the runner's provision service. The
outputs are compared through the files versitygw keeps behind the objects.

What is asserted (never timings):
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
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from typing import Any, Dict, List

import apache_beam as beam
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines import dataset_dir
from pipelines.build import run_build
from pipelines.collect import ResultDir
from pipelines.config import load_config
from pipelines.demo_data import make_demo_media
from pipelines.options import beam_args, load_runner_section
from pipelines.reshard import run_reshard
from pipelines.validate import run_validate
from tfrecord_io.beam_io import ReadFromTFRecord
from tfrecord_io.files import file_size
from tfrecord_io.reader import read_records
from tfrecord_io.writer import RecordWriter

pytestmark = pytest.mark.cluster

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "cluster")
WORKERS = 2
DEMO_ROWS = 24

# What a fault during a build leads to, per engine and fault (found by running it; see
# README "Trying a real cluster locally"): "recovers" or "fails".
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
        assert not os.path.exists(f"/proc/{proc['pid']}") or _zombie(proc["pid"]), proc


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def direct_options(s3_server=None) -> PipelineOptions:
    return PipelineOptions(beam_args(None, s3_server.pipeline_args() if s3_server else []))


def upload_tree(s3_server, local_dir: str, url: str) -> None:
    """Copy every file under ``local_dir`` to ``url`` (s3://bucket/prefix)."""
    bucket, _, prefix = url[len("s3://") :].partition("/")
    client = s3_server.client()
    for root, _, names in os.walk(local_dir):
        for name in names:
            path = os.path.join(root, name)
            client.upload_file(path, bucket, f"{prefix}/{os.path.relpath(path, local_dir)}")


@pytest.fixture(scope="module")
def demo_config(tmp_path_factory):
    return make_demo_media(str(tmp_path_factory.mktemp("cluster-media")), rows=DEMO_ROWS)


@pytest.fixture(scope="module")
def direct_build(demo_config, tmp_path_factory):
    """The reference: the same build on the DirectRunner (2 worker processes)."""
    out = str(tmp_path_factory.mktemp("direct") / "dataset")
    cfg = load_config(demo_config, [("output.dir", out), ("output.version", "v1")])
    run_build(cfg, direct_options(), progress=False)
    return out


def version_files(version_dir: str) -> Dict[str, bytes]:
    """Every file of a version except dataset_info.json, by relative path."""
    found = {}
    for root, _, names in os.walk(version_dir):
        for name in names:
            path = os.path.join(root, name)
            rel = os.path.relpath(path, version_dir)
            if rel != "dataset_info.json":
                with open(path, "rb") as f:
                    found[rel] = f.read()
    return found


def comparable_info(version_dir: str) -> Dict[str, Any]:
    """dataset_info.json without what differs by design (creation time, output dir, version name)."""
    info = dataset_dir.load_info(version_dir)
    info.pop("created_utc")
    info.pop("version")
    info["config"]["output"].pop("dir")
    info["config"]["output"].pop("version")
    return info


def assert_same_build(version_dir: str, reference_dir: str) -> None:
    got, want = version_files(version_dir), version_files(reference_dir)
    assert sorted(got) == sorted(want)
    differing = [rel for rel in want if got[rel] != want[rel]]
    assert not differing, f"files differ from the DirectRunner build: {differing}"
    assert comparable_info(version_dir) == comparable_info(reference_dir)


def records_by_file(paths: List[str], root: str) -> Dict[str, Counter]:
    return {os.path.relpath(p, root): Counter(bytes(r) for _, r in read_records(p)) for p in paths}


def test_build_validate_reshard_on_the_cluster_equal_the_direct_runner(
    cluster, s3_server, s3_bucket, demo_config, direct_build
):
    options = cluster.options(s3_server)
    out = f"{s3_bucket}/dataset"
    cfg = load_config(demo_config, [("output.dir", out), ("output.version", "v1")])
    summary = run_build(cfg, options, progress=False)
    assert summary.written > 0 and summary.rejected == 1  # the demo's truncated JPEG
    # versitygw keeps each object as a file: compare the bytes behind s3://.../v1/...
    assert_same_build(s3_server.object_path(f"{out}/v1"), os.path.join(direct_build, "v1"))

    shards = f"{out}/v1/*/*.tfrecord-?????-of-?????"  # not the .index files
    report = run_validate([shards], options, progress=False)
    reference = run_validate([shards], direct_options(s3_server), progress=False)
    assert report["ok"], report["problems"]
    assert report["records"] == summary.written == reference["records"]
    assert report["records_per_file"] == reference["records_per_file"]
    assert all(path.startswith(s3_bucket) for path in report["records_per_file"])

    resharded = run_reshard([shards], f"{s3_bucket}/reshard/data", options, num_shards=3, progress=False)
    direct = run_reshard(
        [shards], f"{s3_bucket}/reshard-direct/data", direct_options(s3_server), num_shards=3, progress=False
    )
    assert resharded["records"] == direct["records"] == summary.written
    # A shard's records are chosen by their CRC (the same on every runner); their order
    # within the shard is the order the runner delivers them in, so compare contents.
    got = records_by_file(
        [s3_server.object_path(s["path"]) for s in resharded["shards"]], s3_server.object_path(f"{s3_bucket}/reshard")
    )
    want = records_by_file(
        [s3_server.object_path(s["path"]) for s in direct["shards"]],
        s3_server.object_path(f"{s3_bucket}/reshard-direct"),
    )
    assert got == want


def write_big_file(path: str, n: int) -> List[bytes]:
    records = [b"%07d:" % i + bytes([i % 251]) * (200 + i % 300) for i in range(n)]
    with RecordWriter(path) as w:
        for r in records:
            w.write_record(r)
    return records


def read_with_workers(path: str, options: PipelineOptions, folder: str) -> List[Dict[str, Any]]:
    """One file read as 8 byte ranges; each record with the pid and parent pid of the
    SDK worker that read it (the Map is fused with the read, so it runs there)."""
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


def test_one_file_on_s3_is_split_across_both_workers_exactly_once(cluster, s3_server, s3_bucket, tmp_path):
    local = str(tmp_path / "big.tfrecord")
    records = write_big_file(local, 20000)
    bucket = s3_bucket[len("s3://") :]
    s3_server.client().upload_file(local, bucket, "big.tfrecord")
    path = f"{s3_bucket}/big.tfrecord"
    items = read_with_workers(path, cluster.options(s3_server), str(tmp_path / "cluster-results"))
    assert Counter(bytes.fromhex(i["record"]) for i in items) == Counter(records)  # each exactly once
    pools = cluster.pool_pids()
    by_pool = Counter(pools.get(i["ppid"], f"not a pool: {i['ppid']}") for i in items)
    assert set(by_pool) == set(pools.values()), f"records per worker pool: {by_pool}"
    assert len({i["pid"] for i in items}) >= WORKERS

    direct = read_with_workers(path, direct_options(s3_server), str(tmp_path / "direct-results"))
    assert sorted((i["offset"], i["record"]) for i in items) == sorted((i["offset"], i["record"]) for i in direct)


def _direct_children(pid: int) -> List[int]:
    """The processes whose parent is ``pid`` (from ``/proc``)."""
    children = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                    children.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return children


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
    for entry in _direct_children(pool_pid):
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
def test_a_worker_killed_during_a_build(cluster, target, s3_server, s3_bucket, demo_config, direct_build):
    """`tfrecord-io build` on the cluster (the CLI, as a user runs it); worker 2's
    TaskManager / Spark worker, or its worker pool, is killed midway."""
    cluster.restart()  # a fresh cluster: the previous fault test left one damaged
    out = f"{s3_bucket}/dataset"
    upload_tree(s3_server, direct_build, out)  # v1 is current
    local_out = s3_server.object_path(out)  # the files behind the objects
    command = [
        sys.executable,
        "-m",
        "pipelines",
        "build",
        demo_config,
        "--output",
        out,
        "--version",
        "v2",
        "--runner-config",
        os.path.join(REPO, "configs", f"{cluster.engine}-cluster.yaml"),
        "--no-progress",
        *s3_server.pipeline_args(),
    ]
    build = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Midway: once an SDK worker of worker 2's pool is connected to the engine. (Killing
        # the pool between its accepting a StartWorker request and the SDK worker
        # connecting back hangs the job: Beam's ExternalEnvironmentFactory waits for that
        # connection without a time limit -- see the README.)
        # And settled: every process the pool started is a connected SDK worker (none
        # between StartWorker and connecting back), twice, a second apart.
        pool_pid = cluster.process("pool-2")["pid"]
        deadline = time.monotonic() + 300
        settled = 0
        while settled < 2:
            assert build.poll() is None, f"the build ended before worker 2 ran it: {build.communicate()}"
            assert time.monotonic() < deadline, "worker 2's pool never got a connected SDK worker"
            connected = _connected_sdk_workers(pool_pid)
            settled = settled + 1 if connected and len(connected) == len(_direct_children(pool_pid)) else 0
            time.sleep(1 if settled == 1 else 0.1)
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
        assert dataset_dir.read_latest(local_out) == "v2"
        assert_same_build(os.path.join(local_out, "v2"), os.path.join(direct_build, "v1"))
    else:
        assert build.returncode == 1, f"{cluster.engine}: the build did not fail although {killed} was killed: {stderr}"
        assert "Traceback" not in stderr and "\tat " not in stderr, stderr  # one message, no stacks
        assert "tfrecord-io build failed:" in stderr, stderr
        assert "LATEST still points at v1" in stderr, stderr
        assert dataset_dir.read_latest(local_out) == "v1"
        assert not os.path.exists(os.path.join(local_out, "v2", "dataset_info.json"))
        v1_files = [*version_files(os.path.join(direct_build, "v1")), "dataset_info.json"]
        _, differing, unreadable = filecmp.cmpfiles(
            os.path.join(local_out, "v1"), os.path.join(direct_build, "v1"), v1_files, shallow=False
        )
        assert (differing, unreadable) == ([], []), "the previous version was changed"
