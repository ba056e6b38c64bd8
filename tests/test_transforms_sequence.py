"""SequenceExamples: token steps, vectors per step, audio frames, context encoders."""

from __future__ import annotations

import numpy as np
import pytest

from tfrecord_io.format.codec import parse_sequence_example
from tfrecord_io.transforms import (
    AudioFrames,
    EncodeError,
    Int,
    Steps,
    Text,
    check_record,
    decode_sequence_example,
    encode_sequence_row,
    feature_specs,
)

from transforms_media import audio_bytes, sine


def test_tokens_vectors_and_text_steps_round_trip():
    context = {"caption": Text(), "label": Int()}
    sequence = {
        "tokens": Steps("int", vocabulary=["<s>", "a", "cat", "</s>"]),
        "emb": Steps("float", step_length=3),
        "words": Steps("text"),
        "ragged": Steps("int", step_length=None),
    }
    row = {
        "caption": "a cat",
        "label": 7,
        "tokens": ["<s>", "a", "cat", "</s>"],
        "emb": np.arange(12, dtype=np.float32).reshape(4, 3),
        "words": ["un", "gato", "猫"],
        "ragged": [[1], [2, 3], []],
    }
    data = encode_sequence_row(row, context, sequence)
    ctx, lists = parse_sequence_example(data)
    assert ctx["tokens/length"][0] == 4 and len(lists["tokens"]) == 4
    out = decode_sequence_example(data, context, sequence)
    assert out["caption"] == "a cat" and out["label"] == 7
    np.testing.assert_array_equal(out["tokens"], [0, 1, 2, 3])
    np.testing.assert_array_equal(out["emb"], row["emb"])
    assert out["words"] == ["un", "gato", "猫"]
    assert [r.tolist() for r in out["ragged"]] == [[1], [2, 3], []]
    assert check_record(data, feature_specs({**context, **sequence})) == []


def test_bad_steps_are_rejected_with_the_step():
    with pytest.raises(EncodeError) as err:
        encode_sequence_row({"t": ["a", "zebra"]}, None, {"t": Steps("int", vocabulary=["a"])})
    assert err.value.column == "t" and "step 1" in err.value.reason and err.value.stage == "transform"
    with pytest.raises(EncodeError) as err:
        encode_sequence_row({"e": [[1, 2], [3]]}, None, {"e": Steps("float", step_length=2)})
    assert "step 1 has 1 values" in err.value.reason
    with pytest.raises(EncodeError) as err:
        encode_sequence_row({"w": [b"ok", b"\xff"]}, None, {"w": Steps("text")})
    assert err.value.stage == "decode"
    with pytest.raises(EncodeError) as err:
        encode_sequence_row({"w": "not a list"}, None, {"w": Steps("text")})
    assert err.value.stage == "input"


@pytest.mark.parametrize("frame,hop", [(400, 160), (256, 256)])
def test_audio_frames(frame, hop):
    tone = sine(16000, 0.1, 1)
    enc = AudioFrames(frame_length=frame, hop_length=hop)
    data = encode_sequence_row({"audio": audio_bytes(tone, 16000, "WAV", "FLOAT")}, None, {"audio": enc})
    out = decode_sequence_example(data, None, {"audio": enc})["audio"]
    n = tone.shape[0]
    count = 1 + -(-(n - frame) // hop)
    assert out.frames.shape == (count, frame, 1) and out.sample_rate == 16000 and out.num_samples == n
    for i in (0, count // 2):
        np.testing.assert_array_equal(out.frames[i, :, 0], tone[i * hop : i * hop + frame, 0])
    last = tone[(count - 1) * hop :, 0]
    np.testing.assert_array_equal(out.frames[-1, : len(last), 0], last)
    assert not out.frames[-1, len(last) :].any()  # zero padding after the end
    assert check_record(data, feature_specs({"audio": enc})) == []
