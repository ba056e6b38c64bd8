"""Key indexes, look-up, append, remove and diff on ``gs://`` (fake-gcs-server on
127.0.0.1, tests/gcs_support.py): the gs:// twin of tests/test_grow_s3.py."""

from __future__ import annotations

import json

import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.dataset.keyed_dataset import open_dataset
from tfrecord_io.storage import files, gcs_objects

from tests.pipeline_support import IN_PROCESS, cli_env, run_cli, write_rows_config, write_rows_manifest

pytestmark = pytest.mark.gcs


def test_lookup_append_remove_and_diff_on_gcs(gcs_env, gcs_bucket, tmp_path, monkeypatch):
    FileSystems.set_options(PipelineOptions([]))
    out = f"{gcs_bucket}/ds"
    manifest, config = write_rows_config(tmp_path, "gsrows", out)
    env = cli_env(**gcs_env.env())
    flags = ["--no-progress", *IN_PROCESS]
    proc = run_cli("build", str(config), "--version", "v1", *flags, env=env)
    assert proc.returncode == 0, proc.stderr
    # look-ups through ranged reads of google-cloud-storage (gcs_objects, as the torch readers'), counted
    reads = []
    open_range = gcs_objects.open_range

    def counted(obj, start, end):
        reads.append((obj.url.rpartition("/")[2], start, end))
        return open_range(obj, start, end)

    monkeypatch.setattr(gcs_objects, "open_range", counted)
    with open_dataset(out) as ds:
        # the split's footer (once, when the split is first used), the index block, the record
        assert ds.get("17")["id"].tolist() == [17]
        assert len(reads) == 3, reads
        assert [name.endswith(".keyindex") for name, _, _ in reads] == [True, True, False], reads
        assert ".tfrecord" in reads[2][0], reads
        # again: the block the last look-up read is reused; only the record is read
        reads.clear()
        assert ds.get("17")["id"].tolist() == [17]
        assert len(reads) == 1 and ".tfrecord" in reads[0][0], reads
        assert ds.get("99") is None
    proc = run_cli("lookup", out, "5", "--json", *flags, env=env)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["example"]["text"] == "t5"
    # append: base shards copied server-side (same bytes, same SHA-256), new rows in new shards
    write_rows_manifest(manifest, range(60, 70))
    proc = run_cli("build", str(config), "--append", "--version", "v2", *flags, env=env)
    assert proc.returncode == 0, proc.stderr
    v1 = dataset_writer.load_info(f"{out}/v1")
    v2 = dataset_writer.load_info(f"{out}/v2")
    assert v2["records"] == 70 and v2["changes"]["shards_carried"] == 4
    for split, entry in v1["splits"].items():
        for old, new in zip(entry["shards"], v2["splits"][split]["shards"]):
            assert old["path"] != new["path"]  # renamed -of-N
            assert dataset_writer.sha256_file(files.join(out, "v2", new["path"])) == old["sha256"]
    assert dataset_writer.verify_version(f"{out}/v2", v2) == []
    keys = tmp_path / "keys.txt"
    keys.write_text("3\n65\nabsent\n")
    proc = run_cli("build", str(config), "--remove", str(keys), "--version", "v3", *flags, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "keys not found in v2 (1): 'absent'" in proc.stdout
    assert dataset_writer.read_latest(out) == "v3"
    with open_dataset(out) as ds:
        assert ds.get("3") is None and ds.get("65") is None and ds.get("64")["id"].tolist() == [64]
        assert ds.get("59")["text"] == b"t59"
    proc = run_cli("diff", out, "v1", "v3", "--json", *flags, env=env)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert sorted(int(k) for s in d["splits"].values() for k in s["added"]) == [60, 61, 62, 63, 64, 66, 67, 68, 69]
    assert [k for s in d["splits"].values() for k in s["removed"]] == ["3"]
    proc = run_cli("validate", out, *flags, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
