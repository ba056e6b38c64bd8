"""Split files from patterns, globs, lists and TFDS-style shard names."""

from __future__ import annotations

import pytest

from tfrecord_io.dataset.path_specs import expand, split_files, tfds_split, warn_missing_shards


def _touch(tmp_path, *names):
    for n in names:
        (tmp_path / n).write_bytes(b"")
    return [str(tmp_path / n) for n in names]


def test_tfds_split_names():
    assert tfds_split("/d/mnist-train.tfrecord-00001-of-01024") == "train"
    assert tfds_split("my_ds-validation.tfrecord-00000-of-00002") == "validation"
    assert tfds_split("a-b-c-test.tfrecord-3-of-5") == "test"
    assert tfds_split("train.tfrecord") is None


def test_group_by_split_and_pattern(tmp_path):
    _touch(
        tmp_path,
        "ds-train.tfrecord-00000-of-00002",
        "ds-train.tfrecord-00001-of-00002",
        "ds-test.tfrecord-00000-of-00001",
    )
    by_glob = split_files(str(tmp_path / "ds-*"), ["train", "test"])
    assert [len(by_glob["train"]), len(by_glob["test"])] == [2, 1]
    by_pattern = split_files(str(tmp_path / "ds-{}.tfrecord-*"), ["train"])
    assert by_pattern == {"train": by_glob["train"]}
    assert split_files(by_glob["train"] + by_glob["test"], None) == {"": by_glob["train"] + by_glob["test"]}
    assert split_files({"x": by_glob["test"]}, ["x"]) == {"x": by_glob["test"]}
    with pytest.raises(ValueError, match="validation"):
        split_files(str(tmp_path / "ds-*"), ["validation"])
    with pytest.raises(FileNotFoundError):
        expand(str(tmp_path / "nothing-*"))


def test_missing_shards_warn(tmp_path):
    paths = _touch(tmp_path, "ds-train.tfrecord-00000-of-00003", "ds-train.tfrecord-00002-of-00003")
    with pytest.warns(UserWarning, match="1 TFDS shard"):
        missing = warn_missing_shards(paths)
    assert missing == [str(tmp_path / "ds-train.tfrecord-00001-of-00003")]
