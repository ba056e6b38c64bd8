"""``gs://`` end to end on a GCS emulator (fake-gcs-server, tests/gcs_support.py): the
build's commit protocol (claim, shards, info last, ``LATEST``; a killed build and its
retry; two racing claims), an image folder on ``gs://`` as the build's input, the jobs
(validate, inspect, report, reshard, index, convert), ``BuildDataset`` in a user's
pipeline, the torch readers, and how a process gets its GCS credentials
(tfrecord_io/storage/gcs_clients.py: no ~40 s probe, missing credentials an error at once)."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import time

import apache_beam as beam
import pytest
import yaml
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that

import tfrecord_io
from tfrecord_io.dataset import dataset_writer, datasets
from tfrecord_io.errors import StorageAccessError
from tfrecord_io.storage import files, gcs_clients

from tests.pipeline_support import IN_PROCESS, REPO, TWO_WORKERS, run_cli, start_cli

pytestmark = pytest.mark.gcs
LABELS = ("cat", "dog", "owl")


def _tree(root, n=36):
    """``root/<label>/imNNN.jpg``: n small JPEGs over three labels, and one broken file."""
    from PIL import Image

    for i in range(n):
        label = LABELS[i % 3]
        os.makedirs(os.path.join(root, label), exist_ok=True)
        Image.new("RGB", (16, 12), (7 * i % 256, 90, 250 - 6 * i)).save(os.path.join(root, label, f"im{i:03d}.jpg"))
    with open(os.path.join(root, "owl", "broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 not really a jpeg")
    return root


def _config(path, directory, out):
    cfg = {
        "name": "pets",
        "input": {"directory": directory},
        "columns": {
            "image": {"encoder": "image", "column": "path"},
            "label": {"encoder": "label", "vocabulary": list(LABELS)},
        },
        "splits": {"train": 0.75, "validation": 0.25},
        "sharding": {"num_shards": 2},
        "output": {"dir": out, "version": "v1"},
    }
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return str(path)


def _shards(version_dir):
    info = datasets.load_info(version_dir)
    return {s["path"]: files.read_bytes(s["abspath"]) for s in dataset_writer.dataset_shards(version_dir, info)}


@pytest.fixture
def gcs_fs(gcs_env):
    """Beam's filesystems with default options (the emulator comes from the environment)."""
    FileSystems.set_options(PipelineOptions([]))
    yield gcs_env
    FileSystems.set_options(PipelineOptions([]))


@pytest.fixture
def images(gcs_fs, gcs_bucket, tmp_path):
    """The image folder (36 JPEGs, one broken) on ``gs://<bucket>/images``; its local copy."""
    local = _tree(str(tmp_path / "images"))
    gcs_fs.upload_tree(local, gcs_bucket + "/images")
    return local


# ---------------------------------------------------------------- credentials


def _no_credentials_env(tmp_path, **extra):
    """This environment without any Google credential source (nor an emulator)."""
    env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")}
    env.pop(gcs_clients.ANONYMOUS_ENV, None)
    empty = tmp_path / "gcloud"
    empty.mkdir(exist_ok=True)
    env.update(CLOUDSDK_CONFIG=str(empty), PYTHONPATH=REPO, **extra)
    return env


_FIRST_REQUEST = """
import sys, time
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from tfrecord_io.storage import files
FileSystems.set_options(PipelineOptions(sys.argv[2:]))
start = time.monotonic()
try:
    print(files.glob(sys.argv[1]))
except Exception as err:
    print(type(err).__name__, err)
print("seconds", time.monotonic() - start)
"""


def _first_request(url, env, *flags):
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_REQUEST, url, *flags], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    return lines[0], float(lines[-1].split()[1])


def test_with_the_emulator_set_the_first_request_is_made_at_once(gcs_server, tmp_path):
    """STORAGE_EMULATOR_HOST alone: no credential probe (Beam's took 27-40 s here), the
    listing comes back within a second of the first call."""
    bucket = gcs_server.make_bucket()
    gcs_server.client().bucket(bucket).blob("a/one").upload_from_string(b"1")
    env = _no_credentials_env(tmp_path, STORAGE_EMULATOR_HOST=gcs_server.endpoint)
    found, seconds = _first_request(f"gs://{bucket}/a/*", env)
    assert found == str([f"gs://{bucket}/a/one"])
    assert seconds < 1.0, seconds


