"""End-to-end on the distributed runners: Apache Flink, Apache Spark and Beam's Prism.

Each runner runs real pipelines from this process: the configs in ``configs/`` as the
job configs use them, with the job-server jars / Prism binary that ``scripts/fetch-runners``
put into the runner cache (a missing one FAILS the test with a message naming the
script -- it is never skipped). The SDK workers run LOOPBACK, i.e. inside this process,
so the tests can read the pipelines' output files directly.

What is asserted (never timings):
- one file read by the splittable read (the probe DoFn and ``tfrecord_io.ReadFromTFRecord``)
  yields exactly the records written, each once, and the file was processed as more than
  one restriction; on Flink and Spark (with ``pre_optimize=all`` from the configs) those
  restrictions were read by more than one SDK worker (Beam issue #24422);
- a corrupted file is reported with its path and the byte offset of the broken record;
- the build job's dataset validates on the runner (CRCs, spec, counts vs
  ``dataset_info.json``), and after a shard is corrupted, validate names that shard
  and offset.

Run: ``python -m pytest -m runners tests/test_runners.py`` (after scripts/fetch-runners).
"""

from __future__ import annotations

import glob
import os
import random
from collections import Counter
from typing import Any, Dict, List, Tuple

import apache_beam as beam
import pytest
import yaml
from apache_beam.io.restriction_trackers import OffsetRange
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.runners.runner import PipelineState

from tfrecord_io.beam.beam_io import ReadFromTFRecord
from tfrecord_io.dataset import dataset_writer
from tfrecord_io.format.index import build_index
from tfrecord_io.format.writer import RecordWriter
from tfrecord_io.pipelines.building.build_config import load_config
from tfrecord_io.pipelines.building.build_job import run_build
from tfrecord_io.pipelines.runtime.beam_options import beam_args
from tfrecord_io.pipelines.runtime.collect import ResultDir
from tfrecord_io.pipelines.runtime.runners import RunnerSetupError
from tfrecord_io.pipelines.validate_job import run_validate

from runner_probe import ProbeReadFn

pytestmark = pytest.mark.runners

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNERS = ["flink", "spark", "prism"]
# Runners that spread one file's restrictions over several SDK workers.
DISTRIBUTING = {"flink", "spark"}
PROBE_SPLITS = 8


def runner_flags(name: str) -> List[str]:
    """Beam flags from ``configs/<name>.yaml`` with the cached jar/binary filled in."""
    with open(os.path.join(REPO, "configs", f"{name}.yaml"), encoding="utf-8") as f:
        section = yaml.safe_load(f)["runner"]
    try:
        return beam_args(section, [])
    except RunnerSetupError as err:
        missing = str(err)
    pytest.fail(f"{missing}\n(the runner tests need bash scripts/fetch-runners to have run)", pytrace=False)


def payloads(n: int, seed: int) -> List[bytes]:
    rnd = random.Random(seed)
    return [b"%06d:" % i + rnd.randbytes(rnd.randint(20, 400)) for i in range(n)]


def write_file(path: str, records: List[bytes]) -> List[int]:
    """Write ``records``; return each record's byte offset."""
    offsets, pos = [], 0
    with RecordWriter(path) as w:
        for r in records:
            offsets.append(pos)
            w.write_record(r)
            pos += 16 + len(r)
    return offsets


def counter(result, namespace: str, name: str) -> int:
    """A counter summed over steps: committed where the runner reports it (Flink,
    Prism), else attempted (Spark's portable runner reports only attempted)."""
    total = 0
    for c in result.metrics().query(MetricsFilter().with_namespace(namespace).with_name(name))["counters"]:
        total += c.committed if c.committed is not None else c.attempted
    return total


def _hex(item: Tuple[Any, ...]) -> Dict[str, Any]:
    """JSON-able form of a (…, bytes) tuple for ResultDir."""
    return {"fields": [x.hex() if isinstance(x, (bytes, memoryview)) else x for x in item]}


