"""The S3 fixture itself, and Beam 2.62's S3 filesystem against it: the ground the
object-storage tests stand on (if these fail, the build tests on S3 mean nothing)."""

from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

import tfrecord_io as tfio
from tfrecord_io.storage import files

from beam_support import MULTI


def test_bucket_is_fresh_and_served_from_root_dir(s3_server, s3_bucket, s3_options):
    assert files.glob(s3_bucket + "/*") == []
    with files.open_raw(s3_bucket + "/a/b.bin", "wb") as f:
        f.write(b"hello")
    assert files.file_size(s3_bucket + "/a/b.bin") == 5
    with open(s3_server.object_path(s3_bucket + "/a/b.bin"), "rb") as f:
        assert f.read() == b"hello"
    FileSystems.rename([s3_bucket + "/a/b.bin"], [s3_bucket + "/a/c.bin"])
    assert files.glob(s3_bucket + "/a/*") == [s3_bucket + "/a/c.bin"]
    FileSystems.delete([s3_bucket + "/a/c.bin"])
    assert not files.exists(s3_bucket + "/a/c.bin")


def test_wrong_secret_is_refused(s3_server, s3_bucket):
    from apache_beam.io.aws.s3filesystem import S3FileSystem

    bad = PipelineOptions(s3_server.pipeline_args() + ["--s3_secret_access_key=wrong"])
    with pytest.raises(Exception):  # noqa: B017 - boto's refusal, wrapped differently by each Beam
        S3FileSystem(bad).match([s3_bucket + "/*"])[0].metadata_list  # noqa: B018


def test_beam_pipeline_writes_and_reads_on_s3_with_two_workers(s3_server, s3_bucket, tmp_path):
    records = [f"record {i}".encode() for i in range(200)]
    options = PipelineOptions(MULTI + s3_server.pipeline_args())
    with beam.Pipeline(options=options) as p:
        p | beam.Create(records) | tfio.WriteToTFRecord(s3_bucket + "/out/data", num_shards=2)
    FileSystems.set_options(PipelineOptions(s3_server.pipeline_args()))
    try:
        shards = files.glob(s3_bucket + "/out/data-*")
        assert len([s for s in shards if not s.endswith(".index")]) == 2
        got = [bytes(r) for s in shards if not s.endswith(".index") for r in tfio.tfrecord_iterator(s)]
        assert sorted(got) == sorted(records)
    finally:
        FileSystems.set_options(PipelineOptions([]))
