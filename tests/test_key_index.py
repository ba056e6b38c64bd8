"""Key indexes: the format, the build writing one per split, look-up by key (API and
CLI, local and S3), and repeated keys in one build (an error, or ``dedup: key``)."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tfrecord_io
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.dataset.keyed_dataset import NoKeyIndexError, _split_of, open_dataset
from tfrecord_io.format import key_index as ki
from tfrecord_io.pipelines.building import placement
from tfrecord_io.pipelines.building.build_job import run_build

from tests.pipeline_support import IN_PROCESS, build_config, options, run_cli

# ---------------------------------------------------------------------- the format


def _text(value):
    """A parsed bytes feature of one value as text (bytes, or an array of one bytes)."""
    return (value if isinstance(value, bytes) else value[0]).decode()


def _entries(n):
    keys = sorted(f"k{i * 7919 % 100003:06d}" for i in range(n))
    return [ki.Entry(k, i % 5, i * 100, 84, ki.content_hash(k.encode())) for i, k in enumerate(keys)]


def test_key_index_round_trip_probe_and_scan(tmp_path):
    entries = _entries(3000)  # 12 blocks of 256
    path = str(tmp_path / "x.keyindex")
    writer = ki.write_key_index(path, entries)
    assert writer.entries == 3000 and writer.bytes == os.path.getsize(path)
    assert writer.sha256 == dataset_writer.sha256_file(path)
    with ki.KeyIndexReader(path, size=writer.bytes) as reader:
        assert len(reader) == 3000 and reader.blocks == 12
        for e in random.Random(1).sample(entries, 200) + [entries[0], entries[-1], entries[256], entries[255]]:
            assert reader.get(e.key) == e
        for missing in ("", "a", "k", "k0000000", "zzz", entries[10].key + "x"):
            assert reader.get(missing) is None
        assert list(reader) == entries


_key_text = st.text(alphabet="abc\u00e9\x00", max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    base=st.sets(_key_text, max_size=700),
    extra=st.sets(_key_text, max_size=60),
    drop=st.sets(st.integers(0, 699), max_size=40),
)
def test_columns_drop_and_merge_like_a_plain_sort(tmp_path, base, extra, drop):
    """Carrying a key index into the next version by columns (read whole, drop some
    entries, merge the new ones in, write by blocks) gives the file an entry-by-entry
    writer gives for the same entries sorted: byte for byte, whatever the keys' lengths
    (empty keys, multi-byte and NUL characters) and wherever the drops and inserts fall."""
    base_keys = sorted(k.encode() for k in base)
    new_keys = sorted(k.encode() for k in extra - base)
    kept = [k for i, k in enumerate(base_keys) if i not in drop]

    def entry(k, shard):
        return ki.Entry(k.decode(), shard, len(k) * 3, len(k) + 1, ki.content_hash(k + bytes([shard])))

    base_entries = [entry(k, 1) for k in base_keys]
    src = str(tmp_path / "base.keyindex")
    ki.write_key_index(src, base_entries)
    with ki.KeyIndexReader(src) as reader:
        cols = reader.columns()
    assert [cols.key(i) for i in range(len(cols))] == base_keys
    keep = np.array([i not in drop for i in range(len(base_keys))], dtype=bool)
    added = [entry(k, 2) for k in reversed(new_keys)]  # out of order: sorted() puts them right
    new_cols = ki.KeyColumns.from_entries(
        [e.key.encode() for e in added],
        [e.shard for e in added],
        [e.offset for e in added],
        [e.length for e in added],
        b"".join(e.hash for e in added),
    ).sorted()
    got = str(tmp_path / "got.keyindex")
    writer = ki.KeyIndexWriter(got, block_entries=7)
    writer.add_columns(cols.kept(keep).merged(new_cols))
    writer.close()
    want = str(tmp_path / "want.keyindex")
    expected = sorted([entry(k, 1) for k in kept] + [entry(k, 2) for k in new_keys], key=lambda e: e.key.encode())
    ki.write_key_index(want, [])  # (an empty one is valid too)
    plain = ki.KeyIndexWriter(want, block_entries=7)
    plain.add_all(expected)
    plain.close()
    with open(got, "rb") as a, open(want, "rb") as b:
        assert a.read() == b.read()
    if kept and new_keys:
        with pytest.raises(ValueError, match="given twice"):
            cols.kept(keep).merged(ki.KeyColumns.from_entries([kept[0]], [0], [0], [0], bytes(16)))


def test_key_index_refuses_repeated_or_unsorted_keys(tmp_path):
    writer = ki.KeyIndexWriter(str(tmp_path / "x.keyindex"))
    writer.add("b", 0, 0, 1, bytes(16))
    with pytest.raises(ValueError, match="'b' given twice"):
        writer.add("b", 0, 0, 1, bytes(16))
    with pytest.raises(ValueError, match="'a' given out of order"):
        writer.add("a", 0, 0, 1, bytes(16))
    with pytest.raises(ValueError, match="given twice"):
        writer.add_many([b"c", b"c"], [0, 0], [0, 0], [1, 1], bytes(32))
    writer.abort()
    assert os.listdir(tmp_path) == []


def test_key_index_corruption_is_named(tmp_path):
    path = str(tmp_path / "x.keyindex")
    ki.write_key_index(path, _entries(1000))
    data = bytearray(open(path, "rb").read())
    data[100] ^= 0xFF  # inside block 0
    bad = str(tmp_path / "bad.keyindex")
    open(bad, "wb").write(bytes(data))
    reader = ki.KeyIndexReader(bad)
    with pytest.raises(ki.KeyIndexError, match="block 0 does not match its CRC32C") as err:
        reader.get(_entries(1000)[3].key)
    assert err.value.path == bad
    data = bytearray(open(path, "rb").read())
    data[-40] ^= 0xFF  # the footer
    open(bad, "wb").write(bytes(data))
    with pytest.raises(ki.KeyIndexError, match="footer does not match"):
        ki.KeyIndexReader(bad)
    open(bad, "wb").write(b"not an index at all, but long enough for a trailer")
    with pytest.raises(ki.KeyIndexError, match="not a key index"):
        ki.KeyIndexReader(bad)


def test_lookup_finds_the_split_as_the_build_placed_it():
    cutoffs = placement.split_cutoffs({"train": 0.7, "validation": 0.1, "test": 0.2})
    for i in range(2000):
        key = f"row-{i}"
        assert _split_of(key, cutoffs, 3) == placement.place(key, cutoffs, 3).split


# ---------------------------------------------------------------------- built datasets


def _manifest(tmp_path, ids, name="m.jsonl"):
    path = tmp_path / name
    with open(path, "w") as f:
        for n, i in enumerate(ids):
            f.write(
                json.dumps({"id": i, "text": f"text of {i} #{n}", "label": i % 3 if isinstance(i, int) else 0}) + "\n"
            )
    return path


def _config(tmp_path, manifest, **extra):
    cfg = {
        "name": "rows",
        "input": {"manifest": str(manifest)},
        "key": "id",
        "columns": {"id": "int", "text": "text", "label": {"encoder": "int"}},
        "splits": {"train": 0.6, "test": 0.4},
        "sharding": {"num_shards": 3},
        "output": {"dir": str(tmp_path / "out")},
        **extra,
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("keyed")
    config = _config(tmp_path, _manifest(tmp_path, list(range(200))))
    run_build(build_config(config, tmp_path / "out", "v1"), options(IN_PROCESS), progress=False)
    return tmp_path, str(tmp_path / "out"), config


def test_build_writes_a_key_index_per_split_listed_with_its_checksum(built):
    _, out, _ = built
    version_dir = os.path.join(out, "v1")
    info = dataset_writer.load_info(version_dir)
    assert not os.path.exists(os.path.join(version_dir, "_keys"))  # the parts are gone
    assert [name for name, _ in info["placement"]["cutoffs"]] == list(yaml.safe_load(open(built[2]))["splits"])
    seen = set()
    for split, entry in info["splits"].items():
        note = entry["key_index"]
        path = os.path.join(version_dir, note["path"])
        assert note["path"] == f"rows-{split}.keyindex"
        assert note["entries"] == entry["records"] and note["sha256"] == dataset_writer.sha256_file(path)
        # every entry points at the record with that id, whose bytes hash as indexed
        shards = [os.path.join(version_dir, s["path"]) for s in entry["shards"]]
        by_offset = {}
        for n, shard in enumerate(shards):
            idx = tfrecord_io.load_index(shard + ".index")
            records = list(tfrecord_io.tfrecord_iterator(shard))
            for off, rec in zip(idx.offsets.tolist(), records):
                by_offset[(n, off)] = bytes(rec)
        with ki.KeyIndexReader(path) as reader:
            for e in reader:
                data = by_offset.pop((e.shard, e.offset))
                assert len(data) == e.length and ki.content_hash(data) == e.hash
                assert tfrecord_io.parse_example(data)["id"].tolist() == [int(e.key)]
                seen.add(int(e.key))
        assert not by_offset  # one entry per record
    assert seen == set(range(200))
    assert dataset_writer.verify_version(version_dir, info) == []
    # a key index changed after the build is found by the version's checks
    path = os.path.join(version_dir, info["splits"]["train"]["key_index"]["path"])
    original = open(path, "rb").read()
    try:
        open(path, "wb").write(original[:-1] + bytes([original[-1] ^ 1]))
        assert any("keyindex" in p for p in dataset_writer.verify_version(version_dir, info))
    finally:
        open(path, "wb").write(original)


def test_open_dataset_get_and_get_many(built):
    _, out, _ = built
    with tfrecord_io.open_dataset(out) as ds:
        assert ds.version == "v1" and len(ds) == 200
        for i in (0, 7, 123, 199):
            ex = ds.get(str(i))
            assert ex["id"].tolist() == [i] and ex["label"].tolist() == [i % 3]
            assert _text(ex["text"]) == f"text of {i} #{i}"
        assert ds.get("200") is None and ds.get("nope", "x") == "x"
        many = ds.get_many(["3", "missing", "150"])
        assert many["missing"] is None and many["3"]["id"].tolist() == [3] and many["150"]["id"].tolist() == [150]
        assert "5" in ds and "-1" not in ds


def test_get_checks_the_record_crc(built, tmp_path):
    import shutil

    _, out, _ = built
    copy = str(tmp_path / "copy")
    shutil.copytree(out, copy)
    with open_dataset(copy) as ds:
        split, path, entry = ds.locate("42")
    with open(path, "r+b") as f:
        f.seek(entry.offset + 12 + 2)
        b = f.read(1)
        f.seek(entry.offset + 12 + 2)
        f.write(bytes([b[0] ^ 0x40]))
    with open_dataset(copy) as ds:
        with pytest.raises(tfrecord_io.CorruptRecordError, match="CRC32C") as err:
            ds.get("42")
        assert err.value.path == path and err.value.offset == entry.offset
        assert ds.get("43")["id"].tolist() == [43]


def test_lookup_cli(built, tmp_path):
    _, out, _ = built
    proc = run_cli("lookup", out, "12", "77", "--json", "--no-progress", *IN_PROCESS)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["key"] for r in rows] == ["12", "77"] and all(r["found"] for r in rows)
    assert rows[0]["example"]["id"] == [12] and rows[1]["example"]["text"] == "text of 77 #77"
    proc = run_cli("lookup", out, "12", "nope", "--version", "v1", "--no-progress")
    assert proc.returncode == 1
    assert "text of 12" in proc.stdout and "1 of 2 keys not in version v1: 'nope'" in proc.stderr
    proc = run_cli("lookup", out, "12", "--version", "v9", "--no-progress")
    assert proc.returncode == 2 and "v9" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("lookup", out, "--no-progress")
    assert proc.returncode == 2


def test_version_without_key_index_names_the_fix(built, tmp_path):
    import shutil

    _, out, _ = built
    copy = tmp_path / "old"
    shutil.copytree(out, copy)
    info_path = copy / "v1" / "tfrecord_io_info.json"
    info = json.loads(info_path.read_text())
    for entry in info["splits"].values():
        entry.pop("key_index")
    info_path.write_text(json.dumps(info))
    with pytest.raises(NoKeyIndexError, match="no key index .*tfrecord-io build"):
        open_dataset(str(copy))
    proc = run_cli("lookup", str(copy), "1", "--no-progress")
    assert proc.returncode == 2 and "no key index" in proc.stderr and "tfrecord-io build" in proc.stderr


# ---------------------------------------------------------------------- repeated keys


def test_a_key_twice_is_an_error_naming_both_rows(tmp_path):
    manifest = _manifest(tmp_path, [1, 2, 3, 2, 5])
    config = _config(tmp_path, manifest)
    proc = run_cli("build", config, "--version", "v1", "--no-progress", *IN_PROCESS)
    assert proc.returncode != 0
    lines = manifest.read_text().splitlines(keepends=True)
    second, fourth = len(lines[0]), sum(len(line) for line in lines[:3])
    assert f"key '2' is in the input twice (manifest byte offset {second} and manifest byte offset {fourth})" in (
        proc.stderr
    )
    assert dataset_writer.read_latest(str(tmp_path / "out")) is None


def test_dedup_key_keeps_the_first_row_and_counts_the_rest(tmp_path):
    manifest = _manifest(tmp_path, [1, 2, 3, 2, 5, 2, 1])
    config = _config(tmp_path, manifest, dedup="key")
    summary = run_build(build_config(config, tmp_path / "out", "v1"), options(IN_PROCESS), progress=False)
    info = dataset_writer.load_info(str(tmp_path / "out" / "v1"))
    assert info["rows_in"] == 7 and info["records"] == 4 and info["duplicates"] == 3 and info["dedup"] == "key"
    assert summary.written == 4 and "duplicates dropped: 3 (dedup: key)" in "\n".join(summary.lines())
    with open_dataset(str(tmp_path / "out")) as ds:
        # the first row of each key in the input is kept (text "#n" is its line number)
        assert _text(ds.get("2")["text"]) == "text of 2 #1"
        assert _text(ds.get("1")["text"]) == "text of 1 #0"
    page = str(tmp_path / "report.html")
    proc = run_cli("report", str(tmp_path / "out"), "--output", page, "--no-progress", *IN_PROCESS)
    assert proc.returncode == 0, proc.stderr
    assert "duplicates dropped: <b>3</b> (dedup: key)" in open(page).read()
    kept = {d["key"]: d["kept"] for d in info["duplicate_examples"]}
    assert kept["2"] == len(manifest.read_text().splitlines(keepends=True)[0])


def test_validate_checks_the_key_indexes(built, tmp_path):
    import shutil

    from tfrecord_io.pipelines.validate_job import run_validate

    _, out, _ = built
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    version_dir = copy / "v1"
    report = run_validate([str(copy)], options(IN_PROCESS), progress=False)
    assert report["ok"], report["problems"]
    info = json.loads((version_dir / "tfrecord_io_info.json").read_text())
    note = info["splits"]["train"]["key_index"]
    path = str(version_dir / note["path"])
    # an index whose entries point one byte off, listed with its own (matching) checksum
    with ki.KeyIndexReader(path) as reader:
        entries = [e._replace(offset=e.offset + (1 if n == 5 else 0)) for n, e in enumerate(reader)]
    writer = ki.write_key_index(path, entries)
    note.update(bytes=writer.bytes, sha256=writer.sha256)
    (version_dir / "tfrecord_io_info.json").write_text(json.dumps(info))
    report = run_validate([str(copy)], options(IN_PROCESS), progress=False)
    assert not report["ok"]
    (problem,) = report["problems"]
    assert problem["kind"] == "key_index" and problem["path"] == path
    assert "do not match the records' offsets and lengths" in problem["reason"]
    # and one changed after the build: its checksum
    note.update(sha256="0" * 64)
    (version_dir / "tfrecord_io_info.json").write_text(json.dumps(info))
    report = run_validate([str(copy)], options(IN_PROCESS), progress=False)
    assert [p["reason"] for p in report["problems"]] == ["size or SHA-256 differs from tfrecord_io_info.json"]


# ---------------------------------------------------------------------- diff


def test_diff_of_two_builds(tmp_path):
    from tfrecord_io.pipelines.diff_job import diff_versions

    out = tmp_path / "out"
    config = _config(tmp_path, _manifest(tmp_path, list(range(0, 60))))
    run_build(build_config(config, out, "v1"), options(IN_PROCESS), progress=False)
    # v2: 0-9 gone, 60-69 new, 20-24 with other text
    with open(tmp_path / "m2.jsonl", "w") as f:
        for i in range(10, 70):
            text = f"new text of {i}" if 20 <= i < 25 else f"text of {i} #{i}"
            f.write(json.dumps({"id": i, "text": text, "label": i % 3}) + "\n")
    config2 = _config(tmp_path, tmp_path / "m2.jsonl")
    run_build(build_config(config2, out, "v2"), options(IN_PROCESS), progress=False)
    result = diff_versions(str(out), "v1", "v2")
    assert (result["a"], result["b"]) == ("v1", "v2")
    got = {k: sorted(int(x) for s in result["splits"].values() for x in s[k]) for k in ("added", "removed", "changed")}
    assert got == {"added": list(range(60, 70)), "removed": list(range(10)), "changed": list(range(20, 25))}
    assert sum(s["unchanged"] for s in result["splits"].values()) == 45
    proc = run_cli("diff", str(out), "v1", "--json", "--no-progress")  # B defaults to LATEST (v2)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == result
    proc = run_cli("diff", str(out), "v1", "v2", "--no-progress")
    assert proc.returncode == 0 and "diff v1 -> v2" in proc.stdout and "changed: " in proc.stdout
    proc = run_cli("diff", str(out), "v1", "v7", "--no-progress")
    assert proc.returncode == 2 and "v7" in proc.stderr and "Traceback" not in proc.stderr


def test_dedup_content_drops_byte_identical_examples_under_other_keys(tmp_path):
    path = tmp_path / "m.jsonl"
    rows = [("a", "x"), ("b", "y"), ("c", "x"), ("d", "x"), ("e", "z"), ("b", "y2")]
    path.write_text("".join(json.dumps({"id": i, "text": t, "label": 1}) + "\n" for i, t in rows))
    cfg = {
        "name": "rows",
        "input": {"manifest": str(path)},
        "key": "id",
        "columns": {"text": "text", "label": {"encoder": "int"}},  # the key is not in the Example
        "splits": {"train": 0.5, "test": 0.5},
        "sharding": {"num_shards": 3},
        "dedup": "content",
        "output": {"dir": str(tmp_path / "out")},
    }
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    run_build(build_config(str(tmp_path / "c.yaml"), tmp_path / "out", "v1"), options(IN_PROCESS), progress=False)
    version_dir = str(tmp_path / "out" / "v1")
    info = dataset_writer.load_info(version_dir)
    # c and d hold a's Example (a's key sorts first: kept); the second b by key
    assert info["rows_in"] == 6 and info["records"] == 3 and info["duplicates"] == 3
    same = sorted((d["key"], d["kept_key"]) for d in info["duplicate_examples"] if d.get("same_content"))
    assert same == [("c", "a"), ("d", "a")]
    with open_dataset(str(tmp_path / "out")) as ds:
        assert _text(ds.get("a")["text"]) == "x" and ds.get("c") is None and ds.get("d") is None
        assert _text(ds.get("b")["text"]) == "y" and _text(ds.get("e")["text"]) == "z"
    assert dataset_writer.verify_version(version_dir, info) == []
    from tfrecord_io.pipelines.validate_job import run_validate

    report = run_validate([str(tmp_path / "out")], options(IN_PROCESS), progress=False)
    assert report["ok"], report["problems"]
