"""TensorFlow peers for bench_core.py, run in a separate interpreter (TensorFlow and
the ``tfrecord`` package cannot share a process). Prints one JSON line:
``{case: [median_seconds, records, payload_bytes]}``.

Usage: python _bench_tf.py SMALL.tfrecord LARGE.tfrecord BATCH REPEAT [wall|cpu]
"""

import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
import tensorflow as tf

CLOCK = time.process_time if sys.argv[5:6] == ["cpu"] else time.perf_counter


def median_time(fn, repeat, warmup=None):
    if warmup is not None:  # first-call costs (tracing, op setup) are not throughput
        warmup()
    times = []
    for _ in range(repeat):
        t0 = CLOCK()
        fn()
        times.append(CLOCK() - t0)
    return statistics.median(times)


def main():
    small, large, batch, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    records = [r.numpy() for r in tf.data.TFRecordDataset(small)]
    n, nbytes = len(records), sum(map(len, records))
    large_n = sum(int(tf.size(b)) for b in tf.data.TFRecordDataset(large).batch(256))
    large_bytes = os.path.getsize(large) - 16 * large_n
    out = {}

    def read_batched(path, size=batch):
        for _ in tf.data.TFRecordDataset(path, buffer_size=1 << 20).batch(size):
            pass

    def warm_read(path):
        for _ in tf.data.TFRecordDataset(path).take(2).batch(batch):
            pass

    out["read small: tf.data TFRecordDataset (batched)"] = [
        median_time(lambda: read_batched(small), repeat, lambda: warm_read(small)),
        n,
        nbytes,
    ]
    out["read large: tf.data TFRecordDataset (batches of 8)"] = [
        median_time(lambda: read_batched(large, 8), repeat, lambda: warm_read(large)),
        large_n,
        large_bytes,
    ]

    spec = {
        "label": tf.io.FixedLenFeature([], tf.int64),
        "floats": tf.io.FixedLenFeature([8], tf.float32),
        "text": tf.io.FixedLenFeature([], tf.string),
    }
    batches = [tf.constant(records[i : i + batch]) for i in range(0, n, batch)]

    def parse_batches():
        for b in batches:
            tf.io.parse_example(b, spec)

    out[f"parse batched: tf.io.parse_example ({batch})"] = [
        median_time(parse_batches, repeat, lambda: tf.io.parse_example(batches[0], spec)),
        n,
        nbytes,
    ]

    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "out.tfrecord")

        def write_bytes():
            with tf.io.TFRecordWriter(path) as w:
                for r in records:
                    w.write(r)

        out["write bytes: tf.io.TFRecordWriter"] = [median_time(write_bytes, repeat), n, nbytes]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
