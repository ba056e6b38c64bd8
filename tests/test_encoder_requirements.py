"""A media library the encoders need and a worker cannot import fails the job at the
worker's set-up, naming the column, the library and what to stage (transforms/
requirements.py): on workers that start clean (Dataflow, PROCESS environments), a
library left out of the staged requirements is an environment problem, not bad input,
and must not send every row to the dead-letter output one by one.

A library is made unimportable the way Python itself marks one: ``sys.modules[name] =
None`` (the import then raises ModuleNotFoundError), in this process for the in-process
runner, and in the CLI's own process for the command."""

from __future__ import annotations

import os
import subprocess
import sys

import apache_beam as beam
import pytest
from apache_beam.testing.util import assert_that, equal_to

from tfrecord_io.transforms import Array, Audio, EncodeExample, Image, Int, Label, Text
from tfrecord_io.transforms.encoders.sequence import AudioFrames
from tfrecord_io.transforms.requirements import check_requirements, missing_requirements
from tfrecord_io.usage_errors import MissingDependencyError

from tests.pipeline_support import IN_PROCESS, REPO, cli_env
from transforms_media import audio_bytes, sine

pytest.importorskip("soundfile")
pytest.importorskip("soxr")


def modules(encoder) -> list:
    return [need.module for need in encoder.requirements()]


def test_each_encoder_names_what_it_imports_with_its_parameters():
    assert modules(Image()) == ["PIL"]
    assert modules(Audio()) == ["soundfile"]  # no resampling: soundfile alone
    assert modules(Audio(sample_rate=16000)) == ["soundfile", "soxr"]  # the default resampler
    assert modules(Audio(sample_rate=16000, res_type="soxr_vhq")) == ["soundfile", "soxr"]
    assert modules(Audio(sample_rate=16000, res_type="kaiser_best")) == ["soundfile", "librosa"]
    assert modules(AudioFrames(400, sample_rate=8000)) == ["soundfile", "soxr"]
    for plain in (Text(), Int(), Label(["a", "b"]), Array(dtype="float32")):
        assert plain.requirements() == ()


def test_a_missing_library_is_named_with_its_column_and_what_to_stage(monkeypatch):
    spec = {"clip": Audio(sample_rate=16000), "caption": Text(), "photo": Image()}
    check_requirements(spec)  # all there: nothing raised
    monkeypatch.setitem(sys.modules, "soxr", None)
    monkeypatch.setitem(sys.modules, "PIL", None)
    assert [(c, n.package) for c, n, _ in missing_requirements(spec)] == [("clip", "soxr"), ("photo", "pillow")]
    with pytest.raises(MissingDependencyError) as err:
        check_requirements(spec)
    text = str(err.value)
    assert "column 'clip' (Audio) needs soxr" in text and "column 'photo' (Image) needs pillow" in text
    assert "--requirements_file constraints/workers-media.txt" in text and "tfrecord-io[media]" in text
    assert "caption" not in text


def test_encode_example_fails_at_set_up_rather_than_rejecting_every_row(monkeypatch):
    """Without the check, each row would go to ``rejected`` with "No module named
    'librosa'" and the pipeline would succeed with no examples."""
    wav = audio_bytes(sine(8000, 0.05, 1), 8000, "WAV")
    spec = {"clip": Audio(sample_rate=16000, res_type="kaiser_best")}
    monkeypatch.setitem(sys.modules, "librosa", None)
    with pytest.raises(Exception) as err:
        with beam.Pipeline(options=beam.options.pipeline_options.PipelineOptions(IN_PROCESS)) as p:
            result = p | beam.Create([{"clip": wav}] * 3) | EncodeExample(spec)
            assert_that(result.rejected, equal_to([]), label="none rejected")
    assert "MissingDependencyError" in repr(err.value) or isinstance(err.value, MissingDependencyError), err.value
    assert "needs librosa" in str(err.value), err.value


BLOCKED_CLI = "import sys; sys.modules['soundfile'] = None; from tfrecord_io.pipelines.cli import run; run()"


def test_a_build_on_a_worker_without_soundfile_exits_2_naming_it(tmp_path):
    """The demo's build where soundfile cannot be imported: exit 2 naming the audio
    column and soundfile, no version published, and no row reported as rejected."""
    from tfrecord_io.pipelines.demo_data import make_demo_media

    config = make_demo_media(str(tmp_path / "media"), rows=6)
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-c", BLOCKED_CLI, "build", config, "--output", str(out), "--no-progress", *IN_PROCESS],
        capture_output=True,
        text=True,
        env=cli_env(),
        cwd=REPO,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "column 'audio' (Audio) needs soundfile" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not os.path.exists(out / "LATEST")
    assert "rejected" not in proc.stdout, proc.stdout
