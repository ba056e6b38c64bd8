"""What ``tfds.builder_from_directory(version_dir)`` needs to open a built version,
written beside our own metadata without TensorFlow or TFDS installed.

Why: TFDS users can then read our builds as they read any prepared TFDS dataset
(``builder.as_dataset(split="train[:50%]")``), with images decoded, label names and
split sizes, and no conversion.

Files (TFDS 4.x's own layout, version directory = TFDS's data directory):

- ``dataset_info.json``: TFDS's ``DatasetInfo`` proto as JSON (TFDS parses it strictly:
  no field of ours may be in it). Name, a semantic version (the version directory's
  name when it is one, else ``1.0.0``: TFDS insists on ``X.Y.Z``), the description, file
  format ``tfrecord``, and per split its shard lengths, bytes and file-path template.
  Our split folders fit TFDS's templates: a split's template is its first shard's path
  with the shard numbers replaced by ``{SHARD_X_OF_Y}``, e.g.
  ``train/demo-train.tfrecord-{SHARD_X_OF_Y}``; it is checked against every shard.
- ``features.json``: TFDS's ``FeaturesDict``. Keys with ``/`` nest (TFDS flattens nested
  dicts to ``image/encoded``, which is how our encoders name Example keys). An Image
  encoder's ``encoded`` bytes -> ``Image`` (shape ``(None, None, channels)`` from its
  configured mode, or without one from the modes the build wrote, recorded in
  ``image_modes``: see :func:`image_channels`; decoded whatever the format: PNG and
  JPEG); a Label -> ``ClassLabel`` (names in
  ``<key>.labels.txt``); a Text -> ``Text``; float32 audio samples stored as bytes ->
  ``Audio`` (float32, its sample rate); other features -> ``Scalar`` / ``Tensor`` of their
  type and shape (strings as ``Text``); an Array -> ``Tensor`` of its shape and dtype
  (``<key>/shape`` and ``<key>/dtype`` left out: the tensor has them; an array whose
  shape TFDS cannot state, a free dimension other than the first, is left out of TFDS's
  view). Optional features are left out: TFDS parses every feature it knows in every
  record.
- ``<key>.labels.txt``: the class names of each ``ClassLabel``, one per line.

Our own metadata is ``tfrecord_io_info.json`` (see :mod:`tfrecord_io.dataset.datasets`, which
still reads ``dataset_info.json`` of versions built before TFDS's files were written).
Versions TFDS cannot read get no TFDS files (the reason is kept in our metadata under
``tfds``): compressed shards (TFDS reads plain TFRecord), SequenceExample features,
shard names no template describes. :func:`add_to_version` gives a version built
before what TFDS needs.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from ..storage import files

TFDS_INFO_NAME = "dataset_info.json"
FEATURES_NAME = "features.json"
_PKG = "tensorflow_datasets.core.features."
_CHANNELS = {"L": 1, "RGB": 3, "RGBA": 4}  # 8-bit Pillow modes TFDS's Image decodes
_SEMVER = re.compile(r"^\d+\.\d+\.\d+$")


class NotForTFDS(ValueError):
    """This version cannot be described to TFDS; the message says why."""


# --------------------------------------------------------------------------- features


def _tensor(
    kind: str, shape: Optional[Tuple[int, ...]], dtype: Optional[str] = None, encoding: str = "none"
) -> Dict[str, Any]:
    """A Scalar / Tensor feature of the Example's wire ``kind``; ``dtype`` and
    ``encoding="bytes"`` for a tensor stored as its raw bytes."""
    dtype = dtype or {"int": "int64", "float": "float32", "bytes": "string"}[kind]
    dims = ["-1"] if shape is None else [str(int(d)) for d in shape]
    cls = "scalar.Scalar" if shape == () else "tensor_feature.Tensor"
    return {
        "pythonClassName": _PKG + cls,
        "tensor": {"shape": {"dimensions": dims} if dims else {}, "dtype": dtype, "encoding": encoding},
    }


def image_channels(cfg: Mapping[str, Any], modes_seen: Optional[List[str]]) -> Optional[str]:
    """The channels TFDS's ``Image`` states for an Image column: ``"1"``/``"3"``/``"4"``,
    ``"-1"`` (each image decoded with its own channels), or None (no ``Image``: TFDS
    gives the stored bytes as a string).

    A configured ``mode`` (L, RGB, RGBA) gives its channels. Without one each image
    keeps its own mode, so the build records the modes it wrote (``image_modes`` in
    ``tfrecord_io_info.json``): one mode TFDS's 8-bit ``Image`` decodes gives its
    channels; several of them (grayscale and colour photos in one folder) give ``-1``,
    and TFDS then decodes each image as stored, as our decoder does (``(h, w, 1)`` for a
    grayscale one beside ``(h, w, 3)``: batch them after a resize or ``mode: RGB``). A
    mode it does not decode (LA, 16-bit or float grayscale), no image written, or a
    version built before modes were recorded: no ``Image``."""
    if cfg.get("reencode") == "raw":
        return None
    if cfg.get("mode") is not None:
        return str(_CHANNELS[cfg["mode"]]) if cfg["mode"] in _CHANNELS else None
    if not modes_seen or any(m not in _CHANNELS for m in modes_seen):
        return None
    counts = {_CHANNELS[m] for m in modes_seen}
    return str(counts.pop()) if len(counts) == 1 else "-1"


def _special_leaves(
    encoders: Mapping[str, Mapping[str, Any]], image_modes: Optional[Mapping[str, List[str]]] = None
) -> Dict[str, Tuple[Dict[str, Any], Optional[List[str]]]]:
    """Example key -> (TFDS feature JSON, class names or None) for what our encoders
    wrote with a TFDS equivalent: images, labels, texts, float32 audio."""
    out: Dict[str, Tuple[Dict[str, Any], Optional[List[str]]]] = {}
    for column, cfg in encoders.items():
        kind, prefix = cfg.get("type"), cfg.get("key") or column
        channels = image_channels(cfg, (image_modes or {}).get(column)) if kind == "Image" else None
        if channels is not None:
            shape = {"dimensions": ["-1", "-1", channels]}
            out[f"{prefix}/encoded"] = (
                {"pythonClassName": _PKG + "image_feature.Image", "image": {"shape": shape, "dtype": "uint8"}},
                None,
            )
        elif kind == "Label" and (cfg.get("vocabulary") or cfg.get("num_classes")):
            names = [str(v) for v in cfg["vocabulary"]] if cfg.get("vocabulary") else None
            count = len(names) if names else int(cfg["num_classes"])
            out[prefix] = (
                {"pythonClassName": _PKG + "class_label_feature.ClassLabel", "classLabel": {"numClasses": str(count)}},
                names,
            )
        elif kind == "Text":
            out[prefix] = ({"pythonClassName": _PKG + "text_feature.Text", "text": {}}, None)
        elif kind == "Audio" and cfg.get("storage", "bytes") == "bytes" and cfg.get("mono", True):
            audio: Dict[str, Any] = {"shape": {"dimensions": ["-1"]}, "dtype": "float32", "encoding": "BYTES"}
            if cfg.get("sample_rate"):
                audio["sampleRate"] = str(int(cfg["sample_rate"]))
            out[f"{prefix}/encoded"] = ({"pythonClassName": _PKG + "audio_feature.Audio", "audio": audio}, None)
    return out


def _array_views(encoders: Mapping[str, Mapping[str, Any]]) -> Tuple[Dict[str, Dict[str, Any]], Set[str]]:
    """The Array encoders' features as TFDS sees them: ``({key: Tensor JSON}, keys left
    out)``. An array is one TFDS ``Tensor`` of its shape and dtype, so its ``<p>/shape``
    (and ``<p>/dtype``) keys, which TFDS cannot nest under a tensor and does not need,
    are left out of TFDS's view. TFDS knows a tensor's shape up to one free dimension,
    the first (it parses the values and reshapes), and a tensor stored as bytes only
    with a fixed shape; any other array is left out of TFDS's view whole (our readers
    give it)."""
    views: Dict[str, Dict[str, Any]] = {}
    hidden: Set[str] = set()
    for column, cfg in encoders.items():
        if cfg.get("type") != "Array":
            continue
        prefix = cfg.get("key") or column
        dtype, storage = str(cfg.get("dtype", "float32")), cfg.get("storage", "list")
        hidden |= {f"{prefix}/shape", f"{prefix}/dtype"}
        dims = None if cfg.get("shape") is None else tuple(int(-1 if d is None else d) for d in cfg["shape"])
        free = [i for i, d in enumerate(dims or ()) if d == -1]
        if dims is None or free not in ([], [0]) or (storage == "bytes" and free):
            hidden.add(prefix)
        elif storage == "list":
            views[prefix] = _tensor("float" if dtype == "float32" else "int", dims)
        else:
            views[prefix] = _tensor("bytes", dims, dtype=dtype, encoding="bytes")
    return views, hidden


def _leaf(spec: Mapping[str, Any]) -> Dict[str, Any]:
    shape = None if spec.get("shape") is None else tuple(spec["shape"])
    if spec["kind"] == "bytes" and spec.get("dtype") == "str" and shape == ():
        return {"pythonClassName": _PKG + "text_feature.Text", "text": {}}
    return _tensor(spec["kind"], shape)


def features_json(info: Mapping[str, Any]) -> Tuple[Dict[str, Any], Dict[str, List[str]]]:
    """``features.json``'s content and ``{labels file name: class names}``."""
    features = info.get("features") or {}
    sequence = sorted(k for k, f in features.items() if f.get("sequence"))
    if sequence:
        raise NotForTFDS(f"features {sequence} are SequenceExample feature lists; TFDS reads Examples")
    special = _special_leaves(info.get("encoders") or {}, info.get("image_modes"))
    arrays, hidden = _array_views(info.get("encoders") or {})
    tree: Dict[str, Any] = {}
    labels: Dict[str, List[str]] = {}
    for key in sorted(features):
        spec = features[key]
        if not spec.get("required", True) or key in hidden:
            continue
        parts = key.split("/")
        node = tree
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict) or "pythonClassName" in node:
                raise NotForTFDS(f"feature {key!r} nests under a feature that is not a group")
        if parts[-1] in node:
            raise NotForTFDS(f"feature {key!r} is both a value and a group of values")
        leaf, names = special.get(key, (None, None))
        node[parts[-1]] = leaf if leaf is not None else arrays.get(key) or _leaf(spec)
        if names is not None:  # TFDS's file name for a nested feature: parents joined by '-'
            labels["-".join(parts) + ".labels.txt"] = names
    return (
        {
            "type": _PKG + "features_dict.FeaturesDict",
            "content": {"features": _dicts(tree)},
            "proto_cls": "tensorflow_datasets.FeaturesDict",
        },
        labels,
    )


