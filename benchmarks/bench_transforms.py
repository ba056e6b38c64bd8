"""Throughput of the transforms: Image encode (keep bytes / re-encode JPEG) and decode,
Audio encode, in one process and through Beam on one and two workers, with where the
time goes. Peers measured in the same run:

- "tutorial": what users hand-write today (read the file, ask Pillow for the size
  without decoding, write an Example with the ``tfrecord`` package's writer);
- Pillow alone (open + full decode), the floor for anything that checks the pixels.

Prints a Markdown table; ratios are against peers from this same run, never against
numbers from another machine. Keep it short: the machine is shared.

    python benchmarks/bench_transforms.py [--images 300] [--beam-images 600]
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from PIL import Image as PILImage  # noqa: E402

from tfrecord_io.writer import RecordWriter  # noqa: E402
from transforms import Audio, Image, Int, decode_example, encode_row  # noqa: E402


def interleaved_best(fns, rounds=3):
    """Fastest time of each function over ``rounds`` rounds, the functions taking turns
    within each round, so that load from other work on this shared machine falls on
    all of them alike rather than on whichever ran during a busy spell."""
    best = {name: float("inf") for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def make_images(directory, n, size=(320, 240)):
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0 : size[1], 0 : size[0]]
    paths = []
    for i in range(n):
        base = np.stack([(x + i) % 256, (y * 2) % 256, (x + y) % 256], axis=-1)
        noise = rng.integers(0, 40, size=base.shape)
        arr = np.clip(base + noise, 0, 255).astype(np.uint8)
        path = os.path.join(directory, f"img{i:05d}.jpg")
        PILImage.fromarray(arr).save(path, "JPEG", quality=90)
        paths.append(path)
    return paths


def make_audio(directory, n, seconds=5.0, rate=44100):
    import soundfile as sf

    t = np.arange(int(seconds * rate)) / rate
    paths = []
    for i in range(n):
        data = np.stack([0.3 * np.sin(2 * np.pi * (220 + i) * t), 0.3 * np.sin(2 * np.pi * (330 + i) * t)], axis=1)
        path = os.path.join(directory, f"a{i:03d}.wav")
        sf.write(path, data.astype(np.float32), rate, subtype="PCM_16")
        paths.append(path)
    return paths


def tutorial_peer(paths, out_path):
    """The hand-written way: bytes + size from the header, tfrecord package writer."""
    from tfrecord.writer import TFRecordWriter

    w = TFRecordWriter(out_path)
    for i, p in enumerate(paths):
        with open(p, "rb") as f:
            data = f.read()
        width, height = PILImage.open(io.BytesIO(data)).size
        w.write({"image/encoded": (data, "byte"), "image/height": (height, "int"), "image/width": (width, "int"), "id": (i, "int")})
    w.close()


def pillow_decode(paths):
    for p in paths:
        with open(p, "rb") as f:
            im = PILImage.open(io.BytesIO(f.read()))
            im.load()


def encode_all(rows, spec):
    return [encode_row(r, spec) for r in rows]


def write_all(records, out_path):
    with RecordWriter(out_path) as w:
        for r in records:
            w.write_record(r)


def beam_run(rows, spec, out_prefix, workers, encode=True):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from transforms import EncodeExample

    try:
        from tfrecord_io import WriteToTFRecord  # the package's sink, once beam_io has landed
    except (ImportError, AttributeError):
        from apache_beam.io.tfrecordio import WriteToTFRecord
    if workers == 1:
        opts = ["--runner=DirectRunner", "--direct_num_workers=1"]
    else:
        opts = ["--runner=DirectRunner", "--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
    t = time.perf_counter()
    with beam.Pipeline(options=PipelineOptions(opts)) as p:
        rows_pc = p | beam.Create(rows, reshuffle=True)
        if encode:
            records = (rows_pc | EncodeExample(spec)).examples
        else:  # the same pipeline with a trivial step: Beam + sink cost alone
            records = rows_pc | beam.Map(lambda r: open(r["image"], "rb").read())
        records | WriteToTFRecord(out_prefix, num_shards=workers)
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--beam-images", type=int, default=600)
    ap.add_argument("--audio", type=int, default=12)
    ap.add_argument("--no-beam", action="store_true")
    args = ap.parse_args()

    tmp = tempfile.mkdtemp(prefix="bench_transforms_")
    paths = make_images(tmp, args.images)
    mb = sum(os.path.getsize(p) for p in paths) / 1e6
    n = len(paths)
    rows = [{"image": p, "id": i} for i, p in enumerate(paths)]
    keep = {"image": Image(), "id": Int()}
    jpeg = {"image": Image(reencode="jpeg", quality=90, resize=(224, 224)), "id": Int()}
    raw = {"image": Image(reencode="raw"), "id": Int()}

    results = []

    def row(name, seconds, count=n, megabytes=mb, note=""):
        results.append((name, count / seconds, megabytes / seconds, note))

    recs_keep = encode_all(rows, keep)
    fast = {"image": Image(verify=False), "id": Int()}
    t = interleaved_best({
        "pillow": lambda: pillow_decode(paths),
        "tutorial": lambda: tutorial_peer(paths, os.path.join(tmp, "tutorial.tfrecord")),
        "keep": lambda: encode_all(rows, keep),
        "fast": lambda: encode_all(rows, fast),
        "write": lambda: write_all(recs_keep, os.path.join(tmp, "keep.tfrecord")),
        "jpeg": lambda: encode_all(rows, jpeg),
        "raw": lambda: encode_all(rows, raw),
        "dec": lambda: [decode_example(r, keep) for r in recs_keep],
    })
    t_pillow, t_tut, t_keep, t_fast, t_write, t_jpeg, t_raw, t_dec = (
        t[k] for k in ("pillow", "tutorial", "keep", "fast", "write", "jpeg", "raw", "dec")
    )
    rec_mb = sum(len(r) for r in recs_keep) / 1e6

    row("peer: Pillow open + full decode", t_pillow, note="floor for a checked encode")
    row("peer: tutorial (bytes + header size + tfrecord writer)", t_tut, note="no pixel check")
    row("Image() keep bytes, encode_row", t_keep, note=f"{t_keep / t_pillow:.2f}x Pillow decode time")
    row("Image(verify=False) keep bytes, header only", t_fast, note=f"{t_tut / t_fast:.2f}x tutorial peer speed")
    row("  + framing (RecordWriter) of those Examples", t_write, megabytes=rec_mb, note=f"{t_write / (t_keep + t_write):.1%} of encode+write")
    row("Image(reencode=jpeg q90, resize 224)", t_jpeg)
    row("Image(reencode=raw)", t_raw)
    row("decode_example (keep-bytes JPEG -> array)", t_dec, megabytes=rec_mb, note=f"{t_dec / t_pillow:.2f}x Pillow decode time")

    apaths = make_audio(tmp, args.audio)
    seconds_audio = args.audio * 5.0
    amb = sum(os.path.getsize(p) for p in apaths) / 1e6
    arows = [{"audio": p} for p in apaths]
    ta = interleaved_best({
        "plain": lambda: encode_all(arows, {"audio": Audio(mono=True)}),
        "resample": lambda: encode_all(arows, {"audio": Audio(sample_rate=16000, mono=True)}),
    }, rounds=2)
    t_a, t_ar = ta["plain"], ta["resample"]
    results.append(("Audio(mono) 44.1 kHz stereo WAV", seconds_audio / t_a, amb / t_a, "audio s/s in the first column"))
    results.append(("Audio(16 kHz, mono) resample (soxr_hq)", seconds_audio / t_ar, amb / t_ar, "audio s/s in the first column"))

    print(f"\n{n} JPEG files 320x240 q90, {mb:.1f} MB; {args.audio} WAV clips of 5 s 44.1 kHz stereo\n")
    print("| what | items/s | MB/s | note |\n|---|---:|---:|---|")
    for name, ips, mbs, note in results:
        print(f"| {name} | {ips:,.0f} | {mbs:,.1f} | {note} |")
    print(f"\nkeep-bytes encode vs tutorial peer: {t_tut / t_keep:.2f}x its speed (ours decodes every image to check it)")

    if args.no_beam:
        return
    reps = max(1, args.beam_images // n)
    brows = [{"image": p, "id": i} for i, p in enumerate(paths * reps)]
    bmb = mb * reps
    print(f"\nBeam (DirectRunner; {len(brows)} images, {bmb:.1f} MB; wall time incl. pipeline start-up)\n")
    print("| pipeline | workers | images/s | MB/s | wall s |\n|---|---:|---:|---:|---:|")
    for workers in (1, 2):
        base = beam_run(brows, keep, os.path.join(tmp, f"base{workers}"), workers, encode=False)
        print(f"| read bytes -> sink (Beam + sink alone) | {workers} | {len(brows) / base:,.0f} | {bmb / base:,.1f} | {base:.1f} |")
        for name, spec in (("Image keep bytes", keep), ("Image re-encode JPEG 224", jpeg)):
            wall = beam_run(brows, spec, os.path.join(tmp, f"{name[:5]}{workers}"), workers)
            print(f"| {name} -> sink | {workers} | {len(brows) / wall:,.0f} | {bmb / wall:,.1f} | {wall:.1f} |")


if __name__ == "__main__":
    main()
