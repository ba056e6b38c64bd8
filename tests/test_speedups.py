"""The compiled core (tfrecord_io/_speedups.c) gives exactly the pure-Python / upb results.

These tests need the extension: CI builds it (``pip install -e .``; locally
``python setup.py build_ext --inplace``). When it is missing they FAIL, never skip: a
skipped test would hide that the fast path is untested.
"""

from __future__ import annotations

import os
import struct

import numpy as np
import pytest
from crc32c import crc32c as crc32c_pkg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfrecord_io.errors import TFRecordError
from tfrecord_io.format import codec, crc, framing, index, reader, writer

try:
    from tfrecord_io import _speedups as S
except ImportError as err:  # pragma: no cover - the failure path
    S = None
    _IMPORT_ERROR = str(err)


@pytest.fixture(autouse=True)
def speedups():
    """Fail (not skip) every test here when the extension was not built."""
    if S is None:
        pytest.fail(
            "tfrecord_io._speedups is not built (" + _IMPORT_ERROR + "): run "
            "`python setup.py build_ext --inplace` (CI: `pip install -e .`)"
        )
    assert framing.HAVE_SPEEDUPS and codec._parse_examples is not None
    return S


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# ------------------------------------------------------------------------ CRC32C


@SETTINGS
@given(data=st.binary(max_size=30000), offset=st.integers(0, 7))
def test_crc32c_matches_the_crc32c_package_on_both_paths(data, offset):
    view = memoryview(data)[min(offset, len(data)) :]
    expected = crc32c_pkg(view)
    assert S.crc32c(view) == expected
    for impl in _crc_impls():
        previous = S._crc_impl(impl)
        try:
            assert S.crc32c(view) == expected, impl
        finally:
            S._crc_impl(previous)
    assert S.masked_crc32c(view) == crc._masked_crc32c_py(view)


def _crc_impls():
    """The CRC32C codes this CPU can run: the table always, SSE4.2 and VPCLMULQDQ maybe."""
    impls = []
    for impl in ("table", "sse4.2", "vpclmulqdq"):
        try:
            S._crc_impl(S._crc_impl(impl))
        except ValueError:
            continue
        impls.append(impl)
    return impls


def test_crc32c_block_boundaries_of_the_interleaved_path():
    # the 3-stream loops switch at multiples of 3*256 and 3*8192 bytes
    # and the folding path starts at 1024 bytes, in steps of 256
    blob = os.urandom(3 * 8192 * 3 + 1000)
    sizes = (
        0,
        1,
        7,
        8,
        767,
        768,
        769,
        1023,
        1024,
        1025,
        1279,
        1280,
        1281,
        24575,
        24576,
        24577,
        49152,
        73728,
        len(blob) - 5,
    )
    for impl in _crc_impls():
        previous = S._crc_impl(impl)
        try:
            for n in sizes:
                for off in (0, 1, 5):
                    view = memoryview(blob)[off : off + n]
                    assert S.crc32c(view) == crc32c_pkg(view), (impl, n, off)
        finally:
            S._crc_impl(previous)
    assert "table" in _crc_impls() and S.CRC_IMPL in _crc_impls()


def test_known_masked_crc_values():
    # TensorFlow's framing of an empty record: length 0 -> masked CRC 0x7bb4bbaa... computed
    # independently with the pure-Python formula over the crc32c package
    for payload in (b"", b"a", b"123456789", bytes(range(256))):
        assert S.masked_crc32c(payload) == crc.mask(crc32c_pkg(payload))
    assert S.crc32c(b"123456789") == 0xE3069283  # the CRC32C check value


# ----------------------------------------------------------------- frame scanning


def _frames_file(payloads):
    return b"".join(framing.encode_frame(p) for p in payloads)


