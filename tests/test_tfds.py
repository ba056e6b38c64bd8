"""TFDS opens our builds: ``tfds.builder_from_directory(version_dir)`` in the TensorFlow
venv (with ``tensorflow-datasets``) on a real build, against our own readers; and the
metadata layout (ours in ``tfrecord_io_info.json``, older ``dataset_info.json`` read)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import tfrecord_io
from tfrecord_io.dataset import datasets, tfds_info
from tfrecord_io.pipelines.building.encoders_config import make_encoders
from tfrecord_io.transforms import decode_example

from tests.tfio_testutil import require_tf_python, run_tf, tf_env


@pytest.fixture(scope="module")
def built(demo_build):
    return demo_build(24)


TFDS_READ = r"""
import json, sys
import numpy as np
import tensorflow_datasets as tfds
version_dir, split = sys.argv[1], sys.argv[2]
builder = tfds.builder_from_directory(version_dir)
out = {"splits": {k: v.num_examples for k, v in builder.info.splits.items()},
       "label_names": builder.info.features["label"].names,
       "sample_rate": builder.info.features["audio"]["encoded"].sample_rate,
       "rows": []}
for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
    out["rows"].append({
        "label": int(ex["label"]),
        "caption": ex["caption"].decode(),
        "image_shape": list(ex["image"]["encoded"].shape),
        "image_sum": int(ex["image"]["encoded"].astype(np.int64).sum()),
        "height": int(ex["image"]["height"]),
        "audio_len": int(ex["audio"]["encoded"].shape[0]),
        "audio_sum": float(ex["audio"]["encoded"].astype(np.float64).sum()),
    })
