"""End-to-end tests of the build job on DirectRunner with real media."""

from __future__ import annotations

import glob
import json
import os

import pytest
import yaml

import tfrecord_io
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.pipelines.building.build_config import load_config
from tfrecord_io.pipelines.building.build_job import run_build
from tfrecord_io.pipelines.building.encoders_config import make_encoders
from tfrecord_io.transforms import decode_example

from tests.pipeline_support import IN_PROCESS, TWO_WORKERS, build_config, options, run_cli, start_cli


@pytest.fixture(scope="module")
def media(demo_media):
    return demo_media(18)


def _shard_bytes(version_dir):
    out = {}
    for path in sorted(glob.glob(os.path.join(version_dir, "*", "*.tfrecord-*"))):
        with open(path, "rb") as f:
            out[os.path.relpath(path, version_dir)] = f.read()
    return out


def test_build_from_manifest_writes_splits_indexes_info_and_latest(media, tmp_path):
    root, config = media
    cfg = build_config(config, tmp_path / "out", "v1")
    summary = run_build(cfg, options(), progress=False)
    version_dir = str(tmp_path / "out" / "v1")
    assert dataset_writer.read_latest(str(tmp_path / "out")) == "v1"
    info = dataset_writer.load_info(version_dir)
    # 18 good rows + 1 deliberately truncated JPEG
    assert info["rows_in"] == 19 and info["records"] == 18 and info["rejected"] == 1
    assert summary.written + summary.rejected == summary.rows_in
    assert set(info["splits"]) <= {"train", "validation", "test"}
    total = 0
    encoders = make_encoders(cfg["columns"])
    for split, entry in info["splits"].items():
        assert entry["num_shards"] == 2 and len(entry["shards"]) == 2
        for shard in entry["shards"]:
            path = os.path.join(version_dir, shard["path"])
            assert os.path.basename(path).startswith(f"demo-{split}.tfrecord-0000")
            assert shard["sha256"] == dataset_writer.sha256_file(path)
            index = tfrecord_io.load_index(os.path.join(version_dir, shard["index"]))
            assert index.matches(os.path.getsize(path)) and len(index) == shard["records"]
            for record in tfrecord_io.tfrecord_iterator(path):
                decoded = decode_example(record, encoders)
                assert decoded["image"].shape == (64, 64, 3)
                assert decoded["label"] in (0, 1, 2)
                assert decoded["audio"].sample_rate == 16000
                total += 1
    assert total == 18
    rejected = [json.loads(line) for line in open(os.path.join(version_dir, "rejected-00000-of-00001.jsonl"))]
    assert len(rejected) == 1
    assert rejected[0]["column"] == "image" and rejected[0]["stage"] == "decode"
    assert "broken.jpg" in rejected[0]["reason"] and rejected[0]["row"]["id"] == "demo-broken"


def test_build_from_directory_layout(tmp_path):
    from PIL import Image

    for label, color in (("cat", (200, 10, 10)), ("dog", (10, 200, 10))):
        os.makedirs(tmp_path / "tree" / label)
        for i in range(3):
            Image.new("RGB", (8 + i, 6), color).save(tmp_path / "tree" / label / f"{i}.png")
    config = tmp_path / "dir.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "pets",
                "input": {"directory": "tree"},
                "columns": {
                    "image": {"encoder": "image", "column": "path"},
                    "label": {"encoder": "label", "vocabulary": ["cat", "dog"]},
                },
                "sharding": {"num_shards": 1},
                "output": {"dir": "out", "version": "v1"},
            }
        )
    )
    summary = run_build(load_config(str(config)), options(), progress=False)
    assert (summary.rows_in, summary.written, summary.rejected) == (6, 6, 0)
    path = os.path.join(summary.version_dir, "train", "pets-train.tfrecord-00000-of-00001")
    enc = {
        "image": make_encoders({"image": {"encoder": "image"}})["image"],
        "label": make_encoders({"label": {"encoder": "label", "vocabulary": ["cat", "dog"]}})["label"],
    }
    got = sorted(
        (decode_example(r, enc)["label"], decode_example(r, enc)["image"].shape)
        for r in tfrecord_io.tfrecord_iterator(path)
    )
    assert got == [(0, (6, 8, 3)), (0, (6, 9, 3)), (0, (6, 10, 3)), (1, (6, 8, 3)), (1, (6, 9, 3)), (1, (6, 10, 3))]


def test_rerun_is_byte_identical_across_worker_counts(media, tmp_path):
    root, config = media
    run_build(build_config(config, tmp_path / "a", "v1"), options(IN_PROCESS), progress=False)
    run_build(build_config(config, tmp_path / "b", "v1"), options(TWO_WORKERS), progress=False)
    first = _shard_bytes(str(tmp_path / "a" / "v1"))
    second = _shard_bytes(str(tmp_path / "b" / "v1"))
    assert first and first == second


def test_different_seed_changes_order_but_not_content(media, tmp_path):
    root, config = media
    run_build(build_config(config, tmp_path / "a", "v1"), options(), progress=False)
    run_build(
        load_config(config, [("output.dir", str(tmp_path / "b")), ("output.version", "v1"), ("seed", 7)]),
        options(),
        progress=False,
    )
    a = [
        bytes(r)
        for p in sorted(glob.glob(str(tmp_path / "a/v1/*/*tfrecord-*[0-9]")))
        for r in tfrecord_io.tfrecord_iterator(p)
    ]
    b = [
        bytes(r)
        for p in sorted(glob.glob(str(tmp_path / "b/v1/*/*tfrecord-*[0-9]")))
        for r in tfrecord_io.tfrecord_iterator(p)
    ]
    assert sorted(a) == sorted(b) and a != b


