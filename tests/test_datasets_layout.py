"""``tfrecord_io.dataset.datasets``: resolving a dataset root / version on local disk and S3."""

from __future__ import annotations

import json

import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from tfrecord_io.dataset import datasets
from tfrecord_io.storage import files


def _make_layout(root: str) -> None:
    files.write_bytes(files.join(root, "v1", datasets.INFO_NAME), json.dumps({"version": "v1"}).encode())
    files.write_bytes(files.join(root, "v2", "train", "x.tfrecord"), b"")  # unfinished: no info
    files.write_bytes(files.join(root, datasets.LATEST_NAME), b"v1\n")


def _check_layout(root: str) -> None:
    assert datasets.read_latest(root) == "v1"
    v1 = files.join(root, "v1")
    assert datasets.resolve_version_dir(root) == v1
    assert datasets.resolve_version_dir(root + "/") == v1
    assert datasets.resolve_version_dir(root, "v1") == v1
    assert datasets.resolve_version_dir(v1) == v1
    assert datasets.load_info(v1) == {"version": "v1"}
    assert datasets.load_info(files.join(root, "v2")) is None
    with pytest.raises(datasets.DatasetLayoutError, match="did not finish"):
        datasets.resolve_version_dir(root, "v2")
    with pytest.raises(datasets.DatasetLayoutError, match="not a dataset"):
        datasets.resolve_version_dir(files.join(root, "v2"))
    files.write_bytes(files.join(root, datasets.LATEST_NAME), b"v2\n")
    with pytest.raises(datasets.DatasetLayoutError, match="names 'v2'"):
        datasets.resolve_version_dir(root)


def test_layout_on_local_disk(tmp_path):
    root = str(tmp_path / "ds")
    assert datasets.read_latest(root) is None
    _make_layout(root)
    _check_layout(root)


def test_layout_on_s3(s3_server, s3_bucket):
    FileSystems.set_options(PipelineOptions(s3_server.pipeline_args()))
    try:
        root = s3_bucket + "/ds"
        assert datasets.read_latest(root) is None
        _make_layout(root)
        _check_layout(root)
    finally:
        FileSystems.set_options(PipelineOptions([]))
