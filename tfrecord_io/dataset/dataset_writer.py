"""The write side of a built dataset's layout: claiming a version, cleaning up after a
failed attempt, and the commit protocol that publishes it, on any Beam filesystem.

::

    <out>/LATEST                                 the name of the current version
    <out>/<version>/_BUILDING                    present while a run writes this version
    <out>/<version>/dataset_info.json            TFDS's DatasetInfo (+ features.json, *.labels.txt)
    <out>/<version>/tfrecord_io_info.json        written last: the version is whole
    <out>/<version>/<split>/<name>-<split>.tfrecord-00000-of-00004 (+ .index)
    <out>/<version>/rejected-00000-of-00001.jsonl

Commit protocol (the same on local disk and object stores, which have no atomic
rename and no directories). It runs inside the build's pipeline
(``tfrecord_io.pipelines.building.commit``), so it holds wherever the pipeline runs:

1. **Claim.** A stage that runs once the input fingerprint is known writes
   ``<version>/_BUILDING`` (run id, host, pid, heartbeat). A version already published
   from the same fingerprint is reused (verified, nothing rewritten); from another
   fingerprint it is refused. A marker of another live run is refused; a stale one
   (its process gone, or no heartbeat for two minutes) means a killed attempt, whose
   leftovers are removed. The run id is fixed when the pipeline is built, so a runner
   retrying the stage finds its own marker. The CLI claims the version before it
   submits the job as well (:class:`BuildClaim`, with the same run id): a second run
   with the same ``--version`` is refused before any work starts, and the launcher's
   heartbeat thread keeps the marker fresh for as long as the job lives. The workers
   writing shards refresh it too, so a pipeline run without the CLI keeps its claim.
2. **Shards.** Each shard is complete before it is visible under its final name: a
   temporary name then a rename on local disk; on an object store one upload, which
   becomes visible only when it completes.
3. **TFDS's files** (``tfrecord_io.dataset.tfds_info``: ``dataset_info.json``, ``features.json``,
   label names), then **``tfrecord_io_info.json``** (features, per-shard records, bytes
   and SHA-256, the input fingerprint), written by a finalize stage that runs after every
   shard is written, only when every shard is there and the counts add up (rows in =
   written + rejected). A retry of that stage finds the file with its own fingerprint and
   goes on.
4. **``_BUILDING``** is removed, then **``LATEST``** is replaced, last.

Readers (``tfrecord_io.dataset.datasets``) trust only ``LATEST`` and ``tfrecord_io_info.json``
(or, in versions built before it, our ``dataset_info.json``): a version prefix without
it is never read. A CLI run that fails removes everything it wrote under its version,
unless its finalize stage had already written ``tfrecord_io_info.json`` (a failure
reported after the publish: the version is whole, and kept); the finalize stage
publishes only while ``_BUILDING`` still holds its run. A run that is killed (or a
pipeline that fails outside the CLI) leaves an unpublished prefix whose ``_BUILDING``
marker goes stale, and the next run with the same version removes it and builds again.
In every failure before the publish ``LATEST`` stays on the previous version.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import uuid
from typing import Any, Dict, Iterable, List, Optional, Tuple

from tfrecord_io.dataset.datasets import (
    INFO_NAME,
    LATEST_NAME,
    DatasetLayoutError,
    load_info,
    read_latest,
    resolve_version_dir,
)  # also re-exported for the jobs
from tfrecord_io.dataset.path_specs import has_glob
from tfrecord_io.dataset.tfds_info import write_tfds_files
from tfrecord_io.errors import StorageAccessError
from tfrecord_io.storage import files
from tfrecord_io.usage_errors import UsageError

BUILDING_NAME = "_BUILDING"
HEARTBEAT_S = 30.0
STALE_AFTER_S = 120.0
CLAIM_SETTLE_S = 1.0


class DatasetDirError(UsageError, ValueError):
    """The output cannot take this build; the message says why (a usage error, exit 2)."""


class VersionTaken(DatasetDirError):
    """Another live run holds this version's ``_BUILDING`` marker."""


