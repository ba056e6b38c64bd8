"""``tfrecord-io report``: the HTML page of the demo dataset and of a labelled image
folder, built for real on the DirectRunner; its content checked against the data read
independently; rendered in headless Chromium (marker ``browser``)."""

from __future__ import annotations

import base64
import hashlib
import html
import io
import json
import os
import random
import re
from typing import Dict, List, Tuple

import numpy as np
import pytest
import yaml

from tfrecord_io.dataset import dataset_writer
from tfrecord_io.format.codec import parse_example
from tfrecord_io.format.index import load_index
from tfrecord_io.format.reader import tfrecord_iterator
from tfrecord_io.pipelines.building.build_config import load_config
from tfrecord_io.pipelines.building.build_job import run_build
from tfrecord_io.pipelines.report.report_job import run_report
from tfrecord_io.pipelines.report.stats import hist_add, hist_merge, hist_new, hist_output
from tfrecord_io.pipelines.validate_job import run_validate

from tests.pipeline_support import IN_PROCESS, TWO_WORKERS, options, run_cli

DEMO_CLASSES = ["circle", "square", "triangle"]


# --------------------------------------------------------------------------- helpers


def _records(version_dir: str) -> List[Tuple[str, str, int, Dict]]:
    """Every record of a built dataset as ``(split, relpath, offset, parsed)``, read
    without the report's code: shards from dataset_info.json, offsets from the indexes."""
    info = dataset_writer.load_info(version_dir)
    out = []
    for split, entry in sorted(info["splits"].items()):
        for shard in entry["shards"]:
            path = os.path.join(version_dir, shard["path"])
            offsets = list(load_index(path + ".index").offsets)
            for offset, record in zip(offsets, tfrecord_iterator(path)):
                out.append((split, shard["path"], int(offset), parse_example(record)))
    return out


def _expected_samples(records, n: int, by_label: bool) -> Dict[Tuple[str, object], List[str]]:
    """``(split, label id) -> ["relpath @ offset", ...]``: the n smallest SHA-256 of
    ``relpath:offset`` per group, as the report promises."""
    groups: Dict[Tuple[str, object], List[Tuple[str, str]]] = {}
    for split, rel, off, parsed in records:
        key = (split, int(parsed["label"][0]) if by_label else None)
        groups.setdefault(key, []).append((hashlib.sha256(f"{rel}:{off}".encode()).hexdigest(), f"{rel} @ {off:,}"))
    return {k: [where for _, where in sorted(v)[:n]] for k, v in groups.items()}


def _split_table(page: str) -> Dict[str, str]:
    table = re.search(r'<table class="split-table">(.*?)</table>', page, re.S).group(1)
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td>", table)
    return {split: records for split, records in rows}


def _grids(page: str) -> Dict[str, List[str]]:
    """split -> the ``where`` captions of its sample cards, in page order."""
    out: Dict[str, List[str]] = {}
    for split, body in re.findall(r'<div class="grid" data-split="([^"]+)">(.*?)</div>', page, re.S):
        out.setdefault(split, []).extend(re.findall(r'<span class="where">(.*?)</span>', body))
    return out


def _external_refs(page: str) -> List[str]:
    """Every src/href that is not inline data or an anchor on the page."""
    refs = re.findall(r'\b(?:src|href)\s*=\s*"([^"]*)"', page)
    return [r for r in refs if not r.startswith(("data:", "#"))]


# --------------------------------------------------------------------------- histograms


def test_histogram_is_the_same_whatever_the_partition():
    """Bins of power-of-two width: partial histograms merge into exactly the one a
    single pass gives, in any order and grouping (so runners cannot change a chart)."""
    rng = random.Random(7)
    values = [rng.lognormvariate(3, 1.2) for _ in range(3000)] + [-5.0, float("inf")]
    whole = hist_new(-24)
    for v in values:
        hist_add(whole, v)
    expected = hist_output(whole)
    assert len(expected["bins"]) <= 40 and expected["nonfinite"] == 1 and expected["n"] == 3001
    assert sum(c for _, c in expected["bins"]) == 3001
    for _ in range(10):
        parts = [hist_new(-24) for _ in range(rng.randint(2, 9))]
        for v in values:
            hist_add(parts[rng.randrange(len(parts))], np.array([v]) if rng.random() < 0.5 else v)
        rng.shuffle(parts)
        merged = hist_new(-24)
        for p in parts:
            hist_merge(merged, p)
        got = hist_output(merged)
        assert (got["width"], got["bins"], got["n"], got["nonfinite"]) == (
            expected["width"],
            expected["bins"],
            expected["n"],
            expected["nonfinite"],
        )


