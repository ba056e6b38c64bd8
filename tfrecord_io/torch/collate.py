"""Batching records whose features have different lengths (token ids, audio frames,
``SequenceExample`` feature lists), which ``torch``'s default collate cannot stack.

Two ways, pick one:

1. In the dataset, with a transform that makes every record the same shape::

       ds = TFRecordDataset(path, index, transform=PadTo({"tokens": 128}))
       DataLoader(ds, batch_size=32)               # default collate stacks them

   ``PadTo`` pads (or truncates) each named feature along its first axis to a fixed
   length: fixed shapes, less padding work per batch, but truncation loses data.

2. In the DataLoader, padding each batch to its own longest record::

       DataLoader(ds, batch_size=32, collate_fn=pad_collate)
       # batch["tokens"]: (32, longest, ...) tensor, batch["tokens_length"]: (32,) int64

   Nothing is truncated; ``{key}_length`` gives each record's true length (for masks
   or ``pack_padded_sequence``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch.utils.data import default_collate


def _is_numeric_array(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return True
    return isinstance(value, np.ndarray) and value.dtype.kind in "iufb"


def _is_steps(value: Any) -> bool:
    """A SequenceExample feature list: a list of numeric arrays, one per step."""
    return isinstance(value, list) and all(_is_numeric_array(v) for v in value)


def pad_stack(arrays: Sequence[Any], padding_value: float = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Stack arrays of one rank but different shapes into one tensor, padding every axis
    to the largest size found (0-d arrays count as 1-element vectors).

    Returns ``(padded, lengths)``: ``padded`` has shape ``(len(arrays), *max_shape)``,
    ``lengths`` (int64) the first-axis size of each array.
    """
    tensors = [torch.as_tensor(a) for a in arrays]
    tensors = [t.reshape(1) if t.dim() == 0 else t for t in tensors]
    if not tensors:
        return torch.empty(0), torch.empty(0, dtype=torch.int64)
    ranks = {t.dim() for t in tensors}
    if len(ranks) != 1:
        raise ValueError(f"cannot pad arrays of different ranks {sorted(ranks)} into one batch")
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    shape = [max(t.shape[d] for t in tensors) for d in range(tensors[0].dim())]
    out = torch.full((len(tensors), *shape), padding_value, dtype=dtype)
    for i, t in enumerate(tensors):
        where: Tuple[Union[int, slice], ...] = (i, *(slice(0, s) for s in t.shape))
        out[where] = t
    lengths = torch.tensor([t.shape[0] for t in tensors], dtype=torch.int64)
    return out, lengths


def _steps_to_tensor(steps: List[Any], padding_value: float) -> torch.Tensor:
    if not steps:
        return torch.zeros((0, 0))
    padded, _ = pad_stack(steps, padding_value)
    return padded


class PadCollate:
    """A ``collate_fn`` that pads variable-length numeric features of each batch.

    ``keys``: the features to pad (None: every numeric array feature and every
    ``SequenceExample`` feature list, so the batch layout is the same for every batch).
    Each padded feature becomes a ``(batch, longest, ...)`` tensor filled with
    ``padding_value``, with its lengths in ``{key}{length_suffix}`` when ``lengths``.
    Other numeric features are stacked by ``default_collate``; byte strings stay lists.
    Batches of ``(context, feature_lists)`` tuples (``SequenceExample``) give a tuple of
    two collated dicts. A picklable class, so it works with any worker start method.
    """

    def __init__(
        self,
        keys: Optional[Sequence[str]] = None,
        padding_value: float = 0,
        lengths: bool = True,
        length_suffix: str = "_length",
    ) -> None:
        self.keys = None if keys is None else set(keys)
        self.padding_value = padding_value
        self.lengths = lengths
        self.length_suffix = length_suffix

    def __call__(self, batch: Sequence[Any]) -> Any:
        if not batch:
            return batch
        first = batch[0]
        if isinstance(first, Mapping):
            return self._dicts(batch)
        if isinstance(first, tuple) and len(first) == 2 and all(isinstance(x, Mapping) for x in first):
            return self._dicts([b[0] for b in batch]), self._dicts([b[1] for b in batch])
        return default_collate(list(batch))

    def _wants(self, key: str, values: Sequence[Any]) -> bool:
        if self.keys is not None:
            return key in self.keys
        return all(_is_numeric_array(v) and np.ndim(v) >= 1 for v in values) or all(_is_steps(v) for v in values)

    def _dicts(self, batch: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
        out: Dict[str, Any] = {}
        for key in batch[0]:
            values = [b[key] for b in batch]
            if self._wants(key, values):
                if all(isinstance(v, list) for v in values):
                    values = [_steps_to_tensor(v, self.padding_value) for v in values]
                padded, lengths = pad_stack(values, self.padding_value)
                out[key] = padded
                if self.lengths:
                    out[key + self.length_suffix] = lengths
            elif all(_is_numeric_array(v) or isinstance(v, (int, float, np.number)) for v in values):
                out[key] = default_collate(values)
            else:
                out[key] = list(values)  # bytes, object arrays, lists of byte strings
        return out


#: ``PadCollate()`` with the defaults: pad every numeric feature, add ``{key}_length``.
pad_collate = PadCollate()


class PadTo:
    """A per-record ``transform`` that pads with ``padding_value`` or truncates each named
    feature to a fixed length along its first axis, so the default collate can stack
    records. ``SequenceExample`` feature lists (lists of equal-length steps) become
    ``(length, step_size)`` arrays. Features not named are left as they are."""

    def __init__(self, lengths: Mapping[str, int], padding_value: float = 0) -> None:
        bad = {k: n for k, n in lengths.items() if int(n) < 0}
        if bad:
            raise ValueError(f"lengths must be >= 0: {bad}")
        self.lengths = {k: int(n) for k, n in lengths.items()}
        self.padding_value = padding_value

    def _fix(self, value: Any, n: int) -> np.ndarray:
        if isinstance(value, list):
            value = np.stack(value) if value else np.zeros((0, 0), dtype=np.float32)
        arr = np.asarray(value)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if arr.shape[0] >= n:
            return arr[:n]
        pad = [(0, n - arr.shape[0])] + [(0, 0)] * (arr.ndim - 1)
        return np.pad(arr, pad, constant_values=self.padding_value)

    def _apply(self, record: Mapping[str, Any]) -> Dict[str, Any]:
        out = dict(record)
        for key, n in self.lengths.items():
            if key in out:
                out[key] = self._fix(out[key], n)
        return out

    def __call__(self, record: Any) -> Any:
        parts = record if isinstance(record, tuple) and len(record) == 2 else (record,)
        missing = [k for k in self.lengths if not any(k in p for p in parts)]
        if missing:
            raise KeyError(f"PadTo: feature(s) {missing} not in the record (it has {sorted(set().union(*parts))})")
        fixed = tuple(self._apply(p) for p in parts)
        return fixed if len(fixed) == 2 else fixed[0]


__all__ = ["PadCollate", "PadTo", "pad_collate", "pad_stack"]
