"""Real media made in the tests: Pillow images of each mode and format, audio written
with soundfile, and broken files. Shared by tests/test_transforms_*.py."""

from __future__ import annotations

import io

import numpy as np
import soundfile as sf
from PIL import Image


def pixels(height: int, width: int, channels: int, dtype="uint8", seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    arr = rng.integers(info.min, int(info.max) + 1, size=(height, width, channels), dtype=dtype)
    return arr


def gradient(height: int, width: int) -> np.ndarray:
    """A smooth RGB image: JPEG keeps it close, so lossy round trips can be bounded."""
    y, x = np.mgrid[0:height, 0:width]
    return np.stack(
        [
            (x * 255 // max(width - 1, 1)),
            (y * 255 // max(height - 1, 1)),
            ((x + y) * 127 // max(height + width - 2, 1)),
        ],
        axis=-1,
    ).astype(np.uint8)


def image_bytes(image: Image.Image, fmt: str, **params) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **params)
    return out.getvalue()


def png16(height: int = 9, width: int = 11, seed: int = 1):
    arr = pixels(height, width, 1, "uint16", seed)[..., 0]
    return arr, image_bytes(Image.fromarray(arr), "PNG")


def palette_png(transparent: bool):
    rgb = gradient(12, 16)
    img = Image.fromarray(rgb).quantize(colors=16)
    params = {"transparency": 0} if transparent else {}
    data = image_bytes(img, "PNG", **params)
    return img, data


def exif_jpeg(orientation: int, height: int = 8, width: int = 16):
    """A JPEG whose EXIF says how to rotate it, and the upright array it shows."""
    rgb = gradient(height, width)
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = image_bytes(Image.fromarray(rgb), "JPEG", quality=95, exif=exif.tobytes())
    return rgb, data


def sine(rate: int, seconds: float, channels: int, freq: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    chans = [0.5 * np.sin(2 * np.pi * freq * (c + 1) * t) for c in range(channels)]
    return np.stack(chans, axis=1).astype(np.float32)


def audio_bytes(samples: np.ndarray, rate: int, fmt: str, subtype=None) -> bytes:
    out = io.BytesIO()
    sf.write(out, samples, rate, format=fmt, subtype=subtype)
    return out.getvalue()


def truncated_jpeg() -> bytes:
    data = image_bytes(Image.fromarray(gradient(64, 64)), "JPEG", quality=90)
    return data[: len(data) // 2]
