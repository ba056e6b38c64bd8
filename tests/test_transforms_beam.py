"""EncodeExample / DecodeExample on real Beam runners: dead-letter output, counters
(rows in = Examples out + rejected), and round trips through TFRecord files."""

from __future__ import annotations

import glob
import os

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.io.tfrecordio import ReadFromTFRecord as BeamReadFromTFRecord
from apache_beam.io.tfrecordio import WriteToTFRecord as BeamWriteToTFRecord
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.util import assert_that, equal_to
from PIL import Image as PILImage

from tfrecord_io.format.reader import read_records
from tfrecord_io.transforms import (
    Audio,
    DecodeExample,
    DecodeSequenceExample,
    EncodeExample,
    EncodeSequenceExample,
    Image,
    Int,
    Label,
    Steps,
    Text,
    beam_decode,
    beam_encode,
    decode_example,
    decode_sequence_example,
    validate,
)

from transforms_media import audio_bytes, image_bytes, pixels, sine, truncated_jpeg

RUNNERS = {
    "direct": ["--runner=DirectRunner"],
    "multiprocess2": ["--runner=DirectRunner", "--direct_running_mode=multi_processing", "--direct_num_workers=2"],
}


def counters(result, namespace):
    out = {}
    for c in result.metrics().query(MetricsFilter().with_namespace(namespace))["counters"]:
        out[c.key.metric.name] = out.get(c.key.metric.name, 0) + c.committed
    return out


def make_rows(tmp_path, n_good=12):
    """Good rows plus one of every kind of broken input; the reason each must give."""
    rows, bad = [], {}
    for i in range(n_good):
        path = tmp_path / f"img{i}.png"
        path.write_bytes(image_bytes(PILImage.fromarray(pixels(8 + i, 10, 3, seed=i)), "PNG"))
        audio = tmp_path / f"a{i}.flac"
        audio.write_bytes(audio_bytes(sine(8000 + 1000 * (i % 3), 0.05, 1 + i % 2), 8000 + 1000 * (i % 3), "FLAC"))
        rows.append(
            {
                "id": i,
                "image": str(path),
                "caption": f"picture {i} — ünïcödé",
                "label": ["cat", "dog"][i % 2],
                "audio": str(audio),
            }
        )
    good_audio = rows[0]["audio"]

    def add(kind, stage, column, **change):
        row = {**rows[0], "id": 1000 + len(bad), **change}
        rows.append(row)
        bad[row["id"]] = (kind, stage, column)

    trunc = tmp_path / "trunc.jpg"
    trunc.write_bytes(truncated_jpeg())
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    text_as_jpg = tmp_path / "readme.jpg"
    text_as_jpg.write_text("not an image")
    big = tmp_path / "big.png"
    big.write_bytes(image_bytes(PILImage.fromarray(pixels(100, 100, 3)), "PNG"))
    bad_audio = tmp_path / "bad.ogg"
    bad_audio.write_bytes(b"OggS" + bytes(50))
    add("truncated", "decode", "image", image=str(trunc))
    add("zero bytes", "read", "image", image=str(empty))
    add("missing", "read", "image", image=str(tmp_path / "nope.png"))
    add("wrong extension", "decode", "image", image=str(text_as_jpg))
    add("bomb", "decode", "image", image=str(big))
    add("bad utf-8", "decode", "caption", caption=b"caf\xe9")
    add("unknown label", "transform", "label", label="horse")
    add("bad audio", "decode", "audio", audio=str(bad_audio))
    add("missing column", "input", "label", label=None)
    assert good_audio
    return rows, bad


