"""Job configuration: YAML files under ``configs/`` that fully describe a job.

A config is validated once, by :func:`load_config` (or :func:`validate_build_config`),
into a frozen :class:`BuildConfig`; every problem names the field at fault
(``columns.image.quality: expected an integer, got 'high'``). The build's stages get that
object, never the raw mapping, so a field is read in one place and typed there.
Command-line flags override fields with ``--set dotted.key=value`` (the value is parsed
as YAML), and the common ones have flags of their own (``--output``, ``--runner`` ...).

The dataclasses below are the one description of the format: the validator's
:data:`SCHEMA` and the JSON Schema editors use (:func:`json_schema`, shipped as
``build-config.schema.json`` beside this file) are both generated from their fields.
Regenerate the shipped file with ``python -m tfrecord_io.pipelines.building.build_config --schema``.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import inspect
import json
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Type, TypeVar, Union

import yaml

# ConfigError is defined with the rest of the usage errors (runner configs raise it too)
# and imported from here as before.
from tfrecord_io.usage_errors import ConfigError


@dataclass(frozen=True)
class Field:
    """Schema of one config field: its type(s), whether required, default, choices."""

    types: tuple
    required: bool = False
    default: Any = None
    choices: Optional[tuple] = None
    doc: str = ""


_NUM = (int, float)

ENCODER_NAMES = ("image", "audio", "text", "int", "float", "label", "array", "bytes")


def encoder_class(name: str) -> type:
    """The encoder class of a job config's encoder name (``config.ENCODER_NAMES``). A job
    config takes the encoders of one value per row; the sequence encoders (``steps``,
    ``audio_frames``) are for ``spec_from_config``."""
    from tfrecord_io.transforms.config import ENCODERS_BY_NAME

    if name not in ENCODER_NAMES:
        raise KeyError(name)
    return ENCODERS_BY_NAME[name]


# Columns whose values are paths to media files (resolved against the manifest's folder).
MEDIA_ENCODERS = ("image", "audio")

SCHEMA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build-config.schema.json")


def _opt(
    types: tuple,
    default: Any = None,
    *,
    required: bool = False,
    choices: Optional[tuple] = None,
    doc: str = "",
    factory: Any = None,
    yaml_default: Any = dataclasses.MISSING,
    json: Optional[Dict[str, Any]] = None,
) -> Any:
    """A dataclass field that also describes its YAML form (``metadata``), from which
    :data:`SCHEMA` and :func:`json_schema` are generated. ``yaml_default`` is what the
    YAML omits when it differs from the parsed default (``'256MiB'`` vs its bytes)."""
    meta = {
        "field": Field(
            types,
            required=required,
            default=default if yaml_default is dataclasses.MISSING else yaml_default,
            choices=choices,
            doc=doc,
        ),
        "json": json or {},
    }
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def _section(cls: type, doc: str = "") -> Any:
    """A nested mapping of the YAML, parsed into ``cls``."""
    return field(default_factory=cls, metadata={"section": cls, "doc": doc})


@dataclass(frozen=True)
class InputConfig:
    """``input``: where ``tfrecord-io build`` reads its rows (a manifest or a folder tree).
    Paths are absolute once loaded (resolved against the config file's folder)."""

    manifest: Optional[str] = _opt((str,), doc="CSV or JSONL file, one row per example")
    directory: Optional[str] = _opt((str,), doc="a root/<label>/<file> tree")
    format: str = _opt((str,), "auto", choices=("auto", "csv", "jsonl"))
    multiline_values: Union[str, bool] = _opt(
        (str, bool),
        "auto",
        choices=("auto", True, False),
        doc="may a CSV's quoted values hold line breaks? auto: only if it has a '\"' (then one worker reads it); "
        "false: never (cut it into ranges read in parallel); true: yes (one worker reads it)",
    )
    glob: str = _opt((str,), "*", doc="files to take from a directory layout")
    label_column: str = _opt((str,), "label")
    path_column: str = _opt((str,), "path")


@dataclass(frozen=True)
class ColumnConfig:
    """One entry of ``columns``: ``{encoder: image, column: path, quality: 90}``.

    ``params`` are the encoder's keyword arguments as written (checked against its
    signature when the encoders are made); ``column`` is the input column it reads
    (default: the feature's own name)."""

    encoder: str
    column: Optional[str] = None
    params: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Union[str, Mapping[str, Any]]) -> ColumnConfig:
        """``'int'`` or ``{encoder: int, ...}`` (validated) -> the column's config."""
        if isinstance(settings, str):
            return cls(encoder=settings)
        params = {k: v for k, v in settings.items() if k not in ("encoder", "column")}
        return cls(encoder=str(settings["encoder"]), column=settings.get("column"), params=copy.deepcopy(params))

    def settings(self) -> Dict[str, Any]:
        """The mapping form (``{encoder: ..., column: ..., **params}``), as configs and
        ``tfrecord_io_info.json`` hold it."""
        out: Dict[str, Any] = {"encoder": self.encoder}
        if self.column is not None:
            out["column"] = self.column
        out.update(copy.deepcopy(self.params))
        return out

    @property
    def is_media(self) -> bool:
        return self.encoder in MEDIA_ENCODERS


