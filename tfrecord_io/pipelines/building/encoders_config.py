"""Config ``columns`` -> encoder objects from ``transforms``.

``columns: {image: {encoder: image, reencode: jpeg, quality: 90}}`` becomes
``{"image": Image(reencode="jpeg", quality=90)}``; a parameter the encoder does not
take, or a bad value, is a ``ConfigError`` naming ``columns.<name>.<field>``.

The ``{encoder: <name>}`` names are those of ``tfrecord_io.transforms.config``
(``ENCODERS_BY_NAME``), the one registry; ``spec_from_config`` takes the same form.
"""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Mapping, Union

from tfrecord_io.pipelines.building.build_config import MEDIA_ENCODERS, ColumnConfig, ConfigError, encoder_class

__all__ = ["MEDIA_ENCODERS", "encoder_class", "make_encoders", "media_columns"]


def _settings(column: Union[ColumnConfig, Mapping[str, Any]]) -> Mapping[str, Any]:
    return column.settings() if isinstance(column, ColumnConfig) else column


def make_encoders(columns: Mapping[str, Union[ColumnConfig, Mapping[str, Any]]]) -> Dict[str, Any]:
    """``{feature: column config}`` (``BuildConfig.columns``, or their mapping form) ->
    ``{feature: encoder}``; every bad column is named in one ``ConfigError``."""
    out: Dict[str, Any] = {}
    errors: List[str] = []
    for name, column in columns.items():
        settings = _settings(column)
        params = {k: v for k, v in settings.items() if k not in ("encoder", "column")}
        cls = encoder_class(settings["encoder"])
        accepted = set(inspect.signature(cls).parameters)
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


def media_columns(columns: Mapping[str, Union[ColumnConfig, Mapping[str, Any]]]) -> List[str]:
    """The features whose encoder reads media files (paths resolved against a base)."""
    return [name for name, c in columns.items() if _settings(c)["encoder"] in MEDIA_ENCODERS]
