"""Iterator helpers as in the ``tfrecord`` package: cycling, weighted sampling across
sources, and a shuffle buffer. Each takes an optional ``random.Random`` so callers
(e.g. DataLoader workers) can make a run reproducible."""

from __future__ import annotations

import math
import random
from typing import Callable, Iterable, Iterator, List, Mapping, Optional, Sequence, TypeVar, Union

T = TypeVar("T")


def cycle(iterator_fn: Callable[[], Iterable[T]]) -> Iterator[T]:
    """Repeat the iterable that ``iterator_fn`` makes, forever; stops at once if it is
    empty (so an empty file never spins)."""
    while True:
        produced = False
        for element in iterator_fn():
            produced = True
            yield element
        if not produced:
            return


def check_weights(weights: Union[Mapping[str, float], Sequence[float]]) -> List[float]:
    """Weights as floats; each finite and >= 0, at least one > 0 (else ValueError)."""
    items = list(weights.items()) if isinstance(weights, Mapping) else list(enumerate(weights))
    out = []
    for name, w in items:
        try:
            value = float(w)
        except (TypeError, ValueError):
            raise ValueError(f"weight of {name!r} is not a number: {w!r}") from None
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"weight of {name!r} must be finite and >= 0, got {w!r}")
        out.append(value)
    if not any(v > 0 for v in out):
        raise ValueError("at least one weight must be > 0")
    return out


def sample_iterators(
    iterators: Sequence[Iterator[T]],
    ratios: Sequence[float],
    infinite: bool = True,
    rng: Optional[random.Random] = None,
) -> Iterator[T]:
    """Draw from ``iterators`` with probabilities proportional to ``ratios``.

    Each entry is an iterator, or (as the ``tfrecord`` package takes them) a function
    that makes one: with ``infinite=True`` a function is cycled, else called once.
    An iterator that is exhausted is dropped and the others' weights renormalised;
    iteration ends when every one is exhausted (with ``infinite=True`` callers pass
    ``cycle``-wrapped iterators, which end only when their source is empty).
    """
    weights = check_weights(ratios)
    sources = [
        (cycle(it) if infinite else iter(it())) if callable(it) and not hasattr(it, "__next__") else it
        for it in iterators
    ]
    live = [(it, w) for it, w in zip(sources, weights) if w > 0]
    rng = rng or random.Random()
    while live:
        total = sum(w for _, w in live)
        pick = rng.random() * total
        acc = 0.0
        choice = len(live) - 1
        for i, (_, w) in enumerate(live):
            acc += w
            if pick < acc:
                choice = i
                break
        try:
            yield next(live[choice][0])
        except StopIteration:
            del live[choice]


def shuffle_iterator(iterator: Iterable[T], queue_size: int, rng: Optional[random.Random] = None) -> Iterator[T]:
    """Shuffle with a buffer of ``queue_size`` elements (the classic approximate
    shuffle); every element is yielded exactly once."""
    if queue_size < 1:
        raise ValueError("queue_size must be >= 1")
    rng = rng or random.Random()
    buffer: List[T] = []
    it = iter(iterator)
    for element in it:
        if len(buffer) < queue_size:
            buffer.append(element)
            continue
        i = rng.randrange(queue_size)
        yield buffer[i]
        buffer[i] = element
    rng.shuffle(buffer)
    yield from buffer
