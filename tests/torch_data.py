"""Small TFRecord data sets for the reader tests: every record carries a unique ``id``
so a test can tell exactly which records a reader produced."""

from __future__ import annotations

import os
import random
from typing import Iterable, List, Optional, Tuple

from tfrecord_io.format.codec import serialize_example, serialize_sequence_example
from tfrecord_io.format.index import create_index
from tfrecord_io.format.writer import RecordWriter


def example_bytes(i: int, rng: random.Random) -> bytes:
    tokens = [rng.randrange(1000) for _ in range(rng.randrange(0, 12))]
    return serialize_example(
        {
            "id": (i, "int"),
            "tokens": (tokens, "int"),
            "score": ([i / 7.0], "float"),
            "payload": (rng.randbytes(rng.randrange(0, 300)), "byte"),
        }
    )


def write_examples(
    path: str, ids: Iterable[int], index: bool = False, compression: Optional[str] = None, seed: int = 0
) -> Optional[str]:
    """Write one Example per id; returns the index path when ``index``."""
    rng = random.Random(seed)
    with RecordWriter(path, compression) as w:
        for i in ids:
            w.write_record(example_bytes(i, rng))
    if index:
        create_index(path, path + ".index")
        return path + ".index"
    return None


def write_indexed_parts(directory: str, sizes: Iterable[int], prefix: str) -> List[str]:
    """Indexed files ``<prefix>-<k>.tfrecord`` of ``sizes[k]`` Examples each, ids numbered
    on across the files (0, 1, ... in file order); their paths."""
    paths, first = [], 0
    for k, n in enumerate(sizes):
        path = os.path.join(directory, f"{prefix}-{k}.tfrecord")
        write_examples(path, range(first, first + n), index=True, seed=k)
        paths.append(path)
        first += n
    return paths


def write_sequences(path: str, ids: Iterable[int]) -> None:
    rng = random.Random(1)
    with RecordWriter(path) as w:
        for i in ids:
            steps = [[rng.randrange(50) for _ in range(3)] for _ in range(rng.randrange(1, 6))]
            w.write_record(serialize_sequence_example({"id": (i, "int")}, {"frames": (steps, "int")}))


def record_offsets(path: str) -> List[Tuple[int, int]]:
    """(offset, frame size) of every record, from a freshly built index."""
    from tfrecord_io.format.index import build_index

    idx = build_index(path)
    return list(zip(idx.offsets.tolist(), idx.sizes.tolist()))


def corrupt_data_byte(path: str, record: int) -> int:
    """Flip one data byte of record number ``record``; returns that record's offset."""
    offset, size = record_offsets(path)[record]
    with open(path, "r+b") as f:
        f.seek(offset + 12 + (size - 16) // 2)
        b = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([b[0] ^ 0xFF]))
    return offset


def drain(loader) -> list:
    """Every item of every batch of ``loader``. Its worker processes are shut down
    before an error propagates: a DataLoader iterator kept alive by a traceback shuts
    down only when collected, and then waits ~5 s per worker (torch's behaviour)."""
    it = iter(loader)
    try:
        return [x for batch in it for x in batch]
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()


TINY_CONFIG = """name: tiny
input: {manifest: manifest.jsonl}
key: id
columns:
  n: {encoder: int}
  label: {encoder: label, vocabulary: [a, b, c]}
  caption: {encoder: text}
  tokens: {encoder: array, dtype: int64, shape: [null]}
  image: {encoder: image, mode: RGB}
splits: {train: 0.7, validation: 0.2, test: 0.1}
seed: 0
sharding: {num_shards: 3}
output: {dir: out, version: v1}
"""


def build_tiny_dataset(directory: str, rows: int = 150) -> str:
    """Build a small dataset with the real build job (in process): ``rows`` rows with an
    int ``n`` (the row number), a label, a caption, variable-length ``tokens`` and a
    small PNG ``image`` whose pixels all equal ``n % 256`` (height 8, width 6), in three
    splits of three shards each. Returns the dataset root (``<directory>/out``)."""
    import json
    import os

    import numpy as np
    from PIL import Image

    from tfrecord_io.pipelines.building.build_config import load_config
    from tfrecord_io.pipelines.building.build_job import run_build

    from tests.pipeline_support import options

    rng = random.Random(0)
    with open(os.path.join(directory, "manifest.jsonl"), "w") as f:
        for i in range(rows):
            Image.fromarray(np.full((8, 6, 3), i % 256, np.uint8)).save(os.path.join(directory, f"img{i}.png"))
            row = {
                "id": f"r{i}",
                "n": i,
                "label": "abc"[i % 3],
                "caption": f"row {i}",
                "tokens": [rng.randrange(100) for _ in range(rng.randrange(1, 7))],
                "image": f"img{i}.png",
            }
            f.write(json.dumps(row) + "\n")
    config = os.path.join(directory, "tiny.yaml")
    with open(config, "w") as f:
        f.write(TINY_CONFIG)
    run_build(load_config(config), options(), progress=False, log=lambda *a, **k: None)
    return os.path.join(directory, "out")
