"""One S3 client per process and set of S3 options for Beam's S3 filesystem, not one per call.

Why: Beam's S3 filesystem (2.62 and 2.77, the ends of the supported range) builds a new
``S3IO(options=...)`` for every call -- each open, create, size, exists, match, delete
and rename -- and each ``S3IO`` a new ``boto3_client.Client``, whose constructor makes a
new ``boto3.session.Session()`` and S3 client. A new session loads botocore's JSON
models again (endpoints and the S3 service model) and a new client opens new
connections: 0.19 CPU-s per client measured here (2 loaded cores; 0.06 even with the
models already loaded), against ~0.01 for a client of an existing session. Reading a
media file from S3 is two or three such calls, so a build over S3 spent most of its
time making clients: a 24-row build from and to S3 took 52 s, 15 s with one client per
process (same machine, same minute). At a million media files that is days of CPU.

How: :func:`install` (called whenever this package uses Beam's filesystems:
``files.beam_filesystems``) wraps ``Client.__init__`` of Beam's boto3 wrapper once per
process. The first wrapper made for a set of S3 options runs Beam's own constructor and
keeps the botocore client it made; later ones get that client plus a fresh copy of the
rest of what Beam's constructor sets up (the state of one open download: ``None``, ``0``),
so each open file still has its own download stream. botocore clients are thread-safe;
a process never shares one with another (a forked worker makes its own: the process id
is part of the key). What boto3 takes from the environment when the options leave it
out (``AWS_*`` variables: credentials, endpoint, region, profile) is part of the key
too, so a client is never used under other variables than it was made with;
credentials are resolved by the client as before (a client keeps refreshing
refreshable credentials itself).

If Beam's constructor sets up anything but plain values besides the client (a later
Beam that keeps more per wrapper), nothing is shared: every wrapper is made by Beam, as
without this module.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, Optional, Tuple

#: the S3 options Beam's boto3 wrapper reads (``S3Options`` / its dict form)
_OPTION_NAMES = (
    "s3_access_key_id",
    "s3_secret_access_key",
    "s3_session_token",
    "s3_endpoint_url",
    "s3_disable_ssl",
    "s3_region_name",
    "s3_api_version",
    "s3_verify",
)
_PLAIN = (type(None), bool, int, float, str, bytes)

_lock = threading.Lock()
_installed = False
# key -> (botocore client, the rest of a freshly made wrapper's attributes)
_shared: Dict[Tuple[Any, ...], Tuple[Any, Dict[str, Any]]] = {}
_not_shareable = False  # Beam's wrapper keeps more than plain values: leave it alone
STATS = {"made": 0, "shared": 0}  # wrappers whose client Beam made / that got a shared one


def _key(options: Any) -> Optional[Tuple[Any, ...]]:
    """What a client depends on: this process and the S3 options; None if unknown."""
    try:
        from apache_beam.options.pipeline_options import PipelineOptions, S3Options

        if isinstance(options, PipelineOptions):
            # The parsed values every view of these options reads; ``view_as`` parses the
            # flags again with argparse (~0.8 ms, more than the GET of a small object).
            parsed = getattr(options, "_all_options", None)
            if isinstance(parsed, dict) and all(name in parsed for name in _OPTION_NAMES):
                values = tuple(parsed[name] for name in _OPTION_NAMES)
            else:
                view = options.view_as(S3Options)
                values = tuple(getattr(view, name, None) for name in _OPTION_NAMES)
        elif isinstance(options, dict):
            values = tuple(options.get(name) for name in _OPTION_NAMES)
        else:
            return None
    except Exception:  # noqa: BLE001 - an options object we do not understand: Beam makes the client
        return None
    # boto3 fills in what the options leave out from the AWS_* environment (credentials,
    # endpoint, region, profile, config files): a client made under other variables is
    # another client
    environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
    return (os.getpid(), *map(str, values), environment)


def _sharing_init(original: Callable[..., None]) -> Callable[..., None]:
    def __init__(self: Any, options: Any, *args: Any, **kwargs: Any) -> None:
        global _not_shareable
        key = None if (args or kwargs or _not_shareable) else _key(options)
        if key is not None:
            with _lock:
                found = _shared.get(key)
            if found is not None:
                client, state = found
                self.__dict__.update(state)
                self.client = client
                STATS["shared"] += 1
                return
        original(self, options, *args, **kwargs)
        STATS["made"] += 1
        if key is None:
            return
        state = {name: value for name, value in vars(self).items() if name != "client"}
        if "client" not in vars(self) or not all(isinstance(v, _PLAIN) for v in state.values()):
            _not_shareable = True
            return
        with _lock:
            _shared.setdefault(key, (self.client, state))

    __init__.__wrapped__ = original  # type: ignore[attr-defined]
    return __init__


def install() -> None:
    """Share S3 clients in this process (see the module doc); idempotent, and a no-op
    when Beam's S3 support (``apache-beam[aws]``) is not installed."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        try:
            from apache_beam.io.aws.clients.s3 import boto3_client
        except ImportError:  # no boto3: Beam has no S3 filesystem to speed up
            _installed = True
            return
        client_class = getattr(boto3_client, "Client", None)
        if client_class is not None and not hasattr(client_class.__init__, "__wrapped__"):
            client_class.__init__ = _sharing_init(client_class.__init__)
        _installed = True


__all__ = ["STATS", "install"]