@st.composite
def damaged_buffers(draw):
    """Frames, then maybe bit flips, a truncation, junk in front or a huge length."""
    payloads = draw(st.lists(st.binary(max_size=300), max_size=8))
    buf = bytearray(_frames_file(payloads))
    for _ in range(draw(st.integers(0, 3))):
        if buf:
            i = draw(st.integers(0, len(buf) - 1))
            buf[i] ^= 1 << draw(st.integers(0, 7))
    if buf and draw(st.booleans()):
        del buf[draw(st.integers(0, len(buf))) :]
    if draw(st.booleans()):
        buf[0:0] = draw(st.binary(max_size=20))
    if draw(st.booleans()) and len(buf) >= 12:
        # a length field of 2**60 + x whose CRC matches: must not be trusted
        huge = struct.pack("<Q", (1 << 60) + draw(st.integers(0, 1000)))
        buf[0:12] = huge + struct.pack("<I", crc.masked_crc32c(huge))
    return bytes(buf)


@SETTINGS
@given(buf=damaged_buffers(), data=st.data())
def test_scan_frames_c_equals_python(buf, data):
    pos = data.draw(st.integers(0, len(buf) + 2))
    stop = data.draw(st.one_of(st.just(1 << 62), st.integers(-5, len(buf) + 5)))
    check = data.draw(st.booleans())
    max_len = data.draw(st.one_of(st.none(), st.integers(-1, 64)))  # max_record_bytes
    out_c, out_py = [], []
    assert S.scan_frames(buf, pos, stop, check, out_c, max_len) == framing._scan_frames_py(
        buf, pos, stop, check, out_py, max_len
    )
    assert out_c == out_py


@SETTINGS
@given(buf=damaged_buffers(), data=st.data())
def test_record_scanner_yields_what_scan_frames_finds(buf, data):
    pos = data.draw(st.integers(0, len(buf)))
    stop = data.draw(st.one_of(st.just(1 << 62), st.integers(0, len(buf) + 5)))
    check = data.draw(st.booleans())
    base = data.draw(st.integers(0, 1 << 40))
    max_len = data.draw(st.one_of(st.none(), st.integers(0, 64)))  # max_record_bytes
    out = []
    expected = framing._scan_frames_py(buf, pos, stop, check, out, max_len)
    it = S.RecordScanner(buf, memoryview(buf), base, pos, stop, check, max_len=max_len)
    got = list(it)
    assert (it.pos, it.status) == expected
    pairs = list(zip(out[0::2], out[1::2]))
    assert [off for off, _ in got] == [base + start - 12 for start, _ in pairs]
    assert [bytes(v) for _, v in got] == [buf[s : s + n] for s, n in pairs]
    views_only = list(S.RecordScanner(buf, memoryview(buf), base, pos, stop, check, True, max_len))
    assert [bytes(v) for v in views_only] == [bytes(v) for _, v in got]


def test_scanner_rejects_bad_arguments():
    with pytest.raises(ValueError):
        S.scan_frames(b"", -1, 10, True, [])
    with pytest.raises(TypeError):
        S.scan_frames(b"", 0, 10, True, ())
    with pytest.raises(ValueError):
        S.RecordScanner(b"abc", memoryview(b"ab"), 0, 0, 10, True)


def _read_all(path, use_c, **kw):
    """Everything read_records yields (and the error it ends with), as plain values."""
    saved = framing._scan_frames, framing._RecordScanner
    if not use_c:
        framing._scan_frames, framing._RecordScanner = framing._scan_frames_py, None
    out = []
    try:
        for off, item in reader.read_records(path, **kw):
            out.append((off, bytes(item) if isinstance(item, memoryview) else item))
    except TFRecordError as err:
        out.append((type(err).__name__, err.offset, err.reason))
    finally:
        framing._scan_frames, framing._RecordScanner = saved
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(buf=damaged_buffers(), data=st.data())
def test_read_records_same_with_c_and_python_scanners(tmp_path, buf, data):
    path = str(tmp_path / "f.tfrecord")
    with open(path, "wb") as f:
        f.write(buf)
    chunk = data.draw(st.sampled_from([64, 100, 4096, 1 << 20]))
    start = data.draw(st.integers(0, len(buf)))
    end = data.draw(st.one_of(st.none(), st.integers(start, len(buf) + 3)))
    on_corrupt = data.draw(st.sampled_from(["raise", "report"]))
    kw = dict(start=start, end=end, chunk_size=chunk, on_corrupt=on_corrupt)
    assert _read_all(path, True, **kw) == _read_all(path, False, **kw)


