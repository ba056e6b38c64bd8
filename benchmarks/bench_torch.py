"""Records/s through a 2-worker DataLoader in batches of 256: tfrecord_io.torch (records
through ``DataLoader(batch_size=256)``, and whole batches made in the worker by
``TFRecordBatchDataset`` through ``DataLoader(batch_size=None)``) vs the ``tfrecord``
package's ``DataLoader(batch_size=256)``, measured in the same run on the same files.

Two data sets: small Examples (an id, a label, 16 floats) and image-sized records (a
64 KiB byte string and a label, turned into a uint8 array by a transform, the stand-in
for decoding in the worker); the default collate makes tensors of both. In the batched
mode the worker parses each batch column by column and the stand-in decode runs per
batch (``images_to_batch``: the 256 byte strings, still views of the file, copied into
one ``batch_tensor``, in the worker's reused shared memory; each epoch's workers adopt
the buffers the previous epoch's left, as in a training script). Both readers get the
index file, so
both shard by record across the two workers and each reads every record once; ours
also runs without the index (byte ranges + resynchronisation), which the ``tfrecord``
package cannot do without reading every record in every worker. Ours checks both
CRCs of every record, theirs checks none. Each figure is the best of ``--repeats``
epochs, taken in interleaved rounds (the machine is shared; the best is the least
disturbed, and interleaving spreads outside load over all readers alike). In brackets:
the least CPU time per record over the main process and the workers, which load from
elsewhere disturbs far less than wall-clock rates (from the DataLoader's start to its
workers' exit; the benchmark's own ``gc.collect()`` between epochs is left out); its
ratio is theirs / ours, so above 1 means ours spends less.

10,000 image-sized records by default (655 MB; 2,000 before): over only 2,000 the
DataLoader's start-up per epoch (forking the workers, ~0.1 s) and each worker's first
batches dominate; real image data sets have far more records per epoch.

    python benchmarks/bench_torch.py [--small 200000] [--images 10000] [--repeats 3]

Four more modes, each measured against its own baseline in the same run (64 KiB
records in ``--files`` files, whole batches of 64 made in 2 workers, the batched
stand-in decode):

- ``--global``: ``shuffle="global"`` (one permutation of all records per epoch, read a
  window at a time) against sequential reading and a 10,000-record buffer shuffle, on
  local disk (the page cache: the files were just written);
- ``--s3``: the same reads from the S3 server (versitygw on 127.0.0.1, started here;
  ``TFRECORD_IO_VERSITYGW`` or ``~/.cache/tfrecord-io/bin/versitygw``) against the
  local files: sequential and global (``--s3-server-cpus 1``: the server pinned to
  CPU 1 and every reader, local and S3, to the other CPUs, so that the server does
  not take the readers' CPU, as on a machine of its own; loopback still runs some of
  the server's sending in the reader's system calls);
  ``--s3-compare botocore``: the same S3 reads through other transports of
  ``remote_reader`` (``get_object`` for every GET), interleaved in the same rounds;
- ``--gcs``: the same reads from ``gs://`` on fake-gcs-server (started here; reads go to
  it directly, not through the tests' proxy): ``remote_reader`` (google-cloud-storage,
  pinned to the generation) against the way before, the torch readers through Beam's
  ``FileSystems``;
- ``--resume``: torchdata's ``StatefulDataLoader`` resuming at 90% of an epoch (5 ms
  transform per record, as in the issue): ours (``state_dict`` seeks) against the
  ``tfrecord`` package's dataset (not stateful: the loader replays the first 90%).
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import resource
import shutil
import sys
import tempfile
import time
import warnings
from typing import Callable, List, Optional, Set, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import torch
from torch.utils.data import DataLoader

from tfrecord_io.format.codec import serialize_example
from tfrecord_io.format.index import create_index
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.torch import TFRecordBatchDataset, TFRecordDataset, batch_tensor


def write_small(path: str, n: int) -> None:
    rng = random.Random(0)
    with RecordWriter(path) as w:
        for i in range(n):
            w.write_record(
                serialize_example(
                    {"id": (i, "int"), "label": (i % 10, "int"), "feats": ([rng.random() for _ in range(16)], "float")}
                )
            )
    create_index(path, path + ".index")


def write_images(path: str, n: int, size: int = 64 * 1024) -> None:
    rng = random.Random(1)
    with RecordWriter(path) as w:
        for i in range(n):
            w.write_record(serialize_example({"image": (rng.randbytes(size), "byte"), "label": (i % 10, "int")}))
    create_index(path, path + ".index")


def image_to_array(record):
    """The stand-in for decoding an image in the worker: its bytes as a uint8 array,
    so that the default collate stacks a batch into one tensor (in shared memory)."""
    return {"image": np.frombuffer(record["image"], dtype=np.uint8), "label": record["label"]}


def images_to_batch(batch):
    """The batched stand-in: a batch's image bytes (views of the records) as one uint8
    tensor, allocated in shared memory in the worker, so the copy into it is the only one."""
    images = batch["image"]
    out = batch_tensor((len(images), len(images[0])), torch.uint8)
    rows = out.numpy()
    for i, data in enumerate(images):
        rows[i] = np.frombuffer(data, dtype=np.uint8)
    return {"image": out, "label": batch["label"]}


def _cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (the DataLoader workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def epoch_rate(make: Callable[[], DataLoader], server_pid: Optional[int] = None) -> Tuple[float, float, float]:
    """(records/s, CPU microseconds per record over all processes, and of the process
    ``server_pid`` over the same epoch) of one epoch, DataLoader start-up included (as
    a training epoch pays it)."""
    server0 = _server_cpu(server_pid) if server_pid else 0.0
    it = iter(make())
    cpu0, start = _cpu_seconds(), time.perf_counter()
    count, batch = 0, None
    for batch in it:
        count += len(batch["label"])
    wall = time.perf_counter() - start
    it._shutdown_workers()  # reap the workers so that their CPU time is counted
    cpu = _cpu_seconds() - cpu0
    server = _server_cpu(server_pid) - server0 if server_pid else 0.0
    del it, batch
    gc.collect()  # outside the measured CPU: a full collection costs ~70 ms here, not the reader's
    return count / wall, cpu / count * 1e6, server / count * 1e6


def best_rates(
    contenders: List[Callable[[], DataLoader]], repeats: int, server_pid: Optional[int] = None
) -> List[Tuple[float, float]]:
    """Best records/s and least CPU per record of each contender; rounds interleave
    them, so that load from elsewhere on a shared machine falls on all of them alike."""
    return [(r, c) for r, c, _ in best_rates_and_server(contenders, repeats, server_pid)]


def best_rates_and_server(
    contenders: List[Callable[[], DataLoader]], repeats: int, server_pid: Optional[int] = None
) -> List[Tuple[float, float, float]]:
    """``best_rates`` plus the least CPU per record of the process ``server_pid``."""
    best = [(0.0, float("inf"), float("inf"))] * len(contenders)
    for _ in range(repeats):
        for k, make in enumerate(contenders):
            if isinstance(make, EpochsElsewhere):
                rate, cpu, server = make.epoch(server_pid)
            else:
                rate, cpu, server = epoch_rate(make, server_pid)
            best[k] = (max(best[k][0], rate), min(best[k][1], cpu), min(best[k][2], server))
    return best


def write_image_files(directory: str, n: int, files: int) -> List[str]:
    per = -(-n // files)
    paths = []
    for k in range(files):
        path = os.path.join(directory, f"img-{k:03d}.tfrecord")
        rng = random.Random(k)
        with RecordWriter(path) as w:
            for i in range(k * per, min(n, (k + 1) * per)):
                w.write_record(
                    serialize_example({"image": (rng.randbytes(64 * 1024), "byte"), "label": (i % 10, "int")})
                )
        create_index(path, path + ".index")
        paths.append(path)
    return paths


def batched_loader(paths: List[str], workers: int, **kw) -> Callable[[], DataLoader]:
    ds = TFRecordBatchDataset(
        paths,
        "auto",
        {"image": "byte", "label": "int"},
        64,
        shapes={"label": ()},
        batch_transform=images_to_batch,
        **kw,
    )
    return lambda: DataLoader(ds, batch_size=None, num_workers=workers)


def _load() -> str:
    a, b, c = os.getloadavg()
    return f"load average {a:.1f} {b:.1f} {c:.1f} on {os.cpu_count()} CPUs"


def bench_global(args) -> None:
    tmp = tempfile.mkdtemp(prefix="bench-global-")
    try:
        paths = write_image_files(tmp, args.images, args.files)
        w = args.workers
        names = ["sequential", "buffer shuffle (10,000)", "**global shuffle**"]
        rates = best_rates(
            [
                batched_loader(paths, w),
                batched_loader(paths, w, shuffle_queue_size=10_000, shuffle_files=True, seed=1),
                batched_loader(paths, w, shuffle="global", seed=1),
            ],
            args.repeats,
        )
        print(f"{args.images} records of 64 KiB in {args.files} files, local disk, {w} workers; {_load()}")
        print("| reading | records/s (CPU us/rec) | vs sequential: rate (CPU) |")
        print("|---|---:|---:|")
        (s, sc) = rates[0]
        for name, (r, c) in zip(names, rates):
            print(f"| {name} | {r:,.0f} ({c:.1f}) | {r / s:.2f}x ({sc / c:.2f}x) |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _server_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of the S3 server process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def parse_cpus(text: str) -> Set[int]:
    """CPU numbers from ``"1"``, ``"2,3"`` or ``"2-3"``."""
    cpus: Set[int] = set()
    for part in text.split(","):
        a, dash, b = part.strip().partition("-")
        cpus.update(range(int(a), int(b if dash else a) + 1))
    return cpus


def pin_server(pid: int, cpus: Set[int]) -> None:
    """Pin every thread of the server process to ``cpus`` (threads it starts later
    inherit the affinity of the thread that starts them)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            pass


