"""Images with Pillow: keep the original bytes, re-encode, or store raw pixels.

Keys written (``<p>`` is the column name or ``key=``):

=================  ======  ==========================================================
``<p>/encoded``    bytes   the image file (JPEG/PNG/WebP...) or, for ``raw``, the pixels
``<p>/format``     bytes   ``jpeg``, ``png``, ``webp``, ... or ``raw``
``<p>/height``     int     rows of the decoded array
``<p>/width``      int     columns of the decoded array
``<p>/channels``   int     1 (L, I;16, I, F), 2 (LA), 3 (RGB), 4 (RGBA)
``<p>/mode``       bytes   Pillow mode of the decoded array (``RGB``, ``L``, ``I;16`` ...)
``<p>/dtype``      bytes   NumPy dtype of the decoded array (``uint8``, ``uint16`` ...)
=================  ======  ==========================================================

Height, width, channels and dtype always describe what :meth:`Image.decode` (or
``tf.io.decode_image(..., channels=channels)`` for 8-bit images) gives back, so a
reader can allocate before decoding. Palette and 1-bit images decode to RGB/RGBA or
L; CMYK and YCbCr to RGB; 16-bit grayscale stays 16-bit (``uint16``). Asking for
another bit depth (``mode="L"`` of a 16-bit PNG, ``mode="I;16"`` of an 8-bit one)
rescales the range (x / 257, x * 257) instead of Pillow's clipping at 255.
16-bit RGB PNGs are read by Pillow as 8-bit RGB (a Pillow limitation).

Why re-encode when asked only to keep bytes: if the EXIF orientation is not 1 (and
``exif_transpose`` is on), or a mode or size change is asked for, the stored bytes must
show what the height and width say, so the image is re-encoded in its own format
(PNG stays lossless; JPEG uses ``quality``). Otherwise the original bytes are kept
byte for byte, after a decode of all their data to prove they are not truncated or
corrupt. For a JPEG kept as it is, that decode runs at 1/8 scale (Pillow's ``draft``,
libjpeg's DCT scaling): every entropy-coded byte is still decoded, so truncated or
broken scan data fails exactly as in a full decode, but the inverse DCT, upsampling and
colour conversion of full-size pixels, which nothing here keeps, are skipped (0.30 ms
instead of 0.53 ms for a 320x240 photo). Every other case decodes in full.

A plain JPEG kept as it is takes a shorter road to the same decode: Pillow's
``Image.open`` parses the header in Python (quantisation tables, markers, EXIF, ...:
about 45 us for a 16x16 thumbnail, more than its decode), none of which a kept JPEG
needs. :func:`_plain_jpeg_frame` reads only the frame header and accepts only files
whose markers Pillow's parser takes without a check of its own (JFIF/Adobe with their
fields, other APPn, comments, tables, one baseline/extended/progressive 8-bit frame
of 1 or 3 components, no EXIF/XMP, ICC, Photoshop or MPO segment), and the same
libjpeg decoder Pillow's ``load`` runs is then fed the whole file
(``Image.frombytes(..., "jpeg", ...)``, the tile Pillow would make). Anything else,
and any failure on that road, goes the full way, which alone rejects a row: the same
files are accepted with the same features, and rejected with the same reasons.

Decompression bombs: an image whose pixel count exceeds ``max_pixels`` (default:
Pillow's ``Image.MAX_IMAGE_PIXELS`` at the time of encoding) is rejected from its
header, before any pixel is decoded.
"""

from __future__ import annotations

import io
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..encode_errors import EncodeError
from ..media import describe, load_media
from ..spec import FeatureSpec
from .base import Encoder, Features, Requirement, scalar, text

try:
    from PIL import Image as PILImage
    from PIL import ImageOps, UnidentifiedImageError
except ImportError as _err:  # pragma: no cover - Pillow is in the [media] extra
    PILImage = None  # type: ignore[assignment]
    _IMPORT_ERROR: Optional[ImportError] = _err
else:
    _IMPORT_ERROR = None

# Pillow mode -> (channels, NumPy dtype) of the array ``np.asarray`` gives.
MODE_INFO: Dict[str, Tuple[int, str]] = {
    "L": (1, "uint8"),
    "LA": (2, "uint8"),
    "RGB": (3, "uint8"),
    "RGBA": (4, "uint8"),
    "I;16": (1, "uint16"),
    "I": (1, "int32"),
    "F": (1, "float32"),
}

