"""Framing: round trips, every single-bit flip and every truncation of a small
multi-record file, the named error cases (with path and offset in the message),
corrupt huge lengths, errors that pickle, and resynchronisation."""

from __future__ import annotations

import io
import pickle
import struct
import time
import tracemalloc

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfrecord_io as tfio
from tfrecord_io.format.crc import mask, masked_crc32c, unmask
from tfrecord_io.format.framing import FRAME_OVERHEAD, FrameStream, encode_frame, frame_header, write_frame
from tfrecord_io.format.writer import RecordWriter

payload_lists = st.lists(st.binary(max_size=300), max_size=12)


def write_file(path, payloads):
    with open(path, "wb") as f:
        for p in payloads:
            write_frame(f, p)
    return path


def frame_offsets(payloads):
    offsets, pos = [], 0
    for p in payloads:
        offsets.append(pos)
        pos += len(p) + FRAME_OVERHEAD
    return offsets


# ------------------------------------------------------------------ CRC and frames


def test_masked_crc_known_values():
    # TF's format: crc32c("") = 0, so the masked CRC of no data is the mask delta.
    assert masked_crc32c(b"") == 0xA282EAD8
    # crc32c("123456789") = 0xE3069283 (the standard check value)
    crc = 0xE3069283
    assert masked_crc32c(b"123456789") == ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF
    assert masked_crc32c(memoryview(b"xx123456789")[2:]) == masked_crc32c(b"123456789")


@given(st.integers(0, 2**32 - 1))
def test_mask_unmask_inverse(crc):
    assert unmask(mask(crc)) == crc


@given(st.binary(max_size=1000))
def test_frame_layout(data):
    frame = encode_frame(data)
    assert len(frame) == len(data) + FRAME_OVERHEAD
    (length,) = struct.unpack_from("<Q", frame, 0)
    assert length == len(data)
    assert struct.unpack_from("<I", frame, 8)[0] == masked_crc32c(frame[:8])
    assert frame[12 : 12 + len(data)] == data
    assert struct.unpack_from("<I", frame, 12 + len(data))[0] == masked_crc32c(data)
    assert frame_header(len(data)) == frame[:12]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    payloads=payload_lists,
    chunk=st.sampled_from([64, 65, 100, 257, 4096, 1 << 20]),
    compression=st.sampled_from(["", "gzip", "zlib"]),
)
def test_round_trip_any_chunk_size(tmp_path, payloads, chunk, compression):
    path = str(tmp_path / "rt.tfrecord")
    with RecordWriter(path, compression) as w:
        w.write_records(payloads)
    got = list(tfio.read_records(path, compression_type=compression, chunk_size=chunk))
    assert [bytes(d) for _, d in got] == payloads
    assert [o for o, _ in got] == frame_offsets(payloads)  # decompressed offsets for gz/zz


def test_records_stay_valid_after_iteration(tmp_path):
    payloads = [bytes([i]) * (50 + 37 * i) for i in range(60)]
    path = write_file(str(tmp_path / "v.tfrecord"), payloads)
    views = [d for _, d in tfio.read_records(path, chunk_size=64)]  # many buffer refills
    assert all(isinstance(v, memoryview) for v in views)
    assert [bytes(v) for v in views] == payloads
    views = list(tfio.tfrecord_iterator(path))
    assert [bytes(v) for v in views] == payloads


# ------------------------------------------------------------------ damage: flips and cuts

SMALL = [b"abc", b"", b"\x00" * 9, b"hello world", bytes(range(20))]


def _read_all(path, **kw):
    got = []
    try:
        for off, d in tfio.read_records(path, **kw):
            got.append((off, bytes(d)))
    except tfio.TFRecordError as err:
        return got, err
    return got, None