def test_rejected_rows_group_by_reason_without_the_failing_path():
    """Rows that failed for the same reason on different files are one group; the path
    stays in each example; a line that is not JSON is a group of its own, not a crash."""
    from tfrecord_io.pipelines.report.stats import RejectedGroupFn, reason_group

    lines = [
        json.dumps(
            {
                "row": {"id": f"r{i}", "image": f"/data/img{i}.jpg"},
                "column": "image",
                "stage": "decode",
                "reason": f"/data/img{i}.jpg: cannot read the image header (OSError: Truncated File Read)",
            }
        )
        for i in range(7)
    ]
    lines.append(
        json.dumps(
            {
                "row": {"id": "x", "label": "fish"},
                "column": "label",
                "stage": "transform",
                "reason": "label 'fish' is not in the vocabulary (3 names)",
            }
        )
    )
    lines.append("{not json")
    groups: Dict[str, list] = {}
    for line in lines:
        key, example = reason_group(line, "id")
        groups.setdefault(key, []).append(example)
    assert sorted((json.loads(k)[:2] for k in groups), key=str) == [
        ["image", "decode"],
        ["label", "transform"],
        [None, None],
    ]
    image = groups[json.dumps(["image", "decode", "cannot read the image header (OSError: Truncated File Read)"])]
    fn = RejectedGroupFn()
    halves = [fn.create_accumulator(), fn.create_accumulator()]
    for i, example in enumerate(image):
        fn.add_input(halves[i % 2], example)
    merged = fn.extract_output(fn.merge_accumulators(halves))
    assert merged["count"] == 7 and [e["row"] for e in merged["examples"]] == ["r0", "r1", "r2", "r3", "r4"]
    assert merged["examples"][0]["reason"].startswith("/data/img0.jpg: ")


def test_samples_are_grouped_by_label_only_for_few_classes():
    from tfrecord_io.pipelines.report.stats import MAX_LABEL_GROUPS, ReportColumn, groups_by_label

    def label(n):
        return ReportColumn("label", "label", "label", tuple(str(i) for i in range(n)), n)

    assert groups_by_label([label(3)]) and groups_by_label([label(MAX_LABEL_GROUPS)])
    assert not groups_by_label([label(MAX_LABEL_GROUPS + 1)])  # 1000 ImageNet classes: samples per split
    assert not groups_by_label([ReportColumn("label", "label", "label")])  # no vocabulary, no class count


def test_media_for_the_page_from_any_image_mode_and_long_audio():
    """16-bit and grey+alpha images become viewable thumbnails; a 12 s stereo clip gets
    a picture and a player of its first 10 s at its own rate."""
    import soundfile as sf
    from PIL import Image

    from tfrecord_io.pipelines.report.previews import audio_picture, thumbnail, wav_clip

    def decoded(uri):
        return base64.b64decode(uri.split(",", 1)[1])

    ramp16 = np.arange(300 * 200, dtype=np.uint16).reshape(200, 300, 1) * 7
    uri, w, h = thumbnail(ramp16)
    img = Image.open(io.BytesIO(decoded(uri)))
    assert (w, h) == (128, 85) and img.size == (128, 85) and img.mode == "L"
    assert np.asarray(img).min() < 20 and np.asarray(img).max() > 235  # stretched to the 8-bit range
    la = np.dstack([np.full((40, 40), 90, np.uint8), np.full((40, 40), 255, np.uint8)])
    assert Image.open(io.BytesIO(decoded(thumbnail(la)[0]))).mode == "RGBA"
    rate = 8000
    t = np.arange(12 * rate) / rate
    stereo = np.stack([np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 660 * t)], axis=1).astype(np.float32) * 0.5
    uri, cut = wav_clip(stereo, rate)
    samples, got_rate = sf.read(io.BytesIO(decoded(uri)))
    assert cut and got_rate == rate and samples.shape == (10 * rate, 2)
    assert np.abs(samples - stereo[: 10 * rate]).max() < 1e-3
    picture = Image.open(io.BytesIO(decoded(audio_picture(stereo, rate))))
    assert picture.size == (200, 150) and len(picture.getcolors(1 << 16)) > 8


