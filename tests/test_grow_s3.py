"""Key indexes, look-up, append, remove and diff on S3 (versitygw on 127.0.0.1)."""

from __future__ import annotations

import json

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.dataset.keyed_dataset import open_dataset
from tfrecord_io.format import remote_reader
from tfrecord_io.storage import files

from tests.pipeline_support import IN_PROCESS, cli_env, run_cli, write_rows_config, write_rows_manifest


def test_lookup_append_remove_and_diff_on_s3(s3_server, s3_bucket, s3_options, tmp_path, monkeypatch):
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    remote_reader.reset_client()
    out = f"{s3_bucket}/ds"
    manifest, config = write_rows_config(tmp_path, "s3rows", out)
    env = cli_env(**s3_server.env())
    flags = ["--no-progress", *IN_PROCESS, *s3_server.pipeline_args()]
    proc = run_cli("build", str(config), "--version", "v1", *flags, env=env)
    assert proc.returncode == 0, proc.stderr
    # look-up through range GETs: the split's footer (once, when the split is first used),
    # the index block, the record; a second look-up in the block the last one read: the record
    with open_dataset(out) as ds:
        remote_reader.STATS.reset()
        assert ds.get("17")["id"].tolist() == [17]
        assert remote_reader.STATS.requests == 3
        remote_reader.STATS.reset()
        assert ds.get("17")["id"].tolist() == [17]
        assert remote_reader.STATS.requests == 1
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
            assert dataset_writer.sha256_file(files.join(out, "v2", new["path"])) == old["sha256"]
    keys = tmp_path / "keys.txt"
    keys.write_text("3\n65\nabsent\n")
    proc = run_cli("build", str(config), "--remove", str(keys), "--version", "v3", *flags, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "keys not found in v2 (1): 'absent'" in proc.stdout
    assert dataset_writer.read_latest(out) == "v3"
    with open_dataset(out) as ds:
        assert ds.get("3") is None and ds.get("65") is None and ds.get("64")["id"].tolist() == [64]
    proc = run_cli("diff", out, "v1", "v3", "--json", *flags, env=env)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert sorted(int(k) for s in d["splits"].values() for k in s["added"]) == [60, 61, 62, 63, 64, 66, 67, 68, 69]
    assert [k for s in d["splits"].values() for k in s["removed"]] == ["3"]
    proc = run_cli("validate", out, *flags, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_lookup_takes_the_s3_flags_without_aws_variables(s3_server, s3_bucket, tmp_path):
    """``tfrecord-io lookup s3://... --s3_endpoint_url=... --s3_access_key_id=...`` in an
    environment with no ``AWS_*`` variables: the look-up's own ranged reads (key index
    block, record) use the flags, as every job's Beam reads do."""
    import os

    out = f"{s3_bucket}/ds"
    manifest, config = write_rows_config(tmp_path, "s3rows", out)
    flags = ["--no-progress", *IN_PROCESS, *s3_server.pipeline_args()]
    run_cli("build", str(config), "--version", "v1", *flags, env=cli_env(**s3_server.env()), check=True)
    bare = {k: v for k, v in cli_env().items() if not k.startswith("AWS_")}
    bare["AWS_CONFIG_FILE"] = bare["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull
    proc = run_cli("lookup", out, "5", "--json", *flags, env=bare)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["example"]["text"] == "t5"
