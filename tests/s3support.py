"""A real S3 server for the tests: versitygw serving a temporary directory.

Why a real server: the build's commit protocol exists because object stores have no
atomic rename and no directories; only a real S3 API (listing by prefix, PUT/COPY/
DELETE of whole objects, signatures and errors) tests it. versitygw's ``posix`` backend
serves a local directory over S3, so a test can also reach *behind* the server (e.g.
corrupt one object's bytes on disk).

The binary comes from ``scripts/setup-s3`` (``TFRECORD_IO_VERSITYGW``, else
``~/.cache/tfrecord-io/bin/versitygw``, else ``versitygw`` on PATH). Without it the
S3 tests skip, unless ``TFRECORD_IO_REQUIRE_S3=1`` (set by ``scripts/test``), where
they fail. The server binds 127.0.0.1 on a free port with random credentials; only the
process started here is stopped.

Fixtures (registered by ``pytest_plugins = ["s3support"]`` in ``conftest.py``):

- ``s3_server`` (session): an :class:`S3Server` with ``endpoint``, ``access_key``,
  ``secret_key``, ``region``, ``root_dir``, ``pipeline_args()`` (Beam's S3 flags) and
  ``env()`` (the AWS_* variables boto3 and Beam read).
- ``s3_bucket`` (function): a fresh, empty bucket; returns ``"s3://<name>"``.
"""

from __future__ import annotations

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

START_TIMEOUT_S = 30.0


