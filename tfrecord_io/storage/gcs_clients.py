"""Which credentials Beam's GCS filesystem uses in this process: anonymous when asked
(or against an emulator), else Google's default credentials, and an error at once when
there are none.

Why: Beam's GCS filesystem (``apache_beam.io.gcp.gcsio.create_storage_client``, the same
in 2.62 and 2.77, the ends of the supported range) gets its credentials from
``apache_beam.internal.gcp.auth``: ``google.auth.default()`` wrapped in Beam's
``retry.with_exponential_backoff(num_retries=4, initial_delay_secs=2)``. Where no
credentials can be found, that is five failed probes (environment, gcloud's file, the
GCE metadata server) and 2+4+8+16 s of backoff, 27-40 s measured here, before Beam
logs "Connecting anonymously" and goes on with an anonymous client. Every process pays
it once before its first ``gs://`` request (the launcher, each worker, each torch
DataLoader worker), even with ``STORAGE_EMULATOR_HOST`` set; and a user whose
credentials are missing gets, 40 s later, anonymous requests that fail with 401/403
(or succeed on a public bucket, with nothing saying why a private one fails).

What this module does, in :func:`install` (called by ``files.beam_filesystems``, so in
the launcher and in every worker before its first remote path): it wraps Beam's
``create_storage_client`` so that

- an **anonymous** client is made, with no probe, when ``STORAGE_EMULATOR_HOST`` is set
  (the variable Google's clients honour: an emulator takes no credentials), when the
  pipeline options say ``--no_auth`` (Beam's own ``GoogleCloudOptions`` flag, "Skips
  authorizing credentials with Google Cloud"; it travels to the workers with the other
  options), or when ``TFRECORD_IO_GCS_ANONYMOUS=1`` (for processes without pipeline
  options: the torch readers and their DataLoader workers, which inherit it);
- otherwise ``google.auth.default()`` is asked once per process, without Beam's retries
  (it finds the same credentials Beam's probe would: a missing file does not appear in
  between); when it finds none, :class:`~tfrecord_io.errors.StorageAccessError` is
  raised at once, naming the store and what to set. When it finds credentials, Beam's
  own path runs unchanged (impersonation, scopes, user agent, audit headers).

Reading a public bucket without credentials therefore needs ``--no_auth`` (or the
environment variable): said in the error and in the README.

The package's own ranged reads of ``gs://`` objects (``gcs_objects``: the torch readers'
and the key-index look-ups', each pinned to a generation) take their client from
:func:`storage_client`, with the same choice of credentials.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, Optional

from ..errors import StorageAccessError

EMULATOR_ENV = "STORAGE_EMULATOR_HOST"
ANONYMOUS_ENV = "TFRECORD_IO_GCS_ANONYMOUS"
_TRUE = ("1", "true", "yes", "on")

HINT = (
    "set GOOGLE_APPLICATION_CREDENTIALS to a service account key file, or run "
    "`gcloud auth application-default login`; for a public bucket or an emulator use "
    f"--no_auth, {ANONYMOUS_ENV}=1 or {EMULATOR_ENV}"
)

_lock = threading.Lock()
_installed = False
# (process id, credential variables) -> the reason google.auth.default found nothing,
# or None when it found credentials
_probed: Dict[Any, Optional[str]] = {}
# (process id, anonymous, emulator endpoint) -> google-cloud-storage client for gcs_objects
_clients: Dict[Any, Any] = {}


#: (the options last asked about, whether they say ``--no_auth``): ``view_as`` costs
#: ~0.7 ms, and the range reads ask once per GET; Beam sets a new object when they change
_no_auth_of: Any = (None, False)


def anonymous(options: Any) -> bool:
    """True when GCS is to be used without credentials: an emulator is set, the options
    say ``--no_auth``, or ``TFRECORD_IO_GCS_ANONYMOUS`` is set (module doc)."""
    global _no_auth_of
    if os.environ.get(EMULATOR_ENV):
        return True
    if os.environ.get(ANONYMOUS_ENV, "").strip().lower() in _TRUE:
        return True
    if options is None or isinstance(options, dict):
        return _options_say_no_auth(options)
    seen, answer = _no_auth_of
    if options is seen:
        return bool(answer)
    answer = _options_say_no_auth(options)
    _no_auth_of = (options, answer)
    return answer


def _options_say_no_auth(options: Any) -> bool:
    """Whether pipeline options (or a dict of them) say ``--no_auth``."""
    if options is None:
        return False
    try:
        from apache_beam.options.pipeline_options import GoogleCloudOptions, PipelineOptions

        if isinstance(options, PipelineOptions):
            return bool(options.view_as(GoogleCloudOptions).no_auth)
        if isinstance(options, dict):
            return bool(options.get("no_auth"))
    except Exception:  # noqa: BLE001 - options we do not understand: not asked for
        return False
    return False


def require_default_credentials() -> None:
    """Raise :class:`StorageAccessError` unless Google's default credentials are found in
    this process (asked once per process and set of credential variables, no retries)."""
    key = (
        os.getpid(),
        os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"),
        os.environ.get("CLOUDSDK_CONFIG"),
        os.environ.get("GOOGLE_CLOUD_PROJECT"),
    )
    with _lock:
        if key not in _probed:
            _probed[key] = _probe()
        missing = _probed[key]
    if missing is not None:
        raise StorageAccessError(f"no Google Cloud credentials found ({missing})", "gs://", hint=HINT)


def _probe() -> Optional[str]:
    try:
        import google.auth
        from google.auth.exceptions import DefaultCredentialsError
    except ImportError:
        return "google-auth is not installed: pip install 'tfrecord-io[gcp]'"
    try:
        google.auth.default()
    except DefaultCredentialsError as err:
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


def _choosing(original: Callable[..., Any]) -> Callable[..., Any]:
    def create_storage_client(pipeline_options: Any, use_credentials: bool = True) -> Any:
        if use_credentials and anonymous(pipeline_options):
            use_credentials = False
        elif use_credentials:
            require_default_credentials()
        return original(pipeline_options, use_credentials)

    create_storage_client.__wrapped__ = original  # type: ignore[attr-defined]
    create_storage_client.__doc__ = original.__doc__
    return create_storage_client


def install() -> None:
    """Wrap Beam's GCS client factory in this process (module doc); idempotent, and a
    no-op when Beam's GCS support (``apache-beam[gcp]``) is not installed."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        try:
            from apache_beam.io.gcp import gcsio
        except ImportError:  # no google-cloud-storage: no GCS filesystem to set up
            _installed = True
            return
        factory = getattr(gcsio, "create_storage_client", None)
        if factory is not None and not hasattr(factory, "__wrapped__"):
            gcsio.create_storage_client = _choosing(factory)
        _installed = True


