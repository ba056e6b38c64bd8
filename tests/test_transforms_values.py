"""Text, scalar, label and array encoders; spec checks; rows with missing columns."""

from __future__ import annotations

import os
import unicodedata

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tfrecord_io.format.codec import parse_example
from tfrecord_io.transforms import (
    Array,
    Bytes,
    EncodeError,
    FeatureSpec,
    Float,
    Image,
    Int,
    Label,
    Text,
    check_spec,
    decode_example,
    description,
    encode_row,
    feature_specs,
    tf_parse_spec,
)

MULTILINGUAL = [
    "A cat on a mat",
    "Кошка сидит на ковре",
    "猫が畳の上に座っている",
    "القطة تجلس على السجادة",
    "बिल्ली चटाई पर बैठी है",
    "🐈 на 🧶, ok? ✓",
    "Ελληνικά: γάτα",
]


def rt(value, enc, column="c"):
    spec = {column: enc}
    data = encode_row({column: value}, spec)
    return parse_example(data), decode_example(data, spec)[column]


def reject(value, enc, column="c"):
    with pytest.raises(EncodeError) as err:
        encode_row({column: value}, {column: enc})
    assert err.value.column == column
    return err.value


@pytest.mark.parametrize("text", MULTILINGUAL)
def test_multilingual_text_round_trips_as_utf8(text):
    feats, out = rt(text, Text())
    assert feats["c"] == text.encode("utf-8") and out == text
    _, out = rt(text.encode("utf-8"), Text())  # bytes in: same result
    assert out == text


def test_nfc_normalisation_and_strip():
    decomposed = unicodedata.normalize("NFD", "  café Ångström  ")
    assert decomposed != "  café Ångström  "
    _, out = rt(decomposed, Text(normalize="NFC", strip=True))
    assert out == "café Ångström"
    _, out = rt(decomposed, Text(normalize=None))
    assert out == decomposed


def test_invalid_utf8_rejected_with_offset_or_kept():
    bad = b"ok: " + b"\xff\xfe" + b" tail"
    err = reject(bad, Text())
    assert err.stage == "decode" and "byte 4" in err.reason and "UTF-8" in err.reason
    feats, out = rt(bad, Text(on_invalid="keep"))
    assert feats["c"] == bad and out == bad
    err = reject("\ud800 lone surrogate", Text())
    assert err.stage == "encode"
    err = reject(3.5, Text())
    assert err.stage == "input"
    err = reject("   ", Text(strip=True, allow_empty=False))
    assert err.stage == "input" and "empty" in err.reason


def test_int_float_parse_strings_and_refuse_lossy_values():
    assert rt("42", Int())[1] == 42 and rt(np.int16(-3), Int())[1] == -3 and rt(True, Int())[1] == 1
    assert reject(3.7, Int()).stage == "input"
    assert "not an integer" in reject("4x", Int()).reason
    assert "int64" in reject(1 << 64, Int()).reason
    assert "outside" in reject(11, Int(min_value=0, max_value=10)).reason
    assert rt("0.25", Float())[1] == 0.25 and rt(2, Float())[1] == 2.0
    assert "not finite" in reject(float("nan"), Float()).reason
    assert np.isnan(rt(float("nan"), Float(allow_nan=True))[1])
    assert rt("héllo", Bytes())[1] == "héllo".encode()


def test_labels_with_vocabulary():
    enc = Label(vocabulary=["cat", "dog", "bird"])
    assert rt("dog", enc)[1] == 1 and rt(b"bird", enc)[1] == 2 and rt(0, enc)[1] == 0 and rt("2", enc)[1] == 2
    assert enc.name_of(rt("bird", enc)[1]) == "bird"
    err = reject("fish", enc)
    assert err.stage == "transform" and "not in the vocabulary" in err.reason
    assert "outside [0, 3)" in reject(3, enc).reason
    assert "outside [0, 5)" in reject(-1, Label(num_classes=5)).reason
    with pytest.raises(ValueError):
        Label(vocabulary=["a", "a"])