def test_kept_views_survive_buffer_reuse(tmp_path):
    # buffers are recycled when no view of them is alive; views kept by the caller
    # must keep their bytes, whatever the caller keeps
    rng = np.random.default_rng(5)
    payloads = [rng.bytes(int(n)) for n in rng.integers(0, 3000, 4000)]
    path = str(tmp_path / "f.tfrecord")
    with writer.RecordWriter(path) as w:
        w.write_records(payloads)
    for keep_every in (1, 3, 1000):
        kept = {}
        for i, view in enumerate(reader.tfrecord_iterator(path)):
            assert view.readonly
            if i % keep_every == 0:
                kept[i] = view
            else:
                assert bytes(view) == payloads[i]
        for i, view in kept.items():
            assert bytes(view) == payloads[i], i
    arrays = [np.frombuffer(v, np.uint8) for v in reader.tfrecord_iterator(path)]
    assert all(a.tobytes() == p for a, p in zip(arrays, payloads))


def test_reading_a_file_that_shrank_after_opening(tmp_path):
    path = str(tmp_path / "f.tfrecord")
    payloads = [os.urandom(5000) for _ in range(50)]
    with open(path, "wb") as f:
        f.write(_frames_file(payloads))
    it = reader.read_records(path, chunk_size=4096)
    first = next(it)
    assert bytes(first[1]) == payloads[0]
    os.truncate(path, 3 * 5016 + 7)
    with pytest.raises(TFRecordError) as info:
        list(it)
    assert "truncated" in str(info.value)


# ----------------------------------------------------------------------- writing


@SETTINGS
@given(payloads=st.lists(st.binary(max_size=2000), max_size=20))
def test_encode_frames_equals_python_framing(payloads):
    assert S.encode_frames(payloads) == b"".join(framing.encode_frame(p) for p in payloads)
    assert S.encode_frames([memoryview(p) for p in payloads]) == S.encode_frames(payloads)


# -------------------------------------------------------------------- index text

_INDEX_BYTES = st.lists(
    st.one_of(
        st.sampled_from(
            [
                b" ",
                b"\n",
                b"\t",
                b"\r\n",
                b"\x0b",
                b"\x0c",
                b"+",
                b"-",
                b"_",
                b"1_0",
                b"007",
                b"+-5",
                b"x",
                b".",
                b"\xc3\xa9",
                b"\x00",
            ]
        ),
        st.integers(-(1 << 64), 1 << 64).map(lambda n: str(n).encode()),
    ),
    max_size=30,
).map(b"".join)


def _parse_both(data: bytes):
    """(C result or error message, Python twin's result or error message)."""
    out = []
    for parse in (lambda d: np.frombuffer(S.parse_index_numbers(d), dtype=np.int64), index._parse_index_numbers_py):
        try:
            out.append(parse(data).tolist())
        except ValueError as err:
            out.append(str(err))
    return out


@SETTINGS
@given(data=_INDEX_BYTES)
def test_parse_index_numbers_c_equals_python(data):
    """Numbers, signs, whitespace of every kind, underscores, letters, non-ASCII, numbers
    past int64: the same numbers, or the same error naming the same token and byte."""
    compiled, twin = _parse_both(data)
    assert compiled == twin


@SETTINGS
@given(pairs=st.lists(st.tuples(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-(1 << 63), (1 << 63) - 1))))
def test_format_index_equals_python_and_parses_back(pairs):
    offsets = np.array([p[0] for p in pairs], dtype=np.int64)
    sizes = np.array([p[1] for p in pairs], dtype=np.int64)
    text = S.format_index(offsets, sizes)
    assert text == index.RecordIndex(offsets, sizes)._to_text_py().encode("ascii")
    numbers = np.frombuffer(S.parse_index_numbers(text), dtype=np.int64)
    assert numbers[0::2].tolist() == offsets.tolist() and numbers[1::2].tolist() == sizes.tolist()


