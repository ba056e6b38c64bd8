"""Old name of :mod:`transforms.beam_decode` (the Beam transforms; the plain decoding
functions are in ``transforms.decoders``), kept so existing imports work."""

from .beam_decode import DecodeExample, DecodeResult, DecodeSequenceExample

__all__ = ["DecodeExample", "DecodeResult", "DecodeSequenceExample"]
