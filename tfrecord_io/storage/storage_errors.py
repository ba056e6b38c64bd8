"""Which storage failures are a refusal (credentials, permissions, no such bucket), and
what the person should set: the one place that turns a client's error into
:class:`~tfrecord_io.errors.StorageAccessError`.

Why one module: the same refusal reaches the package through several clients -- botocore
(our own S3 calls in ``storage/files.py``, the torch readers' object layer), Beam's S3 filesystem
(which wraps botocore's error in its ``S3ClientError`` with only a message and an HTTP
status), Beam's ``BeamIOError`` (one error per path), Azure's SDK (``azure.core``
exceptions), and plain HTTP statuses from a hand-made request. Left alone, a missing
credential looks like an outage to Beam (its retry filter retries an ``S3ClientError``
without a status, so the job waits for the storage timeout), and a refused one is a
traceback or "exists() operation failed". Retrying cannot help with any of these, so they
are raised at once, naming the store, the object and what to set.

Nothing here imports Beam, boto3 or Azure: exceptions are recognised by their class
names and attributes, so every layer (the format core's readers too) may call it.
"""

from __future__ import annotations

import re
from typing import Any, Iterator, List, Optional

from ..errors import StorageAccessError

__all__ = [
    "StorageAccessError",
    "access_error",
    "access_error_from_status",
    "no_such_bucket",
    "hint_for",
    "store_of",
    "status_of",
    "raise_access_error",
    "bucket_of",
    "path_in",
]

# botocore's exceptions for credentials that are absent or incomplete (class names: no import)
_NO_CREDENTIALS = {
    "NoCredentialsError",
    "PartialCredentialsError",
    "NoAuthTokenError",
    "CredentialRetrievalError",
    "UnauthorizedSSOTokenError",
    "SSOTokenLoadError",
    "TokenRetrievalError",
    "CredentialUnavailableError",  # azure.identity: no credential in its chain
}
# S3 error codes: the credentials were refused
_REFUSED_CODES = {
    "SignatureDoesNotMatch",
    "InvalidAccessKeyId",
    "InvalidToken",
    "ExpiredToken",
    "TokenRefreshRequired",
    "InvalidSecurity",
    "AuthorizationHeaderMalformed",
    "AuthenticationFailed",  # Azure
    "AuthorizationFailure",  # Azure
    "InvalidAuthenticationInfo",  # Azure
    "NoAuthenticationInformation",  # Azure
}
_DENIED_CODES = {
    "AccessDenied",
    "AllAccessDisabled",
    "AccountProblem",
    "AuthorizationPermissionMismatch",  # Azure
    "AuthorizationResourceTypeMismatch",  # Azure
    "InsufficientAccountPermissions",  # Azure
    "AccountIsDisabled",  # Azure
}
_NO_BUCKET_CODES = {"NoSuchBucket", "ContainerNotFound", "ContainerBeingDeleted"}
# "An error occurred (SignatureDoesNotMatch) when calling the ListObjectsV2 operation: ..."
_BOTO_MESSAGE = re.compile(r"An error occurred \((?P<code>[\w.]+)\) when calling the (?P<op>\w+) operation")
_AZURE_CODE = re.compile(r"ErrorCode:\s*(?P<code>\w+)")
# google-cloud-storage's NotFound names the request: a 404 for a bucket's own resource
# ("GET .../storage/v1/b/BUCKET?...") or its object listing ("GET .../b/BUCKET/o?...": an
# existing bucket lists nothing rather than 404) means the bucket does not exist; a 404
# for an object ("/b/BUCKET/o/NAME") is a missing object, not a refusal.
_GCS_BUCKET_NOT_FOUND = re.compile(r"/storage/v1/b/[^/?\s]+(/o)?(\?|:|\s|$)")
_NO_CREDENTIALS_TEXT = (
    "Unable to locate credentials",  # botocore
    "Partial credentials found",  # botocore
    # Beam's Azure filesystem with neither a connection string nor --blob_service_endpoint
    # hands the SDK no account URL
    "Account URL must be a string",
)

_SCHEME_NAMES = {"s3": "S3", "gs": "Google Cloud Storage", "az": "Azure Blob Storage", "azfs": "Azure Blob Storage"}


def store_of(path: str) -> str:
    """The store a path is on, in words with its bucket: ``S3 bucket 'data'``."""
    scheme, sep, rest = str(path).partition("://")
    if not sep:
        return "the store"
    bucket = bucket_of(path)
    kind = "container" if scheme in ("az", "azfs") else "bucket"
    name = _SCHEME_NAMES.get(scheme, f"{scheme}://")
    return f"{name} {kind} '{bucket}'" if bucket else name


