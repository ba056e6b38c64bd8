"""A store that refuses the job -- credentials missing or refused, a bucket that does not
exist, access denied -- fails it within seconds with ``StorageAccessError``, naming the
object and what to set, and the CLI exits 2 without a traceback (never a wait for the
storage timeout: Beam retries a missing credential like an outage).

Real parts: a versitygw of this module's own with its internal IAM (a second, "user"
account that may not use the root account's bucket: a real AccessDenied), Beam's S3
filesystem and its retry loop, the ``tfrecord-io`` CLI in a subprocess, the torch reader.

The time bound is far below the storage timeout (60 s by default, and a missing
credential used to end only at it: 34-57 s measured): a guard that lets Beam retry fails it.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from typing import Dict, List, Tuple

import pytest
import yaml

from tests.pipeline_support import IN_PROCESS, TWO_WORKERS, run_cli
from tests.s3support import S3Server, find_versitygw, start_versitygw
from tests.torch_data import write_examples

pytestmark = pytest.mark.s3

BOUND_S = 25.0  # a CLI start (Beam's import ~3 s) and a few requests, on a loaded machine
USER_KEY, USER_SECRET = "user" + secrets.token_hex(4), secrets.token_hex(16)

# what each kind of refusal must say the user should set or check ({bucket}: its name)
HINTS = {
    "missing": "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    "refused": "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
    "no_bucket": "check the bucket name '{bucket}'",
    "denied": "may do this on '{bucket}'",
}
# a 403 without a body (S3's answer to a HEAD) cannot say which of the two it is
FORBIDDEN = "the store refused access (HTTP 403"
REASONS = {
    "missing": ("no credentials for the store",),
    "refused": ("the store refused the credentials", FORBIDDEN),
    "no_bucket": ("no such bucket",),
    "denied": ("access denied", FORBIDDEN),
}


def _says(message: str, kind: str, bucket: str) -> bool:
    """``message`` gives the reason and the hint of a refusal of ``kind``."""
    return any(r in message for r in REASONS[kind]) and HINTS[kind].format(bucket=bucket) in message


@pytest.fixture(scope="module")
def iam_store(tmp_path_factory) -> S3Server:
    """A versitygw with its internal IAM: the root account (``access_key``) and a "user"
    account (``USER_KEY``) that may not use the root account's buckets."""
    binary = find_versitygw()
    if binary is None:
        if os.environ.get("TFRECORD_IO_REQUIRE_S3") == "1":
            pytest.fail("versitygw not found: run `bash scripts/setup-s3`")
        pytest.skip("versitygw not found: run `bash scripts/setup-s3`")
    workdir = tmp_path_factory.mktemp("iam-s3")
    iam_dir = workdir / "iam"
    iam_dir.mkdir()
    server = start_versitygw(binary, str(workdir), extra_args=["--iam-dir", str(iam_dir)])
    try:
        admin = [binary, "admin", "--access", server.access_key, "--secret", server.secret_key]
        subprocess.run(
            [*admin, "--endpoint-url", server.endpoint, "create-user", "--access", USER_KEY]
            + ["--secret", USER_SECRET, "--role", "user"],
            check=True,
            capture_output=True,
            timeout=30,
        )
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def data(iam_store, tmp_path_factory) -> Dict[str, str]:
    """Two indexed TFRecord files in the root account's bucket, and a build config whose
    output is in that bucket: ``{"bucket", "pattern", "file", "config"}``."""
    local = tmp_path_factory.mktemp("access-data")
    bucket = iam_store.make_bucket()
    client = iam_store.client()
    for k in range(2):
        path = str(local / f"part-{k}.tfrecord")
        write_examples(path, range(10 * k, 10 * k + 10), index=True, seed=k)
        for suffix in ("", ".index"):
            client.upload_file(path + suffix, bucket, f"ds/part-{k}.tfrecord{suffix}")
    _jpeg(str(local / "img.jpg"))
    with open(local / "manifest.jsonl", "w") as f:
        for i in range(4):
            f.write(json.dumps({"id": f"r{i}", "image": str(local / "img.jpg"), "label": "cat"}) + "\n")
    config = {
        "name": "acc",
        "input": {"manifest": "manifest.jsonl"},
        "key": "id",
        "columns": {"image": {"encoder": "image"}, "label": {"encoder": "label", "vocabulary": ["cat", "dog"]}},
        "splits": {"train": 1.0},
        "sharding": {"num_shards": 1},
        "output": {"dir": "out"},
    }
    (local / "build.yaml").write_text(yaml.safe_dump(config))
    return {
        "bucket": bucket,
        "pattern": f"s3://{bucket}/ds/*.tfrecord",
        "file": f"s3://{bucket}/ds/part-0.tfrecord",
        "config": str(local / "build.yaml"),
        "local": str(local),
    }


