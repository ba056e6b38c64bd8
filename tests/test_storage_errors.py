"""Which client errors are a refusal (``tfrecord_io.storage.storage_errors``): the exception
classes botocore, Beam and Azure's SDK raise, made as those libraries make them, each
mapped to StorageAccessError with the hint for its store, and the errors that are not a
refusal (a missing object, an outage, throttling) left alone. The servers behind these
errors are exercised in tests/test_storage_access.py (versitygw) and tests/test_azure.py
(Azurite); this covers the codes a test server does not send (expired tokens, 401...)."""

from __future__ import annotations

import os
import pickle

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from tfrecord_io.errors import StorageAccessError, StorageUnavailableError
from tfrecord_io.storage import storage_errors

URL = "s3://bucket-a/data/part-0.tfrecord"


def _client_error(code: str, status: int, operation: str = "GetObject") -> ClientError:
    return ClientError(
        {"Error": {"Code": code, "Message": "refused"}, "ResponseMetadata": {"HTTPStatusCode": status}}, operation
    )


@pytest.mark.parametrize(
    "error, kind",
    [
        (NoCredentialsError(), "no credentials for the store"),
        (_client_error("SignatureDoesNotMatch", 403), "the store refused the credentials"),
        (_client_error("InvalidAccessKeyId", 403), "the store refused the credentials"),
        (_client_error("ExpiredToken", 400), "the store refused the credentials"),
        (_client_error("AccessDenied", 403), "access denied"),
        (_client_error("NoSuchBucket", 404, "ListObjectsV2"), "no such bucket"),
        (_client_error("404", 404, "HeadBucket"), "no such bucket"),
        (_client_error("403", 403, "HeadObject"), "the store refused access (HTTP 403"),
        (_client_error("Unauthorized", 401), "the store refused the credentials"),
    ],
)
def test_botocore_refusals_are_storage_access_errors(error, kind):
    found = storage_errors.access_error(error, URL)
    assert isinstance(found, StorageAccessError) and isinstance(found, StorageUnavailableError)
    assert kind in str(found) and str(found).startswith(URL + ":")
    assert "AWS_ACCESS_KEY_ID" in found.hint or "bucket name 'bucket-a'" in found.hint
    again = pickle.loads(pickle.dumps(found))  # crosses Beam's and DataLoader's process boundaries whole
    assert str(again) == str(found) and again.hint == found.hint


@pytest.mark.parametrize(
    "error",
    [
        _client_error("NoSuchKey", 404),
        _client_error("404", 404, "HeadObject"),
        _client_error("SlowDown", 503),
        _client_error("InternalError", 500),
        _client_error("PreconditionFailed", 412),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
        TimeoutError("timed out"),
        FileNotFoundError("no such file"),
    ],
)
def test_other_failures_are_not_refusals(error):
    """A missing object, an outage, throttling: for the caller's own handling (the
    storage timeout, FileNotFoundError), never a StorageAccessError."""
    assert storage_errors.access_error(error, URL) is None


def test_beams_wrapped_errors_are_recognised_through_their_chain():
    """Beam's S3 client keeps only the message and the status of botocore's error
    (``S3ClientError``), and its FileSystems wraps per-path errors in ``BeamIOError``."""
    from apache_beam.io.aws.clients.s3.messages import S3ClientError
    from apache_beam.io.filesystem import BeamIOError

    missing = S3ClientError("Unable to locate credentials", None)
    assert "no credentials" in str(storage_errors.access_error(missing, URL))
    listed = S3ClientError(
        "An error occurred (AccessDenied) when calling the ListObjectsV2 operation: Access Denied.", 403
    )
    wrapped = BeamIOError("Match operation failed", {URL: BeamIOError("List operation failed", {URL: listed})})
    found = storage_errors.access_error(wrapped, URL)
    # the innermost error's words, not the wrapper's
    assert found is not None and "access denied" in str(found) and "Match operation" not in str(found)


