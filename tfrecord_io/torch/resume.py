"""Where an iteration of a dataset copy is, as a small state that a restored copy
seeks to: the record sources (sequential pieces, or a window of the global
permutation), the shuffle buffer, and the checks that refuse a state from another
dataset.

What a position is:

- sequential pieces (``PieceSource``): the piece number and the byte offset of the
  next record in it (taken from the last record consumed: its offset + frame size).
  Resuming opens that piece at that offset (through its index, or at a known frame
  boundary), never reading the records before it. A compressed piece cannot be
  seeked: it is decompressed up to that offset (its records are not parsed again).
- the global permutation (``GlobalSource``): the position in this copy's part of the
  permuted order; resuming evaluates the permutation from there.
- the shuffle buffer (``ShuffleBuffer``): its random generator's state and where
  each buffered record is (file, offset, length; the bytes themselves for records of
  compressed files). Restoring reads those records again by offset, CRCs checked.

Nothing here imports torch; ``tfrecord_io.torch.dataset`` and ``batched`` use it.
"""

from __future__ import annotations

import hashlib
import mmap
import random
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from itertools import chain, repeat
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..dataset.permutation import Permutation
from ..errors import TFRecordError
from ..format import remote_reader
from ..format.framing import FRAME_OVERHEAD, FrameStream
from ..format.random_access import _map_local, decode_frame
from ..format.sharding import FileInfo, Piece, read_piece
from ..storage import files, range_reads
from ..storage.remote_objects import RemoteObject

#: the state's format; a state of another format is refused, never guessed at
STATE_FORMAT = "tfrecord_io.torch.state/1"

#: a record on its way from the reader: (path, (offset, data))
Located = Tuple[str, Tuple[int, Any]]

DEFAULT_GLOBAL_WINDOW = 1024


class StateError(ValueError):
    """A state that this dataset cannot resume from; the message says what differs."""


# ---------------------------------------------------------------------- identity


def files_digest(infos: Sequence[FileInfo], objects: Mapping[str, RemoteObject]) -> str:
    """A digest of what decides the records: paths, sizes, record ranges, compression,
    index sizes and (for objects) ETags."""
    h = hashlib.sha256()
    for f in infos:
        obj = objects.get(f.path)
        count = None if f.index is None else len(f.index)
        h.update(repr((f.path, f.size, f.first, f.last, f.compression, count, obj.etag if obj else None)).encode())
    return h.hexdigest()


def check_identity(saved: Mapping[str, Any], mine: Mapping[str, Any]) -> None:
    """Refuse a state whose dataset differs from this one in anything that decides
    which records come in which order."""
    first = ("class", "origin", "files")  # the most telling difference is named
    for key in sorted(set(saved) | set(mine), key=lambda k: (first.index(k) if k in first else len(first), k)):
        if saved.get(key) != mine.get(key):
            what = "the files (paths, sizes, record ranges or object versions)" if key == "files" else key
            raise StateError(
                f"cannot resume from this state: it was saved by a dataset whose {what} is "
                f"{saved.get(key)!r}, this dataset has {mine.get(key)!r}; a state resumes only the same "
                "files, selection, version, seed and shuffle and batch settings (it would read other records)"
            )


def check_header(state: Any) -> None:
    if not isinstance(state, Mapping) or "format" not in state:
        raise StateError("not a tfrecord_io dataset state (no 'format' key): was it saved by another dataset?")
    if state["format"] != STATE_FORMAT:
        raise StateError(
            f"state format {state['format']!r} is not {STATE_FORMAT!r} (saved by another version of tfrecord-io)"
        )


# ---------------------------------------------------------------------- reading frames


def _every(records: Iterator[Tuple[int, Any]], every: Tuple[int, int]) -> Iterator[Tuple[int, Any]]:
    k, m = every
    if m == 1:
        return records
    return (r for n, r in enumerate(records) if n % m == k)


def _compressed_from(piece: Piece, check_crc: bool) -> Iterator[Tuple[int, Any]]:
    """Records of a local compressed file from decompressed offset ``piece.start``."""
    with files.open_read(piece.path, piece.compression) as raw:
        skipped = 0
        while skipped < piece.start:
            got = raw.read(min(piece.start - skipped, 1 << 20))
            if not got:
                return
            skipped += len(got)
        yield from FrameStream(raw, path=piece.path, offset=piece.start, size=None, check_crc=check_crc).frames()


