"""Old name of :mod:`transforms.beam_encode` (the Beam transforms; the encoders are in
``transforms.encoders``), kept so existing imports work."""

from .beam_encode import NAMESPACE, EncodeExample, EncodeResult, EncodeSequenceExample

__all__ = ["EncodeExample", "EncodeResult", "EncodeSequenceExample", "NAMESPACE"]