def find_versitygw() -> Optional[str]:
    """Path of the versitygw binary, or None."""
    candidates = [
        os.environ.get("TFRECORD_IO_VERSITYGW"),
        os.path.join(os.environ.get("TFRECORD_IO_TOOLS", os.path.expanduser("~/.cache/tfrecord-io/bin")), "versitygw"),
        shutil.which("versitygw"),
    ]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class S3Server:
    """A running versitygw process and how to reach it."""

    endpoint: str
    access_key: str
    secret_key: str
    root_dir: str
    region: str = "us-east-1"
    process: Optional[subprocess.Popen] = field(default=None, repr=False)
    log_path: str = ""

    def pipeline_args(self) -> List[str]:
        """Beam's S3 flags (``S3Options``) for this server."""
        return [
            f"--s3_endpoint_url={self.endpoint}",
            f"--s3_access_key_id={self.access_key}",
            f"--s3_secret_access_key={self.secret_key}",
            f"--s3_region_name={self.region}",
            "--s3_disable_ssl",
        ]

    def env(self) -> Dict[str, str]:
        """The AWS environment variables boto3 (and so Beam's S3 filesystem) reads."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_DEFAULT_REGION": self.region,
            "AWS_REGION": self.region,
            "AWS_ENDPOINT_URL": self.endpoint,
        }

    def client(self):
        """A boto3 S3 client for test set-up and inspection."""
        import boto3

        return boto3.session.Session().client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key,
            region_name=self.region,
        )

    def make_bucket(self, name: Optional[str] = None) -> str:
        name = name or f"t-{secrets.token_hex(6)}"
        self.client().create_bucket(Bucket=name)
        return name

    def upload_tree(self, local_dir: str, url: str) -> None:
        """Copy every file under ``local_dir`` to ``url`` (``s3://bucket/prefix``)."""
        bucket, _, prefix = url[len("s3://") :].partition("/")
        client = self.client()
        for root, _, names in os.walk(local_dir):
            for name in names:
                path = os.path.join(root, name)
                client.upload_file(path, bucket, f"{prefix}/{os.path.relpath(path, local_dir)}")

    def upload_demo(self, demo_config: str, url: str, config_out: str) -> str:
        """The demo (``make_demo_media``: the folder of its media, manifest and build
        config) copied to ``url``, and ``config_out`` written: the demo's build config with
        its manifest (and so the media it names) read from there. Returns ``config_out``."""
        self.upload_tree(os.path.dirname(demo_config), url)
        with open(demo_config, encoding="utf-8") as f:
            text = f.read()
        assert "  manifest: manifest.csv\n" in text, demo_config
        with open(config_out, "w", encoding="utf-8") as f:
            f.write(text.replace("  manifest: manifest.csv\n", f"  manifest: {url}/manifest.csv\n"))
        return config_out

    def object_path(self, url: str) -> str:
        """The file behind ``s3://bucket/key`` in the posix backend's directory."""
        assert url.startswith("s3://"), url
        return os.path.join(self.root_dir, url[len("s3://") :])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def start_versitygw(
    binary: str,
    workdir: str,
    timeout_s: float = START_TIMEOUT_S,
    keep_alive: bool = False,
    root: Optional[str] = None,
    extra_args: Optional[List[str]] = None,
) -> S3Server:
    """Start versitygw on a free 127.0.0.1 port and wait until it answers a signed request.

    ``keep_alive``: keep connections open between requests (``--keep-alive``), as AWS S3
    and most S3 servers do; versitygw's default closes the connection after every
    response, so each request pays a TCP connect (the tests keep that default: it
    exercises reconnecting). ``root``: the directory to serve (default: a new one in
    ``workdir``; another server's ``root_dir`` serves its buckets too). ``extra_args``:
    more gateway options (e.g. ``--iam-dir DIR`` for accounts besides the root one)."""
    extra = (["--keep-alive"] if keep_alive else []) + list(extra_args or [])
    root = root or os.path.join(workdir, "s3-root")
    os.makedirs(root, exist_ok=True)
    access, secret = "tk" + secrets.token_hex(8), secrets.token_hex(20)
    last_error: Optional[BaseException] = None
    for _attempt in range(3):  # the free port may be taken between probe and bind
        port = _free_port()
        log_path = os.path.join(workdir, f"versitygw-{port}.log")
        log = open(log_path, "wb")
        args = [binary, "--access", access, "--secret", secret, "--port", f"127.0.0.1:{port}", "--quiet", *extra]
        proc = subprocess.Popen(
            [*args, "posix", root],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        server = S3Server(f"http://127.0.0.1:{port}", access, secret, root, process=proc, log_path=log_path)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                server.client().list_buckets()
                return server
            except Exception as err:  # noqa: BLE001 - not up yet
                last_error = err
                time.sleep(0.2)
        server.stop()
        with open(log_path, encoding="utf-8", errors="replace") as f:
            tail = f.read()[-2000:]
        last_error = RuntimeError(
            f"versitygw did not come up on port {port} within {timeout_s}s ({last_error}); log:\n{tail}"
        )
    raise RuntimeError(str(last_error))


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[S3Server]:
    binary = find_versitygw()
    if binary is None:
        message = "versitygw not found: run `bash scripts/setup-s3` (or set TFRECORD_IO_VERSITYGW)"
        if os.environ.get("TFRECORD_IO_REQUIRE_S3") == "1":
            pytest.fail(message)
        pytest.skip(message)
    pytest.importorskip("boto3", reason="Beam's S3 filesystem needs boto3: pip install 'tfrecord-io[aws]'")
    workdir = tempfile.mkdtemp(prefix="s3-", dir=str(tmp_path_factory.getbasetemp()))
    server = start_versitygw(binary, workdir)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_bucket(s3_server: S3Server) -> str:
    """A fresh, empty bucket on the session's server: ``"s3://<name>"``."""
    return "s3://" + s3_server.make_bucket()


@pytest.fixture
def s3_options(s3_server: S3Server):
    """Beam's filesystems pointed at the session's server (its endpoint and keys) for
    the test, reset after it."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(s3_server.pipeline_args())
    FileSystems.set_options(options)
    yield options
    FileSystems.set_options(PipelineOptions([]))


class CuttingProxy:
    """A TCP proxy on 127.0.0.1 in front of the S3 server that can break responses off:
    the first ``cuts`` connections (all of them with ``cuts=None``) are closed after
    ``cut_after`` bytes of the server's response, as a flaky network or a server that
    drops a connection does. The first ``throttles`` connections are answered with S3's
    ``503 SlowDown`` instead (as S3 throttles a prefix), each after its request arrived.
    ``connections`` counts the connections clients opened, ``first_lines`` holds the
    first request line each of them sent (what ``connections_for`` counts by)."""

    def __init__(
        self, server: S3Server, cut_after: Optional[int] = None, cuts: Optional[int] = 0, throttles: int = 0
    ) -> None:
        import threading

        host, _, port = server.endpoint.rpartition("//")[2].partition(":")
        self.target = (host, int(port))
        self.cut_after, self.cuts, self.throttles = cut_after, cuts, throttles
        self.connections = 0
        self.first_lines: List[str] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        self._threading = threading
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            n = self.connections
            self.connections += 1
            if n < self.throttles:
                self._threading.Thread(target=self._slow_down, args=(client,), daemon=True).start()
                continue
            limit = self.cut_after if self.cuts is None or n < self.cuts else None
            upstream = socket.create_connection(self.target)
            for src, dst, lim, note in ((client, upstream, None, True), (upstream, client, limit, False)):
                self._threading.Thread(
                    target=self._pump, args=(src, dst, lim, (client, upstream), note), daemon=True
                ).start()

    def connections_for(self, fragment: str) -> int:
        """Connections whose first request line has ``fragment`` (e.g. an object's key):
        a count that other clients of the proxy (another thread's requests) leave alone."""
        return sum(fragment in line for line in list(self.first_lines))

    def _slow_down(self, client: socket.socket) -> None:
        """Read a request's header, answer S3's 503 SlowDown and close."""
        got = b""
        try:
            while b"\r\n\r\n" not in got:
                data = client.recv(65536)
                if not data:
                    break
                got += data
            self.first_lines.append(got.split(b"\r\n", 1)[0].decode("latin-1"))
            body = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
            client.sendall(
                b"HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        except OSError:
            pass
        client.close()

    def _pump(self, src: socket.socket, dst: socket.socket, limit: Optional[int], both: tuple, note: bool) -> None:
        sent = 0
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if note:  # the client's side: its first request line
                    self.first_lines.append(data.split(b"\r\n", 1)[0].decode("latin-1"))
                    note = False
                if limit is not None and sent + len(data) >= limit:
                    dst.sendall(data[: limit - sent])
                    break
                dst.sendall(data)
                sent += len(data)
        except OSError:
            pass
        for s in both:  # one side done or cut: the connection is over
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self._closed = True
        self._listener.close()