def storage_client(options: Any = None) -> Any:
    """A google-cloud-storage client of this process for ``gcs_objects``' reads: anonymous when
    :func:`anonymous` says so (an emulator in ``STORAGE_EMULATOR_HOST`` is then used, as
    the library does), else with Google's default credentials (an error at once when there
    are none). One per process: a client holds a pool of connections."""
    anon = anonymous(options)
    if not anon:
        require_default_credentials()
    key = (os.getpid(), anon, os.environ.get(EMULATOR_ENV))
    with _lock:
        client = _clients.get(key)
        if client is None:
            try:
                import google.cloud.storage as storage
            except ImportError:
                raise StorageAccessError(
                    "gs:// needs google-cloud-storage: pip install 'tfrecord-io[gcp]'", "gs://"
                ) from None
            client = storage.Client.create_anonymous_client() if anon else storage.Client()
            _widen_pool(client)
            _clients[key] = client
    return client


#: connections kept per host: the range reader (``range_reads``) has up to
#: ``random_parallel`` (16) GETs in flight for a global-shuffle window, plus read-ahead
POOL_SIZE = 64


def _widen_pool(client: Any) -> None:
    """Keep ``POOL_SIZE`` connections per host instead of requests' 10: with more GETs in
    flight than that, urllib3 discards the extra connections after each response ("pool
    is full") and the next GETs open new ones. ``Client._http`` (google-cloud-core: the
    ``requests`` session, made on first use) is not public; left as it is if it is not a
    ``requests`` session."""
    try:
        import requests

        session = client._http
        if isinstance(session, requests.Session):
            adapter = requests.adapters.HTTPAdapter(pool_connections=8, pool_maxsize=POOL_SIZE)
            session.mount("https://", adapter)
            session.mount("http://", adapter)
    except Exception:  # noqa: BLE001 - only a wider pool is lost
        pass


__all__ = [
    "ANONYMOUS_ENV",
    "EMULATOR_ENV",
    "anonymous",
    "install",
    "require_default_credentials",
    "storage_client",
]
