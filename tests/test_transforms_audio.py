"""Audio encoder/decoder with sine waves written by soundfile at several rates,
channel counts and formats, and unreadable files."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile as sf

from tfrecord_io.format.codec import parse_example
from tfrecord_io.transforms import Audio, AudioData, DecodeError, EncodeError, decode_example, encode_row

from transforms_media import audio_bytes, sine


def roundtrip(value, enc):
    spec = {"audio": enc}
    data = encode_row({"audio": value}, spec)
    return parse_example(data), decode_example(data, spec)["audio"]


def peak_hz(x: np.ndarray, rate: int) -> float:
    spectrum = np.abs(np.fft.rfft(x))
    return float(np.fft.rfftfreq(len(x), 1 / rate)[np.argmax(spectrum)])


@pytest.mark.parametrize("rate", [8000, 16000, 44100])
@pytest.mark.parametrize("channels", [1, 2])
@pytest.mark.parametrize("fmt,subtype", [("WAV", "FLOAT"), ("WAV", "PCM_16"), ("FLAC", None), ("OGG", None)])
def test_samples_round_trip_as_soundfile_reads_them(rate, channels, fmt, subtype):
    samples = sine(rate, 0.25, channels)
    data = audio_bytes(samples, rate, fmt, subtype)
    feats, out = roundtrip(data, Audio())
    expect, expect_rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    assert isinstance(out, AudioData) and out.sample_rate == rate == expect_rate
    assert out.samples.dtype == np.float32 and out.samples.shape == expect.shape
    np.testing.assert_array_equal(out.samples, expect)  # exact: float32 bytes stored
    assert feats["audio/format"] == fmt.encode()
    assert (feats["audio/channels"][0], feats["audio/num_samples"][0]) == (channels, expect.shape[0])
    if fmt == "WAV" and subtype == "FLOAT":
        np.testing.assert_array_equal(out.samples, samples)  # lossless end to end


def test_mono_downmix_is_the_channel_mean():
    stereo = sine(16000, 0.1, 2)
    _, out = roundtrip(audio_bytes(stereo, 16000, "WAV", "FLOAT"), Audio(mono=True))
    assert out.samples.shape == (1600, 1)
    np.testing.assert_allclose(out.samples[:, 0], stereo.mean(axis=1), rtol=0, atol=1e-7)


@pytest.mark.parametrize("src,dst", [(44100, 16000), (8000, 16000)])
def test_resample_keeps_duration_and_pitch(src, dst):
    tone = sine(src, 1.0, 1, freq=1000.0)
    feats, out = roundtrip(audio_bytes(tone, src, "FLAC"), Audio(sample_rate=dst))
    assert out.sample_rate == dst and feats["audio/sample_rate"][0] == dst
    assert abs(out.samples.shape[0] - dst) <= 1
    assert abs(peak_hz(out.samples[:, 0], dst) - 1000.0) < 2.0


@pytest.mark.parametrize("res_type", ["soxr_hq", "soxr_vhq", "soxr_mq", "soxr_lq", "soxr_qq"])
@pytest.mark.parametrize("src,dst", [(44100, 16000), (22050, 16000), (8000, 16000), (48000, 44100), (11025, 16000)])
@pytest.mark.parametrize("channels", [1, 2])
def test_resample_gives_librosas_samples_bit_for_bit(res_type, src, dst, channels):
    """soxr's qualities run on soxr without librosa; the samples must be exactly those
    librosa.resample gave (what earlier builds wrote), lengths that round up included."""
    librosa = pytest.importorskip("librosa")
    from tfrecord_io.transforms.encoders.audio import resample

    rng = np.random.default_rng(src + dst + channels)
    for n in (1, 7, 4001):
        x = (rng.standard_normal((n, channels)) * 0.3).astype(np.float32)
        expect = librosa.resample(np.ascontiguousarray(x.T), orig_sr=src, target_sr=dst, res_type=res_type, axis=-1)
        expect = np.ascontiguousarray(expect.T, dtype=np.float32)
        got = resample(x, src, dst, res_type)
        assert got.dtype == np.float32 and got.shape == expect.shape
        np.testing.assert_array_equal(got, expect)


def test_other_resamplers_stay_librosas():
    librosa = pytest.importorskip("librosa")
    from tfrecord_io.transforms.encoders.audio import resample

    x = sine(8000, 0.1, 2)
    expect = librosa.resample(np.ascontiguousarray(x.T), orig_sr=8000, target_sr=16000, res_type="polyphase", axis=-1)
    np.testing.assert_array_equal(resample(x, 8000, 16000, "polyphase"), np.ascontiguousarray(expect.T))


def test_reading_and_resampling_do_not_import_librosa(tmp_path):
    """A fresh process encodes a FLAC at another rate without loading librosa (its
    import and first call cost seconds in each worker)."""
    import subprocess
    import sys

    path = tmp_path / "tone.flac"
    sf.write(path, sine(22050, 0.2, 2), 22050)
    code = (
        "import sys\n"
        "from tfrecord_io.transforms import Audio, encode_row\n"
        f"encode_row({{'a': {str(path)!r}}}, {{'a': Audio(sample_rate=16000, mono=True)}})\n"
        "assert 'librosa' not in sys.modules and 'numba' not in sys.modules, 'librosa was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_float_list_storage(tmp_path):
    tone = sine(8000, 0.05, 2)
    path = tmp_path / "tone.wav"
    sf.write(path, tone, 8000, subtype="FLOAT")
    feats, out = roundtrip(str(path), Audio(storage="floats"))
    assert "audio/samples" in feats and "audio/encoded" not in feats
    assert feats["audio/samples"].dtype == np.float32 and feats["audio/samples"].size == tone.size
    np.testing.assert_array_equal(out.samples, tone)


def test_max_seconds_rejects_long_audio():
    with pytest.raises(EncodeError) as err:
        encode_row({"a": audio_bytes(sine(8000, 2.0, 1), 8000, "WAV")}, {"a": Audio(max_seconds=1.0)})
    assert err.value.stage == "transform" and "longer" in err.value.reason


def test_unreadable_audio_is_rejected(tmp_path):
    bad = {
        "garbage.wav": b"RIFF\x00\x00\x00\x00not really a wave file at all",
        "image.ogg": b"\x89PNG\r\n\x1a\n" + bytes(100),
        "text.flac": b"hello world\n" * 10,
    }
    for name, data in bad.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(EncodeError) as err:
            encode_row({"a": str(path)}, {"a": Audio()})
        assert err.value.stage == "decode" and "unreadable audio" in err.value.reason and name in err.value.reason
    empty = tmp_path / "empty.wav"
    empty.write_bytes(b"")
    with pytest.raises(EncodeError) as err:
        encode_row({"a": str(empty)}, {"a": Audio()})
    assert err.value.stage == "read"


def test_nan_samples_rejected():
    tone = sine(8000, 0.01, 1)
    tone[5, 0] = np.nan
    with pytest.raises(EncodeError) as err:
        encode_row({"a": audio_bytes(tone, 8000, "WAV", "FLOAT")}, {"a": Audio()})
    assert "NaN" in err.value.reason


def test_decoder_checks_sizes():
    spec = {"a": Audio()}
    feats = parse_example(encode_row({"a": audio_bytes(sine(8000, 0.01, 1), 8000, "WAV")}, spec))
    from tfrecord_io.format.codec import serialize_example

    broken = {k: (v if not isinstance(v, np.ndarray) else v.tolist()) for k, v in feats.items()}
    broken["a/num_samples"] = [81]
    with pytest.raises(DecodeError) as err:
        decode_example(serialize_example(broken), spec)
    assert err.value.column == "a" and "needs" in err.value.reason
