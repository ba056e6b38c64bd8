"""``BuildDataset`` as a PTransform, placement that survives moving the data, and the
build's inputs on a real S3 server (versitygw): a folder given as a bucket prefix, a
manifest in a bucket with paths relative to it."""

from __future__ import annotations

import csv
import io
import json
import os
import shutil

import apache_beam as beam
import pytest
import yaml
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that

import tfrecord_io
from tfrecord_io.dataset import dataset_writer, datasets
from tfrecord_io.pipelines.building import commit
from tfrecord_io.pipelines.building.build_config import load_config
from tfrecord_io.pipelines.building.build_job import run_build
from tfrecord_io.storage import files

from tests.pipeline_support import IN_PROCESS, options, run_cli

LABELS = ("cat", "dog", "owl")


def _jpeg(path, color, size=(12, 10)):
    from PIL import Image

    Image.new("RGB", size, color).save(path, "JPEG", quality=90)


@pytest.fixture(scope="module")
def demo(demo_media):
    return demo_media(18)


def _tree(root, n=30):
    """``root/<label>/<file>.jpg``: n small JPEGs over three labels, one broken file."""
    for i in range(n):
        label = LABELS[i % 3]
        os.makedirs(os.path.join(root, label), exist_ok=True)
        _jpeg(os.path.join(root, label, f"im{i:03d}.jpg"), (8 * i % 256, 90, 250 - 7 * i))
    with open(os.path.join(root, "owl", "broken.jpg"), "wb") as f:
        f.write(b"\xff\xd8\xff\xe0 not really a jpeg")
    return root


def _dir_config(path, directory, out, **extra):
    cfg = {
        "name": "pets",
        "input": {"directory": directory},
        "columns": {
            "image": {"encoder": "image", "column": "path"},
            "label": {"encoder": "label", "vocabulary": list(LABELS)},
        },
        "splits": {"train": 0.6, "validation": 0.4},
        "sharding": {"num_shards": 2},
        "output": {"dir": out, "version": "v1"},
        **extra,
    }
    with open(path, "w") as f:
        yaml.safe_dump(cfg, f)
    return str(path)


def _shards(version_dir):
    info = datasets.load_info(version_dir)
    return {s["path"]: files.read_bytes(s["abspath"]) for s in dataset_writer.dataset_shards(version_dir, info)}


def _rejected(version_dir):
    path = files.join(version_dir, commit.REJECTED_NAME)
    return files.read_bytes(path) if files.exists(path) else b""


def test_build_dataset_over_create_gives_the_clis_shards(demo, tmp_path):
    """The same rows through ``beam.Create | BuildDataset`` and through ``tfrecord-io
    build``: byte-identical shards and rejected rows; the transform's output is the
    published version's dataset_info.json."""
    root, config = demo
    cfg = load_config(config, [("output.dir", str(tmp_path / "cli")), ("output.version", "v1")])
    run_build(cfg, options(), progress=False)
    with open(os.path.join(root, "manifest.csv"), "rb") as f:
        data = f.read()
    # the CLI's rows know where they are in the manifest: by the byte offset of their line
    lines = data.splitlines(keepends=True)
    starts = [sum(map(len, lines[:i])) for i in range(1, len(lines))]
    rows = [dict(r, _row=at) for at, r in zip(starts, csv.DictReader(io.StringIO(data.decode(), newline="")))]
    assert len(rows) == len(lines) - 1 == 19
    rows.reverse()  # the input's order does not matter
    with open(config) as f:
        raw = yaml.safe_load(f)
    build = tfrecord_io.BuildDataset(raw, base_dir=root, output_dir=str(tmp_path / "ptransform"), version="v1")
    with beam.Pipeline(options=options(IN_PROCESS)) as p:
        info = p | beam.Create(rows) | build

        def check(infos):
            assert len(infos) == 1
            assert (infos[0]["rows_in"], infos[0]["records"], infos[0]["rejected"]) == (19, 18, 1)

        assert_that(info, check)
    assert build.version_dir == str(tmp_path / "ptransform" / "v1")
    assert datasets.read_latest(str(tmp_path / "ptransform")) == "v1"
    a, b = str(tmp_path / "cli" / "v1"), str(tmp_path / "ptransform" / "v1")
    assert _shards(a) and _shards(a) == _shards(b)
    assert _rejected(a) == _rejected(b) and b"broken.jpg" in _rejected(b)


