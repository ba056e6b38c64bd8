"""Composable encoders and decoders for images, audio, text, labels and arrays, and the
Beam transforms that run them: ``EncodeExample``, ``EncodeSequenceExample``,
``DecodeExample``, ``DecodeSequenceExample`` and ``ValidateTFRecords``.

    from tfrecord_io.transforms import EncodeExample, Image, Text, Audio, Label, Array

    spec = {
        "image": Image(mode="RGB", reencode="jpeg", quality=90, resize=(224, 224)),
        "caption": Text(normalize="NFC", strip=True),
        "audio": Audio(sample_rate=16000, mono=True),
        "label": Label(vocabulary=["cat", "dog"]),
        "emb": Array(dtype="float32", shape=(128,)),
    }
    result = rows | EncodeExample(spec)      # result.examples, result.rejected
    result.examples | tfrecord_io.WriteToTFRecord("out/train")
    decode_example(record_bytes, spec)       # {"image": (224, 224, 3) uint8, ...}
    records | DecodeExample(spec)            # .decoded, .rejected
    p | ValidateTFRecords("out/train-*.tfrecord", spec=spec)   # one report dict

Keys each encoder writes (``<p>`` = the column name, or the encoder's ``key=``):

=============  =====================================================================
Encoder        Example keys (type)
=============  =====================================================================
Image          ``<p>/encoded`` (bytes: the image file, or raw pixels),
               ``<p>/format`` (bytes: jpeg, png, webp, ..., raw),
               ``<p>/height``, ``<p>/width``, ``<p>/channels`` (int),
               ``<p>/mode`` (bytes: Pillow mode of the decoded array),
               ``<p>/dtype`` (bytes: uint8, uint16, ...)
Audio          ``<p>/encoded`` (bytes: float32 LE, frames x channels) or
               ``<p>/samples`` (float list), ``<p>/sample_rate``, ``<p>/channels``,
               ``<p>/num_samples`` (int), ``<p>/format`` (bytes: WAV, FLAC, OGG),
               ``<p>/dtype`` (bytes: float32)
Text           ``<p>`` (bytes, UTF-8)
Int / Label    ``<p>`` (int)
Float          ``<p>`` (float)
Bytes          ``<p>`` (bytes)
Array          ``<p>`` (float/int list, or bytes), ``<p>/shape`` (int list),
               ``<p>/dtype`` (bytes, when stored as bytes)
Steps (seq.)   feature list ``<p>`` (one int/float/bytes feature per step),
               context ``<p>/length`` (int)
AudioFrames    feature list ``<p>`` (float list per frame), context
  (seq.)       ``<p>/sample_rate``, ``<p>/channels``, ``<p>/num_samples``,
               ``<p>/frame_length``, ``<p>/hop_length`` (int)
=============  =====================================================================

Every encoder has ``feature_specs(column)`` (list of :class:`FeatureSpec`: key, type,
shape, required, dtype), usable for ``tfrecord_io_info.json`` (``FeatureSpec.to_dict``),
for validation, and for TensorFlow (:func:`tf_parse_spec`, :func:`to_tf_feature_spec`);
and ``to_config()`` (its parameters, JSON-ready); ``spec_from_config`` rebuilds a spec
from those dicts (a job config), ``spec_info`` describes it for ``tfrecord_io_info.json``.

The encoders, ``encode_row``, ``decode_example`` and ``check_record`` are plain Python
(no Beam), for PyTorch or tf.data code; the PTransforms are imported on first use.
A row that cannot be encoded raises :class:`EncodeError` (``column``, ``stage``,
``reason``) in plain code, and goes to the transform's ``rejected`` output in Beam; a
record that does not decode raises :class:`DecodeError`. Both are a
:class:`ColumnError` (catch that for either).
"""

from __future__ import annotations

from .._lazy import lazy_getattr
from .checks import check_record, validate_files
from .config import encoder_from_config, spec_config, spec_from_config, spec_info
from .decoders import DecodeError, ExampleDecoder, decode_example, decode_image, decode_sequence_example
from .encode_errors import STAGES, ColumnError, EncodeError, rejected_row
from .encoders import (
    Array,
    Audio,
    AudioData,
    AudioFrames,
    Bytes,
    Encoder,
    Float,
    FramesData,
    Image,
    Int,
    Label,
    SequenceEncoder,
    Steps,
    Text,
)
from .rows import check_spec, encode_features, encode_row, encode_sequence_row
from .spec import FeatureSpec, description, feature_specs, tf_parse_spec, to_tf_feature_spec

_LAZY = {
    "EncodeExample": "tfrecord_io.transforms.beam_encode",
    "EncodeSequenceExample": "tfrecord_io.transforms.beam_encode",
    "EncodeResult": "tfrecord_io.transforms.beam_encode",
    "DecodeExample": "tfrecord_io.transforms.beam_decode",
    "DecodeSequenceExample": "tfrecord_io.transforms.beam_decode",
    "DecodeResult": "tfrecord_io.transforms.beam_decode",
    "ValidateTFRecords": "tfrecord_io.transforms.validate",
}


__getattr__ = lazy_getattr(__name__, _LAZY)


__all__ = [
    "Array",
    "Audio",
    "AudioData",
    "AudioFrames",
    "Bytes",
    "ColumnError",
    "DecodeError",
    "Encoder",
    "EncodeError",
    "ExampleDecoder",
    "encoder_from_config",
    "spec_config",
    "spec_from_config",
    "spec_info",
    "FeatureSpec",
    "Float",
    "FramesData",
    "Image",
    "Int",
    "Label",
    "STAGES",
    "SequenceEncoder",
    "Steps",
    "Text",
    "check_record",
    "check_spec",
    "decode_example",
    "decode_image",
    "decode_sequence_example",
    "description",
    "encode_features",
    "encode_row",
    "encode_sequence_row",
    "feature_specs",
    "rejected_row",
    "tf_parse_spec",
    "to_tf_feature_spec",
    "validate_files",
    *_LAZY,
]
