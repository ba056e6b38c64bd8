"""Failures a person can read (issue #12): the CLI's failure block, the log file,
exit codes, and the read-side defects a new user hits first (index sidecars matched
by a glob, ``with_filename``, ``--runner X`` spelled with a space, errors without a
path, records too big to hold).
"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
import textwrap

import apache_beam as beam
import pytest

import tfrecord_io as tfio
from tfrecord_io.beam.beam_io import ReadAllFromTFRecord, ReadFromTFRecord, WriteToTFRecord
from tfrecord_io.errors import ExampleCodecError, RecordTooLargeError
from tfrecord_io.format.framing import encode_frame

from tests.beam_support import multiset, run_pipeline
from tests.pipeline_support import IN_PROCESS, TWO_WORKERS, run_cli

# ---------------------------------------------------------------- reads skip sidecars


def _records(n, tag=b"r"):
    return [tag + b"-%05d" % i * (i % 7 + 1) for i in range(n)]


def test_write_then_read_with_a_star_skips_our_index_sidecars(tmp_path):
    """Beam's idiom: WriteToTFRecord("out/part", num_shards=2) then ReadFromTFRecord("out/part*")."""
    records = _records(40)
    prefix = str(tmp_path / "out" / "part")

    with beam.Pipeline() as p:
        _ = p | beam.Create(records) | WriteToTFRecord(prefix, num_shards=2)
    names = sorted(os.listdir(tmp_path / "out"))
    assert any(n.endswith(".index") for n in names), names  # the sidecars the glob also matches

    got, _ = run_pipeline(lambda p: {"records": p | ReadFromTFRecord(prefix + "*")}, str(tmp_path))
    assert multiset(got["records"]) == multiset(records)


def test_beams_own_sink_plus_indexes_then_read_with_a_star(tmp_path):
    """Beam's built-in sink, indexes added beside it (``tfrecord2idx DIR`` names them
    x.tfindex; our ``index`` command x.tfrecord.index), then our read of ``part*``."""
    records = _records(30, b"b")
    prefix = str(tmp_path / "out" / "part")
    with beam.Pipeline() as p:
        _ = p | beam.Create(records) | beam.io.WriteToTFRecord(prefix, num_shards=2)
    data = sorted(str(tmp_path / "out" / n) for n in os.listdir(tmp_path / "out"))
    assert len(data) == 2
    from tfrecord_io.format.index import create_index

    create_index(data[0], data[0] + ".index")
    create_index(data[1], os.path.splitext(data[1])[0] + ".tfindex")
    create_index(data[1], data[1] + ".idx")

    got, _ = run_pipeline(lambda p: {"records": p | ReadFromTFRecord(prefix + "*")}, str(tmp_path))
    assert multiset(got["records"]) == multiset(records)
    # ReadAll with the pattern, and with FileMetadata from Beam's own match, skip them too
    from apache_beam.io import fileio

    got, _ = run_pipeline(
        lambda p: {
            "a": p | "P" >> beam.Create([prefix + "*"]) | "A" >> ReadAllFromTFRecord(),
            "b": p | "M" >> fileio.MatchFiles(prefix + "*") | "B" >> ReadAllFromTFRecord(),
        },
        str(tmp_path),
    )
    assert multiset(got["a"]) == multiset(records)
    assert multiset(got["b"]) == multiset(records)


def test_a_file_named_index_without_its_data_file_is_still_read(tmp_path):
    """Only sidecars *of a data file* are skipped: a lone ``x.index`` asked for is read."""
    path = str(tmp_path / "lone.index")
    with tfio.RecordWriter(path) as w:
        w.write_records([b"a", b"b"])
    got, _ = run_pipeline(lambda p: {"records": p | ReadFromTFRecord(path)}, str(tmp_path))
    assert sorted(got["records"]) == [b"a", b"b"]


# ---------------------------------------------------------------- with_filename


def test_read_from_tfrecord_with_filename_gives_path_record_pairs(tmp_path):
    path = str(tmp_path / "f.tfrecord")
    with tfio.RecordWriter(path) as w:
        w.write_records([b"x", b"y"])
    got, _ = run_pipeline(lambda p: {"records": p | ReadFromTFRecord(path, with_filename=True)}, str(tmp_path))
    assert sorted(got["records"]) == [(path, b"x"), (path, b"y")]
    with pytest.raises(ValueError, match="pick one"):
        ReadFromTFRecord(path, with_filename=True, with_metadata=True)


# ---------------------------------------------------------------- --runner X


def test_runner_given_with_a_space_is_recognised():
    from tfrecord_io.pipelines.runtime.beam_options import beam_args, is_local, runner_name

    assert runner_name(["--runner", "FlinkRunner"]) == "FlinkRunner"
    assert not is_local(["--runner", "FlinkRunner"])
    assert not is_local(["--runner", "apache_beam.runners.portability.flink_runner.FlinkRunner"])
    assert is_local(["--runner", "DirectRunner"])
    assert runner_name(["--runner=SparkRunner", "--runner", "PrismRunner"]) == "PrismRunner"
    # a local run named with a space keeps its direct-runner defaults
    flags = beam_args(None, ["--runner", "DirectRunner"])
    assert "--direct_num_workers=2" in flags