def test_rows_with_media_bytes_build_without_files(tmp_path):
    """Media given as bytes in the rows (no base_dir, no files)."""
    import io

    from PIL import Image

    def jpeg(color):
        buf = io.BytesIO()
        Image.new("RGB", (9, 7), color).save(buf, "JPEG")
        return buf.getvalue()

    rows = [{"id": f"r{i}", "image": jpeg((10 * i, 20, 30)), "label": LABELS[i % 3]} for i in range(10)]
    rows.append({"id": "bad", "image": b"not an image", "label": "cat"})
    config = {
        "name": "bytes",
        "key": "id",
        "columns": {"image": {"encoder": "image"}, "label": {"encoder": "label", "vocabulary": "auto"}},
        "sharding": {"num_shards": 1},
        "output": {"dir": str(tmp_path / "out"), "version": "v1"},
    }
    with beam.Pipeline(options=options(IN_PROCESS)) as p:
        _ = p | beam.Create(rows) | tfrecord_io.BuildDataset(config)
    info = datasets.load_info(str(tmp_path / "out" / "v1"))
    assert (info["records"], info["rejected"]) == (10, 1)
    assert info["encoders"]["label"]["vocabulary"] == sorted(LABELS)  # `auto`: found by the combiner
    bad = json.loads(_rejected(str(tmp_path / "out" / "v1")))
    assert bad["row"]["id"] == "bad" and bad["row"]["image"].startswith("sha256:")


def test_two_copies_of_a_folder_give_identical_shards(tmp_path):
    """Keys are relative to the input root: the same folder copied elsewhere (another
    mount, another machine) gives the same splits and byte-identical shards, with the
    whole row as the key and with ``key: path``."""
    first = _tree(str(tmp_path / "a" / "images"))
    second = str(tmp_path / "elsewhere" / "deeper" / "pictures")
    shutil.copytree(first, second)
    for extra in ({}, {"key": "path"}):
        built = []
        for name, root in (("one", first), ("two", second)):
            out = str(tmp_path / f"out-{name}-{len(extra)}")
            cfg = load_config(_dir_config(tmp_path / f"{name}.yaml", root, out, **extra))
            summary = run_build(cfg, options(), progress=False)
            assert (summary.rows_in, summary.written, summary.rejected) == (31, 30, 1)
            built.append(os.path.join(out, "v1"))
        assert _shards(built[0]) == _shards(built[1])
        # the same row rejected (its reason names the file where it was read)
        bad = [json.loads(_rejected(b)) for b in built]
        assert bad[0]["row"] == bad[1]["row"] == {"path": "owl/broken.jpg", "label": "owl", "_row": "owl/broken.jpg"}
        assert first in bad[0]["reason"] and second in bad[1]["reason"]
        info = datasets.load_info(built[0])
        assert set(info["splits"]) == {"train", "validation"}


def test_manifest_keys_are_relative_to_its_folder(tmp_path):
    """A manifest with relative paths, copied with its media to another folder: the
    same shards (the row as the key holds the path as written, not as resolved)."""
    first = _tree(str(tmp_path / "one" / "data"))
    rows = [f"{label}/{name},{label}" for label in LABELS for name in sorted(os.listdir(os.path.join(first, label)))]
    with open(os.path.join(first, "manifest.csv"), "w") as f:
        f.write("path,label\n" + "\n".join(rows) + "\n")
    second = str(tmp_path / "two" / "moved")
    shutil.copytree(first, second)
    built = []
    for name, root in (("one", first), ("two", second)):
        path = _dir_config(tmp_path / f"m{name}.yaml", root, str(tmp_path / f"mout-{name}"))
        raw = yaml.safe_load(open(path))
        raw["input"] = {"manifest": os.path.join(root, "manifest.csv")}
        summary = run_build(load_config(None, [(k, v) for k, v in raw.items()]), options(), progress=False)
        assert (summary.written, summary.rejected) == (30, 1)
        built.append(summary.version_dir)
    assert _shards(built[0]) == _shards(built[1])


def test_shuffle_false_keeps_rows_in_key_order(tmp_path):
    root = _tree(str(tmp_path / "images"))
    cfg = load_config(
        _dir_config(tmp_path / "c.yaml", root, str(tmp_path / "out"), key="path", shuffle=False),
        [("sharding.num_shards", 1), ("splits", {"train": 1.0})],
    )
    summary = run_build(cfg, options(), progress=False)
    path = os.path.join(summary.version_dir, summary.shards[0]["path"])
    labels = [int(tfrecord_io.parse_example(bytes(r))["label"][0]) for r in tfrecord_io.tfrecord_iterator(path)]
    # key order: cat/..., dog/..., owl/... (the folder names sort the labels)
    assert labels == sorted(labels) and len(labels) == 30


