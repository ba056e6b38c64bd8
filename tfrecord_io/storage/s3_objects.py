"""S3 objects for range reads: this process's boto3 client, ``stat`` (a HEAD), and the
range GETs themselves (``open_range``), pinned to the ETag that was listed.

Transport: maintained libraries only, no HTTP or signing of our own. botocore presigns a
GET of each object version once (SigV4, its credential chain, region, endpoint and
bucket addressing; ``stat`` does it, so forked DataLoader workers inherit the URL). The
standard library's ``http.client`` sends each range GET on a kept-alive connection
(``_StdlibGets``) and receives the body into the caller's buffer; whatever is not a
plain 200/206 answer (a dropped connection, 5xx such as 503 SlowDown, 429, 403, 412,
404) is asked again through urllib3 (its keep-alive pool, TLS, retries with backoff
and ``Retry-After``), whose answer is the one mapped to an error. Why not urllib3 for
every GET: it re-encodes the request target byte by byte in Python on every request
(~0.1-0.2 ms of CPU for a ~300-character presigned URL, about half a GET's CPU), which
decides a global shuffle's rate; ``http.client`` sends the target botocore encoded.
botocore's own ``get_object`` costs ~2 ms of CPU per 64 KiB GET here against ~0.25 ms
(benchmarks/README.md); it is used when
``configure(client_factory=...)`` gives a client or a proxy is set in the environment
(botocore's HTTP session honours proxies; ``_Presigned`` does not). Refusals (403, no
credentials) are ``StorageAccessError`` via ``storage_errors``, never retried as an
outage.

Credentials and endpoint: boto3's usual sources (``AWS_*`` variables,
``AWS_ENDPOINT_URL``, config files, instance roles), or a command's ``--s3_*`` Beam
flags when it was given them (``_job_s3_args``).

Why a module of its own: everything here is S3's (botocore, urllib3, presigning); the
range reader (``range_reads``) only opens a range through ``open_range`` and reads the
body it returns. Nothing here imports torch or Beam.
"""

from __future__ import annotations

import functools
import http.client
import os
import ssl
import threading
import time
from typing import Any, Dict, List, Optional, Tuple, Type

from ..errors import TFRecordError, TruncatedRecordError
from . import storage_errors
from .remote_objects import (
    STATS,
    TRIES,
    RemoteObject,
    RemoteObjectChangedError,
    _changed,
    _check_listed,
    _check_version,
    _stats_lock,
    settings,
    split_url,
)

#: seconds a connection waits for the server before the read fails (and is retried)
SOCKET_TIMEOUT = 60.0

_pid = os.getpid()
_client: Any = None
_session: Any = None
_client_lock = threading.Lock()