def test_every_single_bit_flip_is_detected_at_its_record(tmp_path):
    blob = b"".join(encode_frame(p) for p in SMALL)
    offsets = frame_offsets(SMALL)
    path = str(tmp_path / "flip.tfrecord")
    for bit in range(len(blob) * 8):
        damaged = bytearray(blob)
        damaged[bit // 8] ^= 1 << (bit % 8)
        with open(path, "wb") as f:
            f.write(damaged)
        victim = max(i for i, o in enumerate(offsets) if o <= bit // 8)
        got, err = _read_all(path)
        assert err is not None, f"flip of bit {bit} went unnoticed"
        assert isinstance(err, (tfio.CorruptRecordError, tfio.TruncatedRecordError))
        assert err.path == path and err.offset == offsets[victim], bit
        assert path in str(err) and f"byte offset {offsets[victim]}" in str(err)
        assert got == list(zip(offsets, SMALL))[:victim]  # only the good records before it
        # report mode: every other record is recovered, the bad region is reported
        reported = list(tfio.read_records(path, on_corrupt="report"))
        good = [(o, bytes(d)) for o, d in reported if not isinstance(d, tfio.CorruptRegion)]
        bad = [d for _, d in reported if isinstance(d, tfio.CorruptRegion)]
        expected_good = [(o, p) for i, (o, p) in enumerate(zip(offsets, SMALL)) if i != victim]
        assert good == expected_good, bit
        assert len(bad) >= 1 and bad[0].start == offsets[victim]
        assert set(good) <= set(zip(offsets, SMALL))


def test_every_truncation_is_detected(tmp_path):
    blob = b"".join(encode_frame(p) for p in SMALL)
    offsets = frame_offsets(SMALL)
    ends = set(o + len(p) + FRAME_OVERHEAD for o, p in zip(offsets, SMALL)) | {0}
    path = str(tmp_path / "cut.tfrecord")
    for cut in range(len(blob) + 1):
        with open(path, "wb") as f:
            f.write(blob[:cut])
        for check in (True, False):
            got, err = _read_all(path, check_crc=check)
            complete = [(o, p) for o, p in zip(offsets, SMALL) if o + len(p) + FRAME_OVERHEAD <= cut]
            assert got == complete, (cut, check)
            if cut in ends:
                assert err is None
            else:
                assert isinstance(err, tfio.TruncatedRecordError), (cut, check, err)
                assert err.offset == offsets[len(complete)] and path in str(err)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(st.binary(max_size=40), min_size=1, max_size=5), data=st.data())
def test_damage_never_yields_a_wrong_record(tmp_path, payloads, data):
    """Property: any single-bit flip or truncation -> an error, or only true records."""
    blob = bytearray(b"".join(encode_frame(p) for p in payloads))
    flip = data.draw(st.booleans())
    if flip:
        bit = data.draw(st.integers(0, len(blob) * 8 - 1))
        blob[bit // 8] ^= 1 << (bit % 8)
    else:
        del blob[data.draw(st.integers(0, len(blob) - 1)) :]
    path = str(tmp_path / "damaged.tfrecord")
    with open(path, "wb") as f:
        f.write(blob)
    truth = list(zip(frame_offsets(payloads), payloads))
    got, err = _read_all(path)
    assert got == truth[: len(got)]  # only true records, in order
    if err is None:
        # the format has no end marker: only a cut exactly at a record boundary is clean
        assert not flip
        assert len(blob) == sum(len(p) + FRAME_OVERHEAD for _, p in got)
    if err is not None:
        assert err.path == path and err.offset is not None
    for off, d in tfio.read_records(path, on_corrupt="report"):
        if not isinstance(d, tfio.CorruptRegion):
            assert (off, bytes(d)) in truth


# ------------------------------------------------------------------ named errors


def _header(length, crc_ok=True):
    lb = struct.pack("<Q", length)
    crc = masked_crc32c(lb)
    return lb + struct.pack("<I", crc if crc_ok else crc ^ 0x10)


def _one_error(path, **kw):
    with pytest.raises(tfio.TFRecordError) as info:
        list(tfio.read_records(path, **kw))
    err = info.value
    assert isinstance(err, RuntimeError)  # users of the tfrecord package catch this
    assert path in str(err) and f"byte offset {err.offset}" in str(err)
    return err


def test_bad_length_crc(tmp_path):
    good = encode_frame(b"first")
    path = str(tmp_path / "e.tfrecord")
    with open(path, "wb") as f:
        f.write(good + _header(5, crc_ok=False) + b"hello" + struct.pack("<I", masked_crc32c(b"hello")))
    err = _one_error(path)
    assert type(err) is tfio.CorruptRecordError and err.offset == len(good)
    assert "length" in err.reason and "CRC" in err.reason


def test_bad_data_crc(tmp_path):
    good = encode_frame(b"first")
    path = str(tmp_path / "e.tfrecord")
    with open(path, "wb") as f:
        f.write(good + _header(5) + b"hello" + struct.pack("<I", masked_crc32c(b"hellp")))
    err = _one_error(path)
    assert type(err) is tfio.CorruptRecordError and err.offset == len(good)
    assert "data" in err.reason
    # trusted mode reads it
    assert [bytes(d) for _, d in tfio.read_records(path, check_crc=False)] == [b"first", b"hello"]


@pytest.mark.parametrize(
    "keep,reason",
    [(1, "header"), (8, "header"), (11, "header")]  # cut in the 12-byte header
    + [(12, "6 data bytes"), (13, "6 data bytes"), (17, "6 data bytes"), (20, "6 data bytes")],  # data or footer
)
def test_a_truncated_last_frame(tmp_path, keep, reason):
    good = encode_frame(b"first")
    path = str(tmp_path / "e.tfrecord")
    with open(path, "wb") as f:
        f.write(good + encode_frame(b"second")[:keep])
    err = _one_error(path)
    assert type(err) is tfio.TruncatedRecordError and err.offset == len(good)
    assert reason in err.reason


@pytest.mark.timeout(60)
@pytest.mark.parametrize("compression", ["", "gzip", "zlib"])
@pytest.mark.parametrize("crc_ok", [True, False])
@pytest.mark.parametrize("check_crc", [True, False])
def test_corrupt_huge_length_is_our_error_fast_and_small(tmp_path, compression, crc_ok, check_crc):
    path = str(tmp_path / "huge.tfrecord")
    with RecordWriter(path, compression) as w:
        w.write_record(b"ok")
    with tfio.storage.files.open_write(path, compression) as f:  # rewrite with a bad frame after a good one
        f.write(encode_frame(b"ok") + _header(2**60, crc_ok) + b"x" * 100)
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        err = _one_error(path, compression_type=compression, check_crc=check_crc)
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert time.perf_counter() - t0 < 10  # a sanity bound, not a benchmark
    assert peak < 8 << 20, f"{peak} bytes allocated for a {2**60}-byte claim on a tiny file"
    assert err.offset == 18
    if (crc_ok or not check_crc) and compression:
        # a stream's size is unknown: the claim is refused by max_record_bytes first
        assert type(err) is tfio.RecordTooLargeError and str(2**60) in err.reason
    elif crc_ok or not check_crc:
        assert type(err) is tfio.TruncatedRecordError and str(2**60) in err.reason
    else:
        assert type(err) is tfio.CorruptRecordError


@pytest.mark.parametrize(
    "err",
    [
        tfio.CorruptRecordError("bad data CRC", "/x/y.tfrecord", 12345),
        tfio.TruncatedRecordError("cut", "gs://b/f.tfrecord", 0),
        tfio.IndexFileError("stale", "/i.index"),
        tfio.ExampleCodecError("feature 'a': nope"),
        tfio.TFRecordError("plain"),
    ],
)
def test_errors_pickle_with_path_and_offset(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert (back.reason, back.path, back.offset) == (err.reason, err.path, err.offset)
    assert str(back) == str(err)
    assert isinstance(back, RuntimeError)


def test_real_error_pickles(tmp_path):
    path = write_file(str(tmp_path / "p.tfrecord"), [b"a", b"b"])
    with open(path, "r+b") as f:
        f.seek(FRAME_OVERHEAD + 1 + 12)
        f.write(b"X")
    with pytest.raises(tfio.CorruptRecordError) as info:
        list(tfio.read_records(path))
    back = pickle.loads(pickle.dumps(info.value))
    assert back.offset == 17 and back.path == path and str(back) == str(info.value)


# ------------------------------------------------------------------ resynchronisation


def _resync_from(blob, start, size=True):
    stream = FrameStream(
        io.BytesIO(blob[start:]), path="<mem>", offset=start, size=len(blob) if size else None, chunk_size=64
    )
    found = stream.resync()
    return stream.offset if found else None


@settings(max_examples=150, deadline=None)
@given(payloads=st.lists(st.binary(max_size=200), min_size=1, max_size=8), data=st.data(), sized=st.booleans())
def test_resync_finds_the_next_boundary(payloads, data, sized):
    blob = b"".join(encode_frame(p) for p in payloads)
    offsets = frame_offsets(payloads)
    start = data.draw(st.integers(0, len(blob)))
    expected = next((o for o in offsets if o >= start), None)
    assert _resync_from(blob, start, sized) == expected


@pytest.mark.parametrize("sized", [True, False])
def test_resync_on_zero_heavy_data(sized):
    payloads = [b"", b"\x00" * 500, b"", b"\x00", b"\x00" * 4096, b"", b"\x00" * 12, b"\x00" * 16, b"z"]
    blob = b"".join(encode_frame(p) for p in payloads)
    offsets = frame_offsets(payloads)
    for start in range(len(blob) + 1):
        expected = next((o for o in offsets if o >= start), None)
        assert _resync_from(blob, start, sized) == expected, start


def test_resync_respects_limit():
    payloads = [b"a" * 100, b"b" * 100]
    blob = b"".join(encode_frame(p) for p in payloads)
    stream = FrameStream(io.BytesIO(blob[1:]), offset=1, size=len(blob))
    assert stream.resync(limit=50) is False
    stream = FrameStream(io.BytesIO(blob[1:]), offset=1, size=len(blob))
    assert stream.resync(limit=117) is True and stream.offset == 116


# ------------------------------------------------------------------ the scanner hook

from tfrecord_io.format import framing  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=50), max_size=6),
    data=st.data(),
    check=st.booleans(),
)
def test_scanner_contract_and_compiled_equals_python(payloads, data, check):
    """``_scan_frames`` (C when built) and ``_scan_frames_py`` agree on every input, and
    the Python one follows its contract on intact buffers."""
    buf = bytearray(b"".join(encode_frame(p) for p in payloads))
    if buf and data.draw(st.booleans()):
        bit = data.draw(st.integers(0, len(buf) * 8 - 1))
        buf[bit // 8] ^= 1 << (bit % 8)
    cut = data.draw(st.integers(0, len(buf)))
    buf = bytes(buf[:cut])
    offsets = frame_offsets(payloads)
    pos = data.draw(st.sampled_from([0] + [o for o in offsets if o <= len(buf)]))
    stop = data.draw(st.integers(0, len(buf) + 20))
    out_py, out_c = [], []
    res_py = framing._scan_frames_py(buf, pos, stop, check, out_py)
    res_c = framing._scan_frames(buf, pos, stop, check, out_c)
    assert (res_c, out_c) == (res_py, out_py)
    intact = buf == b"".join(encode_frame(p) for p in payloads)[:cut]
    if intact and cut == sum(len(p) + FRAME_OVERHEAD for p in payloads):
        expect = [(o + 12, len(p)) for o, p in zip(offsets, payloads) if pos <= o < stop]
        assert list(zip(out_py[::2], out_py[1::2])) == expect
        assert res_py[1] in (framing.STOPPED, framing.NEED_MORE)
