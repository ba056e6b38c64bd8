"""Padding variable-length features: in a collate_fn (PadCollate) or per record (PadTo)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import default_collate

from tfrecord_io.torch import PadCollate, PadTo, pad_collate, pad_stack


def _rec(i, n):
    return {"id": np.array([i]), "tokens": np.arange(1, n + 1, dtype=np.int64), "text": b"x" * i}


def test_pad_collate_pads_to_longest_and_gives_lengths():
    batch = pad_collate([_rec(0, 3), _rec(1, 0), _rec(2, 5)])
    assert batch["tokens"].tolist() == [[1, 2, 3, 0, 0], [0, 0, 0, 0, 0], [1, 2, 3, 4, 5]]
    assert batch["tokens_length"].tolist() == [3, 0, 5]
    assert batch["tokens"].dtype == torch.int64
    assert batch["id"].tolist() == [[0], [1], [2]]
    assert batch["text"] == [b"", b"x", b"xx"]


def test_keys_padding_value_and_no_lengths():
    collate = PadCollate(keys=["tokens"], padding_value=-1, lengths=False)
    batch = collate([_rec(0, 1), _rec(1, 2)])
    assert batch["tokens"].tolist() == [[1, -1], [1, 2]]
    assert "tokens_length" not in batch and "id_length" not in batch
    assert torch.equal(batch["id"], default_collate([np.array([0]), np.array([1])]))


def test_sequence_batches_pad_steps_and_values():
    seqs = [
        ({"id": np.array([0])}, {"frames": [np.array([1, 2]), np.array([3])]}),
        ({"id": np.array([1])}, {"frames": [np.array([4, 5, 6])]}),
    ]
    ctx, feats = pad_collate(seqs)
    assert ctx["id"].tolist() == [[0], [1]]
    assert feats["frames"].tolist() == [[[1, 2, 0], [3, 0, 0]], [[4, 5, 6], [0, 0, 0]]]
    assert feats["frames_length"].tolist() == [2, 1]


def test_pad_stack_rejects_mixed_ranks_and_promotes_types():
    with pytest.raises(ValueError, match="ranks"):
        pad_stack([np.zeros(2), np.zeros((2, 2))])
    out, lengths = pad_stack([np.array([1], dtype=np.int64), np.array([0.5, 1.5], dtype=np.float32)])
    assert out.dtype == torch.float32 and out.tolist() == [[1.0, 0.0], [0.5, 1.5]]


def test_pad_to_fixed_length_then_default_collate():
    fix = PadTo({"tokens": 4}, padding_value=9)
    records = [fix(_rec(0, 6)), fix(_rec(1, 2))]
    assert records[0]["tokens"].tolist() == [1, 2, 3, 4]  # truncated
    assert records[1]["tokens"].tolist() == [1, 2, 9, 9]
    batch = default_collate([{"tokens": r["tokens"]} for r in records])
    assert batch["tokens"].shape == (2, 4)
    ctx, feats = PadTo({"frames": 3})(({"id": np.array([0])}, {"frames": [np.array([1, 2]), np.array([3, 4])]}))
    assert feats["frames"].tolist() == [[1, 2], [3, 4], [0, 0]]
    with pytest.raises(KeyError, match="nope"):
        PadTo({"nope": 2})(_rec(0, 1))


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(-(2**40), 2**40), max_size=9), min_size=1, max_size=6), st.integers(-5, 5))
def test_pad_collate_keeps_every_value(rows, pad):
    batch = PadCollate(padding_value=pad)([{"v": np.array(r, dtype=np.int64)} for r in rows])
    longest = max(len(r) for r in rows)
    assert batch["v"].shape == (len(rows), longest)
    assert batch["v_length"].tolist() == [len(r) for r in rows]
    for got, r in zip(batch["v"].tolist(), rows):
        assert got == r + [pad] * (longest - len(r))
