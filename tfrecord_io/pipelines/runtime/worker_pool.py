"""Beam's Python worker pool (the ``--environment_type=EXTERNAL`` service), bound to one address.

On Kubernetes each Flink TaskManager / Spark executor pod has a worker-pool sidecar that
listens on ``localhost:50000``; every pipeline names that one address
(``--environment_config=localhost:50000``) and each engine process reaches *its own*
pool because "localhost" differs per pod. ``scripts/cluster`` rebuilds that on one
machine: each worker JVM resolves the pool's host name through its own hosts file to its
own loopback address (127.0.77.<i>), and pool <i> listens only there, on the port all
pools share.

Beam's ``python -m apache_beam.runners.worker.worker_pool_main --service_port=P`` binds
``[::]:P`` (every address) and gRPC sets SO_REUSEPORT, so two of them on one port would
silently share connections at random. This module runs the same servicer (one Python
process per SDK worker, like ``worker_pool_main``) on exactly the address given.

It also does what Beam's SDK container does for each worker (its Go ``boot`` program,
which the Kubernetes pool sidecar runs as ``--container_executable``): ask the runner's
provision service for the job's pipeline options and start ``sdk_worker_main`` with
them. Without that, an SDK worker started by a plain ``worker_pool_main`` has no
pipeline options at all -- Beam's S3 filesystem then has no endpoint or credentials
(``S3IO: Must provide one of client or options``), and log levels are ignored. Unlike
``boot`` it installs no staged artifacts: the pool's Python must already have
tfrecord-io and its dependencies (as the Dockerfile's image has).

    python -m tfrecord_io.pipelines.runtime.worker_pool --address 127.0.77.1:50000 --container-executable BOOT
    BOOT = a script running: python -m tfrecord_io.pipelines.runtime.worker_pool --boot "$@"
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from typing import Dict, List, Optional


def serve(address: str, container_executable: Optional[str] = None) -> None:
    """Serve the worker pool on ``address`` (host:port) until SIGTERM/SIGINT; each SDK
    worker is started as ``container_executable --id=... --provision_endpoint=...``
    (the SDK container contract), or as a bare SdkHarness without one."""
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2_grpc
    from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer, kill_process_gracefully
    from apache_beam.utils import thread_pool_executor

    server = grpc.server(
        thread_pool_executor.shared_unbounded_instance(),
        options=[
            ("grpc.http2.max_pings_without_data", 0),
            ("grpc.http2.max_ping_strikes", 0),
            ("grpc.so_reuseport", 0),
        ],
    )
    if server.add_insecure_port(address) == 0:
        raise SystemExit(f"worker pool: cannot listen on {address}")
    pool = BeamFnExternalWorkerPoolServicer(use_process=True, container_executable=container_executable)
    beam_fn_api_pb2_grpc.add_BeamFnExternalWorkerPoolServicer_to_server(pool, server)
    server.start()
    logging.info("worker pool listening on %s", address)

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    server.stop(0)
    for worker in list(pool._worker_processes.values()):  # the SDK workers it started
        kill_process_gracefully(worker)


def sdk_worker_environment(
    worker_id: str, provision_endpoint: str, control_endpoint: str, logging_endpoint: str
) -> Dict[str, str]:
    """The environment variables ``sdk_worker_main`` reads, with the job's pipeline
    options fetched from the runner's provision service (what Beam's container
    ``boot`` does). Used by :func:`boot` and by the local forked workers
    (``tfrecord_io/pipelines/runtime/local_workers.py``)."""
    import grpc
    from apache_beam.portability.api import beam_provision_api_pb2, beam_provision_api_pb2_grpc
    from google.protobuf import json_format

    with grpc.insecure_channel(provision_endpoint) as channel:
        info = (
            beam_provision_api_pb2_grpc.ProvisionServiceStub(channel)
            .GetProvisionInfo(
                beam_provision_api_pb2.GetProvisionInfoRequest(), metadata=[("worker_id", worker_id)], timeout=60
            )
            .info
        )
    return {
        "WORKER_ID": worker_id,
        "PIPELINE_OPTIONS": json_format.MessageToJson(info.pipeline_options),
        "CONTROL_API_SERVICE_DESCRIPTOR": f'url: "{control_endpoint}"',
        "LOGGING_API_SERVICE_DESCRIPTOR": f'url: "{logging_endpoint}"',
        "RUNNER_CAPABILITIES": " ".join(info.runner_capabilities),
    }


def boot(worker_id: str, provision_endpoint: str, control_endpoint: str, logging_endpoint: str) -> None:
    """Become one SDK worker: fetch the job's pipeline options from the provision
    service and exec ``sdk_worker_main`` with the environment it reads (as Beam's
    container ``boot`` does)."""
    import tempfile

    env = dict(os.environ)
    env.update(sdk_worker_environment(worker_id, provision_endpoint, control_endpoint, logging_endpoint))
    env["SEMI_PERSISTENT_DIRECTORY"] = tempfile.mkdtemp(prefix=f"beam-sdk-{worker_id}-")
    os.execve(sys.executable, [sys.executable, "-m", "apache_beam.runners.worker.sdk_worker_main"], env)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", help="serve: host:port to listen on, e.g. 127.0.77.1:50000")
    parser.add_argument("--container-executable", help="serve: what starts each SDK worker (see above)")
    parser.add_argument(
        "--boot", action="store_true", help="be one SDK worker (called by the pool with the flags below)"
    )
    for flag in ("id", "provision_endpoint", "control_endpoint", "logging_endpoint", "artifact_endpoint"):
        parser.add_argument(f"--{flag}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if args.boot:
        boot(args.id, args.provision_endpoint, args.control_endpoint, args.logging_endpoint)
        return 1  # not reached: boot execs the SDK worker
    if not args.address:
        parser.error("--address is required")
    serve(args.address, args.container_executable)
    return 0


if __name__ == "__main__":
    sys.exit(main())
