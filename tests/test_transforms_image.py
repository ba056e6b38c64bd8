"""Image encoder/decoder with real images of each mode and format, and broken files."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image as PILImage

from tfrecord_io.format.codec import parse_example
from tfrecord_io.transforms import EncodeError, Image, decode_example, encode_features, encode_row

from transforms_media import exif_jpeg, gradient, image_bytes, palette_png, pixels, png16, truncated_jpeg


def roundtrip(value, enc):
    spec = {"image": enc}
    data = encode_row({"image": value}, spec)
    return parse_example(data), decode_example(data, spec)["image"]


MODES = [("L", 1), ("LA", 2), ("RGB", 3), ("RGBA", 4)]


@pytest.mark.parametrize("mode,channels", MODES)
@pytest.mark.parametrize("fmt", ["PNG", "TIFF"])
def test_lossless_formats_keep_bytes_and_decode_exactly(mode, channels, fmt):
    arr = pixels(7, 13, channels, seed=channels)
    img = PILImage.fromarray(arr[..., 0] if channels == 1 else arr)
    data = image_bytes(img, fmt)
    feats, out = roundtrip(data, Image())
    assert feats["image/encoded"] == data  # the original bytes, untouched
    assert feats["image/format"] == fmt.lower().encode()
    assert (int(feats["image/height"][0]), int(feats["image/width"][0]), int(feats["image/channels"][0])) == (
        7,
        13,
        channels,
    )
    assert out.shape == (7, 13, channels) and out.dtype == np.uint8
    np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize("fmt,params", [("JPEG", {"quality": 95}), ("WEBP", {"quality": 95}), ("BMP", {}), ("GIF", {})])
def test_other_formats_keep_bytes_and_describe_the_decoded_array(fmt, params):
    arr = gradient(16, 24)
    img = PILImage.fromarray(arr)
    if fmt == "GIF":
        img = img.convert("L")
    data = image_bytes(img, fmt, **params)
    feats, out = roundtrip(data, Image())
    assert feats["image/encoded"] == data
    assert feats["image/format"] == fmt.lower().encode()
    expect = np.asarray(PILImage.open(io.BytesIO(data)).convert(feats["image/mode"].decode()))
    assert out.shape[:2] == (16, 24) and out.shape[2] == int(feats["image/channels"][0])
    np.testing.assert_array_equal(out.reshape(expect.shape), expect)


def test_raw_pixels_round_trip_exactly_with_dtype():
    arr = pixels(5, 6, 3, seed=3)
    feats, out = roundtrip(image_bytes(PILImage.fromarray(arr), "PNG"), Image(reencode="raw"))
    assert feats["image/format"] == b"raw" and feats["image/dtype"] == b"uint8"
    assert feats["image/encoded"] == arr.tobytes()
    np.testing.assert_array_equal(out, arr)


@pytest.mark.parametrize("reencode", [None, "png", "raw"])
def test_16bit_grayscale_png_stays_16bit(reencode):
    arr, data = png16()
    feats, out = roundtrip(data, Image(reencode=reencode))
    assert feats["image/dtype"] == b"uint16" and feats["image/mode"] == b"I;16"
    assert out.dtype == np.uint16 and out.shape == arr.shape + (1,)
    np.testing.assert_array_equal(out[..., 0], arr)


def test_16bit_to_jpeg_is_rejected_not_truncated():
    _, data = png16()
    with pytest.raises(EncodeError) as err:
        encode_row({"image": data}, {"image": Image(reencode="jpeg")})
    assert err.value.stage == "transform" and "16" in err.value.reason or "I;16" in err.value.reason


@pytest.mark.parametrize("transparent", [False, True])
def test_palette_images_decode_to_rgb_or_rgba(transparent):
    img, data = palette_png(transparent)
    feats, out = roundtrip(data, Image())
    assert feats["image/encoded"] == data
    want_mode = "RGBA" if transparent else "RGB"
    assert feats["image/mode"] == want_mode.encode()
    expect = np.asarray(PILImage.open(io.BytesIO(data)).convert(want_mode))
    np.testing.assert_array_equal(out, expect)


def test_one_bit_image_decodes_to_l():
    arr = pixels(6, 10, 1, seed=5)[..., 0] > 127
    data = image_bytes(PILImage.fromarray(arr), "PNG")
    feats, out = roundtrip(data, Image())
    assert feats["image/mode"] == b"L" and out.shape == (6, 10, 1)
    np.testing.assert_array_equal(out[..., 0] > 0, arr)


def test_cmyk_jpeg_decodes_to_rgb():
    data = image_bytes(PILImage.fromarray(gradient(8, 8)).convert("CMYK"), "JPEG")
    feats, out = roundtrip(data, Image())
    assert feats["image/channels"][0] == 3 and out.shape == (8, 8, 3)


@pytest.mark.parametrize("orientation,rotated", [(1, False), (3, False), (6, True), (8, True)])
def test_exif_orientation_is_applied_and_dimensions_follow(orientation, rotated):
    upright, data = exif_jpeg(orientation, height=8, width=16)
    feats, out = roundtrip(data, Image())
    h, w = (16, 8) if rotated else (8, 16)
    assert (feats["image/height"][0], feats["image/width"][0]) == (h, w)
    assert out.shape == (h, w, 3)
    if orientation == 1:
        assert feats["image/encoded"] == data  # nothing to change: bytes kept
    else:
        assert feats["image/encoded"] != data  # re-encoded so the bytes show what the sizes say
        # what Pillow shows after applying the orientation (lossy JPEG: compare closely)
        from PIL import ImageOps

        expect = np.asarray(ImageOps.exif_transpose(PILImage.open(io.BytesIO(data))))
        assert np.abs(out.astype(int) - expect.astype(int)).mean() < 3
    # any decoder that ignores EXIF sees the same size as the features say
    assert PILImage.open(io.BytesIO(feats["image/encoded"])).size == (w, h)


def test_exif_transpose_off_keeps_bytes():
    _, data = exif_jpeg(6)
    feats, _ = roundtrip(data, Image(exif_transpose=False))
    assert feats["image/encoded"] == data and feats["image/height"][0] == 8


def test_reencode_jpeg_with_resize_and_mode():
    data = image_bytes(PILImage.fromarray(gradient(40, 60)).convert("RGBA"), "PNG")
    feats, out = roundtrip(data, Image(mode="RGB", reencode="jpeg", quality=90, resize=(30, 20)))
    assert feats["image/format"] == b"jpeg" and feats["image/encoded"][:2] == b"\xff\xd8"
    assert out.shape == (20, 30, 3) and feats["image/mode"] == b"RGB"
    expect = np.asarray(PILImage.fromarray(gradient(40, 60)).resize((30, 20), PILImage.Resampling.BILINEAR))
    assert np.abs(out.astype(int) - expect.astype(int)).mean() < 3


def test_grayscale_conversion_and_png_reencode_is_exact():
    rgb = pixels(9, 9, 3, seed=9)
    data = image_bytes(PILImage.fromarray(rgb), "JPEG", quality=80)
    feats, out = roundtrip(data, Image(mode="L", reencode="png"))
    expect = np.asarray(PILImage.open(io.BytesIO(data)).convert("L"))
    assert out.shape == (9, 9, 1)
    np.testing.assert_array_equal(out[..., 0], expect)


def test_rgba_to_jpeg_drops_alpha_and_says_rgb():
    data = image_bytes(PILImage.fromarray(pixels(4, 4, 4)), "PNG")
    feats, out = roundtrip(data, Image(reencode="jpeg"))
    assert feats["image/mode"] == b"RGB" and out.shape == (4, 4, 3)


def test_webp_of_grayscale_says_rgb():
    data = image_bytes(PILImage.fromarray(gradient(8, 8)).convert("L"), "PNG")
    feats, out = roundtrip(data, Image(reencode="webp"))
    assert feats["image/format"] == b"webp" and feats["image/channels"][0] == out.shape[2]


def test_from_path_and_file_url(tmp_path):
    arr = pixels(5, 5, 3)
    path = tmp_path / "a.png"
    path.write_bytes(image_bytes(PILImage.fromarray(arr), "PNG"))
    for value in (str(path), path, "file://" + str(path)):
        _, out = roundtrip(value, Image())
        np.testing.assert_array_equal(out, arr)


def test_png_with_jpg_extension_is_read_by_content(tmp_path):
    arr = pixels(5, 5, 3)
    path = tmp_path / "really_a_png.jpg"
    path.write_bytes(image_bytes(PILImage.fromarray(arr), "PNG"))
    feats, out = roundtrip(str(path), Image())
    assert feats["image/format"] == b"png"
    np.testing.assert_array_equal(out, arr)


def reject(value, enc=None):
    with pytest.raises(EncodeError) as err:
        encode_row({"image": value}, {"image": enc or Image()})
    assert err.value.column == "image"
    return err.value


def test_broken_inputs_are_rejected_with_stage_and_reason(tmp_path):
    trunc = tmp_path / "trunc.jpg"
    trunc.write_bytes(truncated_jpeg())
    err = reject(str(trunc))
    assert err.stage == "decode" and "truncated" in err.reason.lower() and str(trunc) in err.reason
    whole = image_bytes(PILImage.fromarray(pixels(64, 64, 3)), "JPEG", quality=90)
    err = reject(whole[:-300])  # header intact, scan data cut: caught by the full decode
    assert err.stage == "decode" and "truncated" in err.reason.lower()

    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    err = reject(str(empty))
    assert err.stage == "read" and "0 bytes" in err.reason

    err = reject(str(tmp_path / "missing.png"))
    assert err.stage == "read" and "no such file" in err.reason

    text = tmp_path / "notes.jpg"
    text.write_text("this is not an image\n")
    err = reject(str(text))
    assert err.stage == "decode" and "not an image" in err.reason

    err = reject(b"")
    assert err.stage == "read"
    err = reject(12345)
    assert err.stage == "input"
    err = reject(str(tmp_path))
    assert err.stage == "read"


def test_bomb_rejected_by_configured_limit():
    data = image_bytes(PILImage.fromarray(gradient(64, 64)), "PNG")
    err = reject(data, Image(max_pixels=1000))
    assert err.stage == "decode" and "decompression bomb" in err.reason and "4096" in err.reason
    # the limit travels with the encoder, so the same data passes a larger one
    encode_row({"image": data}, {"image": Image(max_pixels=4096)})


def test_bomb_rejected_by_lowered_pillow_limit(monkeypatch):
    data = image_bytes(PILImage.fromarray(gradient(64, 64)), "PNG")
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 1000)  # 4096 > 2 x 1000: Pillow raises
    err = reject(data)
    assert err.stage == "decode" and "decompression bomb" in err.reason
    monkeypatch.setattr(PILImage, "MAX_IMAGE_PIXELS", 3000)  # over the limit, under 2x: our check
    err = reject(data)
    assert err.stage == "decode" and "decompression bomb" in err.reason


@settings(max_examples=40, deadline=None)
@given(
    mode=st.sampled_from(["L", "LA", "RGB", "RGBA", "I;16"]),
    height=st.integers(1, 20),
    width=st.integers(1, 20),
    store=st.sampled_from(["raw", "png", None]),
    seed=st.integers(0, 2**16),
)
def test_property_lossless_round_trip(mode, height, width, store, seed):
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4, "I;16": 1}[mode]
    dtype = "uint16" if mode == "I;16" else "uint8"
    arr = pixels(height, width, channels, dtype, seed)
    img = PILImage.fromarray(arr[..., 0] if channels == 1 else arr)
    feats, out = roundtrip(image_bytes(img, "PNG"), Image(reencode=store))
    assert out.dtype == np.dtype(dtype) and out.shape == (height, width, channels)
    np.testing.assert_array_equal(out, arr)
    assert feats["image/height"][0] == height and feats["image/width"][0] == width


def test_features_describe_keys():
    feats = encode_features(
        {"photo": image_bytes(PILImage.fromarray(gradient(4, 4)), "PNG")}, {"photo": Image(key="img")}
    )
    assert sorted(feats) == sorted(
        f"img/{k}" for k in ("encoded", "format", "height", "width", "channels", "mode", "dtype")
    )
    assert [s.key for s in Image(key="img").feature_specs("photo")] == [
        f"img/{k}" for k in ("encoded", "format", "height", "width", "channels", "mode", "dtype")
    ]


def test_verify_false_reads_only_the_header_when_bytes_are_kept():
    whole = image_bytes(PILImage.fromarray(pixels(64, 64, 3)), "JPEG", quality=90)
    cut = whole[:-300]
    feats = encode_features({"image": cut}, {"image": Image(verify=False)})
    assert feats["image/encoded"][0] == cut and feats["image/height"][0] == 64  # trusted: not decoded
    reject(cut, Image())  # the default decodes and rejects it
    err = reject(b"\x89PNG\r\n\x1a\n" + bytes(20), Image(verify=False))  # a bad header is still caught
    assert err.stage == "decode"
    err = reject(cut, Image(verify=False, mode="L"))  # a conversion needs the pixels
    assert err.stage in ("decode", "transform")


@pytest.mark.parametrize("fmt", ["jpeg", "webp", "bmp", "png", "tiff", "gif"])
@pytest.mark.parametrize("mode", ["L", "LA", "RGB", "RGBA"])
def test_reencoded_features_describe_what_a_decoder_gets(fmt, mode):
    channels = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4}[mode]
    arr = pixels(6, 7, channels, seed=channels)
    data = image_bytes(PILImage.fromarray(arr[..., 0] if channels == 1 else arr), "PNG")
    feats, out = roundtrip(data, Image(reencode=fmt))
    assert feats["image/format"] == fmt.encode()
    stored = PILImage.open(io.BytesIO(feats["image/encoded"]))
    stored.load()
    from tfrecord_io.transforms.encoders.image import canonical_mode

    # the file's own (canonical) mode has the channels the features claim: nothing invented
    assert MODE_CHANNELS[canonical_mode(stored)] == int(feats["image/channels"][0]) == out.shape[2]
    if fmt in ("png", "tiff"):
        np.testing.assert_array_equal(out, arr)  # lossless formats: exact


MODE_CHANNELS = {"L": 1, "LA": 2, "RGB": 3, "RGBA": 4, "I;16": 1, "I": 1, "F": 1}


# A filesystem registered with Beam under its own scheme: paths like memtest://bucket/x
# reach the encoder through tfrecord_io.storage.files -> Beam's FileSystems, the same dispatch
# gs:// or s3:// paths take (those services are not reachable from here).
from apache_beam.io.filesystem import BeamIOError, FileMetadata, FileSystem  # noqa: E402

_MEM: dict = {}


class _MemTestFileSystem(FileSystem):
    @classmethod
    def scheme(cls):
        return "memtest"

    def join(self, base, *parts):
        return "/".join([base.rstrip("/"), *parts])

    def split(self, path):
        head, _, tail = path.rpartition("/")
        return head, tail

    def mkdirs(self, path):
        pass

    def has_dirs(self):
        return False

    def _list(self, dir_or_prefix):
        for k, v in _MEM.items():
            if k.startswith(dir_or_prefix):
                yield FileMetadata(k, len(v))

    def create(self, path, mime_type="application/octet-stream", compression_type=None):
        raise NotImplementedError

    def open(self, path, mime_type="application/octet-stream", compression_type=None):
        if path not in _MEM:
            raise BeamIOError(f"no such object {path}", {path: FileNotFoundError(path)})
        return io.BytesIO(_MEM[path])

    def copy(self, source_file_names, destination_file_names):
        raise NotImplementedError

    def rename(self, source_file_names, destination_file_names):
        raise NotImplementedError

    def exists(self, path):
        return path in _MEM

    def size(self, path):
        return len(_MEM[path])

    def last_updated(self, path):
        return 0.0

    def checksum(self, path):
        return str(len(_MEM[path]))

    def metadata(self, path):
        return FileMetadata(path, len(_MEM[path]))

    def delete(self, paths):
        for p in paths:
            _MEM.pop(p, None)


def test_image_from_a_beam_filesystem_path():
    arr = pixels(6, 4, 3, seed=11)
    _MEM["memtest://bucket/photos/a.png"] = image_bytes(PILImage.fromarray(arr), "PNG")
    _, out = roundtrip("memtest://bucket/photos/a.png", Image())
    np.testing.assert_array_equal(out, arr)
    err = reject("memtest://bucket/photos/missing.png")
    assert err.stage == "read" and "memtest://bucket/photos/missing.png" in err.reason


def test_bit_depth_conversions_scale_the_range_instead_of_clipping():
    arr, data = png16()
    for mode in ("L", "RGB"):
        feats, out = roundtrip(data, Image(mode=mode))
        expect = np.clip((arr.astype(np.int64) + 128) // 257, 0, 255).astype(np.uint8)
        assert out.dtype == np.uint8
        np.testing.assert_array_equal(out[..., 0], expect)  # not min(x, 255)
    gray = pixels(3, 4, 1, seed=2)[..., 0]
    feats, out = roundtrip(image_bytes(PILImage.fromarray(gray), "PNG"), Image(mode="I;16"))
    assert out.dtype == np.uint16 and feats["image/dtype"] == b"uint16"
    np.testing.assert_array_equal(out[..., 0], gray.astype(np.uint16) * 257)


def test_kept_jpeg_is_proved_whole_by_its_scan_decode():
    """Kept JPEG bytes are checked by a 1/8-scale decode of all their data: broken scan
    data is still rejected, and the shape recorded is the full image's, not the draft's."""
    whole = image_bytes(PILImage.fromarray(pixels(96, 160, 3)), "JPEG", quality=90)
    features, decoded = roundtrip(whole, Image())
    assert features["image/encoded"] == whole
    assert (int(features["image/height"][0]), int(features["image/width"][0])) == (96, 160)
    assert decoded.shape == (96, 160, 3)
    broken = bytearray(whole)
    middle = len(whole) // 2
    broken[middle : middle + 40] = b"\xff" * 40
    err = reject(bytes(broken))
    assert err.stage == "decode" and "corrupt or truncated" in err.reason


class _FullPathImage(Image):
    """The encoder with its short road for plain JPEGs closed: what ``Image.open`` gives."""

    def _kept_plain_jpeg(self, data, column):
        return None


def _plain_jpegs():
    out = []
    for height, width in [(1, 1), (3, 7), (16, 16), (9, 17), (100, 9), (48, 64)]:
        for channels in (1, 3):
            arr = pixels(height, width, channels, seed=height * width)
            image = PILImage.fromarray(arr[..., 0] if channels == 1 else arr)
            for params in (
                {"quality": 90},
                {"quality": 40, "progressive": True},
                {"optimize": True},
                {"subsampling": 0},
                {"restart_marker_blocks": 1},
                {"comment": b"a comment"},
            ):
                out.append(image_bytes(image, "JPEG", **params))
    return out


def _outcome(enc, data):
    try:
        return enc.encode(data, "image")
    except EncodeError as err:
        return (err.stage, err.reason)


def test_plain_jpegs_take_the_short_road_to_the_same_features():
    """Plain JPEGs kept as they are skip Pillow's header parse (the build's per-row cost
    at tiny images) and come out exactly as ``Image.open`` + decode describes them;
    JPEGs with EXIF, an ICC profile or 4 components go the full way."""
    from tfrecord_io.transforms.encoders.image import _plain_jpeg_frame

    quick, full = Image(), _FullPathImage()
    for data in _plain_jpegs():
        frame = _plain_jpeg_frame(data)
        assert frame is not None
        image = PILImage.open(io.BytesIO(data))
        assert frame == (image.size[0], image.size[1], image.mode)
        assert quick._kept_plain_jpeg(data, "image") is not None
        assert _outcome(quick, data) == _outcome(full, data)
    rgb = PILImage.fromarray(gradient(8, 8))
    _, with_exif = exif_jpeg(1)
    with_icc = image_bytes(rgb, "JPEG", icc_profile=b"\0" * 200)
    cmyk = image_bytes(rgb.convert("CMYK"), "JPEG")
    for data in (with_exif, with_icc, cmyk):
        assert _plain_jpeg_frame(data) is None
        assert _outcome(quick, data) == _outcome(full, data)


def test_the_short_road_never_accepts_what_the_full_way_rejects():
    """Truncated, cut and overwritten plain JPEGs (headers and scans): whatever the short
    road accepts, the full way accepts with the same features; everything else is
    rejected by the full way, with its reasons."""
    import random

    rng = random.Random(7)
    quick, full = Image(), _FullPathImage()
    taken = rejected = 0
    for data in _plain_jpegs()[::3]:
        for _ in range(120):
            broken = bytearray(data)
            kind = rng.random()
            where = rng.randrange(len(broken)) if kind < 0.7 else rng.randrange(min(len(broken), 160))
            if kind < 0.3:
                broken = broken[: max(1, where)]
            else:
                broken[where : where + rng.choice((1, 4, 16))] = bytes(rng.randrange(256) for _ in range(4))
            broken = bytes(broken)
            short = quick._kept_plain_jpeg(broken, "image")
            outcome = _outcome(full, broken)
            if short is not None:
                taken += 1
                assert short == outcome
            else:
                rejected += isinstance(outcome, tuple)
            assert _outcome(quick, broken) == outcome
    assert taken > 100 and rejected > 100  # both roads were exercised
