"""The build config as one typed object (``pipelines/building/build_config.py``): parsed once into
frozen dataclasses, the same mapping form as before, picklable for the workers; its
JSON Schema generated from those classes and shipped beside them; one parser for the
``{encoder: image}`` and ``{type: Image}`` ways of naming an encoder."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import pickle
import re
import subprocess
import sys

import jsonschema
import pytest
import yaml

from tfrecord_io.pipelines.building import build_config
from tfrecord_io.pipelines.building.build_config import (
    SCHEMA_FILE,
    BuildConfig,
    ColumnConfig,
    ConfigError,
    InputConfig,
    json_schema,
    json_schema_text,
    load_config,
    validate_build_config,
)
from tfrecord_io.pipelines.building.encoders_config import make_encoders
from tfrecord_io.transforms.config import encoder_from_config, spec_from_config

from tests.pipeline_support import REPO

DATASET_CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "datasets", "*.yaml")))
RUNNER_CONFIGS = sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml")))


def _validator() -> jsonschema.Draft202012Validator:
    with open(SCHEMA_FILE, encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def _errors(data) -> list:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in _validator().iter_errors(data)]


def _minimal(**changes):
    raw = {"name": "t", "input": {"manifest": "m.csv"}, "columns": {"x": {"encoder": "int"}}, "output": {"dir": "o"}}
    raw.update(changes)
    return raw


# --- the objects ---------------------------------------------------------------------


def test_load_config_returns_frozen_typed_sections():
    cfg = load_config(os.path.join(REPO, "configs", "datasets", "image-folder.yaml"))
    assert isinstance(cfg, BuildConfig) and isinstance(cfg.input, InputConfig)
    assert cfg.input.directory == os.path.join(REPO, "configs", "datasets", "images")
    assert cfg.input.manifest is None and cfg.input.glob == "*.[jJpP][pPnN][gG]*"
    assert cfg.columns["image"] == ColumnConfig(
        "image", column="path", params={"mode": "RGB", "reencode": "jpeg", "quality": 90, "resize": [224, 224]}
    )
    assert cfg.columns["label"].params == {"vocabulary": "auto"}
    assert cfg.splits.weights == {"train": 0.9, "validation": 0.1}
    assert cfg.sharding.num_shards is None and cfg.sharding.target_shard_bytes == 256 << 20
    assert cfg.output.version == "auto" and cfg.output.write_index is True and cfg.runner.runner == "DirectRunner"
    assert cfg.media_columns == ["image"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.seed = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.output.dir = "/elsewhere"  # type: ignore[misc]


@pytest.mark.parametrize("path", DATASET_CONFIGS, ids=os.path.basename)
def test_mapping_form_round_trips_and_pickles(path):
    """``to_dict`` is what tfrecord_io_info.json and the fingerprint take: every field,
    defaults filled in; the object survives the picklers Beam uses for the stages."""
    import cloudpickle
    import dill

    cfg = load_config(path)
    data = cfg.to_dict()
    assert list(data) == list(build_config.SCHEMA)  # every field, in the schema's order
    assert BuildConfig.from_dict(data) == cfg
    assert json.loads(json.dumps(data)) == data
    assert cfg["output"]["dir"] == cfg.output.dir and cfg.get("key") == cfg.key  # for mapping-style callers
    for pickler in (pickle, cloudpickle, dill):
        assert pickler.loads(pickler.dumps(cfg)) == cfg


def test_a_derived_config_keeps_its_derive_entry():
    cfg = validate_build_config(_minimal(), require_input=False).replace(derive={"base": "v1", "operation": "append"})
    assert cfg.to_dict()["_derive"] == {"base": "v1", "operation": "append"}
    assert BuildConfig.from_dict(cfg.to_dict()) == cfg
    assert "_derive" not in validate_build_config(_minimal()).to_dict()


def test_build_dataset_takes_the_object_a_mapping_or_a_path(tmp_path):
    import tfrecord_io as tfio

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_minimal(output={"dir": "out", "version": "v1"})))
    cfg = load_config(str(path))
    from_obj = tfio.BuildDataset(cfg)
    assert from_obj.spec.config is cfg  # not parsed again
    from_path = tfio.BuildDataset(str(path))
    from_dict = tfio.BuildDataset(cfg.to_dict())
    assert from_path.spec.config == cfg == from_dict.spec.config
    moved = tfio.BuildDataset(cfg, output_dir=str(tmp_path / "elsewhere"))
    assert moved.spec.config.output.dir == moved.spec.out_dir == str(tmp_path / "elsewhere")
    assert tfio.BuildDataset({"name": "t", "columns": {"x": "int"}}, output_dir="rel").spec.out_dir == "rel"


def test_run_build_parses_and_checks_once(tmp_path, monkeypatch):
    """``run_build`` takes the object as it is: no second validation, and the pipeline's
    ``BuildDataset`` is the spec the launcher checked (its encoders not made again)."""
    from tfrecord_io.pipelines.building import build_job as job
    from tfrecord_io.pipelines.building import transform

    from tests.pipeline_support import options

    (tmp_path / "m.csv").write_text("id,n\n" + "".join(f"{i},{i * 3}\n" for i in range(12)))
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(_minimal(key="id", columns={"n": "int"}, output={"dir": "out", "version": "v1"})))
    cfg = load_config(str(path))

    def refuse(*args, **kwargs):
        raise AssertionError("parsed or built again")

    monkeypatch.setattr(build_config, "_validated_dict", refuse)
    monkeypatch.setattr(transform.BuildDataset, "__init__", refuse)
    summary = job.run_build(cfg, options(), progress=False, log=lambda *a: None)
    assert summary.written == 12 and summary.version == "v1"


def test_config_errors_still_name_every_field(tmp_path):
    with pytest.raises(ConfigError) as err:
        validate_build_config(
            {"name": 3, "colums": {}, "columns": {"a": {"encoder": "img"}}, "output": {}, "dedup": "maybe"}
        )
    text = str(err.value)
    for expected in (
        "name: expected a string, got 3",
        "colums: unknown field (known: ",
        "columns.a.encoder: unknown encoder 'img'",
        "output.dir: required",
        "dedup: 'maybe' is not one of 'error', 'key', 'content'",
        "input: give exactly one of input.manifest or input.directory",
    ):
        assert expected in text


# --- one way to name an encoder ------------------------------------------------------


@pytest.mark.parametrize(
    "encoder, type_name, params",
    [
        ("image", "Image", {"reencode": "jpeg", "quality": 80, "resize": [32, 32]}),
        ("label", "Label", {"vocabulary": ["cat", "dog"]}),
        ("text", "Text", {"normalize": "NFC", "strip": True}),
        ("int", "Int", {}),
        ("audio_frames", "AudioFrames", {"frame_length": 400, "hop_length": 160}),
        ("steps", "Steps", {"kind": "float", "step_length": 3}),
    ],
)
def test_both_dialects_give_the_same_encoder(encoder, type_name, params):
    by_type = encoder_from_config({"type": type_name, **params})
    by_name = encoder_from_config({"encoder": encoder, **params})
    assert type(by_name) is type(by_type) and by_name.to_config() == by_type.to_config()
    # and what a build config makes of the same column (its encoders are one value per row)
    if encoder in build_config.ENCODER_NAMES:
        built = make_encoders({"c": ColumnConfig(encoder, column="src", params=params)})["c"]
        assert type(built) is type(by_type)
    # the info file's form (type) reads back as the same encoder
    assert spec_from_config({"c": by_name.to_config()})["c"].to_config() == by_type.to_config()


def test_one_parser_refuses_ambiguous_or_unknown_names():
    with pytest.raises(ValueError, match="give the encoder once"):
        encoder_from_config({"encoder": "image", "type": "Image"})
    with pytest.raises(ValueError, match=r"unknown encoder 'img'; one of \['array', 'audio', 'audio_frames'"):
        encoder_from_config({"encoder": "img"})
    with pytest.raises(ValueError, match="unknown encoder type 'image'"):
        encoder_from_config({"type": "image"})  # the class name, as to_config() writes it


# --- the JSON Schema -----------------------------------------------------------------


def test_shipped_schema_is_the_generated_one():
    with open(SCHEMA_FILE, encoding="utf-8") as f:
        shipped = f.read()
    assert shipped == json_schema_text(), (
        "build-config.schema.json is out of date: python -m tfrecord_io.pipelines.building.build_config --schema"
    )
    assert json.loads(shipped) == json_schema()


def test_schema_command_prints_the_schema():
    proc = subprocess.run(
        [sys.executable, "-m", "tfrecord_io.pipelines.building.build_config", "--print"],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.stdout == json_schema_text()


def test_schema_file_is_package_data():
    with open(os.path.join(REPO, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    assert re.search(r'tfrecord_io = \[[^\]]*"pipelines/building/\*\.schema\.json"', text)


@pytest.mark.parametrize("path", DATASET_CONFIGS, ids=os.path.basename)
def test_dataset_configs_pass_the_schema(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    assert text.startswith(
        "# yaml-language-server: $schema=../../tfrecord_io/pipelines/building/build-config.schema.json"
    )
    assert _errors(yaml.safe_load(text)) == []


def test_runner_configs_pass_the_runner_section_schema():
    schema = json_schema()
    runner = {**schema["$defs"]["RunnerConfig"], "$defs": schema["$defs"]}
    for path in RUNNER_CONFIGS:
        with open(path, encoding="utf-8") as f:
            section = yaml.safe_load(f)["runner"]
        assert list(jsonschema.Draft202012Validator(runner).iter_errors(section)) == [], path


def test_demo_and_docs_configs_pass_the_schema():
    from tfrecord_io.pipelines.demo_data import DEMO_CONFIG

    assert _errors(yaml.safe_load(DEMO_CONFIG)) == []
    with open(os.path.join(REPO, "docs", "jobs.md"), encoding="utf-8") as f:
        docs = f.read()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", docs, re.S) if "columns:" in b]
    blocks += [b for b in re.findall(r'f\.write\(\n\s+"""(.*?)"""', docs, re.S) if "columns:" in b]
    assert len(blocks) >= 2
    for block in blocks:
        assert _errors(yaml.safe_load(block)) == [], block


@pytest.mark.parametrize(
    "change, expected",
    [
        ({"colums": {}}, "Additional properties are not allowed ('colums' was unexpected)"),
        ({"seed": "abc"}, "seed: 'abc' is not of type 'integer', 'null'"),
        ({"output": {"dir": "o", "compresion": "gzip"}}, "output: Additional properties"),
        ({"output": {}}, "output: 'dir' is a required property"),
        ({"dedup": "maybe"}, "dedup: 'maybe' is not one of"),
        ({"sharding": {"num_shards": 0}}, "sharding/num_shards: 0 is less than the minimum of 1"),
        ({"splits": {"train": -1}}, "splits/train: -1 is less than the minimum of 0"),
        ({"input": {"manifest": "m.csv", "directory": "d"}}, "input: "),
        ({"columns": {"x": {"encoder": "img"}}}, "columns/x: "),
        ({"columns": {"x": {"encoder": "text", "normalise": "NFC"}}}, "columns/x: "),
        ({"columns": {}}, "columns: {} should be non-empty"),
    ],
)
def test_a_broken_config_fails_the_schema(change, expected):
    assert _errors(_minimal()) == []
    errors = _errors(_minimal(**change))
    assert any(e.startswith(expected) or expected in e for e in errors), errors
