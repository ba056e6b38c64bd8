"""``ReadOptions``: how the iterable datasets read (shuffles, seed, sharding context,
compression, CRC checks, global-shuffle window, pinned object versions), as one frozen
object that a constructor builds once and passes down.

Why one object: ``TFRecordDataset``, ``MultiTFRecordDataset``, ``TFRecordBatchDataset``
and ``from_dataset`` all take the same reading options; forwarding them one by one
through every constructor repeated the same ten arguments four times, and a new option
had to be added (and validated) in each. Here each is declared, documented and checked
once. The constructors still take them as keywords (and ``shuffle_queue_size`` /
``compression_type`` positionally, as the ``tfrecord`` package does), or all at once as
``options=ReadOptions(...)`` (e.g. the same options for a training and a validation set).

Nothing here imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, Mapping, Optional, Tuple, TypedDict

from ..storage.remote_objects import RemoteObject
from .resume import DEFAULT_GLOBAL_WINDOW

#: ``shuffle=`` values: None (the buffer and file shuffles, as set) or one permutation per epoch
SHUFFLE_MODES = (None, "global")


@dataclass(frozen=True)
class ReadOptions:
    """The reading options every iterable dataset takes (see the module doc of
    ``tfrecord_io.torch.dataset`` for sharding, seeds and resuming).

    - ``shuffle_queue_size``: records in the shuffle buffer (None or 0: no buffer).
    - ``compression_type``: None (plain or detected from the name), ``"gzip"``, ``"zlib"``.
    - ``shuffle_files``: shuffle the file order each epoch (several ranks need ``seed``).
    - ``seed``: the order depends only on ``(seed, epoch, shard)``; None: torch's seeds.
    - ``rank`` / ``world_size``: this process's place (None: ``torch.distributed``, else
      the ``RANK`` / ``WORLD_SIZE`` environment variables, else 0 of 1).
    - ``check_crc``: check both CRCs of every record (False: data you trust).
    - ``shuffle``: None, or ``"global"`` (one permutation of every record per epoch; needs
      plain, indexed files).
    - ``global_window``: positions of the permutation read at a time (sorted by offset).
    - ``remote_objects``: ``s3://`` object versions stat'ed already, by URL (as
      ``from_dataset`` passes them); the others are stat'ed when the files are described.
    """

    shuffle_queue_size: Optional[int] = None
    compression_type: Optional[str] = None
    shuffle_files: bool = False
    seed: Optional[int] = None
    rank: Optional[int] = None
    world_size: Optional[int] = None
    check_crc: bool = True
    shuffle: Optional[str] = None
    global_window: int = DEFAULT_GLOBAL_WINDOW
    remote_objects: Mapping[str, RemoteObject] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.shuffle_queue_size is not None and self.shuffle_queue_size < 0:
            raise ValueError(f"shuffle_queue_size must be >= 0, got {self.shuffle_queue_size}")
        if self.shuffle not in SHUFFLE_MODES:
            raise ValueError(f"shuffle={self.shuffle!r}: use None (buffer and file shuffles as set) or 'global'")
        if int(self.global_window) < 1:
            raise ValueError(f"global_window must be >= 1, got {self.global_window}")
        object.__setattr__(self, "global_window", int(self.global_window))
        object.__setattr__(self, "remote_objects", dict(self.remote_objects or {}))

    @property
    def randomised(self) -> bool:
        """Whether any shuffle is on (else a main-process iteration draws no torch seed)."""
        return bool(self.shuffle_queue_size or self.shuffle_files or self.shuffle)

    @classmethod
    def names(cls) -> Tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def gather(cls, options: Optional[ReadOptions], keywords: Mapping[str, Any], **positional: Any) -> ReadOptions:
        """The options a constructor was given: ``options`` as it is, or one built from
        ``keywords`` and the ``positional`` ones that are not None (the constructor's
        positional ``shuffle_queue_size`` / ``compression_type``). Both ways at once, or
        a keyword that is no reading option, raise ``TypeError``."""
        given: Dict[str, Any] = dict(keywords)
        given.update((name, value) for name, value in positional.items() if value is not None)
        unknown = sorted(set(given) - set(cls.names()))
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {', '.join(unknown)} (reading options: {cls.names()})")
        if options is None:
            return cls(**given)
        if not isinstance(options, ReadOptions):
            raise TypeError(f"options= takes a ReadOptions, not {type(options).__name__}")
        if given:
            raise TypeError(
                f"reading options given both as options= and as keywords ({', '.join(sorted(given))}): "
                "give them one way (dataclasses.replace(options, ...) changes some)"
            )
        return options

    @classmethod
    def take(cls, keywords: Dict[str, Any]) -> ReadOptions:
        """Pop ``options`` and every reading option out of ``keywords`` (``from_dataset``'s,
        which also holds the batch dataset's own) into one ``ReadOptions``."""
        options = keywords.pop("options", None)
        mine = {name: keywords.pop(name) for name in cls.names() if name in keywords}
        return cls.gather(options, mine)


class ReadKwargs(TypedDict, total=False):
    """The reading options a constructor takes as keywords only (its type for
    ``**read``: ``ReadOptions``'s fields but the two the constructors name themselves)."""

    shuffle_files: bool
    seed: Optional[int]
    rank: Optional[int]
    world_size: Optional[int]
    check_crc: bool
    shuffle: Optional[str]
    global_window: int
    remote_objects: Mapping[str, RemoteObject]


__all__ = ["ReadKwargs", "ReadOptions", "SHUFFLE_MODES"]
