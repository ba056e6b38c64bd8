"""Feature specs: what an encoder writes, in a form that can be saved in
``tfrecord_io_info.json``, checked by validation and turned into a TensorFlow parse spec.

A :class:`FeatureSpec` names one Example key, its wire type (``bytes``, ``int`` or
``float``), its shape when fixed (``()`` for a scalar, ``(3, 4)`` for a fixed array,
``None`` for a variable number of values), whether every Example has it, and the
logical dtype a decoder gives back. TensorFlow is never imported here:
:func:`to_tf_feature_spec` takes the ``tf`` module from the caller.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from math import prod
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

KINDS = ("bytes", "int", "float")
_KIND_ALIASES = {
    "byte": "bytes",
    "bytes": "bytes",
    "str": "bytes",
    "string": "bytes",
    "int": "int",
    "int64": "int",
    "float": "float",
    "float32": "float",
}


def normalize_kind(kind: str) -> str:
    try:
        return _KIND_ALIASES[str(kind).lower()]
    except KeyError:
        raise ValueError(f"unknown feature type {kind!r}; use 'bytes', 'int' or 'float'") from None


@dataclass(frozen=True)
class FeatureSpec:
    """One Example key: wire type, fixed shape (or ``None``), required, logical dtype.

    ``sequence=True`` marks a SequenceExample feature list (one value per step);
    ``shape`` is then the shape of each step.
    """

    key: str
    kind: str
    shape: Optional[Tuple[int, ...]] = ()
    required: bool = True
    dtype: Optional[str] = None
    sequence: bool = False
    doc: str = ""

    def __post_init__(self):
        object.__setattr__(self, "kind", normalize_kind(self.kind))
        if self.shape is not None:
            object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))

    @property
    def length(self) -> Optional[int]:
        """Number of values the feature holds when its shape is fixed, else None."""
        return None if self.shape is None else prod(self.shape)

    def to_dict(self) -> Dict[str, Any]:
        """JSON-ready form (for ``tfrecord_io_info.json``)."""
        out = asdict(self)
        out["shape"] = None if self.shape is None else list(self.shape)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FeatureSpec:
        data = dict(data)
        if data.get("shape") is not None:
            data["shape"] = tuple(data["shape"])
        return cls(**data)


SpecLike = Union[Mapping[str, Any], Sequence[FeatureSpec], None]


def feature_specs(spec: SpecLike) -> List[FeatureSpec]:
    """Normalise any accepted spec to a list of :class:`FeatureSpec`.

    Accepts ``{column: encoder}`` (what ``EncodeExample`` takes), a list of
    ``FeatureSpec`` (or their dicts), or a ``tfrecord``-style description
    ``{"key": "int"}`` (every key required, any length).
    """
    if spec is None:
        return []
    if isinstance(spec, Mapping):
        out: List[FeatureSpec] = []
        for column, value in spec.items():
            if hasattr(value, "feature_specs"):
                out.extend(value.feature_specs(column))
            elif isinstance(value, FeatureSpec):
                out.append(value)
            elif isinstance(value, str):
                out.append(FeatureSpec(column, value, shape=None))
            else:
                raise TypeError(f"spec for {column!r}: expected an encoder or a type name, got {value!r}")
        return out
    return [s if isinstance(s, FeatureSpec) else FeatureSpec.from_dict(s) for s in spec]


def description(specs: Iterable[FeatureSpec]) -> Dict[str, str]:
    """``{key: 'byte'|'int'|'float'}`` as ``tfrecord_io.parse_example`` takes it
    (non-sequence features only)."""
    names = {"bytes": "byte", "int": "int", "float": "float"}
    return {s.key: names[s.kind] for s in specs if not s.sequence}


def tf_parse_spec(specs: Iterable[FeatureSpec]) -> Dict[str, Dict[str, Any]]:
    """A JSON-ready description of the TensorFlow parse spec.

    ``{key: {"type": "FixedLenFeature", "shape": [...], "dtype": "string"}}`` for
    required fixed-shape features; ``VarLenFeature`` for the others (optional or of
    variable length); ``FixedLenSequenceFeature`` / ``VarLenFeature`` for sequence
    features (keyed under ``"sequence": true``).
    """
    tf_dtypes = {"bytes": "string", "int": "int64", "float": "float32"}
    out: Dict[str, Dict[str, Any]] = {}
    for s in specs:
        fixed = s.shape is not None and s.required
        if s.sequence:
            kind = "FixedLenSequenceFeature" if s.shape is not None else "VarLenFeature"
        else:
            kind = "FixedLenFeature" if fixed else "VarLenFeature"
        entry: Dict[str, Any] = {"type": kind, "dtype": tf_dtypes[s.kind], "sequence": s.sequence}
        if kind != "VarLenFeature":
            entry["shape"] = list(s.shape or ())  # fixed: a shape is known
        out[s.key] = entry
    return out


def to_tf_feature_spec(specs: Iterable[FeatureSpec], tf: Any) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``(context_or_example_spec, sequence_spec)`` of ``tf.io`` feature objects.

    Pass the ``tensorflow`` module: this package never imports it. Use the first dict
    with ``tf.io.parse_single_example``; both with ``tf.io.parse_single_sequence_example``.
    """
    return tf_features(tf_parse_spec(specs), tf)


def tf_features(parse_spec: Mapping[str, Mapping[str, Any]], tf: Any) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """``tf_parse_spec``'s entries (plain data: as saved in JSON, or sent to another
    process) as ``tf.io`` feature objects, ``(context_or_example_spec, sequence_spec)``."""
    plain: Dict[str, Any] = {}
    seq: Dict[str, Any] = {}
    for key, entry in parse_spec.items():
        dtype = getattr(tf, entry["dtype"])
        if entry["type"] == "FixedLenFeature":
            obj = tf.io.FixedLenFeature(entry["shape"], dtype)
        elif entry["type"] == "FixedLenSequenceFeature":
            obj = tf.io.FixedLenSequenceFeature(entry["shape"], dtype)
        else:
            obj = tf.io.VarLenFeature(dtype)
        (seq if entry["sequence"] else plain)[key] = obj
    return plain, seq


__all__ = [
    "FeatureSpec",
    "KINDS",
    "description",
    "feature_specs",
    "normalize_kind",
    "tf_features",
    "tf_parse_spec",
    "to_tf_feature_spec",
]