def _config() -> Any:
    """botocore's settings for range reads: the standard retry mode (not the legacy
    default), a connection pool for every GET in flight (read-ahead of several readers
    plus ``random_parallel``), and no checksum of whole responses (a range GET has
    none to check; each frame's CRCs are checked by the scanners)."""
    from botocore.config import Config

    extra: Dict[str, Any] = {}
    if "response_checksum_validation" in Config.OPTION_DEFAULTS:  # botocore >= 1.36
        extra = {"request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
    return Config(
        signature_version="s3v4",  # presigned URLs too (botocore's S3 default for those is still SigV2)
        max_pool_connections=64,
        retries={"mode": "standard", "total_max_attempts": TRIES},
        connect_timeout=SOCKET_TIMEOUT,
        read_timeout=SOCKET_TIMEOUT,
        **extra,
    )


#: Beam's S3 flags (``S3Options``) -> boto3 client arguments
_BEAM_S3_ARGS = {
    "s3_endpoint_url": "endpoint_url",
    "s3_access_key_id": "aws_access_key_id",
    "s3_secret_access_key": "aws_secret_access_key",
    "s3_session_token": "aws_session_token",
    "s3_region_name": "region_name",
    "s3_verify": "verify",
}
_client_args: Dict[str, Any] = {}
_job_args_of: Tuple[Any, Dict[str, Any]] = (None, {})  # (the options read, what they gave)


def _job_s3_args() -> Dict[str, Any]:
    """The S3 settings a command was given as Beam flags (``--s3_endpoint_url``,
    ``--s3_access_key_id`` ...), as boto3 client arguments; empty without any.

    Why: a command's Beam reads take these flags (``FileSystems.set_options``), and its
    own ranged reads (``tfrecord-io lookup``'s key-index probe and record, a job's look-ups)
    must reach the same store with the same credentials, not boto3's usual sources only
    (which the machine need not have). Read from the options Beam's filesystems hold in
    this process (:func:`files.filesystem_options`); Beam is not imported here."""
    from .files import filesystem_options

    global _job_args_of
    options = filesystem_options()
    if options is None:
        return {}
    if options is _job_args_of[0]:  # reading them costs ~4 ms; Beam sets a new object when they change
        return _job_args_of[1]
    try:
        given = options.get_all_options(drop_default=True)
    except Exception:  # noqa: BLE001 - options of another shape: boto3's usual sources
        given = {}
    args = {arg: given[flag] for flag, arg in _BEAM_S3_ARGS.items() if given.get(flag) not in (None, "")}
    if given.get("s3_disable_ssl"):
        args["use_ssl"] = False
    _job_args_of = (options, args)
    return args


def client() -> Any:
    """This process's S3 client: one for all threads (boto3 clients are thread-safe).

    After a fork (a DataLoader worker) a new client is made, so that no pooled
    connection is shared with the parent, but from the parent's boto3 session: the
    session holds the loaded service model and the resolved credentials, so the
    child's client costs ~10 ms instead of the ~0.2-0.5 s of a first one. The
    command's ``--s3_*`` flags, when given, win over boto3's usual sources
    (:func:`_job_s3_args`); a client made before they were set is made again."""
    global _pid, _client, _session, _client_args, _presigned
    with _client_lock:
        if _pid != os.getpid():
            _pid = os.getpid()
            _client = None
        factory = settings().client_factory
        args = _job_s3_args() if factory is None else {}
        if _client is not None and args != _client_args:
            _client, _presigned = None, None
            _signed.clear()  # URLs signed with other settings
        if _client is None:
            if factory is not None:
                _client = factory()
            else:
                if _session is None:
                    import boto3

                    _session = boto3.session.Session()
                _client = _session.client("s3", config=_config(), **args)
            _client_args = args
        return _client


def reset_client() -> None:
    """Forget the client and its session (e.g. after the endpoint or credentials
    changed)."""
    global _client, _session, _presigned
    with _client_lock:
        _client = None
        _session = None
        _presigned = None
        _signed.clear()


def _error_code(err: Exception) -> str:
    response = getattr(err, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def stat(url: str, listed_size: Optional[int] = None) -> RemoteObject:
    """HEAD ``url``: its size and ETag; ``listed_size`` (from a listing) must match."""
    bucket, key = split_url(url)
    try:
        head = client().head_object(Bucket=bucket, Key=key)
    except Exception as err:  # botocore's ClientError: name the object
        storage_errors.raise_access_error(err, url)  # credentials, permissions: StorageAccessError
        code = _error_code(err)
        if code in ("404", "NoSuchKey", "NotFound"):
            _check_bucket(bucket, url)
            raise FileNotFoundError(f"no such object: {url}") from None
        raise TFRecordError(f"cannot stat the object: {err}", url) from err
    obj = _check_listed(RemoteObject(url, int(head["ContentLength"]), str(head.get("ETag", ""))), listed_size)
    if _transport == "presigned" and settings().client_factory is None and not _proxied():
        _presign(obj)  # here, once: DataLoader workers forked later inherit the URL
    return obj


def _check_bucket(bucket: str, url: str) -> None:
    """A HEAD of an object in a missing bucket is a plain 404: raise
    :class:`~tfrecord_io.errors.StorageAccessError` if the bucket is what is missing."""
    try:
        client().head_bucket(Bucket=bucket)
    except Exception as err:  # noqa: BLE001 - only a missing bucket is raised here
        if storage_errors.status_of(err) == 404:
            raise storage_errors.no_such_bucket(url, "HEAD of the bucket: HTTP 404") from None


def _fill(body: Any, view: memoryview) -> int:
    """Read ``body`` into ``view`` until it is full or the body gives no more (its end,
    or a premature one): what every body here does, whichever library received it."""
    got = 0
    while got < len(view):
        n = body.readinto(view[got:])
        if not n:
            break
        got += n
    return got


class _BotoBody:
    """A ``get_object`` body (botocore's ``StreamingBody``) read into the caller's
    buffer. ``StreamingBody.readinto`` (public) hands the buffer to urllib3's
    ``HTTPResponse.readinto``, which receives a piece and copies it in: one copy of
    each byte, as ``read`` would also cost, but no new object per block for the
    consumer to hold."""

    def __init__(self, body: Any, version: str = "") -> None:
        self.body = body
        #: the ETag of the version that answered (what ``range_reads.PinOnFirstRead`` pins)
        self.version = version

    def readinto(self, view: memoryview) -> int:
        """Fill ``view``: fewer bytes only where the body ended (or broke off: then
        botocore raises, see ``_BODY_ERRORS``)."""
        return _fill(self.body, view)

    def close(self) -> None:
        self.body.close()


@functools.cache
def _body_errors() -> Tuple[Type[Exception], ...]:
    """What a body that breaks off (or stalls) after its header raises: botocore wraps
    urllib3's ``ProtocolError``/``ReadTimeoutError`` (``ResponseStreamingError``,
    ``ReadTimeoutError``) and raises ``IncompleteReadError`` when fewer bytes than
    ``Content-Length`` came; plain socket errors are ``OSError``. Every store's reads
    catch these (``range_reads``), so botocore's are added only where it is installed: an
    install with ``gs://`` or ``az://`` only has none, and evaluating this must not fail
    there (it would replace the read's own error with an ``ImportError``)."""
    import http.client

    errors: Tuple[Type[Exception], ...] = (
        OSError,
        http.client.HTTPException,  # IncompleteRead of the standard library (``_UrllibBody``)
    )
    try:
        import urllib3
    except ImportError:
        return errors
    errors += (urllib3.exceptions.HTTPError,)  # ProtocolError (IncompleteRead), ReadTimeoutError
    try:
        from botocore import exceptions as bex
    except ImportError:
        return errors
    return errors + (bex.ResponseStreamingError, bex.IncompleteReadError, bex.ReadTimeoutError, bex.HTTPClientError)


#: how S3 range GETs are sent: "presigned" (botocore presigns, urllib3 sends: see
#: ``_Presigned``), or "botocore" (``get_object``: botocore's whole request pipeline,
#: used anyway with ``client_factory`` or a proxy; ~2 ms of CPU per GET, see
#: benchmarks/README.md). ``TFRECORD_IO_S3_TRANSPORT`` chooses (docs/pytorch.md).
TRANSPORTS = ("presigned", "botocore")


def _transport_from_environment() -> str:
    value = os.environ.get("TFRECORD_IO_S3_TRANSPORT", "").strip() or "presigned"
    if value not in TRANSPORTS:
        raise ValueError(f"TFRECORD_IO_S3_TRANSPORT={value!r}: expected one of {', '.join(TRANSPORTS)}")
    return value


_transport = _transport_from_environment()

#: seconds a presigned URL is reused before it is made again (it is valid for
#: ``PRESIGN_EXPIRES``; remade well before, so that credentials that rotate, e.g. an
#: instance role's, are picked up by botocore's chain within minutes)
PRESIGN_REUSE = 300.0
PRESIGN_EXPIRES = 3600


class _Presigned:
    """Range GETs as botocore-presigned URLs sent by urllib3 (both maintained: botocore
    does the SigV4 signing, credentials chain, region and endpoint and bucket-name
    addressing; urllib3 the connections, keep-alive pool, TLS and retries).

    Why not ``get_object`` for every GET: botocore's request pipeline (event hooks,
    parameter handling, signing, response parsing with its timestamp parser) costs
    ~2 ms of CPU per GET here against ~0.5 ms for a urllib3 GET; a global shuffle is
    one GET per record or so, where that decides the rate (benchmarks/README.md). A
    presigned URL (query-string SigV4, only ``host`` signed) is made once per object
    version, by ``stat`` (forked workers inherit it, ``_signed``), and reused for
    ``PRESIGN_REUSE`` seconds; ``Range`` and ``If-Match`` are unsigned headers, which S3
    honours as on any GET.

    One per process: urllib3's pools hold sockets, never shared with a forked child."""

    def __init__(self) -> None:
        import urllib3

        ca = _ca_bundle()
        self.stdlib = _StdlibGets(ca)
        self.http = urllib3.PoolManager(
            num_pools=32,
            maxsize=64,
            block=False,
            ca_certs=ca,
            timeout=urllib3.Timeout(connect=SOCKET_TIMEOUT, read=SOCKET_TIMEOUT),
        )
        self.retry = urllib3.Retry(
            total=TRIES - 1,
            status_forcelist=(429, 500, 502, 503, 504),  # throttling (503 SlowDown) and outages
            allowed_methods=None,
            backoff_factor=0.25,
            raise_on_status=False,  # the last answer is returned and mapped below
            raise_on_redirect=False,
            respect_retry_after_header=True,
        )
        self._targets: Dict[str, Tuple[Any, str, Tuple[str, str, int]]] = {}  # URL -> (pool, path, address)
        self._lock = threading.Lock()

    def target(self, obj: RemoteObject, fresh: bool = False) -> Tuple[Any, str, Tuple[str, str, int]]:
        """(urllib3 pool, path with the signature, (scheme, host, port)) of a GET of ``obj``."""
        from urllib.parse import urlsplit

        url = _presign(obj, fresh)
        hit = self._targets.get(url)
        if hit is None:
            parts = urlsplit(url)
            scheme = parts.scheme or "https"
            address = (scheme, parts.hostname or "", parts.port or (443 if scheme == "https" else 80))
            path = parts.path + ("?" + parts.query if parts.query else "")
            hit = (self.http.connection_from_url(url), path, address)
            with self._lock:
                if len(self._targets) > 100_000:
                    self._targets.clear()
                self._targets[url] = hit
        return hit

    def get_plain(self, obj: RemoteObject, headers: Dict[str, str]) -> Tuple[Optional[_StdlibBody], Any]:
        """(the body of a GET of ``obj`` sent by ``http.client`` when the answer is a
        plain 200/206, else None; and what the attempt was when it counts as one, for
        ``get``'s retries). Nothing is raised: the caller asks urllib3 then."""
        _, path, address = self.target(obj)
        return self.stdlib.get(address, path, headers)

    def get(self, obj: RemoteObject, headers: Dict[str, str], spent: Any = None) -> Any:
        """urllib3's response (header read, body not) to a GET of ``obj``; a 403 to a
        reused URL is asked once more with a new one (the credentials it was signed
        with may have expired meanwhile). ``spent``: the failed attempt ``_StdlibGets``
        made first (an answer, or an error on a new connection), counted as the first
        of the ``TRIES``, so that urllib3 backs off before its own retry."""
        from urllib3.util.retry import RequestHistory

        retry = self.retry
        if spent is not None:
            status, error = spent
            retry = retry.new(total=TRIES - 2, history=(RequestHistory("GET", None, error, status, None),))
        for fresh in (False, True):
            pool, path, _ = self.target(obj, fresh)
            resp = pool.urlopen(
                "GET",
                path,
                headers=headers,
                retries=retry,
                redirect=False,
                assert_same_host=False,
                preload_content=False,
                decode_content=False,
            )
            if resp.status != 403 or fresh:
                return resp
            resp.drain_conn()
        raise AssertionError("unreachable")


def _ca_bundle() -> Optional[str]:
    """The CA certificates botocore would use: ``AWS_CA_BUNDLE``, else certifi's bundle
    when it is installed, else None (the system's)."""
    ca = os.environ.get("AWS_CA_BUNDLE") or None
    if ca is None:
        try:
            import certifi

            ca = certifi.where()
        except ImportError:
            pass
    return ca


#: whether presigned GETs go through ``_StdlibGets`` first (False: urllib3 for every
#: GET, as before; kept for ``benchmarks/bench_torch.py --s3-compare urllib3``)
_stdlib_gets = True


class _StdlibGets:
    """Presigned range GETs sent by the standard library's ``http.client`` on kept-alive
    connections, one per request in flight, idle ones kept per (scheme, host, port).

    Only the plain case is handled here: the request is sent, and a 200/206 answer
    without a content encoding is returned (its body to be read into the caller's
    buffer). Anything else -- a connection the server closed meanwhile, a timeout, a
    5xx, 429, 403, 404, 412 or redirect -- closes the connection and returns None, and
    the GET is asked again through urllib3 (``_Presigned.get``), whose retry policy,
    backoff and answer decide; so retries and error mapping stay in one place and in a
    maintained library. HTTP itself (framing, headers, chunked bodies) is
    ``http.client``'s, TLS the ``ssl`` module's with the hostname checked, the
    signature botocore's: the URL it encoded is sent as it is.

    One per process (``_presigner``): sockets are never shared with a forked child."""

    #: idle connections kept per address (more are closed when given back)
    MAX_IDLE = 64

    def __init__(self, ca: Optional[str]) -> None:
        self._ca = ca
        self._tls: Optional[ssl.SSLContext] = None
        self._idle: Dict[Tuple[str, str, int], List[http.client.HTTPConnection]] = {}
        self._lock = threading.Lock()

    def _connect(self, address: Tuple[str, str, int]) -> http.client.HTTPConnection:
        scheme, host, port = address
        if scheme != "https":
            return http.client.HTTPConnection(host, port, timeout=SOCKET_TIMEOUT)
        if self._tls is None:
            self._tls = ssl.create_default_context(cafile=self._ca)  # verifies the certificate and host name
        return http.client.HTTPSConnection(host, port, timeout=SOCKET_TIMEOUT, context=self._tls)

    def take(self, address: Tuple[str, str, int]) -> Tuple[http.client.HTTPConnection, bool]:
        """(a connection to ``address``, whether it was idle: kept alive since an earlier GET)."""
        with self._lock:
            idle = self._idle.get(address)
            if idle:
                return idle.pop(), True
        return self._connect(address), False

    def give_back(self, address: Tuple[str, str, int], conn: http.client.HTTPConnection) -> None:
        with self._lock:
            idle = self._idle.setdefault(address, [])
            if len(idle) < self.MAX_IDLE:
                idle.append(conn)
                return
        conn.close()

    def get(
        self, address: Tuple[str, str, int], path: str, headers: Dict[str, str]
    ) -> Tuple[Optional[_StdlibBody], Optional[Tuple[Optional[int], Optional[Exception]]]]:
        """(the body of a plain 200/206 answer, or None; and, when there is none and
        the attempt counts as one of the ``TRIES``, (status, error) of it). A kept-alive
        connection that the server closed meanwhile does not count: urllib3 would
        have opened a new one too."""
        conn, was_idle = self.take(address)
        try:
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            return None, (None if was_idle else (None, err))
        # one pass over the header (each ``getheader`` scans all of it, lower-casing every name)
        fields = {name.lower(): value for name, value in resp.getheaders()}
        if resp.status not in (200, 206) or fields.get("content-encoding"):
            conn.close()  # the body is not read: urllib3 asks again and reads the answer it gets
            return None, (resp.status, None)
        return _StdlibBody(self, address, conn, resp, fields), None


class _StdlibBody:
    """A ``_StdlibGets`` answer: its headers, and its body received straight into the
    caller's buffer (``http.client.HTTPResponse.readinto``). The connection goes back
    to the idle ones once the body was read to its end, and is closed otherwise."""

    def __init__(
        self,
        gets: _StdlibGets,
        address: Tuple[str, str, int],
        conn: http.client.HTTPConnection,
        resp: http.client.HTTPResponse,
        fields: Dict[str, str],
    ) -> None:
        self._gets, self._address, self.resp, self._fields = gets, address, resp, fields
        self._conn: Optional[http.client.HTTPConnection] = conn
        #: the ETag of the version that answered (what ``range_reads.PinOnFirstRead`` pins)
        self.version = str(fields.get("etag") or "")

    def header(self, name: str) -> Optional[str]:
        """The answer's header field ``name`` (lower case), None without it."""
        return self._fields.get(name)

    def readinto(self, view: memoryview) -> int:
        """Fill ``view``: fewer bytes only where the body ended or broke off
        (``http.client`` returns 0 at a premature end)."""
        return _fill(self.resp, view)

    def close(self) -> None:
        if self._conn is None:
            return
        conn, self._conn = self._conn, None
        if self.resp.isclosed() and not self.resp.will_close:  # read to its end, the connection kept alive
            self._gets.give_back(self._address, conn)
        else:
            conn.close()


_presigned: Optional[_Presigned] = None
_presigned_pid = 0

#: (object URL, ETag) -> (when made, presigned URL): plain strings, so DataLoader workers
#: forked after ``stat`` (which presigns) inherit them and need no boto3 client of their
#: own (making one costs ~10-30 ms per worker and epoch)
_signed: Dict[Tuple[str, str], Tuple[float, str]] = {}


def _presign(obj: RemoteObject, fresh: bool = False) -> str:
    """The presigned GET URL of ``obj`` made in the last ``PRESIGN_REUSE`` seconds (in
    this process or its parent), else a new one."""
    now = time.monotonic()
    hit = _signed.get((obj.url, obj.etag))
    if hit is not None and not fresh and now - hit[0] < PRESIGN_REUSE:
        return hit[1]
    bucket, key = obj.bucket_key
    url = str(
        client().generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key}, ExpiresIn=PRESIGN_EXPIRES)
    )
    if len(_signed) > 100_000:
        _signed.clear()
    _signed[(obj.url, obj.etag)] = (now, url)
    return url