def read_piece_at(piece: Piece, check_crc: bool, objects: Mapping[str, RemoteObject]) -> Iterator[Tuple[int, Any]]:
    """``sharding.read_piece``, plus S3 objects by range requests (``remote_reader``)
    and compressed pieces that start inside the stream (a resumed position)."""
    obj = objects.get(piece.path)
    if obj is not None:
        return _every(
            remote_reader.remote_records(obj, piece.start, piece.end, piece.index, piece.compression, check_crc),
            piece.every,
        )
    if piece.compression and piece.start > 0:
        return _every(_compressed_from(piece, check_crc), piece.every)
    return read_piece(piece, check_crc)


def _frame_at(maps: Dict[Any, Any], key: Any, path: str, offset: int, size: int) -> Any:
    """The ``size`` bytes at ``offset`` of a file that is not an S3 object: a view of its
    memory map (local), or read through Beam's filesystems (``gs://`` and others)."""
    if files.is_remote(path):
        with files.open_raw(path, "rb") as f:
            f.seek(offset)
            return f.read(size)
    if key not in maps:
        maps[key] = _map_local(path)
    return maps[key][offset : offset + size]


def reread(entries: Sequence[Any], check_crc: bool, objects: Mapping[str, RemoteObject]) -> List[Located]:
    """Records named by ``(path, offset, length)`` (or ``(path, offset, bytes)``), read
    again by offset with their CRCs checked, in the order given."""
    out: List[Located] = []
    maps: Dict[str, Any] = {}
    remote = [(i, e) for i, e in enumerate(entries) if e[0] in objects and not isinstance(e[2], bytes)]
    fetched = range_reads.fetch_many([(objects[e[0]], e[1], e[1] + e[2] + FRAME_OVERHEAD) for _, e in remote])
    by_pos = {i: data for (i, _), data in zip(remote, fetched)}
    for i, (path, offset, what) in enumerate(entries):
        if isinstance(what, bytes):
            out.append((path, (offset, memoryview(what))))
            continue
        if i in by_pos:
            frame = by_pos[i]
        else:
            frame = _frame_at(maps, path, path, offset, what + FRAME_OVERHEAD)
        out.append((path, (offset, decode_frame(frame, path, offset, check_crc))))
    return out


# ---------------------------------------------------------------------- sources


