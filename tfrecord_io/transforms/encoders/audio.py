"""Audio with soundfile (WAV, FLAC, OGG/Vorbis, ... whatever libsndfile reads) and
soxr for resampling (librosa for its other resamplers).

Keys written (``<p>`` is the column name or ``key=``):

====================  =====  =======================================================
``<p>/encoded``       bytes  float32 little-endian samples, frames x channels
                             interleaved (``storage="bytes"``, the default), or
``<p>/samples``       float  the same samples as a float list (``storage="floats"``)
``<p>/sample_rate``   int    samples per second per channel
``<p>/channels``      int    channel count (1 after ``mono=True``)
``<p>/num_samples``   int    frames (samples per channel)
``<p>/format``        bytes  the source container (``WAV``, ``FLAC``, ``OGG`` ...)
``<p>/dtype``         bytes  ``float32``
====================  =====  =======================================================

Decoding gives :class:`AudioData` ``(samples, sample_rate)`` with ``samples`` a float32
array of shape ``(num_samples, channels)``, the layout ``tf.audio.decode_wav`` uses.
"""

from __future__ import annotations

import io
from typing import Any, List, Mapping, NamedTuple, Optional, Tuple

import numpy as np

from ..encode_errors import EncodeError
from ..media import describe, load_media
from ..spec import FeatureSpec
from .base import Encoder, Features, Requirement, scalar


class AudioData(NamedTuple):
    """Decoded audio: float32 ``samples`` of shape ``(num_samples, channels)`` and the rate."""

    samples: np.ndarray
    sample_rate: int


def read_audio(data: bytes, where: str = ""):
    """``(samples (n, channels) float32, sample_rate, format)`` from an audio file's bytes."""
    try:
        import soundfile as sf
    except ImportError as err:  # pragma: no cover - in the [media] extra
        raise ImportError("the Audio encoder needs soundfile: pip install 'tfrecord-io[media]'") from err
    try:
        with sf.SoundFile(io.BytesIO(data)) as f:
            fmt = f.format
            rate = f.samplerate
            samples = f.read(dtype="float32", always_2d=True)
    except Exception as err:  # noqa: BLE001 - libsndfile errors: unreadable audio
        raise EncodeError("decode", f"{where}unreadable audio ({type(err).__name__}: {err})") from None
    if samples.shape[0] == 0:
        raise EncodeError("decode", f"{where}{fmt} file has no samples")
    if not np.isfinite(samples).all():
        raise EncodeError("decode", f"{where}{fmt} file has NaN or infinite samples")
    return samples, int(rate), fmt


#: ``res_type`` values that are soxr's qualities: resampled by soxr directly, as
#: ``librosa.resample`` does for them (one call per channel, the length fixed to
#: ``ceil(n * target / rate)``), without importing librosa. Why: librosa's import and
#: first call (numba, its caches, scipy) cost ~5.7 s in a fresh process, paid by each
#: worker before its first audio row; soxr alone imports in milliseconds.
SOXR_TYPES = ("soxr_vhq", "soxr_hq", "soxr_mq", "soxr_lq", "soxr_qq")


def resample(samples: np.ndarray, rate: int, target: int, res_type: str) -> np.ndarray:
    """``(n, channels)`` float32 at ``rate`` -> the same at ``target``.

    soxr's qualities (:data:`SOXR_TYPES`, ``soxr_hq`` the default) go to soxr directly
    and give exactly the samples ``librosa.resample`` gives (the same soxr call per
    channel, the same length, zero-padded or cut); any other ``res_type`` (``kaiser_best``,
    ``polyphase``, ``fft`` ...) is librosa's.
    """
    if rate == target:
        return samples
    if res_type in SOXR_TYPES:
        import soxr

        n_out = int(np.ceil(samples.shape[0] * (float(target) / rate)))
        out = np.zeros((n_out, samples.shape[1]), dtype=np.float32)
        for channel in range(samples.shape[1]):
            y = soxr.resample(np.ascontiguousarray(samples[:, channel]), rate, target, quality=res_type)
            n = min(n_out, y.shape[0])
            out[:n, channel] = y[:n]
        return out
    import librosa

    out = librosa.resample(np.ascontiguousarray(samples.T), orig_sr=rate, target_sr=target, res_type=res_type, axis=-1)
    return np.ascontiguousarray(out.T, dtype=np.float32)


