"""Config ``columns`` -> encoder objects from ``transforms``.

``columns: {image: {encoder: image, reencode: jpeg, quality: 90}}`` becomes
``{"image": Image(reencode="jpeg", quality=90)}``; a parameter the encoder does not
take, or a bad value, is a ``ConfigError`` naming ``columns.<name>.<field>``.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Mapping

from .config import ConfigError


def _registry() -> Dict[str, Any]:
    from transforms.encoders.arrays import Array
    from transforms.encoders.audio import Audio
    from transforms.encoders.image import Image
    from transforms.encoders.scalars import Bytes, Float, Int, Label
    from transforms.encoders.text import Text

    return {
        "image": Image,
        "audio": Audio,
        "text": Text,
        "int": Int,
        "float": Float,
        "label": Label,
        "array": Array,
        "bytes": Bytes,
    }


# Columns whose values are paths to media files (resolved against the manifest's folder).
MEDIA_ENCODERS = ("image", "audio")


def make_encoders(columns: Mapping[str, Mapping[str, Any]]) -> Dict[str, Any]:
    registry = _registry()
    out: Dict[str, Any] = {}
    errors: List[str] = []
    for name, settings in columns.items():
        params = {k: v for k, v in settings.items() if k not in ("encoder", "column")}
        cls = registry[settings["encoder"]]
        accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
        unknown = sorted(set(params) - accepted)
        if unknown:
            errors.append(
                f"columns.{name}: unknown parameter(s) {', '.join(unknown)} for encoder "
                f"{settings['encoder']!r} (it takes: {', '.join(sorted(accepted))})"
            )
            continue
        try:
            out[name] = cls(**params)
        except (TypeError, ValueError) as err:
            errors.append(f"columns.{name}: {err}")
    if errors:
        raise ConfigError("invalid config:\n  " + "\n  ".join(errors))
    return out


def media_columns(columns: Mapping[str, Mapping[str, Any]]) -> List[str]:
    return [name for name, s in columns.items() if s["encoder"] in MEDIA_ENCODERS]