def test_validation_section_shows_problems_and_a_report_of_another_version():
    from tfrecord_io.pipelines.report.report_job import ReportInput, _validation

    inp = ReportInput("/data/ds", "/data/ds/v2", {"name": "ds"}, [], [])
    failed = {
        "ok": False,
        "dataset": "/data/ds/v1",
        "files": 2,
        "records": 10,
        "bytes": 1000,
        "checksums_checked": True,
        "problems": [
            {"path": "/data/ds/v1/train/a.tfrecord", "offset": 4096, "kind": "corrupt", "reason": "data CRC mismatch"}
        ],
    }
    section = _validation(inp, failed)
    assert "This validation report is for /data/ds/v1, not for /data/ds/v2." in section
    assert '<b class="error">FAILED: 1 problem(s)</b>' in section
    assert "<td>/data/ds/v1/train/a.tfrecord</td><td>4,096</td><td>corrupt</td><td>data CRC mismatch</td>" in section
    ok = _validation(inp, {**failed, "ok": True, "problems": [], "dataset": "/data/ds/v2"})
    assert '<b class="ok">OK</b>' in ok and "not for" not in ok and "<table" not in ok
    assert "No validation result given" in _validation(inp, None)


# --------------------------------------------------------------------------- the demo dataset


@pytest.fixture(scope="module")
def demo(demo_build, tmp_path_factory):
    """The demo dataset built with ``report: true``, validated, and reported on."""
    root = tmp_path_factory.mktemp("demo")
    out, version_dir, _ = demo_build(24, report=True)
    validation = str(root / "validation.json")
    with open(validation, "w") as f:
        json.dump(run_validate([out], options(), progress=False), f)
    page_path = str(root / "report.html")
    summary = run_report([out], options(), page_path, samples=3, validation=validation, progress=False)
    with open(page_path, encoding="utf-8") as f:
        page = f.read()
    return {
        "out": out,
        "version_dir": version_dir,
        "page": page,
        "path": page_path,
        "summary": summary,
        "records": _records(version_dir),
    }


def test_demo_report_summary_matches_the_dataset(demo):
    page, info = demo["page"], dataset_writer.load_info(demo["version_dir"])
    assert page.startswith("<!DOCTYPE html>")
    assert "<h1>demo v1</h1>" in page
    table = _split_table(page)
    for split, entry in info["splits"].items():
        assert table[split] == f"{entry['records']:,}"
    assert sum(demo["summary"].splits.values()) == info["records"] == 24
    assert "rows in: <b>25</b> &middot; written: <b>24</b> &middot; rejected: <b>1</b>" in page
    labels = re.search(r'<table class="label-table">(.*?)</table>', page, re.S).group(1)
    assert re.findall(r"<tr><td>(\w+)</td>", labels) == DEMO_CLASSES


def test_demo_report_samples_are_the_promised_records(demo):
    """Per split and label: the 3 records with the smallest hash of where they are, each
    with a thumbnail, an audio picture, a WAV player and its caption."""
    page = demo["page"]
    expected = _expected_samples(demo["records"], 3, by_label=True)
    grids = _grids(page)
    for split in {s for s, _ in expected}:
        want = [w for label in range(3) for w in expected.get((split, label), [])]
        assert grids[split] == want
    cards = sum(len(v) for v in expected.values())
    assert page.count('<figure class="card">') == cards == demo["summary"].samples
    assert len(re.findall(r'<img class="thumb" src="data:image/png;base64,', page)) == cards
    assert len(re.findall(r'<img class="audio-pic" src="data:image/png;base64,', page)) == cards
    assert len(re.findall(r'<audio controls preload="metadata" src="data:audio/wav;base64,', page)) == cards
    captions = {rec[3]["caption"].decode() for rec in demo["records"]}
    shown = {html.unescape(c) for c in re.findall(r"caption: <q>(.*?)</q>", page)}
    assert len(shown) > 3 and shown <= captions
    for name in DEMO_CLASSES:
        assert f"label: <b>{name}</b>" in page


