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

from PIL import Image as PILImage

from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.transforms import Audio, Image, Int, decode_example, encode_row


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
        w.write(
            {
                "image/encoded": (data, "byte"),
                "image/height": (height, "int"),
                "image/width": (width, "int"),
                "id": (i, "int"),
            }
        )
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


def beam_options(workers):
    from apache_beam.options.pipeline_options import PipelineOptions

    if workers == 1:
        return PipelineOptions(["--runner=DirectRunner", "--direct_num_workers=1"])
    return PipelineOptions(
        ["--runner=DirectRunner", "--direct_running_mode=multi_processing", f"--direct_num_workers={workers}"]
    )


def _read_image(row):
    with open(row["image"], "rb") as f:
        return f.read()


def beam_encode(rows, spec, out_prefix, workers):
    """Wall time of Create -> EncodeExample (or a plain read when spec is None) -> sink."""
    import apache_beam as beam

    from tfrecord_io import WriteToTFRecord
    from tfrecord_io.transforms import EncodeExample

    t = time.perf_counter()
    with beam.Pipeline(options=beam_options(workers)) as p:
        rows_pc = p | beam.Create(rows, reshuffle=True)
        records = rows_pc | beam.Map(_read_image) if spec is None else (rows_pc | EncodeExample(spec)).examples
        records | WriteToTFRecord(out_prefix, num_shards=workers)
    return time.perf_counter() - t


def beam_decode(pattern, spec, workers):
    """Wall time of the split read -> DecodeExample -> count."""
    import apache_beam as beam

    from tfrecord_io import ReadFromTFRecord
    from tfrecord_io.transforms import DecodeExample

    t = time.perf_counter()
    with beam.Pipeline(options=beam_options(workers)) as p:
        (
            p | ReadFromTFRecord(pattern, desired_bundle_size=1 << 20) | DecodeExample(spec)
        ).decoded | beam.combiners.Count.Globally()
    return time.perf_counter() - t


CATEGORIES = (
    ("Pillow (decode/encode/resize)", ("PIL", "Imaging")),
    ("audio libs (soundfile, soxr, librosa)", ("soundfile", "soxr", "librosa", "_cffi", "scipy")),
    (
        "framing + CRC + sink/source (tfrecord_io)",
        (
            "tfrecord_io/format/framing",
            "tfrecord_io/format/crc",
            "tfrecord_io/format/writer",
            "tfrecord_io/format/reader",
            "tfrecord_io/beam_",
            "crc32c",
            "tfrecord_io/storage/files",
        ),
    ),
    (
        "Example protobuf (codec)",
        ("tfrecord_io/format/codec", "google/protobuf", "SerializeToString", "ParseFromString", "MergeFromString"),
    ),
    ("transforms (Python glue)", ("/transforms/",)),
    # Beam's own code, plus the stdlib it drives (signature inspection, pickling, copies)
    (
        "Beam (runner, coders, bookkeeping)",
        ("apache_beam", "inspect.py", "pickle", "dill", "copy.py", "typing.py", "enum.py", "threading.py", "queue.py"),
    ),
    ("file IO (open, read, stat)", ("_io.", "io.open", "posix.", "builtins.open")),
    ("waiting (locks, queues)", ("acquire", "wait", "select", "poll")),
)


def profile_breakdown(fn):
    """Share of profiled time per component for one in-process run of ``fn``.

    cProfile attributes each function's own time (tottime); it inflates pure-Python
    parts (Beam, glue) more than C parts, so read these as upper bounds for Python."""
    import cProfile
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    fn()
    prof.disable()
    totals = {name: 0.0 for name, _ in CATEGORIES}
    totals["other (NumPy, stdlib, file IO)"] = 0.0
    for (filename, _, func), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():
        where = f"{filename}:{func}"
        for name, needles in CATEGORIES:
            if any(n in where for n in needles):
                totals[name] += tottime
                break
        else:
            totals["other (NumPy, stdlib, file IO)"] += tottime
    whole = sum(totals.values()) or 1.0
    return {k: v / whole for k, v in totals.items()}