def test_azure_sdk_refusals():
    from azure.core.exceptions import ClientAuthenticationError, ResourceNotFoundError

    path = "azfs://account1/cont-a/ds/x.tfrecord"
    auth = ClientAuthenticationError(message="Server failed to authenticate the request.")
    auth.error_code = "AuthenticationFailed"
    found = storage_errors.access_error(auth, path)
    assert found is not None and "refused the credentials" in str(found) and "--azure_connection_string" in found.hint
    gone = ResourceNotFoundError(message="The specified container does not exist.\nErrorCode:ContainerNotFound")
    found = storage_errors.access_error(gone, path)
    assert found is not None and "no such container" in str(found) and "container name 'cont-a'" in found.hint
    blob = ResourceNotFoundError(message="The specified blob does not exist.\nErrorCode:BlobNotFound")
    assert storage_errors.access_error(blob, path) is None


def test_http_statuses_of_a_hand_made_request():
    body = "<Error><Code>SignatureDoesNotMatch</Code></Error>"
    found = storage_errors.access_error_from_status(403, body, URL, 4096)
    assert found is not None and found.offset == 4096 and "refused the credentials" in str(found)
    assert storage_errors.access_error_from_status(503, "<Code>SlowDown</Code>", URL) is None
    assert storage_errors.access_error_from_status(412, "", URL) is None


def test_an_existing_storage_access_error_is_kept():
    first = storage_errors.no_such_bucket(URL)
    try:
        raise RuntimeError("wrapped") from first
    except RuntimeError as err:
        assert storage_errors.access_error(err, "s3://other/x") is first


def test_reads_catch_broken_bodies_without_botocore_installed():
    """An install for gs:// or az:// only has no botocore: the errors every store's range
    reads catch (``s3_objects._body_errors``, evaluated when a body breaks off) must still
    be there, without botocore's, not an ImportError in place of the read's own error."""
    code = """
import sys
sys.modules["botocore"] = None  # as if not installed: its import raises ImportError
from tfrecord_io.storage import s3_objects
errors = s3_objects._body_errors()
assert OSError in errors, errors
try:
    raise ConnectionResetError("the body broke off")
except s3_objects._body_errors() as err:
    print("caught", type(err).__name__)
"""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "caught ConnectionResetError" in done.stdout, done.stderr


@pytest.mark.parametrize("value, ok", [("botocore", True), ("presigned", True), ("", True), ("botcore", False)])
def test_the_s3_transport_variable_is_one_of_the_two_or_an_error_naming_it(value, ok):
    """``TFRECORD_IO_S3_TRANSPORT`` picks how S3 range GETs are sent; a value it does not
    know (a typo) is an error naming the variable and the choices, not a silent default."""
    import subprocess
    import sys

    code = "from tfrecord_io.storage import s3_objects; print(s3_objects._transport)"
    env = dict(os.environ, TFRECORD_IO_S3_TRANSPORT=value)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    if ok:
        assert done.returncode == 0 and done.stdout.strip() == (value or "presigned"), done.stderr
    else:
        assert done.returncode != 0
        assert "TFRECORD_IO_S3_TRANSPORT='botcore': expected one of presigned, botocore" in done.stderr, done.stderr


def test_a_gcs_403_is_access_denied_and_a_long_detail_says_it_was_cut():
    """GCS answers bad credentials with 401; its 403 is IAM refusing the permission, so
    it reads "access denied" (not "the credentials are wrong"). What the client said is
    kept to 300 characters, and a cut one ends with "..." (not mid-word, unmarked)."""
    from google.api_core.exceptions import Forbidden

    message = (
        "GET https://storage.googleapis.com/storage/v1/b/b/o/x: caller does not have storage.objects.get " + "x" * 400
    )
    found = storage_errors.access_error(Forbidden(message), "gs://b/x")
    assert found is not None and "access denied" in str(found) and "storage.objects.get" in str(found)
    detail = str(found).split("(Google Cloud Storage", 1)[1]
    assert "x" * 200 + "..." in detail and "x" * 290 not in detail
