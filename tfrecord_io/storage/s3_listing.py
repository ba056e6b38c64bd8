"""S3 listings that cost what is asked, not what the folder holds.

Why: a build's planning learns each media file's size and time from a listing of its
folder, a batch of 1,000 manifest rows at a time (``files.stat_many``). Beam's match
lists a whole folder, so a manifest of ``N`` rows over one folder of ``N`` files listed
it ``N / 1000`` times: ``(N / 1000)**2`` pages of 1,000 keys, 10,000 requests for
100,000 rows (``benchmarks/bench_s3_listing.py``). Here a batch's keys are found by
listing only around them: S3's ``ListObjectsV2`` starts after any key
(``StartAfter``), so each window starts just before the first key not yet found and
takes one page; every key up to that page's last is then known (there, or missing).
A manifest in folder order needs about one page per batch; one in random order at
most one request per key; never more pages than listing the folder whole, plus one
per window. A manifest in random order over a big folder would still cost about a
request per row: there the planning stage lists the folder once and keeps it for its
later batches (:class:`FolderListings`). Sizes and times are those of the same listing Beam's match reads, so a
build's fingerprint does not change with the way they were found.

Also the folders under a prefix (``CommonPrefixes`` with a ``/`` delimiter), so the
files of ``root/<label>/`` folders can be listed by many workers at once.

Both take the boto3 client Beam's S3 filesystem uses for the current options
(``files._s3_client``: one per process, :mod:`tfrecord_io.storage.s3_clients`); where Beam
lacks those internals, callers use Beam's match as before. (This module imports none
of ours: ``files`` calls it.)
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Optional, Tuple

#: keys per ListObjectsV2 page (S3's maximum)
PAGE_KEYS = 1000


def _seconds(updated: Any) -> float:
    """``LastModified`` as Beam's S3 filesystem turns it into seconds (its match's
    ``last_updated_in_seconds``), so the same object gives the same number both ways."""
    from apache_beam.io.aws.s3io import S3IO

    return float(S3IO._updated_to_seconds(updated))


#: the most keys of one folder a :class:`FolderListings` keeps (about 150 bytes each)
CACHE_MAX_KEYS = 1_000_000


class FolderListings:
    """Whole-folder listings one planning stage keeps between its batches (one per
    DoFn instance: a build's own, gone with it, so nothing stale reaches a later
    build). Used when a batch's files are spread over a big folder (a manifest in
    random order): windows would then cost about one request per file, every batch;
    the folder listed once instead costs its pages once per worker. Folders of more
    than :data:`CACHE_MAX_KEYS` keys are not kept (windows, at most a request per
    file, serve them)."""

    def __init__(self, max_keys: int = CACHE_MAX_KEYS):
        self.max_keys = max_keys
        self.folders: Dict[Tuple[str, str], Optional[Dict[str, Any]]] = {}  # None: too big to keep

    def listing(self, client: Any, bucket: str, prefix: str) -> Optional[Dict[str, Any]]:
        """``{key: (size, mtime)}`` of the folder, listed on first use; None if too big."""
        name = (bucket, prefix)
        if name not in self.folders:
            keys: Optional[Dict[str, Any]] = {}
            for page in client.get_paginator("list_objects_v2").paginate(
                Bucket=bucket, Prefix=prefix, Delimiter="/", PaginationConfig={"PageSize": PAGE_KEYS}
            ):
                for c in page.get("Contents") or []:
                    keys[c["Key"]] = (int(c["Size"]), _seconds(c["LastModified"]))  # type: ignore[index]
                if len(keys) > self.max_keys:  # type: ignore[arg-type]
                    keys = None
                    break
            self.folders[name] = keys
        return self.folders[name]


def stat_under(
    client: Any,
    bucket: str,
    prefix: str,
    paths: Iterable[str],
    listings: Optional[FolderListings] = None,
) -> Dict[str, Optional[Tuple[int, float]]]:
    """``{path: (size, mtime)}`` (None: no such object) for ``s3://bucket/...`` paths
    directly under the folder ``prefix`` (a key ending in ``/``), found by listing
    windows around them (module doc) with the boto3 ``client``. With ``listings``, a
    batch whose windows run past a budget (``2 + files / 500`` requests: its files are
    spread over a big folder) takes the rest from the folder's whole listing, made
    once and kept there. Store errors are raised (Beam's match raised them too)."""
    by_key = {}
    for path in paths:
        by_key[path[len(f"s3://{bucket}/") :]] = path
    keys = sorted(by_key)
    out: Dict[str, Optional[Tuple[int, float]]] = {}
    kept = listings.folders.get((bucket, prefix)) if listings is not None else None
    if kept is not None:
        return {by_key[k]: kept.get(k) for k in keys}
    budget = 2 + len(keys) // 500
    i = 0
    start_after: Optional[str] = None
    while i < len(keys):
        if listings is not None and budget <= 0:
            whole = listings.listing(client, bucket, prefix)
            if whole is not None:
                out.update((by_key[k], whole.get(k)) for k in keys[i:])
                return out
            listings = None  # too big to keep: windows for the rest
        budget -= 1
        window = keys[i][:-1]  # just before the first key not yet found: it is on this page if it exists
        start_after = window if start_after is None or window > start_after else start_after
        page = client.list_objects_v2(Bucket=bucket, Prefix=prefix, StartAfter=start_after, MaxKeys=PAGE_KEYS)
        contents = page.get("Contents") or []
        found = {c["Key"]: c for c in contents}
        last = contents[-1]["Key"] if contents else None
        more = bool(page.get("IsTruncated")) and last is not None
        while i < len(keys) and (not more or keys[i] <= str(last)):
            c = found.get(keys[i])
            out[by_key[keys[i]]] = (int(c["Size"]), _seconds(c["LastModified"])) if c is not None else None
            i += 1
        start_after = last if more else None
    return out


def folders(client: Any, bucket: str, key: str) -> List[str]:
    """The names of the folders directly under ``s3://bucket/key`` (``key`` ends in
    ``/``; keys with a ``/`` after it, S3's ``CommonPrefixes``), sorted."""
    names: List[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key, Delimiter="/"):
        names += [p["Prefix"][len(key) :].rstrip("/") for p in page.get("CommonPrefixes") or []]
    return sorted(names)


__all__ = ["CACHE_MAX_KEYS", "PAGE_KEYS", "FolderListings", "folders", "stat_under"]