@pytest.mark.parametrize("how", ["--no_auth", gcs_clients.ANONYMOUS_ENV])
def test_anonymous_access_is_asked_for_by_an_option_and_skips_the_probe(gcs_server, tmp_path, how):
    """``--no_auth`` (Beam's option, carried to workers with the pipeline options) or
    ``TFRECORD_IO_GCS_ANONYMOUS=1``: an anonymous client at once, no credentials needed.
    (The emulator is reached through the client's endpoint here, not the variable: the
    request goes to Google's endpoint and fails fast, without network; what is checked
    is that no probe ran and no credential error was raised.)"""
    env = _no_credentials_env(tmp_path)
    flags = [how] if how.startswith("--") else []
    if not flags:
        env[how] = "1"
    code = (
        "import sys, time\n"
        "from apache_beam.io.gcp import gcsio\n"
        "from apache_beam.options.pipeline_options import PipelineOptions\n"
        "from google.auth.credentials import AnonymousCredentials\n"
        "from tfrecord_io.storage import files\n"
        "files.beam_filesystems()\n"
        "start = time.monotonic()\n"
        "client = gcsio.GcsIO(pipeline_options=PipelineOptions(sys.argv[1:])).client\n"
        "print(type(client._credentials).__name__, time.monotonic() - start)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, *flags], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    name, seconds = proc.stdout.split()
    assert name == "AnonymousCredentials" and float(seconds) < 1.0, proc.stdout


def test_missing_credentials_are_an_error_at_once_saying_what_to_set(tmp_path):
    """No emulator, no anonymous option, no credentials: a StorageAccessError within a
    few seconds (not Beam's 27-40 s probe and then anonymous requests) naming gs:// and
    what to set."""
    env = _no_credentials_env(tmp_path)
    found, seconds = _first_request("gs://some-bucket/data/*", env)
    assert found.startswith(StorageAccessError.__name__), found
    assert "gs://" in found and "GOOGLE_APPLICATION_CREDENTIALS" in found and "gcloud auth" in found
    assert "--no_auth" in found
    assert seconds < 10.0, seconds


def test_missing_credentials_in_the_cli_fail_fast_naming_the_store(tmp_path):
    env = _no_credentials_env(tmp_path)
    start = time.monotonic()
    proc = run_cli("validate", "gs://some-bucket/ds", "--no-progress", *IN_PROCESS, env=env, timeout=120)
    assert proc.returncode != 0
    assert "GOOGLE_APPLICATION_CREDENTIALS" in proc.stderr + proc.stdout, proc.stderr
    assert time.monotonic() - start < 30


# ---------------------------------------------------------------- the commit protocol


def test_put_if_absent_on_gcs_is_refused_once_the_object_exists(gcs_fs, gcs_bucket):
    path = gcs_bucket + "/exclusive/marker"
    assert files.put_if_absent(path, b"first") is True
    assert files.put_if_absent(path, b"second") is False
    assert files.read_bytes(path) == b"first"


def test_two_runs_claiming_one_gcs_version_at_once_only_one_wins(gcs_fs, gcs_bucket, monkeypatch):
    """The claim is an upload with ``if_generation_match=0``: one run wins at once, the
    other is refused without the last-writer-wins wait (made an hour here: a claim that
    waited would not finish)."""
    monkeypatch.setattr(dataset_writer, "CLAIM_SETTLE_S", 3600.0)
    version_dir = gcs_bucket + "/ds/v1"
    claims = [dataset_writer.BuildClaim(version_dir) for _ in range(2)]
    outcomes = {}

    def claim(i):
        try:
            claims[i].acquire()
            outcomes[i] = "won"
        except dataset_writer.VersionTaken as err:
            outcomes[i] = str(err)

    threads = [threading.Thread(target=claim, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads), "a claim waited (or hung)"
    assert sorted(o == "won" for o in outcomes.values()) == [False, True], outcomes
    winner = next(i for i, o in outcomes.items() if o == "won")
    assert "being built by another run" in outcomes[1 - winner]
    assert dataset_writer.read_marker(version_dir)["run_id"] == claims[winner].run_id
    claims[winner].release()
    assert dataset_writer.read_marker(version_dir) is None


def test_gcs_folder_build_and_every_job_kill_and_retry(gcs_fs, gcs_bucket, images, tmp_path):
    """An image folder on gs:// built into gs:// by the CLI on two worker processes:
    the local folder's shards byte for byte, then validate / inspect / index / report /
    reshard / convert on gs://; a killed build leaves ``LATEST`` and nothing a reader
    takes for whole; its retry with the same version builds. (Two runs racing for one
    version: test_two_runs_claiming_one_gcs_version_at_once_only_one_wins.)"""
    gcs = gcs_fs
    root = gcs_bucket + "/ds"
    flags = ["--no-progress", *TWO_WORKERS]
    local_out = str(tmp_path / "local-out")
    run_cli("build", _config(tmp_path / "l.yaml", images, local_out), "--no-progress", *IN_PROCESS, check=True)
    want = _shards(os.path.join(local_out, "v1"))

    config = _config(tmp_path / "g.yaml", gcs_bucket + "/images", root)
    build = run_cli("build", config, *flags)
    assert build.returncode == 0, build.stderr
    assert "written: 36" in build.stdout and "rejected: 1" in build.stdout, build.stdout
    assert datasets.read_latest(root) == "v1"
    v1 = datasets.resolve_version_dir(root)
    assert _shards(v1) == want
    names = gcs.names(root + "/v1")
    assert not any("_BUILDING" in n or "/_shards/" in n or "/_rejected/" in n for n in names), names

    ok = run_cli("validate", root, *flags)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    inspect = run_cli("inspect", root, "--head", "1", *flags)
    assert inspect.returncode == 0 and "36 records" in inspect.stdout, inspect.stdout + inspect.stderr
    index = run_cli("index", root, *flags)
    assert index.returncode == 0 and "4 ok" in index.stdout, index.stdout + index.stderr
    report = run_cli("report", root, "--output", gcs_bucket + "/report/pets.html", *flags)
    assert report.returncode == 0, report.stdout + report.stderr
    assert b"<html" in files.read_bytes(gcs_bucket + "/report/pets.html")

    resharded = run_cli("reshard", root, "--output", gcs_bucket + "/flat/data", "--num-shards", "3", *flags)
    assert resharded.returncode == 0, resharded.stderr
    flat = [p for p in files.glob(gcs_bucket + "/flat/data-*") if not p.endswith(".index")]
    assert len(flat) == 3
    got = sorted(bytes(r) for p in flat for r in tfrecord_io.tfrecord_iterator(p))
    local_v1 = os.path.join(local_out, "v1")
    assert got == sorted(bytes(r) for path in want for r in tfrecord_io.tfrecord_iterator(os.path.join(local_v1, path)))

    parquet = run_cli("convert", root, "--to", "parquet", "--output", gcs_bucket + "/pq", *flags)
    assert parquet.returncode == 0, parquet.stdout + parquet.stderr
    assert any(n.endswith(".parquet") for n in gcs.names(gcs_bucket + "/pq")), gcs.names(gcs_bucket + "/pq")

    # A build killed mid-run (launcher and workers) leaves LATEST, and no version a
    # reader would take for whole.
    proc = start_cli(
        "build", config, "--version", "v2", *flags, capture=False, start_new_session=True, env=dict(os.environ)
    )
    deadline = time.monotonic() + 120
    while not files.exists(root + "/v2/_BUILDING") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the build finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert datasets.read_latest(root) == "v1"
    assert datasets.load_info(root + "/v2") is None
    with pytest.raises(datasets.DatasetLayoutError):
        datasets.resolve_version_dir(root, "v2")
    # The scheduler's retry with the same version removes the leftovers and builds.
    retry = run_cli("build", config, "--version", "v2", *flags)
    assert retry.returncode == 0, retry.stderr
    assert datasets.read_latest(root) == "v2" and _shards(root + "/v2") == want


# ---------------------------------------------------------------- BuildDataset, torch


def test_build_dataset_in_a_user_pipeline_writes_to_gcs(gcs_fs, gcs_bucket, images, tmp_path):
    """``beam.Create(rows) | BuildDataset(config)``: rows naming images on gs://, the
    version published on gs://, and the transform's output its info."""
    rows = [
        {"path": f"{gcs_bucket}/images/{label}/{name}", "label": label}
        for label in LABELS
        for name in sorted(os.listdir(os.path.join(images, label)))
    ]
    raw = {
        "name": "pets",
        "columns": {
            "image": {"encoder": "image", "column": "path"},
            "label": {"encoder": "label", "vocabulary": list(LABELS)},
        },
        "splits": {"train": 1.0},
        "sharding": {"num_shards": 2},
    }
    out = gcs_bucket + "/ptransform"
    build = tfrecord_io.BuildDataset(raw, output_dir=out, version="v1")
    with beam.Pipeline(options=PipelineOptions(IN_PROCESS)) as p:
        info = p | beam.Create(rows) | build

        def check(infos):
            assert len(infos) == 1 and (infos[0]["records"], infos[0]["rejected"]) == (36, 1)

        assert_that(info, check)
    assert datasets.read_latest(out) == "v1"
    assert datasets.load_info(out + "/v1")["records"] == 36
    assert b"broken.jpg" in files.read_bytes(out + "/v1/rejected-00000-of-00001.jsonl")


@pytest.fixture
def built(gcs_fs, gcs_bucket, tmp_path):
    """A dataset of 200 rows built by the CLI into gs://; its URL."""
    rows = tmp_path / "rows.jsonl"
    with open(rows, "w") as f:
        for i in range(200):
            f.write(json.dumps({"id": f"r{i:03d}", "n": i}) + "\n")
    cfg = {
        "name": "nums",
        "input": {"manifest": str(rows)},
        "key": "id",
        "columns": {"n": {"encoder": "int"}},
        "splits": {"train": 1.0},
        "sharding": {"num_shards": 3},
        "output": {"dir": gcs_bucket + "/nums", "version": "v1"},
    }
    (tmp_path / "nums.yaml").write_text(yaml.safe_dump(cfg))
    run_cli("build", str(tmp_path / "nums.yaml"), "--no-progress", *IN_PROCESS, check=True)
    return gcs_bucket + "/nums"


def test_torch_from_dataset_on_gcs_reads_global_shuffle_and_resumes(built):
    pytest.importorskip("torch")
    from tfrecord_io.torch import from_dataset

    plain = [int(n) for batch in from_dataset(built, "train", batch_size=16, features=["n"]) for n in batch["n"]]
    assert sorted(plain) == list(range(200))
    kw = dict(batch_size=8, features=["n"], shuffle="global", seed=4)
    ds = from_dataset(built, "train", **kw)
    it = iter(ds)
    head = [int(n) for _ in range(5) for n in next(it)["n"]]
    state = pickle.loads(pickle.dumps(ds.state_dict()))
    rest = [int(n) for batch in it for n in batch["n"]]
    assert sorted(head + rest) == list(range(200)) and head + rest != sorted(head + rest)
    again = from_dataset(built, "train", **kw)
    again.load_state_dict(state)
    assert [int(n) for batch in again for n in batch["n"]] == rest


def test_an_object_replaced_while_read_is_an_error_naming_it(built, gcs_fs):
    """A shard replaced by other bytes of the same size (a new generation) while an
    epoch reads: the reader fails naming the object (the reads are pinned to the
    generation listed; a replacement by valid records, even the same bytes, is refused
    too: tests/test_torch_gcs.py)."""
    pytest.importorskip("torch")
    from tfrecord_io.torch import from_dataset

    ds = from_dataset(built, "train", batch_size=4, features=["n"])
    it = iter(ds)
    next(it)
    shard = sorted(p for p in files.glob(built + "/v1/train/*") if not p.endswith(".index"))[-1]
    data = files.read_bytes(shard)
    files.write_bytes(shard, data[:-1] + bytes([data[-1] ^ 0xFF]))
    with pytest.raises(Exception) as err:
        for _ in it:
            pass
    assert shard in str(err.value), err.value


# ---------------------------------------------------------------- a bucket that does not exist


def _exits_2_at_once_naming(args, name: str) -> subprocess.CompletedProcess:
    """The CLI job ``args``, in-process: exit 2 within 30 s, ``name`` in its message, no
    traceback (not Beam's retries until the storage timeout)."""
    start = time.monotonic()
    proc = run_cli(*args, "--no-progress", *IN_PROCESS, timeout=180)
    seconds = time.monotonic() - start
    assert proc.returncode == 2, (args, proc.stdout, proc.stderr)
    assert name in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert seconds < 30, (args, seconds)
    return proc


def test_a_gcs_bucket_that_does_not_exist_is_exit_2_at_once_naming_it(gcs_env, images, tmp_path):
    """Reading from, or building into, a gs:// bucket that does not exist: exit 2 within
    seconds, naming the bucket, with nothing written (not "no file matches", not Beam's
    retries until the storage timeout)."""
    missing = "gs://no-such-bucket-" + os.urandom(4).hex()
    for args in (
        ["validate", missing + "/ds"],
        ["inspect", missing + "/data-*.tfrecord"],
        ["build", _config(tmp_path / "b.yaml", str(images), missing + "/ds")],
    ):
        _exits_2_at_once_naming(args, missing.split("//")[1])
    client = gcs_env.client()
    assert missing.split("//")[1] not in [b.name for b in client.list_buckets()]


# ---------------------------------------------------------------- a bucket the caller may not use (403)


def test_a_gcs_bucket_the_caller_may_not_use_is_exit_2_at_once_naming_it(gcs_server, gcs_fs, images, tmp_path):
    """GCS's 403 (IAM refuses the caller; fake-gcs-server checks no permissions, so the
    harness proxy answers for ``denied-`` buckets as GCS does, tests/gcs_support.py): each
    job exits 2 within seconds naming the bucket and the refusal, never waited on as an
    outage, with nothing written; the torch reader and ``open_dataset`` raise
    StorageAccessError naming the object."""
    from tests.gcs_support import DENIED_PREFIX

    bucket = DENIED_PREFIX + os.urandom(4).hex()
    direct = gcs_server.client(direct=True).create_bucket(bucket)
    local = str(tmp_path / "data.tfrecord")
    with tfrecord_io.RecordWriter(local) as writer:
        writer.write_record(tfrecord_io.serialize_example({"n": [1]}))
    direct.blob("ds/data.tfrecord").upload_from_filename(local)
    url = f"gs://{bucket}"
    for args in (
        ["validate", url + "/ds/data.tfrecord"],
        ["inspect", url + "/ds/*.tfrecord"],
        ["build", _config(tmp_path / "b.yaml", str(images), url + "/out")],
    ):
        proc = _exits_2_at_once_naming(args, bucket)
        assert "access denied" in proc.stderr and "storage.objects.get" in proc.stderr, proc.stderr
    assert [b.name for b in direct.list_blobs()] == ["ds/data.tfrecord"]  # the build wrote nothing

    pytest.importorskip("torch")
    from tfrecord_io.torch import TFRecordDataset

    start = time.monotonic()
    with pytest.raises(StorageAccessError) as err:
        list(TFRecordDataset(url + "/ds/data.tfrecord", None, ["n"]))
    assert bucket in str(err.value) and time.monotonic() - start < 10, err.value
    with pytest.raises(StorageAccessError) as err:
        tfrecord_io.open_dataset(url + "/ds")
    assert bucket in str(err.value), err.value