def _dicts(tree: Dict[str, Any]) -> Dict[str, Any]:
    """Nested plain dicts -> nested FeaturesDict JSON."""
    out = {}
    for name, node in tree.items():
        if "pythonClassName" in node:
            out[name] = node
        else:
            out[name] = {
                "pythonClassName": _PKG + "features_dict.FeaturesDict",
                "featuresDict": {"features": _dicts(node)},
            }
    return out


# --------------------------------------------------------------------------- dataset_info.json


def _x_of_y(k: int, n: int) -> str:
    width = max(5, len(str(n)))
    return f"{k:0{width}d}-of-{n:0{width}d}"


def split_template(split: str, shards: List[Mapping[str, Any]]) -> str:
    """The TFDS file-path template that names exactly ``shards`` (in order)."""
    n = len(shards)
    if not n:
        raise NotForTFDS(f"split {split!r} has no shards")
    first = str(shards[0]["path"])
    if "{" in first or "}" in first or _x_of_y(0, n) not in first:
        raise NotForTFDS(f"split {split!r}: shard name {first!r} has no '{_x_of_y(0, n)}' for TFDS's template")
    template = first.replace(_x_of_y(0, n), "{SHARD_X_OF_Y}")
    for k, shard in enumerate(shards):
        if template.replace("{SHARD_X_OF_Y}", _x_of_y(k, n)) != shard["path"]:
            raise NotForTFDS(f"split {split!r}: shard {k} is {shard['path']!r}, not what {template!r} names")
    return template


