"""Datasets that grow: ``build --append`` and ``build --remove`` publish a new version from
the current one, carrying unchanged shards and rewriting only those that change."""

from __future__ import annotations

import json
import os

import pytest
import yaml

import tfrecord_io
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.pipelines.diff_job import diff_versions

from tests.pipeline_support import IN_PROCESS, run_cli


def _write_manifest(path, ids, text="text of {i}"):
    with open(path, "w") as f:
        for i in ids:
            f.write(json.dumps({"id": i, "text": text.format(i=i), "label": i % 3}) + "\n")
    return str(path)


def _config(tmp_path, manifest, out, **extra):
    cfg = {
        "name": "rows",
        "input": {"manifest": str(manifest)},
        "key": "id",
        "columns": {"id": "int", "text": "text", "label": {"encoder": "int"}},
        "splits": {"train": 0.7, "test": 0.3},
        "sharding": {"num_shards": 4},
        "output": {"dir": str(out)},
        **extra,
    }
    path = tmp_path / f"c{len(os.listdir(tmp_path))}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def _build(*args):
    proc = run_cli("build", *args, "--no-progress", *IN_PROCESS)
    return proc


def _all(out, version=None):
    rows = {}
    info = dataset_writer.load_info(os.path.join(out, version or dataset_writer.read_latest(out)))
    for split in info["splits"]:
        for ex in tfrecord_io.iter_dataset(out, split, version):
            t = ex["text"]
            rows[int(ex["id"][0])] = (split, (t if isinstance(t, bytes) else t[0]).decode())
    return rows


@pytest.fixture()
def base(tmp_path):
    out = str(tmp_path / "out")
    config = _config(tmp_path, _write_manifest(tmp_path / "m1.jsonl", range(100)), out)
    proc = _build(config, "--version", "v1")
    assert proc.returncode == 0, proc.stderr
    return tmp_path, out


def test_append_adds_new_keys_carries_shards_and_keeps_splits(base):
    tmp_path, out = base
    before = _all(out)
    config = _config(tmp_path, _write_manifest(tmp_path / "m2.jsonl", range(90, 130), "new {i}"), out)
    proc = _build(config, "--append", "--on-existing", "skip", "--version", "v2")
    assert proc.returncode == 0, proc.stderr
    assert "append on version v1: 8 shards carried unchanged" in proc.stdout
    assert "rows skipped (key already in v1, on_existing: skip): 10" in proc.stdout
    assert dataset_writer.read_latest(out) == "v2"
    after = _all(out)
    assert set(after) == set(range(130))
    for i in range(100):
        assert after[i] == before[i]  # skipped rows keep their old content, every split unchanged
    assert all(after[i][1] == f"new {i}" for i in range(100, 130))
    info = dataset_writer.load_info(os.path.join(out, "v2"))
    assert info["base"] == "v1" and info["records"] == 130
    for split, entry in info["splits"].items():
        names = [s["path"] for s in entry["shards"]]
        n = len(names)
        assert n == 5 and all(name.endswith(f"-of-{n:05d}") for name in names)
        for old, new in zip(
            dataset_writer.load_info(os.path.join(out, "v1"))["splits"][split]["shards"], entry["shards"]
        ):
            assert os.path.samefile(os.path.join(out, "v1", old["path"]), os.path.join(out, "v2", new["path"]))
    assert dataset_writer.verify_version(os.path.join(out, "v2"), info) == []
    # the keys are found in their (unchanged) splits by the new key index
    with tfrecord_io.open_dataset(out) as ds:
        assert ds.get("120")["id"].tolist() == [120] and ds.get("5")["id"].tolist() == [5]
    d = diff_versions(out, "v1", "v2")
    assert sorted(int(k) for s in d["splits"].values() for k in s["added"]) == list(range(100, 130))
    assert not any(s["removed"] or s["changed"] for s in d["splits"].values())
    proc = run_cli("validate", out, "--no-progress", *IN_PROCESS)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_append_replace_rewrites_only_shards_with_replaced_rows(base):
    tmp_path, out = base
    config = _config(tmp_path, _write_manifest(tmp_path / "m2.jsonl", [3, 200], "replaced {i}"), out)
    proc = _build(config, "--append", "--on-existing", "replace", "--version", "v2")
    assert proc.returncode == 0, proc.stderr
    after = _all(out)
    assert after[3][1] == "replaced 3" and after[200][1] == "replaced 200" and len(after) == 101
    info = dataset_writer.load_info(os.path.join(out, "v2"))
    # the shard that held 3, and one new shard in each split a new row went to
    assert info["changes"]["shards_written"] == 1 + len({after[3][0], after[200][0]})
    d = diff_versions(out, "v1", "v2")
    assert [k for s in d["splits"].values() for k in s["changed"]] == ["3"]
    assert [k for s in d["splits"].values() for k in s["added"]] == ["200"]
    page = str(tmp_path / "report.html")
    proc = run_cli("report", out, "--output", page, "--no-progress", *IN_PROCESS)
    assert proc.returncode == 0, proc.stderr
    html = open(page).read()
    assert "append on version <b>v1</b>" in html and 'class="changes"' in html