@dataclass(frozen=True)
class SplitsConfig:
    """``splits``: split name -> weight (its share of the rows)."""

    weights: Dict[str, float] = field(default_factory=lambda: {"train": 1.0})

    def active(self) -> Dict[str, float]:
        """The splits rows can go to (weight > 0), in the config's order."""
        return {k: v for k, v in self.weights.items() if v > 0}


@dataclass(frozen=True)
class ShardingConfig:
    """``sharding``: a fixed shard count per split, or one derived from a target size."""

    num_shards: Optional[int] = _opt((int,), doc="shards per split (fixed)", json={"minimum": 1})
    target_shard_bytes: int = _opt(
        (int, str),
        256 << 20,
        yaml_default="256MiB",
        doc="derive shards per split from size (bytes, or e.g. 256MiB, 1GB)",
    )


@dataclass(frozen=True)
class OutputConfig:
    """``output``: where versions are written and how."""

    dir: str = _opt((str,), "", required=True, doc="the dataset's folder (versions are written under it)")
    version: str = _opt((str,), "auto", doc="'auto' = UTC timestamp")
    compression: str = _opt((str,), "", choices=("", "none", "gzip", "zlib"))
    write_index: bool = _opt((bool,), True)


@dataclass(frozen=True)
class RunnerConfig:
    """``runner``: the Beam runner and its pipeline options (``configs/*.yaml``)."""

    runner: str = _opt((str,), "DirectRunner")
    options: Dict[str, Any] = _opt((dict,), factory=dict, yaml_default={})

    def section(self) -> Dict[str, Any]:
        """The mapping form ``runtime.beam_options.beam_args`` takes (as a ``--runner-config``
        file's ``runner`` section reads)."""
        return {"runner": self.runner, "options": copy.deepcopy(self.options)}


T = TypeVar("T")


