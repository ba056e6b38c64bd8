"""A bound on how long a job waits for an unreachable or failing store, and word while it does.

Why this exists: Beam's S3 and GCS clients wrap each request in
``apache_beam.utils.retry.with_exponential_backoff`` with its defaults (Beam 2.62 and
later): 7 retries, the first after 5 s, each wait doubling and fuzzed to 50-100 %, so
one request to a stopped S3 server is retried for 318 to 635 s before its error comes
out -- a build whose S3 server stopped failed after 589 s of silence. Neither Beam nor
boto3 has a setting for that loop (``S3Options`` has none; the decorator's arguments
are fixed where Beam's S3IO and GcsIO methods are defined).

How: Beam announces every retry on the ``apache_beam.utils.retry`` logger *before* it
sleeps ("waiting for N seconds before retrying FUNCTION because we caught exception:
ERROR"). :class:`RetryGuard`, a ``logging.Filter`` on that logger, installed once per
process by :func:`install` (``tfrecord_io.storage.files`` does so whenever it opens a remote
path, in the launcher and in every worker), sees each announcement and

- tells the registered listeners (the jobs' progress line says "retrying" with the
  store, what failed and for how long: ``tfrecord_io/pipelines/runtime/progress.py``);
- when the error is a refusal (missing or refused credentials, no such bucket, access
  denied: :mod:`tfrecord_io.storage.storage_errors`), raises
  :class:`~tfrecord_io.errors.StorageAccessError` at once: retrying cannot help;
- once the wait would end past the storage timeout, counted from that request's first
  failure, raises :class:`StorageUnavailableError` from the logging call instead: that
  ends Beam's retry loop with an error naming the store, the request and the last
  failure (the original exception is its cause), and the job fails with it.

So an unreachable store is reported within about the storage timeout: at the latest
one attempt past it (for a refused connection an attempt is the ~7 s of boto3's own
retries inside it; a store that accepts connections and never answers is bounded by
boto3's 60 s read timeout per try instead). The timeout
is, first found: :func:`set_storage_timeout`, the ``--storage_timeout`` pipeline option
(which reaches the workers of every runner with the other options), the
``TFRECORD_IO_STORAGE_TIMEOUT`` environment variable, else
:data:`DEFAULT_STORAGE_TIMEOUT` (60 s). ``0`` turns the bound off (Beam's own retries
only).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import threading
import time
import weakref
from types import FrameType
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Union

from apache_beam.options.pipeline_options import PipelineOptions

from ..errors import StorageAccessError, StorageUnavailableError
from . import storage_errors

DEFAULT_STORAGE_TIMEOUT = 60.0
ENV_VAR = "TFRECORD_IO_STORAGE_TIMEOUT"
BEAM_RETRY_LOGGER = "apache_beam.utils.retry"

# Beam's message: 'Retry with exponential backoff: waiting for %s seconds before retrying
# %s because we caught exception: %s Traceback for above exception ...: %s'
_ARGS_SLEEP, _ARGS_FUNCTION, _ARGS_ERROR = 0, 1, 2
_URL = re.compile(r"""(https?://[^\s"'/]+)(/[^\s"'?]*)?""")

__all__ = [
    "StorageUnavailableError",
    "StorageAccessError",
    "StorageOptions",
    "install",
    "storage_timeout",
    "set_storage_timeout",
    "storage_timeout_at_most",
    "after_failure",
    "is_outage",
]

Listener = Callable[[Dict[str, Any]], None]

# What Beam's retried functions (S3IO, its boto3 client, GcsIO) do, in a user's words.
_DOING = {
    "_s3_object": "looking up an object",
    "_get_object_metadata": "opening an object for reading",
    "get_range": "reading an object",
    "size": "reading an object's size",
    "last_updated": "reading an object's time",
    "checksum": "reading an object's checksum",
    "list_prefix": "listing objects",
    "list_files": "listing objects",
    "copy": "copying an object",
    "copy_paths": "copying objects",
    "copy_tree": "copying objects",
    "rename": "renaming an object",
    "delete": "deleting an object",
    "delete_paths": "deleting objects",
    "delete_files": "deleting objects",
    "_delete_minibatch": "deleting objects",
    "delete_tree": "deleting objects",
    "_start_upload": "starting an upload",
}


class StorageOptions(PipelineOptions):
    """``--storage_timeout``: a pipeline option, so that it reaches every worker."""

    @classmethod
    def _add_argparse_args(cls, parser) -> None:
        parser.add_argument(
            "--storage_timeout",
            type=float,
            default=None,
            help="seconds an unreachable or failing store (s3://, gs://) is retried before the job fails "
            f"naming it (default {DEFAULT_STORAGE_TIMEOUT:g}, or ${ENV_VAR}; 0: as long as Beam retries)",
        )


_timeout_override: Optional[float] = None
_listeners: List[Listener] = []
_lock = threading.Lock()
_installed: Optional[RetryGuard] = None


def set_storage_timeout(seconds: Optional[float]) -> None:
    """Set this process's storage timeout (``None``: back to options / environment / default)."""
    global _timeout_override
    _timeout_override = None if seconds is None else float(seconds)


#: Seconds the clean-up and the look at what a failed job left may wait on storage when
#: the job failed because a store kept failing for its whole storage timeout: they are a
#: few requests to the same store, unlikely to be back, and a second full timeout each
#: only delayed the report (a build to a stopped S3 server with a 20 s timeout: its
#: clean-up and state took 30 s more).
AFTER_OUTAGE_TIMEOUT_S = 5.0


def is_outage(err: Union[BaseException, str]) -> bool:
    """Did a job fail because a store kept failing: a :class:`StorageUnavailableError`
    in ``err``'s chain, or named in its text (portable runners re-raise a worker's
    exception as its traceback text)? A refusal (``StorageAccessError``) is not."""
    if isinstance(err, str):
        return f"{StorageUnavailableError.__name__}: " in err
    seen: List[BaseException] = []
    current: Optional[BaseException] = err
    while current is not None and all(current is not s for s in seen):
        if isinstance(current, StorageUnavailableError) and not isinstance(current, StorageAccessError):
            return True
        if is_outage(str(current)):
            return True
        seen.append(current)
        current = current.__cause__ or current.__context__
    return False


def after_failure(err: Union[BaseException, str]) -> ContextManager[float]:
    """Around a failed job's clean-up and the look at what it left: the storage timeout
    at most :data:`AFTER_OUTAGE_TIMEOUT_S` when ``err`` is an outage, else unchanged."""
    if is_outage(err):
        return storage_timeout_at_most(AFTER_OUTAGE_TIMEOUT_S)
    return contextlib.nullcontext(storage_timeout())


@contextlib.contextmanager
def storage_timeout_at_most(seconds: float) -> Iterator[float]:
    """Within: this process's storage timeout is at most ``seconds`` (an unbounded one,
    ``0``, counts as longer); yields the timeout in force. For the launcher's look at what
    a failed job left when the job failed because a store kept failing: that store has
    just been given the whole timeout, and a second one would only delay the report."""
    global _timeout_override
    before = _timeout_override
    current = storage_timeout()
    if current <= 0 or current > seconds:
        _timeout_override = float(seconds)
    try:
        yield storage_timeout()
    finally:
        _timeout_override = before


def storage_timeout() -> float:
    """The storage timeout in seconds now in force in this process (see the module doc)."""
    if _timeout_override is not None:
        return _timeout_override
    from_options = _timeout_from_pipeline_options()
    if from_options is not None:
        return from_options
    env = os.environ.get(ENV_VAR)
    if env:
        try:
            return float(env)
        except ValueError:
            pass
    return DEFAULT_STORAGE_TIMEOUT


def _timeout_from_pipeline_options() -> Optional[float]:
    """``--storage_timeout`` of the options Beam's FileSystems was given: in a worker the
    job's options (sdk_worker_main sets them), in the launcher what the job set."""
    beam_fs = sys.modules.get("apache_beam.io.filesystems")
    options = getattr(getattr(beam_fs, "FileSystems", None), "_pipeline_options", None)
    if not isinstance(options, PipelineOptions):
        return None
    value = options.view_as(StorageOptions).storage_timeout
    return None if value is None else float(value)


def add_listener(listener: Listener) -> None:
    """Call ``listener(event)`` on each retry Beam announces in this process. ``event``:
    ``store`` (endpoint and object), ``request`` (Beam's function), ``what`` (in words),
    ``error`` (the last one), ``failing_for`` (s), ``timeout`` (s)."""
    with _lock:
        if listener not in _listeners:
            _listeners.append(listener)


def remove_listener(listener: Listener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def describe_store(error_text: str) -> str:
    """The store an error names: the endpoint (scheme, host, port) and the object, e.g.
    ``http://127.0.0.1:9000/bucket/key``; '' if the error names none."""
    found = _URL.search(error_text)
    return found.group(0).rstrip(".") if found else ""


def _retry_loop_key(default: Any) -> Any:
    """What identifies the retry loop that is logging: the iterator of waits that
    Beam's retry wrapper keeps in a local variable for one call (weakly referenced);
    ``default`` if not found in the calling frames (another Beam version)."""
    frame: Optional[FrameType] = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            break
        intervals = frame.f_locals.get("retry_intervals")
        if intervals is not None:
            return intervals
        frame = frame.f_back
    return default


def _retried_call() -> Any:
    """The ``args`` of the call Beam's retry wrapper is retrying (the wrapper's local),
    found in the calling frames; None if not found."""
    frame: Optional[FrameType] = sys._getframe(2)
    for _ in range(12):
        if frame is None:
            break
        if "retry_intervals" in frame.f_locals:
            return frame.f_locals.get("args")
        frame = frame.f_back
    return None


def _refusal(function: str, error_text: str) -> Optional[StorageAccessError]:
    """The :class:`StorageAccessError` the exception Beam is about to retry amounts to
    (missing credentials come out of Beam's S3 client as an error without an HTTP
    status, which Beam's filter retries like an outage), naming the object of the
    retried call; None for anything else."""
    error = sys.exc_info()[1]
    if error is None:
        return None
    path = storage_errors.path_in(_retried_call()) or describe_store(error_text) or f"the store ({function})"
    return storage_errors.access_error(error, path)


class RetryGuard(logging.Filter):
    """The filter on Beam's retry logger (see the module doc)."""

    def __init__(self, quiet: bool = False):
        super().__init__()
        self.quiet = quiet  # the logger was below WARNING before: keep its lines out of sight
        # per retry loop: [first announcement, last announcement, its wait, longest attempt] (monotonic s)
        self._loops: weakref.WeakKeyDictionary[Any, List[float]] = weakref.WeakKeyDictionary()
        self._by_thread: Dict[Any, List[float]] = {}

    def _loop(self, function: str, now: float) -> List[float]:
        key = _retry_loop_key(None)
        if key is not None:
            try:
                return self._loops.setdefault(key, [now, now, 0.0, 0.0])
            except TypeError:  # not weak-referenceable
                pass
        # Fallback: one loop per thread and function; a pause of over 10 minutes starts anew.
        thread_key = (threading.get_ident(), function)
        loop = self._by_thread.get(thread_key)
        if loop is None or now - loop[1] > 600:
            self._by_thread[thread_key] = loop = [now, now, 0.0, 0.0]
        return loop

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        if len(args) <= _ARGS_ERROR:
            return self._shown(record)
        try:
            sleep = float(str(args[_ARGS_SLEEP]))
        except (TypeError, ValueError):
            return self._shown(record)
        function = str(args[_ARGS_FUNCTION])
        error = str(args[_ARGS_ERROR]).strip()
        refused = _refusal(function, error)
        if refused is not None:  # retrying cannot help: end Beam's loop now, saying what to set
            raise refused
        timeout = storage_timeout()
        now = time.monotonic()
        loop = self._loop(function, now)
        if now > loop[1]:  # how long the attempt that just failed took (boto3 retries inside one)
            loop[3] = max(loop[3], now - loop[1] - loop[2])
        loop[1], loop[2] = now, sleep
        # The first attempt failed before anything was announced: count it as long as the
        # longest attempt seen since.
        failing_for = now - loop[0] + loop[3]
        store = describe_store(error)
        event = {
            "store": store or "the store",
            "request": function,
            "what": _DOING.get(function, function),
            "error": error.splitlines()[-1] if error else "",
            "failing_for": round(failing_for, 1),
            "timeout": timeout,
        }
        for listener in list(_listeners):
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - progress must never end the job
                pass
        # Give up now if the next attempt would end past the timeout (the wait, then an
        # attempt as long as the longest so far).
        if timeout > 0 and failing_for + sleep + loop[3] > timeout:
            raise StorageUnavailableError(
                f"storage unavailable: {event['store']} kept failing for {failing_for:.0f}s while "
                f"{event['what']} ({function}; last error: {event['error']}); gave up at the storage timeout "
                f"of {timeout:g}s (--storage_timeout or {ENV_VAR}; 0 waits as long as Beam retries)"
            )
        return self._shown(record)

    def _shown(self, record: logging.LogRecord) -> bool:
        """Whether the record goes on to the handlers: not if the logger was quiet before
        the guard came, nor while logging is switched off (``logging.disable``)."""
        return not self.quiet and logging.root.manager.disable < record.levelno


def install() -> RetryGuard:
    """Put the guard on Beam's retry logger once in this process; returns it."""
    global _installed
    with _lock:
        if _installed is None:
            logger = logging.getLogger(BEAM_RETRY_LOGGER)
            # Beam logs a retry only if WARNING is enabled for its logger: make sure the
            # guard sees it, and keep the lines hidden where they were hidden before.
            quiet = not logger.isEnabledFor(logging.WARNING)
            if quiet:
                logger.setLevel(logging.WARNING)
            _installed = RetryGuard(quiet=quiet)
            logger.addFilter(_installed)
            # The guard must see every announcement even while logging is switched off
            # (``logging.disable`` is process-wide: a caller muting Beam's log around one
            # call would blind it): this one logger always hands WARNING records to its
            # filters, and the guard itself drops them where logging is off.
            logger.isEnabledFor = _enabled_for_the_guard  # type: ignore[method-assign]
        return _installed


def _enabled_for_the_guard(level: int) -> bool:
    """``isEnabledFor`` of Beam's retry logger: WARNING and above always reach the guard."""
    return level >= logging.WARNING