class PieceSource:
    """The pieces of a shard read in order; resumable at (piece, offset)."""

    def __init__(
        self,
        pieces: Sequence[Piece],
        check_crc: bool,
        objects: Mapping[str, RemoteObject],
        start: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.pieces = list(pieces)
        self.check_crc = check_crc
        self.objects = objects
        self.start: Dict[str, Any] = (
            dict(start) if start else {"kind": "pieces", "piece": 0, "offset": None, "started": False}
        )
        if self.start.get("kind") != "pieces":
            raise StateError(f"the state's position is of kind {self.start.get('kind')!r}, this run reads pieces")
        k = int(self.start["piece"])
        if not (0 <= k <= len(self.pieces)):
            raise StateError(f"the state's position names piece {k}, this shard has {len(self.pieces)}")
        if k < len(self.pieces) and self.start.get("path", self.pieces[k].path) != self.pieces[k].path:
            raise StateError(
                f"the state's piece {k} is {self.start.get('path')}, this shard's is {self.pieces[k].path}"
            )
        self.last: Optional[Located] = None
        self.consumed = int(self.start.get("consumed", 0))
        self._hint = k

    def _resumed(self) -> List[Piece]:
        k, offset = int(self.start["piece"]), self.start.get("offset")
        rest = self.pieces[k:]
        if rest and offset is not None:
            p = rest[0]
            every = p.every
            if self.start.get("started") and every[1] > 1:
                every = (every[1] - 1, every[1])  # the next kept record is the m-th after ours
            rest[0] = replace(p, start=int(offset), every=every)
        return rest

    def records(self) -> Iterator[Located]:
        check, objects = self.check_crc, self.objects
        return chain.from_iterable(zip(repeat(p.path), read_piece_at(p, check, objects)) for p in self._resumed())

    def note(self, last: Located, n: int) -> None:
        self.last = last
        self.consumed += n

    def position(self) -> Dict[str, Any]:
        if self.last is None:
            return dict(self.start, consumed=self.consumed)
        path, (offset, data) = self.last
        for k in range(self._hint, len(self.pieces)):
            p = self.pieces[k]
            if p.path == path and (p.compression or (p.start <= offset and (p.end is None or offset < p.end))):
                self._hint = k
                nxt = offset + len(data) + FRAME_OVERHEAD
                return {
                    "kind": "pieces",
                    "piece": k,
                    "path": path,
                    "offset": nxt,
                    "started": True,
                    "consumed": self.consumed,
                }
        raise TFRecordError(f"record at offset {offset} is in none of this shard's pieces", path, offset)


class GlobalSource:
    """Positions ``[lo, hi)`` of a permutation of the records of ``infos`` (laid end to
    end), read a window of ``window`` positions at a time: the window's records are
    sorted by file and offset, read (local: views of the memory-mapped file; S3: one
    range request per run of adjacent frames, the next window fetched while this one
    is consumed), checked, and yielded in permuted order."""

    def __init__(
        self,
        infos: Sequence[FileInfo],
        perm: Permutation,
        lo: int,
        hi: int,
        window: int,
        check_crc: bool,
        objects: Mapping[str, RemoteObject],
        start: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.infos = list(infos)
        self.perm = perm
        self.lo, self.hi = lo, hi
        self.window = max(1, int(window))
        self.check_crc = check_crc
        self.objects = objects
        if start is not None:
            if start.get("kind") != "global":
                raise StateError(f"the state's position is of kind {start.get('kind')!r}, this run reads 'global'")
            pos = int(start["position"])
            if not (lo <= pos <= hi):
                raise StateError(f"the state's position {pos} is outside this shard's [{lo}, {hi})")
            self.pos0 = pos
        else:
            self.pos0 = lo
        counts = np.array([f.count or 0 for f in self.infos], dtype=np.int64)
        self._ends = np.cumsum(counts)
        self._starts = self._ends - counts
        self.consumed = 0
        self._maps: Dict[int, Any] = {}

    def note(self, last: Located, n: int) -> None:
        self.consumed += n

    def position(self) -> Dict[str, Any]:
        return {"kind": "global", "position": self.pos0 + self.consumed}

    def _windows(self) -> Iterator[Tuple[int, int]]:
        a = self.pos0
        while a < self.hi:
            b = min(self.hi, self.lo + ((a - self.lo) // self.window + 1) * self.window)
            yield a, b
            a = b

    def _locate(self, a: int, b: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        ids = self.perm.permute(range(a, b))
        fno = np.searchsorted(self._ends, ids, side="right")
        offsets = np.empty(len(ids), dtype=np.int64)
        sizes = np.empty(len(ids), dtype=np.int64)
        for f in np.unique(fno).tolist():
            sel = fno == f
            info = self.infos[f]
            local = ids[sel] - self._starts[f] + info.first
            index = info.index
            assert index is not None  # global sources need indexed files (checked before)
            offsets[sel] = index.offsets[local]
            sizes[sel] = index.sizes[local]
        return ids, fno, offsets, sizes

    def _fetch(self, a: int, b: int) -> List[Located]:
        """The records of positions ``[a, b)`` in permuted order, read in file order."""
        _, fno, offsets, sizes = self._locate(a, b)
        order = np.lexsort((offsets, fno))  # file, then offset
        frames: List[Any] = [None] * len(order)
        runs: List[Tuple[RemoteObject, int, int, List[int]]] = []
        for k in order.tolist():
            f, off, size = int(fno[k]), int(offsets[k]), int(sizes[k])
            path = self.infos[f].path
            obj = self.objects.get(path)
            if obj is None:
                frames[k] = _frame_at(self._maps, f, path, off, size)
            elif runs and runs[-1][0] is obj and runs[-1][2] == off:
                o, s, _, members = runs[-1]
                members.append(k)
                runs[-1] = (o, s, off + size, members)
            else:
                runs.append((obj, off, off + size, [k]))
        if runs:
            for (_, s, _, members), data in zip(runs, range_reads.fetch_many([(o, s, e) for o, s, e, _ in runs])):
                view = memoryview(data)
                for k in members:
                    rel = int(offsets[k]) - s
                    frames[k] = view[rel : rel + int(sizes[k])]
        out: List[Located] = []
        check = self.check_crc
        for k in range(len(frames)):
            path = self.infos[int(fno[k])].path
            off = int(offsets[k])
            out.append((path, (off, decode_frame(frames[k], path, off, check))))
        return out

    def records(self) -> Iterator[Located]:
        if self.objects:
            return self._prefetched()
        return self._local()

    def _local(self) -> Iterator[Located]:
        """Local files: before a window is used, the next one's pages are asked for
        (``MADV_WILLNEED``: the kernel reads them ahead while this window is parsed)."""
        windows = list(self._windows())
        for k, (a, b) in enumerate(windows):
            if k + 1 < len(windows):
                self._advise(*windows[k + 1])
            yield from self._fetch(a, b)

    def _advise(self, a: int, b: int) -> None:
        if not hasattr(mmap, "MADV_WILLNEED"):
            return
        _, fno, offsets, sizes = self._locate(a, b)
        page = mmap.PAGESIZE
        for f, off, size in zip(fno.tolist(), offsets.tolist(), sizes.tolist()):
            if self.infos[f].path in self.objects or files.is_remote(self.infos[f].path):
                continue
            if f not in self._maps:
                self._maps[f] = _map_local(self.infos[f].path)
            mapped = self._maps[f].obj
            start = off - off % page
            try:
                mapped.madvise(mmap.MADV_WILLNEED, start, off + size - start)
            except (OSError, ValueError):
                return  # advice only

    def _prefetched(self) -> Iterator[Located]:
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tfrecord-io-window") as ahead:
            windows = self._windows()
            nxt = next(windows, None)
            pending = ahead.submit(self._fetch, *nxt) if nxt else None
            while pending is not None:
                got = pending.result()
                nxt = next(windows, None)
                pending = ahead.submit(self._fetch, *nxt) if nxt else None
                yield from got


def global_permutation(total: int, shared_key: Sequence[Any], epoch: int, passes: int) -> Permutation:
    """The permutation of one epoch: keyed by the seed (``("seed", s, ...)``, or the
    torch-drawn ``("torch", base, ...)``) and the epoch, with a persistent worker's later
    passes counting as later epochs; so the main process (pass 0) and fresh workers
    (pass 1) permute alike."""
    base = [str(x) for x in tuple(shared_key)[:2]]
    return Permutation(total, ":".join(["global", *base, "epoch", str(epoch + max(passes - 1, 0))]))


# ---------------------------------------------------------------------- buffer


class ShuffleBuffer:
    """The classic buffer shuffle (as ``iterator_utils.shuffle_iterator``: each incoming
    record swaps with a random one of ``size`` buffered records), whose state is the
    random generator's and the buffered records' places."""

    def __init__(self, size: int, rng: random.Random) -> None:
        if size < 1:
            raise ValueError("the shuffle buffer size must be >= 1")
        self.size = size
        self.rng = rng
        self.buf: List[Located] = []
        self.draining = False
        self.drained = 0

    def run(self, source: Any) -> Iterator[Located]:
        buf, size, rng = self.buf, self.size, self.rng
        if not self.draining:
            for el in source.records():
                source.note(el, 1)
                if len(buf) < size:
                    buf.append(el)
                    continue
                i = rng.randrange(size)
                out = buf[i]
                buf[i] = el
                yield out
            rng.shuffle(buf)
            self.draining = True
        while self.drained < len(buf):
            out = buf[self.drained]
            self.drained += 1
            yield out

    def state(self, compressed: Mapping[str, bool]) -> Dict[str, Any]:
        entries = []
        for path, (offset, data) in self.buf[self.drained :]:
            what: Any = bytes(data) if compressed.get(path) else len(data)
            entries.append((path, int(offset), what))
        return {"rng": self.rng.getstate(), "draining": self.draining, "records": entries}

    def restore(self, state: Mapping[str, Any], check_crc: bool, objects: Mapping[str, RemoteObject]) -> None:
        self.rng.setstate(tuple(state["rng"]) if not isinstance(state["rng"], tuple) else state["rng"])
        self.draining = bool(state["draining"])
        self.buf[:] = reread(state["records"], check_crc, objects)
        self.drained = 0


__all__ = [
    "DEFAULT_GLOBAL_WINDOW",
    "GlobalSource",
    "Located",
    "PieceSource",
    "STATE_FORMAT",
    "ShuffleBuffer",
    "StateError",
    "check_header",
    "check_identity",
    "files_digest",
    "global_permutation",
    "read_piece_at",
    "reread",
]


# ---------------------------------------------------------------------- runs


class MultiSource:
    """Records drawn from several ``PieceSource``s by weight (``MultiTFRecordDataset``):
    the draws come from ``rng``; an exhausted source is restarted (``infinite``, when
    it gave records in its last pass) or dropped. Its position: the generator's state,
    the live sources and each source's position."""

    def __init__(
        self,
        plans: Mapping[str, Tuple[float, List[Piece]]],
        infinite: bool,
        rng: random.Random,
        check_crc: bool,
        objects: Mapping[str, RemoteObject],
        start: Optional[Mapping[str, Any]] = None,
    ) -> None:
        self.plans = dict(plans)
        self.infinite = infinite
        self.rng = rng
        self.check_crc = check_crc
        self.objects = objects
        if start is not None:
            if start.get("kind") != "multi" or set(start["sources"]) - set(self.plans):
                raise StateError("the state's position is not of this MultiTFRecordDataset's splits")
            self.rng.setstate(tuple(start["rng"]) if not isinstance(start["rng"], tuple) else start["rng"])
            self.live = [n for n in start["live"]]
            self.subs = {n: PieceSource(self.plans[n][1], check_crc, objects, start["sources"][n]) for n in self.live}
        else:
            self.live = [n for n, (w, pieces) in self.plans.items() if w > 0 and pieces]
            self.subs = {n: PieceSource(self.plans[n][1], check_crc, objects) for n in self.live}

    def note(self, last: Located, n: int) -> None:
        pass  # each source is noted as its record is drawn

    def records(self) -> Iterator[Located]:
        iters = {n: self.subs[n].records() for n in self.live}
        live, rng = self.live, self.rng
        while live:
            total = sum(self.plans[n][0] for n in live)
            pick = rng.random() * total
            acc = 0.0
            choice = live[-1]
            for n in live:
                acc += self.plans[n][0]
                if pick < acc:
                    choice = n
                    break
            src = self.subs[choice]
            el = next(iters[choice], None)
            if el is None and self.infinite and src.consumed > 0:
                src = self.subs[choice] = PieceSource(self.plans[choice][1], self.check_crc, self.objects)
                iters[choice] = src.records()
                el = next(iters[choice], None)
            if el is None:
                live.remove(choice)
                continue
            src.note(el, 1)
            yield el

    def position(self) -> Dict[str, Any]:
        return {
            "kind": "multi",
            "rng": self.rng.getstate(),
            "live": list(self.live),
            "sources": {n: self.subs[n].position() for n in self.live},
        }


class Run:
    """One iteration of one dataset copy: its context, seed keys, source and buffer,
    and how many items it yielded."""

    def __init__(
        self,
        identity: Dict[str, Any],
        context: Tuple[int, int, int, int],
        keys: Tuple[Any, Any],
        epoch: int,
        passes: int,
        source: Any,
        buffer: Optional[ShuffleBuffer],
        compressed: Mapping[str, bool],
    ) -> None:
        self.identity = identity
        self.context = context
        self.keys = keys
        self.epoch = epoch
        self.passes = passes
        self.source = source
        self.buffer = buffer
        self.compressed = compressed
        self.yielded = 0
        self.finished = False

    def located(self) -> Tuple[Iterator[Located], bool]:
        """(records in the order they are used, whether the caller must ``note`` them)."""
        if self.buffer is not None:
            return self.buffer.run(self.source), False
        return self.source.records(), True

    def state(self) -> Dict[str, Any]:
        return {
            "format": STATE_FORMAT,
            "identity": dict(self.identity),
            "epoch": self.epoch,
            "passes": self.passes,
            "context": list(self.context),
            "keys": [tuple(self.keys[0]), tuple(self.keys[1])],
            "position": self.source.position(),
            "buffer": None if self.buffer is None else self.buffer.state(self.compressed),
            "yielded": self.yielded,
            "finished": self.finished,
        }


def check_context(state: Mapping[str, Any], context: Tuple[int, int, int, int]) -> None:
    saved = tuple(int(x) for x in state["context"])
    if saved != tuple(context):
        r, w, i, n = saved
        r2, w2, i2, n2 = context
        raise StateError(
            f"cannot resume from this state: it was saved by DataLoader worker {i} of {n} on rank {r} of {w}, "
            f"this copy is worker {i2} of {n2} on rank {r2} of {w2}; resume with the same num_workers and "
            "world size (StatefulDataLoader gives each worker its own state)"
        )


__all__ += ["MultiSource", "Run", "check_context"]