def split_cpus(server_pid: int, text: str) -> Tuple[Set[int], Set[int]]:
    """``--s3-server-cpus``: the server on ``text``'s CPUs, this process (and the
    DataLoader workers it forks) on the others: (server's, readers')."""
    have = os.sched_getaffinity(0)
    try:
        server = parse_cpus(text)
    except ValueError:
        raise SystemExit(f"--s3-server-cpus {text}: not a CPU list (e.g. 1, 2-3 or 2,3)") from None
    readers = have - server
    if not server <= have or not readers:
        raise SystemExit(
            f"--s3-server-cpus {text}: needs CPUs among {sorted(have)} and at least one left for the readers"
        )
    pin_server(server_pid, server)
    os.sched_setaffinity(0, readers)
    return server, readers


def with_transport(module, transport: str, make: Callable[[], DataLoader]) -> Callable[[], DataLoader]:
    """``make`` with the S3 range GETs of this process (and the workers it forks) sent
    through ``transport`` (``s3_objects._transport``; ``urllib3``: the presigned URL with
    every GET through urllib3, as before ``_StdlibGets``)."""

    def made() -> DataLoader:
        module._transport = "presigned" if transport == "urllib3" else transport
        module._stdlib_gets = transport != "urllib3"
        return make()

    return made