SPEC = {
    "image": Image(mode="RGB", max_pixels=5000),
    "caption": Text(normalize="NFC"),
    "label": Label(vocabulary=["cat", "dog"]),
    "audio": Audio(sample_rate=8000, mono=True),
    "id": Int(),
}


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_dead_letter_counts_and_round_trip_through_files(tmp_path, runner):
    rows, bad = make_rows(tmp_path)
    out_prefix = str(tmp_path / "out" / "data")
    rejected_path = str(tmp_path / "rejected")
    p = beam.Pipeline(options=PipelineOptions(RUNNERS[runner]))
    result = p | beam.Create(rows) | EncodeExample(SPEC)
    result.examples | BeamWriteToTFRecord(out_prefix, file_name_suffix=".tfrecord", num_shards=2)

    def summary(rej):
        return (rej["row"]["id"], rej["stage"], rej["column"], bool(rej["reason"]))

    expected = [(i, stage, column, True) for i, (_, stage, column) in bad.items()]
    assert_that(result.rejected | beam.Map(summary), equal_to(expected), label="RejectedAsExpected")
    (
        result.rejected
        | beam.Map(lambda r: f"{r['row']['id']}\t{r['stage']}\t{r['reason']}")
        | beam.io.WriteToText(rejected_path)
    )
    run = p.run()
    run.wait_until_finish()

    c = counters(run, beam_encode.NAMESPACE)
    assert c["rows_in"] == len(rows) == c["examples_out"] + c["rejected"]
    assert c["rejected"] == len(bad) and c["examples_out"] == len(rows) - len(bad)
    assert c["rejected_decode"] == sum(1 for _, s, _ in bad.values() if s == "decode")

    reasons = "".join(open(f).read() for f in glob.glob(rejected_path + "*"))
    assert "decompression bomb" in reasons and "truncated" in reasons.lower() and "no such file" in reasons
    assert "not valid UTF-8 at byte 3" in reasons and "not in the vocabulary" in reasons

    # read back with the format core and decode with the same spec
    shards = sorted(glob.glob(out_prefix + "*.tfrecord"))
    assert len(shards) == 2
    decoded = [decode_example(rec, SPEC) for s in shards for _, rec in read_records(s)]
    by_id = {d["id"]: d for d in decoded}
    assert sorted(by_id) == [r["id"] for r in rows if r["id"] not in bad]
    for r in rows:
        if r["id"] in bad:
            continue
        d = by_id[r["id"]]
        np.testing.assert_array_equal(d["image"], pixels(8 + r["id"], 10, 3, seed=r["id"]))
        assert d["caption"] == r["caption"] and d["label"] == r["id"] % 2
        assert d["audio"].sample_rate == 8000 and d["audio"].samples.shape[1] == 1


def test_decode_transform_reads_beam_files_and_rejects_garbage(tmp_path):
    rows, bad = make_rows(tmp_path, n_good=5)
    good = [r for r in rows if r["id"] not in bad]
    prefix = str(tmp_path / "x")
    with beam.Pipeline(options=PipelineOptions(RUNNERS["direct"])) as p:
        (p | beam.Create(good) | EncodeExample(SPEC)).examples | BeamWriteToTFRecord(prefix, num_shards=1)
    p = beam.Pipeline(options=PipelineOptions(RUNNERS["direct"]))
    records = p | BeamReadFromTFRecord(prefix + "*")
    garbage = p | "Garbage" >> beam.Create([b"\x0a\x05garbage"])
    out = (records, garbage) | beam.Flatten() | DecodeExample(SPEC)
    assert_that(
        out.decoded | "Summ" >> beam.Map(lambda d: (d["id"], d["caption"], d["image"].shape)),
        equal_to([(r["id"], r["caption"], (8 + r["id"], 10, 3)) for r in good]),
        label="Decoded",
    )
    assert_that(
        out.rejected | "Why" >> beam.Map(lambda r: (r["stage"], "Example" in r["reason"])),
        equal_to([("decode", True)]),
        label="Rejected",
    )
    run = p.run()
    run.wait_until_finish()
    c = counters(run, beam_decode.NAMESPACE)
    assert c == {"records_in": len(good) + 1, "decoded": len(good), "rejected": 1}


def test_metrics_namespaces_are_the_module_names():
    """What a dashboard filters on: each transform module's counters under its own name
    (not a module that no longer exists)."""
    assert beam_encode.NAMESPACE == beam_encode.__name__ == "tfrecord_io.transforms.beam_encode"
    assert beam_decode.NAMESPACE == beam_decode.__name__ == "tfrecord_io.transforms.beam_decode"
    assert validate.NAMESPACE == validate.__name__


