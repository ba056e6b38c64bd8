"""One side of ``bench_torch.py --s3 --s3-baseline TREE``: DataLoader epochs over S3
objects, read by the ``tfrecord_io`` of another source tree (e.g. a worktree of an old
commit), run on request in a process of their own.

Why a process: two versions of the package cannot share one. ``bench_torch.py`` starts
one of these per tree (``PYTHONPATH=TREE``), each importing only the parts of the
package that have not moved between versions (``tfrecord_io.torch``), and asks them
for an epoch at a time, interleaved with its own contenders' epochs, so that both
sides see the same load. It prints one JSON line per epoch: records/s, CPU
microseconds per record over this process and its DataLoader workers, and the S3
server's CPU microseconds per record over the same epoch (as ``bench_torch.epoch_rate``
measures them).

Protocol (one JSON object per line on stdin): ``{"urls": [...], "workers": 2,
"shuffle": "global" or null, "transport": "presigned" or "http" or "urllib3" or null,
"server_pid": N}``. The S3 endpoint and credentials come from the environment.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import resource
import sys
import time
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader

from tfrecord_io.torch import TFRecordBatchDataset, batch_tensor


def _s3_module() -> Any:
    """The module whose ``_transport`` chooses how range GETs are sent, in either layout,
    found by the files of the tree imported: an import of a name the tree lacks could
    be answered by an editable install of another tree (its finder comes after the
    path), whose module would be set and never used."""
    import tfrecord_io

    package = os.path.dirname(os.path.abspath(tfrecord_io.__file__))
    for name in ("storage/s3_objects.py", "remote_reader.py"):
        if os.path.exists(os.path.join(package, name)):
            module = importlib.import_module("tfrecord_io." + name[:-3].replace("/", "."))
            if not os.path.abspath(module.__file__).startswith(package + os.sep):
                raise SystemExit(f"{module.__name__} came from {module.__file__}, not from {package}")
            return module
    raise SystemExit(f"no S3 range reader in {package}")


def images_to_batch(batch: Dict[str, Any]) -> Dict[str, Any]:
    """The same stand-in decode as ``bench_torch.images_to_batch``."""
    images = batch["image"]
    out = batch_tensor((len(images), len(images[0])), torch.uint8)
    rows = out.numpy()
    for i, data in enumerate(images):
        rows[i] = np.frombuffer(data, dtype=np.uint8)
    return {"image": out, "label": batch["label"]}


def _cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def _server_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_datasets: Dict[Tuple[Any, ...], Any] = {}


def epoch(request: Dict[str, Any]) -> Tuple[float, float, float]:
    module = _s3_module()
    transport: Optional[str] = request.get("transport")
    if transport == "urllib3":  # the presigned URL, every GET through urllib3 (before _StdlibGets)
        module._transport, module._stdlib_gets = "presigned", False
    elif transport:
        module._transport = transport
        if hasattr(module, "_stdlib_gets"):
            module._stdlib_gets = True
    key = (tuple(request["urls"]), request.get("shuffle"))
    ds = _datasets.get(key)
    if ds is None:
        kw = {"shuffle": "global", "seed": 1} if request.get("shuffle") == "global" else {}
        ds = _datasets[key] = TFRecordBatchDataset(
            request["urls"],
            "auto",
            {"image": "byte", "label": "int"},
            64,
            shapes={"label": ()},
            batch_transform=images_to_batch,
            **kw,
        )
    pid = int(request["server_pid"])
    server0 = _server_cpu(pid)
    it = iter(DataLoader(ds, batch_size=None, num_workers=int(request["workers"])))
    cpu0, start = _cpu_seconds(), time.perf_counter()
    count = 0
    for batch in it:
        count += len(batch["label"])
    wall = time.perf_counter() - start
    it._shutdown_workers()
    cpu = _cpu_seconds() - cpu0
    server = _server_cpu(pid) - server0
    del it
    gc.collect()
    return count / wall, cpu / count * 1e6, server / count * 1e6


def main() -> None:
    print(f"s3_epochs: {_s3_module().__file__}", file=sys.stderr, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        print(json.dumps(epoch(json.loads(line))), flush=True)


if __name__ == "__main__":
    main()