@settings(max_examples=60, deadline=None)
@given(
    arr=hnp.arrays(
        dtype=st.sampled_from([np.float32, np.float64, np.int64, np.int32, np.uint8, np.int16, np.bool_, np.float16]),
        shape=hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5),
        elements={"allow_nan": False},
    )
)
def test_property_arrays_round_trip_exactly_with_shape(arr):
    _, out = rt(arr, Array(dtype=arr.dtype.name))
    assert out.dtype == arr.dtype and out.shape == arr.shape
    np.testing.assert_array_equal(out, arr)


def test_array_shape_and_cast_checks():
    enc = Array(dtype="float32", shape=(2, -1))
    feats, out = rt([[1, 2, 3], [4, 5, 6]], enc)
    assert feats["c/shape"].tolist() == [2, 3] and feats["c"].dtype == np.float32
    assert out.shape == (2, 3)
    assert "shape" in reject(np.zeros((3, 3)), enc).reason
    assert reject([1.5, 2], Array(dtype="int64")).stage == "transform"
    assert reject([300], Array(dtype="uint8")).stage == "transform"
    assert reject([1e300], Array(dtype="float32")).stage == "transform"
    assert reject(["a", "b"], Array()).stage == "input"
    feats, out = rt(np.arange(6, dtype=np.uint8).reshape(2, 3), Array(dtype="uint8"))
    assert feats["c"] == bytes(range(6)) and feats["c/dtype"] == b"uint8"
    with pytest.raises(ValueError):
        Array(dtype="float64", storage="list")


def test_missing_and_optional_columns():
    spec = {"a": Int(), "b": Text(optional=True)}
    err = reject_row({"b": "x"}, spec)
    assert err.column == "a" and err.stage == "input" and "no such column" in err.reason
    err = reject_row({"a": None}, spec)
    assert "missing value" in err.reason
    out = decode_example(encode_row({"a": 1}, spec), spec)
    assert out == {"a": 1, "b": None}
    assert reject_row(["not", "a", "dict"], spec).stage == "input"


def reject_row(row, spec):
    with pytest.raises(EncodeError) as err:
        encode_row(row, spec)
    return err.value


def test_check_spec_refuses_collisions_and_non_encoders():
    with pytest.raises(ValueError, match="image/encoded"):
        check_spec({"image": Image(), "other": Image(key="image")})
    with pytest.raises(ValueError, match="'x'"):
        check_spec({"x": Int(), "y": Float(key="x")})
    with pytest.raises(TypeError):
        check_spec({"x": "int"})
    with pytest.raises(TypeError):
        check_spec({})


def test_specs_serialise_and_describe():
    spec = {
        "image": Image(),
        "label": Label(["a"]),
        "emb": Array(shape=(4,)),
        "ragged": Array(),
        "t": Text(optional=True),
    }
    specs = feature_specs(spec)
    assert [FeatureSpec.from_dict(s.to_dict()) for s in specs] == specs
    assert description(specs)["label"] == "int" and description(specs)["image/encoded"] == "byte"
    tf_spec = tf_parse_spec(specs)
    assert tf_spec["emb"] == {"type": "FixedLenFeature", "dtype": "float32", "sequence": False, "shape": [4]}
    assert tf_spec["ragged"]["type"] == "VarLenFeature"
    assert tf_spec["t"]["type"] == "VarLenFeature"  # optional: may be absent
    assert Label(["a", "b"]).to_config() == {
        "type": "Label",
        "vocabulary": ["a", "b"],
        "num_classes": 2,
        "optional": False,
        "key": None,
    }
    assert Image(resize=(2, 3)).to_config()["resize"] == [2, 3]


