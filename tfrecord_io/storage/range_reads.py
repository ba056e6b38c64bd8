"""Range reads of objects in S3, GCS and Azure Blob Storage: read-ahead, parallel
fetches, every byte fetched once, each object pinned to the version that was listed
(``remote_objects``), through the store's module (``s3_objects``, ``gcs_objects``,
``azure_objects``), with an optional local cache of whole chunks.

Why not Beam's ``FileSystems.open``: it reads one buffer at a time on one connection,
so a reader waits a round trip per buffer, and nothing notices an object replaced
while it is read. Here a reader knows the byte ranges it will read (from an index, or
"the rest of the object"), keeps ``parallel`` range GETs in flight ahead of the
consumer, and pins each to the version it listed.

Which requests. A sequential read (``fetch_ahead``: consecutive ranges, e.g. blocks of
whole frames of about ``block_size`` bytes, or the ``block_size`` ranges of a
``RangeStream``) asks for runs of consecutive blocks of up to ``request_size`` bytes in
one GET each (GCS, Azure: one GET per block), and reads each response block by block
into reused buffers as the consumer needs them: the memory held is a few blocks per
request in flight (``AHEAD_BLOCKS``), not the whole request. A response that breaks off
in the middle is asked again for the rest (still pinned). A ``RangeStream`` that stops
inside the object reads past its stop one block at a time, only as far as it is read.
A set of ranges (``fetch_many``: a window of a global shuffle) is one request each,
``random_parallel`` of them in flight. ``STATS`` counts requests and bytes in this
process, for tests and benchmarks.

Optional local cache (``configure(cache_dir=..., cache_bytes=...)``): whole
``CACHE_CHUNK`` bytes chunks of an object version (keyed by URL, ETag or generation,
and chunk number) kept as files under ``cache_dir``; the least recently used go once
the total passes ``cache_bytes``. With the cache on, every read goes through whole
chunks: a chunk is fetched once and the next range of a sequential read finds the rest
of it in the cache (a chunk that two readers need at once, e.g. at a shard boundary,
may be fetched by both). Later epochs read from the cache as far as it holds them.

``configure`` is here, not beside the settings it sets (``remote_objects``): it also
forgets the S3 client (``s3_objects.reset_client``) and applies a lowered cache cap,
and ``remote_objects`` imports neither. What frames are read from these bytes, and how,
is ``tfrecord_io.format.remote_reader``'s. Nothing here imports torch or Beam.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import os
import queue
import sys
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from ..errors import TruncatedRecordError
from . import azure_objects, gcs_objects, s3_objects
from .remote_objects import (
    STATS,
    TRIES,
    Data,
    RemoteObject,
    RemoteObjectChangedError,
    _stats_lock,
    is_azure,
    is_gcs,
    settings,
)

CACHE_CHUNK = 8 << 20

#: blocks a request in flight may hold ahead of the consumer before it waits (TCP's
#: flow control then holds the server back)
AHEAD_BLOCKS = 2


def configure(
    *,
    client_factory: Optional[Callable[[], Any]] = None,
    cache_dir: Optional[str] = None,
    cache_bytes: Optional[int] = None,
    parallel: Optional[int] = None,
    block_size: Optional[int] = None,
    request_size: Optional[int] = None,
    random_parallel: Optional[int] = None,
) -> None:
    """Set how objects are read in this process (and in DataLoader workers forked or
    spawned after it, which inherit module state when forked; pass the same settings
    through ``worker_init_fn`` with spawn). ``cache_dir=""`` turns the cache off.

    ``parallel``: GETs in flight per sequential reader; ``block_size``: bytes scanned
    (and held in one buffer) at a time; ``request_size``: bytes asked for in one GET of
    a sequential read (rounded to whole blocks); ``random_parallel``: GETs in flight
    for the records of a global-shuffle window."""
    current = settings()
    if client_factory is not None:
        current.client_factory = client_factory
        s3_objects.reset_client()
    if cache_dir is not None:
        current.cache_dir = cache_dir or None
    if cache_bytes is not None:
        if cache_bytes < 0:
            raise ValueError("cache_bytes must be >= 0")
        current.cache_bytes = int(cache_bytes)
    for name, value in (
        ("parallel", parallel),
        ("block_size", block_size),
        ("request_size", request_size),
        ("random_parallel", random_parallel),
    ):
        if value is not None:
            if value < 1:
                raise ValueError(f"{name} must be >= 1")
            setattr(current, name, int(value))
    if current.cache_dir and os.path.isdir(current.cache_dir):
        _evict()  # a lowered cap holds from now on


def stat(url: str, listed_size: Optional[int] = None) -> RemoteObject:
    """HEAD ``url``: its size and ETag (S3, Azure) or generation (GCS); ``listed_size``
    (from a listing) must match."""
    if is_gcs(url):
        return gcs_objects.stat(url, listed_size)
    if is_azure(url):
        return azure_objects.stat(url, listed_size)
    return s3_objects.stat(url, listed_size)


def _open(obj: RemoteObject, start: int, end: int) -> Any:
    """A GET of bytes ``[start, end)`` of this version of the object, by its store's
    module; the body (``readinto``, ``close``) is still to be read."""
    if is_gcs(obj.url):
        return gcs_objects.open_range(obj, start, end)  # counts its requests itself: one per block
    if is_azure(obj.url):
        return azure_objects.open_range(obj, start, end)  # likewise
    return s3_objects.open_range(obj, start, end)


# ---------------------------------------------------------------------- buffers


class _BufferPool:
    """Receive buffers of ``block_size`` bytes, reused once nothing views them any more.

    Why: a fresh buffer is page-faulted in as the socket fills it: 50-60 us of CPU per
    64 KiB in this VM (15-20 on bare metal), several times what receiving the bytes
    costs; DataLoader workers are new processes each epoch, so the allocator never gets
    to reuse freed blocks for them. Sequential reads take a buffer per block; the
    records of a global-shuffle window are packed into them (``fetch_many``). A buffer
    handed out as a ``memoryview`` is free again when no view of it is alive, which its
    reference count tells (every view holds one reference to it through its managed
    buffer). Buffers are kept up to ``limit_bytes`` in all; past that, fresh ones."""

    def __init__(self, limit_bytes: int = 256 << 20) -> None:
        self.limit_bytes = limit_bytes
        self._buffers: List[bytearray] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()

    @property
    def limit(self) -> int:
        """Buffers kept at most (of the current ``block_size``)."""
        return max(1, self.limit_bytes // settings().block_size)

    def take(self, size: int) -> memoryview:
        """``size`` bytes: a free pooled buffer when ``POOLED_MIN <= size <= block_size``,
        else a fresh one of exactly that size."""
        block = settings().block_size
        if size < POOLED_MIN or size > block:
            return memoryview(bytearray(size))
        with self._lock:
            if self._pid != os.getpid():
                self._buffers, self._pid = [], os.getpid()
            for buf in self._buffers:
                # references: the list, the loop variable, getrefcount's argument
                if len(buf) == block and sys.getrefcount(buf) <= 3:
                    return memoryview(buf)[:size]
            self._buffers = [b for b in self._buffers if len(b) == block]  # of an earlier block_size
            buf = bytearray(block)
            if len(self._buffers) < self.limit:
                self._buffers.append(buf)
            return memoryview(buf)[:size]


#: reads smaller than this get buffers of their own (no pool)
POOLED_MIN = 256 << 10

_BUFFERS = _BufferPool()


# ---------------------------------------------------------------------- range reads


class _RangeReader:
    """Bytes ``[start, end)`` of an object, read in order into the caller's buffers by
    one GET (plus one more for the rest whenever the connection breaks off in the
    middle; ``TRIES`` in a row without a byte received is an error)."""

    def __init__(self, obj: RemoteObject, start: int, end: int) -> None:
        self.obj = obj
        self.start, self.pos, self.end = start, start, end
        self._body: Any = None
        self._failures = 0

    def readinto(self, view: memoryview) -> None:
        """Fill ``view`` (at most the bytes left) with the next bytes of the range."""
        got = 0
        while got < len(view):
            if self._body is None:
                self._body = _open(self.obj, self.pos, self.end)
                self._adopt_version()
            try:
                n = self._body.readinto(view[got:])
                error: Optional[Exception] = None
            except s3_objects._body_errors() as err:
                n, error = 0, err
            if n:
                self._adopt_version()
                got += n
                self.pos += n
                self._failures = 0
                with _stats_lock:
                    STATS.bytes += n
                continue
            self._drop()  # the body ended early or the connection broke: ask for the rest
            self._failures += 1
            if self._failures >= TRIES:
                what = f"failed ({error})" if error else "ended early"
                raise TruncatedRecordError(
                    f"range read of bytes {self.start}-{self.end - 1} {what} at byte {self.pos}, "
                    f"{TRIES} times in a row (the object has {self.obj.size})",
                    self.obj.url,
                    self.pos,
                ) from error

    def _adopt_version(self) -> None:
        """An object read without a version (``etag`` empty: ``PinOnFirstRead``'s first
        read) is pinned to the one that answered (S3: the response's ETag, known with its
        header; GCS: the generation, known once a block is read), so that the rest of the
        range, asked for again after a broken connection, is of the same version."""
        if not self.obj.etag:
            version = getattr(self._body, "version", "")
            if version:
                self.obj = dataclasses.replace(self.obj, etag=str(version))

    def _drop(self) -> None:
        body, self._body = self._body, None
        if body is not None:
            body.close()

    def close(self) -> None:
        self._drop()


def _fetch(obj: RemoteObject, start: int, end: int, out: Optional[memoryview] = None) -> memoryview:
    """Bytes ``[start, end)`` of this version of the object, in ``out`` (or a buffer of
    their own)."""
    if out is None:
        out = memoryview(bytearray(end - start))
    reader = _RangeReader(obj, start, end)
    try:
        reader.readinto(out)
    finally:
        reader.close()
    return out


class PinOnFirstRead:
    """Range reads of one object whose size is known (from a manifest: a dataset's
    ``tfrecord_io_info.json``) but not its version, pinned to the version its first read
    got: that read's response gives the version (S3: its ETag, GCS: its generation) and,
    on S3, the object's size (the ``Content-Range`` total, which must be ``size``);
    every later read asks for that version (``If-Match`` / the generation), so an object
    replaced between two reads is a ``RemoteObjectChangedError`` naming it, never bytes
    of two versions (which the CRCs would then call corrupt).

    Why the first read and not a ``stat``: a look-up by key costs one GET for an index
    block and one for the record; a HEAD (or GCS metadata GET) per object before the
    first of them would add a round trip to every first look-up of a shard. What this
    cannot see: an object replaced *before* the first read by one of the same size (on
    GCS, where google-cloud-storage does not expose the ``Content-Range`` total, by one
    of any size); the CRCs still catch those. Thread-safe: two first reads at once
    that got different versions raise."""

    def __init__(self, url: str, size: int) -> None:
        self._obj = RemoteObject(url, int(size), "")
        self._lock = threading.Lock()

    @property
    def obj(self) -> RemoteObject:
        """The object, with its version once a read has pinned it (``etag``)."""
        return self._obj

    def read(self, start: int, end: int) -> Data:
        """Bytes ``[start, end)`` of the pinned version (the first read: of the version
        that answers, which is pinned from then on)."""
        obj = self._obj
        if obj.etag:
            return read_range(obj, start, end)
        if end > obj.size or start < 0 or end < start:
            raise TruncatedRecordError(f"bytes {start}-{end} are not within the object's {obj.size}", obj.url, start)
        if start == end:
            return b""
        out = memoryview(bytearray(end - start))
        reader = _RangeReader(obj, start, end)  # not through the cache: its chunks are keyed by version
        try:
            reader.readinto(out)
        finally:
            reader.close()
        got = reader.obj
        with self._lock:
            pinned = self._obj
            if not pinned.etag:
                self._obj = got
            elif got.etag and got.etag != pinned.etag:  # another thread's first read got another version
                raise RemoteObjectChangedError(
                    f"the object changed while it was read (version {pinned.etag}, now {got.etag})", obj.url, start
                )
        return out


# ---------------------------------------------------------------------- cache


def _cache_file(obj: RemoteObject, chunk: int) -> str:
    name = hashlib.sha256(f"{obj.url}\0{obj.etag}\0{obj.size}\0{CACHE_CHUNK}".encode()).hexdigest()
    return os.path.join(str(settings().cache_dir), name[:2], f"{name}.{chunk}")


def _cache_get(obj: RemoteObject, chunk: int, want: int, lo: int, hi: int) -> Optional[bytes]:
    """Bytes ``[lo, hi)`` of a cached chunk of ``want`` bytes (only those: a record of a
    global shuffle reads its own bytes, not the whole chunk), or None."""
    path = _cache_file(obj, chunk)
    try:
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size != want:
                return None
            data = os.pread(f.fileno(), hi - lo, lo)
    except OSError:
        return None
    if len(data) != hi - lo:
        return None
    try:
        os.utime(path)  # recently used
    except OSError:
        pass
    with _stats_lock:
        STATS.cache_hits += 1
        STATS.cache_bytes += len(data)
    return data


def _cache_put(obj: RemoteObject, chunk: int, data: Data) -> None:
    path = _cache_file(obj, chunk)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        _evict()
    except OSError:
        pass  # a full or read-only cache never fails a read


def _evict() -> None:
    """Remove least recently used chunks until the cache holds at most ``cache_bytes``."""
    root = str(settings().cache_dir)
    entries = []
    total = 0
    for dirpath, _, names in os.walk(root):
        for name in names:
            if ".tmp-" in name:
                continue
            path = os.path.join(dirpath, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            entries.append((st.st_mtime, st.st_size, path))
            total += st.st_size
    if total <= settings().cache_bytes:
        return
    for _, size, path in sorted(entries):
        try:
            os.remove(path)
        except OSError:
            continue
        total -= size
        if total <= settings().cache_bytes:
            return


_inflight: Dict[Tuple[str, str, int], threading.Event] = {}
_inflight_lock = threading.Lock()


def _cached_chunk(obj: RemoteObject, chunk: int, c0: int, c1: int, lo: int, hi: int) -> Data:
    """Bytes ``[lo, hi)`` of chunk ``chunk`` (bytes ``[c0, c1)`` of the object) from the
    cache, else the chunk fetched once (a concurrent reader of the same chunk waits for
    that fetch instead of making its own) and stored."""
    key = (obj.url, obj.etag, chunk)
    while True:
        cached = _cache_get(obj, chunk, c1 - c0, lo, hi)
        if cached is not None:
            return cached
        with _inflight_lock:
            waiting = _inflight.get(key)
            if waiting is None:
                mine = _inflight[key] = threading.Event()
        if waiting is not None:
            waiting.wait(60)
            continue  # in the cache now (or the fetch failed: try it here)
        try:
            fetched = _fetch(obj, c0, c1)
            _cache_put(obj, chunk, fetched)
            return fetched if (lo, hi) == (0, c1 - c0) else fetched[lo:hi]
        finally:
            with _inflight_lock:
                del _inflight[key]
            mine.set()


def read_range(obj: RemoteObject, start: int, end: int) -> Data:
    """Bytes ``[start, end)`` of ``obj`` in a buffer of their own (through the cache for
    the whole chunks it covers)."""
    if end > obj.size or start < 0 or end < start:
        raise TruncatedRecordError(f"bytes {start}-{end} are not within the object's {obj.size}", obj.url, start)
    if start == end:
        return b""
    if not (settings().cache_dir and settings().cache_bytes):
        return _fetch(obj, start, end)
    parts: List[Data] = []
    pos = start
    while pos < end:
        chunk = pos // CACHE_CHUNK
        c0, c1 = chunk * CACHE_CHUNK, min((chunk + 1) * CACHE_CHUNK, obj.size)
        stop = min(end, c1)
        parts.append(_cached_chunk(obj, chunk, c0, c1, pos - c0, stop - c0))
        pos = stop
    return b"".join(parts) if len(parts) > 1 else parts[0]


# ---------------------------------------------------------------------- read-ahead


class _Failed:
    """An error of a producer thread, raised in the consumer where its data would be."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()


