"""TFDS-style split selections: ``"train"``, ``"train[:90%]"``, ``"train[10%:]"``,
``"validation[:1000]"``, ``"train[-5%:]"``, ``"train+validation[:50%]"``.

A selection is one or more parts joined by ``+``; each part is a split name and an
optional slice ``[from:to]`` whose bounds are record numbers (``1000``) or percentages of
the split (``90%``, ``12.5%``), each optional, negative counting from the end, as in
Python. The records of a part are ``from`` .. ``to - 1`` in the split's order (its
shards in order, each shard's records in order); the parts are read one after another.

How a percentage becomes a record number, for a split of ``n`` records (as in TFDS):

- ``closest`` (the default): ``p% -> round(p * n / 100)``, the nearest integer, computed
  exactly (no floating point); an exact half goes to the even neighbour (Python's
  ``round``, which is what TFDS's ``int(round(p * n / 100.))`` does). So ``train[:50%]``
  of 5 records is ``train[:2]`` and ``train[50%:]`` is ``train[2:]``: the two halves
  always tile the split, whatever the rounding.
- ``pct1_dropremainder``: ``p% -> p * (n // 100)``: every 1% is the same number of
  records and the remainder (``n % 100`` records) is never in a percentage slice; needs
  ``n >= 100`` and whole percentages. Write it after the slice:
  ``train[:10%](pct1_dropremainder)``, or pass ``rounding=``.

Bounds are then clipped to ``[0, n]``; a part that selects nothing is an error (as in
TFDS), since it is nearly always a mistake.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import List, Mapping, Optional

ROUNDINGS = ("closest", "pct1_dropremainder")

_NUMBER = r"-?\d+(?:\.\d+)?"
_PART = re.compile(
    rf"^(?P<split>[\w.-]+?)"
    rf"(?:\[(?P<from>{_NUMBER})?(?P<from_pct>%)?:(?P<to>{_NUMBER})?(?P<to_pct>%)?\])?"
    rf"(?:\((?P<rounding>\w+)\))?$"
)


@dataclass(frozen=True)
class Bound:
    """One end of a slice: a record number, or a percentage (``percent=True``)."""

    value: Fraction
    percent: bool


@dataclass(frozen=True)
class SplitPart:
    """One ``name[from:to](rounding)`` of a selection, before the split's size is known."""

    split: str
    start: Optional[Bound] = None
    stop: Optional[Bound] = None
    rounding: str = "closest"


@dataclass(frozen=True)
class SplitRange:
    """Records ``start`` .. ``stop - 1`` of ``split``."""

    split: str
    start: int
    stop: int

    @property
    def count(self) -> int:
        return self.stop - self.start


def _bound(text: Optional[str], pct: Optional[str], part: str) -> Optional[Bound]:
    if text is None:
        if pct:
            raise ValueError(f"split {part!r}: '%' without a number")
        return None
    value = Fraction(text)
    if not pct and value.denominator != 1:
        raise ValueError(f"split {part!r}: record number {text} is not a whole number (add '%' for a percentage)")
    if pct and abs(value) > 100:
        raise ValueError(f"split {part!r}: {text}% is outside [-100%, 100%]")
    return Bound(value, bool(pct))


def parse_split(spec: str, rounding: Optional[str] = None) -> List[SplitPart]:
    """``"train[:90%]+validation"`` -> its parts; ``rounding`` applies to the parts that
    do not name one. Raises ``ValueError`` with the offending part."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"split selection must be a non-empty string, got {spec!r}")
    if rounding is not None and rounding not in ROUNDINGS:
        raise ValueError(f"rounding {rounding!r}: use one of {', '.join(ROUNDINGS)}")
    parts = []
    for raw in spec.split("+"):
        text = raw.strip()
        m = _PART.match(text)
        if m is None:
            raise ValueError(
                f"split selection {spec!r}: cannot read {text!r}; write name, name[from:to] with record "
                "numbers or percentages (train[:90%], validation[:1000], train[-10%:]), joined by '+'"
            )
        own = m.group("rounding")
        if own is not None and own not in ROUNDINGS:
            raise ValueError(f"split {text!r}: rounding {own!r}: use one of {', '.join(ROUNDINGS)}")
        parts.append(
            SplitPart(
                m.group("split"),
                _bound(m.group("from"), m.group("from_pct"), text),
                _bound(m.group("to"), m.group("to_pct"), text),
                own or rounding or "closest",
            )
        )
    return parts


def _absolute(bound: Optional[Bound], n: int, default: int, part: SplitPart) -> int:
    if bound is None:
        return default
    if not bound.percent:
        k = int(bound.value)
    elif part.rounding == "closest":
        k = round(bound.value * n / 100)  # Fraction: exact, ties to even
    else:
        if bound.value.denominator != 1:
            raise ValueError(
                f"split {part.split!r}: pct1_dropremainder needs whole percentages, not {float(bound.value)}%"
            )
        if n < 100:
            raise ValueError(
                f"split {part.split!r} has {n} records: pct1_dropremainder needs at least 100 (1% = n // 100 records)"
            )
        k = int(bound.value) * (n // 100)
    if k < 0:
        k = max(n + k, 0)
    return min(k, n)


def resolve_split(spec: str, counts: Mapping[str, int], rounding: Optional[str] = None) -> List[SplitRange]:
    """The record ranges a selection names, given each split's record count."""
    out = []
    for part in parse_split(spec, rounding):
        if part.split not in counts:
            raise ValueError(f"split {part.split!r} is not in the dataset (it has: {', '.join(sorted(counts))})")
        n = int(counts[part.split])
        start = _absolute(part.start, n, 0, part)
        stop = _absolute(part.stop, n, n, part)
        if stop <= start:
            raise ValueError(
                f"split selection {spec!r}: {_describe(part)} selects no records of the {n} in {part.split!r} "
                f"([{start}:{stop}])"
            )
        out.append(SplitRange(part.split, start, stop))
    return out


def _describe(part: SplitPart) -> str:
    def show(b: Optional[Bound]) -> str:
        if b is None:
            return ""
        v = b.value
        text = str(v.numerator) if v.denominator == 1 else str(float(v))
        return text + ("%" if b.percent else "")

    return f"{part.split}[{show(part.start)}:{show(part.stop)}]"


__all__ = ["ROUNDINGS", "Bound", "SplitPart", "SplitRange", "parse_split", "resolve_split"]