def test_append_with_existing_key_is_refused_by_default(base):
    tmp_path, out = base
    config = _config(tmp_path, _write_manifest(tmp_path / "m2.jsonl", [7, 300]), out)
    proc = _build(config, "--append", "--version", "v2")
    assert proc.returncode != 0
    assert "key '7'" in proc.stderr and "already in the base version" in proc.stderr
    assert dataset_writer.read_latest(out) == "v1" and not os.path.exists(os.path.join(out, "v2"))


def test_append_refuses_a_config_that_changes_the_records(base):
    tmp_path, out = base
    manifest = _write_manifest(tmp_path / "m2.jsonl", [300])
    config = _config(tmp_path, manifest, out, splits={"train": 0.5, "test": 0.5}, seed=4)
    proc = _build(config, "--append")
    assert proc.returncode == 2
    assert "cannot append to version v1" in proc.stderr and "seed: 0 -> 4" in proc.stderr and "splits:" in proc.stderr
    config = _config(tmp_path, manifest, out, columns={"id": "int", "text": "text", "label": {"encoder": "float"}})
    proc = _build(config, "--append")
    assert proc.returncode == 2 and "columns.label" in proc.stderr
    assert dataset_writer.read_latest(out) == "v1"


def test_remove_rewrites_only_affected_shards_and_names_missing_keys(base):
    tmp_path, out = base
    keys = tmp_path / "gone.txt"
    keys.write_text("4\n17\nnot-a-key\n\n")
    config = _config(tmp_path, tmp_path / "m1.jsonl", out)
    proc = _build(config, "--remove", str(keys), "--version", "v2")
    assert proc.returncode == 0, proc.stderr
    assert "keys not found in v1 (1): 'not-a-key'" in proc.stdout
    after = _all(out)
    assert set(after) == set(range(100)) - {4, 17}
    info = dataset_writer.load_info(os.path.join(out, "v2"))
    changes = info["changes"]
    assert changes["operation"] == "remove" and changes["not_found"] == ["not-a-key"]
    assert sum(s["removed"] for s in changes["splits"].values()) == 2
    v1 = dataset_writer.load_info(os.path.join(out, "v1"))
    rewritten = [
        s["path"]
        for split, e in info["splits"].items()
        for s, old in zip(e["shards"], v1["splits"][split]["shards"])
        if not os.path.samefile(os.path.join(out, "v1", old["path"]), os.path.join(out, "v2", s["path"]))
    ]
    assert len(rewritten) == changes["shards_written"] and 1 <= len(rewritten) <= 2  # the shards that held 4 and 17
    with tfrecord_io.open_dataset(out) as ds:
        assert ds.get("4") is None and ds.get("5")["id"].tolist() == [5]
    proc = run_cli("validate", out, "--no-progress", *IN_PROCESS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    d = diff_versions(out, "v1", "v2")
    assert sorted(k for s in d["splits"].values() for k in s["removed"]) == ["17", "4"]


def test_a_second_append_onto_the_same_base_is_refused_while_one_runs(base):
    tmp_path, out = base
    from tfrecord_io.pipelines.building import derive

    claim = derive.claim_base(out, "v1")  # as a running append holds it
    try:
        config = _config(tmp_path, _write_manifest(tmp_path / "m2.jsonl", [300]), out)
        proc = _build(config, "--append")
        assert proc.returncode == 2 and "another append or remove onto version v1 is running" in proc.stderr
    finally:
        claim.release()
    assert dataset_writer.read_latest(out) == "v1"


def test_a_killed_append_leaves_the_previous_version_current(base):
    import signal
    import time

    from tests.pipeline_support import start_cli

    tmp_path, out = base
    config = _config(tmp_path, _write_manifest(tmp_path / "m2.jsonl", range(100, 400)), out)
    proc = start_cli(
        "build",
        config,
        "--append",
        "--version",
        "v2",
        "--no-progress",
        *IN_PROCESS,
        capture=False,
        start_new_session=True,
    )
    claim = os.path.join(out, "_derive", "v1", "_BUILDING")
    try:
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(out, "v2", "_BUILDING")):
            assert proc.poll() is None and time.monotonic() < deadline, "the append ended before it was killed"
            time.sleep(0.05)
        assert os.path.exists(claim)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher and anything it started
        proc.wait()
    assert dataset_writer.read_latest(out) == "v1"
    assert dataset_writer.load_info(os.path.join(out, "v2")) is None  # nothing a reader takes for whole
    assert _all(out) == _all(out, "v1")
    # the next append takes over the dead run's claims (its base's and its version's)
    again = _build(config, "--append", "--version", "v2")
    assert again.returncode == 0, again.stderr
    assert dataset_writer.read_latest(out) == "v2" and len(_all(out)) == 400 and not os.path.exists(claim)