# Modes a decoder cannot hand out as is -> the mode they are converted to.
_CANONICAL = {
    "1": "L",
    "CMYK": "RGB",
    "YCbCr": "RGB",
    "LAB": "RGB",
    "HSV": "RGB",
    "RGBX": "RGB",
    "RGBa": "RGBA",
    "La": "LA",
    "PA": "RGBA",
    "I;16L": "I;16",
    "I;16B": "I;16",
    "I;16N": "I;16",
}

_FORMATS = {"jpeg": "JPEG", "jpg": "JPEG", "png": "PNG", "webp": "WEBP", "bmp": "BMP", "tiff": "TIFF", "gif": "GIF"}
# Source formats Pillow reads but whose re-encoding goes to another writer.
_REWRITE_AS = {"MPO": "JPEG"}
# Modes each writer stores without changing them.
_WRITER_MODES = {
    "JPEG": {"L", "RGB"},
    "WEBP": {"RGB", "RGBA"},
    "PNG": {"L", "LA", "RGB", "RGBA", "I;16", "I"},
    "BMP": {"L", "RGB"},
    "TIFF": {"L", "LA", "RGB", "RGBA", "I;16", "F"},
    "GIF": {"L"},
}

_RESAMPLE = ("nearest", "bilinear", "bicubic", "lanczos", "box", "hamming")


# Segments Pillow's JPEG parser stores without checking them: APP3-APP12 and APP15 (APP0,
# APP14 are checked below; APP1 may hold an orientation, APP2 an ICC profile or MPO index,
# APP13 a Photoshop block Pillow parses), COM, and the tables libjpeg itself checks.
_PLAIN_SEGMENTS = frozenset([0xC4, 0xDB, 0xDD, 0xFE, *range(0xE3, 0xED), 0xEF])
_PLAIN_FRAMES = frozenset([0xC0, 0xC1, 0xC2])  # baseline, extended sequential, progressive (Huffman)


def _plain_jpeg_frame(data: bytes) -> Optional[Tuple[int, int, str]]:
    """``(width, height, mode)`` of a JPEG whose header Pillow would open without a
    remark (see the module docstring), read from its frame header; ``None`` for
    anything else, which then goes through ``Image.open``. Reads the header segments
    only (a few hundred bytes), never the scan."""
    if not data.startswith(b"\xff\xd8\xff"):
        return None
    size = len(data)
    pos = 2
    frame: Optional[Tuple[int, int, str]] = None
    while pos + 4 <= size:
        if data[pos] != 0xFF:
            return None  # junk between segments: Pillow skips it, libjpeg warns; the full path decides
        marker = data[pos + 1]
        length = (data[pos + 2] << 8) | data[pos + 3]
        end = pos + 2 + length
        if length < 2 or end > size:
            return None
        if marker == 0xDA:  # start of scan: the header is complete
            return frame
        if marker in _PLAIN_FRAMES:
            if frame is not None or length < 8 or data[pos + 4] != 8:
                return None  # a second frame, or not 8-bit: Pillow's own messages
            height = (data[pos + 5] << 8) | data[pos + 6]
            width = (data[pos + 7] << 8) | data[pos + 8]
            mode = {1: "L", 3: "RGB"}.get(data[pos + 9])
            if mode is None or width == 0 or height == 0:
                return None
            frame = (width, height, mode)
        elif marker == 0xE0:
            # APP0: Pillow reads a JFIF version (i16 at 5) and fails on a shorter one
            if data.startswith(b"JFIF", pos + 4) and length - 2 < 7:
                return None
        elif marker == 0xEE:
            if data.startswith(b"Adobe", pos + 4) and length - 2 < 7:  # Pillow reads i16 at 5
                return None
        elif marker not in _PLAIN_SEGMENTS:
            return None
        pos = end
    return None