def tfds_version(version_dir: str, info: Mapping[str, Any]) -> str:
    name = str(info.get("version") or version_dir.rstrip("/").rsplit("/", 1)[-1])
    return name if _SEMVER.match(name) else "1.0.0"


def dataset_info_json(version_dir: str, info: Mapping[str, Any]) -> Dict[str, Any]:
    """TFDS's ``DatasetInfo`` (proto JSON) of a version."""
    if info.get("compression"):
        raise NotForTFDS(f"shards are {str(info['compression']).upper()}-compressed; TFDS reads plain TFRecord files")
    splits = []
    for split, entry in sorted((info.get("splits") or {}).items()):
        shards = sorted(entry["shards"], key=lambda s: str(s["path"]))
        splits.append(
            {
                "name": split,
                "numBytes": str(int(entry.get("bytes", sum(int(s.get("bytes", 0)) for s in shards)))),
                "shardLengths": [str(int(s["records"])) for s in shards],
                "filepathTemplate": split_template(split, shards),
            }
        )
    if not splits:
        raise NotForTFDS("the version has no splits")
    return {
        "name": str(info.get("name") or "dataset"),
        "version": tfds_version(version_dir, info),
        "description": str(info.get("description") or ""),
        "fileFormat": "tfrecord",
        "splits": splits,
    }


