"""files.file_size for scheme:// paths goes through Beam's FileSystems (which has no
metadata() in Beam 2.62 nor 2.77): checked on local files routed as if remote."""

from __future__ import annotations

import os

import pytest

from tfrecord_io.storage import files


def test_remote_file_size_via_filesystems_match(tmp_path, monkeypatch):
    path = tmp_path / "a.bin"
    path.write_bytes(b"x" * 1234)
    (tmp_path / "a.bin2").write_bytes(b"y")  # a longer name the match must not pick
    monkeypatch.setattr(files, "is_remote", lambda p: True)
    assert files.file_size(str(path)) == 1234
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        files.file_size(os.path.join(str(tmp_path), "missing.bin"))