class EpochsElsewhere:
    """Epochs of one S3 loader run by ``benchmarks/s3_epochs.py`` in a process of its own
    whose ``tfrecord_io`` is ``tree``'s (``PYTHONPATH``): another version of the package,
    measured in the same interleaved rounds as this process's contenders."""

    def __init__(self, tree: str, request: dict) -> None:
        import subprocess

        env = dict(os.environ, PYTHONPATH=tree)
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "s3_epochs.py")
        self.request = request
        self.process = subprocess.Popen(
            [sys.executable, script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def epoch(self, server_pid: Optional[int]) -> Tuple[float, float, float]:
        import json

        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(dict(self.request, server_pid=server_pid)) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"the epochs process of {self.request} ended (see its output above)")
        rate, cpu, server = json.loads(line)
        return rate, cpu, server

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def bench_s3(args) -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(here, "tests"))
    from tfrecord_io.format import remote_reader
    from tfrecord_io.storage import s3_objects

    from s3support import find_versitygw, start_versitygw

    remote_reader.configure(
        parallel=args.s3_parallel,
        block_size=None if args.s3_block_mib is None else args.s3_block_mib << 20,
        request_size=None if args.s3_request_mib is None else args.s3_request_mib << 20,
    )
    binary = find_versitygw()
    if binary is None:
        raise SystemExit("versitygw not found: run `bash scripts/setup-s3` (or set TFRECORD_IO_VERSITYGW)")
    tmp = tempfile.mkdtemp(prefix="bench-s3-")
    server = start_versitygw(binary, tmp, keep_alive=args.s3_keep_alive)
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
        w = args.workers
        contenders = [
            batched_loader(paths, w),
            with_transport(s3_objects, args.s3_transport, batched_loader(urls, w)),
            batched_loader(paths, w, shuffle="global", seed=1),
            with_transport(s3_objects, args.s3_transport, batched_loader(urls, w, shuffle="global", seed=1)),
        ]
        others = [t for t in (args.s3_compare or "").split(",") if t]
        for t in others:  # other transports, interleaved in the same rounds
            contenders += [
                with_transport(s3_objects, t, batched_loader(urls, w)),
                with_transport(s3_objects, t, batched_loader(urls, w, shuffle="global", seed=1)),
            ]
        placement = "the server and the readers share every CPU"
        if args.s3_server_cpus:
            server_cpus, reader_cpus = split_cpus(server.process.pid, args.s3_server_cpus)
            placement = (
                f"the server pinned to CPU {sorted(server_cpus)}, the readers (local and S3 alike) to "
                f"CPU {sorted(reader_cpus)}"
            )
        baselines: List[EpochsElsewhere] = []
        if args.s3_baseline:  # each side in a process of its own, started after the pinning (the readers' CPUs)
            tree, _, transport = args.s3_baseline.partition(":")
            for t, tr in ((here, args.s3_transport), (os.path.abspath(tree), transport or "http")):
                for shuffle in (None, "global"):
                    request = {"urls": urls, "workers": w, "shuffle": shuffle, "transport": tr}
                    baselines.append(EpochsElsewhere(t, request))
            contenders += baselines
        load_before = _load()
        rates = best_rates_and_server(contenders, args.repeats, server.process.pid)
        s = remote_reader.settings()
        print(
            f"{args.images} records of 64 KiB in {args.files} files, {w} workers; S3: versitygw on 127.0.0.1"
            f"{' --keep-alive' if args.s3_keep_alive else ' (closes each connection)'}, {s.parallel} GETs in flight "
            f"per sequential reader, {s.request_size >> 20} MiB per GET, {s.block_size >> 20} MiB blocks, "
            f"{s.random_parallel} GETs in flight for a global-shuffle window; {placement}; before: {load_before}; "
            f"after: {_load()}"
        )
        cores = len(os.sched_getaffinity(0))
        print(
            "| reading | local disk rec/s (CPU us/rec) | S3 rec/s (our CPU us/rec) | server CPU us/rec "
            f"| readers' {cores}-CPU ceiling rec/s | **S3 / local** |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for name, (lr, lc, _), (sr, sc, sv) in (
            ("sequential", rates[0], rates[1]),
            ("global shuffle", rates[2], rates[3]),
        ):
            # the readers' CPUs bound the rate: shared with the server, or their own
            ceiling = cores * 1e6 / (sc if args.s3_server_cpus else sc + sv)
            print(
                f"| {name} | {lr:,.0f} ({lc:.1f}) | {sr:,.0f} ({sc:.1f}) | {sv:.1f} | {ceiling:,.0f} "
                f"| **{sr / lr:.2f}x** |"
            )
        if baselines:
            n = len(contenders) - 4
            print()
            print(
                f"Each side in a process of its own: this tree ({args.s3_transport}) and {args.s3_baseline} "
                "(its transport after the colon, http by default)"
            )
            print(
                "| reading | this tree rec/s (CPU us/rec) | baseline rec/s (CPU us/rec) "
                "| server CPU us/rec (this / baseline) | **this / baseline** rate (CPU) |"
            )
            print("|---|---:|---:|---:|---:|")
            for name, (br, bc, bv), (hr, hc, hv) in (
                ("sequential", rates[n], rates[n + 2]),
                ("global shuffle", rates[n + 1], rates[n + 3]),
            ):
                print(
                    f"| {name} | {br:,.0f} ({bc:.1f}) | {hr:,.0f} ({hc:.1f}) | {bv:.1f} / {hv:.1f} "
                    f"| **{br / hr:.2f}x** ({hc / bc:.2f}x) |"
                )
            for b in baselines:
                b.close()
        for k, t in enumerate(others):
            print()
            print(
                f"| reading | {args.s3_transport} rec/s (CPU us/rec) | {t} rec/s (CPU us/rec) "
                f"| server CPU us/rec ({args.s3_transport} / {t}) | **{args.s3_transport} / {t}** rate (CPU) |"
            )
            print("|---|---:|---:|---:|---:|")
            for name, (br, bc, bv), (hr, hc, hv) in (
                ("sequential", rates[1], rates[4 + 2 * k]),
                ("global shuffle", rates[3], rates[5 + 2 * k]),
            ):
                print(
                    f"| {name} | {br:,.0f} ({bc:.1f}) | {hr:,.0f} ({hc:.1f}) | {bv:.1f} / {hv:.1f} "
                    f"| **{br / hr:.2f}x** ({hc / bc:.2f}x) |"
                )
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def with_gcs_reads(module, on: bool, make_loader: Callable[[], Callable[[], DataLoader]]) -> Callable[[], DataLoader]:
    """A loader over ``gs://`` objects read by ``remote_reader`` (``on``) or by Beam's
    ``FileSystems`` as before (``remote_objects._gcs_reads`` off while the dataset is made
    and while its workers fork)."""
    module._gcs_reads = on
    make = make_loader()
    module._gcs_reads = True

    def made() -> DataLoader:
        module._gcs_reads = on
        return make()

    return made