print(json.dumps(out))
"""


def _require_tfds() -> None:
    """tensorflow-datasets in the TensorFlow interpreter (scripts/setup-tf-env installs
    it; the newest lane's own venv has TensorFlow only): skip without it, unless
    TFRECORD_IO_REQUIRE_TFDS=1."""
    import subprocess

    py = require_tf_python()
    probe = subprocess.run([py, "-c", "import tensorflow_datasets"], env=tf_env(), capture_output=True, timeout=300)
    if probe.returncode != 0:
        msg = f"tensorflow-datasets is not installed in {py} (scripts/setup-tf-env installs it)"
        if os.environ.get("TFRECORD_IO_REQUIRE_TFDS") == "1":
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.mark.tensorflow
def test_tfds_builder_from_directory_reads_a_build(built):
    _require_tfds()
    root, version_dir, cfg = built
    info = datasets.load_info(version_dir)
    encoders = make_encoders(cfg["columns"])
    ours = []
    for record in tfrecord_io.iter_dataset(root, "train[:50%]", output="bytes"):
        d = decode_example(record, encoders)
        ours.append((d["label"], d["caption"], d["image"].shape, int(d["image"].astype(np.int64).sum())))
    got = run_tf(TFDS_READ, version_dir, "train[:50%]")
    assert got["splits"] == {s: e["records"] for s, e in info["splits"].items()}
    assert got["label_names"] == cfg["columns"]["label"]["vocabulary"]
    assert got["sample_rate"] == 16000
    assert len(got["rows"]) == len(ours) > 0  # the same slice, counted alike
    theirs = sorted((r["label"], r["caption"], tuple(r["image_shape"]), r["image_sum"]) for r in got["rows"])
    assert theirs == sorted(ours)  # images decode to the recorded shape and pixels
    assert all(r["image_shape"][0] == r["height"] for r in got["rows"])
    assert all(r["audio_len"] > 0 for r in got["rows"])


def test_version_layout_ours_and_tfds(built):
    _, version_dir, _ = built
    names = set(os.listdir(version_dir))
    assert {datasets.INFO_NAME, "dataset_info.json", "features.json", "label.labels.txt"} <= names
    ours = datasets.load_info(version_dir)
    assert ours["tfds"]["files"] == ["label.labels.txt", "features.json", "dataset_info.json"]
    with open(os.path.join(version_dir, "dataset_info.json")) as f:
        tfds_json = json.load(f)
    assert datasets.is_tfds_info(tfds_json) and not datasets.is_tfds_info(ours)
    assert tfds_json["version"] == "1.0.0"  # 'v1' is no semantic version
    train = next(s for s in tfds_json["splits"] if s["name"] == "train")
    assert train["filepathTemplate"] == "train/demo-train.tfrecord-{SHARD_X_OF_Y}"
    assert sum(map(int, train["shardLengths"])) == ours["splits"]["train"]["records"]


def test_older_versions_and_unfinished_ones(built, tmp_path):
    root, version_dir, _ = built
    copy = str(tmp_path / "ds")
    shutil.copytree(root, copy)
    v1 = os.path.join(copy, "v1")
    info = datasets.load_info(v1)
    # a version built before: our metadata in dataset_info.json, no TFDS files
    for name in ("features.json", "label.labels.txt", datasets.INFO_NAME):
        os.remove(os.path.join(v1, name))
    with open(os.path.join(v1, "dataset_info.json"), "w") as f:
        json.dump(info, f)
    assert datasets.load_info(v1) == info
    assert tfrecord_io.select_dataset(copy, "train").count == info["splits"]["train"]["records"]
    # ... which add_to_version brings to today's layout
    legacy = tmp_path / "legacy"
    shutil.copytree(copy, legacy)
    written = tfds_info.add_to_version(str(legacy / "v1"))
    assert written == ["label.labels.txt", "features.json", "dataset_info.json"]
    upgraded = datasets.load_info(str(legacy / "v1"))
    assert upgraded == {**info, "tfds": upgraded["tfds"]} and upgraded["tfds"]["files"] == written
    with open(legacy / "v1" / "dataset_info.json") as f:
        assert datasets.is_tfds_info(json.load(f))
    # TFDS's dataset_info.json alone: ours never landed, the version is unfinished
    tfds_only = tfds_info.tfds_files(v1, info)["dataset_info.json"]
    with open(os.path.join(v1, "dataset_info.json"), "wb") as f:
        f.write(tfds_only)
    assert datasets.load_info(v1) is None
    with pytest.raises(datasets.DatasetLayoutError):
        tfrecord_io.select_dataset(copy, "train")


def test_what_tfds_cannot_read_gets_no_tfds_files_and_a_reason():
    info = {"compression": "gzip", "features": {}, "splits": {"train": {"records": 1, "shards": []}}}
    assert tfds_info.write_tfds_files("/nonexistent", info) == []
    assert "GZIP" in info["tfds"]["reason"]
    seq = {"features": {"frames": {"kind": "float", "sequence": True}}, "splits": {}}
    tfds_info.write_tfds_files("/nonexistent", seq)
    assert "SequenceExample" in seq["tfds"]["reason"]
    shards = [{"path": "train/x-00000-of-00002", "records": 1}, {"path": "train/y-00001-of-00002", "records": 1}]
    with pytest.raises(tfds_info.NotForTFDS, match="shard 1"):
        tfds_info.split_template("train", shards)


TFDS_SLICES = r"""
import json, sys
import numpy as np
import tensorflow_datasets as tfds
version_dir, splits = sys.argv[1], sys.argv[2:]
builder = tfds.builder_from_directory(version_dir)
feats = builder.info.features
out = {k: [type(feats[k]).__name__, [d if d is not None else -1 for d in feats[k].shape], feats[k].dtype.name]
       for k in ("emb", "pix", "pts")}
out.update(names=sorted(feats.keys()), label_names=feats["label"].names, slices={})
for split in splits:
    rows = []
    for ex in tfds.as_numpy(builder.as_dataset(split=split, shuffle_files=False)):
        assert ex["emb"].shape == (2, 3) and ex["emb"].dtype == np.float32, (ex["emb"].shape, ex["emb"].dtype)
        rows.append([int(ex["id"]), ex["emb"].tolist(), int(ex["label"]), ex["caption"].decode(),
                     ex["pix"].tolist(), ex["pts"].tolist()])
    out["slices"][split] = rows
print(json.dumps(out))
"""

SLICES = ("train[:33%]", "train[-10%:]", "train[10:20]", "train[25%:75%]+validation", "validation[:1]")


@pytest.mark.tensorflow
def test_tfds_slices_and_an_array_feature_match_ours(tmp_path):
    """A build from a pipeline of rows (``BuildDataset`` over ``beam.Create``) with a 2x3
    float array, an int, a text and a label over 3 shards per split: TFDS reads each
    slice form (percent from either end, absolute, a sum of splits) as the same records
    our ``select_dataset`` picks, the array as a ``Tensor`` of its shape and dtype, the
    label names from the vocabulary."""
    import apache_beam as beam

    from tests.pipeline_support import IN_PROCESS, options

    _require_tfds()
    names = ["ant", "bee", "cow"]
    rows = [
        {
            "id": i,
            "emb": [[i, i + 0.5, -i], [0.25, 2.0 * i, 1.0]],
            "pix": [[i % 256, 255], [0, (3 * i) % 256]],
            "pts": [[float(j), float(i)] for j in range(1 + i % 4)],
            "any": [float(i)] * (1 + i % 3),
            "label": names[i % 3],
            "caption": f"row {i}",
        }
        for i in range(90)
    ]
    config = {
        "name": "rows",
        "key": "id",
        "columns": {
            "id": {"encoder": "int"},
            "emb": {"encoder": "array", "dtype": "float32", "shape": [2, 3]},
            "pix": {"encoder": "array", "dtype": "uint8", "shape": [2, 2]},  # stored as bytes
            "pts": {"encoder": "array", "dtype": "float32", "shape": [-1, 2]},  # rows vary
            "any": {"encoder": "array", "dtype": "float32"},  # any shape: not for TFDS
            "label": {"encoder": "label", "vocabulary": names},
            "caption": {"encoder": "text"},
        },
        "splits": {"train": 0.8, "validation": 0.2},
        "sharding": {"num_shards": 3},
        "output": {"dir": str(tmp_path / "out"), "version": "v1"},
    }
    with beam.Pipeline(options=options(IN_PROCESS)) as p:
        _ = p | beam.Create(rows) | tfrecord_io.BuildDataset(config)
    root, version_dir = str(tmp_path / "out"), str(tmp_path / "out" / "v1")
    got = run_tf(TFDS_SLICES, version_dir, *SLICES)
    assert got["emb"] == ["Tensor", [2, 3], "float32"]
    assert got["pix"] == ["Tensor", [2, 2], "uint8"]
    assert got["pts"] == ["Tensor", [-1, 2], "float32"]
    assert got["names"] == ["caption", "emb", "id", "label", "pix", "pts"]  # `any` left out of TFDS's view
    info = datasets.load_info(version_dir)
    assert info["tfds"]["files"] and "any/shape" in info["features"]  # ours still has it all
    assert got["label_names"] == names
    by_id = {r["id"]: r for r in rows}
    for split in SLICES:
        ours = sorted(
            int(tfrecord_io.parse_example(bytes(r))["id"][0])
            for r in tfrecord_io.iter_dataset(root, split, output="bytes")
        )
        theirs = got["slices"][split]
        assert sorted(t[0] for t in theirs) == ours and ours, split  # the same records, counted alike
        for rid, emb, label, caption, pix, pts in theirs:
            assert np.allclose(emb, by_id[rid]["emb"]) and names[label] == by_id[rid]["label"], rid
            assert caption == by_id[rid]["caption"]
            assert pix == by_id[rid]["pix"] and pts == by_id[rid]["pts"], rid


def _png(mode, i):
    import io

    from PIL import Image as PILImage

    size = (5 + i, 3 + i % 4)
    color = {"L": 40 * i % 256, "RGB": (i * 30 % 256, 90, 200), "RGBA": (10, i * 20 % 256, 30, 128)}[mode]
    out = io.BytesIO()
    PILImage.new(mode, size, color).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def modeless_builds(tmp_path_factory):
    """Builds whose image column has no ``mode:`` (the default config): all RGB, and a
    folder's mix of grayscale and colour PNGs."""
    import apache_beam as beam

    from tests.pipeline_support import IN_PROCESS, options

    out = {}
    for name, modes in (("rgb", ["RGB"]), ("mixed", ["L", "RGB"])):
        rows = [{"id": i, "image": _png(modes[i % len(modes)], i), "label": i % 2} for i in range(10)]
        root = str(tmp_path_factory.mktemp(f"modeless-{name}"))
        config = {
            "name": name,
            "key": "id",
            "columns": {"id": {"encoder": "int"}, "image": {"encoder": "image"}, "label": {"encoder": "int"}},
            "splits": {"train": 1.0},
            "sharding": {"num_shards": 2},
            "output": {"dir": root, "version": "v1"},
        }
        with beam.Pipeline(options=options(IN_PROCESS)) as p:
            _ = p | beam.Create(rows) | tfrecord_io.BuildDataset(config)
        out[name] = (os.path.join(root, "v1"), rows)
    return out


def test_a_build_without_an_image_mode_tells_tfds_the_channels(modeless_builds):
    """The build records the modes it wrote (``image_modes``); TFDS's features get an
    ``Image`` of those channels (one mode), or of any channels (several: each image
    decoded as stored), instead of the encoded bytes as a string."""
    for name, dims, modes in (("rgb", ["-1", "-1", "3"], ["RGB"]), ("mixed", ["-1", "-1", "-1"], ["L", "RGB"])):
        version_dir, _ = modeless_builds[name]
        info = datasets.load_info(version_dir)
        assert info["image_modes"] == {"image": modes}
        with open(os.path.join(version_dir, "features.json")) as f:
            image = json.load(f)["content"]["features"]["image"]["featuresDict"]["features"]["encoded"]
        assert image["pythonClassName"].endswith("image_feature.Image"), image
        assert image["image"]["shape"]["dimensions"] == dims


def test_image_channels_for_tfds():
    assert tfds_info.image_channels({"mode": "RGB"}, None) == "3"
    assert tfds_info.image_channels({"mode": "RGB", "reencode": "raw"}, ["RGB"]) is None  # pixels: no PNG/JPEG
    assert tfds_info.image_channels({}, ["L"]) == "1"
    assert tfds_info.image_channels({}, ["RGBA"]) == "4"
    assert tfds_info.image_channels({}, ["L", "RGBA"]) == "-1"
    assert tfds_info.image_channels({}, ["LA"]) is None  # TFDS's 8-bit Image does not decode it
    assert tfds_info.image_channels({}, ["I;16", "L"]) is None
    assert tfds_info.image_channels({}, None) is None  # built before modes were recorded
    assert tfds_info.image_channels({}, []) is None  # no image written


TFDS_IMAGES = r"""
import json, sys
import numpy as np
import tensorflow_datasets as tfds
builder = tfds.builder_from_directory(sys.argv[1])
print(json.dumps({int(ex["id"]): [list(ex["image"]["encoded"].shape), ex["image"]["encoded"].astype(np.int64).tolist()]
                  for ex in tfds.as_numpy(builder.as_dataset(split="train"))}))
"""


@pytest.mark.tensorflow
def test_tfds_decodes_images_built_without_a_mode(modeless_builds):
    """TFDS opens both builds and gives each image decoded, as our decoder gives it:
    the same shape (grayscale (h, w, 1) beside colour (h, w, 3) in the mixed one) and
    pixels."""
    import io

    from PIL import Image as PILImage

    _require_tfds()
    for name in ("rgb", "mixed"):
        version_dir, rows = modeless_builds[name]
        got = run_tf(TFDS_IMAGES, version_dir)
        assert sorted(map(int, got)) == [r["id"] for r in rows], name
        for row in rows:
            want = np.asarray(PILImage.open(io.BytesIO(row["image"])))
            want = want.reshape(want.shape[0], want.shape[1], -1)
            shape, pixels = got[str(row["id"])]
            assert shape == list(want.shape) and pixels == want.tolist(), (name, row["id"])