def _requests(ranges: Iterable[Tuple[int, int]], request_size: int) -> Iterator[List[Tuple[int, int]]]:
    """Runs of consecutive adjacent ranges of up to ``request_size`` bytes (at least one
    range each): what one GET asks for."""
    run: List[Tuple[int, int]] = []
    for a, b in ranges:
        if run and (a != run[-1][1] or b - run[0][0] > request_size):
            yield run
            run = []
        run.append((a, b))
    if run:
        yield run


class _ReadAhead:
    """The bytes of ``ranges`` of one object, in order, fetched ahead of the consumer.

    Up to ``parallel`` threads of its own (not a shared pool: a producer waits while its
    request is ahead of the consumer, and threads shared between two readers read in
    turn could all be waiting for a consumer that waits for the other reader) take
    the GETs in order (``_requests``); each reads its response range by range into
    pooled buffers and queues them, at most ``AHEAD_BLOCKS`` ahead. The consumer takes
    the queues in request order, so what it gets is in ``ranges`` order. With the cache
    on, each range is read by ``read_range`` (whole chunks) instead."""

    def __init__(self, obj: RemoteObject, ranges: Iterable[Tuple[int, int]], parallel: int) -> None:
        self.obj = obj
        self._cached = bool(settings().cache_dir and settings().cache_bytes)
        self._requests = _requests(ranges, 0 if self._cached else settings().request_size)
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._queues: Deque[queue.Queue[Any]] = deque()
        self._current: Optional[queue.Queue[Any]] = None
        self._exhausted = False
        self._closed = False
        self._parallel = max(1, parallel)
        self._threads: List[threading.Thread] = []
        self._start_thread()

    def _start_thread(self) -> None:
        """One more producer (up to ``parallel``): started when a request is taken and
        more may follow, so a piece that is one request costs one thread."""
        t = threading.Thread(target=self._work, name="tfrecord-io-read-ahead", daemon=True)
        self._threads.append(t)
        t.start()

    def _work(self) -> None:
        while True:
            with self._lock:
                if self._closed or self._exhausted:
                    return
                out: queue.Queue[Any] = queue.Queue(maxsize=AHEAD_BLOCKS)
                try:
                    run = next(self._requests, None)
                except BaseException as err:  # noqa: BLE001 - the ranges generator failed: the consumer raises it
                    run = None
                    out.put(_Failed(err))
                    self._queues.append(out)
                if run is None:
                    self._exhausted = True
                    self._ready.notify_all()
                    return
                self._queues.append(out)
                self._ready.notify_all()
                if len(self._threads) < self._parallel:
                    self._start_thread()
            self._produce(run, out)

    def _produce(self, run: List[Tuple[int, int]], out: queue.Queue[Any]) -> None:
        reader = None if self._cached else _RangeReader(self.obj, run[0][0], run[-1][1])
        try:
            for a, b in run:
                if self._closed:
                    return
                if reader is None:
                    data: Any = read_range(self.obj, a, b)
                else:
                    data = _BUFFERS.take(b - a)
                    reader.readinto(data)
                out.put(data)
            out.put(_END)
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, which raises it
            out.put(_Failed(err))
        finally:
            if reader is not None:
                reader.close()

    def __iter__(self) -> Iterator[Data]:
        while True:
            with self._lock:
                while not self._queues and not self._exhausted:
                    self._ready.wait()
                if not self._queues:
                    return
                current = self._current = self._queues.popleft()
            while True:
                item = current.get()
                if item is _END:
                    break
                if isinstance(item, _Failed):
                    raise item.error
                yield item

    def close(self) -> None:
        """Stop: producers finish the range they are reading and leave (their
        connections are closed, as their responses are not read to the end)."""
        with self._lock:
            self._closed = True
            queues = list(self._queues) + ([self._current] if self._current is not None else [])
        for q in queues:  # a producer waiting to queue a range can do so, then sees _closed
            while True:
                try:
                    q.get_nowait()
                except queue.Empty:
                    break