def test_append_and_remove_usage_errors(base):
    tmp_path, out = base
    config = _config(tmp_path, tmp_path / "m1.jsonl", out)
    for args, message in (
        (["--append", "--remove", str(tmp_path / "k.txt")], "give one of --append or --remove KEYS_FILE"),
        (["--remove", str(tmp_path / "absent.txt")], "absent.txt: no such keys file"),
    ):
        proc = _build(config, *args)
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    empty = tmp_path / "empty"
    proc = _build(_config(tmp_path, tmp_path / "m1.jsonl", str(empty)), "--append")
    assert proc.returncode == 2 and "no published version to append to" in proc.stderr
    assert dataset_writer.read_latest(out) == "v1"


def _write_rows(path, rows):
    with open(path, "w") as f:
        for i, text in rows:
            f.write(json.dumps({"id": i, "text": text, "label": 1}) + "\n")
    return str(path)


def test_append_with_dedup_content_drops_rows_identical_to_the_base_or_to_each_other(tmp_path):
    out = str(tmp_path / "out")
    columns = {"text": "text", "label": {"encoder": "int"}}  # the key is not in the Example
    rows = [(i, f"t{i}") for i in range(18)] + [(18, "dup"), (19, "dup")]
    proc = _build(_config(tmp_path, _write_rows(tmp_path / "m1.jsonl", rows), out, columns=columns), "--version", "v1")
    assert proc.returncode == 0, proc.stderr
    appended = [
        (100, "t5"),  # the base's 5
        (101, "new"),
        (102, "new"),  # 101's: 101 sorts first, kept
        (103, "dup"),  # the base's 18 and 19: 18 (first by key) is named
        (104, "t104"),
        (7, "t7"),  # replaces 7 with the same content: the replaced row is not compared against
    ]
    config = _config(tmp_path, _write_rows(tmp_path / "m2.jsonl", appended), out, columns=columns, dedup="content")
    proc = _build(config, "--append", "--on-existing", "replace", "--version", "v2")
    assert proc.returncode == 0, proc.stderr
    assert "rows in: 6   written: 3   rejected: 0   duplicates dropped: 3 (dedup: content)" in proc.stdout, proc.stdout
    info = dataset_writer.load_info(os.path.join(out, "v2"))
    assert info["rows_in"] == 6 and info["duplicates"] == 3 and info["dedup"] == "content"
    assert info["records"] == 20 + 2  # 101 and 104 added, 7 replaced
    named = sorted((d["key"], d["kept_key"], d.get("kept_in")) for d in info["duplicate_examples"])
    assert named == [("100", "5", "v1"), ("102", "101", None), ("103", "18", "v1")]
    assert sum(s["added"] for s in info["changes"]["splits"].values()) == 2
    assert dataset_writer.verify_version(os.path.join(out, "v2"), info) == []
    with tfrecord_io.open_dataset(out) as ds:
        for key in ("100", "102", "103"):
            assert ds.get(key) is None
        for key, text in (("101", "new"), ("104", "t104"), ("7", "t7"), ("5", "t5"), ("18", "dup"), ("19", "dup")):
            got = ds.get(key)["text"]
            assert (got if isinstance(got, bytes) else got[0]) == text.encode(), key
    d = diff_versions(out, "v1", "v2")
    assert sorted(k for s in d["splits"].values() for k in s["added"]) == ["101", "104"]
    assert not any(s["removed"] for s in d["splits"].values())


