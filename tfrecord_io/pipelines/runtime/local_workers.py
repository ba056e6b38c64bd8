"""Local SDK workers forked from the launcher, for ``tfrecord-io build`` on the
DirectRunner in ``multi_processing`` mode.

Why: Beam's own local workers are new interpreters (``python -m
apache_beam.runners.worker.sdk_worker_main``), started only once the pipeline runs.
Each imports Beam, gRPC, Pillow and our modules again: measured on 2 idle cores, 1.5 s
of wall time and 1.5-2 CPU-seconds before the first bundle, plus 0.5 s at the end while
the runner waits for them to tear their interpreters down. A build of 16,000 images
on two workers takes 10 s, so that was a quarter of it.

How: the launcher, once it has imported what the workers need and before it starts
any thread or gRPC channel, forks the workers (``fork`` copies the imported modules
for free). Each waits on a pipe. The pipeline runs on Beam's FnApiRunner with an
``EXTERNAL`` environment pointing at a worker-pool service (Beam's
``BeamFnExternalWorkerPool`` gRPC API) served by the launcher: the runner asks it for
each worker, the pool hands the request to an idle forked worker through its pipe,
and that worker becomes an SDK harness exactly as Beam's own ``sdk_worker_main`` does
(pipeline options from the runner's provision service, see
``worker_pool.sdk_worker_environment``). When the runner closes the control stream
the worker leaves with ``os._exit``: nothing left to tear down.

Everything else is Beam's: the same runner, bundles, data and state planes and
failure reports. A worker that dies is reported as Beam reports its own workers
(``Worker subprocess exited with return code 137``, raised in a launcher thread), so
``failures.JobLog`` stops the job the same way. Workers show as ``tfrecord-worker``
in ``ps -o comm`` (their command line is the launcher's).

Only used where it is safe and the same: Linux (``fork``), a launcher with no thread
but the main one, the DirectRunner in ``multi_processing`` mode and no
``--environment_type`` of the user's. Anything else runs on Beam's own workers,
unchanged; so do the distributed runners (Flink, Spark, Prism).
"""

from __future__ import annotations

import logging
import os
import signal
import struct
import sys
import threading
from typing import Any, List, Optional, Sequence, Tuple

from tfrecord_io.pipelines.runtime import processes

PROCESS_NAME = b"tfrecord-worker"
# How long close() waits for the workers to leave once the job is over.
EXIT_TIMEOUT_S = 10.0


def worker_count(options) -> Optional[int]:
    """How many local workers a job with these PipelineOptions runs on the
    DirectRunner's multi-processing workers, or None when it runs elsewhere."""
    from apache_beam.options.pipeline_options import DirectOptions, PortableOptions, StandardOptions

    runner = options.view_as(StandardOptions).runner
    name = (str(runner) if runner else "DirectRunner").rsplit(".", 1)[-1].lower()
    direct = options.view_as(DirectOptions)
    if name not in ("directrunner", "switchingdirectrunner", "fnapirunner"):
        return None
    if direct.direct_running_mode != "multi_processing" or options.view_as(PortableOptions).environment_type:
        return None
    return direct.direct_num_workers or os.cpu_count() or 1


def can_fork() -> bool:
    """Is forking this process safe: Linux, and no thread but the main one? The CLI
    asks before any pipeline, gRPC channel or server exists; a process that has run
    pipelines keeps Beam's thread pools, and gets Beam's own workers."""
    return hasattr(os, "fork") and sys.platform.startswith("linux") and threading.active_count() == 1