def fetch_ahead(obj: RemoteObject, ranges: Iterable[Tuple[int, int]], parallel: Optional[int] = None) -> Iterator[Data]:
    """The bytes of each range in order, with up to ``parallel`` GETs in flight ahead of
    the consumer (each asking for a run of adjacent ranges of up to ``request_size``
    bytes), so fetching overlaps with the consumer's work. A yielded view's buffer is
    reused once no view of it is alive."""
    ahead = _ReadAhead(obj, ranges, parallel or settings().parallel)
    try:
        yield from ahead
    finally:
        ahead.close()


_pool: Optional[ThreadPoolExecutor] = None
_pool_key: Tuple[int, int] = (0, 0)


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_key
    key = (os.getpid(), settings().random_parallel)
    if _pool is None or _pool_key != key:  # threads do not survive a fork; a new size
        _pool = ThreadPoolExecutor(max_workers=settings().random_parallel, thread_name_prefix="tfrecord-io-range-read")
        _pool_key = key
    return _pool


def fetch_many(requests: Sequence[Tuple[RemoteObject, int, int]]) -> List[Data]:
    """The bytes of each ``(object, start, end)``, ``random_parallel`` GETs at a time
    (these tasks never wait for a consumer, so one thread pool serves every reader).

    The ranges are packed, in the order given, into pooled ``block_size`` buffers (a
    range larger than a block gets one of its own): a window of a global shuffle is
    thousands of record-sized reads, and fresh memory for each would cost more in page
    faults than the reads themselves. A buffer is reused once none of its ranges' views
    is alive, so a kept record holds at most one block. With the cache on, each range
    is a ``read_range``."""
    for obj, start, end in requests:
        if end > obj.size or start < 0 or end < start:
            raise TruncatedRecordError(f"bytes {start}-{end} are not within the object's {obj.size}", obj.url, start)
    if settings().cache_dir and settings().cache_bytes:
        jobs: List[Any] = [(read_range, r) for r in requests]
    else:
        block = settings().block_size
        jobs, buf, used = [], memoryview(b""), 0
        for obj, start, end in requests:
            size = end - start
            if size > block or size < 1:
                view = memoryview(bytearray(size))
            else:
                if used + size > len(buf):
                    buf, used = _BUFFERS.take(block), 0
                view, used = buf[used : used + size], used + size
            jobs.append((_fetch_into, (obj, start, end, view)))
        del buf
    if len(jobs) == 1:
        fn, args = jobs[0]
        return [fn(*args)]
    return list(_executor().map(lambda job: job[0](*job[1]), jobs))