def test_index_text_functions_refuse_bad_arguments():
    with pytest.raises(ValueError, match="one length"):
        S.format_index(np.zeros(2, dtype=np.int64), np.zeros(3, dtype=np.int64))
    with pytest.raises(TypeError):
        S.format_index(np.zeros(2, dtype=np.int64))
    with pytest.raises(TypeError):
        S.parse_index_numbers("0 16")  # text as bytes, as read from the file


def test_write_records_with_index_matches_record_by_record(tmp_path):
    payloads = [os.urandom(n) for n in (0, 1, 50, 7000, 3)]
    a, b = str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")
    with writer.RecordWriter(a, index_path=a + ".index") as w:
        w.write_records(payloads)
        w.write_records(iter(payloads))
    with writer.RecordWriter(b, index_path=b + ".index") as w:
        for p in payloads * 2:
            w.write_record(p)
    assert open(a, "rb").read() == open(b, "rb").read()
    assert open(a + ".index").read() == open(b + ".index").read()


_TEXT = st.text(max_size=12)
_INT64 = st.integers(-(1 << 63), (1 << 63) - 1)
_F32 = st.floats(width=32, allow_nan=False)
_DOUBLE = st.floats(allow_nan=True, allow_infinity=True)
_FEATURE_VALUES = st.one_of(
    st.binary(max_size=20),
    _TEXT,
    _INT64,
    st.booleans(),
    _DOUBLE,
    st.lists(_INT64, min_size=1, max_size=6),
    st.lists(_DOUBLE, min_size=1, max_size=6),
    st.lists(st.one_of(_INT64, _F32), min_size=1, max_size=6),
    st.lists(st.one_of(st.binary(max_size=8), _TEXT), min_size=1, max_size=4),
    st.tuples(st.lists(_INT64, max_size=5), st.just("int")),
    st.tuples(st.lists(_F32, max_size=5), st.sampled_from(["float", "float32"])),
    st.tuples(st.lists(st.binary(max_size=8), max_size=4), st.sampled_from(["byte", "bytes"])),
    st.tuples(st.binary(max_size=8), st.just("byte")),
    st.tuples(_INT64, st.just("int")),
    st.tuples(_INT64, st.just("float")),
    st.tuples(_DOUBLE, st.just("float")),
)


def _upb_bytes(datum):
    return codec.build_example(datum).SerializeToString(deterministic=True)


@SETTINGS
@given(datum=st.dictionaries(_TEXT, _FEATURE_VALUES, max_size=6))
def test_c_encoder_gives_upbs_deterministic_bytes(datum):
    fast = S.encode_example(datum, codec._TYPE_CODES)
    assert fast is not None  # every value above is one the encoder handles
    assert fast == _upb_bytes(datum)
    assert codec.serialize_example(datum) == fast


@pytest.mark.parametrize(
    "datum",
    [
        {"a": np.arange(3)},  # NumPy values: upb path
        {"a": []},  # empty list: the clear error comes from Python
        {"a": None},
        {"a": ([1.5], "int")},
        {"a": ("x", "int")},
        {"a": (1, "INT")},  # other spellings: Python lower-cases them
        {"a": 1 << 64},  # outside int64
        {"a": "\ud800"},  # not encodable as UTF-8
        {1: 2},
        {"a": [1, b"x"]},
        {"a": ([1, "2.5"], "float")},  # Python converts the string
    ],
)
def test_c_encoder_leaves_odd_input_to_python(datum):
    assert S.encode_example(datum, codec._TYPE_CODES) is None
    try:
        expected = _upb_bytes(datum)
    except Exception as err:  # noqa: BLE001 - whatever upb raises, the public function must raise too
        with pytest.raises(type(err)):
            codec.serialize_example(datum)
    else:
        assert codec.serialize_example(datum) == expected


# ----------------------------------------------------------------------- parsing