def test_runner_with_a_space_gets_its_binary_and_no_direct_options(tmp_path, monkeypatch):
    from tfrecord_io.pipelines.runtime.beam_options import beam_args
    from tfrecord_io.pipelines.runtime.runners import FLINK_JAR

    (tmp_path / FLINK_JAR).write_bytes(b"jar")
    monkeypatch.setenv("TFRECORD_IO_RUNNER_CACHE", str(tmp_path))
    flags = beam_args(None, ["--runner", "FlinkRunner"])
    assert f"--flink_job_server_jar={tmp_path / FLINK_JAR}" in flags
    assert not any(f.startswith("--direct_") for f in flags)
    # given by the user with a space: not added again
    flags = beam_args(None, ["--runner", "FlinkRunner", "--flink_job_server_jar", "/opt/x.jar"])
    assert not any(f.startswith("--flink_job_server_jar=") for f in flags)


# ---------------------------------------------------------------- example_loader errors


def test_example_loader_error_names_path_and_offset(tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    good = tfio.serialize_example({"a": ([1], "int")})
    with tfio.RecordWriter(path) as w:
        w.write_records([good] * 3 + [b"\xff\xff\xff not an example"])
    with pytest.raises(ExampleCodecError) as err:
        list(tfio.example_loader(path, None, {"a": "int"}))
    assert err.value.path == path
    assert err.value.offset == 3 * (len(good) + 16)
    assert f"byte offset {3 * (len(good) + 16)}" in str(err.value)


def test_sequence_loader_error_names_path_and_offset(tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    with tfio.RecordWriter(path) as w:
        w.write_records([b"\xff\xff\xff not a sequence example"])
    with pytest.raises(ExampleCodecError) as err:
        list(tfio.sequence_loader(path, None))
    assert (err.value.path, err.value.offset) == (path, 0)


# ---------------------------------------------------------------- max_record_bytes


def _big_frame_file(path, size, compress=False):
    frame = encode_frame(b"z" * size)
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        f.write(frame)


@pytest.mark.parametrize("compress", [False, True])
def test_a_record_over_max_record_bytes_names_file_offset_and_size(tmp_path, compress):
    path = str(tmp_path / ("big.tfrecord.gz" if compress else "big.tfrecord"))
    _big_frame_file(path, 5000, compress)
    with pytest.raises(RecordTooLargeError) as err:
        list(tfio.tfrecord_iterator(path, max_record_bytes=4096))
    assert (err.value.path, err.value.offset) == (path, 0)
    assert "5000" in str(err.value) and "max_record_bytes" in str(err.value)
    assert [len(r) for r in tfio.tfrecord_iterator(path, max_record_bytes=5000)] == [5000]


def test_beam_read_honours_max_record_bytes(tmp_path):
    path = str(tmp_path / "big.tfrecord")
    _big_frame_file(path, 5000)
    with pytest.raises(Exception, match="record of 5000 bytes is over max_record_bytes=4096"):
        run_pipeline(lambda p: {"r": p | ReadFromTFRecord(path, max_record_bytes=4096)}, str(tmp_path))
    got, _ = run_pipeline(lambda p: {"r": p | ReadFromTFRecord(path, max_record_bytes=5000)}, str(tmp_path))
    assert [len(r) for r in got["r"]] == [5000]


_PEAK_SCRIPT = textwrap.dedent(
    """
    import resource, sys
    import tfrecord_io as tfio
    path, size = sys.argv[1], int(sys.argv[2])
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    n = 0
    for record in tfio.tfrecord_iterator(path, max_record_bytes=size):
        n += len(record)
        del record
    assert n == size, n
    print(base, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    """
)


@pytest.mark.parametrize("compress", [True, False])
def test_reading_one_huge_record_holds_one_copy(tmp_path, compress):
    """A small gzip file holding one 256 MiB record: peak RSS well under two copies."""
    size = 256 << 20
    path = str(tmp_path / ("huge.tfrecord.gz" if compress else "huge.tfrecord"))
    frame_head = encode_frame(b"")  # write the frame without holding the record twice here
    import struct

    from tfrecord_io.format.crc import masked_crc32c
    from tfrecord_io.format.framing import frame_header

    chunk = b"\0" * (1 << 20)
    opener = gzip.open if compress else open
    with opener(path, "wb") as f:
        f.write(frame_header(size))
        for _ in range(size >> 20):
            f.write(chunk)
        f.write(struct.pack("<I", masked_crc32c(bytes(size))))
    del frame_head
    proc = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, path, str(size)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    base, peak = map(int, proc.stdout.split())
    assert peak - base < 1.4 * size, f"peak {peak / 2**20:.0f} MiB, baseline {base / 2**20:.0f} MiB"


# ---------------------------------------------------------------- the CLI's failure block


def _cli(tmp_path, *args, timeout=600):
    """Run the CLI with its logs under tmp_path (returns the process and the log dir)."""
    logs = tmp_path / "logs"
    return run_cli(*args, log_dir=str(logs), timeout=timeout), logs


def _corrupt_file(tmp_path):
    path = str(tmp_path / "bad.tfrecord")
    with tfio.RecordWriter(path) as w:
        w.write_records([tfio.serialize_example({"a": ([i], "int")}) for i in range(5)])
    data = bytearray(open(path, "rb").read())
    second = len(data) // 5
    data[second + 3] ^= 1  # the second record's length field
    open(path, "wb").write(bytes(data))
    return path, second


def _log_path(stderr):
    m = re.search(r"^  log:\s+(\S+)", stderr, re.M)
    assert m, stderr
    return m.group(1)


def test_inspect_on_a_corrupt_file_ends_with_one_short_block(tmp_path):
    path, offset = _corrupt_file(tmp_path)
    proc, logs = _cli(
        tmp_path, "inspect", path, "--no-progress", *TWO_WORKERS
    )  # 2 worker processes (small input: asked for)
    assert proc.returncode == 1
    err = proc.stderr
    assert "Traceback" not in err and "apache_beam" not in err, err
    assert len(err.strip().splitlines()) <= 6, err
    first = err.strip().splitlines()[0]
    assert first == (
        f"tfrecord-io inspect failed: CorruptRecordError: {path}, byte offset {offset}: "
        "corrupt record header: the length field (" + first.split("the length field (")[1]
    )
    assert "where: tfrecord_io/beam/beam_source.py" in err  # the step that read it
    assert "state: nothing was written" in err
    assert "exit:  1 (the job failed)" in err
    log = _log_path(err)
    assert os.path.dirname(log) == str(logs)
    text = open(log).read()
    assert "Traceback (most recent call last)" in text and "CorruptRecordError" in text


def test_verbose_puts_the_tracebacks_on_the_terminal_too(tmp_path):
    path, _ = _corrupt_file(tmp_path)
    proc, _ = _cli(tmp_path, "inspect", path, "--no-progress", "--verbose", *IN_PROCESS)
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stderr
    assert "tfrecord-io inspect failed: CorruptRecordError" in proc.stderr


def test_a_successful_run_keeps_the_terminal_quiet_and_leaves_no_log(tmp_path):
    path = str(tmp_path / "ok.tfrecord")
    with tfio.RecordWriter(path) as w:
        w.write_records([tfio.serialize_example({"a": ([i], "int")}) for i in range(5)])
    proc, logs = _cli(
        tmp_path, "inspect", path, "--no-progress", *TWO_WORKERS
    )  # 2 worker processes (small input: asked for)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr  # no worker INFO lines, no warnings
    assert "5" in proc.stdout
    assert not logs.exists() or os.listdir(logs) == []
    # asked for by name, the log is kept
    proc, _ = _cli(tmp_path, "inspect", path, "--no-progress", "--log-file", str(tmp_path / "job.log"))
    assert proc.returncode == 0 and (tmp_path / "job.log").exists()


def test_index_with_an_empty_runner_cache_is_a_usage_error(tmp_path, monkeypatch):
    path = str(tmp_path / "a.tfrecord")
    with tfio.RecordWriter(path) as w:
        w.write_records([b"x"])
    monkeypatch.setenv("TFRECORD_IO_RUNNER_CACHE", str(tmp_path / "empty-cache"))
    proc, _ = _cli(tmp_path, "index", path, "--runner", "FlinkRunner")
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "scripts/fetch-runners" in proc.stderr and "exit:  2" in proc.stderr
    assert not os.path.exists(path + ".index")


def test_root_cause_is_found_in_a_runners_wrapped_text():
    from tfrecord_io.pipelines.runtime.failures import root_cause

    worker_text = textwrap.dedent(
        """\
        Traceback (most recent call last):
          File "/x/site-packages/apache_beam/runners/worker/sdk_worker.py", line 311, in _execute
            response = task()
          File "/src/tfrecord_io/beam/beam_source.py", line 270, in process
            for offset, item in items:
          File "/src/tfrecord_io/format/framing.py", line 435, in frames
            raise err
        tfrecord_io.errors.CorruptRecordError: /d/f.tfrecord, byte offset 30: corrupt record header [while running 'Read/ReadRanges']
        """
    )
    try:
        try:
            raise RuntimeError(worker_text)
        except RuntimeError as inner:
            raise RuntimeError("Pipeline failed") from inner
    except RuntimeError as err:
        cause = root_cause(err)
    assert cause.line == "CorruptRecordError: /d/f.tfrecord, byte offset 30: corrupt record header"
    assert cause.step == "Read/ReadRanges"
    assert cause.frame == "tfrecord_io/beam/beam_source.py:270, process"