@dataclass(frozen=True)
class BuildConfig:
    """A validated build config (``configs/datasets/*.yaml``). Made by :func:`load_config`
    or :func:`validate_build_config`; immutable, so one object can go to every stage (and
    be pickled to the workers) without a stage seeing another's edits."""

    name: str = _opt((str,), "", required=True, doc="dataset name, used in shard file names")
    description: str = _opt((str,), "")
    input: InputConfig = _section(InputConfig, "where the rows come from: give manifest or directory")
    key: Optional[str] = _opt(
        (str,),
        doc="column whose value decides split, shard and order (default: the whole row, media paths as the "
        "input gives them: relative to the input root or the manifest's folder)",
    )
    columns: Dict[str, ColumnConfig] = _opt((dict,), factory=dict, required=True, doc="column name -> encoder settings")
    splits: SplitsConfig = _opt((dict,), factory=SplitsConfig, yaml_default={"train": 1.0})
    dedup: str = _opt(
        (str,),
        "error",
        choices=("error", "key", "content"),
        doc="a key seen twice in one build: error (naming both rows), or key (keep the first in the input, "
        "count the rest); content: as key, and rows whose encoded Example is byte-identical to another row's "
        "of the build are dropped too (the one whose key sorts first is kept)",
    )
    shuffle: bool = _opt((bool,), True, doc="rows in a shard in hash order of their key (false: in key order)")
    seed: int = _opt((int,), 0)
    sharding: ShardingConfig = _section(ShardingConfig, "shards per split: num_shards, or target_shard_bytes")
    output: OutputConfig = _section(OutputConfig, "where versions are written and how")
    report: bool = _opt((bool,), False, doc="write <version>/report.html (tfrecord-io report) after publishing")
    runner: RunnerConfig = _section(RunnerConfig, "the Beam runner and its pipeline options")
    # Not a YAML field: what an append or remove derives the version from (``derive.py``);
    # it enters the fingerprint and tfrecord_io_info.json as ``_derive``.
    derive: Optional[Dict[str, Any]] = field(default=None, metadata={"internal": "_derive"})

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> BuildConfig:
        """A validated mapping (``_validated_dict``, or :meth:`to_dict`'s output) -> the
        object; no checks here: :func:`validate_build_config` is the way in for raw YAML."""
        return _from_mapping(cls, cfg)

    def to_dict(self) -> Dict[str, Any]:
        """The mapping form, with defaults filled in (what ``tfrecord_io_info.json``
        records as ``config`` and the fingerprint hashes)."""
        return _to_mapping(self)

    def input_is_small(self) -> bool:
        """Whether the local runner builds this input in-process (``runtime.parallelism``)."""
        from tfrecord_io.pipelines.runtime.parallelism import build_input_is_small

        return build_input_is_small(self.input.manifest, self.input.directory, self.input.glob)

    @property
    def media_columns(self) -> List[str]:
        """Feature columns whose encoder reads media files."""
        return [name for name, col in self.columns.items() if col.is_media]

    def column_settings(self) -> Dict[str, Dict[str, Any]]:
        """``columns`` in mapping form (``make_encoders`` takes it)."""
        return {name: col.settings() for name, col in self.columns.items()}

    def replace(self, **changes: Any) -> BuildConfig:
        return dataclasses.replace(self, **changes)

    # Mapping-style reads, for scripts written against the dict this used to be:
    # ``cfg["output"]["dir"]`` still works and returns the mapping form. The package's
    # own code reads the attributes.
    def __getitem__(self, key: str) -> Any:
        return self.to_dict()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.to_dict().get(key, default)


def _fields(cls: type) -> Tuple[dataclasses.Field, ...]:
    return dataclasses.fields(cls)


def _from_mapping(cls: Type[T], data: Mapping[str, Any]) -> T:
    kwargs: Dict[str, Any] = {}
    for f in _fields(cls):
        meta = f.metadata
        if "internal" in meta:
            kwargs[f.name] = copy.deepcopy(data.get(meta["internal"]))
        elif "section" in meta:
            kwargs[f.name] = _from_mapping(meta["section"], data.get(f.name) or {})
        elif f.name == "columns":
            kwargs[f.name] = {n: ColumnConfig.from_settings(s) for n, s in (data.get(f.name) or {}).items()}
        elif f.name == "splits":
            kwargs[f.name] = SplitsConfig(dict(data.get(f.name) or {}))
        elif f.name in data:
            kwargs[f.name] = copy.deepcopy(data[f.name])
    return cls(**kwargs)