def bench_gcs(args) -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path.insert(0, os.path.join(here, "tests"))
    from tfrecord_io.format import remote_reader
    from tfrecord_io.storage import remote_objects

    from gcs_support import find_fake_gcs_server, start_fake_gcs_server

    binary = find_fake_gcs_server()
    if binary is None:
        raise SystemExit("fake-gcs-server not found: run `bash scripts/setup-gcs` (or set TFRECORD_IO_FAKE_GCS_SERVER)")
    tmp = tempfile.mkdtemp(prefix="bench-gcs-")
    server = start_fake_gcs_server(binary, tmp)
    try:
        # reads straight to the emulator, not through the test proxy (a Python thread in
        # this process, which would count as the readers' CPU); the proxy is only for uploads
        os.makedirs(os.path.join(tmp, "local"))
        paths = write_image_files(os.path.join(tmp, "local"), args.images, args.files)
        bucket = server.make_bucket()
        b = server.client().bucket(bucket)
        urls = []
        for p in paths:
            for suffix in ("", ".index"):
                b.blob(os.path.basename(p) + suffix).upload_from_filename(p + suffix)
            urls.append(f"gs://{bucket}/{os.path.basename(p)}")
        os.environ["STORAGE_EMULATOR_HOST"] = server.server_endpoint
        w = args.workers
        contenders = [
            batched_loader(paths, w),
            with_gcs_reads(remote_objects, True, lambda: batched_loader(urls, w)),
            with_gcs_reads(remote_objects, False, lambda: batched_loader(urls, w)),
            batched_loader(paths, w, shuffle="global", seed=1),
            with_gcs_reads(remote_objects, True, lambda: batched_loader(urls, w, shuffle="global", seed=1)),
            with_gcs_reads(remote_objects, False, lambda: batched_loader(urls, w, shuffle="global", seed=1)),
        ]
        load_before = _load()
        rates = best_rates_and_server(contenders, args.repeats, server.process.pid)
        s = remote_reader.settings()
        print(
            f"{args.images} records of 64 KiB in {args.files} files, {w} workers; GCS: fake-gcs-server on "
            f"127.0.0.1 (its filesystem backend), server and readers sharing every CPU; remote_reader: "
            f"{s.parallel} runs in flight per sequential reader, {s.block_size >> 20} MiB per GET, "
            f"{s.random_parallel} GETs in flight for a global-shuffle window; before: {load_before}; after: {_load()}"
        )
        print(
            "| reading | local disk rec/s (CPU us/rec) | gs:// remote_reader rec/s (CPU us/rec; server) "
            "| gs:// Beam FileSystems rec/s (CPU us/rec; server) | **remote_reader / Beam** rate (CPU) |"
        )
        print("|---|---:|---:|---:|---:|")
        for name, (lr, lc, _), (nr, nc, nv), (br, bc, bv) in (
            ("sequential", rates[0], rates[1], rates[2]),
            ("global shuffle", rates[3], rates[4], rates[5]),
        ):
            print(
                f"| {name} | {lr:,.0f} ({lc:.1f}) | {nr:,.0f} ({nc:.1f}; {nv:.1f}) | {br:,.0f} ({bc:.1f}; {bv:.1f}) "
                f"| **{nr / br:.2f}x** ({bc / nc:.2f}x) |"
            )
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)