class _BeamLogsMuted:
    """Beam's S3 writer logs a full traceback at ERROR before raising; the caller turns
    the exception into one line, so the log is muted around such calls.

    Threads share the mute (the claim's heartbeat writes its marker while the main thread
    may be writing too): the first to enter saves the process's ``logging.disable`` level
    and the last to leave restores it. Saving and restoring per thread would interleave
    (A saves 0, B saves CRITICAL, A restores 0, B restores CRITICAL) and leave all logging
    off for the rest of the process, the storage-retry guard included."""

    _lock = threading.Lock()
    _depth = 0
    _previous = 0

    def __enter__(self):
        import logging

        with _BeamLogsMuted._lock:
            if _BeamLogsMuted._depth == 0:
                _BeamLogsMuted._previous = logging.root.manager.disable
                logging.disable(logging.CRITICAL)
            _BeamLogsMuted._depth += 1

    def __exit__(self, *exc):
        import logging

        with _BeamLogsMuted._lock:
            _BeamLogsMuted._depth -= 1
            if _BeamLogsMuted._depth == 0:
                logging.disable(_BeamLogsMuted._previous)


def new_version_name(requested: str = "auto") -> str:
    """``auto`` -> a UTC timestamp such as ``20261130T081500Z`` (sortable)."""
    if requested and requested != "auto":
        if "/" in requested or requested.startswith((".", "_")):
            raise DatasetDirError(f"output.version {requested!r}: must be a plain directory name")
        return requested
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def resolve_dataset_dir(path: str) -> str:
    """A dataset root (with LATEST) -> its current version directory; else ``path``
    unchanged (a version directory, or file patterns the caller treats as such)."""
    latest = read_latest(path)
    return files.join(path, latest) if latest else path


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def check_reachable(out_dir: str) -> None:
    """Fail with one line if ``out_dir`` is on no filesystem we can open, or cannot be
    listed (missing bucket, wrong credentials, no network) - before anything is written."""
    try:
        files.check_filesystem(out_dir)
    except ValueError as err:
        raise DatasetDirError(f"output {err}") from None
    if not files.is_remote(out_dir):
        if os.path.exists(out_dir) and not os.path.isdir(out_dir):
            raise DatasetDirError(f"output {out_dir} exists and is not a directory")
        return
    try:
        with _BeamLogsMuted():
            files.glob(out_dir.rstrip("/") + "/*")
    except StorageAccessError:  # credentials or permissions: fails the job, naming what to set
        raise
    except Exception as err:  # noqa: BLE001 - any listing failure means "cannot use this output"
        raise DatasetDirError(f"output {out_dir}: cannot list it ({_first_line(err)})") from None


def _version_files(version_dir: str) -> List[str]:
    try:
        return files.list_prefix(version_dir)
    except Exception:  # noqa: BLE001 - nothing listable means nothing there
        return []


def check_output_dir(out_dir: str, name: str, feature_spec: Dict[str, Any]) -> None:
    """Refuse to build into an output that holds another dataset (another name or other
    features in the current version), or loose TFRecord files that are not a dataset."""
    latest = read_latest(out_dir)
    if latest:
        info = load_info(files.join(out_dir, latest))
        if info is not None:
            if info.get("name") != name:
                raise DatasetDirError(
                    f"output {out_dir} holds dataset {info.get('name')!r}, not {name!r}; "
                    "choose another output directory"
                )
            if info.get("features") != feature_spec:
                raise DatasetDirError(
                    f"output {out_dir} holds a {name!r} dataset with different features; "
                    "choose another output directory (or a new dataset name)"
                )
        return
    try:
        top = files.glob(out_dir.rstrip("/") + "/*")
    except Exception:  # noqa: BLE001 - an unlistable output holds no TFRecord files we could clash with
        top = []
    if any(p.endswith((".tfrecord", ".index")) or ".tfrecord-" in os.path.basename(p) for p in top):
        raise DatasetDirError(f"output {out_dir} already holds TFRecord files that are not a versioned dataset")