# Wire-format building blocks, to make encodings upb accepts but never writes itself.


def _varint(v: int) -> bytes:
    v &= (1 << 64) - 1
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _ld(field: int, body: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(body)) + body


def _list_body(kind: str, values, style: str, split: int) -> bytes:
    """A BytesList/FloatList/Int64List body: packed or unpacked, in one or more chunks."""
    if kind == "bytes_list":
        return b"".join(_ld(1, v) for v in values)
    chunks = [values[:split], values[split:]] if split else [values]
    out = b""
    for chunk in chunks:
        if style == "unpacked":
            if kind == "float_list":
                out += b"".join(b"\x0d" + struct.pack("<f", v) for v in chunk)
            else:
                out += b"".join(b"\x08" + _varint(v) for v in chunk)
        elif chunk or style == "packed-empty":
            if kind == "float_list":
                out += _ld(1, struct.pack(f"<{len(chunk)}f", *chunk))
            else:
                out += _ld(1, b"".join(_varint(v) for v in chunk))
    return out


_FIELD = {"bytes_list": 1, "float_list": 2, "int64_list": 3}


def _entry(key: bytes, feature: bytes) -> bytes:
    """One Features.feature map entry."""
    return _ld(1, _ld(1, key) + _ld(2, feature))


def _wire(*entries: bytes) -> bytes:
    """An Example whose features hold these entries."""
    return _ld(1, b"".join(entries))


@st.composite
def wire_examples(draw):
    """(serialized Example, description) with packed/unpacked/chunked/duplicated parts."""
    keys = draw(st.lists(st.text(max_size=6).filter(lambda k: k != "other"), min_size=1, max_size=4, unique=True))
    kinds = [draw(st.sampled_from(list(_FIELD))) for _ in keys]
    entries = []
    for key, kind in zip(keys, kinds):
        if kind == "bytes_list":
            values = draw(st.lists(st.binary(max_size=6), max_size=4))
        elif kind == "float_list":
            values = draw(st.lists(_F32, max_size=6))
        else:
            values = draw(st.lists(_INT64, max_size=6))
        style = draw(st.sampled_from(["packed", "unpacked", "packed-empty"]))
        split = draw(st.integers(0, len(values)))
        if draw(st.booleans()):  # the list message sent in two pieces: upb merges them
            feature = _ld(_FIELD[kind], _list_body(kind, values[:split], style, 0))
            feature += _ld(_FIELD[kind], _list_body(kind, values[split:], style, 0))
        else:  # one list message, its values maybe in two packed/unpacked chunks
            feature = _ld(_FIELD[kind], _list_body(kind, values, style, split))
        if not values and draw(st.booleans()):
            feature = b""  # a Feature with no kind set
        if draw(st.booleans()):  # an earlier entry for the same key, replaced by the next
            entries.append(_entry(key.encode(), _ld(3, _ld(1, _varint(7)))))
        entries.append(_entry(key.encode(), feature))
    if draw(st.booleans()):  # a feature nobody asked for
        entries.insert(draw(st.integers(0, len(entries))), _entry(b"other", _ld(2, _ld(1, struct.pack("<2f", 1, 2)))))
    if draw(st.booleans()) and len(entries) > 1:  # Example.features in two pieces: merged
        cut = draw(st.integers(1, len(entries) - 1))
        data = _wire(*entries[:cut]) + _wire(*entries[cut:])
    else:
        data = _wire(*entries)
    names = {"bytes_list": "byte", "float_list": "float", "int64_list": "int"}
    return data, {k: names[kd] for k, kd in zip(keys, kinds)}


def _upb_parse(records, description):
    saved = codec._parse_examples
    codec._parse_examples = None
    try:
        return [codec.parse_example(r, description) for r in records], codec.parse_examples_batch(records, description)
    finally:
        codec._parse_examples = saved


def _same(a, b):
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        if not (isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape):
            return False
        if a.dtype == object:
            return all(_same(x, y) for x, y in zip(a.tolist(), b.tolist()))
        return a.tobytes() == b.tobytes()  # bitwise: -0.0 and NaN payloads too
    return type(a) is type(b) and a == b