def _jpeg(path: str) -> None:
    from PIL import Image

    Image.new("RGB", (16, 16), (200, 30, 30)).save(path, "JPEG")


def _no_aws_env() -> Dict[str, str]:
    """This environment without any AWS credential source (and no instance-metadata probe)."""
    from tests.pipeline_support import cli_env

    env = {k: v for k, v in cli_env().items() if not k.startswith("AWS_")}
    env["AWS_EC2_METADATA_DISABLED"] = "true"
    env["AWS_CONFIG_FILE"] = env["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    return env


def _case(store: S3Server, kind: str, bucket: str) -> Tuple[List[str], str]:
    """The S3 flags of a refusal of ``kind`` and the bucket the job is pointed at."""
    endpoint = [f"--s3_endpoint_url={store.endpoint}", "--s3_disable_ssl", f"--s3_region_name={store.region}"]
    if kind == "missing":
        return endpoint, bucket
    if kind == "refused":
        return [*endpoint, f"--s3_access_key_id={store.access_key}", "--s3_secret_access_key=wrong"], bucket
    if kind == "denied":
        return [*endpoint, f"--s3_access_key_id={USER_KEY}", f"--s3_secret_access_key={USER_SECRET}"], bucket
    assert kind == "no_bucket"
    keys = [f"--s3_access_key_id={store.access_key}", f"--s3_secret_access_key={store.secret_key}"]
    return [*endpoint, *keys], "no-such-bucket-" + secrets.token_hex(4)


def _job_args(job: str, data: Dict[str, str], bucket: str, tmp_path) -> List[str]:
    """The command line of ``job`` reading (or, for build, writing) ``bucket``."""
    pattern = data["pattern"].replace(data["bucket"], bucket)
    if job == "build":
        return ["build", data["config"], "--output", f"s3://{bucket}/built"]
    if job in ("validate", "inspect", "index"):
        return [job, pattern]
    if job == "report":
        return ["report", pattern, "--output", str(tmp_path / "report.html")]
    if job == "reshard":
        return ["reshard", pattern, "--output", str(tmp_path / "resharded"), "--num-shards", "1"]
    assert job == "convert"
    return ["convert", pattern, "--to", "parquet", "--output", str(tmp_path / "parquet")]


def _assert_refused(proc: subprocess.CompletedProcess, elapsed: float, kind: str, names: str, bucket: str) -> None:
    assert proc.returncode == 2, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    first = proc.stderr.strip().splitlines()[0]
    assert "StorageAccessError" in first and names in first, proc.stderr
    assert _says(first, kind, bucket), proc.stderr
    assert elapsed < BOUND_S, f"{elapsed:.1f}s: waited like an outage\n{proc.stderr}"


JOBS = ["build", "validate", "inspect", "index", "report", "reshard", "convert"]


@pytest.mark.parametrize("kind", ["missing", "refused", "no_bucket", "denied"])
@pytest.mark.parametrize("job", JOBS)
def test_a_refusing_store_fails_every_job_at_once_with_exit_2(iam_store, data, tmp_path, job, kind):
    """Each job, each kind of refusal: exit 2 within seconds, one block naming the
    object (its bucket and path) and what to set; nothing retried as an outage."""
    flags, bucket = _case(iam_store, kind, data["bucket"])
    env = _no_aws_env()
    start = time.monotonic()
    proc = run_cli(*_job_args(job, data, bucket, tmp_path), "--no-progress", *IN_PROCESS, *flags, env=env, timeout=300)
    _assert_refused(proc, time.monotonic() - start, kind, f"s3://{bucket}/", bucket)


def test_a_worker_refused_mid_job_fails_the_job_with_the_same_message(iam_store, data, tmp_path):
    """A build whose launcher reads only local files (the manifest) and whose worker
    processes read the images from a bucket these credentials may not read: the rows are
    not rejected one by one (StorageAccessError passes the row-level handlers), the job
    fails with the worker's refusal, exit 2."""
    client = iam_store.client()
    client.upload_file(os.path.join(data["local"], "img.jpg"), data["bucket"], "media/img.jpg")
    local = tmp_path / "in"
    local.mkdir()
    with open(local / "manifest.jsonl", "w") as f:
        for i in range(4):
            f.write(json.dumps({"id": f"r{i}", "image": f"s3://{data['bucket']}/media/img.jpg", "label": "cat"}) + "\n")
    with open(data["config"]) as f:
        config = yaml.safe_load(f)
    (local / "build.yaml").write_text(yaml.safe_dump(config))
    flags, _ = _case(iam_store, "denied", data["bucket"])
    start = time.monotonic()
    proc = run_cli(
        "build",
        str(local / "build.yaml"),
        "--output",
        str(tmp_path / "out"),
        "--no-progress",
        *TWO_WORKERS,
        *flags,
        env=_no_aws_env(),
        timeout=300,
    )
    _assert_refused(proc, time.monotonic() - start, "denied", f"s3://{data['bucket']}/media/", data["bucket"])
    assert "rejected" not in proc.stdout, proc.stdout


def _torch_env(store: S3Server, kind: str) -> Dict[str, str]:
    env = _no_aws_env()
    env["AWS_ENDPOINT_URL"] = store.endpoint
    env["AWS_DEFAULT_REGION"] = store.region
    if kind == "refused":
        env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = store.access_key, "wrong"
    elif kind == "denied":
        env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = USER_KEY, USER_SECRET
    elif kind == "no_bucket":
        env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = store.access_key, store.secret_key
    return env


TORCH_READ = """
import sys, time
from tfrecord_io.errors import StorageAccessError
from tfrecord_io.torch import TFRecordDataset
start = time.monotonic()
try:
    list(TFRecordDataset(sys.argv[1], index_path=None))
except StorageAccessError as err:
    print(f"{time.monotonic() - start:.2f}")
    print(err)
    sys.exit(3)
"""


@pytest.mark.parametrize("kind", ["missing", "refused", "no_bucket", "denied"])
def test_the_torch_reader_raises_storage_access_error_at_once(iam_store, data, kind):
    """``TFRecordDataset("s3://...")`` (the torch readers' object layer, in a fresh
    process with the credentials of each case in its environment): StorageAccessError
    naming the object and what to set, within seconds."""
    url, bucket = data["file"], data["bucket"]
    if kind == "no_bucket":
        bucket = "no-such-bucket-" + secrets.token_hex(4)
        url = url.replace(data["bucket"], bucket)
    proc = subprocess.run(
        [sys.executable, "-c", TORCH_READ, url],
        capture_output=True,
        text=True,
        env=_torch_env(iam_store, kind),
        timeout=300,
    )
    assert proc.returncode == 3, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    elapsed, message = proc.stdout.strip().split("\n", 1)
    assert float(elapsed) < 10.0, proc.stdout
    assert message.startswith(url) and _says(message, kind, bucket), message