def test_finalize_run_again_changes_nothing(demo, tmp_path):
    """A runner may run the finalize stage again: the second run finds
    dataset_info.json with its fingerprint, rewrites nothing, LATEST stays."""
    from tfrecord_io.pipelines.building.build_spec import BuildSpec

    root, config = demo
    cfg = load_config(config, [("output.dir", str(tmp_path / "o")), ("output.version", "v1")])
    summary = run_build(cfg, options(), progress=False)
    info_path = os.path.join(summary.version_dir, dataset_writer.INFO_NAME)
    before = open(info_path, "rb").read()
    info = json.loads(before)
    spec = BuildSpec(cfg, cfg["output"]["dir"], "v1", "run")
    again = commit.finalize(
        spec, [], {"rows": 0, "vocab": {}}, {}, {"state": "new", "fingerprint": info["fingerprint"]}
    )
    assert again["fingerprint"] == info["fingerprint"]
    assert open(info_path, "rb").read() == before
    assert dataset_writer.read_latest(str(tmp_path / "o")) == "v1"
    assert not os.path.exists(os.path.join(summary.version_dir, "_BUILDING"))


def test_a_row_without_a_column_is_rejected_not_fatal(tmp_path):
    _jpeg(tmp_path / "a.jpg", (1, 2, 3))
    lines = [
        {"id": "ok", "image": "a.jpg", "label": "cat"},
        {"id": "no-label", "image": "a.jpg"},
        {"image": "a.jpg", "label": "dog"},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    cfg = load_config(
        None,
        [
            ("name", "rows"),
            ("input", {"manifest": str(tmp_path / "m.jsonl")}),
            ("key", "id"),
            ("columns", {"image": {"encoder": "image"}, "label": {"encoder": "label", "vocabulary": ["cat", "dog"]}}),
            ("output", {"dir": str(tmp_path / "out"), "version": "v1"}),
        ],
    )
    summary = run_build(cfg, options(), progress=False)
    assert (summary.rows_in, summary.written, summary.rejected) == (3, 1, 2)
    reasons = {
        json.loads(line)["row"].get("id"): json.loads(line) for line in _rejected(summary.version_dir).splitlines()
    }
    assert reasons["no-label"]["column"] == "label" and "no such column" in reasons["no-label"]["reason"]
    assert reasons[None]["column"] == "id"  # no key: it cannot be placed by it


# ---------------------------------------------------------------- S3 (versitygw)


@pytest.fixture
def s3_fs(s3_server):
    FileSystems.set_options(PipelineOptions(s3_server.pipeline_args()))
    yield s3_server
    FileSystems.set_options(PipelineOptions([]))


def _upload_tree(local_root, url):
    for label in sorted(os.listdir(local_root)):
        for name in sorted(os.listdir(os.path.join(local_root, label))):
            with open(os.path.join(local_root, label, name), "rb") as f:
                files.write_bytes(files.join(url, label, name), f.read())


def test_s3_folder_and_manifest_inputs_match_the_local_build(s3_fs, s3_bucket, tmp_path):
    """``input.directory=s3://bucket/images`` (keys ``images/<label>/<file>``), the same
    folder under a second prefix, and a manifest in the bucket with paths relative to
    it: all three give the local folder's shards, byte for byte."""
    local = _tree(str(tmp_path / "images"))
    _upload_tree(local, s3_bucket + "/images")
    _upload_tree(local, s3_bucket + "/copy/of/images")
    flags = ["--no-progress", *IN_PROCESS, *s3_fs.pipeline_args()]
    out_local = str(tmp_path / "out-local")
    run_cli("build", _dir_config(tmp_path / "l.yaml", local, out_local), "--no-progress", *IN_PROCESS, check=True)
    want = _shards(os.path.join(out_local, "v1"))
    assert want
    for prefix in ("images", "copy/of/images"):
        out = f"{s3_bucket}/ds-{prefix.replace('/', '-')}"
        cfg = _dir_config(tmp_path / "s.yaml", f"{s3_bucket}/{prefix}", out)
        proc = run_cli("build", cfg, *flags)
        assert proc.returncode == 0, proc.stderr
        assert "written: 30" in proc.stdout and "rejected: 1" in proc.stdout, proc.stdout
        assert _shards(files.join(out, "v1")) == want
    # a manifest in the bucket, paths relative to its folder
    rows = [f"{label}/{name},{label}" for label in LABELS for name in sorted(os.listdir(os.path.join(local, label)))]
    files.write_bytes(s3_bucket + "/images/list.csv", ("path,label\n" + "\n".join(rows) + "\n").encode())
    cfg_path = _dir_config(tmp_path / "m.yaml", "unused", f"{s3_bucket}/ds-manifest")
    raw = yaml.safe_load(open(cfg_path))
    raw["input"] = {"manifest": s3_bucket + "/images/list.csv"}
    with open(cfg_path, "w") as f:
        yaml.safe_dump(raw, f)
    proc = run_cli("build", cfg_path, *flags)
    assert proc.returncode == 0, proc.stderr
    assert "written: 30" in proc.stdout, proc.stdout
    # the same rows as the folder's (path relative to the root, label): the same shards
    assert _shards(files.join(f"{s3_bucket}/ds-manifest", "v1")) == want


def test_s3_folder_that_does_not_exist_is_a_usage_error(s3_fs, s3_bucket, tmp_path):
    cfg = _dir_config(tmp_path / "s.yaml", f"{s3_bucket}/nothing-here", f"{s3_bucket}/ds")
    proc = run_cli("build", cfg, "--no-progress", *IN_PROCESS, *s3_fs.pipeline_args())
    assert proc.returncode == 2, proc.stderr
    assert "nothing-here" in proc.stderr and "no files" in proc.stderr, proc.stderr
    assert files.glob(f"{s3_bucket}/ds/**") == []


def test_the_pipelines_claim_is_idempotent_for_its_run_and_refuses_others(tmp_path):
    """``claim_for_run``, the claim stage: its own marker (the launcher's, or a retried
    stage's) goes on and keeps the launcher's host and pid; another live run's is
    refused; a dead run's leftovers are removed; a published version is reused only
    from the same fingerprint."""
    version_dir = str(tmp_path / "v1")
    launcher = dataset_writer.BuildClaim(version_dir, run_id="run-a")
    launcher.acquire()
    try:
        assert dataset_writer.claim_for_run(version_dir, "run-a", "fp")["state"] == "new"
        marker = dataset_writer.read_marker(version_dir)
        assert (marker["run_id"], marker["pid"]) == ("run-a", os.getpid())
        with pytest.raises(dataset_writer.VersionTaken):
            dataset_writer.claim_for_run(version_dir, "run-b", "fp")
    finally:
        launcher.release()
    # a dead attempt: a leftover shard and a marker without heartbeat
    os.makedirs(os.path.join(version_dir, "train"))
    open(os.path.join(version_dir, "train", "left-over"), "w").close()
    with open(os.path.join(version_dir, "_BUILDING"), "w") as f:
        json.dump({"run_id": "dead", "host": "elsewhere", "pid": None, "heartbeat": 0}, f)
    assert dataset_writer.claim_for_run(version_dir, "run-c", "fp")["state"] == "new"
    assert not os.path.exists(os.path.join(version_dir, "train", "left-over"))
    assert dataset_writer.read_marker(version_dir)["run_id"] == "run-c"
    assert dataset_writer.claim_for_run(version_dir, "run-c", "fp")["state"] == "new"  # a retried stage
    dataset_writer.write_info(version_dir, {"fingerprint": "fp", "name": "x"})
    assert dataset_writer.claim_for_run(version_dir, "run-d", "fp")["state"] == "published"
    with pytest.raises(dataset_writer.DatasetDirError, match=dataset_writer.FINGERPRINT_CONFLICT):
        dataset_writer.claim_for_run(version_dir, "run-d", "other")


def test_build_dataset_over_a_parquet_read(tmp_path):
    """The Parquet example of docs/build.md (BuildDataset): ``ReadFromParquet`` (one dict per row, images as a
    bytes column) | ``BuildDataset``; every Example decodes back to its row."""
    import io

    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    def jpeg(i):
        buf = io.BytesIO()
        Image.new("RGB", (6 + i % 4, 5), (9 * i, 40, 80)).save(buf, "JPEG")
        return buf.getvalue()

    table = pa.table(
        {
            "id": [f"p{i:02d}" for i in range(12)],
            "image": [jpeg(i) for i in range(12)],
            "label": [LABELS[i % 3] for i in range(12)],
        }
    )
    pq.write_table(table, str(tmp_path / "catalog.parquet"))
    config = {
        "name": "catalog",
        "key": "id",
        "columns": {"image": {"encoder": "image"}, "label": {"encoder": "label", "vocabulary": list(LABELS)}},
        "splits": {"train": 0.5, "test": 0.5},
        "sharding": {"num_shards": 2},
        "output": {"dir": str(tmp_path / "out"), "version": "v1"},
    }
    with beam.Pipeline(options=options(IN_PROCESS)) as p:
        _ = (
            p
            | beam.io.ReadFromParquet(str(tmp_path / "catalog.parquet"), columns=["id", "image", "label"])
            | tfrecord_io.BuildDataset(config)
        )
    version_dir = str(tmp_path / "out" / "v1")
    info = datasets.load_info(version_dir)
    assert (info["rows_in"], info["records"], info["rejected"]) == (12, 12, 0)
    widths = sorted(
        int(tfrecord_io.parse_example(bytes(r))["image/width"][0])
        for s in dataset_writer.dataset_shards(version_dir, info)
        for r in tfrecord_io.tfrecord_iterator(s["abspath"])
    )
    assert widths == sorted(6 + i % 4 for i in range(12))


def _fail_after_finalize(info):
    raise RuntimeError(f"the runner failed after the finalize stage published {info['version']}")


def test_a_failure_after_finalize_keeps_the_version_it_published(demo, tmp_path, monkeypatch):
    """A pipeline that fails after its finalize stage (a stage after ``BuildDataset``, as
    a runner's shutdown or a signal would): the launcher keeps the version this run
    published - LATEST names it, its shards are whole - and says so; before, it removed
    the version LATEST names."""
    from tfrecord_io.pipelines.building import build_job as job
    from tfrecord_io.pipelines.commands import BuildState

    root, config = demo
    out = tmp_path / "o"
    run_build(load_config(config, [("output.dir", str(out)), ("output.version", "v1")]), options(), progress=False)
    real = job.build_pipeline

    def failing_after_finalize(p, *args, **kwargs):
        build, info = real(p, *args, **kwargs)
        info | "FailAfterFinalize" >> beam.Map(_fail_after_finalize)
        return build, info

    monkeypatch.setattr(job, "build_pipeline", failing_after_finalize)
    state = BuildState(str(out))
    logged = []
    cfg = load_config(config, [("output.dir", str(out)), ("output.version", "v2")])
    with pytest.raises(Exception, match="after the finalize stage published v2"):
        run_build(cfg, options(), progress=False, log=logged.append, on_version=state.claimed)
    version_dir = str(out / "v2")
    assert datasets.read_latest(str(out)) == "v2"
    info = datasets.load_info(version_dir)
    assert info is not None and dataset_writer.verify_version(version_dir, info) == []
    assert info["records"] == 18 and not os.path.exists(os.path.join(version_dir, "_BUILDING"))
    assert f"version {version_dir} was published by this run before the failure" in logged[-1], logged
    lines = state()
    assert lines[0] == "LATEST points at v2 (it was v1 before this run)", lines
    assert "was published by this run before the failure" in lines[1] and "kept, whole" in lines[1], lines


def test_finalize_refuses_to_publish_once_the_claim_is_not_its_runs(tmp_path):
    """The launcher gave the run up (released the marker, is removing the version) or
    another run took a stale claim over: a finalize still running writes nothing."""
    from tfrecord_io.pipelines.building.build_spec import BuildSpec

    cfg = load_config(_dir_config(tmp_path / "c.yaml", str(_tree(str(tmp_path / "in"), 3)), str(tmp_path / "o")), [])
    spec = BuildSpec(cfg, cfg["output"]["dir"], "v1", "run-a")
    claim = {"state": "new", "fingerprint": "fp"}
    for marker in (None, "run-b"):
        if marker:
            os.makedirs(spec.version_dir, exist_ok=True)
            with open(os.path.join(spec.version_dir, "_BUILDING"), "wb") as f:
                f.write(dataset_writer.marker_body(marker, None))
        with pytest.raises(commit.ClaimWithdrawn, match="no longer this run's"):
            commit.finalize(spec, [], {"rows": 0, "vocab": {}}, {}, claim)
        assert datasets.load_info(spec.version_dir) is None
        assert datasets.read_latest(str(tmp_path / "o")) is None
