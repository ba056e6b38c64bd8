"""Rows to build a dataset from: a CSV/JSONL manifest, or a ``root/<label>/<file>`` tree.

Paths in a manifest may be relative to the manifest's directory or absolute; they are
resolved here so encoders get openable paths. Problems that make the whole job
meaningless (no such manifest, a column the config names but the manifest lacks, no
rows at all) raise ``InputError`` before anything is written; per-row problems (a file
that does not exist) are left to the encoders, which send the row to the dead-letter
output with the reason.
"""

from __future__ import annotations

import csv
import io
import json
import os
from typing import Any, Dict, Iterable, List, Optional

from tfrecord_io import files


class InputError(ValueError):
    """The job's input cannot be used; the message says why."""


def _read_text(path: str) -> str:
    if not files.exists(path):
        raise InputError(f"manifest {path} does not exist")
    with files.open_raw(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(f"manifest {path} is not UTF-8 text: {err}") from None


def read_manifest(path: str, fmt: str = "auto") -> List[Dict[str, Any]]:
    """Rows of a CSV (header line) or JSONL (one object per line) manifest.

    Each row gets ``_row`` (its 1-based line number) so a rejected row can be found.
    """
    if fmt == "auto":
        lower = path.lower()
        fmt = "jsonl" if lower.endswith((".jsonl", ".json", ".ndjson")) else "csv"
    text = _read_text(path)
    rows: List[Dict[str, Any]] = []
    if fmt == "csv":
        reader = csv.DictReader(io.StringIO(text))
        if not reader.fieldnames:
            raise InputError(f"manifest {path} is empty (no header line)")
        for number, row in enumerate(reader, start=2):
            if None in row:
                raise InputError(f"manifest {path}, line {number}: more values than header columns")
            row = dict(row)
            row["_row"] = number
            rows.append(row)
    elif fmt == "jsonl":
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"manifest {path}, line {number}: not valid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise InputError(f"manifest {path}, line {number}: expected a JSON object")
            row["_row"] = number
            rows.append(row)
    else:
        raise InputError(f"unknown manifest format {fmt!r}: use csv or jsonl")
    if not rows:
        raise InputError(f"manifest {path} has no rows")
    return rows


def resolve_paths(rows: Iterable[Dict[str, Any]], columns: Iterable[str], base_dir: str) -> None:
    """Make the media paths in ``columns`` absolute, relative to ``base_dir``."""
    for row in rows:
        for col in columns:
            value = row.get(col)
            if isinstance(value, str) and value and "://" not in value and not os.path.isabs(value):
                if files.is_remote(base_dir):  # a manifest in a bucket: paths relative to its prefix
                    row[col] = files.join(base_dir, value)
                else:
                    row[col] = os.path.normpath(os.path.join(base_dir, value))


def read_directory(
    root: str, pattern: str = "*", path_column: str = "path", label_column: str = "label"
) -> List[Dict[str, Any]]:
    """Rows ``{path, label}`` from a ``root/<label>/<file>`` tree, sorted for determinism."""
    if not os.path.isdir(root):
        raise InputError(f"input directory {root} does not exist")
    import fnmatch

    rows = []
    for label in sorted(os.listdir(root)):
        sub = os.path.join(root, label)
        if not os.path.isdir(sub) or label.startswith("."):
            continue
        for name in sorted(os.listdir(sub)):
            if name.startswith(".") or not fnmatch.fnmatch(name, pattern):
                continue
            full = os.path.join(sub, name)
            if os.path.isfile(full):
                rows.append({path_column: full, label_column: label, "_row": f"{label}/{name}"})
    if not rows:
        raise InputError(f"input directory {root} has no files under root/<label>/ matching {pattern!r}")
    return rows


def check_columns(rows: List[Dict[str, Any]], needed: Iterable[str], source: str) -> None:
    """Every column the config encodes must exist in the input (checked on all rows)."""
    present = set()
    for row in rows:
        present.update(row)
    missing = [c for c in needed if c not in present]
    if missing:
        have = ", ".join(sorted(k for k in present if not k.startswith("_")))
        raise InputError(f"{source}: column(s) {', '.join(missing)} not found (it has: {have})")


def load_rows(input_cfg: Dict[str, Any], media_columns: Iterable[str], needed: Iterable[str]) -> List[Dict[str, Any]]:
    """Rows from the config's ``input`` section, paths resolved and columns checked."""
    if input_cfg.get("manifest"):
        path = input_cfg["manifest"]
        rows = read_manifest(path, input_cfg.get("format", "auto"))
        base = path.rsplit("/", 1)[0] if files.is_remote(path) else os.path.dirname(path)
        resolve_paths(rows, media_columns, base)
        check_columns(rows, needed, f"manifest {path}")
        return rows
    rows = read_directory(
        input_cfg["directory"],
        input_cfg.get("glob", "*"),
        input_cfg.get("path_column", "path"),
        input_cfg.get("label_column", "label"),
    )
    check_columns(rows, needed, f"directory {input_cfg['directory']}")
    return rows


def row_key(row: Dict[str, Any], key_column: Optional[str]) -> str:
    """The string a row is split and shuffled by."""
    if key_column:
        return str(row.get(key_column, ""))
    return json.dumps({k: v for k, v in row.items() if k != "_row"}, sort_keys=True, default=str)
