"""Opening a built dataset by its root (a real ``build`` in a fixture): LATEST and
versions, TFDS-style slices checked against the counts in dataset_info.json, and the
three readers on it (``iter_dataset``, ``tfrecord_io.torch.from_dataset`` through real
DataLoaders, Beam's ``ReadDataset``), locally and from the real S3 server."""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections import Counter

import apache_beam as beam
import pytest
import torch
from torch.utils.data import DataLoader

import tfrecord_io
from tfrecord_io.dataset.datasets import DatasetLayoutError
from tfrecord_io.torch import from_dataset

from tests.torch_data import build_tiny_dataset, corrupt_data_byte

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create")

SLICES = [
    "train",
    "train[:50%]",
    "train[50%:]",
    "train[10%:90%]",
    "validation[:5]",
    "validation[-3:]",
    "test[-20%:]",
    "train+validation",
    "train[:1]+test[:40%]",
]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = build_tiny_dataset(str(tmp_path_factory.mktemp("built")))
    with open(os.path.join(root, "v1", "tfrecord_io_info.json")) as f:
        info = json.load(f)
    # every split's records in order (shards in order), read shard by shard, as the ground truth
    order = {}
    for split, entry in info["splits"].items():
        order[split] = [
            int(rec["n"][0])
            for shard in entry["shards"]
            for rec in tfrecord_io.example_loader(os.path.join(root, "v1", shard["path"]), None, {"n": "int"})
        ]
        assert len(order[split]) == entry["records"]
    return root, info, order


def expected(spec, info, order):
    """The n values a selection names, from dataset_info.json's counts and Python slicing
    (percentages: TFDS's int(round(p * n / 100.)), which the exact rounding equals here)."""
    out = []
    for part in spec.split("+"):
        name, _, rest = part.partition("[")
        n = info["splits"][name]["records"]
        start = stop = None
        if rest:
            a, b = rest.rstrip("]").split(":")
            conv = lambda s: None if not s else (int(round(float(s[:-1]) * n / 100.0)) if s.endswith("%") else int(s))  # noqa: E731, B023 - used at once, in this iteration
            start, stop = conv(a), conv(b)
        out += order[name][slice(start, stop)]
    return out


@pytest.mark.parametrize("spec", SLICES)
def test_slices_agree_with_dataset_info_counts_and_order(built, spec):
    root, info, order = built
    selection = tfrecord_io.select_dataset(root, spec)
    want = expected(spec, info, order)
    assert selection.count == len(want) > 0
    assert [int(r["n"][0]) for r in tfrecord_io.iter_dataset(root, spec)] == want
    parts = [[int(r["n"][0]) for r in tfrecord_io.iter_dataset(root, spec, shard=(k, 3))] for k in range(3)]
    assert [i for p in parts for i in p] == want  # three readers: each record once, in order


def test_complementary_percent_slices_tile_each_split(built):
    root, info, _ = built
    for split, entry in info["splits"].items():
        for cut in (10, 33, 50, 67):
            a = tfrecord_io.select_dataset(root, f"{split}[:{cut}%]").count
            b = tfrecord_io.select_dataset(root, f"{split}[{cut}%:]").count
            assert a + b == entry["records"]


def test_follows_latest_or_a_named_version(built, tmp_path):
    root, info, order = built
    copy = str(tmp_path / "copy")
    shutil.copytree(root, copy)
    shutil.copytree(os.path.join(copy, "v1"), os.path.join(copy, "v0"))
    shutil.rmtree(os.path.join(copy, "v0", "train"))  # v0 differs: it has no train shards
    assert tfrecord_io.select_dataset(copy, "train").version == "v1"
    assert tfrecord_io.select_dataset(copy, "test", version="v0").version == "v0"
    with pytest.raises(FileNotFoundError):  # a missing shard fails when opening, not mid-epoch
        tfrecord_io.select_dataset(copy, "train", version="v0")
    with open(os.path.join(copy, "LATEST"), "w") as f:
        f.write("v0\n")
    assert tfrecord_io.select_dataset(copy, "validation").version == "v0"
    os.remove(os.path.join(copy, "v0", "tfrecord_io_info.json"))  # an unfinished build is never read
    with pytest.raises(DatasetLayoutError, match="tfrecord_io_info.json"):
        tfrecord_io.select_dataset(copy, "validation")
    with pytest.raises(DatasetLayoutError):
        tfrecord_io.select_dataset(str(tmp_path), "train")


