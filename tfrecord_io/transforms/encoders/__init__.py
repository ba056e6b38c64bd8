"""Encoders, one module per modality; see ``transforms`` for the keys each writes."""

from .arrays import Array
from .audio import Audio, AudioData
from .base import Encoder
from .image import Image
from .scalars import Bytes, Float, Int, Label
from .sequence import AudioFrames, FramesData, SequenceEncoder, Steps
from .text import Text

__all__ = [
    "Array",
    "Audio",
    "AudioData",
    "AudioFrames",
    "Bytes",
    "Encoder",
    "Float",
    "FramesData",
    "Image",
    "Int",
    "Label",
    "SequenceEncoder",
    "Steps",
    "Text",
]