def test_a_row_that_replaces_a_key_is_never_dropped_as_a_duplicate(tmp_path):
    """``on_existing: replace`` with ``dedup: content``: a new row for key 7 whose content
    equals the base's row 5 (and a new row 8 equal to new row 9's, 8 sorting first) is
    kept: dropping it would remove key 7 from the dataset, since the row it replaces
    leaves. A row with a new key and the same content is still dropped."""
    out = str(tmp_path / "out")
    columns = {"text": "text", "label": {"encoder": "int"}}  # the key is not in the Example
    rows = [(i, f"t{i}") for i in range(10)]
    proc = _build(_config(tmp_path, _write_rows(tmp_path / "m1.jsonl", rows), out, columns=columns), "--version", "v1")
    assert proc.returncode == 0, proc.stderr
    appended = [(7, "t5"), (100, "t5"), (8, "same"), (9, "same")]
    config = _config(tmp_path, _write_rows(tmp_path / "m2.jsonl", appended), out, columns=columns, dedup="content")
    proc = _build(config, "--append", "--on-existing", "replace", "--version", "v2")
    assert proc.returncode == 0, proc.stderr
    info = dataset_writer.load_info(os.path.join(out, "v2"))
    named = sorted((d["key"], d["kept_key"]) for d in info["duplicate_examples"])
    assert named == [("100", "5")], named
    assert info["records"] == 10
    with tfrecord_io.open_dataset(out) as ds:
        for key, text in (("7", "t5"), ("5", "t5"), ("8", "same"), ("9", "same")):
            got = ds.get(key)
            assert got is not None, key
            assert (got["text"] if isinstance(got["text"], bytes) else got["text"][0]) == text.encode(), key
        assert ds.get("100") is None
    d = diff_versions(out, "v1", "v2")
    assert not any(s["removed"] for s in d["splits"].values()) and not any(s["added"] for s in d["splits"].values())
    assert sorted(k for s in d["splits"].values() for k in s["changed"]) == ["7", "8", "9"]


def test_content_dedup_drops_only_rows_whose_bytes_match_not_just_their_hash():
    from tfrecord_io.pipelines.building.content_dedup import BASE, _Row, same_content

    content = {b"b1x": b"x", b"b1": b"x", b"b2": b"y", b"n1": b"y", b"n2": b"z", b"n3": b"z", b"n4": b"w"}
    reads = []

    def read(row):
        reads.append(row.key)
        return content[row.key]

    def row(key, note):
        return _Row(key, "shard", 0, 1, note)

    # every row under one content hash (a collision): only equal bytes make a duplicate
    pairs = same_content(
        [row(b"b1", BASE), row(b"b2", BASE)], [row(b"n1", 0), row(b"n2", 1), row(b"n3", 1), row(b"n4", 2)], read
    )
    assert sorted((d.key, k.key) for d, k in pairs) == [(b"n1", b"b2"), (b"n3", b"n2")]
    # no collision: one base row read, however many the base holds
    content[b"n9"] = b"x"
    reads.clear()
    pairs = same_content([row(b"b1", BASE), row(b"b1x", BASE)], [row(b"n9", 0)], read)
    assert [(d.key, k.key) for d, k in pairs] == [(b"n9", b"b1")] and sorted(reads) == [b"b1", b"n9"]


def test_two_appends_started_together_lose_no_row(base):
    """Two real appends onto v1 started at the same moment (separate processes, no
    claim faked): whatever the timing, every run that exits 0 has its rows in the
    version LATEST names at the end (no lost update: the later one built on the
    earlier's version, or was refused), a refused run exits 2 saying to run it again,
    and neither leaves a claim that blocks the next append."""
    from tests.pipeline_support import start_cli

    tmp_path, out = base
    new_rows = {"a": range(100, 120), "b": range(200, 220)}
    configs = {
        name: _config(tmp_path, _write_manifest(tmp_path / f"m_{name}.jsonl", ids, f"{name} {{i}}"), out)
        for name, ids in new_rows.items()
    }
    procs = {name: start_cli("build", cfg, "--append", "--no-progress", *IN_PROCESS) for name, cfg in configs.items()}
    results = {name: (p.communicate(timeout=600), p.returncode) for name, p in procs.items()}
    won = [name for name, (_, rc) in results.items() if rc == 0]

    assert won, results
    for (_, stderr), rc in results.values():
        if rc != 0:
            assert rc == 2 and "Traceback" not in stderr, stderr
            assert "another append or remove onto version" in stderr or "run it again" in stderr, stderr
    rows = _all(out)
    expected = set(range(100)).union(*(set(new_rows[name]) for name in won))
    assert set(rows) == expected, (sorted(set(rows) ^ expected), results)
    assert all(rows[i][1] == f"{name} {i}" for name in won for i in new_rows[name])
    assert not os.path.exists(os.path.join(out, "_derive", dataset_writer.read_latest(out), "_BUILDING"))
    # the dataset takes the next append at once, whichever way the race went
    proc = _build(_config(tmp_path, _write_manifest(tmp_path / "m_c.jsonl", [500]), out), "--append")
    assert proc.returncode == 0, proc.stderr
    assert 500 in _all(out)
