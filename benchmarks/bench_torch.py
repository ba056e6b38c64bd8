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
from typing import Callable, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import torch
from torch.utils.data import DataLoader

from tfrecord_io.codec import serialize_example
from tfrecord_io.index import create_index
from tfrecord_io.torch import TFRecordBatchDataset, TFRecordDataset, batch_tensor
from tfrecord_io.writer import RecordWriter


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


def epoch_rate(make: Callable[[], DataLoader]) -> Tuple[float, float]:
    """(records/s, CPU microseconds per record over all processes) of one epoch,
    DataLoader start-up included (as a training epoch pays it)."""
    it = iter(make())
    cpu0, start = _cpu_seconds(), time.perf_counter()
    count, batch = 0, None
    for batch in it:
        count += len(batch["label"])
    wall = time.perf_counter() - start
    it._shutdown_workers()  # reap the workers so that their CPU time is counted
    cpu = _cpu_seconds() - cpu0
    del it, batch
    gc.collect()  # outside the measured CPU: a full collection costs ~70 ms here, not the reader's
    return count / wall, cpu / count * 1e6


def best_rates(contenders: List[Callable[[], DataLoader]], repeats: int) -> List[Tuple[float, float]]:
    """Best records/s and least CPU per record of each contender; rounds interleave
    them, so that load from elsewhere on a shared machine falls on all of them alike."""
    best = [(0.0, float("inf"))] * len(contenders)
    for _ in range(repeats):
        for k, make in enumerate(contenders):
            rate, cpu = epoch_rate(make)
            best[k] = (max(best[k][0], rate), min(best[k][1], cpu))
    return best


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=200_000)
    parser.add_argument("--images", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

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