def _draft_scale(width: int, height: int) -> int:
    """The DCT scale Pillow's ``draft(mode, (width // 8, height // 8))`` picks (1, 2, 4 or 8)."""
    ratio = min(width // max(1, width // 8), height // max(1, height // 8))
    return next(s for s in (8, 4, 2, 1) if ratio >= s)


def _require_pillow() -> None:
    if PILImage is None:
        raise ImportError(f"the Image encoder needs Pillow: pip install 'tfrecord-io[media]' ({_IMPORT_ERROR})")


def canonical_mode(image: PILImage.Image) -> str:
    """The mode an image of this mode is decoded to (palette -> RGB or RGBA, ...)."""
    mode = image.mode
    if mode == "P":
        return "RGBA" if "transparency" in image.info else "RGB"
    mode = _CANONICAL.get(mode, mode)
    if mode not in MODE_INFO:
        return "RGB"
    return mode


_DEEP = ("I;16", "I;16L", "I;16B", "I;16N", "I")


def _to_mode(image: PILImage.Image, mode: str) -> PILImage.Image:
    """Convert like Pillow, except between bit depths: Pillow clips 16-bit values to
    255 when going to 8 bits, and leaves 8-bit values unscaled going up; here the
    full range maps to the full range (x / 257 down, x * 257 up)."""
    if image.mode == mode:
        return image
    if image.mode in _DEEP and mode in ("L", "LA", "RGB", "RGBA"):
        wide = np.asarray(image).astype(np.int64)
        small = np.clip((wide + 128) // 257, 0, 255).astype(np.uint8)
        return PILImage.fromarray(small).convert(mode)
    if mode == "I;16" and image.mode not in _DEEP and image.mode != "F":
        gray = np.asarray(_to_mode(image, "L"), dtype=np.uint16) * np.uint16(257)
        return PILImage.fromarray(gray)
    if image.mode == "P" and mode in ("RGB", "RGBA", "L", "LA"):
        return image.convert("RGBA").convert(mode) if "transparency" in image.info else image.convert(mode)
    if mode == "I;16" and image.mode in ("I;16L", "I;16B", "I;16N"):
        return image.convert("I").convert("I;16") if image.mode == "I;16B" else image.convert("I;16")
    return image.convert(mode)


def image_array(image: PILImage.Image, mode: str) -> np.ndarray:
    """``(height, width, channels)`` array of ``image`` converted to ``mode``."""
    arr = np.asarray(_to_mode(image, mode))
    channels, dtype = MODE_INFO[mode]
    arr = arr.astype(np.dtype(dtype), copy=False)
    return arr.reshape(arr.shape[0], arr.shape[1], channels)


class Image(Encoder):
    """Encode an image column (a path or the file's bytes).

    Args:
        mode: convert to this Pillow mode (``"RGB"``, ``"L"``, ``"RGBA"``, ``"LA"``,
            ``"I;16"``); None keeps the image's own (made canonical, see module doc).
        reencode: None keeps the original bytes when nothing changes; ``"jpeg"``,
            ``"png"``, ``"webp"``... re-encodes; ``"raw"`` stores the pixel array's bytes.
        quality: JPEG/WebP quality for re-encoding.
        resize: ``(width, height)`` to resize to (Pillow's order), or None.
        resample: ``nearest``, ``bilinear``, ``bicubic``, ``lanczos``, ``box``, ``hamming``.
        exif_transpose: apply the EXIF orientation, so pixels are stored upright.
        max_pixels: reject larger images (decompression bombs); None means Pillow's
            ``Image.MAX_IMAGE_PIXELS`` (0 or negative disables the check).
        max_bytes: reject files larger than this many bytes.
        verify: decode every image in full, so truncated or corrupt pixel data is
            rejected. ``False`` reads only the header when the bytes are kept
            unchanged (about 3x faster on JPEGs): for data already checked.
    """

    def __init__(
        self,
        mode: Optional[str] = None,
        reencode: Optional[str] = None,
        quality: int = 95,
        resize: Optional[Tuple[int, int]] = None,
        resample: str = "bilinear",
        exif_transpose: bool = True,
        max_pixels: Optional[int] = None,
        max_bytes: Optional[int] = None,
        verify: bool = True,
        *,
        optional: bool = False,
        key: Optional[str] = None,
    ):
        super().__init__(optional=optional, key=key)
        if mode is not None and mode not in MODE_INFO:
            raise ValueError(f"mode {mode!r}: use one of {sorted(MODE_INFO)}")
        if reencode is not None:
            reencode = reencode.lower()
            if reencode != "raw" and reencode not in _FORMATS:
                raise ValueError(f"reencode {reencode!r}: use None, 'raw' or one of {sorted(_FORMATS)}")
            if reencode == "jpg":
                reencode = "jpeg"
        if resize is not None:
            resize = (int(resize[0]), int(resize[1]))
            if min(resize) <= 0:
                raise ValueError(f"resize {resize}: width and height must be positive")
        if resample not in _RESAMPLE:
            raise ValueError(f"resample {resample!r}: use one of {_RESAMPLE}")
        if not 1 <= int(quality) <= 100:
            raise ValueError("quality must be in [1, 100]")
        self.mode = mode
        self.reencode = reencode
        self.quality = int(quality)
        self.resize = resize
        self.resample = resample
        self.exif_transpose = exif_transpose
        self.max_pixels = max_pixels
        self.max_bytes = max_bytes
        self.verify = verify

    def requirements(self) -> Tuple[Requirement, ...]:
        return (Requirement("PIL", "pillow", "images are decoded (and checked whole) with Pillow"),)

    def _keeps_bytes(self) -> bool:
        """True when the stored bytes can only be the input's (no conversion asked for)."""
        return self.reencode is None and self.mode is None and self.resize is None

    # ------------------------------------------------------------------ encode

    def _limit(self) -> Optional[int]:
        limit = self.max_pixels if self.max_pixels is not None else PILImage.MAX_IMAGE_PIXELS
        return limit if limit and limit > 0 else None

    def _open(self, data: bytes, where: str) -> PILImage.Image:
        """Open the image and check its header (bomb limit, size); no pixel is decoded."""
        try:
            image = PILImage.open(io.BytesIO(data))
        except PILImage.DecompressionBombError as err:
            raise EncodeError("decode", f"{where}decompression bomb: {err}") from None
        except UnidentifiedImageError:
            raise EncodeError(
                "decode", f"{where}not an image Pillow can read ({len(data)} bytes, starts {data[:8]!r})"
            ) from None
        except Exception as err:  # noqa: BLE001 - any header parse failure rejects this row
            raise EncodeError("decode", f"{where}cannot read the image header ({type(err).__name__}: {err})") from None
        width, height = image.size
        limit = self._limit()
        if limit is not None and width * height > limit:
            raise EncodeError(
                "decode",
                f"{where}decompression bomb: {width}x{height} = {width * height} pixels exceeds the limit of {limit}",
            )
        if width <= 0 or height <= 0:
            raise EncodeError("decode", f"{where}image has no pixels ({width}x{height})")
        return image

    def _decode(self, image: PILImage.Image, where: str, scan_only: bool = False) -> None:
        """Decode all of the image's data, so truncated or corrupt data is rejected.

        ``scan_only``: the caller keeps the original bytes and needs no pixels, only the
        proof that the data decodes; a JPEG is then decoded at 1/8 scale (see the module
        docstring), so ``image.size`` afterwards is the reduced one: read it before."""
        try:
            if scan_only and image.format == "JPEG":
                width, height = image.size
                image.draft(image.mode, (max(1, width // 8), max(1, height // 8)))
            image.load()
        except Exception as err:  # noqa: BLE001 - truncated/corrupt pixel data
            raise EncodeError(
                "decode", f"{where}{image.format or 'image'} data is corrupt or truncated ({type(err).__name__}: {err})"
            ) from None

    def _save(self, image: PILImage.Image, fmt: str, where: str) -> bytes:
        """The image file, converted first to a mode the writer keeps (JPEG has no
        alpha: RGBA/LA are flattened to RGB/L)."""
        allowed = _WRITER_MODES.get(fmt)
        if allowed is not None and image.mode not in allowed:
            if image.mode in ("I;16", "I", "F") and fmt in ("JPEG", "WEBP", "GIF", "BMP"):
                raise EncodeError(
                    "transform",
                    f"{where}{fmt} cannot store a {image.mode} (high bit depth) image; use png, tiff or raw",
                )
            target = (
                "RGBA"
                if "A" in image.mode and "RGBA" in allowed
                else ("L" if image.mode in ("L", "LA") and "L" in allowed else "RGB")
            )
            image = _to_mode(image, target)
        out = io.BytesIO()
        params: Dict[str, Any] = {}
        if fmt in ("JPEG", "WEBP"):
            params["quality"] = self.quality
        try:
            image.save(out, fmt, **params)
        except Exception as err:  # noqa: BLE001 - Pillow's writers raise many types; the row is rejected
            raise EncodeError("encode", f"{where}cannot write {fmt} ({type(err).__name__}: {err})") from None
        return out.getvalue()

    def _kept_plain_jpeg(self, data: bytes, column: str) -> Optional[Features]:
        """The features of a plain JPEG kept as it is, proved whole by libjpeg's decode of
        all its data at 1/8 scale without Pillow's header parse (module docstring);
        ``None`` when the file is not such a JPEG or does not decode, for the full path
        to handle or reject."""
        frame = _plain_jpeg_frame(data)
        if frame is None:
            return None
        width, height, mode = frame
        limit = self._limit()
        pillow_limit = PILImage.MAX_IMAGE_PIXELS
        if (limit is not None and width * height > limit) or (pillow_limit and width * height > 2 * pillow_limit):
            return None  # a bomb: rejected, with its message, by the full path
        scale = _draft_scale(width, height)
        try:
            PILImage.frombytes(
                mode, ((width + scale - 1) // scale, (height + scale - 1) // scale), data, "jpeg", mode, "", scale, 0
            )
        except Exception:  # noqa: BLE001 - corrupt, truncated, unusual: the full path says which
            return None
        channels, dtype = MODE_INFO[mode]
        p = self.prefix(column)
        return {
            f"{p}/encoded": (data, "bytes"),
            f"{p}/format": ("jpeg", "bytes"),
            f"{p}/height": (height, "int"),
            f"{p}/width": (width, "int"),
            f"{p}/channels": (channels, "int"),
            f"{p}/mode": (mode, "bytes"),
            f"{p}/dtype": (dtype, "bytes"),
        }

    def encode(self, value: Any, column: str) -> Features:
        _require_pillow()
        data, path = load_media(value, self.max_bytes)
        where = describe(path)
        keeps_bytes = self._keeps_bytes()
        if keeps_bytes and self.verify:
            quick = self._kept_plain_jpeg(data, column)
            if quick is not None:
                return quick
        image = self._open(data, where)
        source_format = (image.format or "").upper()
        width, height = image.size
        try:
            rotate = self.exif_transpose and image.getexif().get(0x0112, 1) not in (1, None)
        except Exception as err:  # noqa: BLE001 - a broken EXIF block rejects the row
            raise EncodeError("transform", f"{where}{type(err).__name__}: {err}") from None
        if self.verify or not keeps_bytes or rotate:
            # Pixels are needed unless the bytes are kept as they are (then only the proof).
            self._decode(image, where, scan_only=keeps_bytes and not rotate)
        changed = False
        try:
            if rotate:
                image = ImageOps.exif_transpose(image)
                width, height = image.size
                changed = True
            mode = self.mode or canonical_mode(image)
            if self.mode is not None and image.mode != self.mode:
                image = _to_mode(image, self.mode)
                changed = True
            if self.resize is not None and image.size != self.resize:
                image = image.resize(self.resize, getattr(PILImage.Resampling, self.resample.upper()))
                changed = True
        except EncodeError:
            raise
        except Exception as err:  # noqa: BLE001 - Pillow's converters raise many types; the row is rejected
            raise EncodeError("transform", f"{where}{type(err).__name__}: {err}") from None
        if changed:
            width, height = image.size
        channels, dtype = MODE_INFO[mode]
        if self.reencode == "raw":
            try:
                arr = image_array(image, mode)
            except Exception as err:  # noqa: BLE001 - Pillow/NumPy conversion errors reject the row
                raise EncodeError("transform", f"{where}cannot convert {image.mode} to {mode} ({err})") from None
            encoded, fmt = arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes(), "raw"
        elif self.reencode is None and not changed:
            encoded, fmt = data, (_REWRITE_AS.get(source_format, source_format) or "unknown").lower()
        else:
            target = _FORMATS[self.reencode] if self.reencode else _REWRITE_AS.get(source_format, source_format)
            if target not in _WRITER_MODES:
                target = "PNG"
            # Store what the decoder will hand out: convert to the decoded mode first
            # (a palette image re-encoded as JPEG becomes RGB, and says so).
            if image.mode != mode:
                image = _to_mode(image, mode)
            encoded = self._save(image, target, where)
            fmt = target.lower()
            # Describe what was written, as any decoder will see it (a grayscale GIF is
            # stored as a palette image, which decodes to RGB): reopen the header. A JPEG
            # written from L or RGB (``_save`` keeps those) decodes to that mode: no
            # second open needed (Pillow's header parse, ~3% of a 224x224 re-encode).
            if target == "JPEG" and image.mode in ("L", "RGB"):
                mode = image.mode
            else:
                mode = canonical_mode(PILImage.open(io.BytesIO(encoded)))
            channels, dtype = MODE_INFO[mode]
        p = self.prefix(column)
        return {
            f"{p}/encoded": (encoded, "bytes"),
            f"{p}/format": (fmt, "bytes"),
            f"{p}/height": (height, "int"),
            f"{p}/width": (width, "int"),
            f"{p}/channels": (channels, "int"),
            f"{p}/mode": (mode, "bytes"),
            f"{p}/dtype": (dtype, "bytes"),
        }

    # ------------------------------------------------------------------ spec

    def feature_specs(self, column: str) -> List[FeatureSpec]:
        p = self.prefix(column)
        req = not self.optional
        pixel = MODE_INFO[self.mode][1] if self.mode else None
        return [
            FeatureSpec(
                f"{p}/encoded", "bytes", (), req, pixel and f"image:{pixel}", doc="image file bytes, or raw pixels"
            ),
            FeatureSpec(f"{p}/format", "bytes", (), req, "str", doc="jpeg, png, webp, ... or raw"),
            FeatureSpec(f"{p}/height", "int", (), req, "int64"),
            FeatureSpec(f"{p}/width", "int", (), req, "int64"),
            FeatureSpec(f"{p}/channels", "int", (), req, "int64"),
            FeatureSpec(f"{p}/mode", "bytes", (), req, "str", doc="Pillow mode of the decoded array"),
            FeatureSpec(f"{p}/dtype", "bytes", (), req, "str", doc="NumPy dtype of the decoded array"),
        ]

    # ------------------------------------------------------------------ decode

    def decode(self, features: Mapping[str, Any], column: str) -> np.ndarray:
        p = self.prefix(column)
        return decode_image(
            scalar(features, f"{p}/encoded"),
            text(features, f"{p}/format"),
            height=int(scalar(features, f"{p}/height")),
            width=int(scalar(features, f"{p}/width")),
            mode=text(features, f"{p}/mode"),
        )


def decode_image(encoded: bytes, fmt: str, height: int, width: int, mode: str) -> np.ndarray:
    """Image features -> ``(height, width, channels)`` array of the stored dtype.

    Checks the decoded size against the stored one: a mismatch means the record
    does not describe its own bytes.
    """
    if mode not in MODE_INFO:
        raise EncodeError("decode", f"unknown image mode {mode!r}")
    channels, dtype = MODE_INFO[mode]
    if fmt == "raw":
        want = height * width * channels * np.dtype(dtype).itemsize
        if len(encoded) != want:
            raise EncodeError(
                "decode", f"raw image has {len(encoded)} bytes, {height}x{width}x{channels} {dtype} needs {want}"
            )
        return (
            np.frombuffer(encoded, dtype=np.dtype(dtype).newbyteorder("<"))
            .astype(dtype, copy=False)
            .reshape(height, width, channels)
        )
    _require_pillow()
    try:
        image = PILImage.open(io.BytesIO(encoded))
        image.load()
    except Exception as err:  # noqa: BLE001 - Pillow's decoders raise many types; a DecodeError names them
        raise EncodeError("decode", f"stored {fmt} image cannot be decoded ({type(err).__name__}: {err})") from None
    if image.size != (width, height):
        raise EncodeError("decode", f"stored image is {image.size[0]}x{image.size[1]}, features say {width}x{height}")
    return image_array(image, mode)


__all__ = ["Image", "MODE_INFO", "canonical_mode", "decode_image", "image_array"]
