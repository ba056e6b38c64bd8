"""What a person sees when a job fails: one short block on the terminal, and every
traceback in a log file.

A Beam job that fails prints, left alone, a hundred lines and more: the worker's
traceback as logged by the worker, again as logged by the job service, and once more
inside the ``RuntimeError`` the runner raises in the launcher. The one line that
matters (``CorruptRecordError: FILE, byte offset N: ...``) is buried in the middle.

``JobLog`` sends all of that to a log file: the launcher's log records, and file
descriptor 2 itself, which the local runners' worker processes inherit (their
tracebacks and log lines are written there). The terminal keeps our own output:
progress, the summary, and on failure the block ``failure_block`` makes::

    tfrecord-io inspect failed: CorruptRecordError: data.tfrecord, byte offset 30: corrupt record header: ...
      where: step 'Read/ReadRanges' (tfrecord_io/beam/beam_source.py:270, process)
      state: nothing was written (inspect only reads)
      log:   ~/.cache/tfrecord-io/logs/inspect-20261201T023000Z-4242.log (full tracebacks)
      exit:  1 (the job failed)

``--verbose`` keeps everything on the terminal as well. A run that succeeds deletes
its log (unless ``--log-file`` named one): noise from the workers never reaches the
terminal, and no files pile up.

``root_cause`` finds the one line: the first exception of the project's error family
(or an ``OSError``) in the exception chain, or in the traceback text the runner
wrapped it in (the portable runners send worker errors back as text).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import IO, Any, Callable, Dict, List, Optional, Sequence, Tuple

from tfrecord_io.pipelines.runtime import processes

EXIT_FAILED = 1  # the job ran and failed (or found problems)
EXIT_USAGE = 2  # bad usage or input, found before anything was written

EXIT_MEANINGS = {
    EXIT_FAILED: "the job failed",
    EXIT_USAGE: "bad usage or input; nothing was written",
}
# exit 2 for a store that refused this job (credentials, permissions, no such bucket):
# what to change is the job's settings, as for a usage error, but the job may have begun
ACCESS_MEANING = "the store refused access: set what the message says and run again"

# "module.Name: message" lines of a formatted traceback
_EXCEPTION_LINE = re.compile(
    r"^(?P<name>[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt|Warning)): (?P<message>.*\S)\s*$", re.M
)
_STEP = re.compile(r" ?\[while running '(?P<step>[^']+)'\]")
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>\S+)', re.M)
_OUR_PACKAGES = ("tfrecord_io",)
# Errors whose message names the file (and offset) at fault: preferred as the root.
_TELLING = re.compile(
    r"(^|\.)(CorruptRecordError|TruncatedRecordError|RecordTooLargeError|IndexFileError|ExampleCodecError|"
    r"TFRecordError|StorageAccessError|StorageUnavailableError|EncodeError|UsageError|ConfigError|InputError|DatasetDirError|ReportError|RunnerSetupError|"
    r"ArgumentError|NoInputError|MissingDependencyError|OSError|IOError|FileNotFoundError|"
    r"PermissionError|IsADirectoryError|NotADirectoryError|FileExistsError|MemoryError)$"
)
_WRAPPERS = {"RuntimeError", "Exception"}
_CLI_FILES = {
    "tfrecord_io/pipelines/cli.py",
    "tfrecord_io/pipelines/commands.py",
    "tfrecord_io/pipelines/__main__.py",
    "tfrecord_io/pipelines/runtime/failures.py",
}  # what runners wrap a worker's error in


def default_log_dir() -> str:
    """``$TFRECORD_IO_LOG_DIR``, else ``~/.cache/tfrecord-io/logs``."""
    return os.environ.get("TFRECORD_IO_LOG_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "tfrecord-io", "logs"
    )


@dataclass
class RootCause:
    """The one line that says what failed, and where in the job, when known."""

    line: str  # "CorruptRecordError: data.tfrecord, byte offset 30: ..."
    step: Optional[str] = None  # the Beam step, e.g. "Read/ReadRanges"
    frame: Optional[str] = None  # innermost frame of our code: "tfrecord_io/beam/beam_source.py:270, process"

    def where(self) -> Optional[str]:
        parts = []
        if self.step:
            parts.append(f"step '{self.step}'")
        if self.frame:
            parts.append(f"({self.frame})" if parts else self.frame)
        return " ".join(parts) or None


def _chain(exc: BaseException) -> List[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, outermost first."""
    seen: List[BaseException] = []
    current: Optional[BaseException] = exc
    while current is not None and all(current is not s for s in seen):
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _short_name(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _our_frame(text: str) -> Optional[str]:
    """Where in this project's code a traceback failed, as ``pkg/file.py:LINE, func``:
    the first of our frames that Beam called (a DoFn: the job's step, e.g.
    ``tfrecord_io/beam/beam_source.py:LINE, process``), else the outermost of ours past the
    CLI itself (the job function, e.g. ``tfrecord_io/pipelines/building/build_job.py:LINE, run_build``)."""
    first: Optional[str] = None
    beam_seen = False
    for m in _FRAME.finditer(text):
        parts = m.group("file").replace("\\", "/").split("/")
        if "apache_beam" in parts:
            beam_seen = True
            continue
        for i, part in enumerate(parts[:-1]):
            if part in _OUR_PACKAGES:
                where = "/".join(parts[i:])
                if where in _CLI_FILES:
                    break
                found = f"{where}:{m.group('line')}, {m.group('func')}"
                if beam_seen:
                    return found
                first = first or found
                break
    return first


_WORKER_EXIT = re.compile(r"Worker subprocess exited with return code (-?\d+)")


def root_cause(exc: BaseException, thread_errors: Sequence[BaseException] = ()) -> RootCause:
    """The line that says what went wrong, dug out of Beam's wrapping.

    In order: an exception of a telling type (our error family, ``OSError``...) in the
    chain itself (in-process runners re-raise the worker's exception); else the first
    telling ``Name: message`` line in the traceback text of the chain (the portable
    runners re-raise worker errors as ``RuntimeError(<traceback text>)``); else the
    innermost exception line that is not a wrapper; else ``exc`` itself.

    ``thread_errors`` (exceptions that ended a launcher thread) are searched when
    ``exc`` says nothing telling: a worker process that died makes the runner fail
    with a bare ``queue.Empty``, and only a thread knows the worker's exit code.
    """
    cause = _root_cause(exc)
    if _TELLING.search(cause.line.split(":", 1)[0]):
        return cause
    for err in thread_errors:
        death = worker_death(err)
        if death:
            return RootCause(death, cause.step, cause.frame)
    for err in thread_errors:
        thread_cause = _root_cause(err)
        if _TELLING.search(thread_cause.line.split(":", 1)[0]):
            return thread_cause
    return cause


def worker_death(err: BaseException) -> Optional[str]:
    """``a worker process died: ...`` if ``err`` is Beam's report of a worker process
    that exited (``Worker subprocess exited with return code 137``), else None."""
    m = _WORKER_EXIT.search(str(err))
    if not m:
        return None
    code = int(m.group(1))
    how = ""
    signum = code - 128 if code > 128 else -code if code < 0 else 0
    if signum:
        try:
            how = f" (killed by {signal.Signals(signum).name})"
        except ValueError:
            pass
    return f"a worker process died: it exited with code {code}{how}"


class WorkerDied(BaseException):
    """A worker process of the local runner died. Beam notices it in a thread and may
    then wait for that worker for ever; the launcher's main thread is interrupted with
    this instead (a BaseException, so no ``except Exception`` in Beam swallows it)."""


def _root_cause(exc: BaseException) -> RootCause:
    chain = _chain(exc)
    segments = []  # (text, frames text) per exception: its message may hold a worker's traceback
    for e in chain:
        segments.append((str(e), "".join(traceback.format_tb(e.__traceback__))))
    text = "\n".join(message + "\n" + frames for message, frames in segments)
    step_match = _STEP.search(text)
    step = step_match.group("step") if step_match else None

    def clean(message: str) -> str:
        return _STEP.sub("", message).strip()

    for e in reversed(chain):  # innermost first
        if _TELLING.search(type(e).__name__) and not str(e).lstrip().startswith("Traceback"):
            frame = _our_frame("".join(traceback.format_tb(e.__traceback__)))
            return RootCause(f"{type(e).__name__}: {clean(str(e))}", step, frame)
    lines = [m for m in _EXCEPTION_LINE.finditer(text) if not m.group("message").startswith("Traceback")]
    chosen = next((m for m in lines if _TELLING.search(m.group("name"))), None)
    if chosen is None:
        chosen = next((m for m in reversed(lines) if _short_name(m.group("name")) not in _WRAPPERS), None)
    if chosen is not None:
        # the frames just above the line are the traceback it ends
        frame = _our_frame(text[: chosen.start()].rsplit("Traceback (most recent call last)", 1)[-1])
        return RootCause(f"{_short_name(chosen.group('name'))}: {clean(chosen.group('message'))}", step, frame)
    inner = chain[-1]
    message = clean(str(inner).strip().splitlines()[-1]) if str(inner).strip() else ""
    frame = _our_frame("".join(traceback.format_tb(inner.__traceback__)))
    return RootCause(f"{type(inner).__name__}: {message}" if message else type(inner).__name__, step, frame)


def access_refused(exc: BaseException, thread_errors: Sequence[BaseException] = ()) -> Optional[RootCause]:
    """The :class:`~tfrecord_io.errors.StorageAccessError` that ended the job, if one
    did: in the exception chain (the launcher, in-process runners) or as a line of the
    traceback text a portable runner sent back from a worker. The CLI exits 2 with it."""
    from tfrecord_io.errors import StorageAccessError

    for err in (exc, *thread_errors):
        for e in _chain(err):
            if isinstance(e, StorageAccessError):
                frame = _our_frame("".join(traceback.format_tb(e.__traceback__)))
                if frame and frame.startswith("tfrecord_io/storage/storage_retry.py"):
                    frame = None  # raised from Beam's retry announcement: says nothing of the job
                step = _STEP.search(str(e))  # in-process runners append the step to the message
                return RootCause(
                    f"StorageAccessError: {_STEP.sub('', str(e)).strip()}", step.group("step") if step else None, frame
                )
        for e in _chain(err):
            for m in _EXCEPTION_LINE.finditer(str(e)):
                if _short_name(m.group("name")) == "StorageAccessError":
                    step = _STEP.search(str(e))
                    return RootCause(
                        f"StorageAccessError: {_STEP.sub('', m.group('message')).strip()}",
                        step.group("step") if step else None,
                    )
    return None


def failure_block(
    command: str,
    what: str,
    state: Sequence[str],
    exit_code: int,
    where: Optional[str] = None,
    log_path: Optional[str] = None,
    meaning: Optional[str] = None,
) -> str:
    """The short block a failed command ends with (see the module docstring).
    ``meaning``: what the exit code means here, if not its usual meaning."""
    lines = [f"tfrecord-io {command} failed: {what}"]
    if where:
        lines.append(f"  where: {where}")
    for i, item in enumerate(state or ["unknown"]):
        lines.append(f"  {'state:' if i == 0 else '      '} {item}")
    if log_path:
        lines.append(f"  log:   {log_path} (full tracebacks; --verbose prints them here too)")
    lines.append(f"  exit:  {exit_code} ({meaning or EXIT_MEANINGS.get(exit_code, 'stopped by a signal')})")
    return "\n".join(lines)


class Terminated(BaseException):
    """SIGTERM (or SIGHUP) reached the launcher: unwinds the job like Ctrl-C does, so
    the failure handler can clean up and say what state is left."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")


def child_pids(pid: Optional[int] = None) -> List[int]:
    """Every descendant of ``pid`` (default: this process), from ``/proc``; [] elsewhere."""
    return processes.descendants(pid)


def stop_children(timeout: float = 5.0) -> int:
    """Stop this process's worker processes (SIGTERM, then SIGKILL) so none goes on
    writing after the launcher has cleaned up. Returns how many there were."""
    pids = child_pids()
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.05)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except OSError:
            pass
    return len(pids)


def _alive(pid: int) -> bool:
    """Reap ``pid`` if it is our exited child, then: is it still running?"""
    try:
        os.waitpid(pid, os.WNOHANG)
    except OSError:
        pass
    return processes.running(pid)


class JobLog:
    """Context manager: during a command, log records and file descriptor 2 (which
    worker processes inherit) go to a log file; ``terminal`` is where our own messages
    go. With ``verbose`` the terminal gets everything too.

    On a clean exit the log is deleted unless its path was asked for; on a failure it
    is kept and ``path`` is printed in the failure block.
    """

    def __init__(self, command: str, verbose: bool = False, path: Optional[str] = None):
        self.command = command
        self.verbose = verbose
        self.requested = path is not None
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self.path = (
            os.path.abspath(path) if path else os.path.join(default_log_dir(), f"{command}-{stamp}-{os.getpid()}.log")
        )
        self.terminal: IO[str] = sys.stderr
        self.keep = self.requested
        self._file: Optional[IO[str]] = None
        self._saved_fd: Optional[int] = None
        self._saved_stderr: Optional[IO[str]] = None
        self._saved_logging: Optional[Tuple[List[logging.Handler], int]] = None
        self._saved_excepthook: Optional[Callable[[threading.ExceptHookArgs], Any]] = None
        # exceptions that ended a thread of the launcher (e.g. Beam's "Worker subprocess
        # exited with return code 137" when a worker process was killed)
        self.thread_errors: List[BaseException] = []
        self._worker_death: Optional[str] = None
        self._saved_signals: Dict[int, Any] = {}
        # set once the job is being stopped: worker exits are then expected
        self.stopping = False
        # the signal that stopped the job (SIGTERM/SIGHUP), once one has: what unwinds
        # the job afterwards (e.g. the runner's shutdown failing on the workers that
        # were stopped) may replace ``Terminated`` on its way up, but not the verdict
        self.terminated_by: Optional[int] = None

    def _thread_excepthook(self, args) -> None:
        if args.exc_value is not None:
            self.thread_errors.append(args.exc_value)
        name = getattr(args.thread, "name", "?")
        self.record(
            f"Exception in thread {name}:\n"
            + "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback))
        )
        death = worker_death(args.exc_value) if args.exc_value is not None else None
        if death and not self.stopping and self._worker_death is None:
            self._worker_death = death
            # The job cannot finish now, and the runner would wait for ever for the
            # other workers to exit while it shuts down: stop them, then interrupt
            # the main thread.
            stop_children()
            try:  # a real signal: it also wakes a main thread blocked in a wait
                signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGUSR1)
            except (AttributeError, OSError, ValueError):
                pass

    def _on_worker_death(self, _signum, _frame) -> None:
        if self.stopping:
            return
        self.stopping = True
        raise WorkerDied(self._worker_death or "a worker process died")

    def _on_termination(self, signum, _frame) -> None:
        """SIGTERM/SIGHUP (schedulers stop jobs with SIGTERM; left alone Python dies at
        once and says nothing): stop the workers, which the runner would otherwise
        wait for while it shuts down, and unwind the job with ``Terminated``."""
        if self.stopping:
            return
        self.stopping = True
        self.terminated_by = signum
        stop_children()
        raise Terminated(signum)

    def __enter__(self) -> JobLog:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8", buffering=1)
        root = logging.getLogger()
        self._saved_logging = (list(root.handlers), root.level)
        if not self.verbose:
            sys.stderr.flush()
            self._saved_fd = os.dup(2)
            self._saved_stderr = sys.stderr
            self.terminal = os.fdopen(os.dup(2), "w", buffering=1, encoding="utf-8", errors="replace")
            os.dup2(self._file.fileno(), 2)
            sys.stderr = self.terminal
        handlers: List[logging.Handler] = [logging.StreamHandler(self._file)]
        if self.verbose:
            handlers.append(logging.StreamHandler(self.terminal))
        formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
        for h in handlers:
            h.setFormatter(formatter)
        root.handlers = handlers
        root.setLevel(logging.INFO)
        logging.captureWarnings(True)  # warnings go to the log, not the terminal
        self._saved_excepthook = threading.excepthook
        threading.excepthook = self._thread_excepthook
        on_signal = {"SIGUSR1": self._on_worker_death, "SIGTERM": self._on_termination, "SIGHUP": self._on_termination}
        for name, handler in on_signal.items():
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            try:
                self._saved_signals[signum] = signal.signal(signum, handler)
            except (ValueError, OSError):  # not the main thread
                pass
        for name in ("apache_beam",):
            logging.getLogger(name).setLevel(logging.NOTSET)
        return self

    def record(self, text: str) -> None:
        """Write ``text`` to the log (and, verbose, to the terminal)."""
        if self._file is not None:
            self._file.write(text if text.endswith("\n") else text + "\n")
            self._file.flush()
        if self.verbose:
            print(text, file=self.terminal, flush=True)

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._saved_excepthook is not None:
            threading.excepthook = self._saved_excepthook
        for signum, previous in self._saved_signals.items():
            signal.signal(signum, previous)
        self._saved_signals = {}
        logging.captureWarnings(False)
        root = logging.getLogger()
        if self._saved_logging is not None:
            root.handlers, level = self._saved_logging
            root.setLevel(level)
        if self._saved_fd is not None:
            sys.stderr.flush()
            os.dup2(self._saved_fd, 2)
            os.close(self._saved_fd)
            self._saved_fd = None
            terminal = self.terminal
            if self._saved_stderr is not None:
                sys.stderr = self._saved_stderr
            self.terminal = sys.stderr
            try:
                terminal.close()
            except OSError:
                pass
        if self._file is not None:
            self._file.close()
            self._file = None
        if not self.keep:
            try:
                os.remove(self.path)
            except OSError:
                pass


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
