"""argparse types for the ``tfrecord-io`` commands' numeric options: the one place they are
checked.

Why: ``type=int`` takes ``--num-shards -1`` or ``--head -5`` as it is; the value then
fails deep in a job (a ``ValueError`` traceback, exit 1) or is used as if it made sense
(a negative slice of the records). With these types argparse refuses it while parsing:
the command's usage line and ``argument --head: must be 0 or more, got -5``, exit
status 2, nothing started and nothing written.
"""

from __future__ import annotations

import argparse


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def non_negative_int(text: str) -> int:
    """An ``int`` >= 0 (0 has a meaning of its own: "let the runner decide", "none")."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_int(text: str) -> int:
    """An ``int`` >= 1."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


__all__ = ["non_negative_int", "positive_int"]
