"""Datasets that grow on the standalone Flink cluster (``scripts/cluster``, each process
with a private /tmp, as on separate machines; tests/test_cluster.py has the cluster
itself): ``build --append``, ``build --remove`` and ``diff`` on the cluster with the data
on S3 (versitygw) give whole versions equal to the local runner's, the same records per
split, the same key indexes and the same shards.

Small on purpose (tens of rows): what is tested is that the derive stages (base claims,
server-side copies, rewrites, key index merges, finalize in a worker) work where no
worker sees the launcher's disk, not throughput.

Run: ``python -m pytest -m cluster tests/test_grow_cluster.py`` (after scripts/fetch-runners).
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, Tuple

import pytest
import yaml

import tfrecord_io
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.format.key_index import KeyIndexReader

from tests.pipeline_support import run_cli
from tests.test_cluster import REPO, RunningCluster, cluster_job, on_direct_runner

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def flink(tmp_path_factory):
    """A Flink cluster for this module (``scripts/cluster up flink``, 2 TaskManagers)."""
    running = RunningCluster("flink", str(tmp_path_factory.mktemp("grow-cluster-flink")))
    running.up()
    yield running
    running.down()


def _put(s3_server, url: str, text: str) -> str:
    bucket, _, key = url[len("s3://") :].partition("/")
    s3_server.client().put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"))
    return url


def _rows(ids, text: str = "t{i}") -> str:
    return "".join(json.dumps({"id": i, "text": text.format(i=i), "label": i % 3}) + "\n" for i in ids)


def _version(s3_server, root: str, version: str) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """A version, read through the files versitygw keeps behind the objects: checked whole
    (every shard and key index listed, its SHA-256), and per split its records (sorted),
    its key index's entries and its shards' SHA-256; with its ``changes``."""
    version_dir = s3_server.object_path(f"{root}/{version}")
    info = dataset_writer.load_info(version_dir)
    assert info is not None, f"{root}/{version} is not published"
    assert dataset_writer.verify_version(version_dir, info) == []
    content = {}
    for split, entry in sorted(info["splits"].items()):
        records = sorted(
            bytes(r)
            for shard in entry["shards"]
            for r in tfrecord_io.tfrecord_iterator(os.path.join(version_dir, shard["path"]))
        )
        with KeyIndexReader(os.path.join(version_dir, entry["key_index"]["path"])) as reader:
            entries = list(reader)
        assert len(entries) == len(records) == entry["records"]
        content[split] = {"records": records, "key_index": entries, "shards": [s["sha256"] for s in entry["shards"]]}
    return content, info.get("changes") or {}


def test_append_remove_and_diff_on_the_flink_cluster_equal_the_local_runner(flink, s3_server, tmp_path):
    bucket = "s3://" + s3_server.make_bucket()
    base = _put(s3_server, f"{bucket}/in/base.jsonl", _rows(range(40)))
    more = _put(s3_server, f"{bucket}/in/more.jsonl", _rows(range(30, 50), "new {i}"))  # 30-39 replace
    keys = _put(s3_server, f"{bucket}/in/keys.txt", "3\n45\nabsent\n")
    cfg = {
        "name": "grow",
        "key": "id",
        "columns": {"id": "int", "text": "text", "label": {"encoder": "int"}},
        "splits": {"train": 0.6, "test": 0.4},
        "sharding": {"num_shards": 3},
        "output": {"dir": f"{bucket}/unused"},
    }
    configs = {}
    for name, manifest in (("base", base), ("more", more)):
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**cfg, "input": {"manifest": manifest}}))
        configs[name] = str(path)
    local, cluster = f"{bucket}/local", f"{bucket}/cluster"
    direct = on_direct_runner(s3_server)
    for root in (local, cluster):  # the base version: a full build, on the local runner
        done = run_cli("build", configs["base"], "--output", root, "--version", "v1", *direct, cwd=REPO)
        assert done.returncode == 0, done.stderr
    # the reference: append and remove on the local runner
    steps = (
        ("v2", ["--append", "--on-existing", "replace"], "more"),
        ("v3", ["--remove", keys], "more"),
    )
    for version, args, config in steps:
        done = run_cli("build", configs[config], "--output", local, "--version", version, *args, *direct, cwd=REPO)
        assert done.returncode == 0, done.stderr
    # the same on the Flink cluster
    for (version, args, config), base_version in zip(steps, ("v1", "v2")):
        done = cluster_job(flink, s3_server, "build", configs[config], "--output", cluster, "--version", version, *args)
        assert f"on version {base_version}: " in done.stdout, done.stdout
    assert dataset_writer.read_latest(s3_server.object_path(cluster)) == "v3"
    for version in ("v2", "v3"):
        got, got_changes = _version(s3_server, cluster, version)
        want, want_changes = _version(s3_server, local, version)
        assert got == want, f"{version} on the cluster differs from the local runner's"
        assert got_changes == want_changes
    v2 = _version(s3_server, cluster, "v2")[1]
    assert v2["shards_carried"] >= 1 and sum(s["changed"] for s in v2["splits"].values()) == 10
    v3 = _version(s3_server, cluster, "v3")[1]
    assert v3["not_found"] == ["absent"] and sum(s["removed"] for s in v3["splits"].values()) == 2
    done = cluster_job(flink, s3_server, "diff", cluster, "v1", "v3", "--json")
    reference = run_cli("diff", local, "v1", "v3", "--json", *direct, cwd=REPO)
    assert reference.returncode == 0, reference.stderr
    got_diff, want_diff = json.loads(done.stdout), json.loads(reference.stdout)
    assert got_diff["splits"] == want_diff["splits"]
    split_diffs = got_diff["splits"].values()
    assert sorted(int(k) for s in split_diffs for k in s["added"]) == [40, 41, 42, 43, 44, 46, 47, 48, 49]
    assert sorted(int(k) for s in split_diffs for k in s["changed"]) == list(range(30, 40))
    assert [k for s in split_diffs for k in s["removed"]] == ["3"]
