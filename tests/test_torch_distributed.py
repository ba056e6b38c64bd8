"""A real torch.distributed world of 2 ranks (gloo, file store, 2 processes), each with
a 2-worker DataLoader: the datasets (per record, whole batches, a built dataset's split
slices) take rank and world size from torch.distributed and together read every record
exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List

import pytest

from tests.torch_data import write_examples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: what every rank runs before and after its part (``body`` of ``run_world``)
PROLOGUE = r"""
import json, sys, warnings
warnings.filterwarnings("ignore")
import torch.distributed as dist
from torch.utils.data import DataLoader

rank, store, args = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=2)
out = {}
"""
EPILOGUE = r"""
gathered = [None, None]
dist.all_gather_object(gathered, out)
if rank == 0:
    print(json.dumps(gathered))
dist.destroy_process_group()
"""


def run_world(tmp_path, body: str, *args: str) -> List[Dict[str, Any]]:
    """Run ``body`` as rank 0 and rank 1 of a 2-rank gloo world (two processes, after
    ``PROLOGUE``: ``rank``, ``args``, ``DataLoader``, an empty dict ``out``); the ``out``
    of each rank, gathered by rank 0."""
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    script = PROLOGUE + body + EPILOGUE
    store = str(tmp_path / "store")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(r), store, *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return json.loads(outs[0][0].strip().splitlines()[-1])


RANK_SCRIPT = r"""
from tfrecord_io.torch import TFRecordDataset, MultiTFRecordDataset

path = args[0]
ids = lambda batch: [int(r["id"][0]) for r in batch]
single = TFRecordDataset(path, None, ["id"], shuffle_queue_size=16, shuffle_files=True, seed=1)
multi = MultiTFRecordDataset({"x": path}, None, {"x": 1}, ["id"], infinite=False)
for name, ds in (("single", single), ("multi", multi)):
    out[name] = [i for b in DataLoader(ds, batch_size=8, num_workers=2, collate_fn=ids) for i in b]
out["len"] = len(TFRecordDataset(path, path + ".index", ["id"]))
"""


@pytest.mark.timeout(300)
def test_two_rank_gloo_world_reads_each_record_once(tmp_path):
    path = str(tmp_path / "data.tfrecord")
    write_examples(path, range(400), index=True)
    ranks = run_world(tmp_path, RANK_SCRIPT, path)
    for name in ("single", "multi"):
        parts = [r[name] for r in ranks]
        assert all(parts), f"{name}: a rank read nothing"
        assert sorted(parts[0] + parts[1]) == list(range(400)), name
    assert [r["len"] for r in ranks] == [200, 200]


BATCHED_RANK_SCRIPT = r"""
from tfrecord_io.torch import TFRecordBatchDataset, from_dataset

path, root = args
plain = TFRecordBatchDataset(path, path + ".index", {"id": "int"}, 32, shuffle_queue_size=50, seed=2)
sliced = from_dataset(root, "train[:80%]+validation", batch_size=8, features=["n"], shuffle_files=True, seed=4)
dropped = from_dataset(root, "train", batch_size=8, features=["n"], drop_last=True)
for name, ds, key in (("plain", plain, "id"), ("sliced", sliced, "n"), ("dropped", dropped, "n")):
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    out[name] = [int(i) for b in batches for i in b[key].reshape(-1)]
    out[name + "_batches"] = [len(b[key]) for b in batches]
    out[name + "_len"] = len(ds)
out["sliced_count"] = sliced.selection.count
"""


@pytest.mark.timeout(300)
def test_two_rank_world_batched_and_built_dataset_reads(tmp_path):
    from tfrecord_io import iter_dataset, select_dataset

    from tests.torch_data import build_tiny_dataset

    path = str(tmp_path / "data.tfrecord")
    write_examples(path, range(400), index=True)
    os.makedirs(tmp_path / "ds")
    root = build_tiny_dataset(str(tmp_path / "ds"))
    ranks = run_world(tmp_path, BATCHED_RANK_SCRIPT, path, root)
    assert sorted(ranks[0]["plain"] + ranks[1]["plain"]) == list(range(400))
    assert [r["plain_len"] for r in ranks] == [len(r["plain_batches"]) for r in ranks] == [7, 7]
    want = [int(r["n"][0]) for r in iter_dataset(root, "train[:80%]+validation", features=["n"])]
    assert sorted(ranks[0]["sliced"] + ranks[1]["sliced"]) == sorted(want) and ranks[0]["sliced_count"] == len(want)
    assert all(r["sliced"] for r in ranks)
    # drop_last: the same number of full batches on both ranks, no record twice
    train = select_dataset(root, "train").count
    assert ranks[0]["dropped_batches"] == ranks[1]["dropped_batches"] == [8] * ((train // 2) // 8)
    both = ranks[0]["dropped"] + ranks[1]["dropped"]
    assert len(set(both)) == len(both)
