"""Datasets on Azure Blob Storage (``azfs://``, Beam's Azure filesystem) end to end, on
Azurite's Blob service (tests/azure_support.py): a build with the commit protocol
(claim, shards, info last, ``LATEST``), ``validate``, and the torch readers over the
built dataset; credentials the store refuses and a container that does not exist fail
at once with ``StorageAccessError`` (exit 2).

Real parts: Azurite (Microsoft's emulator of the Blob REST API, shared-key signed
requests), Beam's ``azfs://`` filesystem and the Azure SDK it uses, the ``tfrecord-io``
CLI in a subprocess, the torch readers in this process.
"""

from __future__ import annotations

import io
import json
import time

import pytest
import yaml

from tests.azure_support import AzuriteServer
from tests.pipeline_support import IN_PROCESS, cli_env, run_cli

pytestmark = pytest.mark.azure

ROWS = 12


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """A local manifest of JPEGs and a build config for it."""
    from PIL import Image

    root = tmp_path_factory.mktemp("az-media")
    with open(root / "manifest.jsonl", "w") as f:
        for i in range(ROWS):
            Image.new("RGB", (24, 16), (20 * i % 256, 90, 200 - 10 * i)).save(root / f"img{i}.jpg", "JPEG")
            f.write(json.dumps({"id": f"r{i}", "image": f"img{i}.jpg", "label": ["cat", "dog"][i % 2]}) + "\n")
    config = {
        "name": "az",
        "input": {"manifest": "manifest.jsonl"},
        "key": "id",
        "columns": {"image": {"encoder": "image"}, "label": {"encoder": "label", "vocabulary": ["cat", "dog"]}},
        "splits": {"train": 0.75, "test": 0.25},
        "sharding": {"num_shards": 2},
        "output": {"dir": "out"},
    }
    (root / "build.yaml").write_text(yaml.safe_dump(config))
    return root


@pytest.fixture
def az_env(azurite: AzuriteServer, monkeypatch):
    """This process's Beam filesystems and environment pointed at Azurite."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    for key, value in azurite.env().items():
        monkeypatch.setenv(key, value)
    FileSystems.set_options(PipelineOptions(azurite.pipeline_args()))
    yield azurite
    FileSystems.set_options(PipelineOptions([]))


def test_build_validate_and_torch_read_on_azfs(az_env, az_container, media):
    """A build into ``azfs://``: the commit protocol's objects in the container (shards
    and info under the version, ``LATEST`` naming it, no claim or temporary left);
    ``validate`` passes; the torch reader reads every row back from the container."""
    from tfrecord_io.dataset import datasets
    from tfrecord_io.torch import from_dataset

    server = az_env
    url = az_container + "/ds"
    container = az_container.rsplit("/", 1)[-1]
    start = time.monotonic()
    proc = run_cli(
        "build", str(media / "build.yaml"), "--output", url, "--no-progress", *IN_PROCESS, *server.pipeline_args()
    )
    assert proc.returncode == 0, proc.stderr
    blobs = server.blobs(container)
    latest = [b for b in blobs if b == "ds/LATEST"]
    assert latest, blobs
    version = server.client().get_blob_client(container, "ds/LATEST").download_blob().readall().decode().strip()
    info_blob = f"ds/{version}/tfrecord_io_info.json"
    assert info_blob in blobs, blobs
    info = json.loads(server.client().get_blob_client(container, info_blob).download_blob().readall())
    shards = [s["path"] for split in info["splits"].values() for s in split["shards"]]
    assert len(shards) == 4 and all(f"ds/{version}/{s}" in blobs for s in shards), (shards, blobs)
    assert sum(split["records"] for split in info["splits"].values()) == ROWS
    leftovers = [b for b in blobs if "claim" in b.lower() or "tmp" in b.lower() or "temp" in b.lower()]
    assert not leftovers, blobs
    assert datasets.read_latest(url) == version

    proc = run_cli("validate", url, "--no-progress", *IN_PROCESS, *server.pipeline_args())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 problem" in proc.stdout or "OK" in proc.stdout or "passed" in proc.stdout.lower(), proc.stdout

    rows = {split: list(from_dataset(url, split)) for split in ("train", "test")}
    assert {split: len(r) for split, r in rows.items()} == {
        split: info["splits"][split]["records"] for split in ("train", "test")
    }
    assert sum(len(r) for r in rows.values()) == ROWS
    labels = sorted(row["label"].item() for r in rows.values() for row in r)  # each a 1-element array
    assert labels == [0] * (ROWS // 2) + [1] * (ROWS // 2), labels
    from PIL import Image

    sizes = {Image.open(io.BytesIO(bytes(row["image/encoded"]))).size for r in rows.values() for row in r}
    assert sizes == {(24, 16)}, sizes
    elapsed = time.monotonic() - start
    print(f"azfs build + validate + torch read: {elapsed:.1f}s")


def test_missing_or_refused_key_and_missing_container_fail_at_once(az_env, az_container, tmp_path):
    """No credentials at all, a wrong account key (Azurite answers 403) and a container that
    does not exist: ``validate`` exits 2 within seconds with StorageAccessError naming
    the object and what to set."""
    server = az_env
    wrong = f"--azure_connection_string={server.connection_string(key='d3Jvbmcga2V5IGZvciB0aGUgdGVzdA==')}"
    cases = [
        # neither --azure_connection_string nor AZURE_STORAGE_CONNECTION_STRING
        (az_container + "/ds", [], ("no credentials for the store",), "set --azure_connection_string"),
        # a HEAD's 403 has no body to say why: either reason is right
        (
            az_container + "/ds",
            [wrong],
            ("the store refused the credentials", "the store refused access (HTTP 403"),
            "--azure_connection_string",
        ),
        (
            server.url("no-such-container-x", "ds"),
            server.pipeline_args(),
            ("no such container",),
            "check the container name 'no-such-container-x'",
        ),
    ]
    for url, flags, reasons, hint in cases:
        env = {k: v for k, v in cli_env().items() if not k.startswith("AZURE_")}
        start = time.monotonic()
        proc = run_cli("validate", url, "--no-progress", *IN_PROCESS, *flags, env=env)
        elapsed = time.monotonic() - start
        assert proc.returncode == 2, proc.stdout + proc.stderr
        first = proc.stderr.strip().splitlines()[0]
        assert "StorageAccessError" in first and url.rstrip("/") in first, proc.stderr
        assert any(r in first for r in reasons) and hint in first, proc.stderr
        assert "Traceback" not in proc.stderr and elapsed < 25, (elapsed, proc.stderr)