def marginal(run, small, large, repeat=2):
    """(items/s, start-up s) from wall times at two sizes (fastest of ``repeat`` runs
    each): a pipeline's start-up (seconds, more with worker processes) cancels out of
    the difference. None when load from other work swamped the difference."""
    t_small = min(run(small) for _ in range(repeat))
    t_large = min(run(large) for _ in range(repeat))
    if t_large <= t_small * 1.05:
        return None, t_small
    rate = (large - small) / (t_large - t_small)
    return rate, max(t_small - small / rate, 0.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--beam-images", type=int, default=600)
    ap.add_argument("--audio", type=int, default=12)
    ap.add_argument("--no-beam", action="store_true")
    ap.add_argument("--no-beam-rates", action="store_true", help="only the profile of the Beam runs")
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
    t = interleaved_best(
        {
            "pillow": lambda: pillow_decode(paths),
            "tutorial": lambda: tutorial_peer(paths, os.path.join(tmp, "tutorial.tfrecord")),
            "keep": lambda: encode_all(rows, keep),
            "fast": lambda: encode_all(rows, fast),
            "write": lambda: write_all(recs_keep, os.path.join(tmp, "keep.tfrecord")),
            "jpeg": lambda: encode_all(rows, jpeg),
            "raw": lambda: encode_all(rows, raw),
            "dec": lambda: [decode_example(r, keep) for r in recs_keep],
        }
    )
    t_pillow, t_tut, t_keep, t_fast, t_write, t_jpeg, t_raw, t_dec = (
        t[k] for k in ("pillow", "tutorial", "keep", "fast", "write", "jpeg", "raw", "dec")
    )
    rec_mb = sum(len(r) for r in recs_keep) / 1e6

    row("peer: Pillow open + full decode", t_pillow, note="floor for a checked encode")
    row("peer: tutorial (bytes + header size + tfrecord writer)", t_tut, note="no pixel check")
    row("Image() keep bytes, encode_row", t_keep, note=f"{t_keep / t_pillow:.2f}x Pillow decode time")
    row("Image(verify=False) keep bytes, header only", t_fast, note=f"{t_tut / t_fast:.2f}x tutorial peer speed")
    row(
        "  + framing (RecordWriter) of those Examples",
        t_write,
        megabytes=rec_mb,
        note=f"{t_write / (t_keep + t_write):.1%} of encode+write",
    )
    row("Image(reencode=jpeg q90, resize 224)", t_jpeg)
    row("Image(reencode=raw)", t_raw)
    row(
        "decode_example (keep-bytes JPEG -> array)",
        t_dec,
        megabytes=rec_mb,
        note=f"{t_dec / t_pillow:.2f}x Pillow decode time",
    )

    apaths = make_audio(tmp, args.audio)
    seconds_audio = args.audio * 5.0
    amb = sum(os.path.getsize(p) for p in apaths) / 1e6
    arows = [{"audio": p} for p in apaths]
    ta = interleaved_best(
        {
            "plain": lambda: encode_all(arows, {"audio": Audio(mono=True)}),
            "resample": lambda: encode_all(arows, {"audio": Audio(sample_rate=16000, mono=True)}),
        },
        rounds=2,
    )
    t_a, t_ar = ta["plain"], ta["resample"]
    results.append(("Audio(mono) 44.1 kHz stereo WAV", seconds_audio / t_a, amb / t_a, "audio s/s in the first column"))
    results.append(
        ("Audio(16 kHz, mono) resample (soxr_hq)", seconds_audio / t_ar, amb / t_ar, "audio s/s in the first column")
    )

    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"\n{n} JPEG files 320x240 q90, {mb:.1f} MB; {args.audio} WAV clips of 5 s 44.1 kHz stereo\n")
    print("| what | items/s | MB/s | note |\n|---|---:|---:|---|")
    for name, ips, mbs, note in results:
        print(f"| {name} | {ips:,.0f} | {mbs:,.1f} | {note} |")
    print(
        f"\nkeep-bytes encode vs tutorial peer: {t_tut / t_keep:.2f}x its speed (ours decodes every image to check it)"
    )

    if args.no_beam:
        return
    reps = max(1, args.beam_images // n)
    mb_per_image = mb / n
    small = [{"image": p, "id": i} for i, p in enumerate(paths * reps)]
    large = [{"image": p, "id": i} for i, p in enumerate(paths * reps * 3)]
    by_len = {len(small): small, len(large): large}
    a_small = [{"audio": p} for p in apaths]
    a_large = a_small * 3
    a_by_len = {len(a_small): a_small, len(a_large): a_large}
    sec_per_clip = 5.0
    for size, rows_ in by_len.items():
        write_all(encode_all(rows_, keep), os.path.join(tmp, f"dec{size}.tfrecord"))
    print(
        f"\nWhere the time goes: cProfile of one in-process (1 worker) Beam run each after a warm-up run "
        f"({len(small)} images / {len(a_small)} clips, pipeline start-up included), share of profiled time\n"
    )
    jobs = {
        "encode keep bytes": lambda: beam_encode(small, keep, os.path.join(tmp, "pk"), 1),
        "encode JPEG 224": lambda: beam_encode(small, jpeg, os.path.join(tmp, "pj"), 1),
        "decode (split read)": lambda: beam_decode(os.path.join(tmp, f"dec{len(small)}.tfrecord"), keep, 1),
        "encode audio 16 kHz": lambda: beam_encode(
            a_small, {"audio": Audio(sample_rate=16000, mono=True)}, os.path.join(tmp, "pa"), 1
        ),
    }
    for job in jobs.values():  # warm up: imports, numba JIT in librosa, Beam's caches
        job()
    shares = {name: profile_breakdown(job) for name, job in jobs.items()}
    cats = list(next(iter(shares.values())))
    print("| component | " + " | ".join(jobs) + " |\n|---|" + "---:|" * len(jobs))
    for cat in cats:
        print(f"| {cat} | " + " | ".join(f"{shares[j][cat]:.0%}" for j in jobs) + " |")
    sys.stdout.flush()
    if args.no_beam_rates:
        return

    print(
        f"\nBeam, DirectRunner: marginal throughput from runs of {len(small)} and {len(large)} images "
        f"({args.audio} and {3 * args.audio} clips; fastest of 2 runs each), "
        "so pipeline start-up is reported apart; sink/source = tfrecord_io\n"
    )
    print("| pipeline | workers | items/s | MB/s | start-up s |\n|---|---:|---:|---:|---:|")
    for workers in (1, 2):
        cases = [
            (
                "read file bytes -> sink (Beam + sink alone)",
                lambda k: beam_encode(by_len[k], None, os.path.join(tmp, f"b{workers}-{k}"), workers),
                len(small),
                len(large),
                mb_per_image,
            ),
            (
                "EncodeExample Image keep bytes -> sink",
                lambda k: beam_encode(by_len[k], keep, os.path.join(tmp, f"k{workers}-{k}"), workers),
                len(small),
                len(large),
                mb_per_image,
            ),
            (
                "EncodeExample Image re-encode JPEG 224 -> sink",
                lambda k: beam_encode(by_len[k], jpeg, os.path.join(tmp, f"j{workers}-{k}"), workers),
                len(small),
                len(large),
                mb_per_image,
            ),
            (
                "split read -> DecodeExample (JPEG -> array)",
                lambda k: beam_decode(os.path.join(tmp, f"dec{k}.tfrecord"), keep, workers),
                len(small),
                len(large),
                mb_per_image,
            ),
            (
                "EncodeExample Audio(16 kHz, mono) -> sink [audio s/s]",
                lambda k: beam_encode(
                    a_by_len[k],
                    {"audio": Audio(sample_rate=16000, mono=True)},
                    os.path.join(tmp, f"a{workers}-{k}"),
                    workers,
                ),
                len(a_small),
                len(a_large),
                None,
            ),
        ]
        for name, run, lo, hi, mb_each in cases:
            rate, startup = marginal(run, lo, hi)
            if rate is None:
                print(f"| {name} | {workers} | n/a (machine too busy) | | {startup:.1f} |")
            elif mb_each is None:  # audio: report seconds of audio per second
                clip_mb = amb / args.audio
                print(f"| {name} | {workers} | {rate * sec_per_clip:,.0f} | {rate * clip_mb:,.1f} | {startup:.1f} |")
            else:
                print(f"| {name} | {workers} | {rate:,.0f} | {rate * mb_each:,.1f} | {startup:.1f} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