class Audio(Encoder):
    """Encode an audio column (a path or the file's bytes) as float32 samples.

    Args:
        sample_rate: resample to this rate (``res_type``); None keeps the file's.
        mono: average the channels into one.
        storage: ``"bytes"`` (compact, one bytes feature) or ``"floats"`` (a float list
            that ``tf.io.parse_single_example`` returns as numbers directly).
        max_seconds: reject longer audio (after resampling) rather than write it.
        res_type: the resampler, as librosa names them: ``soxr_hq`` (the default) and
            soxr's other qualities run on soxr alone; ``kaiser_best``, ``polyphase``,
            ``fft`` ... on librosa.
    """

    def __init__(
        self,
        sample_rate: Optional[int] = None,
        mono: bool = False,
        storage: str = "bytes",
        max_seconds: Optional[float] = None,
        res_type: str = "soxr_hq",
        max_bytes: Optional[int] = None,
        *,
        optional: bool = False,
        key: Optional[str] = None,
    ):
        super().__init__(optional=optional, key=key)
        if storage not in ("bytes", "floats"):
            raise ValueError("storage must be 'bytes' or 'floats'")
        if sample_rate is not None and int(sample_rate) <= 0:
            raise ValueError("sample_rate must be positive")
        self.sample_rate = None if sample_rate is None else int(sample_rate)
        self.mono = mono
        self.storage = storage
        self.max_seconds = max_seconds
        self.res_type = res_type
        self.max_bytes = max_bytes

    def requirements(self) -> Tuple[Requirement, ...]:
        needs = [Requirement("soundfile", "soundfile", "audio files are read with soundfile and libsndfile")]
        if self.sample_rate is not None:
            if self.res_type in SOXR_TYPES:
                needs.append(Requirement("soxr", "soxr", f"resampling ({self.res_type}) is soxr's"))
            else:
                needs.append(Requirement("librosa", "librosa", f"resampling ({self.res_type}) is librosa's"))
        return tuple(needs)

    def load(self, value: Any):
        """``(samples (n, channels) float32, rate, format)`` after downmix and resampling."""
        data, path = load_media(value, self.max_bytes)
        where = describe(path)
        samples, rate, fmt = read_audio(data, where)
        try:
            if self.mono and samples.shape[1] > 1:
                samples = samples.mean(axis=1, keepdims=True, dtype=np.float32)
            if self.sample_rate is not None and rate != self.sample_rate:
                samples = resample(samples, rate, self.sample_rate, self.res_type)
                rate = self.sample_rate
        except Exception as err:  # noqa: BLE001 - resampler errors (librosa, soxr, NumPy) reject the row
            raise EncodeError("transform", f"{where}{type(err).__name__}: {err}") from None
        if self.max_seconds is not None and samples.shape[0] > self.max_seconds * rate:
            raise EncodeError(
                "transform", f"{where}{samples.shape[0] / rate:.2f} s is longer than the {self.max_seconds} s limit"
            )
        return samples, rate, fmt

    def encode(self, value: Any, column: str) -> Features:
        samples, rate, fmt = self.load(value)
        p = self.prefix(column)
        flat = np.ascontiguousarray(samples, dtype="<f4")
        out: Features = {}
        if self.storage == "bytes":
            out[f"{p}/encoded"] = (flat.tobytes(), "bytes")
        else:
            out[f"{p}/samples"] = (flat.reshape(-1), "float")
        out.update(
            {
                f"{p}/sample_rate": (rate, "int"),
                f"{p}/channels": (int(samples.shape[1]), "int"),
                f"{p}/num_samples": (int(samples.shape[0]), "int"),
                f"{p}/format": (fmt, "bytes"),
                f"{p}/dtype": ("float32", "bytes"),
            }
        )
        return out

    def feature_specs(self, column: str) -> List[FeatureSpec]:
        p = self.prefix(column)
        req = not self.optional
        if self.storage == "bytes":
            data = FeatureSpec(f"{p}/encoded", "bytes", (), req, "float32", doc="float32 LE samples, frames x channels")
        else:
            data = FeatureSpec(f"{p}/samples", "float", None, req, "float32", doc="samples, frames x channels")
        return [
            data,
            FeatureSpec(f"{p}/sample_rate", "int", (), req, "int64"),
            FeatureSpec(f"{p}/channels", "int", (), req, "int64"),
            FeatureSpec(f"{p}/num_samples", "int", (), req, "int64"),
            FeatureSpec(f"{p}/format", "bytes", (), req, "str"),
            FeatureSpec(f"{p}/dtype", "bytes", (), req, "str"),
        ]

    def decode(self, features: Mapping[str, Any], column: str) -> AudioData:
        p = self.prefix(column)
        channels = int(scalar(features, f"{p}/channels"))
        n = int(scalar(features, f"{p}/num_samples"))
        if f"{p}/encoded" in features:
            raw = scalar(features, f"{p}/encoded")
            if len(raw) != n * channels * 4:
                raise EncodeError(
                    "decode", f"audio has {len(raw)} bytes, {n} x {channels} float32 needs {n * channels * 4}"
                )
            samples = np.frombuffer(raw, dtype="<f4").astype(np.float32, copy=False)
        else:
            samples = np.asarray(features[f"{p}/samples"], dtype=np.float32)
            if samples.size != n * channels:
                raise EncodeError("decode", f"audio has {samples.size} samples, {n} x {channels} expected")
        return AudioData(samples.reshape(n, channels), int(scalar(features, f"{p}/sample_rate")))


__all__ = ["SOXR_TYPES", "Audio", "AudioData", "read_audio", "resample"]