def test_demo_report_shows_statistics_rejected_rows_and_validation(demo):
    page = demo["page"]
    assert "size (w x h)</th><th>images</th></tr></thead><tbody><tr><td>64x64</td>" in page
    assert "<td>RGB</td>" in page and "<td>png</td>" in page
    assert "<td>16000</td>" in page  # every clip resampled to 16 kHz
    assert "duration all 0.25 seconds" in page
    assert "test: caption length" in page or "train: caption length" in page
    rejected = re.search(r'<section id="rejected">(.*?)</section>', page, re.S).group(1)
    assert "1 rows rejected, for 1 reason(s)" in rejected
    row = re.search(r'<table class="rejected">.*?<tbody><tr>(.*?)</tr>', rejected, re.S).group(1)
    cells = re.findall(r"<td>(.*?)</td>", row, re.S)
    assert cells[:3] == ["1", "image", "decode"]
    assert cells[3].startswith("cannot read the image header")  # the path is cut from the reason ...
    assert "demo-broken" in cells[4] and "broken.jpg" in cells[4]  # ... and kept in the example
    validation = re.search(r'<section id="validation">(.*?)</section>', page, re.S).group(1)
    assert '<b class="ok">OK</b>: 6 files, 24 records' in validation
    assert _external_refs(page) == []


def test_same_version_gives_the_same_page_from_build_and_command(demo, tmp_path):
    """``report: true`` wrote <version>/report.html; the command with the same settings,
    on 2 worker processes, writes the same bytes."""
    built = os.path.join(demo["version_dir"], "report.html")
    assert os.path.exists(built)
    again = str(tmp_path / "again.html")
    run_report([demo["version_dir"]], options(TWO_WORKERS), again, progress=False)
    with open(built, "rb") as a, open(again, "rb") as b:
        assert a.read() == b.read()


@pytest.mark.runners
@pytest.mark.parametrize("runner", ["prism", "flink", "spark"])
def test_same_page_on_portable_runners(runner, demo, tmp_path):
    """The statistics job on Prism / Flink / Spark (configs/<runner>.yaml, LOOPBACK
    workers) gives the page the build wrote on the DirectRunner, byte for byte."""
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.pipelines.runtime.beam_options import beam_args
    from tfrecord_io.pipelines.runtime.runners import RunnerSetupError

    with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", f"{runner}.yaml")) as f:
        section = yaml.safe_load(f)["runner"]
    try:
        flags = beam_args(section, [])
    except RunnerSetupError as err:
        pytest.fail(f"{err}\n(the runner tests need bash scripts/fetch-runners to have run)", pytrace=False)
    page = str(tmp_path / f"{runner}.html")
    run_report([demo["version_dir"]], PipelineOptions(flags), page, progress=False)
    with open(os.path.join(demo["version_dir"], "report.html"), "rb") as a, open(page, "rb") as b:
        assert a.read() == b.read()


def test_split_filter_and_usage_errors(demo, tmp_path):
    only = str(tmp_path / "train.html")
    summary = run_report([demo["out"]], options(), only, splits=["train"], samples=1, progress=False)
    assert list(summary.splits) == ["train"]
    with open(only, encoding="utf-8") as f:
        page = f.read()
    assert 'id="split-train"' in page and 'id="split-test"' not in page
    ok = run_cli(
        "report", demo["out"], "--samples", "1", "--no-progress", "--output", str(tmp_path / "cli.html"), *IN_PROCESS
    )
    assert (
        ok.returncode == 0
        and ok.stdout.startswith(f"report: {tmp_path / 'cli.html'} (")
        and "1 rejection reason(s)" in ok.stdout
    )
    bad = run_cli("report", demo["out"], "--split", "nope", "--output", str(tmp_path / "x.html"))
    assert bad.returncode == 2 and "--split nope: not in this dataset" in bad.stderr and "Traceback" not in bad.stderr
    bad = run_cli("report", demo["out"], "--output", str(tmp_path / "missing" / "x.html"))
    assert bad.returncode == 2 and "does not exist" in bad.stderr
    bad = run_cli(
        "report", demo["out"], "--validation", str(tmp_path / "none.json"), "--output", str(tmp_path / "x.html")
    )
    assert bad.returncode == 2 and "no such file" in bad.stderr
    assert not os.path.exists(tmp_path / "x.html")