def test_readers_do_not_import_transforms():
    """Layering: tfrecord_io takes decoders as callables and never imports transforms."""
    import subprocess
    import sys

    code = (
        "import sys, tfrecord_io, tfrecord_io.torch, tfrecord_io.beam.beam_dataset, "
        "tfrecord_io.dataset.dataset_reader; "
        "print(sorted(m for m in sys.modules if m.split('.')[:2] == ['tfrecord_io', 'transforms']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_unknown_split_or_feature_is_a_clear_error(built):
    root, _, _ = built
    with pytest.raises(ValueError, match="'dev' is not in the dataset"):
        tfrecord_io.select_dataset(root, "dev[:10%]")
    with pytest.raises(ValueError, match="not in the dataset"):
        tfrecord_io.select_dataset(root, "train", features=["nope"])


@pytest.mark.parametrize("workers", [0, 2, 3])
@pytest.mark.parametrize("batch_size", [None, 16])
@pytest.mark.parametrize("world", [1, 2])
def test_from_dataset_reads_a_slice_once_across_workers_and_ranks(built, workers, batch_size, world):
    root, info, order = built
    spec = "train[10%:]+test"
    want = expected(spec, info, order)
    seen = Counter()
    for rank in range(world):
        ds = from_dataset(
            root,
            spec,
            batch_size=batch_size,
            features=["n", "tokens", "caption"],
            rank=rank,
            world_size=world,
            shuffle_queue_size=8,
            seed=0,
        )
        if batch_size is None:
            loader = DataLoader(ds, batch_size=8, num_workers=workers, collate_fn=lambda b: [int(r["n"][0]) for r in b])
            got = [i for b in loader for i in b]
            assert len(got) == len(ds)
        else:
            loader = DataLoader(ds, batch_size=None, num_workers=workers)
            batches = list(loader)
            assert len(batches) == len(ds) == len(loader)
            assert batches[0]["n"].shape == (16,)  # shape () in dataset_info.json: stacked, no length
            assert batches[0]["tokens"].dim() == 2 and "tokens_length" in batches[0]
            got = [int(i) for b in batches for i in b["n"]]
        assert got
        seen.update(got)
    assert sorted(seen) == sorted(want) and set(seen.values()) == {1}


def test_images_decoded_in_the_worker_with_a_transforms_decoder(built):
    import tfrecord_io.transforms

    root, info, _ = built
    decoder = tfrecord_io.transforms.ExampleDecoder(tfrecord_io.transforms.spec_from_config(info["encoders"]))
    ds = from_dataset(root, "validation", batch_size=8, record_decoder=decoder)
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert sum(len(b["n"]) for b in batches) == info["splits"]["validation"]["records"]
    for b in batches:
        assert b["image"].shape[1:] == (8, 6, 3) and b["image"].dtype == torch.uint8
        assert torch.equal(b["image"][:, 0, 0, 0].long(), b["n"] % 256)
        assert isinstance(b["caption"], list) and b["caption"][0] == f"row {int(b['n'][0])}"


def test_corrupt_record_of_a_built_dataset_names_shard_and_offset(built, tmp_path):
    root, info, _ = built
    copy = str(tmp_path / "copy")
    shutil.copytree(root, copy)
    shard = os.path.join(copy, "v1", info["splits"]["train"]["shards"][1]["path"])
    offset = corrupt_data_byte(shard, 3)
    ds = from_dataset(copy, "train[5%:]", batch_size=4)
    it = iter(DataLoader(ds, batch_size=None, num_workers=2))
    try:
        with pytest.raises(
            RuntimeError, match=rf"{os.path.basename(shard)}, byte offset {offset}: corrupt record data"
        ):
            list(it)
    finally:
        it._shutdown_workers()


def test_beam_read_dataset_reads_the_selection_once(built):
    from apache_beam.testing.util import assert_that, equal_to

    root, info, order = built
    spec = "train[:75%]+validation[2:]"
    read = tfrecord_io.ReadDataset(root, spec, features=["n"], num_parts=5)
    want = expected(spec, info, order)
    assert read.selection.count == len(want)
    with beam.Pipeline() as p:
        ns = p | read | beam.Map(lambda r: int(r["n"][0]))
        assert_that(ns, equal_to(want))
    with beam.Pipeline() as p:
        raw = p | "bytes" >> tfrecord_io.ReadDataset(root, "test", output="bytes") | beam.Map(len)
        assert_that(raw | beam.combiners.Count.Globally(), equal_to([info["splits"]["test"]["records"]]))


def test_reads_a_dataset_on_the_s3_server(built, s3_server, s3_bucket, monkeypatch):
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    root, info, order = built
    client = s3_server.client()
    bucket = s3_bucket[len("s3://") :]
    for dirpath, _, names in os.walk(root):
        for name in names:
            local = os.path.join(dirpath, name)
            client.upload_file(local, bucket, "data/" + os.path.relpath(local, root))
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    FileSystems.set_options(PipelineOptions(s3_server.pipeline_args()))
    try:
        remote = s3_bucket + "/data"
        spec = "train[25%:]+validation[:4]"
        want = expected(spec, info, order)
        assert [int(r["n"][0]) for r in tfrecord_io.iter_dataset(remote, spec)] == want
        ds = from_dataset(remote, spec, batch_size=8, features=["n", "tokens"])
        assert all(f.path.startswith("s3://") for f in ds.selection.files)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = [int(i) for b in DataLoader(ds, batch_size=None, num_workers=2) for i in b["n"]]
        assert sorted(got) == sorted(want)
    finally:
        FileSystems.set_options(PipelineOptions([]))
