"""Where reading from S3 spends its CPU, per record, against the memory-mapped local
file: one process, no DataLoader workers (``num_workers=0``), the data of
``bench_torch.py --s3`` (64 KiB records in 8 indexed files) read by
``TFRecordBatchDataset`` with the batched stand-in decode.

Per epoch it reports CPU microseconds per record of this process (all threads), of
its main thread alone (``time.thread_time``: parsing, batching, the copy into the
batch), of the fetch threads (the rest), and of the versitygw server process
(``/proc/<pid>/stat``, its threads included). On a machine whose cores the server
shares, records/s is bounded by ``cores / (ours + server's)`` CPU per record.

``--profile`` adds a cProfile of one S3 epoch's main thread (and, with ``--threads``,
of the fetch threads, through ``threading.setprofile``).

    python benchmarks/profile_s3.py --images 4000 --repeats 3 [--global] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

from bench_torch import images_to_batch, split_cpus, write_image_files

from tfrecord_io.format import remote_reader
from tfrecord_io.torch import TFRecordBatchDataset

TICK = os.sysconf("SC_CLK_TCK")


def proc_times(pid: int) -> Tuple[float, float]:
    """(utime, stime) of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICK, int(fields[12]) / TICK


def epoch(ds: TFRecordBatchDataset, server_pid: int) -> Dict[str, float]:
    """One pass over ``ds`` in this process: CPU seconds (process, main thread, server), wall, records."""
    me = os.getpid()
    s0, o0 = proc_times(server_pid), proc_times(me)
    p0, t0, w0 = time.process_time(), time.thread_time(), time.perf_counter()
    n = 0
    for batch in ds:
        n += len(batch["label"])
    wall = time.perf_counter() - w0
    s1, o1 = proc_times(server_pid), proc_times(me)
    return {
        "records": n,
        "wall": wall,
        "process": time.process_time() - p0,
        "main": time.thread_time() - t0,
        "server": sum(s1) - sum(s0),
        "server_sys": s1[1] - s0[1],
        "sys": o1[1] - o0[1],
    }


def loader_epoch(ds: TFRecordBatchDataset, server_pid: int, workers: int) -> Dict[str, float]:
    """One DataLoader epoch with ``workers`` worker processes (start-up included, as
    ``bench_torch.py`` measures it): CPU seconds of this process and the reaped workers."""
    from bench_torch import _cpu_seconds
    from torch.utils.data import DataLoader

    s0, c0, w0 = proc_times(server_pid), _cpu_seconds(), time.perf_counter()
    it = iter(DataLoader(ds, batch_size=None, num_workers=workers))
    n = 0
    for batch in it:
        n += len(batch["label"])
    wall = time.perf_counter() - w0
    it._shutdown_workers()
    cpu = _cpu_seconds() - c0
    s1 = proc_times(server_pid)
    del it, batch
    return {
        "records": n,
        "wall": wall,
        "process": cpu,
        "main": 0.0,
        "server": sum(s1) - sum(s0),
        "server_sys": s1[1] - s0[1],
        "sys": 0.0,
    }


def make(paths: List[str], shuffle: bool) -> TFRecordBatchDataset:
    kw = dict(shuffle="global", seed=1) if shuffle else {}
    return TFRecordBatchDataset(
        paths,
        "auto",
        {"image": "byte", "label": "int"},
        64,
        shapes={"label": ()},
        batch_transform=images_to_batch,
        **kw,
    )


def report(name: str, runs: List[Dict[str, float]]) -> None:
    def best(key: str) -> float:
        return min(r[key] / r["records"] for r in runs) * 1e6

    ours, main, server = best("process"), best("main"), best("server")
    sys_, server_sys = best("sys"), best("server_sys")
    rate = max(r["records"] / r["wall"] for r in runs)
    ceiling = 2e6 / (ours + server) if ours + server else float("inf")
    print(
        f"| {name} | {rate:,.0f} | {ours:.1f} ({sys_:.0f}) | {main:.1f} | {ours - main:.1f} "
        f"| {server:.1f} ({server_sys:.0f}) "
        f"| {ceiling:,.0f} | {1e6 / ours:,.0f} |"
    )