class BuildClaim:
    """This run's ``_BUILDING`` marker on a version, with its heartbeat thread."""

    def __init__(self, version_dir: str, run_id: Optional[str] = None):
        self.version_dir = version_dir
        self.path = files.join(version_dir, BUILDING_NAME)
        self.run_id = run_id or new_run_id()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _body(self) -> bytes:
        return marker_body(self.run_id, os.getpid())

    def acquire(self) -> None:
        """Create the marker, or raise :class:`VersionTaken` if another run holds it.

        A claim cut short (Ctrl-C, SIGTERM unwinding the launcher, a failed write)
        takes back what it wrote: no half-made claim outlives it, since nobody would
        know to remove it (the caller never got the claim)."""
        made_dir = may_have_made_marker = False  # local only
        try:
            if files.is_remote(self.path):
                with _BeamLogsMuted():
                    created = files.put_if_absent(self.path, self._body())
                _check_remote_claim(self.version_dir, self.run_id, created)
            else:
                made_dir = not os.path.isdir(self.version_dir)
                os.makedirs(self.version_dir, exist_ok=True)
                may_have_made_marker = True  # before the open: a signal may land just after it
                try:
                    fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                except FileExistsError:
                    made_dir = may_have_made_marker = False  # another run's
                    raise VersionTaken(
                        f"version {self.version_dir} is being built by another run "
                        f"({_describe(read_marker(self.version_dir))})"
                    ) from None
                with os.fdopen(fd, "wb") as f:
                    f.write(self._body())
            self._start_heartbeat()
        except VersionTaken:
            raise  # the marker there is another run's: not ours to touch
        except BaseException as err:
            self._take_back(made_dir, may_have_made_marker)
            if isinstance(err, DatasetDirError) or not isinstance(err, Exception):
                raise  # ours already, or an interruption: unwinds as it is
            raise DatasetDirError(f"output {self.version_dir}: cannot write ({_first_line(err)})") from None

    def _take_back(self, made_dir: bool, may_have_made_marker: bool) -> None:
        """Undo a claim that did not complete: stop the heartbeat, remove the marker if it
        names this run, or is unreadable where this claim may have just created it (a
        local write cut short; an object store's PUT is whole or absent), and the version
        directory if this claim made it and nothing else is in it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            marker = read_marker(self.version_dir)  # None: absent; {}: unreadable
            if marker is not None and (marker.get("run_id") == self.run_id or (may_have_made_marker and not marker)):
                files.delete([self.path])
            if made_dir:
                os.rmdir(self.version_dir)
        except Exception:  # noqa: BLE001 - best effort: what is left has no tfrecord_io_info.json, so no reader takes it
            pass

    def _start_heartbeat(self) -> None:
        self._thread = threading.Thread(target=self._beat, daemon=True, name="build-heartbeat")
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                # not after the pipeline's finalize stage removed it (the version is published)
                if files.exists(self.path):
                    files.write_bytes(self.path, self._body())
            except Exception:  # noqa: BLE001 - a missed beat only makes the claim look older
                pass

    def release(self) -> None:
        """Stop the heartbeat and remove the marker."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        files.delete([self.path])


def new_run_id() -> str:
    return uuid.uuid4().hex


def marker_body(run_id: str, pid: Optional[int], host: Optional[str] = None) -> bytes:
    """A ``_BUILDING`` marker: the run, where it runs, and when it last showed life.
    ``pid`` (on ``host``) is the launcher's; a marker first written by a worker has none
    (workers come and go while the job lives, so only the heartbeat tells). A worker
    refreshing the launcher's marker keeps its host and pid, which stay true."""
    return json.dumps(
        {"run_id": run_id, "host": host or socket.gethostname(), "pid": pid, "heartbeat": time.time()}
    ).encode("utf-8")


def read_marker(version_dir: str) -> Optional[Dict[str, Any]]:
    path = files.join(version_dir, BUILDING_NAME)
    try:
        if not files.exists(path):
            return None
        return json.loads(files.read_bytes(path).decode("utf-8"))
    except (OSError, ValueError):
        return {}


def _describe(marker: Optional[Dict[str, Any]]) -> str:
    if not marker:
        return "no readable marker"
    age = time.time() - float(marker.get("heartbeat", 0))
    run, host, pid = marker.get("run_id", "?")[:8], marker.get("host", "?"), marker.get("pid", "?")
    return f"run {run} on {host} pid {pid}, heartbeat {age:.0f}s ago"


def marker_is_live(marker: Optional[Dict[str, Any]]) -> bool:
    """True while the run that wrote the marker may still be writing.

    Dead when its process is gone (same host) or it has not beaten for STALE_AFTER_S.
    """
    if not marker:
        return False
    if time.time() - float(marker.get("heartbeat", 0)) > STALE_AFTER_S:
        return False
    pid = marker.get("pid")
    if marker.get("host") == socket.gethostname() and isinstance(pid, int) and pid > 0:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except (PermissionError, ValueError, OverflowError):
            return True
    return True