def test_report_of_a_dataset_on_s3(demo, s3_server, s3_bucket, tmp_path):
    """The demo's version copied to a real S3 server (versitygw): the report follows
    LATEST there, reads the shards and the dead-letter file through Beam's S3
    filesystem, writes the page there, and it is the local page but for the source."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    from tfrecord_io.storage import files

    s3_options = PipelineOptions(IN_PROCESS + s3_server.pipeline_args() + ["--default_sdk_harness_log_level=ERROR"])
    FileSystems.set_options(s3_options)
    try:
        root = s3_bucket + "/datasets/demo"
        for path in files.list_prefix(demo["version_dir"]):
            if not path.endswith("report.html"):
                files.write_bytes(
                    files.join(root, "v1", os.path.relpath(path, demo["version_dir"])), open(path, "rb").read()
                )
        files.write_bytes(files.join(root, "LATEST"), b"v1\n")
        run_report([root], s3_options, s3_bucket + "/reports/demo.html", progress=False)
        page = files.read_bytes(s3_bucket + "/reports/demo.html").decode("utf-8")
    finally:
        FileSystems.set_options(PipelineOptions([]))
    local = str(tmp_path / "local.html")
    run_report([demo["out"]], options(), local, progress=False)
    with open(local, encoding="utf-8") as f:
        expected = f.read().replace(demo["version_dir"], root + "/v1")
    assert page == expected
    assert "1 rows rejected" in page and page.count('<img class="thumb"') > 3


# --------------------------------------------------------------------------- a labelled image folder

FOLDER_CLASSES = ["bird", "cat", "dog"]
FOLDER_SIZES = [(40, 30), (50, 50), (64, 48)]


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """root/<label>/<file>: PNG and JPEG, three sizes, RGB and greyscale; built as is."""
    from PIL import Image, ImageDraw

    root = tmp_path_factory.mktemp("folder")
    images = root / "images"
    for c, label in enumerate(FOLDER_CLASSES):
        (images / label).mkdir(parents=True)
        for i in range(7):
            w, h = FOLDER_SIZES[i % 3]
            img = Image.new("RGB", (w, h), (30 + 60 * c, 200 - 20 * i, 90))
            ImageDraw.Draw(img).ellipse([4, 4, w - 4, h - 4], fill=(250, 250 - 80 * c, 20 * i))
            if i == 6:
                img = img.convert("L")
            img.save(images / label / f"{label}_{i}.{'png' if i % 2 else 'jpg'}")
    config = root / "build.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "name": "pets",
                "input": {"directory": "images"},
                "key": "path",
                "columns": {
                    "image": {"encoder": "image", "column": "path"},
                    "label": {"encoder": "label", "column": "label", "vocabulary": "auto"},
                },
                "splits": {"train": 0.7, "validation": 0.3},
                "sharding": {"num_shards": 1},
                "output": {"dir": "out", "version": "v1"},
            }
        )
    )
    run_build(load_config(str(config)), options(), progress=False, log=lambda *a: None)
    out = str(root / "out")
    page_path = str(root / "report.html")
    run_report([out], options(), page_path, samples=2, progress=False)
    with open(page_path, encoding="utf-8") as f:
        page = f.read()
    return {"out": out, "version_dir": os.path.join(out, "v1"), "page": page, "path": page_path}


def test_image_folder_report(image_folder):
    page = image_folder["page"]
    records = _records(image_folder["version_dir"])
    expected = _expected_samples(records, 2, by_label=True)
    assert (
        sum(len(v) for v in expected.values())
        == page.count('<img class="thumb"')
        == page.count('<figure class="card">')
    )
    assert "<audio" not in page
    labels = re.search(r'<table class="label-table">(.*?)</table>', page, re.S).group(1)
    assert re.findall(r"<tr><td>(\w+)</td>", labels) == FOLDER_CLASSES  # the folder names
    for name in FOLDER_CLASSES:
        assert f"label: <b>{name}</b>" in page
    for w, h in FOLDER_SIZES:
        assert f"<td>{w}x{h}</td>" in page
    assert "<td>L</td>" in page and "<td>RGB</td>" in page
    assert "<td>jpeg</td>" in page and "<td>png</td>" in page  # bytes kept as they came
    assert "No row was rejected." in page
    assert _external_refs(page) == []


def test_report_of_file_patterns_infers_columns(image_folder, tmp_path):
    """Plain files (no dataset_info.json): image columns from the keys the Image encoder
    writes, the split from the shard names, labels by id."""
    pattern = os.path.join(image_folder["version_dir"], "train", "*.tfrecord-*")
    page_path = str(tmp_path / "files.html")
    summary = run_report([pattern], options(), page_path, samples=4, progress=False)
    with open(page_path, encoding="utf-8") as f:
        page = f.read()
    train = sum(1 for r in _records(image_folder["version_dir"]) if r[0] == "train")
    assert summary.splits == {"train": train}
    assert page.count('<img class="thumb"') == 4
    assert '<div class="panel"><h4>image</h4>' in page and '<div class="panel"><h4>label</h4>' in page
    assert re.search(r"label: <b>[0-2]</b>", page)  # an int feature named label: ids, no names
    assert "Not a built dataset" in page


def test_numeric_text_and_bytes_columns(tmp_path):
    """Int, Float (with a NaN), Array, Text and Bytes columns: histograms of values,
    lengths and sizes, from dataset_info.json's encoders and, for the same files without
    it, from the keys alone."""
    from tfrecord_io.format.writer import RecordWriter
    from tfrecord_io.transforms import Array, Bytes, Float, Int, Text, encode_row

    spec = {
        "count": Int(),
        "score": Float(allow_nan=True),
        "emb": Array(dtype="float32", shape=(4,)),
        "note": Text(),
        "blob": Bytes(),
    }
    rows = [
        {
            "count": i,
            "score": float("nan") if i == 7 else i / 10,
            "emb": [i, -i, 0.5, 2.0],
            "note": "x" * (1 + i % 9),
            "blob": bytes([255, i % 256]) * (1 + i % 3),
        }
        for i in range(100)
    ]
    version = tmp_path / "ds" / "v1"
    (version / "train").mkdir(parents=True)
    rel = "train/nums-train.tfrecord-00000-of-00001"
    with RecordWriter(str(version / rel), "") as writer:
        writer.write_records([encode_row(r, spec) for r in rows])
    (version / "dataset_info.json").write_text(
        json.dumps(
            {
                "name": "nums",
                "version": "v1",
                "encoders": {c: e.to_config() for c, e in spec.items()},
                "splits": {
                    "train": {
                        "records": 100,
                        "bytes": os.path.getsize(version / rel),
                        "num_shards": 1,
                        "shards": [{"path": rel, "records": 100}],
                    }
                },
            }
        )
    )
    (tmp_path / "ds" / "LATEST").write_text("v1\n")
    pages = []
    for source in (str(tmp_path / "ds"), str(version / "train" / "*.tfrecord-*")):
        out = str(tmp_path / f"page{len(pages)}.html")
        run_report([source], options(), out, samples=2, progress=False)
        with open(out, encoding="utf-8") as f:
            pages.append(f.read())
    for page in pages:
        assert "values 0 .. 99, mean 49.5" in page  # count
        assert "; 1 NaN/inf" in page and "train: score" in page  # score: 99 finite values and a NaN
        assert "values -99 .. 99, mean" in page and "train: emb" in page  # all 400 values of the arrays
        assert "train: blob size" in page and "size 2 .. 6 bytes" in page
        assert "length 1 .. 9 characters, mean" in page
        emb = re.search(r"<tr><td>emb</td><td>float</td><td>100</td><td>(.*?)</td>", page).group(1)
        assert emb == "4 .. 4"  # values per record
        assert page.count('<figure class="card">') == 2 and '<img class="thumb"' not in page


# --------------------------------------------------------------------------- in a real browser


def _browser():
    from tests.browser_support import chromium_path

    if chromium_path() is None:
        if os.environ.get("TFRECORD_IO_REQUIRE_BROWSER"):
            pytest.fail("no Chromium (bash scripts/setup-chromium)")
        pytest.skip("no Chromium: bash scripts/setup-chromium")
    from tests.browser_support import Browser

    return Browser(width=1280, height=1400)


def _check_in_browser(page_path: str, shot: str) -> Dict[str, object]:
    """Load the page; return what a person would see and what the page did."""
    from PIL import Image, ImageStat

    with _browser() as browser:
        load = browser.open("file://" + page_path)
        broken = browser.evaluate(
            "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.alt)"
        )
        durations = browser.evaluate(
            "Promise.all(Array.from(document.querySelectorAll('audio')).map(a => a.readyState >= 1 ? a.duration :"
            " new Promise(r => { a.addEventListener('loadedmetadata', () => r(a.duration));"
            " a.addEventListener('error', () => r(-1)); setTimeout(() => r(-2), 20000); })))",
            await_promise=True,
        )
        # The sample grids of the first split: their bounding box, and each thumbnail in it.
        grid = browser.evaluate(
            "(() => { const s = document.querySelector('section.split') || document.body;"
            " const gs = Array.from(s.querySelectorAll('.grid')); gs[0].scrollIntoView();"
            " const rs = gs.map(g => g.getBoundingClientRect());"
            " const x = Math.min(...rs.map(r => r.left)), y = Math.min(...rs.map(r => r.top));"
            " const w = Math.max(...rs.map(r => r.right)) - x, h = Math.max(...rs.map(r => r.bottom)) - y;"
            " const thumbs = Array.from(s.querySelectorAll('.grid img.thumb')).map(i => {"
            " const t = i.getBoundingClientRect(); return [t.left - x, t.top - y, t.width, t.height, i.src]; });"
            " return {x: x + scrollX, y: y + scrollY, width: w, height: h, thumbs}; })()"
        )
        browser.screenshot(shot, clip={k: grid[k] for k in ("x", "y", "width", "height")})
    image = Image.open(shot).convert("RGB")
    blank, unlike = [], []
    for i, (x, y, w, h, src) in enumerate(grid["thumbs"]):
        box = (round(x), round(y), round(x + w), round(y + h))
        region = image.crop(box)
        inner = region.crop((2, 2, region.width - 2, region.height - 2))
        if max(ImageStat.Stat(inner).stddev) < 10 or len(inner.getcolors(maxcolors=1 << 20)) < 8:
            blank.append(i)
        # What the page shows there is the thumbnail itself (not a broken-image icon).
        try:
            want = Image.open(io.BytesIO(base64.b64decode(src.split(",", 1)[1]))).convert("RGB").resize(region.size)
        except Exception:  # noqa: BLE001 - not an image at all
            unlike.append(i)
            continue
        diff = np.abs(np.asarray(region, dtype=np.int16) - np.asarray(want, dtype=np.int16)).mean()
        if diff > 20:
            unlike.append(i)
    return {
        "load": load,
        "broken": broken,
        "durations": durations,
        "thumbs": len(grid["thumbs"]),
        "blank": blank,
        "unlike": unlike,
    }


@pytest.mark.browser
def test_demo_report_in_chromium(demo, tmp_path):
    seen = _check_in_browser(demo["path"], str(tmp_path / "demo.png"))
    load = seen["load"]
    assert load.console_errors == []
    assert [u for u in load.requests if not u.startswith("data:")] == ["file://" + demo["path"]]
    assert seen["broken"] == []
    assert seen["thumbs"] >= 3 and seen["blank"] == [] and seen["unlike"] == []  # the screenshot shows every thumbnail
    assert len(seen["durations"]) == demo["page"].count("<audio") and all(
        abs(d - 0.25) < 0.01 for d in seen["durations"]
    )


@pytest.mark.browser
def test_image_folder_report_in_chromium(image_folder, tmp_path):
    seen = _check_in_browser(image_folder["path"], str(tmp_path / "folder.png"))
    assert seen["load"].console_errors == []
    assert [u for u in seen["load"].requests if not u.startswith("data:")] == ["file://" + image_folder["path"]]
    assert seen["broken"] == [] and seen["thumbs"] >= 2 and seen["blank"] == [] and seen["unlike"] == []


@pytest.mark.browser
def test_browser_check_sees_requests_console_errors_and_blank_images(tmp_path):
    """The harness itself: a page that fetches from the network, logs an error and
    shows a blank 'thumbnail' fails every check the report passes."""
    from PIL import Image

    from tfrecord_io.pipelines.report.previews import data_uri

    blank = io.BytesIO()
    Image.new("RGB", (64, 64), (255, 255, 255)).save(blank, "PNG")
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><div class="grid">'
        f'<img class="thumb" src="{data_uri("image/png", blank.getvalue())}" width="128" height="128">'
        '<img class="thumb" src="data:image/png;base64,bm90IGEgcG5n" alt="broken" width="128" height="128">'
        '</div><img src="http://127.0.0.1:9/remote.png" alt="remote"><script>console.error("boom")</script></body></html>'
    )
    seen = _check_in_browser(str(page), str(tmp_path / "bad.png"))
    assert "http://127.0.0.1:9/remote.png" in seen["load"].requests
    assert any("boom" in e for e in seen["load"].console_errors)
    assert seen["broken"] == ["broken", "remote"]
    assert seen["blank"] == [0]  # the white one; the broken one shows an icon ...
    assert seen["unlike"] == [1]  # ... which is not the image it should be