def bucket_of(path: str) -> str:
    """The bucket (S3, GCS) or container (Azure) of a URL; '' if none.

    ``azfs://account/container/blob`` (Beam's Azure scheme) has the storage account
    first; ``az://container/blob`` does not."""
    scheme, sep, rest = str(path).partition("://")
    if not sep:
        return ""
    parts = rest.split("/")
    if scheme == "azfs":
        return parts[1] if len(parts) > 1 else ""
    return parts[0]


def hint_for(path: str, kind: str) -> str:
    """What to set, for a refusal of ``kind`` (``missing``, ``refused``, ``denied``,
    ``forbidden``: a 403 without a reason, as a HEAD gets; ``no_bucket``) on ``path``'s store."""
    scheme = str(path).partition("://")[0]
    bucket = bucket_of(path)
    if scheme == "s3":
        creds = (
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or the job's "
            "--s3_access_key_id / --s3_secret_access_key)"
        )
        endpoint = "AWS_ENDPOINT_URL or --s3_endpoint_url"
    elif scheme == "gs":
        creds = "GOOGLE_APPLICATION_CREDENTIALS (a service-account key file) or `gcloud auth application-default login`"
        endpoint = "STORAGE_EMULATOR_HOST for an emulator"
    elif scheme in ("az", "azfs"):
        creds = (
            "--azure_connection_string (or AZURE_STORAGE_CONNECTION_STRING), or --blob_service_endpoint "
            "with AZURE_CLIENT_ID / AZURE_TENANT_ID / AZURE_CLIENT_SECRET"
        )
        endpoint = "the connection string's BlobEndpoint"
    else:
        creds = "the store's credentials"
        endpoint = "the store's endpoint"
    if kind == "missing":
        return f"set {creds}"
    if kind == "refused":
        return f"check {creds}"
    if kind == "no_bucket":
        what = "container" if scheme in ("az", "azfs") else "bucket"
        return f"check the {what} name '{bucket}' (and {endpoint})"
    if kind == "forbidden":
        return f"check {creds}, and that they may do this on '{bucket}'"
    return f"check that the credentials in use ({creds}) may do this on '{bucket}', and the bucket's permissions"


_REASONS = {
    "missing": "no credentials for the store",
    "refused": "the store refused the credentials",
    "denied": "access denied",
    "forbidden": "the store refused access (HTTP 403: the credentials are wrong, or may not do this)",
    "no_bucket": "no such bucket",
}


def _make(path: str, kind: str, detail: str, offset: Optional[int] = None) -> StorageAccessError:
    what = "container" if kind == "no_bucket" and str(path).startswith(("az://", "azfs://")) else None
    reason = _REASONS[kind] if what is None else "no such container"
    detail = " ".join(detail.split())
    if len(detail) > 300:
        detail = detail[:297] + "..."
    text = f"{reason} ({store_of(path)}{': ' + detail if detail else ''})"
    return StorageAccessError(text, path, offset, hint=hint_for(path, kind))


def _chain(err: BaseException) -> Iterator[BaseException]:
    """``err``, what it was raised from or while handling, and a ``BeamIOError``'s
    per-path errors."""
    seen: List[BaseException] = []
    todo: List[BaseException] = [err]
    while todo:
        current = todo.pop(0)
        if any(current is s for s in seen) or len(seen) > 20:
            continue
        seen.append(current)
        yield current
        details = getattr(current, "exception_details", None)
        if isinstance(details, dict):
            todo.extend(e for e in details.values() if isinstance(e, BaseException))
        for nxt in (current.__cause__, current.__context__):
            if nxt is not None:
                todo.append(nxt)


def _kind_of_code(code: str, status: Optional[int], operation: str = "") -> Optional[str]:
    if code in _NO_CREDENTIALS:
        return "missing"
    if code in _REFUSED_CODES:
        return "refused"
    if code in _DENIED_CODES:
        return "denied"
    if code in _NO_BUCKET_CODES:
        return "no_bucket"
    if status == 401:
        return "refused"
    if status == 403:
        # a HEAD's 403 has no body to say which: the signature or the permission
        return "forbidden" if code in ("", "403", "Forbidden") else "denied"
    if status == 404 and operation in ("HeadBucket", "GetBucketLocation"):
        return "no_bucket"
    return None


