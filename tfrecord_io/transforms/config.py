"""Specs to and from plain data: rebuild encoders from config dicts (what a YAML/JSON
job config or ``tfrecord_io_info.json`` holds), and describe a spec for
``tfrecord_io_info.json``.

    spec = spec_from_config({"image": {"encoder": "image", "reencode": "jpeg"},
                              "label": {"encoder": "label", "vocabulary": ["cat", "dog"]}})
    info = spec_info(spec)   # {"columns": ..., "features": [...], "tf_parse_spec": ...}

One parser takes both ways of naming the encoder: ``{encoder: image}`` (the build
config's form, lower case, the one to write) and ``{type: Image}`` (the class name, what
``to_config()`` writes into ``tfrecord_io_info.json``). The ``type`` form is not
deprecated: every published dataset's info file holds it, and rewriting it would change
those files, so both stay and give the same encoder.
"""

from __future__ import annotations

import re
from typing import Any, Dict, Mapping

from .encoders import Array, Audio, AudioFrames, Bytes, Float, Image, Int, Label, Steps, Text
from .encoders.base import ColumnEncoder
from .spec import feature_specs, tf_parse_spec

ENCODERS: Dict[str, type] = {
    cls.__name__: cls for cls in (Array, Audio, AudioFrames, Bytes, Float, Image, Int, Label, Steps, Text)
}


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


# The ``{encoder: <name>}`` names: the class names in snake case (``image``, ``audio_frames``).
ENCODERS_BY_NAME: Dict[str, type] = {_snake(name): cls for name, cls in ENCODERS.items()}


def encoder_from_config(config: Mapping[str, Any]) -> ColumnEncoder:
    """``{"encoder": "image", **params}`` (or ``{"type": "Image", **params}``) -> the
    encoder; unknown names or params raise ``ValueError``. A ``column`` entry (which input
    column a build reads) is not a parameter and is ignored with the ``encoder`` form."""
    params = dict(config)
    if "encoder" in params:
        if "type" in params:
            raise ValueError(f"give the encoder once: 'encoder: {params['encoder']}' or 'type: {params['type']}'")
        name = params.pop("encoder")
        params.pop("column", None)
        cls = ENCODERS_BY_NAME.get(name)
        if cls is None:
            raise ValueError(f"unknown encoder {name!r}; one of {sorted(ENCODERS_BY_NAME)}")
    else:
        name = params.pop("type", None)
        found = ENCODERS.get(name) if isinstance(name, str) else None
        if found is None:
            raise ValueError(f"unknown encoder type {name!r}; one of {sorted(ENCODERS)}")
        cls = found
    if "resize" in params and params["resize"] is not None:
        params["resize"] = tuple(params["resize"])
    try:
        encoder: ColumnEncoder = cls(**params)
    except TypeError as err:
        raise ValueError(f"{name}: {err}") from None
    return encoder


def spec_from_config(config: Mapping[str, Mapping[str, Any]]) -> Dict[str, ColumnEncoder]:
    """``{column: encoder config}`` -> ``{column: encoder}``."""
    return {column: encoder_from_config(cfg) for column, cfg in config.items()}


def spec_config(spec: Mapping[str, Any]) -> Dict[str, Dict[str, Any]]:
    """``{column: encoder}`` -> ``{column: encoder config}`` (JSON-ready)."""
    return {column: enc.to_config() for column, enc in spec.items()}


def spec_info(spec: Mapping[str, Any]) -> Dict[str, Any]:
    """What ``tfrecord_io_info.json`` needs to describe the features of a data set."""
    specs = feature_specs(spec)
    return {
        "columns": spec_config(spec),
        "features": [s.to_dict() for s in specs],
        "tf_parse_spec": tf_parse_spec(specs),
    }


__all__ = ["ENCODERS", "ENCODERS_BY_NAME", "encoder_from_config", "spec_config", "spec_from_config", "spec_info"]
