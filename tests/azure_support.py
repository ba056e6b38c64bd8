"""A real Azure Blob Storage endpoint for the tests: Azurite's Blob service on 127.0.0.1.

Why Azurite: it is Microsoft's own emulator of the Blob REST API (shared-key signatures,
containers, block blobs, listings by prefix, copy and delete), so Beam's ``azfs://``
filesystem runs against it exactly as against Azure, pointed there by a connection
string (``--azure_connection_string``, or ``AZURE_STORAGE_CONNECTION_STRING``) whose
``BlobEndpoint`` is the emulator: nothing in the product knows it is an emulator.

The program comes from ``scripts/setup-azurite`` (``TFRECORD_IO_AZURITE``, else
``~/.cache/tfrecord-io/azurite-*/node_modules/.bin/azurite-blob``, else
``azurite-blob`` on PATH). Without it, or without the Azure SDK
(``pip install 'tfrecord-io[azure]'``), the Azure tests skip, unless
``TFRECORD_IO_REQUIRE_AZURE=1`` (set by ``scripts/test``), where they fail. The server
binds 127.0.0.1 on a free port and keeps its data in a temporary directory; only the
process started here is stopped.

Fixtures (``pytest_plugins = ["azure_support"]`` in ``conftest.py``):

- ``azurite`` (session): an :class:`AzuriteServer` with ``connection_string``,
  ``pipeline_args()`` (Beam's Azure flags), ``env()``, ``make_container()``, ``url()``.
- ``az_container`` (function): a fresh, empty container; returns its ``azfs://`` URL.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional

import pytest

START_TIMEOUT_S = 60.0
# Azurite's well-known development account (public, documented by Microsoft: it is the
# account every Azure emulator and SDK sample uses; not a secret).
ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def find_azurite() -> Optional[str]:
    """Path of the ``azurite-blob`` program, or None."""
    tools = os.environ.get("TFRECORD_IO_TOOLS", os.path.expanduser("~/.cache/tfrecord-io/bin"))
    installed = sorted(
        glob.glob(os.path.join(os.path.dirname(tools), "azurite-*", "node_modules", ".bin", "azurite-blob"))
    )
    candidates = [os.environ.get("TFRECORD_IO_AZURITE"), *reversed(installed), shutil.which("azurite-blob")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class AzuriteServer:
    """A running azurite-blob process and how to reach it."""

    port: int
    workdir: str
    process: Optional[subprocess.Popen] = field(default=None, repr=False)
    log_path: str = ""

    @property
    def blob_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/{ACCOUNT}"

    def connection_string(self, key: str = ACCOUNT_KEY) -> str:
        """The connection string of the development account (``key``: another one, for
        a refused-credentials test)."""
        return (
            f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={key};BlobEndpoint={self.blob_endpoint};"
        )

    def pipeline_args(self) -> List[str]:
        """Beam's Azure flags (``AzureOptions``) for this server."""
        return [f"--azure_connection_string={self.connection_string()}"]

    def env(self) -> Dict[str, str]:
        """The variable Beam's Azure filesystem reads when no flag is given."""
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string()}

    def client(self):
        """An ``azure.storage.blob.BlobServiceClient`` for test set-up and inspection."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string())

    def make_container(self, name: Optional[str] = None) -> str:
        name = name or f"t-{secrets.token_hex(6)}"
        self.client().create_container(name)
        return name

    def url(self, container: str, blob: str = "") -> str:
        """``azfs://<account>/<container>/<blob>``: Beam's form of an Azure blob's path."""
        return f"azfs://{ACCOUNT}/{container}/{blob}"

    def blobs(self, container: str) -> List[str]:
        return sorted(b.name for b in self.client().get_container_client(container).list_blobs())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_azurite(program: str, workdir: str, timeout_s: float = START_TIMEOUT_S) -> AzuriteServer:
    """Start azurite-blob on a free 127.0.0.1 port, its data in ``workdir``, and wait
    until it answers a signed request (listing containers)."""
    last_error: Optional[BaseException] = None
    for _attempt in range(3):  # the free port may be taken between probe and bind
        port = _free_port()
        data_dir = os.path.join(workdir, f"azurite-{port}")
        os.makedirs(data_dir, exist_ok=True)
        log_path = os.path.join(workdir, f"azurite-{port}.log")
        log = open(log_path, "wb")
        proc = subprocess.Popen(
            [program, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", data_dir]
            + ["--silent", "--disableTelemetry", "--skipApiVersionCheck"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        server = AzuriteServer(port, workdir, process=proc, log_path=log_path)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                list(server.client().list_containers(results_per_page=1))
                return server
            except Exception as err:  # noqa: BLE001 - not up yet
                last_error = err
                time.sleep(0.25)
        server.stop()
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = f.read()[-2000:]
        last_error = RuntimeError(
            f"azurite did not come up on port {port} within {timeout_s}s ({last_error}); log:\n{tail}"
        )
    raise RuntimeError(str(last_error))


def _skip_or_fail(message: str) -> None:
    if os.environ.get("TFRECORD_IO_REQUIRE_AZURE") == "1":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def azurite(tmp_path_factory) -> Iterator[AzuriteServer]:
    program = find_azurite()
    if program is None:
        _skip_or_fail("azurite not found: run `bash scripts/setup-azurite` (or set TFRECORD_IO_AZURITE)")
    try:
        import azure.storage.blob  # noqa: F401 - Beam's azfs:// needs it
    except ImportError:
        _skip_or_fail("Beam's Azure filesystem needs the Azure SDK: pip install 'tfrecord-io[azure]'")
    workdir = tempfile.mkdtemp(prefix="azure-", dir=str(tmp_path_factory.getbasetemp()))
    server = start_azurite(str(program), workdir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def az_container(azurite: AzuriteServer) -> str:
    """A fresh, empty container on the session's server: its ``azfs://`` URL (no blob)."""
    return azurite.url(azurite.make_container()).rstrip("/")
