"""Specs to and from plain data: rebuild encoders from ``to_config()`` dicts (what a
YAML/JSON job config or ``tfrecord_io_info.json`` holds), and describe a spec for
``tfrecord_io_info.json``.

    spec = spec_from_config({"image": {"type": "Image", "reencode": "jpeg"},
                              "label": {"type": "Label", "vocabulary": ["cat", "dog"]}})
    info = spec_info(spec)   # {"columns": ..., "features": [...], "tf_parse_spec": ...}
"""

from __future__ import annotations

from typing import Any, Dict, Mapping

from .encoders import Array, Audio, AudioFrames, Bytes, Float, Image, Int, Label, Steps, Text
from .spec import feature_specs, tf_parse_spec

ENCODERS = {cls.__name__: cls for cls in (Array, Audio, AudioFrames, Bytes, Float, Image, Int, Label, Steps, Text)}


def encoder_from_config(config: Mapping[str, Any]):
    """``{"type": "Image", **params}`` -> the encoder; unknown types or params raise."""
    params = dict(config)
    name = params.pop("type", None)
    cls = ENCODERS.get(name)
    if cls is None:
        raise ValueError(f"unknown encoder type {name!r}; one of {sorted(ENCODERS)}")
    if "resize" in params and params["resize"] is not None:
        params["resize"] = tuple(params["resize"])
    try:
        return cls(**params)
    except TypeError as err:
        raise ValueError(f"{name}: {err}") from None


def spec_from_config(config: Mapping[str, Mapping[str, Any]]) -> Dict[str, Any]:
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


__all__ = ["ENCODERS", "encoder_from_config", "spec_config", "spec_from_config", "spec_info"]