@SETTINGS
@given(examples=st.lists(wire_examples(), min_size=1, max_size=5))
def test_c_parser_equals_upb_on_unusual_encodings(examples):
    description = examples[0][1]
    # records that all have the first record's keys and kinds
    records = [data for data, desc in examples if desc == description] or [examples[0][0]]
    per_record, batch = _upb_parse(records, description)
    cols = S.parse_examples(
        records,
        [k.encode() for k in description],
        [codec._KIND_CODES[codec.TYPE_NAMES[t]] for t in description.values()],
    )
    assert cols is not None  # all of these are valid encodings the C parser takes
    assert _same(codec.parse_examples(records, description), per_record)
    assert _same(codec.parse_examples_batch(records, description), batch)


@SETTINGS
@given(
    datums=st.lists(
        st.fixed_dictionaries(
            {
                "label": st.tuples(_INT64, st.just("int")),
                "floats": st.tuples(st.lists(_F32, max_size=4), st.just("float")),
                "text": st.tuples(st.lists(st.binary(max_size=5), max_size=3), st.just("byte")),
            }
        ),
        max_size=6,
    )
)
def test_c_parser_equals_upb_on_written_examples(datums):
    records = [codec.serialize_example(d) for d in datums]
    description = {"label": "int", "floats": "float", "text": "byte"}
    per_record, batch = _upb_parse(records, description)
    assert _same(codec.parse_examples(records, description), per_record)
    assert _same(codec.parse_examples_batch(records, description), batch)
    views = [memoryview(bytearray(r)) for r in records]
    assert _same(codec.parse_examples(views, description), per_record)


def _example(**features) -> bytes:
    return codec.serialize_example(features)


@pytest.mark.parametrize(
    "record, description",
    [
        (_example(a=1), {"b": "int"}),  # missing key -> upb's clear error
        (_example(a=1.5), {"a": "int"}),  # type differs from the description
        (_example(a=1) + b"\x10\x01", {"a": "int"}),  # unknown field in Example
        (b"\x0a\x05\x0a\x03\x0a\x01", {"a": "int"}),  # truncated
        (_wire(_entry(b"a", _ld(3, _ld(1, b"\x01")) + _ld(2, b""))), {"a": "int"}),  # oneof switch
        (_wire(_entry(b"\xff", b"")) + _example(a=1), {"a": "int"}),  # bad UTF-8 key
        (_wire(_entry(b"a", _ld(2, _ld(1, b"\x00\x00\x80")))), {"a": "float"}),  # 3 bytes of floats
        (_wire(_entry(b"a", _ld(3, _ld(1, b"\xff" * 11)))), {"a": "int"}),  # over-long varint
        (_wire(_entry(b"z", _ld(3, _ld(1, b"\x80")))) + _example(a=1), {"a": "int"}),  # bad unwanted
    ],
)
def test_c_parser_leaves_odd_records_to_upb(record, description):
    keys = [k.encode() for k in description]
    kinds = [codec._KIND_CODES[codec.TYPE_NAMES[t]] for t in description.values()]
    assert S.parse_examples([_example(a=1), record], keys, kinds) is None
    try:
        expected = _upb_parse([record], description)
    except Exception as err:  # noqa: BLE001 - whatever upb raises, the public function must raise too
        with pytest.raises(type(err)):
            codec.parse_examples([record], description)
        with pytest.raises(Exception):  # noqa: B017 - the batch parser's error type is not part of its contract
            codec.parse_examples_batch([record], description)
    else:
        assert _same(codec.parse_examples([record], description), expected[0])


def test_byte_features_with_equal_counts_stay_lists():
    # two values in every record: an object array of lists, not a 2-D broadcast
    records = [_example(t=[b"a", b"b"]), _example(t=[b"c", b"d"])]
    for fast in (True, False):
        saved = codec._parse_examples
        if not fast:
            codec._parse_examples = None
        try:
            out = codec.parse_examples_batch(records, {"t": "byte"})
        finally:
            codec._parse_examples = saved
        assert out["t"].shape == (2,) and out["t"][1] == [b"c", b"d"]