def remove_version(version_dir: str) -> None:
    """Delete everything under an unpublished version (never call on a published one)."""
    files.delete_prefix(version_dir)


def prepare_version(out_dir: str, version: str, auto: bool, log=print) -> Dict[str, Any]:
    """Decide, in the launcher, which version this run claims.

    Returns ``{"state": "new", "version": v}`` (claim and build it; an unfinished earlier
    attempt has been removed) or ``{"state": "published", "version": v, "info": info}``
    (it holds a finished build: the pipeline compares the input fingerprint, which only
    it computes, and reuses it or refuses). Raises :class:`VersionTaken` when another
    run is building it right now. With ``auto`` a taken name gets a suffix.
    """
    candidate = version
    for attempt in range(1, 100):
        version_dir = files.join(out_dir, candidate)
        info = load_info(version_dir)
        if info is not None:
            if auto:
                candidate = f"{version}-{attempt}"
                continue
            return {"state": "published", "version": candidate, "info": info}
        existing = _version_files(version_dir)
        if existing:
            marker = read_marker(version_dir)
            if marker_is_live(marker) or auto:
                if auto:
                    candidate = f"{version}-{attempt}"
                    continue
                raise VersionTaken(f"version {version_dir} is being built by another run ({_describe(marker)})")
            log(
                f"removing the unfinished earlier attempt at {version_dir} "
                f"({len(existing)} objects, {_describe(marker)})"
            )
            remove_version(version_dir)
        return {"state": "new", "version": candidate}
    raise DatasetDirError(f"no free version name near {version!r} under {out_dir}")


FINGERPRINT_CONFLICT = "already holds a build of a different config or inputs"


def claim_for_run(version_dir: str, run_id: str, fingerprint: str) -> Dict[str, Any]:
    """The pipeline's claim of ``version_dir`` for run ``run_id`` (see the module's
    commit protocol, step 1), idempotent for that run:

    ``{"state": "published", "info": info}`` when it holds a finished build of the same
    fingerprint (reuse it); ``{"state": "new"}`` once the marker holds ``run_id`` (the
    launcher's, a retried stage's, or written here after removing a dead attempt).
    Raises :class:`DatasetDirError` for a finished build of another fingerprint and
    :class:`VersionTaken` for another live run's marker."""
    info = load_info(version_dir)
    if info is not None:
        if info.get("fingerprint") == fingerprint:
            return {"state": "published", "info": info}
        raise DatasetDirError(
            f"version {version_dir} {FINGERPRINT_CONFLICT} "
            f"(fingerprint {str(info.get('fingerprint'))[:12]}, this run {fingerprint[:12]}); "
            "choose another --version"
        )
    marker = read_marker(version_dir)
    if marker and marker.get("run_id") == run_id:
        files.write_bytes(
            files.join(version_dir, BUILDING_NAME), marker_body(run_id, marker.get("pid"), marker.get("host"))
        )
        return {"state": "new"}
    existing = _version_files(version_dir)
    if existing:
        if marker_is_live(marker):
            raise VersionTaken(f"version {version_dir} is being built by another run ({_describe(marker)})")
        remove_version(version_dir)
    path = files.join(version_dir, BUILDING_NAME)
    if files.is_remote(path):
        _check_remote_claim(version_dir, run_id, files.put_if_absent(path, marker_body(run_id, None)))
    else:
        files.write_bytes(path, marker_body(run_id, None))
    return {"state": "new"}


def _check_remote_claim(version_dir: str, run_id: str, created: Optional[bool]) -> None:
    """After ``files.put_if_absent`` of run ``run_id``'s marker on an object store: raise
    :class:`VersionTaken` unless the marker is this run's. Created where the store
    vouches (a conditional PUT): it is. Refused: another run's, unless it names this
    run (the PUT landed but its response was lost, and the client's retry was refused).
    Written without that promise (the last writer wins): look again once concurrent
    claims have landed."""
    if created is True:
        return
    if created is None:
        time.sleep(CLAIM_SETTLE_S)
    holder = read_marker(version_dir)
    if not holder or holder.get("run_id") != run_id:
        raise VersionTaken(f"version {version_dir} is being built by another run ({_describe(holder)})")


