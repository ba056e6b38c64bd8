"""Job configuration: YAML files under ``configs/`` that fully describe a job.

A config is validated before anything runs; every problem names the field at fault
(``columns.image.quality: expected an integer, got 'high'``). Command-line flags
override fields with ``--set dotted.key=value`` (the value is parsed as YAML), and the
common ones have flags of their own (``--output``, ``--runner`` ...).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional

import yaml

# ConfigError is defined with the rest of the usage errors (runner configs raise it too)
# and imported from here as before.
from tfrecord_io.pipelines.runtime.errors import ConfigError


@dataclass(frozen=True)
class Field:
    """Schema of one config field: its type(s), whether required, default, choices."""

    types: tuple
    required: bool = False
    default: Any = None
    choices: Optional[tuple] = None
    doc: str = ""


_NUM = (int, float)

# Top-level schema; nested mappings are checked by their own schemas below.
SCHEMA: Dict[str, Any] = {
    "name": Field((str,), required=True, doc="dataset name, used in shard file names"),
    "description": Field((str,), default=""),
    "input": {
        "manifest": Field((str,), doc="CSV or JSONL file, one row per example"),
        "directory": Field((str,), doc="a root/<label>/<file> tree"),
        "format": Field((str,), default="auto", choices=("auto", "csv", "jsonl")),
        "multiline_values": Field(
            (str, bool),
            default="auto",
            choices=("auto", True, False),
            doc="may a CSV's quoted values hold line breaks? auto: only if it has a '\"' (then one worker reads it); "
            "false: never (cut it into ranges read in parallel); true: yes (one worker reads it)",
        ),
        "glob": Field((str,), default="*", doc="files to take from a directory layout"),
        "label_column": Field((str,), default="label"),
        "path_column": Field((str,), default="path"),
    },
    "key": Field(
        (str,),
        doc="column whose value decides split, shard and order (default: the whole row, media paths as the "
        "input gives them: relative to the input root or the manifest's folder)",
    ),
    "columns": Field((dict,), required=True, doc="column name -> encoder settings"),
    "splits": Field((dict,), default={"train": 1.0}),
    "dedup": Field(
        (str,),
        default="error",
        choices=("error", "key", "content"),
        doc="a key seen twice in one build: error (naming both rows), or key (keep the first in the input, "
        "count the rest); content: as key, and rows whose encoded Example is byte-identical to another row's "
        "of the build are dropped too (the one whose key sorts first is kept)",
    ),
    "shuffle": Field((bool,), default=True, doc="rows in a shard in hash order of their key (false: in key order)"),
    "seed": Field((int,), default=0),
    "sharding": {
        "num_shards": Field((int,), doc="shards per split (fixed)"),
        "target_shard_bytes": Field((int, str), default="256MiB", doc="derive shards per split from size"),
    },
    "output": {
        "dir": Field((str,), required=True),
        "version": Field((str,), default="auto", doc="'auto' = UTC timestamp"),
        "compression": Field((str,), default="", choices=("", "none", "gzip", "zlib")),
        "write_index": Field((bool,), default=True),
    },
    "report": Field((bool,), default=False, doc="write <version>/report.html (tfrecord-io report) after publishing"),
    "runner": {
        "runner": Field((str,), default="DirectRunner"),
        "options": Field((dict,), default={}),
    },
}

ENCODER_NAMES = ("image", "audio", "text", "int", "float", "label", "array", "bytes")


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


def validate_config(raw: Mapping[str, Any], base_dir: str = ".") -> Dict[str, Any]:
    """Check ``raw`` against the schema; returns the config with defaults filled in and
    paths resolved against ``base_dir`` (the config file's directory)."""
    return validate_build_config(raw, base_dir)


def validate_build_config(raw: Mapping[str, Any], base_dir: str = ".", require_input: bool = True) -> Dict[str, Any]:
    """:func:`validate_config`; ``require_input=False`` for ``BuildDataset``, whose rows
    come from the pipeline rather than from an ``input`` section."""
    errors: List[str] = []
    cfg = _check(SCHEMA, raw, "", errors)
    inp = cfg.get("input", {})
    if require_input and bool(inp.get("manifest")) == bool(inp.get("directory")):
        errors.append("input: give exactly one of input.manifest or input.directory")
    columns = cfg.get("columns") if isinstance(cfg.get("columns"), dict) else {}
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
    if "columns" in raw and isinstance(cfg.get("columns"), dict) and not columns:
        errors.append("columns: at least one column must be encoded")
    weights = cfg.get("splits") if isinstance(cfg.get("splits"), dict) else {}
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


def parse_overrides(items: Iterable[str]) -> List[tuple]:
    """``['output.dir=/tmp/x', 'seed=3']`` -> ``[('output.dir', '/tmp/x'), ('seed', 3)]``."""
    out = []
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. --set output.dir=/tmp/out")
        out.append((key.strip(), yaml.safe_load(text) if text.strip() else ""))
    return out


def load_config(path: Optional[str], overrides: Iterable[tuple] = ()) -> Dict[str, Any]:
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
    return validate_config(raw, base_dir)
