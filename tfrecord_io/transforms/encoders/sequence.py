"""Per-step encoders for ``SequenceExample`` feature lists.

A sequence encoder returns context features *and* feature lists. Keys
(``<p>`` is the column name or ``key=``):

- :class:`Steps` writes the feature list ``<p>`` (one Feature per step: a scalar or a
  fixed-length vector of ints, floats, bytes or text) and the context ``<p>/length``
  (number of steps). With ``vocabulary``, text tokens become ids.
- :class:`AudioFrames` cuts audio into frames: feature list ``<p>`` (one float list of
  ``frame_length x channels`` per step, the last frame zero-padded) and context
  ``<p>/sample_rate``, ``<p>/channels``, ``<p>/num_samples`` (before padding),
  ``<p>/frame_length``, ``<p>/hop_length``.

Plain encoders (Image, Text, Int, ...) go in the ``context`` of ``EncodeSequenceExample``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from ..encode_errors import EncodeError
from ..spec import FeatureSpec
from .audio import Audio
from .base import ColumnEncoder, Features, Requirement, scalar
from .scalars import parse_float, parse_int

FeatureLists = Dict[str, Tuple[List[Any], str]]

_STEP_KINDS = {"int": "int", "float": "float", "bytes": "bytes", "text": "bytes"}


class SequenceEncoder(ColumnEncoder):
    """Base class: ``encode(value, column) -> (context features, feature lists)``."""

    def encode(self, value: Any, column: str) -> Tuple[Features, FeatureLists]:  # pragma: no cover
        raise NotImplementedError

    def feature_specs(self, column: str) -> List[FeatureSpec]:  # pragma: no cover
        raise NotImplementedError

    def decode(
        self, context: Mapping[str, Any], lists: Mapping[str, List[Any]], column: str
    ) -> Any:  # pragma: no cover
        raise NotImplementedError


class Steps(SequenceEncoder):
    """One feature per step.

    Args:
        kind: ``"int"``, ``"float"``, ``"bytes"`` or ``"text"`` (UTF-8, decoded to str).
        step_length: values per step when fixed (1 = a scalar per step); None = any.
        vocabulary: with ``kind="int"``, map text tokens to their index.
    """

    def __init__(
        self,
        kind: str = "int",
        step_length: Optional[int] = 1,
        vocabulary: Optional[Sequence[str]] = None,
        *,
        optional: bool = False,
        key: Optional[str] = None,
    ):
        super().__init__(optional=optional, key=key)
        if kind not in _STEP_KINDS:
            raise ValueError(f"kind {kind!r}: use one of {sorted(_STEP_KINDS)}")
        if vocabulary is not None and kind != "int":
            raise ValueError("a vocabulary maps tokens to ids: use kind='int'")
        self.kind = kind
        self.step_length = step_length
        self.vocabulary = list(vocabulary) if vocabulary is not None else None
        self._ids = {t: i for i, t in enumerate(self.vocabulary or [])}

    def _value(self, v: Any, step: int) -> Any:
        try:
            if self.kind == "int":
                if self.vocabulary is not None and isinstance(v, str):
                    if v not in self._ids:
                        raise EncodeError("transform", f"token {v!r:.40} is not in the vocabulary")
                    return self._ids[v]
                return parse_int(v)
            if self.kind == "float":
                return parse_float(v, allow_nan=False)
            if isinstance(v, str):
                return v.encode("utf-8")
            if isinstance(v, (bytes, bytearray, memoryview)):
                data = bytes(v)
                if self.kind == "text":
                    data.decode("utf-8")
                return data
            raise EncodeError("input", f"expected str or bytes, got {type(v).__name__}")
        except UnicodeError as err:
            raise EncodeError("decode", f"step {step}: not valid UTF-8 ({err})") from None
        except EncodeError as err:
            raise EncodeError(err.stage, f"step {step}: {err.reason}") from None

    def encode(self, value: Any, column: str) -> Tuple[Features, FeatureLists]:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise EncodeError("input", f"expected a sequence of steps, got {type(value).__name__}")
        steps: List[List[Any]] = []
        for i, step in enumerate(value):
            items = list(step) if isinstance(step, (list, tuple, np.ndarray)) else [step]
            if self.step_length is not None and len(items) != self.step_length:
                raise EncodeError("input", f"step {i} has {len(items)} values, expected {self.step_length}")
            steps.append([self._value(v, i) for v in items])
        p = self.prefix(column)
        return {f"{p}/length": (len(steps), "int")}, {p: (steps, _STEP_KINDS[self.kind])}

    def feature_specs(self, column: str) -> List[FeatureSpec]:
        p = self.prefix(column)
        req = not self.optional
        shape = None if self.step_length is None else (() if self.step_length == 1 else (self.step_length,))
        return [
            FeatureSpec(f"{p}/length", "int", (), req, "int64", doc="number of steps"),
            FeatureSpec(p, _STEP_KINDS[self.kind], shape, req, self.kind, sequence=True),
        ]

    def decode(self, context: Mapping[str, Any], lists: Mapping[str, List[Any]], column: str) -> Any:
        p = self.prefix(column)
        steps = lists[p]
        length = int(scalar(context, f"{p}/length"))
        if len(steps) != length:
            raise EncodeError("decode", f"{len(steps)} steps, context says {length}")
        if self.kind in ("bytes", "text"):
            out = []
            for s in steps:
                vals = [s] if isinstance(s, bytes) else list(s)
                if self.kind == "text":
                    vals = [v.decode("utf-8") for v in vals]
                out.append(vals[0] if self.step_length == 1 else vals)
            return out
        dtype = np.int64 if self.kind == "int" else np.float32
        if self.step_length is None:
            return [np.asarray(s, dtype=dtype) for s in steps]
        arr = np.asarray([np.asarray(s, dtype=dtype).reshape(-1) for s in steps], dtype=dtype).reshape(
            length, self.step_length
        )
        return arr[:, 0] if self.step_length == 1 else arr


class FramesData(NamedTuple):
    """Decoded audio frames: ``frames`` float32 ``(num_frames, frame_length, channels)``."""

    frames: np.ndarray
    sample_rate: int
    num_samples: int


class AudioFrames(SequenceEncoder):
    """Audio cut into (possibly overlapping) frames, one step per frame.

    Args:
        frame_length: samples per frame; hop_length: samples between frame starts
            (default: ``frame_length``, no overlap).
        sample_rate, mono: as for :class:`~tfrecord_io.transforms.encoders.audio.Audio`.
    """

    def __init__(
        self,
        frame_length: int,
        hop_length: Optional[int] = None,
        sample_rate: Optional[int] = None,
        mono: bool = True,
        *,
        optional: bool = False,
        key: Optional[str] = None,
    ):
        super().__init__(optional=optional, key=key)
        if frame_length <= 0 or (hop_length is not None and hop_length <= 0):
            raise ValueError("frame_length and hop_length must be positive")
        self.frame_length = int(frame_length)
        self.hop_length = int(hop_length or frame_length)
        self.sample_rate = sample_rate
        self.mono = mono
        self._audio = Audio(sample_rate=sample_rate, mono=mono)

    def requirements(self) -> Tuple[Requirement, ...]:
        return self._audio.requirements()

    def frames(self, samples: np.ndarray) -> np.ndarray:
        """``(n, channels)`` -> ``(num_frames, frame_length, channels)``, end zero-padded."""
        n, channels = samples.shape
        count = 1 + max(0, -(-(n - self.frame_length) // self.hop_length))
        padded_len = (count - 1) * self.hop_length + self.frame_length
        padded = np.zeros((padded_len, channels), dtype=np.float32)
        padded[:n] = samples
        starts = np.arange(count) * self.hop_length
        return padded[starts[:, None] + np.arange(self.frame_length)[None, :]]

    def encode(self, value: Any, column: str) -> Tuple[Features, FeatureLists]:
        samples, rate, _ = self._audio.load(value)
        frames = self.frames(samples)
        p = self.prefix(column)
        context = {
            f"{p}/sample_rate": (rate, "int"),
            f"{p}/channels": (int(samples.shape[1]), "int"),
            f"{p}/num_samples": (int(samples.shape[0]), "int"),
            f"{p}/frame_length": (self.frame_length, "int"),
            f"{p}/hop_length": (self.hop_length, "int"),
        }
        return context, {p: (list(frames.reshape(len(frames), -1)), "float")}

    def feature_specs(self, column: str) -> List[FeatureSpec]:
        p = self.prefix(column)
        req = not self.optional
        channels = 1 if self.mono else None
        step = None if channels is None else (self.frame_length * channels,)
        return [
            FeatureSpec(f"{p}/{name}", "int", (), req, "int64")
            for name in ("sample_rate", "channels", "num_samples", "frame_length", "hop_length")
        ] + [FeatureSpec(p, "float", step, req, "float32", sequence=True, doc="frame samples x channels")]

    def decode(self, context: Mapping[str, Any], lists: Mapping[str, List[Any]], column: str) -> FramesData:
        p = self.prefix(column)
        channels = int(scalar(context, f"{p}/channels"))
        frame_length = int(scalar(context, f"{p}/frame_length"))
        steps = lists[p]
        frames = np.zeros((len(steps), frame_length, channels), dtype=np.float32)
        for i, s in enumerate(steps):
            if len(s) != frame_length * channels:
                raise EncodeError("decode", f"frame {i} has {len(s)} values, expected {frame_length * channels}")
            frames[i] = np.asarray(s, dtype=np.float32).reshape(frame_length, channels)
        return FramesData(frames, int(scalar(context, f"{p}/sample_rate")), int(scalar(context, f"{p}/num_samples")))


__all__ = ["AudioFrames", "FramesData", "SequenceEncoder", "Steps"]