def test_failed_build_leaves_previous_version_current(media, tmp_path, monkeypatch):
    root, config = media
    out = tmp_path / "out"
    run_build(build_config(config, out, "v1"), options(), progress=False)
    import tfrecord_io.pipelines.building.write as build_module

    calls = {"n": 0}

    class FailingWriter(build_module.RecordWriter):
        def close(self):
            calls["n"] += 1
            if calls["n"] == 2:  # the second shard dies while being written
                raise OSError("injected failure: disk full")
            super().close()

    monkeypatch.setattr(build_module, "RecordWriter", FailingWriter)
    with pytest.raises(Exception, match="injected failure"):
        run_build(build_config(config, out, "v2"), options(), progress=False)
    assert dataset_writer.read_latest(str(out)) == "v1"
    assert not os.path.exists(out / "v2" / dataset_writer.INFO_NAME)
    assert os.path.exists(out / "v1" / dataset_writer.INFO_NAME)


def test_killed_build_leaves_previous_version_current(media, tmp_path):
    import signal
    import time

    root, config = media
    out = tmp_path / "out"
    run_build(build_config(config, out, "v1"), options(), progress=False)
    proc = start_cli(
        "build",
        config,
        "--output",
        str(out),
        "--version",
        "v2",
        "--no-progress",
        *TWO_WORKERS,
        capture=False,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not os.path.exists(out / "v2") and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "the build finished before it could be killed"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert dataset_writer.read_latest(str(out)) == "v1"
    assert not os.path.exists(out / "v2" / dataset_writer.INFO_NAME)


def test_target_shard_size_derives_shard_count(media, tmp_path):
    """The shard count of a split comes from its estimated bytes (the stored size of
    each row's media files plus its other values), summed in the pipeline before any
    encoding; computed here independently from the manifest and the files."""
    import csv
    import math

    from tfrecord_io.pipelines.building import placement

    root, config = media
    cfg = load_config(
        config,
        [("output.dir", str(tmp_path / "o")), ("output.version", "v1"), ("sharding", {"target_shard_bytes": "100KB"})],
    )
    sources = {n: s.get("column") or n for n, s in cfg["columns"].items()}
    media_cols = {sources[c] for c in ("image", "audio")}
    cutoffs = placement.split_cutoffs({k: v for k, v in cfg["splits"].items() if v > 0})
    expected_bytes = {name: 0 for name, _ in cutoffs}
    with open(cfg["input"]["manifest"], newline="") as f:
        for row in csv.DictReader(f):
            key = row[cfg["key"]] if cfg.get("key") else json.dumps(row, sort_keys=True, ensure_ascii=False)
            split = placement.place(key, cutoffs, cfg["seed"]).split
            size = sum(
                (os.path.getsize(os.path.join(root, v)) if os.path.exists(os.path.join(root, v)) else 0)
                if c in media_cols
                else len(str(v))
                for c, v in row.items()
            )
            expected_bytes[split] += size
    summary = run_build(cfg, options(), progress=False)
    by_split = {}
    for s in summary.shards:
        by_split.setdefault(s["split"], []).append(s)
    assert {split: len(v) for split, v in by_split.items()} == {
        split: max(1, math.ceil(b / 100_000)) for split, b in expected_bytes.items()
    }
    assert sum(len(v) for v in by_split.values()) > 3


def test_forked_workers_only_for_the_direct_runners_multi_process_mode():
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.pipelines.runtime.local_workers import worker_count

    assert worker_count(PipelineOptions(TWO_WORKERS)) == 2
    assert worker_count(PipelineOptions(IN_PROCESS)) is None
    assert worker_count(PipelineOptions(["--runner=FlinkRunner"])) is None
    assert worker_count(PipelineOptions(["--runner=PrismRunner", "--direct_running_mode=multi_processing"])) is None
    assert (
        worker_count(PipelineOptions([*TWO_WORKERS, "--environment_type=EXTERNAL", "--environment_config=localhost:1"]))
        is None
    )


def test_cli_build_on_forked_workers_matches_one_in_process_worker(media, tmp_path):
    """The CLI's two local workers are forked from the launcher (its log says so), and
    give the same shards and rejected rows as one in-process worker; no ``_rejected/``
    parts or ``_BUILDING`` marker is left in the published version."""
    _, config = media
    run_build(build_config(config, tmp_path / "a", "v1"), options(IN_PROCESS), progress=False)
    log = tmp_path / "build.log"
    run_cli(
        "build",
        config,
        "--output",
        str(tmp_path / "b"),
        "--version",
        "v1",
        "--no-progress",
        "--log-file",
        str(log),
        *TWO_WORKERS,
        check=True,
    )
    assert "forked 2 local SDK workers" in log.read_text()
    a, b = str(tmp_path / "a" / "v1"), str(tmp_path / "b" / "v1")
    assert _shard_bytes(a) and _shard_bytes(a) == _shard_bytes(b)
    rejected = "rejected-00000-of-00001.jsonl"
    with open(os.path.join(a, rejected), "rb") as fa, open(os.path.join(b, rejected), "rb") as fb:
        assert fa.read() == fb.read()
    assert sorted(os.listdir(b)) == sorted(os.listdir(a))
    assert not os.path.exists(os.path.join(b, "_rejected")) and not os.path.exists(os.path.join(b, "_BUILDING"))
