"""Config ``columns`` -> encoder objects from ``transforms``.

``columns: {image: {encoder: image, reencode: jpeg, quality: 90}}`` becomes
``{"image": Image(reencode="jpeg", quality=90)}``; a parameter the encoder does not
take, or a bad value, is a ``ConfigError`` naming ``columns.<name>.<field>``.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Mapping

from tfrecord_io.pipelines.build.config import ENCODER_NAMES, ConfigError


def _registry() -> Dict[str, Any]:
    """The job config's encoder names (``config.ENCODER_NAMES``, lower case) -> classes
    of ``tfrecord_io.transforms.config.ENCODERS``, the one registry (keyed by class name). A job
    config takes the encoders of one value per row; the sequence encoders (``Steps``,
    ``AudioFrames``) are for ``spec_from_config``."""
    from tfrecord_io.transforms.config import ENCODERS

    by_name = {cls_name.lower(): cls for cls_name, cls in ENCODERS.items()}
    return {name: by_name[name] for name in ENCODER_NAMES}


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