def test_spec_config_round_trip_and_info():
    import json
    import pickle

    from tfrecord_io.transforms import (
        Audio,
        AudioFrames,
        ExampleDecoder,
        Steps,
        spec_config,
        spec_from_config,
        spec_info,
    )

    spec = {
        "image": Image(mode="RGB", reencode="jpeg", quality=80, resize=(32, 16)),
        "caption": Text(strip=True),
        "audio": Audio(sample_rate=16000, mono=True, storage="floats"),
        "label": Label(vocabulary=["cat", "dog"]),
        "emb": Array(dtype="float32", shape=(4,)),
        "n": Int(optional=True),
        "s": Float(),
    }
    config = json.loads(json.dumps(spec_config(spec)))  # through JSON, as a job config would be
    rebuilt = spec_from_config(config)
    assert spec_config(rebuilt) == config
    assert feature_specs(rebuilt) == feature_specs(spec)
    assert spec_from_config({"t": Steps("int", step_length=None).to_config()})["t"].step_length is None
    assert spec_from_config({"f": AudioFrames(400, 160).to_config()})["f"].hop_length == 160
    info = spec_info(spec)
    assert info["columns"]["label"]["vocabulary"] == ["cat", "dog"]
    assert {f["key"] for f in info["features"]} >= {"image/encoded", "audio/samples", "label", "emb", "emb/shape"}
    assert info["tf_parse_spec"]["n"]["type"] == "VarLenFeature"
    json.dumps(info)
    with pytest.raises(ValueError, match="unknown encoder"):
        spec_from_config({"x": {"type": "Video"}})
    with pytest.raises(ValueError, match="Image"):
        spec_from_config({"x": {"type": "Image", "colour": "red"}})
    dec = pickle.loads(pickle.dumps(ExampleDecoder({"n": Int()})))
    assert dec(encode_row({"n": 5}, {"n": Int()})) == {"n": 5}


@settings(max_examples=200, deadline=None)
@given(
    text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40),
    form=st.sampled_from([None, "NFC", "NFKD"]),
)
def test_property_text_round_trip(text, form):
    _, out = rt(text, Text(normalize=form))
    assert out == (unicodedata.normalize(form, text) if form else text)


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=40))
def test_property_bytes_are_stored_iff_valid_utf8(data):
    try:
        expected = data.decode("utf-8")
    except UnicodeDecodeError:
        expected = None
    if expected is None:
        assert reject(data, Text(normalize=None)).stage == "decode"
        assert rt(data, Text(on_invalid="keep"))[1] == data
    else:
        assert rt(data, Text(normalize=None))[1] == expected


def test_plain_functions_do_not_import_beam():
    """Encoders, encode_row, decoders and record checks run in PyTorch / tf.data code
    without Beam; only the PTransform modules import it."""
    import subprocess
    import sys

    code = (
        "import sys, numpy as np\n"
        "from tfrecord_io.transforms import Array, Int, Text, encode_row, decode_example, check_record, feature_specs, "
        "validate_files\n"
        "spec = {'a': Array(shape=(2,)), 'n': Int(), 't': Text()}\n"
        "rec = encode_row({'a': [1, 2], 'n': 3, 't': 'x'}, spec)\n"
        "assert decode_example(rec, spec)['n'] == 3 and check_record(rec, feature_specs(spec)) == []\n"
        "assert 'apache_beam' not in sys.modules, 'Beam was imported'\n"
        "import tfrecord_io.transforms; tfrecord_io.transforms.EncodeExample\n"
        "assert 'apache_beam' in sys.modules\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_decode_and_encode_errors_are_siblings_under_column_error():
    """A record that does not decode raises DecodeError naming its column; it is a
    ColumnError, as EncodeError is, but not an EncodeError (an `except EncodeError`
    around encoding must not swallow a decoding failure, nor the reverse); the class and
    its fields survive pickling between Beam workers and ``with_column``."""
    import pickle

    from tfrecord_io.transforms import ColumnError, DecodeError, EncodeError, decode_example, encode_row

    record = encode_row({"label": "cat"}, {"label": Text()})
    with pytest.raises(DecodeError) as err:
        decode_example(record, {"label": Image()})
    assert err.value.column == "label" and err.value.stage == "decode"
    assert isinstance(err.value, ColumnError) and isinstance(err.value, ValueError)
    assert not isinstance(err.value, EncodeError)
    assert not issubclass(EncodeError, DecodeError)
    again = pickle.loads(pickle.dumps(err.value))
    assert type(again) is DecodeError and (again.column, again.stage, again.reason) == (
        "label",
        "decode",
        err.value.reason,
    )
    renamed = EncodeError("read", "missing").with_column("image")
    assert type(renamed) is EncodeError and renamed.column == "image"
    assert type(DecodeError("decode", "bad").with_column("x")) is DecodeError