@pytest.mark.parametrize("name", RUNNERS)
def test_one_file_is_read_as_several_restrictions_exactly_once(name, tmp_path):
    flags = runner_flags(name)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    good = payloads(3000, seed=1)
    good_path = str(data_dir / "good.tfrecord")
    good_offsets = write_file(good_path, good)
    bad = payloads(400, seed=2)
    bad_path = str(data_dir / "bad.tfrecord")
    bad_offsets = write_file(bad_path, bad)
    broken = 123
    with open(bad_path, "r+b") as f:  # flip a data byte of record 123: its data CRC fails
        f.seek(bad_offsets[broken] + 12 + 3)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    size = os.path.getsize(good_path)
    desired = size // 5 + 1

    with ResultDir(str(tmp_path / "results")) as results:
        p = beam.Pipeline(options=PipelineOptions(flags))
        probe = (
            p
            | "ProbeFile" >> beam.Create([good_path])
            | "ProbeRead" >> beam.ParDo(ProbeReadFn(PROBE_SPLITS))
            | "ProbeTag" >> beam.Map(lambda t: {"probe": [t[0], t[1], t[2].hex()]})
        )
        read = p | "Read" >> ReadFromTFRecord(
            str(data_dir / "*.tfrecord"),
            desired_bundle_size=desired,
            with_metadata=True,
            on_corrupt="dead_letter",
        )
        records = read.records | "RecordTag" >> beam.Map(lambda t: {"record": [t[0], t[1], bytes(t[2]).hex()]})
        dead = read.dead_letter | "DeadTag" >> beam.Map(lambda e: {"dead": e})
        (probe, records, dead) | beam.Flatten() | "Collect" >> results.sink()
        result = p.run()
        assert result.wait_until_finish() == PipelineState.DONE
        items = results.read()

    # The probe: every record once, from all PROBE_SPLITS restrictions of the one file.
    probe_rows = [i["probe"] for i in items if "probe" in i]
    assert Counter(bytes.fromhex(r[2]) for r in probe_rows) == Counter(good)
    starts = {r[0] for r in probe_rows}
    assert len(starts) == PROBE_SPLITS, starts
    workers = {r[1] for r in probe_rows}
    if name in DISTRIBUTING:
        assert len(workers) >= 2, f"{name}: all restrictions of one file ran in {workers}"

    # The package's read: same records with their offsets, the broken one reported.
    got = Counter((r[0], r[1], bytes.fromhex(r[2])) for i in items if "record" in i for r in [i["record"]])
    want = Counter((good_path, o, r) for o, r in zip(good_offsets, good))
    want.update((bad_path, o, r) for k, (o, r) in enumerate(zip(bad_offsets, bad)) if k != broken)
    assert got == want
    dead_rows = [i["dead"] for i in items if "dead" in i]
    assert len(dead_rows) == 1, dead_rows
    assert (dead_rows[0]["path"], dead_rows[0]["start"]) == (bad_path, bad_offsets[broken])
    assert "CRC" in dead_rows[0]["reason"]

    # Restrictions: at least the initial ranges of both files (more if a runner split
    # dynamically); the good file alone is several.
    initial = sum(
        len(list(OffsetRange(0, os.path.getsize(path)).split(desired, min(desired, 1 << 16))))
        for path in (good_path, bad_path)
    )
    assert len(list(OffsetRange(0, size).split(desired, min(desired, 1 << 16)))) > 1
    assert counter(result, "tfrecord_io", "restrictions") >= initial
    assert counter(result, "tfrecord_io", "records") == len(good) + len(bad) - 1
    assert counter(result, "tfrecord_io", "corrupt_regions") == 1
    assert counter(result, "runner_probe", "restrictions") >= PROBE_SPLITS


class _FlinkBundleOptions(PipelineOptions):
    """Flink's ``maxBundleSize`` as an option the Python SDK knows, so the portable runner
    passes it on to the job server (unknown flags are dropped)."""

    @classmethod
    def _add_argparse_args(cls, parser):
        parser.add_argument("--max_bundle_size", type=int, help="records per bundle on Flink (Flink's default: 1000)")


class _CountBundles(beam.DoFn):
    """Passes records on and counts its bundles (fused with the sink's dealing step)."""

    def __init__(self):
        self._bundles = Metrics.counter("test", "bundles")

    def process(self, element):
        yield element

    def finish_bundle(self):
        self._bundles.inc()


def test_sink_shards_are_even_over_flinks_small_bundles_of_one_record(tmp_path):
    """Flink in streaming mode cuts the input into bundles of ``max_bundle_size`` records
    (1,000 by default; 100 here): 100,000 copies of one record into 16 shards, every
    shard within 1% of the mean. Starting each bundle at the shard its first record's
    CRC picked gave 4 shards 7,000 records and 12 shards 6,000 (12% off the mean)."""
    from tfrecord_io.beam.beam_io import WriteToTFRecord
    from tfrecord_io.format.index import load_index

    flags = runner_flags("flink") + ["--streaming", "--max_bundle_size=100"]
    n = 100_000
    prefix = str(tmp_path / "s")
    p = beam.Pipeline(options=PipelineOptions(flags))
    (
        p
        | beam.Create([b"one record, repeated"] * n)
        | beam.ParDo(_CountBundles())
        | WriteToTFRecord(prefix, num_shards=16)
    )
    result = p.run()
    assert result.wait_until_finish() == PipelineState.DONE
    assert counter(result, "test", "bundles") >= 500
    counts = [len(load_index(path)) for path in sorted(glob.glob(prefix + "-*-of-00016.index"))]
    assert len(counts) == 16 and sum(counts) == n
    assert all(abs(c - n / 16) <= 0.01 * n / 16 for c in counts), counts


@pytest.fixture(scope="module")
def demo_config(demo_media):
    return demo_media(18)[1]


def _shard_records(version_dir: str, info: Dict[str, Any]) -> Dict[str, int]:
    return {
        os.path.join(version_dir, s["path"]): s["records"] for split in info["splits"].values() for s in split["shards"]
    }


@pytest.mark.parametrize("name", RUNNERS)
def test_build_then_validate_then_find_a_corrupted_shard(name, demo_config, tmp_path):
    flags = runner_flags(name)
    out = str(tmp_path / "dataset")
    cfg = load_config(demo_config, [("output.dir", out), ("output.version", "v1")])
    summary = run_build(cfg, PipelineOptions(flags), progress=False)
    version_dir = dataset_writer.resolve_dataset_dir(out)
    info = dataset_writer.load_info(version_dir)
    assert summary.written == info["records"] > 0
    assert summary.written + summary.rejected == summary.rows_in

    report = run_validate([out], PipelineOptions(flags), progress=False)
    assert report["ok"], report["problems"]
    assert report["records"] == info["records"]
    expected = _shard_records(version_dir, info)
    assert {p: n for p, n in report["records_per_file"].items() if n} == {p: n for p, n in expected.items() if n}

    # Break one record of the biggest shard; validate must name that file and offset.
    path = max(expected, key=lambda p: expected[p])
    offsets = build_index(path).offsets
    k = len(offsets) // 2
    with open(path, "r+b") as f:
        f.seek(int(offsets[k]) + 12 + 5)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x55]))
    report = run_validate([out], PipelineOptions(flags), checksums=False, progress=False)
    assert not report["ok"]
    corrupt = [p for p in report["problems"] if p["offset"] is not None]
    assert [(p["path"], p["offset"]) for p in corrupt] == [(path, int(offsets[k]))], report["problems"]