def _presigner() -> _Presigned:
    global _presigned, _presigned_pid
    with _client_lock:
        if _presigned is None or _presigned_pid != os.getpid():
            _presigned, _presigned_pid = _Presigned(), os.getpid()
        return _presigned


_proxy_env: Tuple[int, bool] = (0, False)


def _proxied() -> bool:
    """Whether the environment names a proxy (``HTTPS_PROXY`` etc.): then botocore's own
    HTTP session, which honours it, sends the GETs. Looked up once per process (a scan
    of ``os.environ`` costs ~0.1 ms, per GET it would be a tenth of the GET)."""
    global _proxy_env
    if _proxy_env[0] != os.getpid():
        import urllib.request

        _proxy_env = (os.getpid(), bool(urllib.request.getproxies_environment()))
    return _proxy_env[1]


class _UrllibBody:
    """urllib3's response body received straight into the caller's buffer.

    urllib3's public ``HTTPResponse.readinto`` reads a new ``bytes`` of the size asked
    for and copies it in: for 1 MiB blocks a fresh 1 MiB object per block, page-faulted
    in each time (the cost ``_BufferPool`` exists to avoid; ~25% more CPU per record in
    ``bench_torch.py --s3``). The standard library's ``http.client.HTTPResponse`` under
    it has ``readinto`` receiving into the buffer itself; urllib3 keeps it as ``_fp``
    (not public), so it is used only when it is exactly that and the body is not
    content-encoded (urllib3 would decode it); otherwise urllib3's ``readinto``. Either
    way urllib3 gives the connection back to its pool once the body is read to its end
    (``release_conn``) and closes it otherwise (``close``)."""

    def __init__(self, resp: Any) -> None:
        import http.client

        self.resp = resp
        #: the ETag of the version that answered (what ``range_reads.PinOnFirstRead`` pins)
        self.version = str(resp.headers.get("etag") or "")
        raw = getattr(resp, "_fp", None)
        plain = not resp.headers.get("content-encoding")
        self.src: Any = raw if plain and isinstance(raw, http.client.HTTPResponse) else resp

    def readinto(self, view: memoryview) -> int:
        """Fill ``view``: fewer bytes only where the body ended or broke off (the
        standard library returns 0 at a premature end; urllib3 raises)."""
        return _fill(self.src, view)

    def close(self) -> None:
        if self.src is not self.resp and self.src.isclosed():  # read to its end (http.client closed it)
            self.resp.release_conn()
            return
        self.resp.close()  # not read to its end: the connection cannot be reused
        self.resp.release_conn()