def status_of(err: BaseException) -> Optional[int]:
    response = getattr(err, "response", None)
    if isinstance(response, dict):  # botocore's ClientError
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status else None
    for name in ("status_code", "code", "status"):  # Beam's S3ClientError (.code), azure.core (.status_code)
        value = getattr(err, name, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    return None


def _detail(err: BaseException) -> str:
    """The first line of what the client said (Beam's ``S3ClientError`` holds it as its
    first argument, beside the status)."""
    args = getattr(err, "args", ())
    text = args[0] if args and isinstance(args[0], str) else str(err)
    text = text.strip()
    return text.splitlines()[0] if text else type(err).__name__


def _classify_one(err: BaseException) -> Optional[tuple]:
    """(kind, detail) when ``err`` alone says it is a refusal, else None."""
    name = type(err).__name__
    text = str(err)
    if name in _NO_CREDENTIALS or any(t in text for t in _NO_CREDENTIALS_TEXT):
        return "missing", _detail(err)
    if name == "ClientAuthenticationError":  # azure.core: 401/403
        code = str(getattr(err, "error_code", "") or "")
        return ("denied" if code in _DENIED_CODES else "refused"), _detail(err)
    if name == "NotFound" and type(err).__module__.startswith("google.") and _GCS_BUCKET_NOT_FOUND.search(text):
        return "no_bucket", _detail(err)
    if name == "Forbidden" and type(err).__module__.startswith("google."):
        # GCS answers wrong or expired credentials with 401; a 403 is IAM refusing this
        # identity the permission (its message names it: storage.objects.get ...)
        return "denied", _detail(err)
    response = getattr(err, "response", None)
    status = status_of(err)
    code = ""
    operation = ""
    if isinstance(response, dict):
        code = str(response.get("Error", {}).get("Code", ""))
        operation = str(getattr(err, "operation_name", "") or "")
    else:
        code = str(getattr(err, "error_code", "") or "")  # azure.core's HttpResponseError
    if not code:
        found = _BOTO_MESSAGE.search(text) or _AZURE_CODE.search(text)
        if found:
            code = found.group("code")
            operation = found.groupdict().get("op") or operation
    if status is None and not code:
        return None
    kind = _kind_of_code(code, status, operation)
    if kind is None:
        return None
    return kind, _detail(err)


def access_error(err: BaseException, path: str, offset: Optional[int] = None) -> Optional[StorageAccessError]:
    """The :class:`StorageAccessError` ``err`` amounts to for ``path`` (an object or
    prefix URL), or None when it is something else (a missing object, an outage...).

    ``err`` may be botocore's ``ClientError`` / ``NoCredentialsError``, Beam's
    ``S3ClientError`` or ``BeamIOError``, an ``azure.core`` error, or anything raised from
    one of those; an existing :class:`StorageAccessError` in its chain is returned as is."""
    for current in _chain(err):
        if isinstance(current, StorageAccessError):
            return current
    found = None
    for current in _chain(err):  # the innermost refusal: the client's own words, not a wrapper's
        found = _classify_one(current) or found
    return None if found is None else _make(path, found[0], found[1], offset)


def access_error_from_status(
    status: int, body: str, path: str, offset: Optional[int] = None
) -> Optional[StorageAccessError]:
    """For a hand-made HTTP request: a :class:`StorageAccessError` when ``status`` (and
    the error body, e.g. S3's ``<Code>SignatureDoesNotMatch</Code>``) is a refusal."""
    found = re.search(r"<Code>(\w+)</Code>", body or "")
    code = found.group(1) if found else ""
    kind = _kind_of_code(code, status)
    if kind is None:
        return None
    detail = f"HTTP {status}" + (f" {code}" if code else "")
    return _make(path, kind, detail, offset)


def no_such_bucket(path: str, detail: str = "") -> StorageAccessError:
    """The error for a bucket (or container) that does not exist on the store."""
    return _make(path, "no_bucket", detail)


def raise_access_error(err: BaseException, path: str) -> None:
    """Raise the :class:`StorageAccessError` ``err`` amounts to (from ``err``), if any."""
    found = access_error(err, path)
    if found is not None:
        if found is err:
            raise found
        raise found from err


def path_in(value: Any) -> Optional[str]:
    """A store URL found in ``value`` (a string, a request object with ``bucket`` /
    ``object`` or ``prefix``, a Beam downloader with ``_path``, or a list of these)."""
    if isinstance(value, str):
        return value if "://" in value else None
    if isinstance(value, (list, tuple)):
        for item in value:
            found = path_in(item)
            if found:
                return found
        return None
    inner = getattr(value, "_path", None) or getattr(value, "path", None)
    if isinstance(inner, str) and "://" in inner:
        return inner
    bucket = getattr(value, "bucket", None)
    if isinstance(bucket, str) and bucket:
        key = getattr(value, "object", None) or getattr(value, "prefix", None) or ""
        return f"s3://{bucket}/{key}" if isinstance(key, str) else f"s3://{bucket}"
    return None