def test_loader_yields_good_records_before_a_corrupt_one(tmp_path):
    path = str(tmp_path / "f.tfrecord")
    records = [_example(label=i) for i in range(300)]
    blob = bytearray(_frames_file(records))
    bad = sum(len(r) + 16 for r in records[:200]) + 13  # inside record 200's data
    blob[bad] ^= 0xFF
    with open(path, "wb") as f:
        f.write(blob)
    got = []
    with pytest.raises(TFRecordError) as info:
        for example in reader.example_loader(path, None, {"label": "int"}):
            got.append(int(example["label"][0]))
    assert got == list(range(200))
    assert info.value.offset == bad - 13


def test_loader_equals_per_record_parse(tmp_path):
    path = str(tmp_path / "f.tfrecord")
    rng = np.random.default_rng(3)
    datums = [
        {
            "label": int(rng.integers(-5, 5)),
            "v": ([float(x) for x in rng.random(int(rng.integers(0, 4)))], "float"),
            "t": b"x" * i,
        }
        for i in range(700)
    ]
    with writer.TFRecordWriter(path) as w:
        for d in datums:
            w.write(d)
    description = {"label": "int", "v": "float", "t": "byte"}
    fast = list(reader.example_loader(path, None, description))
    expected = [codec.parse_example(codec.serialize_example(d), description) for d in datums]
    assert _same(fast, expected)
    fast[0]["v"][...] = 0  # arrays are writable and independent of the next record's
    assert _same(fast[1], expected[1])


def test_description_key_that_is_not_utf8_fails_as_on_the_upb_path():
    record, description = _example(a=1), {"\ud800": "int"}
    with pytest.raises(Exception) as upb:
        codec.parse_example(record, description)
    with pytest.raises(type(upb.value)):
        codec.parse_examples([record], description)


class _ReadOnlyStream:
    """A stream with read() but no readinto(), like some remote file objects."""

    def __init__(self, f):
        self._f = f

    def read(self, n=-1):
        return self._f.read(n)


def test_streams_without_readinto_read_the_same(tmp_path):
    path = str(tmp_path / "f.tfrecord")
    payloads = [os.urandom(n) for n in np.random.default_rng(1).integers(0, 900, 500)]
    with writer.RecordWriter(path) as w:
        w.write_records(payloads)
    size = os.path.getsize(path)
    for chunk in (64, 1000, 1 << 20):
        with open(path, "rb") as f:
            stream = framing.FrameStream(_ReadOnlyStream(f), path=path, size=size, chunk_size=chunk)
            assert [bytes(v) for _, v in stream.frames()] == payloads
        with open(path, "rb") as f:
            stream = framing.FrameStream(f, path=path, size=size, chunk_size=chunk)
            assert [bytes(v) for _, v in stream.frames()] == payloads


class _Str(str):
    pass


def test_type_names_of_str_subclasses_go_the_python_way():
    datum = {"a": (b"x", _Str("byte"))}
    assert S.encode_example(datum, codec._TYPE_CODES) is None
    assert codec.serialize_example(datum) == _upb_bytes(datum)


def test_loader_yields_good_examples_before_an_unparsable_one(tmp_path):
    path = str(tmp_path / "f.tfrecord")
    records = [_example(label=i) for i in range(50)]
    records[30] = b"\x0a\x05junk"  # a frame whose payload is no Example
    with writer.RecordWriter(path) as w:
        w.write_records(records)
    got = []
    with pytest.raises(codec.ExampleCodecError):
        for example in reader.example_loader(path, None, {"label": "int"}):
            got.append(int(example["label"][0]))
    assert got == list(range(30))


def test_no_records_parse_to_nothing():
    assert codec.parse_examples([], {"a": "int"}) == []
    assert list(codec.parse_example_stream(iter([]), {"a": "float"})) == []