def _open_plain(obj: RemoteObject, start: int, end: int, headers: Dict[str, str]) -> Any:
    """The body of a range GET sent by ``http.client`` (``_StdlibGets``), checked as
    ``open_range`` checks urllib3's; when the answer was not a plain 200/206 (urllib3
    asks again then), None, or the attempt it counts as: a (status, error) tuple."""
    try:
        body, spent = _presigner().get_plain(obj, headers)
    except Exception as err:  # botocore's, when presigning (no credentials: not an outage)
        storage_errors.raise_access_error(err, obj.url)
        raise TFRecordError(f"range read of bytes {start}-{end - 1} failed: {err}", obj.url, start) from err
    if body is None:
        return spent
    try:
        _check_version(obj, start, body.header("content-range") or "", body.header("etag"))
        length = body.header("content-length")
        if length is not None and int(length) != end - start:
            raise TruncatedRecordError(
                f"range read of bytes {start}-{end - 1} returned {length} bytes (the object has {obj.size})",
                obj.url,
                start,
            )
    except Exception:
        body.close()
        raise
    with _stats_lock:
        STATS.requests += 1
    return body


def open_range(obj: RemoteObject, start: int, end: int) -> Any:
    """A GET of bytes ``[start, end)`` of this version of the object (``If-Match`` on the
    listed ETag), its status, size and version checked; the body is still to be read.

    botocore retries a request that fails before its header (connection errors, 5xx,
    throttling) up to ``TRIES`` times with backoff; what still fails is an error naming
    the object. Refusals (403, expired credentials) are ``StorageAccessError``s, never
    retried as an outage; 412 (``If-Match``) and 404 mean the listed version is gone."""
    bucket, key = obj.bucket_key
    rng = f"bytes={start}-{end - 1}"
    transport = _transport
    if transport == "presigned" and (settings().client_factory is not None or _proxied()):
        transport = "botocore"
    if transport == "presigned":
        headers = {"Range": rng}
        if obj.etag:
            headers["If-Match"] = obj.etag
        plain = _open_plain(obj, start, end, headers) if _stdlib_gets else None
        if isinstance(plain, _StdlibBody):
            return plain
        try:
            resp = _presigner().get(obj, headers, spent=plain)
        except Exception as err:  # urllib3's errors after its retries, botocore's when presigning
            storage_errors.raise_access_error(err, obj.url)  # no credentials: not an outage
            raise TFRecordError(f"range read of bytes {start}-{end - 1} failed: {err}", obj.url, start) from err
        if resp.status not in (200, 206):
            try:
                text = resp.read(300).decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 - the status says enough
                text = ""
            resp.close()
            resp.release_conn()
            if resp.status == 412:
                raise _changed(obj, start)
            if resp.status == 404:
                raise RemoteObjectChangedError("the object was deleted after it was listed", obj.url, start)
            refused = storage_errors.access_error_from_status(resp.status, text, obj.url, start)
            if refused is not None:  # credentials expired or revoked mid-read: not retried
                raise refused
            raise TFRecordError(f"range read of bytes {start}-{end - 1}: HTTP {resp.status}: {text}", obj.url, start)
        body: Any = _UrllibBody(resp)
        try:
            _check_version(obj, start, resp.headers.get("content-range", ""), resp.headers.get("etag"))
        except RemoteObjectChangedError:
            body.close()
            raise
        length = resp.headers.get("content-length")
    else:  # botocore's get_object
        args: Dict[str, Any] = {"Bucket": bucket, "Key": key, "Range": rng}
        if obj.etag:
            args["IfMatch"] = obj.etag
        try:
            response = client().get_object(**args)
        except Exception as err:  # botocore's ClientError, or its connection errors after the retries
            storage_errors.raise_access_error(err, obj.url)
            code = _error_code(err)
            if code in ("412", "PreconditionFailed"):
                raise _changed(obj, start) from None
            if code in ("404", "NoSuchKey", "NotFound"):
                raise RemoteObjectChangedError("the object was deleted after it was listed", obj.url, start) from None
            raise TFRecordError(f"range read of bytes {start}-{end - 1} failed: {err}", obj.url, start) from err
        body = _BotoBody(response["Body"], str(response.get("ETag") or ""))
        try:
            _check_version(obj, start, str(response.get("ContentRange", "")), response.get("ETag"))
        except RemoteObjectChangedError:
            body.close()
            raise
        length = response.get("ContentLength")
    if length is not None and int(length) != end - start:
        body.close()
        raise TruncatedRecordError(
            f"range read of bytes {start}-{end - 1} returned {length} bytes (the object has {obj.size})",
            obj.url,
            start,
        )
    with _stats_lock:
        STATS.requests += 1
    return body


__all__ = ["SOCKET_TIMEOUT", "client", "open_range", "reset_client", "stat"]