def _to_mapping(obj: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for f in _fields(type(obj)):
        value = getattr(obj, f.name)
        if "internal" in f.metadata:
            if value is not None:
                out[f.metadata["internal"]] = copy.deepcopy(value)
        elif "section" in f.metadata:
            out[f.name] = _to_mapping(value)
        elif isinstance(value, SplitsConfig):
            out[f.name] = dict(value.weights)
        elif f.name == "columns" and isinstance(obj, BuildConfig):
            out[f.name] = obj.column_settings()
        else:
            out[f.name] = copy.deepcopy(value)
    return out


def _schema_of(cls: type) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for f in _fields(cls):
        if "section" in f.metadata:
            out[f.name] = _schema_of(f.metadata["section"])
        elif "field" in f.metadata:
            out[f.name] = f.metadata["field"]
    return out


# Top-level schema; nested mappings are checked by their own schemas. Generated from the
# dataclasses above (their fields' metadata), as is json_schema().
SCHEMA: Dict[str, Any] = _schema_of(BuildConfig)


def _type_name(types: tuple) -> str:
    names = {
        int: "an integer",
        float: "a number",
        str: "a string",
        bool: "true/false",
        dict: "a mapping",
        list: "a list",
    }
    return " or ".join(names.get(t, t.__name__) for t in types)


def _check(schema: Mapping[str, Any], data: Mapping[str, Any], prefix: str, errors: List[str]) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if not isinstance(data, Mapping):
        errors.append(f"{prefix or 'config'}: expected a mapping, got {type(data).__name__}")
        return out
    for key in data:
        if key not in schema:
            known = ", ".join(sorted(schema))
            errors.append(f"{prefix}{key}: unknown field (known: {known})")
    for key, spec in schema.items():
        path = f"{prefix}{key}"
        if isinstance(spec, dict):
            out[key] = _check(spec, data.get(key) or {}, path + ".", errors)
            continue
        if key not in data or data[key] is None:
            if spec.required:
                errors.append(f"{path}: required field is missing ({spec.doc})" if spec.doc else f"{path}: required")
            out[key] = copy.deepcopy(spec.default)
            continue
        value = data[key]
        ok = isinstance(value, spec.types) and not (isinstance(value, bool) and bool not in spec.types)
        if not ok and float in spec.types and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            errors.append(f"{path}: expected {_type_name(spec.types)}, got {value!r}")
            continue
        if spec.choices is not None and value not in spec.choices:
            errors.append(f"{path}: {value!r} is not one of {', '.join(map(repr, spec.choices))}")
            continue
        out[key] = value
    return out


def parse_size(value: Any, field: str = "size") -> int:
    """``'64MiB'``, ``'1GB'``, ``1048576`` -> bytes."""
    if isinstance(value, int):
        return value
    text = str(value).strip().lower().replace(" ", "")
    units = {"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9, "b": 1}
    for unit, factor in units.items():
        if text.endswith(unit):
            try:
                return int(float(text[: -len(unit)]) * factor)
            except ValueError:
                break
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"{field}: cannot read {value!r} as a size (e.g. 64MiB, 1GB)") from None


def validate_config(raw: Mapping[str, Any], base_dir: str = ".") -> BuildConfig:
    """Check ``raw`` against the schema; returns the config with defaults filled in and
    paths resolved against ``base_dir`` (the config file's directory)."""
    return validate_build_config(raw, base_dir)


def validate_build_config(raw: Mapping[str, Any], base_dir: str = ".", require_input: bool = True) -> BuildConfig:
    """:func:`validate_config`; ``require_input=False`` for ``BuildDataset``, whose rows
    come from the pipeline rather than from an ``input`` section."""
    return BuildConfig.from_dict(_validated_dict(raw, base_dir, require_input))


def _validated_dict(raw: Mapping[str, Any], base_dir: str, require_input: bool) -> Dict[str, Any]:
    """The checks, on the mapping form (messages name YAML paths); raises
    :class:`ConfigError` listing every problem found."""
    errors: List[str] = []
    cfg = _check(SCHEMA, raw, "", errors)
    inp = cfg.get("input", {})
    if require_input and bool(inp.get("manifest")) == bool(inp.get("directory")):
        errors.append("input: give exactly one of input.manifest or input.directory")
    columns: Dict[str, Any] = cfg["columns"] if isinstance(cfg.get("columns"), dict) else {}
    for name, col in columns.items():
        where = f"columns.{name}"
        if isinstance(col, str):
            col = {"encoder": col}
            columns[name] = col
        if not isinstance(col, Mapping):
            errors.append(f"{where}: expected a mapping with an 'encoder' field, got {col!r}")
            continue
        enc = col.get("encoder")
        if enc not in ENCODER_NAMES:
            errors.append(f"{where}.encoder: unknown encoder {enc!r} (known: {', '.join(ENCODER_NAMES)})")
    if isinstance(raw, Mapping) and "columns" in raw and isinstance(cfg.get("columns"), dict) and not columns:
        errors.append("columns: at least one column must be encoded")
    weights: Dict[str, Any] = cfg["splits"] if isinstance(cfg.get("splits"), dict) else {}
    bad_weight = False
    for split, w in weights.items():
        if not isinstance(w, (int, float)) or isinstance(w, bool) or w < 0:
            errors.append(f"splits.{split}: expected a non-negative number, got {w!r}")
            bad_weight = True
    if weights and not bad_weight and sum(weights.values()) <= 0:
        errors.append("splits: the weights must add up to more than 0")
    sharding = cfg.get("sharding", {})
    if isinstance(sharding.get("num_shards"), int) and sharding["num_shards"] < 1:
        errors.append(f"sharding.num_shards: must be >= 1, got {sharding['num_shards']}")
    if sharding.get("target_shard_bytes") is not None:
        try:
            sharding["target_shard_bytes"] = parse_size(sharding["target_shard_bytes"], "sharding.target_shard_bytes")
        except ConfigError as err:
            errors.append(str(err))
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    for key in ("manifest", "directory"):
        if inp.get(key) and "://" not in inp[key]:
            inp[key] = os.path.normpath(os.path.join(base_dir, inp[key]))
    if "://" not in cfg["output"]["dir"]:
        cfg["output"]["dir"] = os.path.normpath(os.path.join(base_dir, cfg["output"]["dir"]))
    return cfg


def as_build_config(config: Union[BuildConfig, Mapping[str, Any], str], require_input: bool = True) -> BuildConfig:
    """A :class:`BuildConfig` as given, or parsed (once) from a mapping or a YAML path."""
    if isinstance(config, BuildConfig):
        return config
    if isinstance(config, str):
        return load_config(config, require_input=require_input)
    return validate_build_config(copy.deepcopy(dict(config)), require_input=require_input)


def set_dotted(raw: Dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``raw['a']['b'] = value`` for ``dotted='a.b'``, creating mappings on the way."""
    parts = dotted.split(".")
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--set {dotted}: {part} is not a mapping")
        node = child
    node[parts[-1]] = value


def parse_overrides(items: Iterable[str]) -> List[Tuple[str, Any]]:
    """``['output.dir=/tmp/x', 'seed=3']`` -> ``[('output.dir', '/tmp/x'), ('seed', 3)]``."""
    out = []
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set output.dir=/tmp/out")
        out.append((key.strip(), yaml.safe_load(text) if text.strip() else ""))
    return out


def load_config(
    path: Optional[str], overrides: Iterable[Tuple[str, Any]] = (), *, require_input: bool = True
) -> BuildConfig:
    """Read a YAML config (or start empty), apply overrides, validate."""
    raw: Dict[str, Any] = {}
    base_dir = os.getcwd()
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                raw = yaml.safe_load(f) or {}
        except OSError as err:
            raise ConfigError(f"cannot read config {path}: {err.strerror}") from None
        except yaml.YAMLError as err:
            raise ConfigError(f"config {path} is not valid YAML: {err}") from None
        base_dir = os.path.dirname(os.path.abspath(path))
    for key, value in overrides:
        set_dotted(raw, key, value)
    return validate_build_config(raw, base_dir, require_input=require_input)


# --- JSON Schema -----------------------------------------------------------------------

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


def _json_field(spec: Field, extra: Mapping[str, Any]) -> Dict[str, Any]:
    types = [_JSON_TYPES[t] for t in spec.types if not (t is int and float in spec.types)]
    if not spec.required:
        types.append("null")  # `key:` with no value means the default, as for the validator
    out: Dict[str, Any] = {"type": types[0] if len(types) == 1 else types}
    if spec.doc:
        out["description"] = spec.doc
    if spec.choices is not None:
        out["enum"] = list(spec.choices) + ([] if spec.required else [None])
    if not spec.required and spec.default is not None:
        out["default"] = spec.default
    out.update(extra)
    return out


def _json_object(cls: type) -> Dict[str, Any]:
    props: Dict[str, Any] = {}
    required: List[str] = []
    for f in _fields(cls):
        if "section" in f.metadata:
            ref = {"$ref": f"#/$defs/{f.metadata['section'].__name__}"}
            props[f.name] = {"description": f.metadata["doc"], **ref} if f.metadata["doc"] else ref
        elif f.name == "columns":
            props[f.name] = {"$ref": "#/$defs/Columns"}
        elif f.name == "splits":
            props[f.name] = {"$ref": "#/$defs/Splits"}
        elif "field" in f.metadata:
            props[f.name] = _json_field(f.metadata["field"], f.metadata.get("json") or {})
        else:
            continue
        if "field" in f.metadata and f.metadata["field"].required:
            required.append(f.name)
    out: Dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    out["additionalProperties"] = False
    return out


def _json_default(value: Any) -> Optional[Any]:
    """A parameter default JSON can hold, or None (then the schema names none)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return None


def _encoder_params(name: str) -> List[Tuple[str, Any]]:
    params = inspect.signature(encoder_class(name)).parameters
    return [(p, params[p].default) for p in params]


def _json_column(name: str) -> Dict[str, Any]:
    props: Dict[str, Any] = {
        "encoder": {"const": name},
        "column": {"type": ["string", "null"], "description": "input column to read (default: the feature's name)"},
    }
    for param, default in _encoder_params(name):
        spec: Dict[str, Any] = {}
        if param == "vocabulary" and name == "label":
            spec["description"] = "the labels in id order, or auto: the sorted distinct values of the column"
        value = _json_default(default)
        if value is not None:
            spec["default"] = value
        props[param] = spec
    return {
        "type": "object",
        "description": f"the {name} encoder; its parameters are those of tfrecord_io.transforms.{_class_name(name)}",
        "properties": props,
        "required": ["encoder"],
        "additionalProperties": False,
    }


def _class_name(encoder: str) -> str:
    return encoder_class(encoder).__name__


def json_schema() -> Dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a build config YAML, generated from
    :class:`BuildConfig`'s fields and the encoders' signatures. It checks what a file can
    be checked for alone (names, types, choices); the checks that need the encoders'
    values or the input (a quality out of range, a missing column) stay with
    :func:`load_config`."""
    defs: Dict[str, Any] = {
        cls.__name__: _json_object(cls)
        for cls in (InputConfig, ShardingConfig, OutputConfig, RunnerConfig)  # the sections
    }
    defs["InputConfig"]["oneOf"] = [{"required": ["manifest"]}, {"required": ["directory"]}]
    defs["Splits"] = {
        "type": ["object", "null"],
        "description": "split name -> weight (its share of the rows)",
        "additionalProperties": {"type": "number", "minimum": 0},
        "default": {"train": 1.0},
    }
    defs["Columns"] = {
        "type": "object",
        "description": "feature name -> encoder settings ({encoder: NAME, column: INPUT_COLUMN, **parameters}), "
        "or just the encoder's name",
        "minProperties": 1,
        "additionalProperties": {
            "anyOf": [{"enum": list(ENCODER_NAMES)}] + [{"$ref": f"#/$defs/column.{n}"} for n in ENCODER_NAMES]
        },
    }
    for name in ENCODER_NAMES:
        defs[f"column.{name}"] = _json_column(name)
    top = _json_object(BuildConfig)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "tfrecord-io build config",
        "description": "A dataset build: tfrecord-io build CONFIG.yaml (docs/jobs.md)",
        **top,
        "$defs": defs,
    }


def json_schema_text() -> str:
    """:func:`json_schema` as the shipped file holds it."""
    return json.dumps(json_schema(), indent=2) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tfrecord_io.pipelines.building.build_config", description="The build config's JSON Schema."
    )
    parser.add_argument("--schema", action="store_true", help=f"(re)write {os.path.basename(SCHEMA_FILE)}")
    parser.add_argument("--print", action="store_true", help="print the schema instead")
    args = parser.parse_args(argv)
    if args.print:
        sys.stdout.write(json_schema_text())
        return 0
    if args.schema:
        with open(SCHEMA_FILE, "w", encoding="utf-8") as f:
            f.write(json_schema_text())
        print(f"wrote {SCHEMA_FILE}")
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