def tfds_files(version_dir: str, info: Mapping[str, Any]) -> Dict[str, bytes]:
    """``{file name: content}`` of TFDS's files for this version (NotForTFDS if TFDS
    cannot read it)."""
    out: Dict[str, bytes] = {}
    features, labels = features_json(info)
    for name, names in sorted(labels.items()):
        out[name] = ("\n".join(names) + "\n").encode("utf-8")
    out[FEATURES_NAME] = (json.dumps(features, indent=1, sort_keys=True) + "\n").encode("utf-8")
    out[TFDS_INFO_NAME] = (json.dumps(dataset_info_json(version_dir, info), indent=1, sort_keys=True) + "\n").encode()
    return out


def write_tfds_files(version_dir: str, info: Dict[str, Any]) -> List[str]:
    """Write TFDS's files into ``version_dir`` (its ``dataset_info.json`` last) and note
    in ``info["tfds"]`` what was written, or why nothing was; returns the file names."""
    try:
        content = tfds_files(version_dir, info)
    except NotForTFDS as err:
        info["tfds"] = {"files": [], "reason": str(err)}
        return []
    for name, data in content.items():  # dict order: labels, features, dataset_info.json last
        files.write_bytes(files.join(version_dir, name), data)
    info["tfds"] = {"files": list(content), "version": tfds_version(version_dir, info)}
    return list(content)


def add_to_version(version_dir: str) -> List[str]:
    """Give a version built before TFDS's files existed what TFDS needs.

    Its metadata (our ``dataset_info.json`` then) is first copied to
    ``tfrecord_io_info.json``, so the version is whole at every step; then TFDS's files
    replace ``dataset_info.json``; then ours is rewritten with the ``tfds`` note.
    Returns the TFDS file names written (none, with the reason in the note, when TFDS
    cannot read the version)."""
    from .datasets import INFO_NAME, DatasetLayoutError, load_info

    info = load_info(version_dir)
    if info is None:
        raise DatasetLayoutError(f"{version_dir}: no metadata (not a finished version)")
    ours = files.join(version_dir, INFO_NAME)

    def write_ours() -> None:
        files.write_bytes(ours, (json.dumps(info, indent=2, sort_keys=True) + "\n").encode("utf-8"))

    if not files.exists(ours):
        write_ours()
    written = write_tfds_files(version_dir, info)
    write_ours()
    return written


__all__ = [
    "add_to_version",
    "image_channels",
    "FEATURES_NAME",
    "TFDS_INFO_NAME",
    "NotForTFDS",
    "dataset_info_json",
    "features_json",
    "split_template",
    "tfds_files",
    "write_tfds_files",
]