def refresh_marker(version_dir: str, run_id: str) -> None:
    """A heartbeat from a worker of run ``run_id``, if the marker is still this run's."""
    marker = read_marker(version_dir)
    if marker and marker.get("run_id") == run_id:
        files.write_bytes(
            files.join(version_dir, BUILDING_NAME), marker_body(run_id, marker.get("pid"), marker.get("host"))
        )


def sha256_file(path: str, chunk: int = 1 << 22) -> str:
    """SHA-256 of a stored file (local or any Beam filesystem)."""
    digest = hashlib.sha256()
    with files.open_raw(path, "rb") as f:
        while True:
            block = f.read(chunk)
            if not block:
                break
            digest.update(block)
    return digest.hexdigest()


def verify_version(version_dir: str, info: Dict[str, Any]) -> List[str]:
    """Problems with a published version (missing shard, size or SHA-256 mismatch)."""
    problems = []
    for _split, entry in sorted(info.get("splits", {}).items()):
        for shard in entry.get("shards", []):
            path = files.join(version_dir, shard["path"])
            try:
                size = files.file_size(path)
            except (FileNotFoundError, OSError):
                problems.append(f"{path}: missing")
                continue
            if size != shard["bytes"]:
                problems.append(f"{path}: {size} bytes, tfrecord_io_info.json says {shard['bytes']}")
            elif sha256_file(path) != shard["sha256"]:
                problems.append(f"{path}: SHA-256 differs from tfrecord_io_info.json")
        key_index = entry.get("key_index")
        if key_index:
            path = files.join(version_dir, key_index["path"])
            try:
                size = files.file_size(path)
            except (FileNotFoundError, OSError):
                problems.append(f"{path}: missing")
                continue
            if size != key_index["bytes"] or sha256_file(path) != key_index["sha256"]:
                problems.append(f"{path}: size or SHA-256 differs from tfrecord_io_info.json")
    return problems


def write_info(version_dir: str, info: Dict[str, Any]) -> str:
    """Write the version's metadata whole; call only when every shard is in place.
    TFDS's files go first (``info["tfds"]`` says which, or why none), ours last."""
    write_tfds_files(version_dir, info)
    path = files.join(version_dir, INFO_NAME)
    files.write_bytes(path, (json.dumps(info, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return path


def publish(out_dir: str, version: str) -> None:
    """Point ``LATEST`` at ``version``, after its info file landed (the last step)."""
    if load_info(files.join(out_dir, version)) is None:
        raise DatasetDirError(f"refusing to publish {version}: it has no {INFO_NAME}")
    files.write_bytes(files.join(out_dir, LATEST_NAME), (version + "\n").encode("utf-8"))


def use_filesystems(options, paths: Iterable[str] = ()) -> None:
    """Give Beam's FileSystems this job's options in the launching process (an S3
    endpoint and credentials from ``--s3_*`` flags...), and refuse, as a usage error,
    any path no filesystem here can open - before anything is read or written."""
    FileSystems = files.beam_filesystems()

    FileSystems.set_options(options)
    for path in paths:
        try:
            files.check_filesystem(path)
        except ValueError as err:
            raise DatasetDirError(str(err)) from None


def find_dataset(paths: List[str]) -> Tuple[Optional[str], Optional[Dict[str, Any]]]:
    """``(version_dir, info)`` when ``paths`` is one dataset root (following ``LATEST``)
    or one version directory, on any filesystem; else ``(None, None)``."""
    if len(paths) != 1 or has_glob(paths[0]):
        return None, None
    try:
        version_dir = resolve_version_dir(paths[0])
    except DatasetLayoutError:
        return None, None
    except StorageAccessError:  # credentials or permissions: fails the job, naming what to set
        raise
    except Exception as err:  # noqa: BLE001 - unreachable bucket, no permission ...
        raise DatasetDirError(f"{paths[0]}: cannot read it ({_first_line(err)})") from None
    return version_dir, load_info(version_dir)


def dataset_shards(version_dir: str, info: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The shards ``tfrecord_io_info.json`` lists, each with its split and full path (``abspath``)."""
    out = []
    for split, entry in sorted(info.get("splits", {}).items()):
        for shard in entry.get("shards", []):
            out.append({**shard, "split": split, "abspath": files.join(version_dir, shard["path"])})
    return out
