"""The report's statistics job against the plain loop a user would write.

Data: a version directory of demo-like Examples (a 64x64 PNG, 0.25 s of 16 kHz
float32 audio, a caption and a label: ~20 KB per record) in 4 shards per split, with
the metadata a build writes (``dataset_writer.write_info``: ``tfrecord_io_info.json`` and
TFDS's files), written to a temp dir (page cache).

Cases, timed in one run:
- ``plain loop``: one process reads every shard with ``tfrecord_iterator``, parses
  each Example once and folds it into the same statistics (``observe_record`` +
  ``SplitStatsFn``) and a bottom-k sample per split and label: what a user would write;
- ``stats job``: ``run_stats_job`` on the DirectRunner, 2 worker processes;
- ``whole report``: ``run_report`` (the job, sample decoding, charts, the page).

    python benchmarks/bench_report.py --records 20000
"""

from __future__ import annotations

import argparse
import heapq
import io
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.transforms import Audio, Image, Label, Text, encode_row

SPLITS = {"train": 0.8, "test": 0.2}
SHARDS = 4


def make_dataset(root: str, records: int) -> str:
    """Write ``root/v1`` (shards, the metadata a build writes, LATEST); return the root."""
    import soundfile as sf
    from PIL import Image as PILImage
    from PIL import ImageDraw

    from tfrecord_io.dataset import dataset_writer
    from tfrecord_io.dataset.dataset_writer import sha256_file
    from tfrecord_io.transforms.rows import check_spec

    spec = {
        "image": Image(mode="RGB", reencode="png"),
        "audio": Audio(sample_rate=16000, mono=True),
        "caption": Text(),
        "label": Label(vocabulary=["circle", "square", "triangle"]),
    }
    pngs, wavs = [], []
    for i in range(12):
        img = PILImage.new("RGB", (64, 64), (20 * i, 120, 200 - 10 * i))
        ImageDraw.Draw(img).ellipse([8 + i, 8, 56 - i, 56], fill=(220, 30, 30))
        out = io.BytesIO()
        img.save(out, "PNG")
        pngs.append(out.getvalue())
        t = np.arange(4000) / 16000.0
        out = io.BytesIO()
        sf.write(out, (0.3 * np.sin(2 * np.pi * (300 + 40 * i) * t)).astype(np.float32), 16000, format="WAV")
        wavs.append(out.getvalue())
    encoded = [
        encode_row(
            {
                "image": pngs[i],
                "audio": wavs[i],
                "caption": f"caption number {i}" * (1 + i % 3),
                "label": ["circle", "square", "triangle"][i % 3],
            },
            spec,
        )
        for i in range(12)
    ]
    version = os.path.join(root, "v1")
    splits = {}
    k = 0
    for split, share in SPLITS.items():
        n = int(records * share)
        os.makedirs(os.path.join(version, split))
        shards = []
        for s in range(SHARDS):
            rel = f"{split}/bench-{split}.tfrecord-{s:05d}-of-{SHARDS:05d}"
            count = n // SHARDS + (1 if s < n % SHARDS else 0)
            writer = RecordWriter(os.path.join(version, rel), "", index_path=os.path.join(version, rel + ".index"))
            writer.write_records([encoded[(k + j) % 12] for j in range(count)])
            writer.close()
            k += count
            path = os.path.join(version, rel)
            shards.append(
                {
                    "path": rel,
                    "index": rel + ".index",
                    "records": count,
                    "bytes": os.path.getsize(path),
                    "sha256": sha256_file(path),
                }
            )
        splits[split] = {"records": n, "bytes": sum(s["bytes"] for s in shards), "num_shards": SHARDS, "shards": shards}
    info = {
        "name": "bench",
        "version": "v1",
        "encoders": {c: e.to_config() for c, e in spec.items()},
        "features": {s.key: s.to_dict() for s in check_spec(spec)},
        "compression": "",
        "splits": splits,
        "records": sum(s["records"] for s in splits.values()),
        "rows_in": records,
        "rejected": 0,
    }
    # what a build writes: TFDS's files, then tfrecord_io_info.json (the commit protocol's
    # own function), then LATEST
    dataset_writer.write_info(version, info)
    dataset_writer.publish(root, "v1")
    return root


def plain_loop(root: str, samples: int) -> int:
    from tfrecord_io.format.index import load_index
    from tfrecord_io.format.reader import tfrecord_iterator
    from tfrecord_io.pipelines.report.report_job import _columns, resolve_input
    from tfrecord_io.pipelines.report.stats import SplitStatsFn, label_column, observe_record, sample_key

    inp = resolve_input([root])
    columns = _columns(inp)
    label = label_column(columns)
    fn = SplitStatsFn(columns)
    accs, heaps, n = {}, {}, 0
    for shard in inp.shards:
        acc = accs.setdefault(shard.split, fn.create_accumulator())
        offsets = load_index(shard.path + ".index").offsets.tolist()
        for offset, record in zip(offsets, tfrecord_iterator(shard.path)):
            seen = observe_record(bytes(record), columns)
            fn.add_input(acc, seen)
            group = (shard.split, seen["columns"][label.name]["id"])
            heap = heaps.setdefault(group, [])
            item = (-int(sample_key(shard.relpath, offset), 16), offset)  # keep the `samples` smallest keys
            if len(heap) < samples:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
            n += 1
    for acc in accs.values():
        fn.extract_output(acc)
    return n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=20000)
    parser.add_argument("--samples", type=int, default=6)
    args = parser.parse_args()

    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.pipelines.report.report_job import _columns, resolve_input, run_report
    from tfrecord_io.pipelines.report.stats import run_stats_job

    with tempfile.TemporaryDirectory(prefix="bench-report-") as tmp:
        root = make_dataset(os.path.join(tmp, "data"), args.records)
        size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(root) for f in fs)
        print(f"{args.records:,} records, {size / 1e6:,.0f} MB, {len(SPLITS) * SHARDS} shards")
        two = PipelineOptions(
            [
                "--runner=DirectRunner",
                "--direct_num_workers=2",
                "--direct_running_mode=multi_processing",
                "--default_sdk_harness_log_level=ERROR",
            ]
        )
        rows = []
        t0 = time.perf_counter()
        n = plain_loop(root, args.samples)
        rows.append(("plain loop (1 process)", time.perf_counter() - t0, n))
        inp = resolve_input([root])
        t0 = time.perf_counter()
        result = run_stats_job(inp.shards, _columns(inp), two, samples=args.samples, progress=False)
        rows.append(
            (
                "stats job (DirectRunner, 2 workers)",
                time.perf_counter() - t0,
                sum(s["records"] for s in result.splits.values()),
            )
        )
        t0 = time.perf_counter()
        summary = run_report([root], two, os.path.join(tmp, "report.html"), samples=args.samples, progress=False)
        rows.append(
            (
                f"whole report ({summary.bytes / 1e6:.1f} MB page)",
                time.perf_counter() - t0,
                sum(summary.splits.values()),
            )
        )
    base = rows[0][1]
    print("| case | seconds | records/s | vs plain loop |\n|---|---:|---:|---:|")
    for name, seconds, n in rows:
        print(f"| {name} | {seconds:.1f} | {n / seconds:,.0f} | {base / seconds:.2f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