def _name_process(name: bytes) -> None:
    """Set this process's name (``/proc/self/comm``, what ``ps -o comm`` and ``top`` show)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0)  # PR_SET_NAME
    except Exception:  # noqa: BLE001 - a cosmetic name; never fail a worker for it
        pass


def _read_message(fd: int) -> Optional[bytes]:
    """One length-prefixed message from ``fd``; None at end of file (the launcher has
    no work for this worker, or is gone)."""
    chunks: List[bytes] = []
    want, header = 4, True
    while True:
        got = b"".join(chunks)
        if len(got) >= want:
            if header:
                (size,) = struct.unpack(">I", got[:4])
                chunks, want, header = [got[4:]], size, False
                continue
            return got[:want]
        data = os.read(fd, 1 << 16)
        if not data:
            return None
        chunks.append(data)


def _worker_main(read_fd: int) -> None:
    """Body of a forked worker: undo what it inherited from the launcher (signal
    handlers, the job log's stderr and handlers), wait for its StartWorkerRequest, run
    Beam's SDK harness, and leave without tearing the interpreter down."""
    code = 1
    try:
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _name_process(PROCESS_NAME)
        # fd 2 is the job's log (failures.JobLog), as for Beam's own worker processes
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__
        threading.excepthook = threading.__excepthook__
        logging.getLogger().handlers = []
        message = _read_message(read_fd)
        os.close(read_fd)
        if message is None:
            os._exit(0)
        from apache_beam.portability.api import beam_fn_api_pb2
        from apache_beam.runners.worker import sdk_worker_main

        from tfrecord_io.pipelines.runtime.worker_pool import sdk_worker_environment

        request = beam_fn_api_pb2.StartWorkerRequest.FromString(message)
        os.environ.update(
            sdk_worker_environment(
                request.worker_id,
                request.provision_endpoint.url,
                request.control_endpoint.url,
                request.logging_endpoint.url,
            )
        )
        sdk_worker_main.main([])
        code = 0
    except SystemExit as err:
        code = err.code if isinstance(err.code, int) else 1
    except BaseException:  # noqa: BLE001 - reported on fd 2 (the job log), like Beam's workers
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed or broken stream: the worker exits with its code anyway
                pass
        os._exit(code)


class ForkedWorkers:
    """``count`` SDK workers forked now, handed to the runner by :meth:`pipeline_runner`;
    :meth:`close` when the job is over (a context manager does it)."""

    def __init__(self, count: int, preload: Sequence[str] = ()):
        import importlib

        # imported once, here, for every worker: Beam's harness and what the job's DoFns use
        for module in (
            "apache_beam.runners.worker.sdk_worker_main",
            "tfrecord_io.pipelines.runtime.worker_pool",
            *preload,
        ):
            importlib.import_module(module)

        self._idle: List[Tuple[int, int]] = []  # (pid, write end of its pipe)
        self._pids: List[int] = []
        self._lock = threading.Lock()
        self._closing = False
        self._server: Any = None
        sys.stdout.flush()
        sys.stderr.flush()
        for _ in range(count):
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(write_fd)
                for _, other in self._idle:  # the other workers' pipes: theirs alone
                    os.close(other)
                _worker_main(read_fd)  # never returns
            os.close(read_fd)
            self._idle.append((pid, write_fd))
            self._pids.append(pid)
        for pid in self._pids:
            threading.Thread(target=self._watch, args=(pid,), name=f"watch-worker-{pid}", daemon=True).start()
        logging.getLogger(__name__).info("forked %d local SDK workers: pids %s", count, self._pids)

    def __enter__(self) -> ForkedWorkers:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        self.close(kill=exc_type is not None)

    def _watch(self, pid: int) -> None:
        """Wait for one worker; a worker that dies while the job runs is reported the way
        Beam reports its own worker processes (an exception in a launcher thread, which
        ``failures.JobLog`` turns into "a worker process died")."""
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            return  # reaped elsewhere (failures.stop_children)
        code = os.waitstatus_to_exitcode(status)
        if code and not self._closing:
            # as the shell that runs Beam's workers reports it: 128 + signal number
            raise RuntimeError(f"Worker subprocess exited with return code {128 - code if code < 0 else code}")

    def pipeline_runner(self, options) -> Tuple[Any, Any]:
        """``(runner, options)`` for ``beam.Pipeline``: Beam's FnApiRunner with an
        EXTERNAL environment served by these workers, and a copy of ``options``
        without a running mode (FnApiRunner replaces the environment it is given
        for ``multi_processing``/``multi_threading``)."""
        from apache_beam.options.pipeline_options import PipelineOptions
        from apache_beam.portability.api import beam_provision_api_pb2
        from apache_beam.runners.portability.fn_api_runner import FnApiRunner
        from apache_beam.runners.portability.fn_api_runner.fn_runner import ExtendedProvisionInfo
        from apache_beam.runners.portability.portable_runner import JobServiceHandle
        from apache_beam.transforms.environments import ExternalEnvironment

        address = self._serve()
        copy = PipelineOptions([], **{**options.get_all_options(drop_default=True), "direct_running_mode": None})
        # what the workers get from the provision service, as the DirectRunner provides it
        provision = ExtendedProvisionInfo(
            beam_provision_api_pb2.ProvisionInfo(
                pipeline_options=JobServiceHandle.encode_pipeline_options(copy.get_all_options())
            )
        )
        runner = FnApiRunner(default_environment=ExternalEnvironment(address), provision_info=provision)
        return runner, copy

    def _serve(self) -> str:
        """Start the worker-pool service on a free loopback port; its address."""
        import grpc
        from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc
        from apache_beam.utils import thread_pool_executor

        pool = self

        class Servicer(beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolServicer):
            def StartWorker(self, request, context):
                return beam_fn_api_pb2.StartWorkerResponse(error=pool._start(request))

            def StopWorker(self, request, context):
                # a worker leaves by itself when the runner closes its control stream
                return beam_fn_api_pb2.StopWorkerResponse()

        self._server = grpc.server(thread_pool_executor.shared_unbounded_instance())
        port = self._server.add_insecure_port("127.0.0.1:0")
        beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(Servicer(), self._server)
        self._server.start()
        return f"127.0.0.1:{port}"

    def _start(self, request) -> str:
        """Give ``request`` to an idle worker; an error message if none is left."""
        with self._lock:
            if not self._idle:
                return f"no idle local worker left for {request.worker_id} (forked {len(self._pids)})"
            pid, write_fd = self._idle.pop(0)
        message = request.SerializeToString()
        try:
            os.write(write_fd, struct.pack(">I", len(message)) + message)
        except OSError as err:
            return f"local worker {pid} is gone ({err})"
        finally:
            os.close(write_fd)
        return ""

    def close(self, kill: bool = False) -> None:
        """Release idle workers, wait for the others to leave (they do once the runner
        has closed their control streams), kill any that does not. ``kill``: the job
        failed; kill them at once and wait until they are gone, so nothing they write
        outlives the launcher's clean-up (Beam's runner waits for its own worker
        processes; for an EXTERNAL environment it does not)."""
        import time

        self._closing = True
        if kill:
            for pid in self._pids:
                if processes.running(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        with self._lock:
            idle, self._idle = self._idle, []
        for _, write_fd in idle:
            os.close(write_fd)  # end of file: the worker exits
        if self._server is not None:
            self._server.stop(0)
            self._server = None
        deadline = time.monotonic() + EXIT_TIMEOUT_S
        for pid in self._pids:
            while processes.running(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
            if processes.running(pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def fork_workers(options, preload: Sequence[str] = ()) -> Optional[ForkedWorkers]:
    """Forked workers for a job with these options (``preload``: modules its DoFns
    import, imported before forking), or None where Beam's own are used (see the
    module docstring)."""
    count = worker_count(options)
    return ForkedWorkers(count, preload) if count and can_fork() else None


__all__ = ["ForkedWorkers", "can_fork", "fork_workers", "worker_count"]