def _fetch_into(obj: RemoteObject, start: int, end: int, view: memoryview) -> Data:
    return _fetch(obj, start, end, view) if end > start else b""


class RangeStream(io.RawIOBase):
    """A read-only stream over bytes ``[start, object end)`` of an object, in
    ``block_size`` ranges: up to ``stop`` (default: the end) read ahead by
    ``fetch_ahead``, after it one block at a time as asked for (a piece that ends
    inside the object reads past its end only as far as its last record goes). What
    ``FrameStream`` scans for unindexed and compressed objects."""

    def __init__(
        self, obj: RemoteObject, start: int = 0, block_size: Optional[int] = None, stop: Optional[int] = None
    ) -> None:
        super().__init__()
        self._obj = obj
        self._size = block_size or settings().block_size
        self._stop = obj.size if stop is None else max(start, min(int(stop), obj.size))
        size = self._size
        self._blocks = fetch_ahead(obj, ((a, min(a + size, self._stop)) for a in range(start, self._stop, size)))
        self._next = self._stop  # where reading goes on after the read-ahead part
        self._buf = memoryview(b"")
        self._eof = start >= obj.size

    def readable(self) -> bool:
        return True

    def _refill(self) -> bool:
        nxt = next(self._blocks, None)
        if nxt is None and self._next < self._obj.size:
            a, self._next = self._next, min(self._next + self._size, self._obj.size)
            nxt = read_range(self._obj, a, self._next)
        if nxt is None:
            self._eof = True
            return False
        self._buf = memoryview(nxt)
        return True

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            rest = [bytes(self._buf)]
            self._buf = memoryview(b"")
            while self._refill():
                rest.append(bytes(self._buf))
                self._buf = memoryview(b"")
            return b"".join(rest)
        while not self._buf and not self._eof:
            self._refill()
        out = bytes(self._buf[:size])
        self._buf = self._buf[size:]
        return out

    def readinto(self, buffer: Any) -> int:
        data = self.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        close = getattr(self._blocks, "close", None)
        if close is not None:
            close()
        super().close()


def read_object(url: str) -> bytes:
    """The whole content of a small object (an index file)."""
    obj = stat(url)
    return bytes(read_range(obj, 0, obj.size)) if obj.size else b""


def _exists(url: str) -> bool:
    try:
        stat(url)
        return True
    except FileNotFoundError:
        return False


__all__ = [
    "CACHE_CHUNK",
    "PinOnFirstRead",
    "RangeStream",
    "configure",
    "fetch_ahead",
    "fetch_many",
    "read_object",
    "read_range",
    "stat",
]
