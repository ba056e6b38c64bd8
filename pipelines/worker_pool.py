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

    python -m pipelines.worker_pool --address 127.0.77.1:50000
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import List, Optional


def serve(address: str) -> None:
    """Serve the worker pool on ``address`` (host:port) until SIGTERM/SIGINT."""
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2_grpc
    from apache_beam.runners.worker.worker_pool_main import BeamFnExternalWorkerPoolServicer, kill_process_gracefully
    from apache_beam.utils import thread_pool_executor

    server = grpc.server(
        thread_pool_executor.shared_unbounded_instance(),
        options=[("grpc.http2.max_pings_without_data", 0), ("grpc.http2.max_ping_strikes", 0), ("grpc.so_reuseport", 0)],
    )
    if server.add_insecure_port(address) == 0:
        raise SystemExit(f"worker pool: cannot listen on {address}")
    pool = BeamFnExternalWorkerPoolServicer(use_process=True)
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


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--address", required=True, help="host:port to listen on, e.g. 127.0.77.1:50000")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    serve(args.address)
    return 0


if __name__ == "__main__":
    sys.exit(main())
