"""A GCS emulator for the tests: fake-gcs-server serving a temporary directory, behind a
small proxy that fills a gap of the emulator's batch endpoint.

Why the emulator: ``gs://`` is Beam's and Dataflow's usual store, and the build's commit
protocol (claim, shards, info last, ``LATEST``) needs the real API's listings, whole-object
writes, copies and deletes. fake-gcs-server (``scripts/setup-gcs``) speaks the GCS JSON
API that google-cloud-storage, and so Beam's GCS filesystem, uses.

Why the proxy (test harness only, never product code): Beam renames and deletes through
the JSON batch API (``POST /batch/storage/v1``, one ``multipart/mixed`` part per call).
google-cloud-storage sends those parts without a ``Content-ID`` header; fake-gcs-server
(v1.56.1, ``handleBatchCall``) skips every part that has none, answers a batch with no
parts, and the client fails with "Bad response: not multi-part". Real GCS does not need
the header. :class:`BatchContentIdProxy` forwards every request unchanged, except that it
numbers the parts of a batch that have no ``Content-ID`` (``<item-N>``); the answers
come back in order, which is how google-cloud-storage matches them.

The proxy also answers for a bucket the caller may not use, as GCS does when IAM
refuses: every request naming a bucket whose name starts with ``denied-``
(:data:`DENIED_PREFIX`) gets GCS's 403 (``forbidden``, JSON error body) without reaching
the emulator, which checks no permissions. Set such a bucket up through
``client(direct=True)`` (the emulator itself).

The binary: ``TFRECORD_IO_FAKE_GCS_SERVER``, else ``~/.cache/tfrecord-io/bin/fake-gcs-server``,
else ``fake-gcs-server`` on PATH. Without it the tests skip, unless
``TFRECORD_IO_REQUIRE_GCS=1`` (set by ``scripts/test``). Server and proxy bind
127.0.0.1 on free ports; only the process started here is stopped.

Fixtures (registered in ``conftest.py``):

- ``gcs_server`` (session): a :class:`GcsServer`; ``endpoint`` is the proxy's URL, the
  value of ``STORAGE_EMULATOR_HOST`` (``env()``) that Google's clients, and so Beam's GCS
  filesystem, honour.
- ``gcs_env`` (function): ``STORAGE_EMULATOR_HOST`` set in this process for the test.
- ``gcs_bucket`` (function): a fresh, empty bucket; returns ``"gs://<name>"``.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Dict, Iterator, Optional

import pytest

START_TIMEOUT_S = 30.0
DENIED_PREFIX = "denied-"
_DENIED = re.compile(rb"(?:/b/|^/)(" + DENIED_PREFIX.encode() + rb"[^/?\s]+)")


def forbidden_body(bucket: str) -> bytes:
    """GCS's 403 for an object request the caller's identity may not make."""
    message = (
        f"anonymous@example.iam.gserviceaccount.com does not have storage.objects.get access to the Google "
        f"Cloud Storage bucket {bucket}. Permission 'storage.objects.get' denied on resource (or it may not exist)."
    )
    error = {
        "code": 403,
        "message": message,
        "errors": [{"message": message, "domain": "global", "reason": "forbidden"}],
    }
    return json.dumps({"error": error}).encode()


def find_fake_gcs_server() -> Optional[str]:
    """Path of the fake-gcs-server binary, or None."""
    candidates = [
        os.environ.get("TFRECORD_IO_FAKE_GCS_SERVER"),
        os.path.join(
            os.environ.get("TFRECORD_IO_TOOLS", os.path.expanduser("~/.cache/tfrecord-io/bin")), "fake-gcs-server"
        ),
        shutil.which("fake-gcs-server"),
    ]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_BOUNDARY = re.compile(rb'boundary="?([^";]+)"?', re.IGNORECASE)


def add_content_ids(body: bytes, content_type: str) -> bytes:
    """The ``multipart/mixed`` batch ``body`` with a ``Content-ID: <item-N>`` header added
    to each part that has none (parts are otherwise unchanged)."""
    match = _BOUNDARY.search(content_type.encode("latin-1"))
    if match is None:
        return body
    delimiter = b"--" + match.group(1)
    pieces = body.split(delimiter)
    # pieces[0]: preamble; the last piece starts with "--" (the closing delimiter)
    for n in range(1, len(pieces)):
        piece = pieces[n]
        if piece.startswith(b"--"):
            break
        head, sep, rest = piece.partition(b"\r\n\r\n")
        if not sep:
            head, sep, rest = piece.partition(b"\n\n")
        if b"\ncontent-id:" in head.lower():
            continue
        newline = b"\r\n" if b"\r\n" in head or not head.strip() else b"\n"
        pieces[n] = head + newline + f"Content-ID: <item-{n}>".encode() + sep + rest
    return delimiter.join(pieces)


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: tuple = ("127.0.0.1", 0)

    def log_message(self, format: str, *args) -> None:  # quiet
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(size)
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _deny(self, bucket: str) -> None:
        data = forbidden_body(bucket)
        self.send_response_only(403, "Forbidden")
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _forward(self) -> None:
        body = self._body()
        route = self.path.split("?")[0]
        denied = _DENIED.search(route.encode()) or _DENIED.search(body)
        if denied:
            self._deny(denied.group(1).decode())
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "content-length")}
        if self.command == "POST" and route.rstrip("/").endswith("/batch/storage/v1"):
            body = add_content_ids(body, self.headers.get("Content-Type", ""))
        if body or self.command in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(*self.upstream, timeout=120)
        try:
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
            except OSError as err:  # the emulator is not up (yet) or went away
                self.send_error(502, f"fake-gcs-server unreachable: {err}")
                return
            self.send_response_only(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            conn.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _forward


class BatchContentIdProxy:
    """An HTTP proxy on 127.0.0.1 in front of fake-gcs-server (module doc: why)."""

    def __init__(self, upstream_port: int, port: int = 0) -> None:
        handler = type("Handler", (_ProxyHandler,), {"upstream": ("127.0.0.1", upstream_port)})
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class GcsServer:
    """A running fake-gcs-server (and its proxy) and how to reach it."""

    endpoint: str  # the proxy: what STORAGE_EMULATOR_HOST is set to
    server_endpoint: str  # fake-gcs-server itself
    root_dir: str
    process: Optional[subprocess.Popen] = field(default=None, repr=False)
    proxy: Optional[BatchContentIdProxy] = field(default=None, repr=False)
    log_path: str = ""

    def env(self) -> Dict[str, str]:
        """The variable Google's clients (and so Beam's GCS filesystem) read."""
        return {"STORAGE_EMULATOR_HOST": self.endpoint}

    def client(self, direct: bool = False):
        """An anonymous google-cloud-storage client for test set-up and inspection
        (``direct``: to the emulator itself, past the proxy: for ``denied-`` buckets)."""
        from google.auth.credentials import AnonymousCredentials
        from google.cloud import storage

        endpoint = self.server_endpoint if direct else self.endpoint
        return storage.Client(
            project="test", credentials=AnonymousCredentials(), client_options={"api_endpoint": endpoint}
        )

    def make_bucket(self, name: Optional[str] = None) -> str:
        name = name or f"t-{secrets.token_hex(6)}"
        self.client().create_bucket(name)
        return name

    def upload_tree(self, local_dir: str, url: str) -> None:
        """Copy every file under ``local_dir`` to ``url`` (``gs://bucket/prefix``)."""
        bucket_name, _, prefix = url[len("gs://") :].partition("/")
        bucket = self.client().bucket(bucket_name)
        for root, _, names in os.walk(local_dir):
            for name in names:
                path = os.path.join(root, name)
                bucket.blob(f"{prefix}/{os.path.relpath(path, local_dir)}").upload_from_filename(path)

    def upload_demo(self, demo_config: str, url: str, config_out: str) -> str:
        """The demo (``make_demo_media``) copied to ``url`` and ``config_out`` written: its
        build config with the manifest (and so the media it names) read from there."""
        self.upload_tree(os.path.dirname(demo_config), url)
        with open(demo_config, encoding="utf-8") as f:
            text = f.read()
        assert "  manifest: manifest.csv\n" in text, demo_config
        with open(config_out, "w", encoding="utf-8") as f:
            f.write(text.replace("  manifest: manifest.csv\n", f"  manifest: {url}/manifest.csv\n"))
        return config_out

    def names(self, url: str) -> list:
        """Every object name under ``gs://bucket/prefix`` (sorted)."""
        bucket_name, _, prefix = url[len("gs://") :].partition("/")
        return sorted(b.name for b in self.client().list_blobs(bucket_name, prefix=prefix))

    def stop(self) -> None:
        if self.proxy is not None:
            self.proxy.close()
            self.proxy = None
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _healthy(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/storage/v1/b?project=test", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def start_fake_gcs_server(binary: str, workdir: str, timeout_s: float = START_TIMEOUT_S) -> GcsServer:
    """Start fake-gcs-server on a free 127.0.0.1 port, its proxy in front, and wait until
    both answer a bucket listing."""
    root = os.path.join(workdir, "gcs-root")
    os.makedirs(root, exist_ok=True)
    last_error = ""
    for _attempt in range(3):  # the free port may be taken between probe and bind
        proxy_port, port = _free_port(), _free_port()
        proxy_url = f"http://127.0.0.1:{proxy_port}"
        log_path = os.path.join(workdir, f"fake-gcs-server-{port}.log")
        with open(log_path, "wb") as log:
            # -external-url: the Location of resumable uploads points at the proxy too
            args = [binary, "-scheme", "http", "-host", "127.0.0.1", "-port", str(port), "-backend", "filesystem"]
            args += ["-filesystem-root", root, "-external-url", proxy_url, "-public-host", f"127.0.0.1:{proxy_port}"]
            proc = subprocess.Popen([*args, "-log-level", "warn"], stdout=log, stderr=subprocess.STDOUT)
        server = GcsServer(proxy_url, f"http://127.0.0.1:{port}", root, process=proc, log_path=log_path)
        try:
            server.proxy = BatchContentIdProxy(port, proxy_port)
        except OSError as err:
            last_error = f"proxy port {proxy_port}: {err}"
            server.stop()
            continue
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            if _healthy(server.endpoint):
                return server
            time.sleep(0.1)
        server.stop()
        with open(log_path, encoding="utf-8", errors="replace") as f:
            last_error = f"fake-gcs-server did not come up on port {port} within {timeout_s}s; log:\n{f.read()[-2000:]}"
    raise RuntimeError(last_error)


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory) -> Iterator[GcsServer]:
    binary = find_fake_gcs_server()
    if binary is None:
        message = "fake-gcs-server not found: run `bash scripts/setup-gcs` (or set TFRECORD_IO_FAKE_GCS_SERVER)"
        if os.environ.get("TFRECORD_IO_REQUIRE_GCS") == "1":
            pytest.fail(message)
        pytest.skip(message)
    pytest.importorskip("google.cloud.storage", reason="Beam's GCS filesystem needs 'tfrecord-io[gcp]'")
    workdir = tempfile.mkdtemp(prefix="gcs-", dir=str(tmp_path_factory.getbasetemp()))
    server = start_fake_gcs_server(binary, workdir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def gcs_env(gcs_server: GcsServer, monkeypatch) -> GcsServer:
    """``STORAGE_EMULATOR_HOST`` pointed at the session's emulator in this process."""
    for key, value in gcs_server.env().items():
        monkeypatch.setenv(key, value)
    return gcs_server


@pytest.fixture
def gcs_bucket(gcs_env: GcsServer) -> str:
    """A fresh, empty bucket on the session's emulator: ``"gs://<name>"``."""
    return "gs://" + gcs_env.make_bucket()