def profiled(run: Callable[[], object], threads: bool, limit: int = 25) -> None:
    profiles: List[cProfile.Profile] = []
    lock = threading.Lock()

    def start_thread(*_args) -> None:
        prof = cProfile.Profile()
        with lock:
            profiles.append(prof)
        prof.enable()
        threading.setprofile(None)

    if threads:
        threading.setprofile(start_thread)
    main = cProfile.Profile()
    main.enable()
    run()
    main.disable()
    threading.setprofile(None)
    for prof in profiles:
        prof.disable()
    print("\nmain thread:")
    pstats.Stats(main).sort_stats("tottime").print_stats(limit)
    if profiles:
        print("fetch threads:")
        st = pstats.Stats(profiles[0])
        for prof in profiles[1:]:
            st.add(prof)
        st.sort_stats("tottime").print_stats(limit)


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--global", dest="global_", action="store_true", help="global shuffle as well")
    parser.add_argument("--profile", action="store_true", help="cProfile one S3 epoch")
    parser.add_argument("--threads", action="store_true", help="with --profile: the fetch threads too")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers (0: a loop in this process)")
    parser.add_argument("--keep-alive", action="store_true", help="versitygw --keep-alive")
    parser.add_argument("--s3-parallel", type=int, default=None)
    parser.add_argument("--s3-block-mib", type=int, default=None)
    parser.add_argument("--s3-request-mib", type=int, default=None)
    parser.add_argument(
        "--server-cpus", default=None, help="pin the server to these CPUs and this process to the others"
    )
    args = parser.parse_args(argv)
    from s3support import find_versitygw, start_versitygw

    remote_reader.configure(
        parallel=args.s3_parallel, block_size=None if args.s3_block_mib is None else args.s3_block_mib << 20
    )
    if args.s3_request_mib is not None:
        remote_reader.configure(request_size=args.s3_request_mib << 20)
    binary = find_versitygw()
    if binary is None:
        raise SystemExit("versitygw not found: run `bash scripts/setup-s3`")
    tmp = tempfile.mkdtemp(prefix="profile-s3-")
    server = start_versitygw(binary, tmp, keep_alive=args.keep_alive)
    try:
        os.environ.update(server.env())
        remote_reader.reset_client()
        os.makedirs(os.path.join(tmp, "local"))
        paths = write_image_files(os.path.join(tmp, "local"), args.images, args.files)
        bucket = server.make_bucket()
        client = server.client()
        urls = []
        for p in paths:
            for suffix in ("", ".index"):
                client.upload_file(p + suffix, bucket, os.path.basename(p) + suffix)
            urls.append(f"s3://{bucket}/{os.path.basename(p)}")
        pid = server.process.pid
        if args.server_cpus:
            split_cpus(pid, args.server_cpus)
        kinds: List[Tuple[str, TFRecordBatchDataset]] = [("local, sequential", make(paths, False))]
        kinds.append(("S3, sequential", make(urls, False)))
        if args.global_:
            kinds += [("local, global shuffle", make(paths, True)), ("S3, global shuffle", make(urls, True))]
        runs: Dict[str, List[Dict[str, float]]] = {name: [] for name, _ in kinds}
        if args.workers:

            def one(ds: TFRecordBatchDataset) -> Dict[str, float]:
                return loader_epoch(ds, pid, args.workers)
        else:

            def one(ds: TFRecordBatchDataset) -> Dict[str, float]:
                return epoch(ds, pid)

        for _, ds in kinds:
            one(ds)  # warm-up: page cache, buffer pools, connections
        remote_reader.STATS.reset()
        for _ in range(args.repeats):
            for name, ds in kinds:
                runs[name].append(one(ds))
        a, b, c = os.getloadavg()
        s = remote_reader.settings()
        how = f"{args.workers} DataLoader workers (main thread: n/a)" if args.workers else "one process"
        print(
            f"{args.images} records of 64 KiB in {args.files} files, {how}; "
            f"versitygw{' --keep-alive' if args.keep_alive else ''}; "
            f"{s.parallel} GETs in flight, {s.block_size >> 20} MiB blocks, "
            f"{getattr(s, 'request_size', s.block_size) >> 20} MiB per GET; "
            f"requests per epoch over S3: {remote_reader.STATS.requests / args.repeats:,.0f}; "
            f"load average {a:.1f} {b:.1f} {c:.1f} on {os.cpu_count()} CPUs"
        )
        print(
            "| reading | rec/s | our CPU us/rec (sys) | main thread | fetch threads | server CPU us/rec (sys) "
            "| 2-core ceiling rec/s | ours alone (1 core) rec/s |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, _ in kinds:
            report(name, runs[name])
        if args.profile:
            s3 = [ds for name, ds in kinds if name.startswith("S3")]
            for ds in s3:
                profiled(lambda ds=ds: epoch(ds, pid), args.threads)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