class _Slow:
    """A 5 ms per-record transform (sleep: the stand-in for decoding that the issue used)."""

    def __call__(self, record):
        time.sleep(0.005)
        return {"label": record["label"]}


def bench_resume(args) -> None:
    import tfrecord.torch.dataset as peer
    from torchdata.stateful_dataloader import StatefulDataLoader

    tmp = tempfile.mkdtemp(prefix="bench-resume-")
    try:
        path = os.path.join(tmp, "small.tfrecord")
        n = args.resume_records
        write_small(path, n)
        w, bs = args.workers, 16
        steps = n // bs
        stop = int(steps * 0.9)

        def make_ours():
            return TFRecordDataset(path, path + ".index", {"label": "int"}, transform=_Slow(), seed=0)

        def make_theirs():
            return peer.TFRecordDataset(path, path + ".index", {"label": "int"}, transform=_Slow())

        rows = []
        for name, make in (("tfrecord 1.14.6 (replayed)", make_theirs), ("**ours (seeks)**", make_ours)):
            loader = StatefulDataLoader(make(), batch_size=bs, num_workers=w, snapshot_every_n_steps=1)
            start = time.perf_counter()
            it = iter(loader)
            for _ in range(stop):
                next(it)
            state = loader.state_dict()
            first_part = time.perf_counter() - start
            rest = sum(1 for _ in it)
            whole = time.perf_counter() - start
            del it, loader
            resumed = StatefulDataLoader(make(), batch_size=bs, num_workers=w, snapshot_every_n_steps=1)
            resumed.load_state_dict(state)
            start = time.perf_counter()
            got = sum(1 for _ in resumed)
            took = time.perf_counter() - start
            rows.append((name, whole, first_part, took, got, rest))
        print(
            f"{n} records, 5 ms transform per record, {w} workers, batches of {bs}, resumed at step {stop} of {steps}"
        )
        print(f"({_load()})")
        print("| reader | whole epoch s | resume -> end of epoch s | resume / epoch | batches after resume |")
        print("|---|---:|---:|---:|---:|")
        for name, whole, _, took, got, rest in rows:
            print(f"| {name} | {whole:.2f} | {took:.2f} | {took / whole:.2f} | {got} (uninterrupted: {rest}) |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200_000)
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--files", type=int, default=8, help="files of the --global/--s3 data")
    parser.add_argument("--resume-records", type=int, default=1000)
    parser.add_argument("--s3-parallel", type=int, default=None, help="range GETs in flight per worker (--s3)")
    parser.add_argument("--s3-block-mib", type=int, default=None, help="MiB scanned at a time (--s3)")
    parser.add_argument("--s3-request-mib", type=int, default=None, help="MiB per range GET (--s3)")
    parser.add_argument(
        "--s3-keep-alive", action="store_true", help="versitygw --keep-alive (as AWS S3: connections reused)"
    )
    parser.add_argument(
        "--s3-transport",
        default="presigned",
        help="how the S3 reads send their GETs (--s3): presigned (the default: botocore presigns, http.client "
        "sends, urllib3 retries), urllib3 (presigned, every GET through urllib3) or botocore (get_object); "
        "the hand-written client: --s3-baseline",
    )
    parser.add_argument(
        "--s3-compare",
        default="",
        help="other transports read in the same interleaved rounds, e.g. botocore (--s3)",
    )
    parser.add_argument(
        "--s3-baseline",
        default="",
        help="TREE[:TRANSPORT]: the same S3 reads by another source tree's tfrecord_io (e.g. a worktree of "
        "629eda9, the last commit with the hand-written client, transport http), each side in a process "
        "of its own, interleaved in the same rounds (--s3; build TREE's C core in place first)",
    )
    parser.add_argument(
        "--s3-server-cpus",
        default=None,
        help="pin the S3 server to these CPUs (e.g. 1) and every reader, local and S3, to the others "
        "(--s3): the server on CPUs of its own, as on another machine",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--global", dest="global_", action="store_true", help="global shuffle vs sequential")
    mode.add_argument("--s3", action="store_true", help="S3 (versitygw on 127.0.0.1) vs local disk")
    mode.add_argument("--gcs", action="store_true", help="gs:// (fake-gcs-server on 127.0.0.1): ours vs Beam's")
    mode.add_argument("--resume", action="store_true", help="StatefulDataLoader resume at 90%%")
    args = parser.parse_args(argv)
    if args.global_:
        return bench_global(args)
    if args.s3:
        return bench_s3(args)
    if args.gcs:
        return bench_gcs(args)
    if args.resume:
        return bench_resume(args)

    import tfrecord.torch.dataset as peer

    # np.frombuffer over bytes is read-only; the collate copies it into the batch anyway
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

    from torch.utils.data import default_collate

    w = args.workers
    tmp = tempfile.mkdtemp(prefix="bench-torch-")
    try:
        small, images = os.path.join(tmp, "small.tfrecord"), os.path.join(tmp, "images.tfrecord")
        write_small(small, args.small)
        write_images(images, args.images)
        rows = []
        for name, path, desc, transform, shapes, batch_transform in (
            (
                f"small Examples ({args.small}, {os.path.getsize(small) / args.small:.0f} B)",
                small,
                {"id": "int", "label": "int", "feats": "float"},
                None,
                {"id": (), "label": (), "feats": (16,)},
                None,
            ),
            (
                f"image-sized ({args.images}, {os.path.getsize(images) / args.images / 1024:.0f} KiB)",
                images,
                {"image": "byte", "label": "int"},
                image_to_array,
                {"label": ()},
                images_to_batch,
            ),
        ):
            index = path + ".index"
            # each dataset is made once, as a training script makes it, and read once per epoch
            theirs = peer.TFRecordDataset(path, index, desc, transform=transform)
            ours = TFRecordDataset(path, index, desc, transform=transform)
            ours_noidx = TFRecordDataset(path, None, desc, transform=transform)
            batched = TFRecordBatchDataset(path, index, desc, 256, shapes=shapes, batch_transform=batch_transform)
            rows.append(
                (
                    name,
                    best_rates(
                        [
                            lambda: DataLoader(theirs, batch_size=256, num_workers=w, collate_fn=default_collate),
                            lambda: DataLoader(ours, batch_size=256, num_workers=w, collate_fn=default_collate),
                            lambda: DataLoader(ours_noidx, batch_size=256, num_workers=w, collate_fn=default_collate),
                            lambda: DataLoader(batched, batch_size=None, num_workers=w),
                        ],
                        args.repeats,
                    ),
                )
            )
        load = os.getloadavg()
        print(f"load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {os.cpu_count()} CPUs, {w} workers")
        print(
            "| data set | tfrecord 1.14.6 rec/s (CPU us/rec) | ours per record, index | ratio | ours per record, "
            "no index | ratio | **ours, batches in the worker** | ratio |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for name, ((t, tc), (o, oc), (n, nc), (b, bc)) in rows:
            print(
                f"| {name} | {t:,.0f} ({tc:.1f}) | {o:,.0f} ({oc:.1f}) | {o / t:.2f}x ({tc / oc:.2f}x) "
                f"| {n:,.0f} ({nc:.1f}) | {n / t:.2f}x ({tc / nc:.2f}x) "
                f"| {b:,.0f} ({bc:.1f}) | **{b / t:.2f}x** ({tc / bc:.2f}x) |"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
