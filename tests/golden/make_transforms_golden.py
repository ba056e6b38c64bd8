"""Writes the golden Example of the transforms package (run from the repo root):

    python tests/golden/make_transforms_golden.py

Inputs (committed beside this script, made once from integer formulas so they never
change): ``transforms_input.png`` (RGB 6x5), ``transforms_input16.png`` (16-bit
grayscale 4x3), ``transforms_input.wav`` (PCM-16 stereo, 8 kHz, 40 frames).
Output: ``transforms_example.tfrecord``, one Example made by ``encode_row(ROW, SPEC)``.
Only byte-stable paths are used (kept file bytes, raw pixels, PCM samples), so
re-encoding ROW with SPEC must give exactly the committed record; tests check that,
and check that TensorFlow parses it with the spec ``tf_parse_spec`` gives.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

from tfrecord_io.transforms import Array, Audio, Float, Image, Int, Label, Text  # noqa: E402

PNG = os.path.join(HERE, "transforms_input.png")
PNG16 = os.path.join(HERE, "transforms_input16.png")
WAV = os.path.join(HERE, "transforms_input.wav")
RECORD = os.path.join(HERE, "transforms_example.tfrecord")

SPEC = {
    "image": Image(),
    "gray": Image(mode="L", reencode="raw"),
    "depth": Image(),
    "audio": Audio(),
    "caption": Text(normalize="NFC"),
    "label": Label(vocabulary=["cat", "dog", "bird"]),
    "count": Int(),
    "score": Float(),
    "emb": Array(dtype="float32", shape=(2, 3)),
    "weights": Array(dtype="float64"),
}

ROW = {
    "image": PNG,
    "gray": PNG,
    "depth": PNG16,
    "audio": WAV,
    "caption": "Un chat sur le tapis — 猫",
    "label": "dog",
    "count": 42,
    "score": 0.5,
    "emb": [[0.0, 0.25, 0.5], [0.75, 1.0, -1.0]],
    "weights": [1.0 / 3.0, 2.0, -0.125],
}


def rgb_pixels():
    import numpy as np

    y, x = np.mgrid[0:5, 0:6]
    return np.stack([x * 40, y * 50, (x * y * 10) % 256], axis=-1).astype(np.uint8)


def depth_pixels():
    import numpy as np

    return np.arange(12, dtype=np.uint16).reshape(3, 4) * 5000 + 7


def pcm_samples():
    import numpy as np

    t = np.arange(40)
    left = ((t * 1237) % 2001 - 1000) * 16
    right = ((t * 3571) % 1001 - 500) * 32
    return np.stack([left, right], axis=1).astype(np.int16)


def make_inputs() -> None:
    import soundfile as sf
    from PIL import Image as PILImage

    PILImage.fromarray(rgb_pixels()).save(PNG)
    PILImage.fromarray(depth_pixels()).save(PNG16)
    sf.write(WAV, pcm_samples(), 8000, subtype="PCM_16")


def main() -> None:
    from tfrecord_io.format.writer import RecordWriter
    from tfrecord_io.transforms import encode_row

    if not all(os.path.exists(p) for p in (PNG, PNG16, WAV)):
        make_inputs()
    with RecordWriter(RECORD, atomic=True) as w:
        w.write_record(encode_row(ROW, SPEC))
    print(f"wrote {RECORD}")


if __name__ == "__main__":
    main()