def test_sequence_examples_in_beam(tmp_path):
    rows = [{"id": i, "tokens": ["a", "b", "c"][: i + 1]} for i in range(3)] + [{"id": 9, "tokens": ["zzz"]}]
    seq = {"tokens": Steps("int", vocabulary=["a", "b", "c"])}
    with beam.Pipeline(options=PipelineOptions(RUNNERS["direct"])) as p:
        out = p | beam.Create(rows) | EncodeSequenceExample({"id": Int()}, seq)
        decoded = (
            out.examples
            | "Dec" >> beam.Map(lambda b: decode_sequence_example(b, {"id": Int()}, seq))
            | "Tok" >> beam.Map(lambda d: (d["id"], d["tokens"].tolist()))
        )
        assert_that(decoded, equal_to([(0, [0]), (1, [0, 1]), (2, [0, 1, 2])]), label="Seq")
        assert_that(
            out.rejected | "Why" >> beam.Map(lambda r: (r["row"]["id"], r["column"], r["stage"])),
            equal_to([(9, "tokens", "transform")]),
            label="SeqRejected",
        )


def test_spec_errors_raise_at_construction():
    with pytest.raises(ValueError):
        EncodeExample({"a": Image(), "b": Image(key="a")})
    with pytest.raises(TypeError):
        EncodeExample({"a": "image"})
    with pytest.raises(TypeError):
        EncodeSequenceExample(None, {"t": Text()})


@pytest.mark.parametrize("transform", [EncodeSequenceExample, DecodeSequenceExample])
def test_sequence_specs_are_checked_alike_to_encode_and_to_decode(transform):
    """What cannot encode cannot decode either: both refuse it when built."""
    with pytest.raises(ValueError, match="in both context and sequence"):
        transform({"t": Text()}, {"t": Steps("int")})
    with pytest.raises(TypeError, match="sequence: 'x' maps to"):
        transform(None, {"x": Int()})
    with pytest.raises(TypeError, match="context: 'c' maps to"):
        transform({"c": Steps("int")}, {"x": Steps("int")})
    with pytest.raises(ValueError, match="two encoders write the key 'x'"):
        transform({"c": Int(key="x")}, {"x": Steps("int")})


@pytest.mark.parametrize("runner", sorted(RUNNERS))
def test_round_trip_through_the_package_sink_and_split_read(tmp_path, runner):
    """EncodeExample -> tfrecord_io.WriteToTFRecord (sharded, indexed) -> then
    tfrecord_io.ReadFromTFRecord cut into 2 KB ranges -> DecodeExample: every good row
    comes back exactly once, equal to what went in."""
    from tfrecord_io import ReadFromTFRecord, WriteToTFRecord

    rows, bad = make_rows(tmp_path, n_good=30)
    good = {r["id"]: r for r in rows if r["id"] not in bad}
    prefix = str(tmp_path / "ds" / "train")
    with beam.Pipeline(options=PipelineOptions(RUNNERS[runner])) as p:
        enc = p | beam.Create(rows) | EncodeExample(SPEC)
        enc.examples | WriteToTFRecord(prefix, file_name_suffix=".tfrecord", num_shards=3)
    shards = sorted(glob.glob(prefix + "*.tfrecord"))
    assert len(shards) == 3 and all(os.path.exists(s + ".index") for s in shards)
    out = str(tmp_path / "decoded")
    with beam.Pipeline(options=PipelineOptions(RUNNERS[runner])) as p:
        dec = (
            p
            | ReadFromTFRecord(prefix + "*.tfrecord", desired_bundle_size=2048, index_pattern=False)
            | DecodeExample(SPEC)
        )
        summary = dec.decoded | beam.Map(
            lambda d: "\t".join(
                [str(d["id"]), d["caption"], d["image"].tobytes().hex(), str(d["audio"].samples.shape), str(d["label"])]
            )
        )
        summary | beam.io.WriteToText(out)
        (
            dec.rejected
            | "CountRejected" >> beam.combiners.Count.Globally()
            | "Zero" >> beam.Map(lambda n: n == 0)
            | "WriteOK" >> beam.io.WriteToText(out + "-ok")
        )
    lines = [line.rstrip("\n").split("\t") for f in glob.glob(out + "-0*") for line in open(f)]
    assert sorted(int(x[0]) for x in lines) == sorted(good)  # each exactly once
    for ident, caption, pixels_hex, shape, label in lines:
        r = good[int(ident)]
        assert caption == r["caption"] and int(label) == r["id"] % 2
        assert pixels_hex == pixels(8 + r["id"], 10, 3, seed=r["id"]).tobytes().hex()
        assert shape.startswith("(") and shape.endswith(", 1)")
    assert [open(f).read().strip() for f in glob.glob(out + "-ok*")] == ["True"]
